"""The NEES band's effective sample size from the filters' own error model
(:mod:`~sensorbench.fusion.nees_samples`), against a Monte Carlo of that model.

Realisations are drawn here, not through the model's formulas: a geometry error δW drawn
from the fit's row covariance (the counts made by ``W − δW``), every pod's rolled distance
slipping per step by the wheels' law, a start error, and the odometry dead-reckoned with
exact arcs through the fitted W. The path (arcs, a spin, a reversal) turns the geometry
error's effect through every direction.
"""

from __future__ import annotations

import math

import numpy as np

from sensorbench.fusion.nees_samples import SharedErrors, model_effective_samples
from sensorbench.fusion.odometry_drift import CalibrationError, PodSlip
from sensorbench.fusion.pod_kinematics import PodGeometry, integrate_path

ROLL, DRAG = 4e-8, 1.5e-7
VAR0 = (1e-8, 2e-8, 1e-6)
WHITE = np.array([1e-8, 1e-8, 2.5e-7])
"""A reference's white noise per sample (0.1 mm, 0.5 mrad), as a replay adds it."""
DRAWS = 8000


def _case() -> tuple[PodGeometry, np.ndarray, np.ndarray, PodSlip]:
    geo = PodGeometry.from_mounts(
        x=[0.01, 0.0, -0.12], y=[0.16, -0.16, 0.0], phi=[0.0, 0.0, math.pi / 2], c=[7.5e-5] * 3
    )
    t = np.arange(1500) / 50.0  # 30 s at 50 Hz
    u = (
        np.column_stack([0.3 * np.sin(t / 4), 0.1 * np.cos(t / 3), 0.5 * np.sin(t / 5) + 0.2])
        / 50.0
    )
    # the rows' covariance: 0.01 % of each row's scale, correlated within a pod
    scale = np.abs(geo.W).max(axis=1)
    block = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.0]])
    sig = np.kron(np.diag((1e-4 * scale) ** 2), block)
    return geo, u, sig, PodSlip(geo.W, ROLL, DRAG)


def test_model_effective_samples_match_the_monte_carlo_of_the_model() -> None:
    """The truth is 2/Var(mean z²) over 8000 realisations, z at 300 samples along the path
    divided by the model's variance plus a white reference noise. For a mean of squares
    held by ν ≈ 1.5–2 shared factors the sample variance has a relative s.e. of
    √((2 + 12/ν)/8000) ≈ 3.5 %: the model's N_eff must agree within 15 % (4 s.e.). The
    model's covariance of the errors at the 300 samples must match the sample covariance
    within 5 % (Frobenius; a covariance of a few shared factors from 8000 draws is good
    to ~√(2/8000) ≈ 1.6 %). The geometry error (0.01 % of each row) and the slip are
    small enough that dead reckoning is linear in them (the bias of the exact arcs
    stays below 0.03 σ): the model is a linearisation, and this checks its algebra."""
    geo, u, sig, law = _case()
    rng = np.random.default_rng(2)
    w = geo.W
    w_inv = np.linalg.pinv(w)
    truth = integrate_path(u)
    c = geo.c
    roll = np.abs(u @ w.T) * c
    perp = np.abs(-np.sin(geo.phi) * u[:, :1] + np.cos(geo.phi) * u[:, 1:2])
    sd_ticks = np.sqrt(ROLL * roll + DRAG * perp) / c
    frames = np.linspace(0, u.shape[0], 300).round().astype(np.int64)
    chol = np.linalg.cholesky(sig)
    err = np.empty((DRAWS, frames.size, 3))
    for k in range(DRAWS):
        d_w = (chol @ rng.standard_normal(sig.shape[0])).reshape(w.shape)
        dn = u @ (w - d_w).T + sd_ticks * rng.standard_normal(sd_ticks.shape)
        start = np.sqrt(VAR0) * rng.standard_normal(3)
        path = integrate_path(dn @ w_inv.T, pose0=start)
        err[k] = (path - truth)[frames] + np.sqrt(WHITE) * rng.standard_normal((frames.size, 3))
    shared = SharedErrors(
        increments=u,
        heading=truth[:, 2],
        var0=VAR0,
        step_cov=law.step_covariances(u),
        calibration=CalibrationError(w, sig),
    )
    cov = shared.covariances(frames)
    for a in range(3):
        # the whole 300 × 300 covariance, off-diagonal structure included
        emp = np.cov(err[:, :, a], rowvar=False) - WHITE[a] * np.eye(frames.size)
        assert np.linalg.norm(emp - cov[a]) < 0.05 * np.linalg.norm(cov[a]), a
    var = np.stack([np.diag(cov[a]) for a in range(3)], axis=1) + WHITE
    n_eff = model_effective_samples(shared, frames, var)
    mean_z2 = np.mean(err**2 / var, axis=1)  # (draws, 3)
    truth_n_eff = 2.0 / mean_z2.var(axis=0, ddof=1)
    np.testing.assert_allclose(n_eff, truth_n_eff, rtol=0.15)
    assert np.all(n_eff < 20), n_eff  # a shared path: far fewer than its 300 samples


def test_white_remainder_counts_every_sample() -> None:
    """With nothing shared (no slip, no calibration, no start) every sample is its own."""
    u = np.zeros((100, 3))
    shared = SharedErrors(u, np.zeros(101), (0.0, 0.0, 0.0), drift_var=np.zeros((100, 3)))
    frames = np.arange(0, 101, 2)
    assert np.allclose(model_effective_samples(shared, frames, np.ones((frames.size, 3))), 51)
