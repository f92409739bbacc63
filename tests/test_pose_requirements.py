"""``--require``: parsing with units, the predicted statistic and the verdict against a known truth.

The truth of a requirement (e.g. "the p95 of |x| over 60 s within T in 95 % of
horizons") is the 95 % quantile q of that statistic under the true parameters, here
from 4000 simulated horizons without parameter uncertainty (Monte Carlo error ≈ 1 %).
The verdict (:func:`judge_requirements`) bounds q at 95 % confidence from a fit on
the campaign (6 × 120 s): *holds* when the upper bound is within T, *fails* when the
lower bound exceeds it, *undecided* otherwise. Pooled over campaigns it must be wrong
rarely both ways (each bound on the wrong side of the truth about 5 % of the time
when T sits at the truth, almost never 15 % away) and still decide (tests state the
binomial bounds). The foreign world's counterpart is in tests/test_pose_foreign.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pose_util
import pytest
from shared_run_util import POOLED_TIMEOUT_S, computed_once, run_dir

from sensorbench.characterize.pose.error_model import fit_pose_error
from sensorbench.characterize.pose.requirements import (
    Projection,
    Requirement,
    judge_requirements,
    predict_requirements,
)
from sensorbench.errors import FitError


def test_parse_with_units_and_refusals():
    r = Requirement.parse("x.p95<=0.05")
    assert (r.axis, r.stat, r.threshold) == ("x", "p95", 0.05)
    assert Requirement.parse("x.p95<=5cm").threshold == pytest.approx(0.05)
    assert Requirement.parse("z.max <= 12 mm").threshold == pytest.approx(0.012)
    assert Requirement.parse("yaw.p99<=1deg").threshold == pytest.approx(np.pi / 180)
    assert Requirement.parse("roll.rms<=3mrad").threshold == pytest.approx(0.003)
    for bad, msg in [
        ("x.p95<=1deg", "not a 'deg' quantity"),
        ("yaw.p95<=2cm", "not a 'cm' quantity"),
        ("q.p95<=1", "axis 'q'"),
        ("x.p90<=1", "statistic 'p90'"),
        ("x.p95<=1furlong", "unknown unit"),
        ("x.p95>=1", "expected AXIS.STAT<=VALUE"),
    ]:
        with pytest.raises(FitError, match=msg):
            Requirement.parse(bad)


def _truth(asked, model, series, seed: int) -> np.ndarray:
    """The requirements' true quantiles: 4000 horizons under the true parameters."""
    truth = predict_requirements(
        asked,
        pose_util.with_params(model, pose_util.TRUTH, "truth"),
        series,
        Projection(n_draws=4000, seed=seed, parameter_uncertainty=False),
    )
    return np.array([t.predicted_quantile for t in truth])


def _at(result, threshold: float):
    """The same result judged against another threshold."""
    r = result.requirement
    return replace(result, requirement=Requirement(r.axis, r.stat, threshold, r.text))


def test_verdict_holds_fails_or_cannot_tell():
    """One campaign, four statistics: the bounds bracket the estimate and the truth;
    30 % above the truth holds, 30 % below fails (each ≥ 4 standard errors of the
    estimate away, sd ≈ 4-6 %), a threshold at the estimate itself cannot be told;
    without parameter uncertainty both bounds are the estimate."""
    series = pose_util.campaign(0, "correct")
    model = fit_pose_error(series)
    asked = [Requirement.parse(r) for r in ASKED]
    truth = _truth(asked, model, series, 99)
    got = judge_requirements(asked, model, series, Projection(n_draws=300, seed=1))
    for g, q in zip(got, truth, strict=True):
        lo, hi = g.quantile_bounds
        assert lo < g.quantile_estimate < hi and lo < q < hi, g.to_dict()
        assert g.verdict == "holds" and g.met_confidence == 1.0  # asked within 1 m / 1 rad
        assert _at(g, 1.3 * q).verdict == "holds" and _at(g, 1.3 * q).reason() == ""
        assert _at(g, 0.7 * q).verdict == "fails" and "fails" in _at(g, 0.7 * q).reason()
        est = _at(g, g.quantile_estimate)
        assert est.verdict == "undecided" and not est.holds and "cannot tell" in est.reason()
    how = Projection(n_draws=300, seed=1, parameter_uncertainty=False)
    point = judge_requirements(asked, model, series, how)
    for g in point:
        assert g.quantile_bounds[0] == g.quantile_bounds[1] == g.quantile_estimate
    with pytest.raises(FitError, match="verdict-confidence"):
        judge_requirements(asked, model, series, Projection(verdict_confidence=0.5))


