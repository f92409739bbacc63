"""Trajectories: twist is the derivative of pose, limits hold, drives do what they say."""

from __future__ import annotations

import numpy as np
import pytest

from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.trajectory import build_trajectory

KINDS = ["forward", "sideways", "spin", "square", "figure8", "hold"]


def _traj(name: str, **over: object):
    sc = load_scenario(name)
    if over:
        sc = sc.with_overrides({"trajectory": over})
    r = sc.robot
    start = (r["start_xy_m"][0], r["start_xy_m"][1], np.deg2rad(r["start_yaw_deg"]))
    return sc, build_trajectory(sc.trajectory, start), np.array(start)


@pytest.mark.parametrize("name", KINDS)
def test_twist_is_the_time_derivative_of_pose(name: str) -> None:
    _, tr, _ = _traj(name)
    t = np.linspace(0.0, tr.duration_s, 4001)
    h = 1e-5
    p1, p0 = np.array(tr.pose(t + h)), np.array(tr.pose(t - h))
    vx, vy, wz = tr._eval(t)[3:]
    # Central differences err by h²/6 · jerk (jerk ≤ π·a_max/t_ramp, a few per s³ here),
    # far below the tolerance; rounding of (p(t+h) - p(t-h)) / 2h is ~1e-11 / 1e-5.
    np.testing.assert_allclose((p1 - p0) / (2 * h), [vx, vy, wz], atol=5e-5)
    bx, by, bw = tr.twist_body(t)
    _, _, yaw = tr.pose(t)
    np.testing.assert_allclose(bx, np.cos(yaw) * vx + np.sin(yaw) * vy, atol=1e-12)
    np.testing.assert_allclose(by, -np.sin(yaw) * vx + np.cos(yaw) * vy, atol=1e-12)
    np.testing.assert_array_equal(bw, wz)


@pytest.mark.parametrize("name", KINDS)
def test_speed_and_acceleration_limits_hold(name: str) -> None:
    sc, tr, _ = _traj(name)
    lim = sc.trajectory
    t = np.linspace(0.0, tr.duration_s, 20001)
    vx, vy, wz = tr._eval(t)[3:]
    assert np.hypot(vx, vy).max() <= lim["max_speed_m_s"] * (1 + 1e-9)
    assert np.abs(wz).max() <= np.deg2rad(lim["max_yaw_rate_deg_s"]) * (1 + 1e-9)
    h = 1e-6
    a = (np.array(tr._eval(t + h)[3:]) - np.array(tr._eval(t - h)[3:])) / (2 * h)
    # Finite differences straddling an acceleration step see at most the step's mean.
    assert np.hypot(a[0], a[1]).max() <= lim["max_accel_m_s2"] * (1 + 1e-3)
    assert np.abs(a[2]).max() <= np.deg2rad(lim["max_yaw_accel_deg_s2"]) * (1 + 1e-3)


@pytest.mark.parametrize("name", ["square", "spin", "figure8"])
def test_acceleration_is_continuous(name: str) -> None:
    # Smooth ramps (A sin²): the jerk is bounded by π·A/t_ramp, at most ~20 rad/s³ here
    # (A = π rad/s², ramps ≥ 0.5 s), so over 0.1 ms the acceleration changes by < 5e-3;
    # a trapezoidal profile would jump by the full 0.5 m/s² (π rad/s²) at every ramp.
    _, tr, _ = _traj(name)
    t = np.arange(0.0, tr.duration_s, 1e-4)
    h = 1e-6
    a = (np.array(tr._eval(t + h)[3:]) - np.array(tr._eval(t - h)[3:])) / (2 * h)
    assert np.abs(np.diff(a, axis=1)).max() < 5e-3


def test_square_visits_its_corners_and_closes() -> None:
    _, tr, start = _traj("square", pause_s=0.0, repeats=1, lead_in_s=0.0, lead_out_s=0.0)
    end = np.array([v[0] for v in tr.pose(np.array([tr.duration_s]))])
    np.testing.assert_allclose(end, start, atol=1e-12)
    t = np.linspace(0, tr.duration_s, 200001)
    x, y, yaw = tr.pose(t)
    for cx, cy in [(1.0, -1.0), (1.0, 1.0), (-1.0, 1.0)]:
        assert np.hypot(x - cx, y - cy).min() < 1e-4
    np.testing.assert_array_equal(yaw, 0.0)


def test_fixed_drives_excite_only_their_axis() -> None:
    for name, axis in (("forward", 0), ("sideways", 1), ("spin", 2)):
        _, tr, start = _traj(name)
        t = np.linspace(0.0, tr.duration_s, 5001)
        tw = np.array(tr.twist_body(t))
        others = [k for k in range(3) if k != axis]
        assert np.abs(tw[axis]).max() > 0.3
        np.testing.assert_array_equal(tw[others], 0.0)
        end = np.array([v[0] for v in tr.pose(np.array([tr.duration_s]))])
        np.testing.assert_allclose(end, start, atol=1e-12)  # "return" drives come back


def test_spin_turns_the_requested_angle() -> None:
    _, tr, start = _traj("spin", repeats=1, **{"return": False}, angle_deg=270.0)
    _, _, yaw = tr.pose(np.array([tr.duration_s]))
    assert yaw[0] - start[2] == pytest.approx(np.deg2rad(270.0), abs=1e-12)


def test_figure8_yaw_is_continuous_and_tangent() -> None:
    _, tr, _ = _traj("figure8")
    t = np.linspace(0.0, tr.duration_s, 200001)
    _, _, yaw = tr.pose(t)
    vx, vy, _ = tr._eval(t)[3:]
    assert np.abs(np.diff(yaw)).max() < 1e-3
    moving = np.hypot(vx, vy) > 0.05
    heading = np.arctan2(vy, vx)
    d = np.angle(np.exp(1j * (yaw - heading)))[moving]
    np.testing.assert_allclose(d, 0.0, atol=1e-9)
    # Turning number 0: each lap ends at the yaw it started with (after the initial turn
    # in place onto the tangent).
    assert yaw[-1] == pytest.approx(yaw[np.argmax(moving)], abs=1e-3)


def test_times_outside_the_run_rest_at_the_ends() -> None:
    _, tr, start = _traj("forward")
    p = np.array(tr.pose(np.array([-5.0, tr.duration_s + 5.0])))
    np.testing.assert_allclose(p[:, 0], start)
    np.testing.assert_array_equal(np.array(tr.twist_body(np.array([-1.0, 1e6]))), 0.0)
