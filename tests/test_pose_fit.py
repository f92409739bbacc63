"""The pose-error fit: exact likelihood, recovery, simulation-based calibration, model file."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pose_util
import pytest
from scipy.stats import chi2, kstest, multivariate_normal

from sensorbench.characterize.pose.error_model import (
    PARAMS,
    PoseErrorModel,
    QProfile,
    _nll_columns,
    _offset_normal_equations,
    _Packed,
    fit_groups,
    fit_pose_error,
    offset_qprofile,
)
from sensorbench.characterize.pose.gm_montecarlo import draw_params, simulate_errors
from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries
from sensorbench.errors import FitError


def _cdf(qp: QProfile, s):
    """``P(sigma_b ≤ s) = P(χ²_dof ≥ Q(s²))`` of a Q-profile (s in the axis unit, ≥ 0)."""
    return chi2.sf(qp.q(np.asarray(s, dtype=float) ** 2), qp.dof)


def _dense_cov(t, reloc, sb, s, tau, sv):
    seg = np.cumsum(reloc) - 1
    same = seg[:, None] == seg[None, :]
    return (
        sb**2 * same
        + s**2 * np.exp(-np.abs(t[:, None] - t[None, :]) / tau)
        + sv**2 * np.eye(t.size)
    )


def test_kalman_likelihood_equals_dense_gaussian():
    """The O(N) filter gives exactly the Gaussian likelihood of the model's covariance."""
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.05, 0.3, 60))
    t[30:] += 2.0  # a gap
    reloc = np.zeros(t.size, dtype=bool)
    reloc[[0, 17, 41]] = True
    params = np.array([[0.02, 0.03, 0.7, 0.004], [0.001, 0.05, 3.0, 0.02]])
    y = rng.standard_normal((t.size, 2)) * 0.03
    dt = np.diff(t, prepend=-np.inf)[:, None].repeat(2, axis=1)
    reset = reloc[:, None].repeat(2, axis=1)
    w, cols = np.ones_like(y), np.arange(2)
    packed = _Packed(y, dt, reset, np.zeros_like(reset), w, np.zeros(2), cols)
    got = _nll_columns(packed, cols, params, t.size)
    for c in range(2):
        cov = _dense_cov(t, reloc, *params[c])
        want = -multivariate_normal(np.zeros(t.size), cov).logpdf(y[:, c])
        assert got[c] == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_offset_normal_equations_equal_dense_gls():
    """The filter's BᵀV⁻¹B and BᵀV⁻¹y equal the dense ones (V = GM + white, a gap)."""
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.uniform(0.05, 0.3, 80))
    t[50:] += 3.0
    reloc = np.zeros(t.size, dtype=bool)
    reloc[[0, 9, 10, 33, 60]] = True  # incl. a one-sample segment
    seg = np.cumsum(reloc) - 1
    y = rng.standard_normal(t.size) * 0.02
    dt = np.diff(t, prepend=-np.inf)
    for sigma, tau, sigma_v in ((0.03, 0.7, 0.004), (0.01, 5.0, 0.02)):
        a, r = _offset_normal_equations(y, dt, seg, 5, sigma, tau, sigma_v)
        v = _dense_cov(t, reloc, 0.0, sigma, tau, sigma_v)
        b = (seg[:, None] == np.arange(5)[None]).astype(float)
        vi = np.linalg.inv(v)
        np.testing.assert_allclose(a, b.T @ vi @ b, rtol=1e-8, atol=1e-9 * np.abs(a).max())
        np.testing.assert_allclose(r, b.T @ vi @ y, rtol=1e-8, atol=1e-9 * np.abs(r).max())


def test_qprofile_is_exactly_chi2_at_the_truth():
    """Given the true sigma, tau, sigma_v, P(sigma_b ≤ truth) is uniform (exact pivot).

    400 short sessions with 2-6 segments each, where log-normal ranks are far from
    uniform; KS at 1 %.
    """
    rng = np.random.default_rng(2)
    truth = np.array([[0.004, 0.02, 2.0, 0.003]])
    u = []
    for _ in range(400):
        t, reloc = pose_util.session_design(rng, 60.0, 5.0, 15.0)
        e = simulate_errors(truth, t, reloc, 1, rng)[0]
        s = ErrorSeries(t, np.repeat(e, 6, axis=1), reloc)
        qp = offset_qprofile([s], 0, *truth[0, 1:])
        assert qp.lam.size == s.n_segments and qp.dof == s.n_segments
        u.append(float(_cdf(qp, truth[0, 0])))
        known = chi2.sf(np.sum(qp.z2 / (truth[0, 0] ** 2 + qp.lam)), qp.lam.size)
        np.testing.assert_allclose(_cdf(qp, truth[0, 0]), known)
    assert kstest(u, "uniform").pvalue > 0.01


