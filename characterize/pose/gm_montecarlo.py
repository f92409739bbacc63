"""Monte Carlo of the pose-error model along real timestamps, all draws at once.

Simulates ``e = b_s + g + v`` (:mod:`error_model`) for B draws × A axes along sample
times ``t_s`` (s, any spacing; spacings taken to 1 ns) and relocalization flags, with
the exact discretization of g (stationary start), reduced by :mod:`gm_kernel` to the
statistics :data:`STAT_NAMES` (the same kernel computes them on the real error).
The same seed, times and parameters give the same draws whichever function is asked.
Statistics: docs/POSE_ERROR.md ("Monte Carlo")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.special import ndtr

from sensorbench.characterize.pose import gm_kernel
from sensorbench.characterize.pose.whiten import filter_gains

STAT_NAMES: tuple[str, ...] = ("rms", "mean", "max_abs", "lag1", "growth", "nis", "kurtosis")
_MIN_SEGMENT_SAMPLES = 8


def draw_params(
    params: np.ndarray, cov_log: np.ndarray, n_draws: int, rng: np.random.Generator,
    sigma_b_quantile: Sequence[Callable[[np.ndarray], np.ndarray]] | None = None,
) -> np.ndarray:
    """``(B, A, 4)`` parameters drawn from ``exp(N(ln params, cov_log))``.

    ``params`` is ``(A, 4)``, ``cov_log`` ``(A, 4, 4)`` (zeros = no uncertainty).
    ``sigma_b_quantile`` (one function per axis, probabilities -> sigma_b) replaces
    sigma_b's log-normal marginal (e.g. by its Q-profile, which may give 0): sigma_b is
    the quantile at ``Φ`` of its standardised log-normal deviate (a Gaussian copula, so
    its correlation with the other parameters is kept), or at an independent uniform
    when its variance in ``cov_log`` is 0."""
    a = params.shape[0]
    out = np.empty((n_draws, a, 4))
    z = rng.standard_normal((n_draws, a, 4))
    for i in range(a):
        cov = np.nan_to_num(cov_log[i])
        ev, vec = np.linalg.eigh(0.5 * (cov + cov.T))
        root = vec * np.sqrt(np.clip(ev, 0.0, None))
        dev = z[:, i, :] @ root.T
        out[:, i, :] = np.exp(np.log(params[i])[None, :] + dev)
        if sigma_b_quantile is not None:
            sd = math.sqrt(max(cov[0, 0], 0.0))
            u = ndtr(dev[:, 0] / sd if sd > 0 else z[:, i, 0])
            out[:, i, 0] = sigma_b_quantile[i](u)
    return out


def _prepare(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    session_sd: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Lane parameters ``(5, B·A)`` (lane = draw·A + axis), spacings, flags, axes."""
    p = np.asarray(params, dtype=np.float64)
    if p.ndim == 2:
        p = p[None]
    a = p.shape[1]
    p = np.broadcast_to(p, (n_draws, a, 4))
    sd = np.zeros(a) if session_sd is None else np.asarray(session_sd, dtype=np.float64)
    p5 = np.concatenate([p, np.broadcast_to(sd[None, :, None], (n_draws, a, 1))], axis=2)
    lanes = np.ascontiguousarray(p5.reshape(-1, 5).T)
    t_s = np.asarray(t_s, dtype=np.float64)
    dt = np.empty(t_s.size)
    dt[0] = np.inf
    dt[1:] = np.round(np.diff(t_s) * 1e9) * 1e-9
    flags = np.asarray(reloc, dtype=bool).copy()
    flags[0] = True
    return lanes, dt, flags, a


def _gains(
    dt: np.ndarray, flags: np.ndarray, whiten: np.ndarray | None, a: int,
    wrong: np.ndarray | None = None,
) -> np.ndarray:
    """``(4, N, A)`` whitening gains of the model ``whiten`` (A, 4), or ``(4, 0, A)``.

    ``wrong`` (N,) bool: resets of named wrong relocalizations (their offset unknown
    to the filter, :func:`whiten.filter_gains`)."""
    if whiten is None:
        return np.zeros((4, 0, a))
    w = np.asarray(whiten, float)
    return np.ascontiguousarray(np.stack(filter_gains(dt, flags, w, wrong)))


def _given(n: int, a: int, wrong: np.ndarray | None, shift: np.ndarray | None) -> tuple:
    """``(given (N,) bool, shift (N, A))`` for the kernel: no given offsets when None."""
    if wrong is None or shift is None:
        return np.zeros(n, bool), np.zeros((n, a))
    return np.asarray(wrong, bool), np.ascontiguousarray(shift, dtype=np.float64)


def _simulate(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    seed: int | np.random.Generator, store: bool, whiten: np.ndarray | None = None,
    session_sd: np.ndarray | None = None, streams: np.ndarray | None = None,
    wrong: np.ndarray | None = None, shift: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray | None, int]:
    """Run the kernel block by block: statistics ``{stat: (B·A,)}``, series, axes."""
    lanes, dt, flags, a = _prepare(params, t_s, reloc, n_draws, session_sd)
    early, late = growth_masks(t_s, flags)
    m = lanes.shape[1]
    given, d = _given(dt.size, a, wrong, shift)
    gains = _gains(dt, flags, whiten, a, given)
    lane_axis = np.arange(m) % a
    if streams is None:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        top = np.iinfo(np.uint64).max
        state = np.asarray(rng.integers(top, size=m, dtype=np.uint64, endpoint=True))
    else:
        state = np.array(streams, dtype=np.uint64).reshape(m)
    acc = np.zeros((gm_kernel.N_ACC, m))
    series = np.empty((dt.size if store else 0, m))
    for j0 in range(0, m, gm_kernel.BLOCK_LANES):
        j1 = min(m, j0 + gm_kernel.BLOCK_LANES)
        block_acc = np.zeros((gm_kernel.N_ACC, j1 - j0))
        block_series = np.empty((series.shape[0], j1 - j0))
        gm_kernel.simulate_block(
            np.ascontiguousarray(lanes[:, j0:j1]), dt, flags, early, late, state[j0:j1], block_acc,
            block_series, gains, lane_axis[j0:j1], given, d,
        )
        acc[:, j0:j1] = block_acc
        series[:, j0:j1] = block_series
    return _finish(acc, dt.size, early, late, whiten is not None), (series if store else None), a


