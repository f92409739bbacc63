"""Pose-error honesty on campaigns the project did not generate (tests/foreign/pose_world.py).

Each campaign is written by the foreign generator as TUM mocap and CSV sensor files
and imported with ``sensorbench import`` (tests/foreign_pose.py): 4 sessions of
120 s, the sensor at ~5 Hz with irregular spacing and a tracking loss, in its own map
frame, mounted rotated, with its own clock offset; error parameters drawn per
campaign. What is checked against the generator's truth:

- the time offset, estimated at 5 Hz, and its stated standard error;
- the 95 % intervals of sigma_b, sigma, tau_s and sigma_v (which must carry the
  offset's and the alignment's estimation), and the ranks of the truth among draws
  from the stated uncertainty (simulation-based calibration);
- leave-one-session-out prediction of a requirement: the realized 60-s p95 of |x| and
  |yaw| of a held-out session against the predicted 95 % quantile;
- the requirement verdict (holds / fails / cannot tell at 95 % confidence) against
  the truth's quantile: wrong rarely both ways, and deciding when the truth is clear
  of the threshold; that truth against the generator's own horizons.

Validation on these campaigns (the verdict per world) is
tests/test_pose_foreign_validation.py. The statistical tests pool
:data:`N_CAMPAIGNS` campaigns, computed in chunks of :data:`CHUNK` (one slow test
each; every campaign is computed once per run and shared by the tests of all xdist
workers, tests/shared_run_util.py), and their tolerances follow from the number of
fits, horizons or seeds (see each test).
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace
from pathlib import Path

import foreign_pose
import numpy as np
import pose_util
import pytest
from click.testing import CliRunner
from foreign import pose_world
from scipy.stats import kstest
from scipy.stats import t as student_t
from shared_run_util import POOLED_TIMEOUT_S, computed_once, run_dir

from sensorbench.characterize.pose.align import Alignment, pose_errors
from sensorbench.characterize.pose.error_model import PARAMS, fit_pose_error
from sensorbench.characterize.pose.gm_montecarlo import draw_params
from sensorbench.characterize.pose.requirements import (
    Projection,
    Requirement,
    judge_requirements,
    predict_requirements,
)
from sensorbench.characterize.pose.series import POSE_AXES
from sensorbench.characterize.pose.sessions import prepare_campaign
from sensorbench.cli import cli

N_CAMPAIGNS = 100
CHUNK = 5
# a pooled test scheduled before the chunk tests computes (or waits for) every campaign:
# up to the chunks' time together (~7 s a campaign at load 7 on 2 cores, ~12 min in all);
# each chunk test keeps the suite's 300 s bound (marked below)
pytestmark = pytest.mark.timeout(POOLED_TIMEOUT_S)
HORIZON_S = 60.0
WINDOWS_S = (0.0, 30.0, 60.0)  # starts of the 60-s horizons in each 120-s held-out session
REQUIRE = [Requirement.parse("x.p95<=1"), Requirement.parse("yaw.p95<=1")]
RANK_DRAWS = 999
TRUTH_CAMPAIGNS = 10
TRUTH_SESSIONS = 600


def _invoke(*args) -> object:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


# ------------------------------------------------------------------ the files themselves


def test_files_carry_the_stated_error(tmp_path: Path) -> None:
    """Aligned with the generator's true offset, frame and mount, the imported files give
    back the generator's error to within mocap's noise: 0.2 mm and 0.2 mrad per frame,
    interpolated between two frames, RMS 0.2·√(2/3) ≈ 0.16 (measured 0.15-0.29);
    0.5 is three times that."""
    camp = pose_world.campaign(1)
    tracks, _ = foreign_pose.tracks(camp, tmp_path)
    for (sensor, mocap), s in zip(tracks, camp.sessions, strict=True):
        true = Alignment(
            camp.offset_s,
            camp.map_rotation,
            camp.map_translation,
            camp.mount.T,
            "se3",
            "given",
            math.nan,
            math.nan,
            0,
            0,
        )
        _, e, idx = pose_errors(sensor, mocap, true)  # every sensor sample is valid: idx is
        rms = np.sqrt(np.mean((e - s.error[idx]) ** 2, axis=0))  # the generator's index
        assert idx.size > 0.97 * s.error.shape[0]  # only the mocap occlusion drops poses
        assert rms.max() < 0.5e-3, rms


def test_fit_cli_states_the_offset_and_its_standard_error(tmp_path: Path) -> None:
    """``fit pose-error --json -o`` on one campaign: the offset within 4 stated se of the
    truth, the se in the JSON, each session's alignment and the model file."""
    camp = pose_world.campaign(2)
    paths = foreign_pose.session_files(camp, tmp_path)
    out = tmp_path / "model.toml"
    r = _invoke("fit", "pose-error", *paths, "--sensor", foreign_pose.SENSOR, "--json", "-o", out)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    off = doc["time_offset"]
    assert off["method"] == "gls" and off["pooled"] is True
    assert 0 < off["se_s"] < 0.001
    assert abs(off["offset_s"] - camp.offset_s) < 4 * off["se_s"]
    assert all(s["alignment"]["offset_se_s"] == off["se_s"] for s in doc["sessions"])
    prov = tomllib.loads(out.read_text())["provenance"]
    assert prov["time_offset"]["se_s"] == pytest.approx(off["se_s"])


