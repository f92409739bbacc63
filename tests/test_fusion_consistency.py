"""Honest uncertainty: filter kernels against their matrix form; NEES/coverage and the NIS
monitor against data with known truth."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sensorbench.fusion.consistency import (
    axis_consistency,
    clipped_chi2_moments,
    effective_samples,
    expected_coverage,
    nis_monitor,
)
from sensorbench.fusion.kalman_kernels import RejectStreak, clip_to_gate, predict_pv, update_p


def test_scalar_kernels_equal_the_matrix_form() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        a = rng.standard_normal((2, 2))
        P = a @ a.T + 0.1 * np.eye(2)
        x = rng.standard_normal(2)
        q, h, r = rng.uniform(0.01, 2), rng.uniform(0.001, 0.2), rng.uniform(1e-4, 1)
        F = np.array([[1.0, h], [0.0, 1.0]])
        Q = q * h * np.array([[h * h, h], [h, 1.0]])
        xp, Pp = F @ x, F @ P @ F.T + Q
        got = predict_pv(x[0], x[1], P[0, 0], P[0, 1], P[1, 1], q, h)
        np.testing.assert_allclose(got, [xp[0], xp[1], Pp[0, 0], Pp[0, 1], Pp[1, 1]], rtol=1e-12)
        H = np.array([[1.0, 0.0]])
        nu = rng.standard_normal()
        S = float((H @ Pp @ H.T)[0, 0]) + r
        K = Pp @ H.T / S
        xu, Pu = xp + K[:, 0] * nu, (np.eye(2) - K @ H) @ Pp
        got = update_p(*got, nu, S)
        np.testing.assert_allclose(got, [xu[0], xu[1], Pu[0, 0], Pu[0, 1], Pu[1, 1]], rtol=1e-10)


def test_gate_clip_and_reject_streak() -> None:
    assert clip_to_gate(10.0, 4.0, 9.0) == 6.0 and clip_to_gate(-10.0, 4.0, 9.0) == -6.0
    assert clip_to_gate(1.0, 4.0, 9.0) == 1.0
    np.testing.assert_allclose(
        clip_to_gate(np.array([5.0, -1.0]), np.array([1.0, 1.0]), 4.0), [2.0, -1.0]
    )
    st = RejectStreak(2)
    st.reject(1.0, 0.5)
    assert not st.forced
    st.reject(9.0, 0.25)  # the anchor is the odometry before the streak's first rejection
    assert st.forced and st.restored() == 1.75
    st.accept()
    assert not st.forced


def test_nees_and_coverage_of_an_honest_and_a_dishonest_claim() -> None:
    """Coverage on random-walk errors (an odometry drift); the NEES band on AR(1) errors,
    where the effective sample size is estimated within ~7 % (see effective_samples)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(5)
    n = 20000
    t = np.arange(n) * 0.01
    steps = rng.standard_normal((260, n)) * 1e-3
    var = 1e-6 * (np.arange(n) + 1)
    honest = [axis_consistency(t, np.cumsum(s), var) for s in steps[:200]]
    # pooled 2σ coverage of 200 paths: se ≈ 0.3 % (each path ~3 independent squares)
    assert abs(np.mean([c.coverage[1] for c in honest]) - expected_coverage(2.0)) < 0.02
    small = [axis_consistency(t, np.cumsum(s), var / 4) for s in steps[200:]]
    assert np.mean([c.coverage[1] for c in small]) < 0.75
    phi = 0.99
    ar = lfilter([math.sqrt(1 - phi**2)], [1, -phi], steps / 1e-3, axis=1)  # unit variance
    ones = np.ones(n)
    inside = np.mean([axis_consistency(t, e, ones).nees_consistent for e in ar[:200]])
    assert inside > 0.9  # nominal 0.95; binomial se 1.5 %
    assert np.mean([axis_consistency(t, e, ones / 2).nees_consistent for e in ar[200:]]) < 0.1


def test_effective_samples_of_white_and_correlated_series() -> None:
    rng = np.random.default_rng(2)
    white = rng.standard_normal(5000)
    assert 3500 < effective_samples(white) <= 5000
    ar = np.zeros(5000)
    e = rng.standard_normal(5000)
    for i in range(1, 5000):
        ar[i] = 0.9 * ar[i - 1] + e[i]
    # N (1 - ρ²)/(1 + ρ²) for AR(1) squared-Gaussian sums: 5000·0.19/1.81 ≈ 525
    assert 350 < effective_samples(ar) < 800
    walk = np.cumsum(rng.standard_normal(5000)) / np.sqrt(np.arange(1, 5001))
    assert effective_samples(walk) < 20  # one random-walk path: ~3 independent squares


def test_clipped_chi2_moments_match_sampling() -> None:
    x = np.minimum(np.random.default_rng(4).chisquare(1, 400_000), 6.63)
    m, v = clipped_chi2_moments(6.63)
    assert abs(x.mean() - m) < 4 * math.sqrt(v / x.size)
    assert abs(x.var() / v - 1) < 0.02


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_nis_monitor_false_alarms_and_detection(scale: float) -> None:
    rng = np.random.default_rng(6)
    nis = rng.chisquare(1, 20000)
    nis[5000:5200] *= scale * 3  # a stretch where S is 3x (or 9x) too small
    nis[100] = 1e4  # one bounce: clipped, no alarm
    mon = nis_monitor(nis, 6.63, window=50, level=0.999)
    quiet = np.r_[0:5000, 5300:20000]
    assert mon.degraded[quiet].mean() < 0.003
    assert not mon.degraded[100:150].any()
    # raised within one window of the onset, cleared within one window after the end
    assert mon.degraded[5050:5200].mean() > 0.9
    assert mon.onsets.size >= 1 and 5000 <= mon.onsets[0] <= 5050
    assert not mon.degraded[5250:5300].any()
