"""Simulator speed: seconds simulated per CPU second, and vectorised vs naive ray casting.

The emulators replay the simulator's streams at up to 10× real time and the demo
simulates whole campaigns, so the simulator must run far faster than real time.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from sensorbench.benchmarks import BenchResult, interleave
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import Simulation, simulate_to_session
from sensorbench.sim.world import World

AREA = "sim"


def _all_streams(sim: Simulation) -> int:
    n = sum(len(sim.lidar(name)) for name in sim.lidar_names())
    n += sim.pods().t_s.size + sim.mocap().t_s.size + sim.pose_sensor().t_s.size
    return n


def _naive_raycast(world: World, origin: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Reference: one ray at a time against one segment or circle at a time, pure Python."""
    out = np.full(angles.size, np.inf)
    ox, oy = float(origin[0]), float(origin[1])
    for k, a in enumerate(angles):
        ux, uy = np.cos(a), np.sin(a)
        best = np.inf
        for px, py, qx, qy in world.segments:
            dx, dy = qx - px, qy - py
            den = ux * dy - uy * dx
            if den == 0:
                continue
            wx, wy = px - ox, py - oy
            t = (wx * dy - wy * dx) / den
            s = (wx * uy - wy * ux) / den
            if t > 1e-12 and 0.0 <= s <= 1.0:
                best = min(best, t)
        for cx, cy, r in world.circles:
            fx, fy = ox - cx, oy - cy
            b = fx * ux + fy * uy
            disc = b * b - (fx * fx + fy * fy - r * r)
            if disc >= 0:
                sq = disc**0.5
                t = -b - sq if -b - sq > 1e-12 else -b + sq
                if t > 1e-12:
                    best = min(best, t)
        out[k] = best
    return out


def run(quick: bool) -> list[BenchResult]:
    """Simulated seconds per CPU second (in memory and to a session file), LD19 samples per
    CPU second against the device's real rate (4545/s), and the ray caster against a per-ray loop.

    Each figure is the median of 3 rounds (CPU time) after one untimed run; the ray
    caster and the per-ray loop alternate in each round.
    """
    sc = load_scenario("square")
    if quick:
        sc = sc.with_overrides({"trajectory": {"repeats": 1}})
    rounds = 3
    sim = Simulation(sc, seed=1)
    n = _all_streams(sim)
    mem = interleave(lambda: _all_streams(Simulation(sc, seed=1)), rounds=rounds)
    mem_rounds = mem.rounds(lambda o, _: sim.duration_s / o)
    results = [BenchResult.from_rounds(
        AREA, "square, all sensors, in memory", mem_rounds, "x real time", 10.0, True,
        f"{sim.duration_s:.1f} s simulated, {n} samples, "
        f"{mem.ours_median_s:.2f} s CPU",
    )]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "square.h5"
        written = interleave(
            lambda: simulate_to_session(sc, 1, out, overwrite=True), rounds=rounds
        )
    results.append(BenchResult.from_rounds(
        AREA, "square, all sensors, session file",
        written.rounds(lambda o, _: sim.duration_s / o), "x real time", 10.0, True,
        f"simulate_to_session incl. /truth, {written.ours_median_s:.2f} s CPU",
    ))
    static_sc = load_scenario("lidar_static").with_overrides(
        {"trajectory": {"hold_s": 20.0 if quick else 60.0}})
    static = Simulation(static_sc, seed=1)
    n_ls = len(static.lidar("ld19"))
    ld19_rate = static_sc.lidars["ld19"]["samples_per_s"]  # the device kind's by default
    cast = interleave(
        lambda: Simulation(static_sc, seed=1).lidar("ld19"), rounds=rounds
    )
    results.append(BenchResult.from_rounds(
        AREA, "LD19 samples vs device rate", cast.rounds(lambda o, _: n_ls / o / ld19_rate),
        "x line rate", 10.0, True,
        f"{n_ls} samples ray cast with noise/outliers in "
        f"{cast.ours_median_s:.3f} s CPU",
    ))
    world = static.world
    angles = np.linspace(0.0, 2 * np.pi, 300 if quick else 1000, endpoint=False)
    origin = np.array([-1.4, 0.0])
    reps = 20
    ref = _naive_raycast(world, origin, angles)
    ours = world.raycast(origin, angles)
    same = bool(np.allclose(ours, ref, rtol=0, atol=1e-9))

    def vectorised() -> None:
        for _ in range(reps):
            world.raycast(origin, angles)

    ray = interleave(vectorised, lambda: _naive_raycast(world, origin, angles), rounds=rounds)
    results.append(BenchResult.from_rounds(
        AREA, "ray cast: vectorised vs per-ray loop",
        ray.rounds(lambda o, r: r / (o / reps)), "x faster", 20.0, True,
        f"{angles.size} rays x {len(world.segments)} segments + {len(world.circles)} circles "
        f"({reps} vectorised casts per round); identical ranges: {same}",
    ))
    return results
