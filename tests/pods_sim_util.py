"""Simulated pod sessions for the pod fit, replay and honesty tests: a scenario's drive
with its lidars and pose sensor switched off (only the pods and the truth are written)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from sensorbench.fusion.pod_kinematics import PodGeometry
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session

DRIVES = ("forward", "sideways", "spin", "square")


def simulate(
    tmp: Path, name: str, seed: int, trajectory: dict | None = None, imu: bool = True
) -> Path:
    sc = load_scenario(name)
    off = {n: {"enabled": False, "model": p["model"]} for n, p in sc.lidars.items()}
    overrides: dict = {"lidars": off, "pose_sensor": {"enabled": False}}
    if not imu:
        overrides["imu"] = {"enabled": False}
    if trajectory:
        overrides["trajectory"] = trajectory
    sc = sc.with_overrides(overrides)
    suffix = "" if imu else "_noimu"
    return simulate_to_session(sc, seed, tmp / f"{name}_{seed}{suffix}.h5", overwrite=True)


def true_geometry(law: bool) -> PodGeometry:
    """The simulator's own pod geometry (no fit), with the simulator's own slip law or
    without one."""
    p = load_scenario("forward").pods
    pos = np.asarray(p["positions_m"])
    cpr = np.asarray(p["counts_per_rev"])
    c = 2 * np.pi * np.asarray(p["wheel_radius_m"]) / cpr
    geo = PodGeometry.from_mounts(
        pos[:, 0], pos[:, 1], np.radians(p["rolling_angles_deg"]), c, ("l", "r", "p"), cpr
    )
    if law:
        slip = (p["slip_sigma_m_per_sqrt_m"] ** 2, p["scrub_sigma_m_per_sqrt_m"] ** 2)
        geo = dataclasses.replace(geo, slip=slip)
    return geo