def test_qprofile_with_the_mean_absorbed_is_chi2_with_one_dof_less():
    """An alignment that absorbs the campaign's mean error (its translation) leaves the
    offsets' mean estimated: the profile is χ² with k − 1 degrees of freedom at the
    truth. 400 campaigns of 2 short sessions sharing one absorbed mean (2-7 segments);
    KS at 1 %; the known-mean profile of the same data is not uniform (KS p < 1e-3)."""
    rng = np.random.default_rng(12)
    truth = np.array([[0.004, 0.01, 1.0, 0.002]])
    u, u_known = [], []
    for _ in range(400):
        series = []
        for _ in range(2):
            t, reloc = pose_util.session_design(rng, 30.0, 5.0, 15.0)
            series.append((t, reloc, simulate_errors(truth, t, reloc, 1, rng)[0][:, 0]))
        mean = np.mean(np.concatenate([e for _, _, e in series]))
        meta = {"mean_group": "campaign", "mean_axes": POSE_AXES}
        ss = [
            ErrorSeries(t, np.repeat((e - mean)[:, None], 6, 1), r, meta=meta) for t, r, e in series
        ]
        qp = offset_qprofile(ss, 0, *truth[0, 1:])
        assert qp.dof == qp.lam.size - 1
        u.append(float(_cdf(qp, truth[0, 0])))
        u_known.append(float(_cdf(QProfile(qp.lam, qp.z2), truth[0, 0])))
        q = qp.quantile(np.array([0.3, 0.7]))
        np.testing.assert_allclose(_cdf(qp, q[q > 0]), np.array([0.3, 0.7])[q > 0], rtol=1e-6)
    assert kstest(u, "uniform").pvalue > 0.01
    assert kstest(u_known, "uniform").pvalue < 1e-3


def test_one_absorbed_segment_leaves_sigma_b_not_identified():
    """One segment whose mean the alignment absorbed: no degree of freedom for sigma_b."""
    rng = np.random.default_rng(13)
    t, _ = pose_util.session_design(rng, 60.0, 5.0, 1e9)
    reloc = np.zeros(t.size, bool)
    e = simulate_errors(pose_util.TRUTH, t, reloc, 1, rng)[0]
    s = ErrorSeries(t, e - e.mean(axis=0), reloc, meta={"mean_group": "s", "mean_axes": POSE_AXES})
    for f in fit_pose_error([s]).axes.values():
        assert not f.identified[0] and not f.has_qprofile
        assert np.all(np.isnan(f.ci()[0]))


def test_qprofile_quantile_inverts_cdf_with_mass_at_zero():
    rng = np.random.default_rng(3)
    lam = rng.uniform(0.2, 2.0, 12) * 1e-4
    z2 = rng.chisquare(1, 12) * (lam + 0.5e-4)
    qp = QProfile(lam, z2)
    p0 = float(_cdf(qp, 0.0))
    assert p0 == pytest.approx(chi2.sf(np.sum(z2 / lam), 12))
    u = np.linspace(0.001, 0.999, 300)
    s = qp.quantile(u)
    assert np.all(np.diff(s) >= 0)
    np.testing.assert_array_equal(s[u <= p0], 0.0)
    np.testing.assert_allclose(_cdf(qp, s[u > p0]), u[u > p0], rtol=1e-9)
    assert qp.quantile(np.array(1.0)) == np.inf


