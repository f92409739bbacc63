"""Simulator speed: seconds simulated per CPU second, and vectorised vs naive ray casting.

The emulators replay the simulator's streams at up to 10× real time and the demo
simulates whole campaigns, so the simulator must run far faster than real time.

The ray caster's reference is the plain per-ray loop in Python floats (``math``, the
segments and circles as lists), checked to give the same ranges. It used to compute in
numpy scalars (``np.cos`` per ray, iterating numpy rows), about 6× slower, which read
32× against the 20× target; against the plain loop the target is missed (docs/SIMULATION.md).
"""

from __future__ import annotations

import math
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
    """Reference: one ray at a time against one segment or circle at a time, pure Python
    in Python floats (``math``, lists: numpy scalars cost several times more per operation)."""
    segments, circles = world.segments.tolist(), world.circles.tolist()
    ox, oy = float(origin[0]), float(origin[1])
    out = []
    for a in angles.tolist():
        ux, uy = math.cos(a), math.sin(a)
        best = math.inf
        for px, py, qx, qy in segments:
            dx, dy = qx - px, qy - py
            den = ux * dy - uy * dx
            if den == 0:
                continue
            wx, wy = px - ox, py - oy
            t = (wx * dy - wy * dx) / den
            s = (wx * uy - wy * ux) / den
            if t > 1e-12 and 0.0 <= s <= 1.0:
                best = min(best, t)
        for cx, cy, r in circles:
            fx, fy = ox - cx, oy - cy
            b = fx * ux + fy * uy
            disc = b * b - (fx * fx + fy * fy - r * r)
            if disc >= 0:
                sq = math.sqrt(disc)
                t = -b - sq if -b - sq > 1e-12 else -b + sq
                if t > 1e-12:
                    best = min(best, t)
        out.append(best)
    return np.array(out)


def _rays(quick: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ray-cast figure's rays: angles (rad) around the origin (m) in the static lab."""
    angles = np.linspace(0.0, 2 * np.pi, 300 if quick else 1000, endpoint=False)
    return angles, np.array([-1.4, 0.0])


def _ray_cast(world: World, quick: bool, rounds: int) -> BenchResult:
    """The vectorised ray caster against the per-ray loop, interleaved (after checking
    that both give the same ranges)."""
    angles, origin = _rays(quick)
    reps = 20
    if not np.allclose(world.raycast(origin, angles), _naive_raycast(world, origin, angles),
                       rtol=0, atol=1e-9):  # fmt: skip
        raise RuntimeError("sim benchmark: the per-ray loop's ranges differ from the ray caster's")

    def vectorised() -> None:
        for _ in range(reps):
            world.raycast(origin, angles)

    ray = interleave(vectorised, lambda: _naive_raycast(world, origin, angles), rounds=rounds)
    return BenchResult.from_rounds(
        AREA, "ray cast: vectorised vs per-ray loop",
        ray.rounds(lambda o, r: r / (o / reps)), "x faster", 20.0, True,
        f"{angles.size} rays x {len(world.segments)} segments + {len(world.circles)} circles "
        f"({reps} vectorised casts per round) against a loop in Python floats; the same "
        "ranges (within 1e-9 m, checked)",
    )  # fmt: skip


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
    results.append(_ray_cast(static.world, quick, rounds))
    return results
