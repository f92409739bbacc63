"""Honesty of the pod fit and the split filters over a *family* of robots and motions
(``tests/foreign/pods_family.py``): per seed a robot drawn from wide ranges (pod angles,
radii, CPR, frame rate, slip laws with speed- and turn-dependent creep and wheel lift),
fitted through the CLI (``fit pods``, ``fit noise``) on its calibration drives (forward,
sideways, spin, square at drawn speeds), then held-out drives of other kinds (slalom,
strafe-while-turning, arcs, fast ramps, fast spin) replayed against mocap.

Each seed's figures are computed once and kept by content (tests/shared_run_util.py);
the chunk tests (:data:`CHUNKS`, each a few minutes on 2 busy cores) fill it, the pooled
tests read it.

- **Coverage** of a drive and axis (truth inside the stated 2σ), pooled over seeds (not
  over axes): the mean over seeds with its standard error from their spread. One replay
  holds 2–4 effective samples (docs/PODS.md), so the seed is the unit. Target 90–98 %:
  the test fails when the pooled figure's 95 % interval lies wholly outside it.
- **The check can fail**: every replay whose mean NEES is ≥ 3 on an axis is flagged
  overconfident there, for the fitted model and for an overconfident one (the fitted
  model's every variance, slip law and calibration covariance divided by
  :data:`SHRINK`), which must be flagged on most drive-axes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pods_honesty_util as honesty
import pytest
from foreign.pods_family import FIT_DRIVES, TEST_DRIVES, draw_robot, write_drive
from pods_cli_util import AXES, fit, import_drive, replay

SEEDS = tuple(range(12))
CHUNKS = tuple(SEEDS[i : i + 2] for i in range(0, len(SEEDS), 2))  # 6 chunks of 2 seeds
# a pooled test scheduled before the chunk tests computes (or waits for) every seed: up to
# the chunks' time together; each chunk test keeps the suite's 300 s bound (marked below)
pytestmark = pytest.mark.timeout(1800)
SHRINK = 9.0
"""Variance factor of the overconfident model (its σ 3× too small)."""


def _shrunk(src: Path, dst: Path) -> Path:
    """A copy of model file ``src`` with every variance-like number divided by SHRINK: the
    noise file's q and stamp_var, the pod file's slip law (every term), creep variances
    and row covariance."""
    text = src.read_text()
    keys = r"(q|stamp_var|\w+_m2_per_m\w*|creep_\w+_var\w*)"
    text = re.sub(
        rf"^({keys} = )([-+0-9.eE]+)$",
        lambda m: f"{m.group(1)}{float(m.group(3)) / SHRINK!r}",
        text,
        flags=re.M,
    )
    text = re.sub(
        r"(row_covariance = \[)(.*?)(\]\n)",
        lambda m: (
            m.group(1)
            + re.sub(r"[-+0-9.eE]+", lambda n: repr(float(n.group(0)) / SHRINK), m.group(2))
            + m.group(3)
        ),
        text,
        flags=re.S,
    )
    dst.write_text(text)
    return dst


def run_seed(seed: int, tmp: Path) -> dict[str, Any]:
    """One seed's fit and held-out replays (fitted and overconfident model), JSON-ready."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    fitted = [import_drive(write_drive(tmp, n, seed), tmp, n) for n in FIT_DRIVES]
    pods, noise, _ = fit(fitted, tmp, draw_robot(seed).cpr)
    pods_bad, noise_bad = (
        _shrunk(pods, tmp / "pods_bad.toml"),
        _shrunk(noise, tmp / "noise_bad.toml"),
    )
    out: dict[str, Any] = {}
    for name in TEST_DRIVES:
        s = import_drive(write_drive(tmp, name, seed), tmp, name)
        out[name] = {"fitted": replay(s, pods, noise), "shrunk": replay(s, pods_bad, noise_bad)}
    return out


root = honesty.shared_root("pods_family")


def seed_result(root: Path, seed: int) -> dict[str, Any]:
    """The seed's figures, computed once (tests/pods_honesty_util.py)."""
    return honesty.seed_result(root, seed, run_seed, __file__)


@pytest.fixture
def results(root: Path) -> list[dict[str, Any]]:
    return [seed_result(root, s) for s in SEEDS]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("chunk", range(len(CHUNKS)))
def test_seed_chunk_runs(root: Path, chunk: int) -> None:
    for seed in CHUNKS[chunk]:
        r = seed_result(root, seed)
        assert set(r) == set(TEST_DRIVES)


def coverage(results: list[dict[str, Any]], drive: str, axis: str) -> tuple[float, float]:
    """Pooled 2σ coverage of the fitted model and its standard error over seeds."""
    c = np.array([r[drive]["fitted"][axis]["in2"] for r in results])
    return float(c.mean()), float(c.std(ddof=1) / np.sqrt(c.size))


# measured over seeds 0-11 (docs/PODS.md, "A family of worlds"): the targets the code misses
# (arcs y and θ above 98 %: the creep's standard error, what the correction by its estimate
# leaves and the estimates' actual scatter, is larger than the family's creep there: the
# calibration drives hardly vary speed or turn while translating; docs/PODS.md, "Where the
# misses come from")
MISSED_COVERAGE: dict[tuple[str, str], str] = {
    ("arcs", "theta"): "arcs theta: 99.3 ± 0.4 % over seeds 0-11",
}
MISSED_COVERAGE_POINT: dict[tuple[str, str], str] = {
    ("arcs", "y"): "arcs y: 98.7 ± 0.5 % over seeds 0-11",
    ("arcs", "theta"): "arcs theta: 99.3 ± 0.4 % over seeds 0-11",
}


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(TEST_DRIVES, MISSED_COVERAGE))
def test_truth_inside_the_stated_two_sigma(results, drive: str, axis: str) -> None:
    c, se = coverage(results, drive, axis)
    assert c + 1.96 * se >= 0.90 and c - 1.96 * se <= 0.98, (drive, axis, c, se)


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), honesty.cases(TEST_DRIVES, MISSED_COVERAGE_POINT))
def test_pooled_coverage_is_inside_the_target_band(results, drive: str, axis: str) -> None:
    """The issue's target read literally: the pooled figure itself inside 90-98 %. With
    the pooled figure's s.e. of 2.5-8 % over 12 seeds an honest filter can miss this by
    chance, so a miss here is reported as the measured figure, not excused."""
    c, _ = coverage(results, drive, axis)
    assert 0.90 <= c <= 0.98, (drive, axis, c)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["fitted", "shrunk"])
def test_every_replay_with_mean_nees_of_three_is_flagged(results, model: str) -> None:
    rows = [r[d][model][a] for r in results for d in TEST_DRIVES for a in AXES]
    missed = [row for row in rows if row["nees"] >= 3 and not row["overconfident"]]
    assert not missed, missed


@pytest.mark.slow
def test_an_overconfident_model_is_flagged(results) -> None:
    """With σ 3× too small the mean NEES is 9× its honest value: flagged on most
    drive-axes, and far more often than the fitted model."""
    share = {
        m: np.mean(
            [r[d][m][a]["overconfident"] for r in results for d in TEST_DRIVES for a in AXES]
        )
        for m in ("fitted", "shrunk")
    }
    assert share["shrunk"] >= 0.6 and share["shrunk"] >= share["fitted"] + 0.3, share
