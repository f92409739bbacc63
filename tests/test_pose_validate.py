"""Leave-one-session-out validation: passes a correct world, fails each wrong one, says where.

Campaigns (tests/pose_util.py): 6 sessions of 120 s at ~5 Hz with jittered sampling,
a 1-s gap and relocalizations every ~20 s; 1000 draws per session; family-wise 5 %.

Worlds (tests/pose_util.py): correct; a random walk; one session with 3× the noise;
one session with 2× sigma; Student-t(3) noise of the model's variance; a model file
with sigma halved.

Fast (default) versions run one fixed seed per LOSO world and two for the model-file
world: with one seed, a world whose true rate is ≥ 90 % gives the asserted outcome
with probability ≥ 90 % (and the seeds are fixed, so the test is deterministic).
The rates themselves are checked by the slow sweeps over 20 seeds: the correct world
must pass ≥ 16/20 (a true 90 % does with probability 0.957, a true 60 % with 0.051);
each wrong world must fail — one noisy or sigma-doubled session must be the only one
named — in ≥ 18/20, the issue's 90 %.
"""

from __future__ import annotations

import functools

import numpy as np
import pose_util
import pytest

from sensorbench.characterize.pose.error_model import PoseErrorModel, fit_pose_error
from sensorbench.characterize.pose.validate import validate_sessions
from sensorbench.errors import FitError

DRAWS = 1000
SWEEP = 20
SWEEP_MIN = 16
WRONG_MIN = 18


def _run(world: str, seed: int):
    return validate_sessions(pose_util.campaign(seed, world), n_draws=DRAWS, seed=seed)


def _halved(seed: int, tmp_path):
    """Fit on a correct campaign, halve sigma, write/read the model file, validate."""
    series = pose_util.campaign(seed, "correct")
    model = fit_pose_error(series)
    p = model.params_array()
    p[:, 1] *= 0.5
    path = pose_util.with_params(model, p, "sigma halved").save(tmp_path / f"halved{seed}.toml")
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


def test_one_noisy_session_fails_and_is_the_only_one_named():
    """Every other session's refit includes the noisy one; step-down names it alone."""
    r = _run("one_noisy", 0)
    assert not r.passed
    noisy = r.sessions[-1].name
    assert r.named == [noisy]
    assert {f["session"] for f in r.failures()} == {noisy}
    failing = r.failures()
    assert {f["statistic"] for f in failing} & {"rms", "max_abs", "nis"}, failing
    assert len({f["axis"] for f in failing}) >= 3


def test_sigma_doubled_on_one_session_is_named():
    r = _run("sigma2", 0)
    assert r.named == [r.sessions[-1].name], r.named


def test_heavy_tails_fail_on_the_innovations_kurtosis():
    r = _run("heavy_tails", 0)
    assert not r.passed
    assert "kurtosis" in {f["statistic"] for f in r.failures()}, r.failures()


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


def _right(world: str, seed: int, tmp_path) -> bool:
    """The world's expected outcome: passes, fails, or names exactly the odd (last) session."""
    if world == "halved":
        return not _halved(seed, tmp_path).passed
    r = _run(world, seed)
    if world == "correct":
        return r.passed
    if world in ("one_noisy", "sigma2"):
        return r.named == [r.sessions[-1].name]
    return not r.passed


@pytest.mark.slow
def test_sweep_correct_world_passes_at_least_90_percent(tmp_path):
    hits = [_right("correct", seed, tmp_path) for seed in range(100, 100 + SWEEP)]
    assert sum(hits) >= SWEEP_MIN, hits


@pytest.mark.slow
@pytest.mark.parametrize("world", ["random_walk", "one_noisy", "sigma2", "heavy_tails", "halved"])
def test_sweep_wrong_worlds_fail_at_least_90_percent(world, tmp_path):
    """≥ 18 of 20 (the issue's 90 %); one noisy / one sigma-doubled session: it alone named."""
    hits = [_right(world, seed, tmp_path) for seed in range(100, 100 + SWEEP)]
    assert sum(hits) >= WRONG_MIN, (world, [100 + i for i, h in enumerate(hits) if not h])


# The demo's world (sim/scenarios/reloc_campaign.toml as fitted on its full demo, time in
# simulated s): few relocalization segments per session, whose offsets dominate the mean
# and the growth statistics (their distributions are mixtures with heavy tails).
DEMO_FIT = np.array(
    [
        [0.0427, 0.0230, 6.6, 0.0020],
        [0.0427, 0.0197, 4.7, 0.0020],
        [0.0187, 0.0118, 14.3, 0.0021],
        [0.0052, 0.0032, 24.0, 0.0017],
        [0.0035, 0.0030, 18.5, 0.0017],
        [0.0175, 0.0044, 6.1, 0.0017],
    ]
)
DEMO_RELOCS_S = (25.0, 43.0, 90.0, 102.0)  # reloc_3: two set, two after a cover


@functools.cache
def _demo_like_alarms(world: str, n: int, alpha_s: float) -> tuple[frozenset[str], ...]:
    """Failed statistics of ``n`` sessions shaped like the demo's reloc_3 (120 s, 10 Hz),
    each checked against the true model with 1000 draws at per-session level ``alpha_s``."""
    from sensorbench.characterize.pose.gm_montecarlo import STAT_NAMES, simulate_errors
    from sensorbench.characterize.pose.series import ErrorSeries
    from sensorbench.characterize.pose.validate import check_session

    rng = np.random.default_rng(38)
    t = np.arange(0.0, 120.0, 0.1) + rng.uniform(-0.01, 0.01, 1200)
    reloc = np.isin(np.arange(t.size), np.searchsorted(t, DEMO_RELOCS_S))
    out = []
    for _ in range(n):
        if world == "random_walk":
            e = pose_util.random_walk_errors(rng, t, reloc, DEMO_FIT)
        else:
            e = simulate_errors(DEMO_FIT, t, reloc, 1, rng)[0]
        chk = check_session(ErrorSeries(t, e, reloc), DEMO_FIT, None, DRAWS, rng, alpha_s)
        out.append(frozenset(STAT_NAMES[j] for j in np.nonzero(chk.failed)[1]))
    return tuple(out)