# ------------------------------------------------------------------ pooled over campaigns


def _campaign(seed: int, root: Path) -> dict:
    """Everything the statistical tests need from one right-world campaign (once per run)."""
    return computed_once(root, f"c{seed}", lambda: _compute_campaign(seed, root / f"c{seed}"))


def _compute_campaign(seed: int, directory: Path) -> dict:
    camp = pose_world.campaign(seed)
    tracks, names = foreign_pose.tracks(camp, directory)
    prep = prepare_campaign(tracks, names)
    model = fit_pose_error(prep.series)
    fits = [model.axes[a] for a in POSE_AXES]
    rng = np.random.default_rng(seed)
    draws = draw_params(
        model.params_array(),
        model.cov_log_array(),
        RANK_DRAWS,
        rng,
        model.sigma_b_quantiles(),
    )
    ci = np.array([f.ci() for f in fits])
    truth = camp.truth
    out = {
        "offset_error_s": prep.time_offset.offset_s - camp.offset_s,
        "offset_se_s": prep.time_offset.se_s,
        "rank_u": (np.sum(draws < truth[None], axis=0) + 0.5) / (RANK_DRAWS + 1),
        "covered": (truth >= ci[:, :, 0]) & (truth <= ci[:, :, 1]),
        "converged": all(f.converged for f in fits),
    }
    true_q = predict_requirements(
        REQUIRE,
        pose_util.with_params(model, truth, "truth"),
        prep.series,
        Projection(HORIZON_S, n_draws=4000, seed=seed + 1, parameter_uncertainty=False),
    )
    judged = judge_requirements(
        REQUIRE,
        model,
        prep.series,
        Projection(HORIZON_S, seed=seed + 2, inherited_variance=prep.future_variance()),
    )
    out["true_quantile"] = np.array([t.predicted_quantile for t in true_q])
    out["truth"] = truth
    out["judged"] = judged
    exceed = []
    for k, fold in enumerate(prep.folds(list(range(len(prep.prepared))))):
        fitted = fit_pose_error(fold.training)
        q = predict_requirements(
            REQUIRE,
            fitted,
            fold.training,
            Projection(HORIZON_S, seed=100 * seed + k, inherited_variance=fold.inherited_variance),
        )
        s = fold.held_out
        for start in WINDOWS_S:
            inside = (s.t_s - s.t_s[0] >= start) & (s.t_s - s.t_s[0] < start + HORIZON_S)
            p95 = np.quantile(np.abs(s.error[inside]), 0.95, axis=0)
            exceed.append([p95[0] > q[0].predicted_quantile, p95[5] > q[1].predicted_quantile])
    out["exceed"] = np.array(exceed)
    return out


