"""Honesty of the pod fit and the split filters on drives of a foreign world
(``tests/foreign/pods_world.py``), brought in as a user's files are: CSV pods and TUM
mocap through ``sensorbench import``, then ``fit pods``, ``fit noise -o`` and
``replay`` through the CLI.

Per seed (:data:`SEEDS`, 12): the pods and noise are fitted on that seed's fixed drives
(forward, sideways, spin, square) and the held-out drives (arcs, crab, and the forward
and sideways drives recorded again with fresh noise) are replayed against mocap, each in
:data:`TAKES` realisations with fresh noise (the first also written with ``-o``). Each
seed's figures are computed once and kept by content (tests/shared_run_util.py), by the chunk tests
(:data:`CHUNKS`, each < 300 s on 2 busy cores); the pooled tests read the cache and
compute what is missing.

Tolerances (the seed is the independent unit: one seed's fit, hence its calibration
error, is shared by all its replays):

- **Coverage** (truth inside the stated 2σ) of a drive and axis: the mean over seeds of
  each seed's mean over its takes, with its standard error from the spread over the 12
  seeds. One replay of this odometry holds only 2–4 effective samples (its error is a
  calibration draw and a random walk: the model's N_eff below, and the scatter of the
  mean NEES over seeds agree), so a seed's coverage is near 0 or 1 and one take per seed
  left the pooled figure with a 2–8 % standard error; with 4 takes it is 0.5–2.5 %
  (measured). The target is 90–98 %; the test fails when the pooled figure's 95 %
  interval (± 1.96 s.e.) lies wholly outside it, which an honest filter does in at most
  2.5 % of cases, and which the issue's figures (21–76 %) and the along-track figure
  before the stamp jitter and the slip law were modelled (forward x 74.6 ± 8.3 % over
  one take) fail by far.
- **NEES**: per seed (first take), drive and axis, the replay's mean NEES against its own
  95 % band, whose effective size comes from the filters' error model
  (:mod:`~sensorbench.fusion.nees_samples`); a consistent filter is outside with 5 % per
  case, so ≥ 4 of 12 seeds outside has probability 0.2 % (binomial).
- **Gate and monitor**: the share of updates rejected and of frames flagged degraded,
  pooled over every held-out replay, against the issue's bars (2 % and 1 %).
- **Fit calibration**: per pod parameter, |fit − truth| ≤ 2 stated σ in ≥ 90 % of seeds;
  of 12 seeds at 95.4 %, ≤ 9 inside has probability 1.7 % (binomial), so ≥ 10 are
  required.

Targets the code misses are ``xfail(strict=True)`` with the measured figure (docs/PODS.md
"Measured figures").
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pods_honesty_util as honesty
import pytest
from foreign.pods_world import FIT_DRIVES, TEST_DRIVES, draw_rig, write_drive
from pods_cli_util import AXES, fit, import_drive, replay

from sensorbench.fusion.filter_noise import load_noise_model

SEEDS = tuple(range(12))
CHUNKS = tuple(SEEDS[i : i + 2] for i in range(0, len(SEEDS), 2))  # 6 chunks of 2 seeds
# a pooled test scheduled before the chunk tests computes (or waits for) every seed: up to
# the chunks' time together; each chunk test keeps the suite's 300 s bound (marked below)
pytestmark = pytest.mark.timeout(1800)
TAKES = 4
"""Realisations of each held-out drive per seed (fresh scrub, timing and mocap noise)."""
PARAMS = (
    ("distance_per_tick_m", "sigma_distance_per_tick", "distance_per_tick"),
    ("rolling_angle_rad", "sigma_rolling_angle", "angle"),
    ("lever_arm_m", "sigma_lever_arm", "lever"),
)



def _session(tmp: Path, name: str, seed: int, take: int = 0) -> Path:
    """Drive ``name`` (take ``take``) of ``seed`` brought in through ``sensorbench import``."""
    return import_drive(write_drive(tmp, name, seed, take), tmp, f"{name}_{take}")


def run_seed(seed: int, tmp: Path) -> dict[str, Any]:
    """One seed's pipeline through the CLI in a fresh ``tmp``; its figures (JSON-ready)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pods, noise, doc = fit([_session(tmp, name, seed) for name in FIT_DRIVES], tmp, 2000)
    rig = draw_rig(seed)
    truth = {
        "distance_per_tick": rig.distance_per_tick,
        "angle": rig.angle,
        "lever": rig.lever,
    }
    z = {
        key: [(p[key] - truth[t][i]) / p[sig] for i, p in enumerate(doc["pods"])]
        for key, sig, t in PARAMS
    }
    load_noise_model(noise)
    replays = {
        name: [
            replay(
                _session(tmp, name, seed, take),
                pods,
                noise,
                tmp / f"est_{name}.h5" if take == 0 else None,
            )
            for take in range(TAKES)
        ]
        for name in TEST_DRIVES
    }
    return {"z": z, "replay": replays}


root = honesty.shared_root("pods_foreign")