def test_draws_use_sigma_b_quantile_and_keep_the_rest():
    """sigma_b's draws follow the given quantile function; the others stay log-normal."""
    rng = np.random.default_rng(4)
    lam = np.full(10, 1e-4)
    z2 = np.full(10, 2e-4)
    params = np.array([[0.01, 0.02, 2.0, 0.003]])
    cov = np.diag([0.04, 0.01, 0.09, 0.0])[None]
    qp = QProfile(lam, z2)
    p = draw_params(params, cov, 20_000, rng, [qp.quantile])
    # the draws' cdf values are uniform above the mass at 0, whose share is P(0)
    c = _cdf(qp, p[:, 0, 0])
    p0 = float(_cdf(qp, 0.0))
    assert np.mean(p[:, 0, 0] == 0.0) == pytest.approx(p0, abs=4 * math.sqrt(p0 / 20_000))
    assert kstest(c[p[:, 0, 0] > 0], "uniform", args=(p0, 1 - p0)).pvalue > 0.01
    # 4 standard errors of a log-sd estimate from n = 20 000 draws (se = sd/√(2n))
    sd = np.array([0.1, 0.3])
    assert np.all(np.abs(np.log(p[:, 0, 1:3]).std(axis=0) - sd) < 4 * sd / math.sqrt(40_000))
    np.testing.assert_allclose(p[:, 0, 3], 0.003, rtol=1e-12)


def test_fit_recovers_known_parameters_within_stated_uncertainty():
    """A 6-session campaign: every estimate within 4 stated standard errors of the truth.

    24 comparisons; if the stated se is right each |z| > 4 has probability 6e-5, so a
    failure here means a bias or an understated uncertainty.
    """
    series = pose_util.campaign(11, "correct", duration_s=200.0)
    model = fit_pose_error(series)
    for i, a in enumerate(POSE_AXES):
        f = model.axes[a]
        assert f.converged
        z = (np.log(f.values) - np.log(pose_util.TRUTH[i])) / f.se_log
        assert np.all(np.abs(z) < 4.0), (a, z)


def test_tau_far_below_the_sampling_period_is_not_identified():
    """tau = 0.02 s at ~5 Hz (a tenth of the period, phi ≤ e⁻⁸): the GM samples are white
    and tau is not identifiable. 20 campaigns of 4 × 120 s, 120 axis fits: an interval
    that excludes the truth must be as rare as the test behind "identified" allows, ≤ 5 %
    (the deviance at tau's lower bound, itself within 0.1 median spacing of the truth):
    more than 12 of 120 has probability 0.7 % at 5 %. Judged by the curvature at the
    optimum alone, 40 were identified and 20 of those excluded the truth."""
    truth = pose_util.TRUTH.copy()
    truth[:, 2] = 0.02
    excluded = 0
    for seed in range(20):
        fits = fit_groups(pose_util.campaign(seed, n_sessions=4, truth=truth), [[0, 1, 2, 3]])[0]
        for f in fits.values():
            lo, hi = f.ci()[2]
            excluded += bool(f.identified[2]) and not lo <= 0.02 <= hi
    assert excluded <= 12, excluded


def _check_sbc(
    res: dict,
    n_fits: int,
    coverage_tol: float,
    ks_params: tuple[str, ...] = ("sigma_b", "sigma", "tau_s"),
) -> None:
    for j, p in enumerate(PARAMS):
        if p == "sigma_v":
            continue
        if p in ks_params:
            ks = kstest(res["rank_u"][:, j], "uniform")
            assert ks.pvalue > 0.01, (p, ks)
        cov = res["covered95"][:, j].mean()
        assert abs(cov - 0.95) <= coverage_tol, (p, cov)
    assert res["converged"].mean() == 1.0
    assert res["rank_u"].shape[0] == n_fits


def test_simulation_based_calibration_fast():
    """SBC on 8 sessions × 6 axes = 48 fits (truths from a log-uniform prior).

    The truth's rank among draws from N(ln θ̂, stated se²) must be uniform (KS at 1 %)
    for sigma_b, sigma and tau; the 95 % intervals' coverage must be within 3 binomial
    standard errors for 48 fits: 3·sqrt(0.95·0.05/48) = 0.094.
    """
    n = 8
    res = pose_util.sbc_fits(n, seed=5, duration_s=200.0)
    _check_sbc(res, n * 6, 3.0 * math.sqrt(0.95 * 0.05 / (n * 6)))


