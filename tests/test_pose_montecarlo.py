"""Monte Carlo of the pose-error model: right covariance, reproducible, statistics exact."""

from __future__ import annotations

import numpy as np
import pose_util

from sensorbench.characterize.pose.gm_montecarlo import (
    draw_params,
    error_statistics,
    growth_masks,
    simulate_errors,
    simulate_statistics,
)

PARAMS = np.array([[0.02, 0.03, 0.8, 0.01], [0.0, 0.05, 3.0, 0.001]])


def _design():
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.uniform(0.05, 0.15, 80))
    t[40:] += 1.5
    reloc = np.zeros(t.size, dtype=bool)
    reloc[[0, 25, 60]] = True
    return t, reloc


def test_simulated_covariance_matches_model():
    """Sample covariance of 20 000 draws vs the model's, within 5 standard errors.

    For Gaussian draws the sample covariance c_ij has standard error
    sqrt((Σ_ii Σ_jj + Σ_ij²) / B); 5 se over the few hundred entries checked.
    """
    t, reloc = _design()
    b = 20_000
    sims = simulate_errors(PARAMS, t, reloc, b, seed=3)
    seg = np.cumsum(reloc) - 1
    idx = np.arange(0, t.size, 4)
    for a in range(2):
        sb, s, tau, sv = PARAMS[a]
        ti, si = t[idx], seg[idx]
        model = (
            sb**2 * (si[:, None] == si[None, :])
            + s**2 * np.exp(-np.abs(ti[:, None] - ti[None, :]) / tau)
            + sv**2 * np.eye(idx.size)
        )
        x = sims[:, idx, a]
        emp = x.T @ x / b
        se = np.sqrt((np.outer(np.diag(model), np.diag(model)) + model**2) / b)
        assert np.all(np.abs(emp - model) < 5 * se)


def test_reproducible_by_seed_and_the_same_draws_whichever_function_is_asked():
    t, reloc = _design()
    a = simulate_errors(PARAMS, t, reloc, 50, seed=9)
    b = simulate_errors(PARAMS, t, reloc, 50, seed=9)
    c = simulate_errors(PARAMS, t, reloc, 50, seed=10)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)
    s1 = simulate_statistics(PARAMS, t, reloc, 50, seed=9)
    direct = error_statistics(t, reloc, a.transpose(1, 0, 2).reshape(t.size, -1))
    for k, v in direct.items():
        np.testing.assert_allclose(s1[k], v.reshape(50, 2), rtol=1e-12, err_msg=k)


def test_draws_do_not_depend_on_how_many_are_asked_for():
    """Lanes run in blocks; a draw's series depends only on the seed and its index."""
    t, reloc = _design()
    many = simulate_errors(PARAMS, t, reloc, 300, seed=4)  # 600 lanes: several blocks
    few = simulate_errors(PARAMS, t, reloc, 7, seed=4)
    np.testing.assert_array_equal(many[:7], few)


def test_statistics_equal_direct_formulas():
    rng = np.random.default_rng(2)
    t, reloc = _design()
    e = rng.standard_normal((t.size, 3, 2)).cumsum(axis=0)
    got = {k: v.reshape(3, 2) for k, v in error_statistics(t, reloc, e.reshape(t.size, 6)).items()}
    x = e.transpose(1, 2, 0)  # (B, A, N)
    np.testing.assert_allclose(got["rms"], np.sqrt(np.mean(x**2, axis=-1)))
    np.testing.assert_allclose(got["mean"], x.mean(axis=-1))
    np.testing.assert_allclose(got["max_abs"], np.abs(x).max(axis=-1))
    xc = x - x.mean(axis=-1, keepdims=True)
    lag1 = np.sum(xc[..., 1:] * xc[..., :-1], axis=-1) / np.sum(xc**2, axis=-1)
    np.testing.assert_allclose(got["lag1"], lag1, rtol=1e-10)
    early, late = growth_masks(t, reloc)
    growth = np.sqrt(np.mean(x[..., late] ** 2, axis=-1) / np.mean(x[..., early] ** 2, axis=-1))
    np.testing.assert_allclose(got["growth"], growth, rtol=1e-10)


def test_growth_masks_are_quarters_of_each_segment_in_time():
    t, reloc = _design()
    early, late = growth_masks(t, reloc)
    seg = np.cumsum(reloc) - 1
    for s in range(3):
        ts = t[seg == s]
        frac = (ts - ts[0]) / (ts[-1] - ts[0])
        np.testing.assert_array_equal(early[seg == s], frac < 0.25)
        np.testing.assert_array_equal(late[seg == s], frac >= 0.75)


def test_growth_without_mean_removal_separates_random_walk_from_gm():
    """Random walk restarted at relocalizations grows; GM with the same variance does not."""
    rng = np.random.default_rng(4)
    t, reloc = pose_util.session_design(rng, 600.0, 10.0, 30.0)
    rw = pose_util.random_walk_errors(rng, t, reloc, pose_util.TRUTH)
    g_rw = error_statistics(t, reloc, rw)["growth"]
    sims = simulate_statistics(pose_util.TRUTH, t, reloc, 300, seed=1)["growth"]
    # growth of GM draws: centred near 1; the random walk's is above nearly all draws
    assert np.all(np.abs(np.median(sims, axis=0) - 1.0) < 0.15)
    assert np.mean(g_rw[None, :] > sims) > 0.9


def test_parameter_draws_follow_stated_log_normal():
    rng = np.random.default_rng(0)
    cov = np.zeros((2, 4, 4))
    cov[0] = np.diag([0.01, 0.04, 0.09, 0.0])
    base = PARAMS + np.array([[0.0, 0, 0, 0], [1e-3, 0, 0, 0]])  # no zero sigma_b
    p = draw_params(base, cov, 20_000, rng)
    lp = np.log(p[:, 0, :])
    np.testing.assert_allclose(lp.std(axis=0), [0.1, 0.2, 0.3, 0.0], atol=0.01)
    np.testing.assert_allclose(p[:, 1, :], np.broadcast_to(base[1], (20_000, 4)))
