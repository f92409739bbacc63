"""The pod geometry's fitted uncertainty carried along a path (``CalibrationError``).

Truth by Monte Carlo: draw the fitted rows' error from their covariance, dead-reckon the
same counts with each perturbed matrix (exact arcs, no linearisation) and compare the
spread of the resulting paths with the propagated variance. The path is built here from
a smooth twist (not the simulator), so the check shares no code with the propagation.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from pods_sim_util import DRIVES, simulate
from pods_util import calibration_step, calibration_variance

from sensorbench.characterize.pods.geometry_fit import fit_pods
from sensorbench.errors import FusionError, ModelFileError
from sensorbench.fusion.odometry_drift import CalibrationError, correct_creep
from sensorbench.fusion.pod_drive import load_drive
from sensorbench.fusion.pod_kinematics import (
    PodGeometry,
    integrate_path,
    load_pod_model,
    save_pod_model,
)

DRAWS = 4000


def _path_increments(k: int = 3000, dt: float = 0.005) -> np.ndarray:
    """Body increments (K, 3) of a drive that goes forward, sideways and turns (m, rad)."""
    t = np.arange(k) * dt
    vx = 0.4 * np.sin(2 * math.pi * t / 7.0) + 0.1
    vy = 0.2 * np.cos(2 * math.pi * t / 5.0)
    wz = 0.8 * np.sin(2 * math.pi * t / 3.0)
    return np.column_stack([vx, vy, wz]) * dt


def _geometry() -> PodGeometry:
    return PodGeometry.from_mounts(
        x=[0.0, 0.0, -0.12], y=[0.16, -0.16, 0.0], phi=[0.0, 0.0, math.pi / 2], c=[7.5e-5] * 3
    )


def test_propagated_variance_matches_monte_carlo_of_the_rows() -> None:
    rng = np.random.default_rng(7)
    geo = _geometry()
    w = geo.W
    # a plausible fit's row covariance: 0.05 % of each row entry's scale, correlated pods
    scale = np.abs(w).ravel() * 5e-4 + np.repeat([1.0, 1.0, 0.05], 3)
    corr = 0.3 * np.ones((9, 9)) + 0.7 * np.eye(9)
    sigma = corr * np.outer(scale, scale)
    u = _path_increments()
    dn = u @ w.T
    truth = integrate_path(u)
    pred = calibration_variance(CalibrationError(w, sigma), u, truth[:, 2])
    draws = rng.multivariate_normal(np.zeros(9), sigma, size=DRAWS)
    errs = np.empty((DRAWS, u.shape[0] + 1, 3))
    for j, d in enumerate(draws):
        u_hat = dn @ np.linalg.inv(w + d.reshape(3, 3)).T
        errs[j] = integrate_path(u_hat) - truth
    var = errs.var(axis=0)
    # sample variance of DRAWS Gaussian draws: relative sd √(2/DRAWS) = 2.2 %; 5 sd, plus
    # the first-order propagation's own error (second order in a 0.05 % perturbation)
    tol = 5 * math.sqrt(2 / DRAWS)
    for k in (500, 1500, 3000):
        np.testing.assert_allclose(var[k], pred[k], rtol=tol)
    assert np.all(pred[0] == 0)


def test_a_scale_error_grows_along_a_leg_and_cancels_on_the_way_back() -> None:
    geo = _geometry()
    u = np.zeros((400, 3))
    u[:200, 0] = 0.002  # 0.4 m forward
    u[200:, 0] = -0.002  # and back
    sigma = np.diag(np.tile([1e2, 1e2, 1e-1], 3))
    var = calibration_variance(CalibrationError(geo.W, sigma), u, np.zeros(401))
    # a scale error grows with the signed distance, so it is gone on the way back
    assert var[200, 0] > 0
    assert var[400, 0] == pytest.approx(0.0, abs=1e-12 * var[200, 0])


def test_fitted_row_covariance_reaches_the_model_file_and_back(tmp_path) -> None:
    fit = fit_pods([load_drive(simulate(tmp_path, n, 40 + i)) for i, n in enumerate(DRIVES)])
    geo = fit.geometry()
    assert geo.row_cov is not None and geo.row_cov.shape == (9, 9)
    # its diagonal blocks give the σ of c, φ, L the fit states, to first order in the rows
    # (a, b, d) = (cos φ, sin φ, L)/c
    for i, (a, b, d) in enumerate(geo.W):
        block = geo.row_cov[3 * i : 3 * i + 3, 3 * i : 3 * i + 3]
        c, h2 = fit.c[i], a * a + b * b
        jc = np.array([-a * c**3, -b * c**3, 0.0])
        jac = {"c": jc, "phi": np.array([-b / h2, a / h2, 0.0]), "lever": d * jc + [0, 0, c]}
        for k, j in jac.items():
            np.testing.assert_allclose(np.sqrt(j @ block @ j), getattr(fit, f"sigma_{k}")[i])
    path = fit.save(tmp_path / "pods.toml", {"test": True})
    back = load_pod_model(path)
    np.testing.assert_allclose(back.row_cov, geo.row_cov, rtol=1e-12)
    # a file without the table (written before it existed) loads without it
    old = save_pod_model(tmp_path / "old.toml", PodGeometry(geo.c, geo.phi, geo.lever), {})
    assert load_pod_model(old).row_cov is None


def test_a_malformed_row_covariance_is_refused(tmp_path) -> None:
    geo = _geometry()
    bad = PodGeometry(geo.c, geo.phi, geo.lever, row_cov=np.eye(9))
    path = save_pod_model(tmp_path / "pods.toml", bad, {})
    text = path.read_text().replace("row_covariance = [", "row_covariance = [[1.0], ", 1)
    path.write_text(text)
    with pytest.raises(ModelFileError, match="row_covariance"):
        load_pod_model(path)


def test_an_asymmetric_row_covariance_is_refused_not_averaged() -> None:
    # A covariance is symmetric: an asymmetric one is a caller's error, not something to
    # average away. Round-off of a computed one (C = A B Aᵀ in floating point) stays
    # within 1e-9 of its largest entry, the model file's own tolerance, and is symmetrized.
    geo = _geometry()
    rng = np.random.default_rng(3)
    a = rng.standard_normal((9, 9))
    computed = a @ np.diag(rng.uniform(1, 10, 9)) @ a.T
    computed[0, 1] *= 1 + 1e-14  # round-off of the order a product leaves
    g = PodGeometry(geo.c, geo.phi, geo.lever, row_cov=computed)
    assert np.array_equal(g.row_cov, g.row_cov.T)
    np.testing.assert_allclose(g.row_cov, computed, rtol=1e-12)
    bad = np.eye(9)
    bad[0, 1] = 0.5  # one off-diagonal term without its mirror
    with pytest.raises(FusionError, match="row covariance is not symmetric"):
        PodGeometry(geo.c, geo.phi, geo.lever, row_cov=bad)
    bad = -np.eye(9)  # symmetric, but a variance < 0
    with pytest.raises(FusionError, match="positive semi-definite"):
        PodGeometry(geo.c, geo.phi, geo.lever, row_cov=bad)


def test_the_variance_in_steps_equals_the_variance_in_one() -> None:
    # live carries the sensitivities from step to step; the seams (here every 7 frames,
    # a nan row among them) must not show
    rng = np.random.default_rng(21)
    w = rng.normal(size=(3, 3)) * 1e4
    a = rng.normal(size=(9, 9))
    cal = CalibrationError(w, a @ a.T * 1e-2)
    inc = rng.normal(size=(1000, 3)) * 1e-3
    inc[5] = np.nan
    heading = np.cumsum(rng.normal(size=1001)) * 0.1
    whole = calibration_variance(cal, inc, heading)
    at, parts = cal.start(), [np.zeros((1, 3))]
    for lo in range(0, 1000, 7):
        at, var = calibration_step(cal, at, inc[lo : lo + 7], heading[lo : lo + 8])
        parts.append(var)
    np.testing.assert_array_equal(np.vstack(parts), whole)
    assert whole.shape == (1001, 3) and np.all(whole[0] == 0)


def _creep_world() -> tuple[np.ndarray, float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """W, the frame period (s), the path's body increments, the true counts, each contact's
    speed over the floor (m/s, rolled and dragged) and v_i·|ω| (m·rad/s²) per step."""
    geo = _geometry()
    w, dt = geo.W, 0.005
    u = _path_increments(dt=dt)
    dn = u @ w.T
    drag = np.outer(u[:, 0], -np.sin(geo.phi)) + np.outer(u[:, 1], np.cos(geo.phi))
    speed = np.hypot(dn * geo.c, drag) / dt
    return w, dt, u, dn, speed, speed * np.abs(u[:, 2:]) / dt


def test_creep_variance_matches_monte_carlo_and_grows_with_distance_squared() -> None:
    # truth: each pod counts its travel short by κ_v·(v_i − v̄) + κ_t·(v_i·|ω| − ā) of it
    # (κ drawn once per path; v_i its contact's speed over the floor, rolled and dragged),
    # dead-reckoned exactly with the true W
    rng = np.random.default_rng(11)
    w, dt, u, dn, speed, accel = _creep_world()
    creep = (1e-4, 4e-4, 0.2, 0.1)  # var κ_v (s²/m²), var κ_t, v̄ (m/s), ā (m·rad/s²)
    truth = integrate_path(u)
    cal = CalibrationError(w, np.zeros((9, 9)), creep)
    pred = calibration_variance(cal, u, truth[:, 2], np.full(u.shape[0], dt))
    kv, kt = rng.normal(size=(2, DRAWS)) * np.sqrt(creep[:2])[:, None]
    errs = np.empty((DRAWS, u.shape[0] + 1, 3))
    w_inv = np.linalg.inv(w)
    for j in range(DRAWS):
        short = kv[j] * (speed - creep[2]) + kt[j] * (accel - creep[3])
        errs[j] = integrate_path((dn * (1 - short)) @ w_inv.T) - truth
    var = errs.var(axis=0)
    tol = 5 * math.sqrt(2 / DRAWS)  # as for the rows: 5 sd of a sample variance
    for k in (500, 1500, 3000):
        np.testing.assert_allclose(var[k], pred[k], rtol=tol)
    # a constant scale: twice the same straight leg, four times the variance
    leg = np.tile([[0.002, 0.0, 0.0]], (400, 1))
    straight = calibration_variance(cal, leg, np.zeros(401), np.full(400, dt))
    assert straight[400, 0] == pytest.approx(4 * straight[200, 0], rel=1e-9)


def test_correcting_by_the_true_creep_leaves_only_its_second_order() -> None:
    # the same world with one κ: the counts short by f_i = κ_v·(v_i − v̄) + κ_t·(a_i − ā);
    # corrected by κ̂ = κ through the measured counts' own speeds, what is left is of
    # order f² (the speeds are read off counts f short): halving κ halves the error
    # before the correction and quarters the one after it
    w, dt, u, dn, speed, accel = _creep_world()
    ref, truth, h = (0.2, 0.1), integrate_path(u), np.full(u.shape[0], dt)
    errors = []
    for kappa in ((0.02, 0.03), (0.01, 0.015)):
        short = kappa[0] * (speed - ref[0]) + kappa[1] * (accel - ref[1])
        measured = (dn * (1 - short)) @ np.linalg.inv(w).T
        cal = CalibrationError(w, np.zeros((9, 9)), (1e-4, 4e-4, *ref, *kappa))
        fixed = correct_creep(measured, h, cal.kernel_arrays[:3])
        errors.append([np.abs(integrate_path(p) - truth).max(axis=0) for p in (measured, fixed)])
    (before, after), (before_half, after_half) = errors
    assert np.all(before > 0.01 * np.abs(truth).max(axis=0))  # the creep is visible
    assert np.all(after < 0.1 * before), (before, after)
    np.testing.assert_allclose(before / before_half, 2, rtol=0.05)
    np.testing.assert_allclose(after / after_half, 4, rtol=0.15)
    # without estimates (4 terms) nothing is corrected
    plain = CalibrationError(w, np.zeros((9, 9)), (1e-4, 4e-4, *ref))
    np.testing.assert_array_equal(correct_creep(measured, h, plain.kernel_arrays[:3]), measured)


def test_creep_reaches_the_model_file_and_back_and_a_bad_one_is_refused(tmp_path) -> None:
    geo = _geometry()
    creep = (1e-4, 4e-4, 0.2, 0.1, -0.003, 0.002)  # variances, references, estimates
    g = PodGeometry(geo.c, geo.phi, geo.lever, row_cov=np.eye(9), slip=(1e-7, 2e-7), creep=creep)
    back = load_pod_model(save_pod_model(tmp_path / "pods.toml", g, {}))
    assert back.creep == creep
    cal = back.calibration_error()
    assert cal is not None and cal.cov.shape == (11, 11) and cal.start().shape == (3, 11)
    np.testing.assert_array_equal(np.diag(cal.cov)[-2:], creep[:2])
    path = tmp_path / "pods.toml"
    path.write_text(path.read_text().replace("creep_turn_var_s4_per_m2_rad2 = ", "x = ", 1))
    with pytest.raises(ModelFileError, match="creep_turn_var"):
        load_pod_model(path)
    with pytest.raises(FusionError, match="creep"):
        PodGeometry(geo.c, geo.phi, geo.lever, creep=(-1.0, 0.0, 0.0, 0.0))
