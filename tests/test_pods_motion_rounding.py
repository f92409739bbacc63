"""The split filters' motion input (observed jerk, its noise), the encoder rounding's
expected variance, and the noise model's new keys —
each against a truth computed a different way (Monte Carlo, closed forms, a filter
run on data drawn from the stated law)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sensorbench.fusion.odometry_drift import PodSlip
from sensorbench.fusion.odometry_motion import jerk_noise_gains, observed_jerk
from sensorbench.fusion.pod_kinematics import expected_frac_variance


def test_jerk_noise_gains_bound_the_noise_of_the_observed_jerk() -> None:
    # pure noise, no motion: white rounding R at each frame end plus slip S per step
    rng = np.random.default_rng(3)
    k, n = 400, 400
    dt = np.full(k, 0.005)
    r_var, s_var = 4e-10, 2e-9
    sq = []
    for _ in range(n):
        e = rng.normal(0.0, math.sqrt(r_var), k + 1)
        z = np.diff(e) + rng.normal(0.0, math.sqrt(s_var), k)
        sq.append(observed_jerk(dt, z)[-100:] ** 2)
    measured = float(np.mean(sq))
    gains = float(jerk_noise_gains(dt, np.full(k, r_var), np.full(k, s_var))[-1])
    # 40 000 correlated squares (100 per run, the windows 60 frames long): the Monte
    # Carlo mean is known to about 4 %; ignoring the windows' shared ends would state 2/3
    assert gains == pytest.approx(measured, rel=0.1), (measured, gains)
    # and they are linear in each input (the noise fit relies on it)
    twice = jerk_noise_gains(dt, np.full(k, 2 * r_var), np.full(k, 2 * s_var))[-1]
    assert twice == pytest.approx(2 * gains, rel=1e-12)


def test_expected_fractional_variance_matches_monte_carlo_and_its_limits() -> None:
    rng = np.random.default_rng(4)
    for mu, sd in ((0.3, 0.2), (16.5, 0.05), (2.0, 0.0), (7.1, 1.0)):
        d = rng.normal(mu, sd, 400_000) if sd > 0 else np.full(10, mu)
        f = d - np.floor(d)
        mc = float(np.mean(f * (1 - f)))
        got = float(expected_frac_variance(np.array([mu]), np.array([sd * sd]))[0])
        # Monte Carlo standard error < 2e-4; the series' truncation < 3e-3 at σ = 0
        assert got == pytest.approx(mc, abs=3e-3), (mu, sd, got, mc)


def test_expected_fractional_variance_of_a_long_replay_stays_near_its_input_size() -> None:
    # an hour at 200 Hz is 720 000 frames × 3 pods; built as one (frames, pods, terms)
    # array the series took 40× the input at once. Here 100 000 × 3 (2.4 MB per array)
    # must peak under 10× that
    import tracemalloc

    rng = np.random.default_rng(3)
    mu = rng.uniform(0.0, 60.0, (100_000, 3))
    s2 = rng.exponential(0.02, (100_000, 3))
    tracemalloc.start()
    expected_frac_variance(mu, s2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 * mu.nbytes, peak / mu.nbytes


def test_slip_parts_add_up_to_the_whole() -> None:
    W = np.array([[13000.0, 0.0, -2100.0], [13000.0, 0.0, 2100.0], [0.0, 13000.0, -1600.0]])
    slip = PodSlip(W, 2.5e-7, 1e-6)
    inc = np.array([[0.002, 0.0005, 0.01], [0.0, 0.002, -0.02]])
    roll, drag = slip.step_covariance_parts(inc)
    np.testing.assert_allclose(roll + drag, slip.step_covariances(inc), rtol=1e-12)
