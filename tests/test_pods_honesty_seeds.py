"""Issue #19's bar over ten seeds: per seed, the pod geometry, the wheels' slip law and the
filter noise fitted on the four fixed drives (as the demo does), then every simulator drive
replayed against truth — fresh sessions, not the ones fitted: the noise fit sets its level
and its balance across drives on the fitted sessions' own gated NIS, so replaying those
would grade the fit on its own data. Criteria (not loosened; the measured numbers are in
docs/PODS.md):

- mean gated calibrated NIS per axis inside its 95 % band in ≥ 90 % of (run, axis) pairs
  (150 pairs: a consistent filter puts fewer than 135 inside with probability 0.4 %,
  binomial, more with the pairs of one seed sharing its fit).
  The band is the prediction band of a fresh session's mean: the session's own noise
  (k over the clipped NIS's autocorrelation time, 1.3–2.4 here) and the fit's level
  error (``nis_se``, 0.019–0.020: the noise fit balances the drives on its sessions' own
  means, so their noise, as large as a fresh session's, is in every later replay; with
  the session's noise alone 88.7 % of the pairs are inside over seeds 30–59, with both
  98.2 %);
- truth inside the stated 2σ in 90–98 % of the samples (issue 35's target), per drive and
  axis pooled over seeds, on the repaired replay and on live's path (``repair=False``:
  bounces left in and widened, docs/PODS.md "A lifted or slipping wheel"); the misses are
  strict xfails with their figures;
- rejections at most twice the gate's nominal rate, per drive pooled over seeds;
- pods_faults (bouncing and slipping wheels) is flagged by the monitor.

The coverage of a drive over ten seeds is a coarse measure: a drive's error is dominated by
the calibration each seed draws, so its coverage is near 100 % or far below on each seed
(square x: 44-100 % per seed; docs/PODS.md, "Measured figures"). The pod fit's own
honesty, which sets it, is tested over 50 seeds in ``test_pods_fit.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pods_honesty_util as honesty
import pytest
from pods_sim_util import DRIVES, simulate

from sensorbench.characterize.pods.geometry_fit import fit_pods
from sensorbench.characterize.pods.noise_fit import fit_noise
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.fusion.pod_drive import load_drive

SCENARIOS = (*DRIVES, "figure8", "pods_faults")
SEEDS = tuple(range(30, 40))
REPLAY_SEED = 5000
"""Offset of the replayed sessions' seeds from the fitted ones'."""
AXES = ("x", "y", "theta")
# the first test computes the module's fixture (10 seeds: fits and 12 replays each), about
# 2 min alone; beside a second copy of the suite on 2 cores that passed the suite's 300 s
pytestmark = pytest.mark.timeout(1200)


def seed_rows(tmp: Path, seed: int) -> list[dict]:
    """One row per (drive, axis): NIS mean and band, 2σ hits, rejections, degraded."""
    fitted = {n: simulate(tmp, n, 10 * seed + i) for i, n in enumerate(DRIVES)}
    paths = {n: simulate(tmp, n, 10 * seed + i + REPLAY_SEED) for i, n in enumerate(SCENARIOS)}
    geometry = fit_pods([load_drive(fitted[n]) for n in DRIVES]).geometry()
    noise = fit_noise([fitted[n] for n in DRIVES], geometry).noise
    rows = []
    for name, path in paths.items():
        rp = replay_session(path, geometry, noise, reference="truth")
        live = replay_session(path, geometry, noise, reference="truth", repair=False)
        doc = rp.summary()
        degraded = float(np.mean(rp.degraded))
        for a in AXES:
            n, c, lc = doc["nis"][a], rp.consistency[a], live.consistency[a]
            rows.append(
                {
                    "seed": seed,
                    "drive": name,
                    "axis": a,
                    "nis_ok": n["mean_inside_band"],
                    "nis": n["mean"],
                    "k": n["k"],
                    "rejected": n["rejected"],
                    "nominal": n["nominal_rejection_rate"],
                    "n": c.n,
                    "in2": c.coverage[1] * c.n,
                    "live_n": lc.n,
                    "live_in2": lc.coverage[1] * lc.n,
                    "degraded": degraded,
                }
            )
    return rows


def summarise(rows: list[dict]) -> dict:
    """Per drive: NIS-in-band fraction, pooled rejection rate, time degraded."""
    out = {}
    for d in SCENARIOS:
        r = [x for x in rows if x["drive"] == d]
        out[d] = {
            "nis_in_band": float(np.mean([x["nis_ok"] for x in r])),
            "rejection_rate": float(sum(x["rejected"] for x in r) / sum(x["k"] for x in r)),
            "nominal": r[0]["nominal"],
            "degraded": float(np.mean([x["degraded"] for x in r])),
        }
    return out


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("honesty")
    return [row for s in SEEDS for row in seed_rows(tmp, s)]


CLEAN = [d for d in SCENARIOS if d != "pods_faults"]


@pytest.mark.slow
def test_the_gate_rejects_its_nominal_share_and_the_monitor_flags_faulty_wheels(rows) -> None:
    summary = summarise(rows)
    assert summary["pods_faults"]["degraded"] > 0
    for d in CLEAN:
        assert summary[d]["rejection_rate"] <= 2 * summary[d]["nominal"], (d, summary[d])


# measured over seeds 30-39 (docs/PODS.md, "Measured figures"): the heading of the drives
# that turn in place or not at all is stated too wide
MISSED_COVERAGE: dict[tuple[str, str], str] = {
    ("forward", "theta"): "forward theta: 98.1 % over seeds 30-39",
    ("spin", "theta"): "spin theta: 99.1 % over seeds 30-39",
}


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(CLEAN, MISSED_COVERAGE))
def test_stated_sigma_covers_the_truth(rows, drive: str, axis: str) -> None:
    r = [x for x in rows if x["drive"] == drive and x["axis"] == axis]
    coverage = sum(x["in2"] for x in r) / sum(x["n"] for x in r)
    assert 0.90 <= coverage <= 0.98, (drive, axis, coverage)


# live's path over seeds 30-39 (docs/PODS.md, "Measured figures"): the bounces' errors
# summed as of one sign, though of either sign from bounce to bounce; forward and spin θ
# as wide on the repaired path (MISSED_COVERAGE)
LIVE_WIDE = {  # x, y, θ (%), None: inside 90-98 %
    "forward": (98.2, 99.1, 98.2),
    "spin": (98.8, 98.2, 99.1),
    "pods_faults": (98.1, 98.9, 99.8),
}
LIVE_MISSED = {
    (d, a): f"{d} {a}: {v} % over seeds 30-39"
    for d, figures in LIVE_WIDE.items()
    for a, v in zip(AXES, figures, strict=True)
    if v is not None
}


def live_coverage(rows: list[dict], drive: str, axis: str) -> float:
    """Truth inside live's stated 2σ, pooled over the seeds' samples."""
    r = [x for x in rows if x["drive"] == drive and x["axis"] == axis]
    return sum(x["live_in2"] for x in r) / sum(x["live_n"] for x in r)


@pytest.mark.slow
@pytest.mark.parametrize("drive", SCENARIOS)
def test_live_path_is_not_overconfident(rows, drive: str) -> None:
    # the faults' bounces too (unwidened: pods_faults x / y / θ 33 / 31 / 37 %)
    for a in AXES:
        assert live_coverage(rows, drive, a) >= 0.90, (drive, a, live_coverage(rows, drive, a))


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(SCENARIOS, LIVE_MISSED))
def test_live_path_states_sigma_covering_the_truth(rows, drive: str, axis: str) -> None:
    coverage = live_coverage(rows, drive, axis)
    assert 0.90 <= coverage <= 0.98, (drive, axis, coverage)


@pytest.mark.slow
def test_mean_nis_is_inside_its_band_in_nine_runs_out_of_ten(rows) -> None:
    in_band = np.mean([x["nis_ok"] for x in rows if x["drive"] in CLEAN])
    assert in_band >= 0.9, summarise(rows)
