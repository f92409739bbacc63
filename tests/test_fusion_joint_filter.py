"""Joint 6-state EKF: Jacobian, consistency on its own model, what a rejected step keeps."""

from __future__ import annotations

import math

import numpy as np
from odometry_util import nis_bounds

from sensorbench.benchmarks.joint_filter import JointFilter, chord_measurement
from sensorbench.fusion.filter_noise import AxisNoise, FilterNoise
from sensorbench.fusion.odometry_motion import FEEDFORWARD_FRAMES
from sensorbench.fusion.pod_kinematics import integrate_path, relative_poses, se2_log
from sensorbench.fusion.split_filter import SplitFilter

H = 0.005  # s, 200 Hz frames


def test_chord_measurement_jacobian_matches_central_differences() -> None:
    rng = np.random.default_rng(0)
    eps = 1e-6
    for _ in range(20):
        state = rng.normal(0.0, 1.0, 6)
        anchor = rng.normal(0.0, 1.0, 3)
        h = float(rng.uniform(0.001, 0.05))
        _, jac = chord_measurement(state, anchor, h)
        num = np.column_stack(
            [
                (
                    chord_measurement(state + e * eps, anchor, h)[0]
                    - chord_measurement(state - e * eps, anchor, h)[0]
                )
                / (2 * eps)
                for e in np.eye(6)
            ]
        )
        # central differences: truncation ~eps²·|h'''| ≈ 1e-12, rounding ~1e-16/eps ≈ 1e-10
        # on O(1) states; a wrong sign or a missing term is an O(1) error
        np.testing.assert_allclose(jac, num, atol=1e-7)


def own_model(seed: int, k: int = 4000):
    """Data from the joint model: per world axis a velocity that takes the acceleration
    the odometry has shown (fed forward as the filter predicts it,
    :func:`~sensorbench.fusion.odometry_motion.observed_accel` of the world increments
    before each step) and a random walk, white odometry error.

    The odometry pose y_k = p_k + e_k (e white, variance r per axis, y_0 = p_0 = 0);
    the body increments are the SE(2) logs of consecutive odometry poses, so their
    running composition telescopes back to y_k, as cumulative counts do, and the world
    increments the filter feeds forward are those of y.
    Returns (times, increments, true poses, noise).
    """
    q = np.array([0.001, 0.001, 0.01])  # m²/s³, m²/s³, rad²/s³
    r = np.array([1e-8, 1e-8, 1e-7])  # m², m², rad²
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 1.0, (k, 3)) * np.sqrt(q * H)
    e = rng.normal(0.0, 1.0, (k + 1, 3)) * np.sqrt(r)
    e[0] = 0.0
    m = FEEDFORWARD_FRAMES
    p, y = np.zeros((k + 1, 3)), np.zeros((k + 1, 3))
    v = np.array([0.5, 0.0, 0.8])
    for j in range(k):
        u = np.zeros(3)
        if j >= 2 * m:
            u = (y[j] - 2 * y[j - m] + y[j - 2 * m]) / (m * H) ** 2
        p[j + 1] = p[j] + v * H + 0.5 * u * H * H + w[j] * H
        v = v + u * H + w[j]
        y[j + 1] = p[j + 1] + e[j + 1]
    noise = FilterNoise(*(AxisNoise(float(a), float(b)) for a, b in zip(q, r, strict=True)))
    return np.arange(k + 1) * H, se2_log(relative_poses(y)), p, noise


def test_average_nis_is_three_on_data_from_its_own_model() -> None:
    # the mean of K independent χ²₃ NIS values lies in χ²(3K)/K's 95 % band; each seed
    # passes a correct filter 95 % of the time, over 4 seeds we allow one miss
    # (P(≥ 2 misses) = 1.4 %). A Jacobian or anchoring error shifts the mean by far
    # more than the band's half-width (±0.075 for K = 4000).
    misses = 0
    for seed in range(4):
        t, inc, _, noise = own_model(seed)
        res = JointFilter(noise, gate=math.inf).run(t, inc)
        lo, hi = nis_bounds(res.nis.size, dof=3)
        misses += not lo <= res.nis.mean() <= hi
    assert misses <= 1


def test_rejected_step_keeps_the_components_that_fit() -> None:
    # a straight 0.5 m/s drive, noise-free except one frame: the robot really turns by
    # δ = 1 mrad there (NIS of that component ≤ δ²/r_θ = 1, it fits), and the same
    # frame's forward chord carries a 5 mm glitch (~50σ: the step is rejected).
    # The anchor must keep δ (the truth includes it) and drop the glitch beyond its
    # own 99 % bound √(6.63·S_xx) ≈ 0.4 mm. Scaling the whole innovation back to the
    # 3-D gate instead kept only √(11.34/NIS) ≈ 10 % of δ: 0.9 mrad of heading lost.
    k, k0, delta = 600, 300, 1e-3
    t = np.arange(k + 1) * H
    inc = np.tile([0.5 * H, 0.0, 0.0], (k, 1))
    inc[k0, 2] += delta
    truth = integrate_path(inc)
    bad = inc.copy()
    bad[k0, 0] += 5e-3
    noise = FilterNoise(AxisNoise(0.01, 1e-8), AxisNoise(0.01, 1e-8), AxisNoise(0.01, 1e-6))
    res = JointFilter(noise).run(t, bad)
    assert not res.accepted[k0]
    assert res.rejected == 1
    # noise-free data after the frame: the estimate converges onto the odometry
    assert abs(res.pose[-1, 2] - truth[-1, 2]) < 0.05 * delta
    err = np.hypot(*(res.pose[-1, :2] - truth[-1, :2]))
    assert err < 1e-3
    # the same semantics as the split filters, which clip x alone
    split = SplitFilter(noise).run(t, bad)
    np.testing.assert_allclose(err, np.hypot(*(split.pose[-1, :2] - truth[-1, :2])), rtol=0.1)


def test_streak_of_rejections_recovers_and_is_counted() -> None:
    # a straight drive whose speed jumps from 0.5 to 2.5 m/s at once (a collision): the
    # model calls it impossible, the gate rejects a streak, then the streak's odometry
    # is restored, counted as a reset (as the split filters count theirs)
    k = 2000
    t = np.arange(k + 1) * H
    v = np.where(np.arange(k) < 1000, 0.5, 2.5)
    inc = np.column_stack([v * H, np.zeros(k), np.zeros(k)])
    noise = FilterNoise(AxisNoise(0.01, 1e-10), AxisNoise(0.01, 1e-10), AxisNoise(0.01, 1e-10))
    res = JointFilter(noise).run(t, inc)
    assert res.resets >= 1
    assert res.rejected >= res.resets
    np.testing.assert_allclose(res.pose[-1, 0], np.sum(inc[:, 0]), atol=1e-3)
    clean = JointFilter(noise).run(t, np.column_stack([np.full(k, 0.5 * H), np.zeros((k, 2))]))
    assert clean.resets == 0