def test_right_demo_world_fails_at_the_nominal_rate():
    """The max-|z| family of a session holds its level on the demo's world: 200 right
    sessions at 10 %, 20 alarms expected, 99.9 % binomial bounds [7, 36] (18 measured)."""
    failed = [a for a in _demo_like_alarms("right", 200, 0.10) if a]
    assert 7 <= len(failed) <= 36, len(failed)


@pytest.mark.xfail(
    strict=True,
    reason="growth is in 7 of the 18 alarms here (39 %; 50-60 % on the demo's own sessions "
    "with the parameters drawn), its share of the 42 checks is 14 %: standardized by mean "
    "and sd, its heavy tail dominates the max-|z|. Mapping every check onto the normal scale "
    "through a fitted Student-t tail brings it to 11-35 %, but on the demo's own world then "
    "moves the alarms to the innovation kurtosis (3.13 against 3 on the rotation axes: the "
    "reference's interpolated noise): 6 of 17 campaigns failed instead of 3 of 18; not shipped",
)
def test_growth_takes_only_its_share_of_the_false_alarms():
    """Growth in at most 35 % of the right world's alarms (14 % share: P(>= 35 % of 20) < 1 %)."""
    failed = [a for a in _demo_like_alarms("right", 200, 0.10) if a]
    assert sum("growth" in a for a in failed) <= 0.35 * len(failed), failed


def test_a_random_walk_still_fails_in_the_demo_world():
    """The same sessions with the GM replaced by a random walk restarted at each
    relocalization (of the same mean variance) fail in ≥ 80 % of 20 at the demo's
    per-session level (with five segments the innovations see it before growth does;
    growth's own power is test_random_walk_world_fails_on_growth's)."""
    alarms = _demo_like_alarms("random_walk", 20, 0.05 / 5)
    assert sum(bool(a) for a in alarms) >= 16, alarms


@pytest.mark.slow
def test_demo_world_fit_is_calibrated_with_tau_5_s():
    """60 campaigns of 5 sessions shaped like the demo's reloc_3, the demo's fit as truth
    but x's τ = 5 s (a held-out campaign there was fitted 3.27 s [2.88, 3.71]): x's τ
    inside its 95 % interval in ≥ 52/60 (3 binomial sd below 57); σ_b's intervals cover
    90-98 % of 360 fits; mean σ̂_b²/σ_b² within 3 of its standard errors of 1."""
    from sensorbench.characterize.pose.gm_montecarlo import simulate_errors
    from sensorbench.characterize.pose.series import ErrorSeries

    truth = DEMO_FIT.copy()
    truth[0, 2] = 5.0
    est, covered = [], []
    for seed in range(60):
        rng = np.random.default_rng([seed, 38])
        series = []
        for i in range(5):
            t = np.arange(0.0, 120.0, 0.1) + rng.uniform(-0.01, 0.01, 1200)
            reloc = np.isin(np.arange(t.size), np.searchsorted(t, DEMO_RELOCS_S))
            reloc[0] = True
            e = simulate_errors(truth, t, reloc, 1, rng)[0]
            series.append(ErrorSeries(t, e, reloc, name=f"demo-{seed}-{i}"))
        model = fit_pose_error(series)
        ci = np.array([model.axes[a].ci() for a in model.axes])
        est.append(model.params_array())
        covered.append((truth >= ci[:, :, 0]) & (truth <= ci[:, :, 1]))
    cov, ratio = np.array(covered), (np.array(est)[:, :, 0] / truth[:, 0]) ** 2
    assert cov[:, 0, 2].sum() >= 52, cov[:, 0, 2].sum()
    assert 0.90 <= cov[:, :, 0].mean() <= 0.98, cov[:, :, 0].mean()
    se = ratio.std() / np.sqrt(ratio.size)
    assert abs(ratio.mean() - 1.0) < 3.0 * se, (ratio.mean(), se)


def test_the_failure_states_an_upper_tail_p_not_a_percentile(tmp_path):
    """A model with sigma halved: the real RMS lies above every draw, so its share of draws
    at or above the real one is ~0 (what is stored, p = (1 + #{T_sim ≥ T_obs})/(B + 1)).
    Text and HTML call it an upper-tail p, never a "percentile" (which would read ~100 %)."""
    from types import SimpleNamespace

    from sensorbench.report.data import ValidationSection
    from sensorbench.report.html import render_validation
    from sensorbench.report.pose_display import validation_lines

    r = _halved(0, tmp_path)
    f = next(f for f in r.failures() if f["statistic"] == "rms")
    assert f["observed"] > f["sim_band"][1] and f["percentile"] < 0.01
    ps = SimpleNamespace(
        series=pose_util.campaign(0, "correct")[0],
        segmentation=SimpleNamespace(method="flags", unstable_times_s=np.zeros(0)),
        alignment=SimpleNamespace(offset_s=0.0, offset_se_s=float("nan")),
    )
    camp = SimpleNamespace(decision="", prepared=[ps] * len(r.sessions))
    lines = [x for x in validation_lines(r, camp) if "percentile" in x or "upper-tail p" in x]
    assert lines and all("percentile" not in x for x in lines), lines
    page = render_validation(ValidationSection(r, camp.prepared, [None] * len(r.sessions), []))
    assert "upper-tail p" in page and "percentile" not in page