def test_a_parameter_not_identified_leaves_its_axis_undecided():
    """`validate` said "holds" from 15 samples whose parameters were not identified: their
    covariance is taken as 0 (exactly known) by the bounds."""
    series = pose_util.campaign(0, "correct")
    model = fit_pose_error(series)
    z = model.axes["z"]
    cov = z.cov_log.copy()
    cov[3, :] = cov[:, 3] = 0.0
    cov[3, 3] = 9.0  # se_log 3: sigma_v not identified
    model = replace(model, axes={**model.axes, "z": replace(z, cov_log=cov)})
    asked = [Requirement.parse(r) for r in ("x.p95<=1", "z.max<=1")]
    x, zr = judge_requirements(asked, model, series, Projection(n_draws=100, seed=1))
    assert x.verdict == "holds" and x.unidentified == ()
    assert zr.verdict == "undecided" and zr.unidentified == ("sigma_v",)
    assert "sigma_v of z not identified" in zr.reason() and zr.to_dict()["unidentified"]


ASKED = ("x.p95<=1", "yaw.p99<=1", "z.max<=1", "roll.rms<=1")
VERDICT_CAMPAIGNS = 100
VERDICT_CHUNK = 25


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Path:
    """Where the campaigns' results are kept for every xdist worker of the run (each is
    computed once, by the first test that asks: tests/shared_run_util.py)."""
    return run_dir(tmp_path_factory, "pose_requirements")


def _verdict_case(shared: Path, seed: int) -> tuple[np.ndarray, np.ndarray, list]:
    """(true quantiles, point-estimate quantiles, judged results) of one campaign."""
    return computed_once(shared, f"verdict{seed}", lambda: _compute_verdict_case(seed))