def simulate_errors(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    seed: int | np.random.Generator, session_sd: np.ndarray | None = None,
    streams: np.ndarray | None = None,
) -> np.ndarray:
    """``(B, N, A)`` simulated error series (materialised; use for small B·N).

    ``params``: ``(A, 4)`` or ``(B, A, 4)`` (one set per draw), columns sigma_b, sigma,
    tau_s, sigma_v (m or rad, s); ``session_sd`` ``(A,)``: sd of an offset constant over
    the series; ``streams`` ``(B, A)`` uint64: each lane's random stream instead of
    ``seed``'s (equal streams, equal normals)."""
    _, series, a = _simulate(
        params, t_s, reloc, n_draws, seed, True, session_sd=session_sd, streams=streams
    )
    return np.ascontiguousarray(series.reshape(-1, n_draws, a).transpose(1, 0, 2))


def growth_masks(t_s: np.ndarray, reloc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(early, late)`` bool masks: first / last quarter (in time) of every segment."""
    t_s = np.asarray(t_s, dtype=np.float64)
    reloc = np.asarray(reloc, dtype=bool).copy()
    reloc[0] = True
    seg = np.cumsum(reloc) - 1
    counts = np.bincount(seg)
    t0 = t_s[reloc]
    t_end = np.maximum.reduceat(t_s, np.flatnonzero(reloc))
    dur = t_end - t0
    frac = (t_s - t0[seg]) / np.where(dur > 0, dur, np.inf)[seg]
    ok = (counts >= _MIN_SEGMENT_SAMPLES)[seg] & (dur > 0)[seg]
    return ok & (frac < 0.25), ok & (frac >= 0.75)


def _finish(acc: np.ndarray, n: int, early: np.ndarray, late: np.ndarray, white: bool) -> dict:
    """``{stat: (lanes,)}`` from the kernel's accumulators over ``n`` samples."""
    k = gm_kernel
    s1, s2 = acc[k.ACC_SUM], acc[k.ACC_SUMSQ]
    mean = s1 / n
    var = s2 / n - mean**2
    lag = (
        acc[k.ACC_LAG]
        - mean * (s1 - acc[k.ACC_FIRST])
        - mean * (s1 - acc[k.ACC_LAST])
        + (n - 1) * mean**2
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        lag1 = lag / (n * var)
        growth = np.sqrt((acc[k.ACC_LATE] / late.sum()) / (acc[k.ACC_EARLY] / early.sum()))
        nis = acc[k.ACC_Z2] / n if white else np.full(acc.shape[1], np.nan)
        kurtosis = (acc[k.ACC_Z4] / n) / nis**2
    return {
        "rms": np.sqrt(s2 / n),
        "mean": mean,
        "max_abs": acc[k.ACC_MAXABS].copy(),
        "lag1": lag1,
        "growth": growth,
        "nis": nis,
        "kurtosis": kurtosis,
    }


def error_statistics(
    t_s: np.ndarray, reloc: np.ndarray, error: np.ndarray, whiten: np.ndarray | None = None,
    wrong: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Statistics of error series ``(N, L)`` (e.g. one real error, L = axes) -> ``{stat: (L,)}``.

    ``whiten``: ``(A, 4)`` model whose standardized innovations give ``nis`` and
    ``kurtosis`` (column l is whitened by axis ``l % A``), else those are nan;
    ``wrong`` (N,) bool: named wrong relocalizations, whose offsets it does not know."""
    e = np.ascontiguousarray(error, dtype=np.float64)
    early, late = growth_masks(t_s, reloc)
    acc = np.zeros((gm_kernel.N_ACC, e.shape[1]))
    gm_kernel.accumulate_series(e, early, late, acc)
    if whiten is not None:
        _, dt, flags, a = _prepare(whiten, t_s, reloc, 1)
        lane_axis = np.arange(e.shape[1]) % a
        gains = _gains(dt, flags, whiten, a, wrong)
        gm_kernel.accumulate_innovations(e, flags, gains, lane_axis, acc)
    return _finish(acc, e.shape[0], early, late, whiten is not None)


def simulate_statistics(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    seed: int | np.random.Generator, whiten: np.ndarray | None = None,
    session_sd: np.ndarray | None = None, wrong: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """``{stat: (B, A)}`` of B simulated draws (:func:`simulate_errors`), unstored;
    ``wrong`` (N,) and ``shift`` (N, A): named wrong relocalizations' jumps, given, not drawn."""
    stats, _, a = _simulate(
        params, t_s, reloc, n_draws, seed, False, whiten, session_sd, None, wrong, shift
    )
    return {k: v.reshape(n_draws, a) for k, v in stats.items()}
