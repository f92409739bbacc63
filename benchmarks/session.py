"""Session-file throughput: the writer against the full robot's data rate, the reader in points/s.

The full robot, per second: one LD19 (4500 points, 375 packets of 47 bytes), two
A1s (2000 points and 10 000 raw bytes each), pods at 1 kHz (24-byte frames). The
writer benchmark pushes a minute of that, as the drivers would (one append per
turn, raw chunk or pod batch), from one thread and times until the file is closed.
Each figure is the median of 3 rounds (a new file per writer round) after one
untimed run, with the spread.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from sensorbench.benchmarks import BenchResult, interleave
from sensorbench.logs import NO_DEVICE_TIME, EncoderBatch, LidarTurns, Session, SessionWriter

AREA = "session"
LIDARS = {"ld19": (4500, 10.0, 375 * 47), "front": (2000, 5.5, 10_000), "rear": (2000, 5.5, 10_000)}
POD_HZ = 1000
POD_FRAME_BYTES = 24


def _payload() -> tuple[dict, dict, EncoderBatch, bytes]:
    """100 ms of robot data: lidar turns and raw bytes per lidar, a pod batch and its bytes."""
    rng = np.random.default_rng(0)
    turns = {}
    for name, (rate, hz, _) in LIDARS.items():
        n = int(rate / hz)
        t0, dev, speed, count, flags = (np.array([x]) for x in (0, NO_DEVICE_TIME, hz, n, 0))
        turns[name] = LidarTurns(
            t0, dev, speed, count, flags,
            np.linspace(0, 6.28, n, dtype=np.float32),
            rng.uniform(0.1, 12, n).astype(np.float32),
            rng.integers(0, 255, n),
            np.arange(n, dtype=np.int64) * 200_000,
        )
    raw = {name: rng.bytes(nbytes // 10) for name, (_, _, nbytes) in LIDARS.items()}
    frames = np.arange(POD_HZ // 10, dtype=np.int64)
    none = np.full(frames.size, np.nan)
    counts = rng.integers(0, 10_000, (frames.size, 3))
    pods = EncoderBatch(frames, frames * 0 + NO_DEVICE_TIME, frames, counts, none, none)
    return turns, raw, pods, rng.bytes(POD_HZ // 10 * POD_FRAME_BYTES)


def _write(path: Path, seconds: int, payload: tuple[dict, dict, EncoderBatch, bytes]) -> None:
    """Write ``seconds`` of robot data (replacing ``path``) and close the file.

    A live (SWMR) writer, as capture's: it never replaces a file, so the previous
    round's is removed first.
    """
    turns, raw, pods, pod_raw = payload
    path.unlink(missing_ok=True)
    w = SessionWriter(path, label="bench")
    for name in LIDARS:
        w.add_lidar(name)
        w.add_raw(name)
    w.add_encoder("pods", 3)
    w.add_raw("pods")
    w.start()
    for tick in range(seconds * 10):  # 100 ms of data per tick
        t = tick * 100_000_000
        for name, (_, hz, _) in LIDARS.items():
            for _ in range(max(1, round(hz / 10))):
                w.append_turns(name, turns[name])
            for _ in range(4):
                w.append_raw(name, t, raw[name][: len(raw[name]) // 4])
        w.append_encoder("pods", pods)
        w.append_raw("pods", t, pod_raw)
    w.close()


def run(quick: bool) -> list[BenchResult]:
    """Writer throughput as a multiple of real time; reader throughput in points/s."""
    seconds = 20 if quick else 60
    rounds = 3
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.h5"
        payload = _payload()
        wall = time.perf_counter  # the writer thread and the disk: wall time
        written = interleave(lambda: _write(path, seconds, payload), rounds=rounds, clock=wall)
        with Session(path) as s:
            n_points = sum(s.lidar(n).n_points for n in LIDARS)
            read = sum(s.lidar(n).read().n_points for n in LIDARS)
            reads = interleave(
                lambda: [s.lidar(n).read() for n in LIDARS], rounds=rounds, clock=wall
            ).rounds(lambda o, _: read / o)
        size_mb = path.stat().st_size / 1e6
    write_s = written.ours_median_s
    return [
        BenchResult.from_rounds(
            AREA,
            "writer throughput vs full robot real-time rate",
            written.rounds(lambda o, _: seconds / o),
            "x real time",
            target=50,
            detail=f"{seconds} s of LD19 + 2 A1 + pods + raw bytes ({n_points} points, "
            f"{size_mb:.1f} MB) written and closed in {write_s:.2f} s (median round)",
        ),
        BenchResult.from_rounds(
            AREA,
            "reader throughput, lidar arrays",
            reads,
            "points/s",
            target=10e6,
            detail=f"{read} points (angle, range, intensity, time) per round",
        ),
    ]
