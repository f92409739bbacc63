"""Lidar benchmarks: dual-scan merge throughput and the cost of characterizing LD19 data.

Both workloads are synthetic and built here: an 8 m × 6 m room with two boxes,
ray-cast once on a fine bearing table, then sampled like the lidars do (jittered
turn periods, phase drift, range noise by distance, skipped turns, false points).
Each figure is the median of 3 timed rounds after one untimed run, with the spread;
what is timed is what is reported (the characterization of the minutes built, not a
scaled hour).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sensorbench.benchmarks import BenchResult, interleave
from sensorbench.characterize.lidar.stats import characterize_turns
from sensorbench.fusion.scan_merge import MergeSetup, Mount, merge_scans
from sensorbench.logs import LidarTurns

_TABLE_N = 36000  # ray-cast bearings per turn of the lookup table (0.01°)


def _room_table() -> np.ndarray:
    """Ranges (m) from (0.3, 0.2) at 36000 bearings in the 8 × 6 m room with two boxes."""
    from sensorbench.sim.world import Obstacle, World, box_vertices

    walls = np.array([[-4.0, -3.0], [4.0, -3.0], [4.0, 3.0], [-4.0, 3.0]])
    world = World(
        [
            Obstacle("walls", "wall", walls),
            Obstacle("b1", "box", box_vertices((1.5, 1.0), (0.6, 0.4), 0.3)),
            Obstacle("b2", "box", box_vertices((-2.0, -1.2), (0.8, 0.8), 0.0)),
        ]
    )
    return world.raycast(np.array([0.3, 0.2]), np.arange(_TABLE_N) * 2 * np.pi / _TABLE_N)


def _scan(
    table: np.ndarray,
    n_turns: int,
    points: int,
    rate_hz: float,
    rng: np.random.Generator,
    skip_prob: float = 0.0,
    yaw_rate: float = 0.0,
    mount_yaw: float = 0.0,
    t0_s: float = 0.0,
) -> LidarTurns:
    """Static-room turns sampled from the table: ``points`` per turn, CW spin, stored CCW."""
    period = 1.0 / rate_hz + 0.004 * rng.standard_normal(n_turns)
    start = t0_s + np.concatenate([[0.0], np.cumsum(period[:-1])])
    seen = rng.random(n_turns) >= skip_prob
    seen[0] = True
    start, period = start[seen], period[seen]
    n = start.size
    frac = np.tile(np.arange(points) / points, n)
    t = np.repeat(start, points) + frac * np.repeat(period, points)
    stored = np.mod(-2 * np.pi * frac + rng.uniform(0, 0.01), 2 * np.pi)
    world_bearing = np.mod(stored + mount_yaw + yaw_rate * t, 2 * np.pi)
    true_r = table[np.floor(world_bearing / (2 * np.pi) * _TABLE_N).astype(np.int64) % _TABLE_N]
    sigma = np.where(true_r < 2.0, 0.005, np.where(true_r < 3.0, 0.008, 0.015))
    r = true_r + sigma * rng.standard_normal(true_r.size)
    false = rng.random(r.size) < 0.002
    r[false] = rng.uniform(0.1, 8.0, int(false.sum()))
    t_ns = np.rint(t * 1e9).astype(np.int64)
    first = t_ns[::points]
    return LidarTurns(
        first, first, np.full(n, rate_hz), np.full(n, points), np.zeros(n),
        stored, r, np.full(r.size, 200), t_ns,
    )  # fmt: skip


def _bench_merge(quick: bool, table: np.ndarray) -> BenchResult:
    rng = np.random.default_rng(1)
    n = 200 if quick else 1000
    front = _scan(table, n, 500, 10.0, rng, yaw_rate=0.5)
    rear = _scan(table, n, 500, 10.0, rng, yaw_rate=0.5, mount_yaw=np.pi, t0_s=0.03)
    setup = MergeSetup(
        Mount(0.2, 0.0, 0.0),
        Mount(-0.2, 0.0, np.pi),
        footprint=np.array([[-0.3, -0.3], [0.3, -0.3], [0.3, 0.3], [-0.3, 0.3]]),
        pose_at=lambda t_ns: (0 * t_ns, 0 * t_ns, 0.5e-9 * t_ns),
    )
    pairs = merge_scans(front, rear, setup).turns.n_turns
    timing = interleave(lambda: merge_scans(front, rear, setup), rounds=3)
    result = BenchResult.from_rounds(
        area="lidar",
        name="merged pairs/s (2 × 500 pts)",
        rounds=timing.rounds(lambda o, _: pairs / o),
        unit="pairs/s",
        target=500.0,
    )
    return replace(
        result,
        detail=f"{pairs} pairs per round with motion compensation and footprint; "
        f"{result.value / 10.0:.0f}× real time at 10 Hz",
    )


def _bench_characterize(quick: bool, table: np.ndarray) -> BenchResult:
    rng = np.random.default_rng(2)
    minutes = 3 if quick else 15
    turns = _scan(table, int(minutes * 60 * 10), 450, 10.0, rng, skip_prob=0.015)
    skipped = characterize_turns(turns, device="ld19", model="LD19").timing.skipped_turns
    timing = interleave(lambda: characterize_turns(turns, device="ld19", model="LD19"), rounds=3)
    result = BenchResult.from_rounds(
        area="lidar",
        name=f"characterize {minutes} min of LD19",
        rounds=timing.rounds(lambda o, _: o),
        unit="s",
        target=None,
        higher_is_better=False,
    )
    return replace(
        result,
        detail=(
            f"{turns.n_points / 1e6:.1f} M points ({minutes} min at 10 Hz, {skipped} skipped "
            f"turns) per round; {minutes * 60 / result.value:.0f}× faster than recording them"
        ),
    )


def run(quick: bool) -> list[BenchResult]:
    """Merge throughput and characterization cost (see the module docstring)."""
    table = _room_table()
    return [_bench_merge(quick, table), _bench_characterize(quick, table)]
