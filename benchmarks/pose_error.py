"""Pose-error Monte Carlo: 10 000 draws × 6 axes along a 10-minute, 100 Hz session.

Times :func:`sensorbench.characterize.pose.gm_montecarlo.simulate_statistics` (draws and the
five validation statistics in one compiled pass, on one core) along 60 000 sample
times with a relocalization every 30 s, against the strongest reference numpy and
scipy give: every draw of a batch at once, the Gauss-Markov recursion as one
``scipy.signal.lfilter`` pass along time (the session is regularly sampled, so the
AR(1) coefficient is constant), the offsets as one normal draw per segment repeated
over it, and the same statistics as array reductions. Both get the same warm-up (one
untimed call on the first 100 samples); every round is timed in CPU seconds of this
process (single-threaded compute: other work on a shared machine does not count). The
10 000-draw time is the median of rounds of ours alone (target ≤ 10 s on one core);
the speed-up is the median of per-round ratios of ours and the reference alternating
on the same 200 draws (the reference takes ~25 ms per draw). Nothing is scaled: quick
mode runs 1 000 draws (100 for the ratio) and reports them as such.

Allan deviation: :func:`~sensorbench.characterize.pose.allan.allan_deviation` of one
such session (one 60 000-sample piece × 6 axes, its resampling onto the uniform grid
included) against ``allantools.oadev`` of each axis at the same averaging factors, in
interleaved rounds (the figure is the speed ratio, target ≥ 1: one implementation as
fast as the library's). Left out, with a note, when allantools is not installed (it is
a test dependency, not a core one).
"""

from __future__ import annotations

import math

import numpy as np

from sensorbench.benchmarks import BenchResult, interleave
from sensorbench.characterize.pose.allan import allan_deviation
from sensorbench.characterize.pose.gm_montecarlo import growth_masks, simulate_statistics
from sensorbench.characterize.pose.series import ErrorSeries

AREA = "pose_error"
N_DRAWS = 10_000
DURATION_S = 600.0
RATE_HZ = 100.0
PARAMS = np.array(
    [
        [0.010, 0.030, 2.0, 0.005],
        [0.010, 0.030, 2.0, 0.005],
        [0.006, 0.015, 3.0, 0.003],
        [0.002, 0.006, 3.0, 0.001],
        [0.002, 0.006, 3.0, 0.001],
        [0.004, 0.010, 2.0, 0.002],
    ]
)


def _session() -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(int(DURATION_S * RATE_HZ)) / RATE_HZ
    reloc = np.zeros(t.size, dtype=bool)
    reloc[:: int(30 * RATE_HZ)] = True
    return t, reloc


def _numpy_reference(t: np.ndarray, reloc: np.ndarray, n_draws: int, seed: int) -> None:
    """Every draw of a batch at once along time: lfilter for the Gauss-Markov part, one
    offset per segment, the statistics as reductions (a regularly sampled ``t``)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(seed)
    early, late = growth_masks(t, reloc)
    dt = float(np.median(np.diff(t)))
    seg = np.cumsum(reloc) - 1
    n_seg = int(seg[-1]) + 1
    batch = max(1, 4_000_000 // t.size)  # draws per batch: ~32 MB per array
    for lo in range(0, n_draws, batch):
        b = min(batch, n_draws - lo)
        for sb, sg, tau, sv in PARAMS:
            phi = math.exp(-dt / tau)
            z = rng.standard_normal((b, t.size))
            z[:, 0] /= math.sqrt(1.0 - phi * phi)  # the stationary start: g[0] = sg z[0]
            g = lfilter([sg * math.sqrt(1.0 - phi * phi)], [1.0, -phi], z, axis=1)
            x = g + sb * rng.standard_normal((b, n_seg))[:, seg]
            x += sv * rng.standard_normal((b, t.size))
            mean = x.mean(axis=1, keepdims=True)
            xc = x - mean
            _ = (
                np.sqrt(np.mean(x * x, axis=1)),
                mean[:, 0],
                np.max(np.abs(x), axis=1),
                np.sum(xc[:, 1:] * xc[:, :-1], axis=1) / np.sum(xc * xc, axis=1),
                np.sqrt(np.mean(x[:, late] ** 2, axis=1) / np.mean(x[:, early] ** 2, axis=1)),
            )


def _allan_versus_allantools(quick: bool) -> list[BenchResult]:
    """Speed of our pooled ADEV relative to allantools' oadev on one session × 6 axes."""
    try:
        import allantools
    except ImportError:
        return []
    t, _ = _session()
    e = np.random.default_rng(3).normal(size=(t.size, 6))
    series = [ErrorSeries(t, e, np.zeros(t.size, bool), name="bench")]
    taus = allan_deviation(series)[0]

    def reference() -> None:
        for i in range(6):
            allantools.oadev(e[:, i], rate=RATE_HZ, data_type="freq", taus=taus)

    versus = interleave(lambda: allan_deviation(series), reference, rounds=5 if quick else 15)
    return [
        BenchResult.from_rounds(
            AREA,
            "allan_deviation_speed_vs_allantools",
            versus.rounds(lambda o, r: r / o),
            "x",
            target=1.0,
            detail=f"{t.size} samples × 6 axes, {taus.size} averaging times: allantools "
            f"{versus.reference_median_s * 1e3:.1f} ms, ours {versus.ours_median_s * 1e3:.1f} "
            "ms (medians, resampling included)",
        )
    ]


def run(quick: bool) -> list[BenchResult]:
    """Monte Carlo time for 10 000 × 6 draws (1 000 in quick mode), and its ratio to the
    vectorised numpy reference, both sides on the same draws; Allan deviation against
    allantools."""
    t, reloc = _session()
    draws = 1_000 if quick else N_DRAWS
    ratio_draws = 100 if quick else 200  # the reference takes ~25 ms per draw
    warmup = (
        lambda: simulate_statistics(PARAMS, t[:100], reloc[:100], 2, seed=0),
        lambda: _numpy_reference(t[:100], reloc[:100], 2, seed=0),
    )
    alone = interleave(
        lambda: simulate_statistics(PARAMS, t, reloc, draws, seed=1),
        rounds=3 if quick else 5,
        warmup=warmup[:1],
    )
    versus = interleave(
        lambda: simulate_statistics(PARAMS, t, reloc, ratio_draws, seed=1),
        lambda: _numpy_reference(t, reloc, ratio_draws, seed=2),
        rounds=5,
        warmup=warmup,
    )
    return [
        BenchResult.from_rounds(
            AREA,
            f"monte_carlo_{draws // 1000}k_draws_6_axes_10min_100hz",
            alone.rounds(lambda o, _: o),
            "s",
            target=10.0 * draws / N_DRAWS,
            higher_is_better=False,
            detail=f"{t.size} samples × 6 axes × {draws} draws, statistics included"
            + ("" if draws == N_DRAWS else f" (target scaled from 10 s for {N_DRAWS} draws)"),
        ),
        BenchResult.from_rounds(
            AREA,
            "speedup_vs_vectorised_numpy",
            versus.rounds(lambda o, r: r / o),
            "x",
            detail=f"both on the same {ratio_draws} draws × 6 axes per round: numpy/scipy "
            f"reference (lfilter along time, a batch of draws at once) "
            f"{versus.reference_median_s:.2f} s, ours {versus.ours_median_s:.3f} s (medians)",
        ),
        *_allan_versus_allantools(quick),
    ]
