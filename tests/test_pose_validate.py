"""Leave-one-session-out validation: passes a correct world, fails each wrong one, says where.

Campaigns (tests/pose_util.py): 6 sessions of 120 s at ~5 Hz with jittered sampling,
a 1-s gap and relocalizations every ~20 s; 1000 draws per session; family-wise 5 %.

Fast (default) versions run one fixed seed per LOSO world and two for the model-file
world: with one seed, a world whose true rate is ≥ 90 % gives the asserted outcome
with probability ≥ 90 % (and the seeds are fixed, so the test is deterministic).
The rates themselves are checked by the slow sweeps over 20 seeds, which require
≥ 16/20: if the true rate is exactly 90 % that holds with probability 0.957
(binomial), while a rate of 60 % would pass with probability 0.051.
"""

from __future__ import annotations

import numpy as np
import pose_util
import pytest

from sensorbench.characterize.pose.error_model import PoseErrorModel, fit_pose_error
from sensorbench.characterize.pose.validate import validate_sessions
from sensorbench.errors import FitError

DRAWS = 1000
SWEEP = 20
SWEEP_MIN = 16


def _run(world: str, seed: int):
    return validate_sessions(pose_util.campaign(seed, world), n_draws=DRAWS, seed=seed)


def _halved(seed: int, tmp_path):
    """Fit on a correct campaign, halve sigma, write/read the model file, validate."""
    series = pose_util.campaign(seed, "correct")
    model = fit_pose_error(series)
    p = model.params_array()
    p[:, 1] *= 0.5
    path = model.with_params(p, "sigma halved").save(tmp_path / f"halved{seed}.toml")
    return validate_sessions(series, n_draws=DRAWS, seed=seed, model=PoseErrorModel.load(path))


def test_correct_world_passes_all_axes():
    r = _run("correct", 0)
    assert r.passed, r.failures()
    assert r.mode == "leave-one-session-out"
    assert len(r.sessions) == 6
    hist = r.rank_histogram()
    assert all(sum(v) == 36 for v in hist.values())
    doc = r.to_dict()
    assert doc["passed"] is True and doc["failures"] == []
    assert set(doc["sessions"][0]["axes"]) == {"x", "y", "z", "roll", "pitch", "yaw"}


def test_random_walk_world_fails_on_growth():
    r = _run("random_walk", 0)
    assert not r.passed
    stats = {f["statistic"] for f in r.failures()}
    assert "growth" in stats, r.failures()


def test_one_noisy_session_fails_and_is_named():
    r = _run("one_noisy", 0)
    assert not r.passed
    noisy = r.sessions[-1].name
    failing = [f for f in r.failures() if f["session"] == noisy]
    assert {f["statistic"] for f in failing} & {"rms", "max_abs"}, r.failures()
    assert len({f["axis"] for f in failing}) >= 3


def test_halved_sigma_model_file_fails(tmp_path):
    for seed in (0, 1):
        r = _halved(seed, tmp_path)
        assert r.mode == "given model"
        assert not r.passed
        assert {f["statistic"] for f in r.failures()} & {"rms", "max_abs"}
        # the real RMS lies above the simulated band: percentile near 0
        f = next(f for f in r.failures() if f["statistic"] == "rms" or f["statistic"] == "max_abs")
        assert f["observed"] > f["sim_band"][1]
        assert f["percentile"] < 0.01


def test_validation_refuses_bad_requests():
    series = pose_util.campaign(0, "correct", n_sessions=1, duration_s=30.0)
    with pytest.raises(FitError, match="at least 2 sessions"):
        validate_sessions(series, n_draws=100)
    with pytest.raises(FitError, match="100 draws"):
        validate_sessions(series * 2, n_draws=10)
    with pytest.raises(FitError, match="no sessions"):
        validate_sessions([], n_draws=100)


def test_percentile_definition_matches_brief():
    """p = (1 + #{T_sim ≥ T_obs}) / (B + 1), recomputed from the draws."""
    from sensorbench.characterize.pose.gm_montecarlo import error_statistics, simulate_statistics
    from sensorbench.characterize.pose.validate import check_session

    s = pose_util.campaign(2, "correct", n_sessions=1, duration_s=60.0)[0]
    rng_a = np.random.default_rng(5)
    chk = check_session(s, pose_util.TRUTH, None, 500, rng_a, 0.05)
    sims = simulate_statistics(pose_util.TRUTH, s.t_s, s.reloc, 500, np.random.default_rng(5))
    obs = error_statistics(s.t_s, s.reloc, s.error)
    p_rms = (1 + np.sum(sims["rms"] >= obs["rms"][None], axis=0)) / 501
    np.testing.assert_allclose(chk.percentile[:, 0], p_rms)


def _rate(world: str, tmp_path=None) -> float:
    outcomes = []
    for seed in range(100, 100 + SWEEP):
        r = _halved(seed, tmp_path) if world == "halved" else _run(world, seed)
        outcomes.append(r.passed)
    return float(np.mean(outcomes))


@pytest.mark.slow
def test_sweep_correct_world_passes_at_least_90_percent():
    assert _rate("correct") >= SWEEP_MIN / SWEEP


@pytest.mark.slow
@pytest.mark.parametrize("world", ["random_walk", "one_noisy"])
def test_sweep_wrong_worlds_fail_at_least_90_percent(world):
    assert 1.0 - _rate(world) >= SWEEP_MIN / SWEEP


@pytest.mark.slow
def test_sweep_halved_sigma_fails_at_least_90_percent(tmp_path):
    assert 1.0 - _rate("halved", tmp_path) >= SWEEP_MIN / SWEEP