@pytest.mark.slow
def test_simulation_based_calibration_full():
    """SBC on 100 sessions × 6 axes = 600 fits: ranks uniform (KS 1 %), coverage 95 ± 5 %.

    With ~16 segments per fit this is where sigma_b's log-normal uncertainty leaned
    high (mean rank 0.53-0.54); its Q-profile (an exact pivot given the other
    parameters) is what the ranks are taken among now, through the library's draws.
    """
    res = pose_util.sbc_fits(100, seed=7, duration_s=300.0)
    _check_sbc(res, 600, 0.05)


def _without_qprofile(doc: dict) -> dict:
    """A file written before the Q-profile: sigma_b's interval was exp(ln θ ± 1.96 se)."""
    for t in doc["axes"].values():
        del t["sigma_b_qprofile"]
        se = t["se_log"]["sigma_b"]
        t["ci95"]["sigma_b"] = [t["sigma_b"] * math.exp(s * 1.96 * se) for s in (-1, 1)]
    return doc


def test_model_file_roundtrip_and_checks(tmp_path):
    series = pose_util.campaign(3, "correct", n_sessions=2, duration_s=60.0)
    model = fit_pose_error(
        series,
        sensor="cam",
        frame="test frame",
        inputs=[{"path": "a.h5", "sha256": "00", "n_samples": 1}],
    )
    path = model.save(tmp_path / "m.toml")
    back = PoseErrorModel.load(path)
    np.testing.assert_allclose(back.params_array(), model.params_array(), rtol=1e-12)
    assert back.sensor == "cam"
    assert back.provenance["inputs"][0]["sha256"] == "00"
    assert "fit_options" in back.provenance
    text = path.read_text()
    head = tomllib.loads(text)["model"]
    assert head["software"].startswith("sensorbench") and "created_utc" in head
    (tmp_path / "bad_kind.toml").write_text(text.replace('"pose_error_gm"', '"other"'))
    with pytest.raises(FitError, match="not a pose-error model"):
        PoseErrorModel.load(tmp_path / "bad_kind.toml")
    for a in POSE_AXES:
        f, g = model.axes[a], back.axes[a]
        assert g.has_qprofile and g.qprofile.lam.size == f.n_segments
        np.testing.assert_allclose(g.ci(), f.ci(), rtol=1e-12)
    (tmp_path / "new.toml").write_text(text.replace("format_version = 1", "format_version = 9"))
    with pytest.raises(FitError, match="newer"):
        PoseErrorModel.load(tmp_path / "new.toml")
    # a file written before the Q-profile loads; its sigma_b interval is the log-normal one
    v1 = PoseErrorModel.from_dict(_without_qprofile(model.to_dict()))
    for a in POSE_AXES:
        f = v1.axes[a]
        assert not f.has_qprofile
        se = f.se_log[0]
        np.testing.assert_allclose(f.ci()[0], f.sigma_b * np.exp([-1.96 * se, 1.96 * se]), 1e-4)
        assert f.sigma_b_quantile(np.array(0.5)) == pytest.approx(f.sigma_b)
    bad = model.to_dict()
    bad["axes"]["yaw"]["sigma_b_qprofile"]["seg_var"][0] = -1.0
    with pytest.raises(FitError, match="sigma_b_qprofile"):
        PoseErrorModel.from_dict(bad)
    (tmp_path / "units.toml").write_text(text.replace('length = "m"', 'length = "mm"'))
    with pytest.raises(FitError, match="units"):
        PoseErrorModel.load(tmp_path / "units.toml")
    (tmp_path / "trunc.toml").write_text(text[: text.index("[axes.yaw]")])
    with pytest.raises(FitError, match="missing key"):
        PoseErrorModel.load(tmp_path / "trunc.toml")
    with pytest.raises(FitError, match="cannot read"):
        PoseErrorModel.load(tmp_path / "absent.toml")


def test_bad_series_are_refused():
    t = np.arange(10.0)
    with pytest.raises(FitError, match="strictly increasing"):
        ErrorSeries(t[::-1], np.zeros((10, 6)), np.zeros(10, bool))
    e = np.zeros((10, 6))
    e[3, 2] = np.nan
    with pytest.raises(FitError, match="nan"):
        ErrorSeries(t, e, np.zeros(10, bool))
    with pytest.raises(FitError, match="at least 3"):
        ErrorSeries(t[:2], np.zeros((2, 6)), np.zeros(2, bool))
    with pytest.raises(FitError, match="no sessions"):
        fit_pose_error([])
