"""Leave-one-session-out validation on pose campaigns the project did not generate.

The campaigns of tests/foreign/pose_world.py (4 sessions of 120 s, the sensor at ~5 Hz
in its own map frame, mounted rotated, with its own clock offset) written as TUM mocap
and CSV sensor files and imported with ``sensorbench import`` (tests/foreign_pose.py).
The verdict on every world: the right one passes, each wrong one fails (and the odd
session is the one named). Seeds 100-119 per world, validated in chunks (one slow test
each; every seed is validated once per run and shared by the tests of all xdist
workers, tests/shared_run_util.py) and pooled per world; the pose-error model's own honesty
on these campaigns is tests/test_pose_foreign.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import foreign_pose
import pytest
from click.testing import CliRunner
from foreign import pose_world
from shared_run_util import POOLED_TIMEOUT_S, computed_once, run_dir

from sensorbench.characterize.pose.sessions import prepare_campaign
from sensorbench.characterize.pose.validate import validate_sessions
from sensorbench.cli import cli

SEEDS = 20


def _invoke(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_validate_cli_passes_the_right_world_and_names_only_the_noisy_session(
    tmp_path: Path,
) -> None:
    """One fixed seed each: the right world exits 0; with one session at 3x the noise,
    exit 1 and that session is the only one named (step-down leave-one-out)."""
    common = ["--sensor", foreign_pose.SENSOR, "--draws", "1000", "--json"]
    right = foreign_pose.session_files(pose_world.campaign(3), tmp_path / "right")
    r = _invoke("validate", *right, *common)
    assert r.exit_code == 0, r.output
    noisy = pose_world.campaign(3, "noisy_session")
    paths = foreign_pose.session_files(noisy, tmp_path / "noisy")
    r = _invoke("validate", *paths, *common)
    assert r.exit_code == 1
    doc = json.loads(r.stdout)  # warnings go to stderr
    odd = paths[noisy.odd_session].stem
    assert doc["named"] == [odd]
    assert {f["session"] for f in doc["failures"]} == {odd}


@pytest.fixture(scope="session")
def root(tmp_path_factory) -> Path:
    return run_dir(tmp_path_factory, "foreign_validation")


# ------------------------------------------------------------------ verdicts per world

WORLDS = {
    "right": "passes",
    "sigma2_session": "names the odd session",
    "heavy_tails": "fails",
    "noisy_session": "names the odd session",
}


POWER_SEEDS = range(100, 100 + SEEDS)
POWER_CHUNK = 5


def _power_hit(world: str, seed: int, root: Path) -> bool:
    """Whether leave-one-session-out validation gives ``world``'s expected outcome."""
    key = f"{world}{seed}"
    return computed_once(root, key, lambda: _compute_power_hit(world, seed, root / key))


def _compute_power_hit(world: str, seed: int, directory: Path) -> bool:
    camp = pose_world.campaign(seed, world)
    tracks, names = foreign_pose.tracks(camp, directory)
    prep = prepare_campaign(tracks, names)
    rep = validate_sessions(prep.series, n_draws=1000, seed=seed, folds=prep.folds)
    if world == "right":
        return rep.passed
    if world == "heavy_tails":
        return not rep.passed
    return rep.named == [names[camp.odd_session]]


@pytest.mark.slow
@pytest.mark.parametrize(
    "world,chunk", [(w, c) for w in WORLDS for c in range(SEEDS // POWER_CHUNK)]
)
def test_validation_power_chunk(root: Path, world: str, chunk: int) -> None:
    """Validate one chunk of a world's 20 seeds (pooled by the test below)."""
    for seed in list(POWER_SEEDS)[chunk * POWER_CHUNK : (chunk + 1) * POWER_CHUNK]:
        _power_hit(world, seed, root)


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
@pytest.mark.parametrize("world", list(WORLDS))
def test_validation_power_on_20_seeds(root: Path, world: str) -> None:
    """Leave-one-session-out Monte Carlo, 20 seeds (100-119): the right world passes in
    ≥ 16 (a true 90 % passes this with probability 0.96, a true 60 % with 0.05); sigma
    doubled on one session and Student-t(3) noise fail in ≥ 18 (the issue's 90 %); with
    one session's noise 3x (or its sigma 2x) that session alone is named in ≥ 18."""
    hits = [_power_hit(world, seed, root) for seed in POWER_SEEDS]
    need = 16 if world == "right" else 18
    assert sum(hits) >= need, (world, [s for s, h in zip(POWER_SEEDS, hits, strict=True) if not h])