@pytest.fixture(scope="session")
def root(tmp_path_factory) -> Path:
    return run_dir(tmp_path_factory, "foreign_campaigns")


def _results(root: Path, seeds=range(N_CAMPAIGNS)) -> list[dict]:
    return [_campaign(s, root) for s in seeds]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("chunk", range(N_CAMPAIGNS // CHUNK))
def test_campaign_chunk_fits(root: Path, chunk: int) -> None:
    """Fit the campaigns of one chunk (the tests below pool all chunks): every fit
    converges and every offset is within 5 stated se of the truth."""
    for r in _results(root, range(chunk * CHUNK, (chunk + 1) * CHUNK)):
        assert r["converged"]
        assert abs(r["offset_error_s"]) < 5 * r["offset_se_s"], r


@pytest.mark.slow
def test_time_offset_at_5_hz_and_its_standard_error(root: Path) -> None:
    """sd of the offset's error ≤ 15 ms on 4 × 120 s at 5 Hz, and the stated se is right:
    the standardized errors have sd within 3 standard errors of 1 (the sd of n standard
    normals has se 1/√(2n))."""
    r = _results(root)
    err = np.array([x["offset_error_s"] for x in r])
    z = err / np.array([x["offset_se_s"] for x in r])
    assert err.std() <= 0.015 and np.abs(err).max() <= 0.045
    assert abs(z.std() - 1.0) < 3.0 / math.sqrt(2 * z.size), z.std()
    assert abs(z.mean()) < 3.0 / math.sqrt(z.size)


@pytest.mark.slow
def test_intervals_contain_the_truth_90_to_98_percent(root: Path) -> None:
    """Each parameter's 95 % interval over 6 axes × 100 campaigns = 600 fits: inside
    [90 %, 98 %] (3.7 binomial se below and 2.8 above the nominal 95 %)."""
    covered = np.concatenate([x["covered"] for x in _results(root)])
    for j, p in enumerate(PARAMS):
        assert 0.90 <= covered[:, j].mean() <= 0.98, (p, covered[:, j].mean())


@pytest.mark.slow
def test_ranks_of_the_truth_are_uniform(root: Path) -> None:
    """SBC: the truth's rank among 999 draws of the stated uncertainty, 600 fits per
    parameter: uniform (KS p > 0.01)."""
    ranks = np.concatenate([x["rank_u"] for x in _results(root)])
    for j, p in enumerate(PARAMS):
        assert kstest(ranks[:, j], "uniform").pvalue > 0.01, (p, kstest(ranks[:, j], "uniform"))


@pytest.mark.slow
def test_held_out_p95_exceeds_its_predicted_quantile_5_percent_of_the_time(root: Path) -> None:
    """Leave-one-session-out: each held-out session's 60-s horizons (starting at 0, 30 and
    60 s) against the 95 % quantile predicted by the model, offset and frame of the others.
    Exceedances of one campaign are correlated (shared fits, overlapping horizons), so the
    standard error is the campaigns' scatter (cluster by campaign): the rate must be
    within 5 ± 2 % and that band must be at least 2.5 such standard errors wide."""
    per = np.array([x["exceed"].mean(axis=0) for x in _results(root)])
    rate = per.mean(axis=0)
    se = per.std(axis=0, ddof=1) / math.sqrt(per.shape[0])
    assert np.all(se < 0.02 / 2.5), se
    assert np.all(np.abs(rate - 0.05) <= 0.02), (rate, se)


@pytest.mark.slow
def test_requirement_truth_is_the_generators_own(root: Path) -> None:
    """The true quantile the verdicts are judged against is our simulator's under the
    true parameters (at the campaign's median period, relocalizations resampled from its
    segment lengths). Against the generator's own horizons (600 sessions of its error
    process, 60-s windows from 0, 30 and 60 s as held out), campaigns 0-9: each within
    ±10 % (Monte Carlo error of either side 1-1.5 %, the campaign's segment lengths ~1 %),
    and no bias: the mean log ratio within t₉(0.99865) ≈ 4.1 standard errors of 0 (the
    two-sided 3-sigma level with the sd estimated from 10 campaigns; measured on 30
    campaigns with 16 000 and 3000 horizons: −0.1 ± 0.2 % on x, −0.3 ± 0.2 % on yaw)."""
    ratios = []
    for seed in range(TRUTH_CAMPAIGNS):
        x = _campaign(seed, root)
        p95 = []
        for t, e in pose_world.error_sessions(seed, x["truth"], TRUTH_SESSIONS):
            for start in WINDOWS_S:
                inside = (t - t[0] >= start) & (t - t[0] < start + HORIZON_S)
                p95.append(np.quantile(np.abs(e[inside][:, [0, 5]]), 0.95, axis=0))
        ratios.append(x["true_quantile"] / np.quantile(p95, 0.95, axis=0))
    r = np.log(ratios)
    se = r.std(axis=0, ddof=1) / math.sqrt(len(r))
    assert np.all(np.abs(r) < 0.1), r
    assert np.all(np.abs(r.mean(axis=0)) < student_t.ppf(0.99865, len(r) - 1) * se), r


def _verdicts(root: Path, factor: float) -> list[str]:
    """Every campaign's x and yaw verdicts with the threshold at ``factor`` × the truth."""
    out = []
    for x in _results(root):
        for g, q in zip(x["judged"], x["true_quantile"], strict=True):
            r = g.requirement
            at = Requirement(r.axis, r.stat, factor * q, r.text)
            out.append(replace(g, requirement=at).verdict)
    return out


@pytest.mark.slow
def test_requirement_verdict_is_wrong_rarely_both_ways(root: Path) -> None:
    """x.p95 and yaw.p95 over 60 s on 100 campaigns of 4 × 120 s: 200 verdicts per
    threshold, against the same quantile under the true parameters.

    At the truth itself (the hardest place): the lower bound above the truth (a wrong
    *fails*) and the upper bound below it (a wrong *holds* for any threshold just under
    the truth) each in ≤ 17 of 200: a calibrated 95 % bound (10 expected) exceeds 17
    with probability 1.2 %. 15 % away from the truth: the wrong verdict in ≤ 1 of 200
    (a calibrated bound misses there by more than 3 standard errors of the estimate,
    < 0.1 % each: more than 1 has probability 1.7 %)."""
    truth = np.concatenate([x["true_quantile"] for x in _results(root)])
    judged = [g for x in _results(root) for g in x["judged"]]
    lo = np.array([g.quantile_bounds[0] for g in judged])
    hi = np.array([g.quantile_bounds[1] for g in judged])
    assert np.sum(lo > truth) <= 17, np.sum(lo > truth)
    assert np.sum(hi < truth) <= 17, np.sum(hi < truth)
    assert _verdicts(root, 1.15).count("fails") <= 1
    assert _verdicts(root, 0.85).count("holds") <= 1


@pytest.mark.slow
def test_requirement_verdict_decides_when_the_truth_is_clear_of_the_threshold(root: Path) -> None:
    """15 % above the truth *holds* and 15 % below *fails* each in ≥ 100 of 200 (4
    sessions estimate the quantile to ~6.5 %, so a 95 % bound needs ~11 % of margin:
    measured about 65 % and 80 %; a true 65 % falls below 100 with probability 5·10⁻⁶);
    30 % away the right verdict in ≥ 180 of 200 (measured ≥ 95 %; a true 96 % falls
    below with probability 6·10⁻⁵). The bounds are centred on the point estimate's
    quantile, which is median-unbiased: its log error has mean within 3 standard
    errors of 0."""
    assert _verdicts(root, 1.15).count("holds") >= 100
    assert _verdicts(root, 0.85).count("fails") >= 100
    assert _verdicts(root, 1.3).count("holds") >= 180
    assert _verdicts(root, 0.7).count("fails") >= 180
    err = np.concatenate(
        [
            np.log([g.quantile_estimate for g in x["judged"]] / x["true_quantile"])
            for x in _results(root)
        ]
    )
    assert abs(err.mean()) < 3 * err.std() / math.sqrt(err.size), (err.mean(), err.std())