def seed_result(root: Path, seed: int) -> dict[str, Any]:
    """The seed's figures, computed once (tests/pods_honesty_util.py)."""
    return honesty.seed_result(root, seed, run_seed, __file__)


@pytest.fixture
def results(root: Path) -> list[dict[str, Any]]:
    return [seed_result(root, s) for s in SEEDS]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("chunk", range(len(CHUNKS)))
def test_seed_chunk_runs_and_writes_estimates_with_variances(root: Path, chunk: int) -> None:
    for seed in CHUNKS[chunk]:
        r = seed_result(root, seed)
        for name in TEST_DRIVES:
            assert r["replay"][name][0]["variances_finite_positive"], (seed, name)


def coverage(results: list[dict[str, Any]], drive: str, axis: str) -> tuple[float, float]:
    """Pooled 2σ coverage and its standard error over seeds (each seed: mean of its takes)."""
    per_seed = np.array([np.mean([t[axis]["in2"] for t in r["replay"][drive]]) for r in results])
    return float(per_seed.mean()), float(per_seed.std(ddof=1) / np.sqrt(per_seed.size))


def nees_outside(results: list[dict[str, Any]], drive: str, axis: str) -> int:
    rows = [r["replay"][drive][0][axis] for r in results]
    return sum(not (row["band"][0] <= row["nees"] <= row["band"][1]) for row in rows)


def fit_inside(results: list[dict[str, Any]], key: str, pod: int) -> int:
    return sum(abs(r["z"][key][pod]) <= 2.0 for r in results)


def pooled_alarms(results: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Over every held-out replay: the share of updates the gate rejected (x, y, θ) and the
    share of frames the monitor flagged degraded, each pooled over seeds with its standard
    error from the spread of the seeds' own shares."""
    rej, upd, deg, frames = (np.zeros(len(results)) for _ in range(4))
    for i, r in enumerate(results):
        for takes in r["replay"].values():
            for t in takes:
                rej[i] += sum(t[a]["rejected"] for a in AXES)
                upd[i] += sum(t[a]["updates"] for a in AXES)
                deg[i] += t["degraded"] * t["frames"]
                frames[i] += t["frames"]

    def pooled(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
        share = num / den
        return float(num.sum() / den.sum()), float(share.std(ddof=1) / np.sqrt(share.size))

    return {"rejected": pooled(rej, upd), "degraded": pooled(deg, frames)}


# measured over seeds 0-11: the targets the code misses
MISSED_COVERAGE: dict[tuple[str, str], str] = {}
MISSED_COVERAGE_POINT: dict[tuple[str, str], str] = {}
MISSED_NEES: dict[tuple[str, str], str] = {}


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(TEST_DRIVES, MISSED_COVERAGE))
def test_truth_inside_the_stated_two_sigma(results, drive: str, axis: str) -> None:
    c, se = coverage(results, drive, axis)
    assert c + 1.96 * se >= 0.90 and c - 1.96 * se <= 0.98, (drive, axis, c, se)


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(TEST_DRIVES, MISSED_COVERAGE_POINT))
def test_pooled_coverage_is_inside_the_target_band(results, drive: str, axis: str) -> None:
    """The issue's target read literally: the pooled figure itself inside 90-98 %. Unlike
    the interval test above, a consistent filter fails this by chance in some of the 12
    cases (the pooled figure's s.e. is 0.5-2.5 %), so a miss here is reported as the
    measured figure, not excused by its interval."""
    c, _ = coverage(results, drive, axis)
    assert 0.90 <= c <= 0.98, (drive, axis, c)


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(TEST_DRIVES, MISSED_NEES))
def test_mean_nees_inside_its_band(results, drive: str, axis: str) -> None:
    assert nees_outside(results, drive, axis) <= 3


@pytest.mark.slow
def test_clean_drives_are_rarely_rejected_or_flagged(results) -> None:
    """The issue's bar for the gate and the monitor on clean foreign drives: at most 2 % of
    the updates rejected at the 1 % gate and at most 1 % of the time degraded, pooled over
    every held-out replay (12 seeds × 4 drives × 4 takes, ~3·10⁶ updates, ~1.2·10⁶
    frames). Both bars are the issue's, not statistical bands; what makes the test fair
    is the spread: measured 1.21 ± 0.015 % rejected and 0.60 ± 0.025 % degraded (± the
    standard error over seeds), so the figures lie > 50 and > 15 standard errors below
    the bars and chance alone does not fail a filter this honest, while the issue's own
    figures (6.7 % rejected, 4.7 % degraded) fail by far. Before rejected steps were kept
    in the odometry the drives gave 1.23 % and 0.85 % (arcs and crab 1.1–1.4 % degraded)."""
    alarms = pooled_alarms(results)
    assert alarms["rejected"][0] <= 0.02, alarms
    assert alarms["degraded"][0] <= 0.01, alarms


@pytest.mark.slow
@pytest.mark.parametrize("pod", range(3))
@pytest.mark.parametrize("key", [p[0] for p in PARAMS])
def test_fitted_pod_parameters_within_two_sigma_of_truth(results, key: str, pod: int) -> None:
    assert fit_inside(results, key, pod) >= 10
