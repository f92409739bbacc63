"""Integration: dead reckoning with fusion.pod_kinematics from simulated counts (noise off)
follows the true path, so the simulator and the filters agree on pod kinematics."""

from __future__ import annotations

import numpy as np
import pytest

from sensorbench.errors import SimError
from sensorbench.fusion.pod_kinematics import body_increments, integrate_path
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import Simulation


@pytest.mark.parametrize("name", ["square", "figure8", "spin"])
def test_odometry_from_noise_free_counts_tracks_truth(name: str) -> None:
    sc = load_scenario(name).with_overrides(
        {
            "pods": {
                "slip_sigma_m_per_sqrt_m": 0.0,
                "scrub_sigma_m_per_sqrt_m": 0.0,
                "bounce_rate_hz": 0.0,
            },
            "lidars": {n: {"enabled": False} for n in ("ld19", "lidar_front", "lidar_rear")},
        }
    )
    sim = Simulation(sc, seed=0)
    pods = sim.pods()
    W = pods.geometry.kinematic_matrix()
    x, y, yaw = sim.trajectory.pose(pods.t_s)
    inc = body_increments(W, np.diff(pods.counts, axis=0))
    path = integrate_path(inc, (x[0], y[0], yaw[0]))
    # Counts are floors of the exact rolled distance, so each pod is at most one count
    # (75 µm) behind; through W that is ≤ 1e-3 rad of heading at any time (lever arms
    # 0.12–0.16 m), which over the ≤ 20 m drives here is ≤ 2 cm of position, and the
    # per-frame arc approximation adds far less.
    assert np.abs(path[:, 2] - yaw).max() < 1e-3
    assert np.hypot(path[:, 0] - x, path[:, 1] - y).max() < 0.02


def test_lift_and_slip_windows_change_only_their_pod_and_span() -> None:
    """A lifted wheel rolls nothing in its window; a slipping one rolls its fraction."""
    base = load_scenario("figure8").with_overrides(
        {
            "pods": {
                "slip_sigma_m_per_sqrt_m": 0.0,
                "scrub_sigma_m_per_sqrt_m": 0.0,
                "bounce_rate_hz": 0.0,
            }
        }
    )
    clean = Simulation(base, 5).pods()
    faulty = Simulation(
        base.with_overrides(
            {"pods": {"lift_windows": [[2, 10.0, 3.0]], "slip_windows": [[0, 20.0, 5.0, 0.8]]}}
        ),
        5,
    ).pods()
    d0, d1 = clean.measured_distance_m, faulty.measured_distance_m
    t = clean.t_s
    lift = (t >= 10.0) & (t <= 13.0)
    step0, step1 = np.diff(d0, axis=0), np.diff(d1, axis=0)
    inner = (t[1:] > 10.01) & (t[1:] < 12.99)
    assert np.all(step1[inner, 2] == 0) and np.any(step0[inner, 2] != 0)
    np.testing.assert_allclose(step1[~lift[1:], 1], step0[~lift[1:], 1], atol=1e-12)
    slip = (t[1:] > 20.01) & (t[1:] < 24.99)
    np.testing.assert_allclose(step1[slip, 0], 0.8 * step0[slip, 0], rtol=1e-9, atol=1e-12)
    with pytest.raises(SimError, match=r"pods\.lift_windows\[0\]: names pod 3"):
        base.with_overrides({"pods": {"lift_windows": [[3, 1.0, 1.0]]}})
