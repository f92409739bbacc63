"""RPLIDAR A1: decode throughput against the line rate, live reader and emulator CPU use.

* decode: the vectorised node decoder plus turn assembly on a synthetic standard-scan
  stream, as a multiple of the A1's 2000 nodes/s, and against the library's own
  per-node ``rplidar._process_scan`` loop on the same bytes;
* live: one :class:`~sensorbench.drivers.a1_reader.A1Reader` reading the emulator at
  real-time rate through a pty; the CPU time of each thread (reader, emulator) over the
  wall time, in % of one core.
"""

from __future__ import annotations

import time

import numpy as np
import rplidar

from sensorbench.bench import BenchResult
from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1 import TurnAssembler
from sensorbench.drivers.a1_reader import A1Reader
from sensorbench.sim.emulator_a1 import A1Emulator, RoomSamples, encode_nodes

AREA = "a1"


def _stream(n: int) -> bytes:
    s = RoomSamples.generate(duration_s=n / 2000.0 + 1.0, seed=1)
    q6 = (np.round(s.angle_deg_cw[:n] * 64).astype(np.int64) % 23040).astype(np.uint16)
    q2 = np.round(s.range_m[:n] * 4000).astype(np.uint16)
    start = np.r_[True, s.turn[1:n] != s.turn[: n - 1]]
    return encode_nodes(start, s.intensity[:n], q6, q2)


def _decode_rate(data: bytes, chunk: int) -> float:
    """Nodes per second through decode + turn assembly, fed in ``chunk``-byte reads."""
    asm = TurnAssembler()
    tail = b""
    t0 = time.perf_counter()
    n = 0
    for i in range(0, len(data), chunk):
        buf = tail + data[i : i + chunk]
        nodes, used, _ = proto.decode_nodes(buf)
        tail = buf[used:]
        asm.feed(nodes, np.zeros(len(nodes), dtype=np.int64))
        n += len(nodes)
    return n / (time.perf_counter() - t0)


def _offline_rate(data: bytes) -> float:
    """Nodes per second of one vectorised decode over a whole capture (``decode a1``)."""
    t0 = time.perf_counter()
    nodes, _, _ = proto.decode_nodes(data)
    return len(nodes) / (time.perf_counter() - t0)


def _library_rate(data: bytes) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(data), 5):
        rplidar._process_scan(data[i : i + 5])
    return len(data) / 5 / (time.perf_counter() - t0)


def _thread_cpu_s(ident: int | None) -> float:
    if ident is None:
        return float("nan")
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def _live(seconds: float) -> tuple[float, float, int]:
    """(reader CPU %, emulator CPU %, turns) over ``seconds`` of real-time scanning."""
    with A1Emulator(speed=1.0) as emu:
        reader = A1Reader("a1", emu.path, first_turn_timeout_s=3.0)
        reader.start()
        r_id, e_id = reader._thread.ident, emu._thread.ident
        r0, e0, t0 = _thread_cpu_s(r_id), _thread_cpu_s(e_id), time.monotonic()
        time.sleep(seconds)
        r1, e1, t1 = _thread_cpu_s(r_id), _thread_cpu_s(e_id), time.monotonic()
        turns = reader.turns_total
        reader.stop()
    wall = t1 - t0
    return 100 * (r1 - r0) / wall, 100 * (e1 - e0) / wall, turns


def run(quick: bool) -> list[BenchResult]:
    """Decode throughput (× line rate, × library), live reader and emulator CPU (%)."""
    n = 100_000 if quick else 400_000
    data = _stream(n)
    ours = _decode_rate(data, chunk=4096)
    small = _decode_rate(data[: 5 * 20_000], chunk=500)  # 50 ms reads at real time
    lib = _library_rate(data[: 5 * min(n, 100_000)])
    offline = _offline_rate(data)
    line = proto.NOMINAL_SAMPLES_PER_S
    reader_pct, emu_pct, turns = _live(2.0 if quick else 6.0)
    return [
        BenchResult(
            AREA,
            "decode throughput (4 KiB reads)",
            ours / line,
            "x line rate",
            100.0,
            True,
            f"{ours:,.0f} nodes/s vs the A1's {line:.0f}/s, decode + turns",
        ),
        BenchResult(
            AREA,
            "decode throughput (500 B reads)",
            small / line,
            "x line rate",
            20.0,
            True,
            f"{small:,.0f} nodes/s with the chunk size of a 50 ms poll",
        ),
        BenchResult(
            AREA,
            "offline decode vs rplidar._process_scan",
            offline / lib,
            "x",
            10.0,
            True,
            f"one decode of the whole capture {offline:,.0f} nodes/s; the library's "
            f"per-node loop {lib:,.0f} nodes/s (same bytes, decode only)",
        ),
        BenchResult(
            AREA,
            "live reader CPU",
            reader_pct,
            "% of one core",
            10.0,
            False,
            f"one A1Reader over the emulator at real time, {turns} turns",
        ),
        BenchResult(
            AREA,
            "emulator CPU at real time",
            emu_pct,
            "% of one core",
            10.0,
            False,
            "A1Emulator thread serving 2000 nodes/s at 5.5 Hz",
        ),
    ]
