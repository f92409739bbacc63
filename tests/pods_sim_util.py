"""Simulated pod sessions for the pod fit, replay and honesty tests: a scenario's drive
with its lidars and pose sensor switched off (only the pods and the truth are written)."""

from __future__ import annotations

from pathlib import Path

from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session

DRIVES = ("forward", "sideways", "spin", "square")


def simulate(tmp: Path, name: str, seed: int, trajectory: dict | None = None) -> Path:
    sc = load_scenario(name)
    off = {n: {"enabled": False, "model": p["model"]} for n, p in sc.lidars.items()}
    overrides = {"lidars": off, "pose_sensor": {"enabled": False}}
    if trajectory:
        overrides["trajectory"] = trajectory
    sc = sc.with_overrides(overrides)
    return simulate_to_session(sc, seed, tmp / f"{name}_{seed}.h5", overwrite=True)