def _compute_verdict_case(seed: int) -> tuple[np.ndarray, np.ndarray, list]:
    series = pose_util.campaign(1000 + seed, "correct")
    model = fit_pose_error(series)
    asked = [Requirement.parse(r) for r in ASKED]
    got = judge_requirements(asked, model, series, Projection(seed=seed))
    est = np.array([g.quantile_estimate for g in got])
    return _truth(asked, model, series, 5000 + seed), est, got


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(VERDICT_CAMPAIGNS // VERDICT_CHUNK))
def test_verdict_campaign_chunk(shared: Path, chunk: int):
    """One chunk of the campaigns pooled below."""
    for seed in range(chunk * VERDICT_CHUNK, (chunk + 1) * VERDICT_CHUNK):
        _, _, got = _verdict_case(shared, seed)
        assert all(g.quantile_bounds[0] < g.quantile_bounds[1] for g in got)


def _verdicts(shared: Path, factor: float) -> list[str]:
    out = []
    for seed in range(VERDICT_CAMPAIGNS):
        truth, _, got = _verdict_case(shared, seed)
        out += [_at(g, factor * q).verdict for g, q in zip(got, truth, strict=True)]
    return out


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
def test_verdict_is_wrong_rarely_both_ways(shared: Path):
    """100 campaigns × 4 statistics (independent axes) = 400 verdicts per threshold.

    At the truth itself (the hardest place): the lower bound above the truth (a wrong
    *fails*) and the upper bound below it (a wrong *holds* for any threshold just
    under the truth) each in ≤ 30 of 400: a calibrated 95 % bound (5 %, 20 expected)
    exceeds 30 with probability 1.1 %, a 10 % one stays within with probability 5 %.
    15 % away from the truth: the wrong verdict in ≤ 2 of 400 (a calibrated bound
    misses there by more than 3 standard errors of the estimate: < 0.1 % each; a 2 %
    rate stays within with probability 1.3 %). Measured: 5.2 % and 6.5 % at the truth,
    none 15 % away."""
    at = [_verdict_case(shared, s) for s in range(VERDICT_CAMPAIGNS)]
    truth = np.concatenate([t for t, _, _ in at])
    lo = np.array([g.quantile_bounds[0] for _, _, got in at for g in got])
    hi = np.array([g.quantile_bounds[1] for _, _, got in at for g in got])
    assert np.sum(lo > truth) <= 30, np.sum(lo > truth)
    assert np.sum(hi < truth) <= 30, np.sum(hi < truth)
    assert _verdicts(shared, 1.15).count("fails") <= 2
    assert _verdicts(shared, 0.85).count("holds") <= 2


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
def test_verdict_decides_when_the_truth_is_clear_of_the_threshold(shared: Path):
    """The verdict is not merely cautious: 15 % above the truth *holds* and 15 % below
    *fails* each in ≥ 200 of 400 (measured 90 % and 96 %; a true 65 % falls below 200
    with probability < 10⁻⁹); 30 % away the right verdict in ≥ 360 of 400 (measured
    100 %; a true 96 % falls below with probability < 10⁻⁷). The point estimate of
    the quantile is median-unbiased, on which the bounds are centred: its log error
    has mean within 3 standard errors of 0."""
    assert _verdicts(shared, 1.15).count("holds") >= 200
    assert _verdicts(shared, 0.85).count("fails") >= 200
    assert _verdicts(shared, 1.3).count("holds") >= 360
    assert _verdicts(shared, 0.7).count("fails") >= 360
    cases = [_verdict_case(shared, s) for s in range(VERDICT_CAMPAIGNS)]
    err = np.concatenate([np.log(e / t) for t, e, _ in cases])
    assert abs(err.mean()) < 3 * err.std() / np.sqrt(err.size), (err.mean(), err.std())


HORIZON_S = 60.0
WINDOWS_S = (0.0, 30.0, 60.0)
EXCEED_CAMPAIGNS = 100


def _held_out_exceedances(seed: int) -> np.ndarray:
    """(sessions × windows, 2) whether each held-out 60-s p95 of |x|, |yaw| exceeds the
    95 % quantile predicted by the model refitted on the other sessions."""
    from sensorbench.characterize.pose.error_model import PoseErrorModel, fit_groups

    series = pose_util.campaign(seed, "correct")
    n = len(series)
    groups = [[j for j in range(n) if j != i] for i in range(n)]
    asked = [Requirement.parse("x.p95<=1"), Requirement.parse("yaw.p95<=1")]
    out = []
    for i, fits in enumerate(fit_groups(series, groups)):
        train = [series[j] for j in groups[i]]
        how = Projection(HORIZON_S, seed=seed * n + i)
        q = predict_requirements(asked, PoseErrorModel(fits), train, how)
        s = series[i]
        for start in WINDOWS_S:
            inside = (s.t_s - s.t_s[0] >= start) & (s.t_s - s.t_s[0] < start + HORIZON_S)
            p95 = np.quantile(np.abs(s.error[inside]), 0.95, axis=0)
            out.append([p95[0] > q[0].predicted_quantile, p95[5] > q[1].predicted_quantile])
    return np.array(out)


def _exceedances(shared: Path, seed: int) -> np.ndarray:
    return computed_once(shared, f"exceed{seed}", lambda: _held_out_exceedances(seed))


EXCEED_CHUNK = 25


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(EXCEED_CAMPAIGNS // EXCEED_CHUNK))
def test_held_out_exceedance_chunk(shared: Path, chunk: int):
    """One chunk of the campaigns pooled below."""
    for seed in range(chunk * EXCEED_CHUNK, (chunk + 1) * EXCEED_CHUNK):
        assert _exceedances(shared, seed).shape == (6 * len(WINDOWS_S), 2)


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
def test_held_out_p95_exceeds_its_predicted_quantile_5_percent_of_the_time(shared: Path):
    """Leave-one-session-out on 100 campaigns of 6 × 120 s: each held-out session's 60-s
    horizons (from 0, 30 and 60 s) against the predicted 95 % quantile of the p95 of |x|
    and |yaw|. A campaign's exceedances are correlated (shared refits, overlapping
    horizons), so the standard error is the campaigns' scatter: the rate must be within
    5 ± 2 %, a band at least 2.5 such standard errors wide. (The same on the foreign
    world: tests/test_pose_foreign.py.)"""
    per = np.array([_exceedances(shared, s).mean(axis=0) for s in range(EXCEED_CAMPAIGNS)])
    rate = per.mean(axis=0)
    se = per.std(axis=0, ddof=1) / np.sqrt(per.shape[0])
    assert np.all(se < 0.02 / 2.5), se
    assert np.all(np.abs(rate - 0.05) <= 0.02), (rate, se)


def test_an_axis_whose_fit_did_not_converge_is_not_identified():
    """A fit that stopped short of the optimum (``converged`` False: its Hessian is not the
    curvature at a maximum) states no interval, counts as not identified, so a requirement
    on that axis cannot be told, however far inside it; its output says so."""
    from sensorbench.characterize.pose.error_model import PARAMS
    from sensorbench.report.pose_display import model_table

    series = pose_util.campaign(0, "correct")
    model = fit_pose_error(series)
    model = replace(model, axes={**model.axes, "x": replace(model.axes["x"], converged=False)})
    asked = [Requirement.parse(r) for r in ("x.p95<=1", "y.p95<=1")]
    x, y = judge_requirements(asked, model, series, Projection(n_draws=100, seed=1))
    assert y.verdict == "holds" and x.verdict == "undecided" and x.unidentified == PARAMS
    assert "did not converge" in x.reason()
    doc = model.to_dict()["axes"]["x"]
    assert np.isnan(model.axes["x"].ci()).all() and not any(doc["identified"].values())
    rows = [r for r in model_table(model) if r.startswith("x ")]
    assert len(rows) == 4 and all("did not converge" in r for r in rows), rows
