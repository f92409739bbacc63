"""RPLIDAR A1: decode throughput against the line rate, live reader and emulator CPU use.

* decode: the live path (one compiled pass per read: framing, times, turns;
  :class:`~sensorbench.drivers.a1_turns.A1Turns`) on a synthetic standard-scan stream,
  as a multiple of the A1's 2000 nodes/s, and against the library's own per-node
  ``rplidar._process_scan`` loop on the same bytes, in the 500-byte reads of a live
  capture (what a small robot computer pays) and in one call over a whole capture;
  the same for express capsules against the express line rate (4000 samples/s);
* live: one :func:`~sensorbench.drivers.a1_reader.a1_reader` reading the emulator at
  real-time rate through a pty; the CPU time of each thread (reader, emulator) over the
  wall time, in % of one core.

Every figure is the median of several rounds with its spread: the decoder against the
library in interleaved rounds (after one untimed run of each), the line-rate
multiples in rounds of the decoder alone, the CPU use in consecutive windows.
"""

from __future__ import annotations

import time

import numpy as np
import rplidar

from sensorbench.benchmarks import BenchResult, Round, cpu_windows, interleave
from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_reader import A1Scanner, a1_reader
from sensorbench.drivers.a1_turns import A1Turns
from sensorbench.sim.a1_samples import REAL_EXPRESS_US, REAL_SAMPLE_US, RoomSamples
from sensorbench.sim.emulator_a1 import A1Emulator, encode_nodes, express_stream

AREA = "a1"


def _stream(n: int) -> bytes:
    """``n`` standard-scan nodes of the emulator's room (one per REAL_SAMPLE_US µs)."""
    s = RoomSamples.generate(duration_s=n * REAL_SAMPLE_US * 1e-6 + 1.0, seed=1)
    if s.angle_deg_cw.size < n:
        raise RuntimeError(f"A1 benchmark: {s.angle_deg_cw.size} samples generated, {n} needed")
    q6 = (np.round(s.angle_deg_cw[:n] * 64).astype(np.int64) % 23040).astype(np.uint16)
    q2 = np.round(s.range_m[:n] * 4000).astype(np.uint16)
    start = np.r_[True, s.turn[1:n] != s.turn[: n - 1]]
    return encode_nodes(start, s.intensity[:n], q6, q2)


def _express_stream(n_capsules: int) -> bytes:
    """``n_capsules`` express capsules of the emulator's room (one sample per 254 µs)."""
    s = RoomSamples.generate(
        duration_s=n_capsules * 32 * REAL_EXPRESS_US * 1e-6 + 1.0,
        samples_per_s=1e6 / REAL_EXPRESS_US,
        seed=1,
    )
    caps = express_stream(s).packets[:n_capsules]
    if caps.shape[0] < n_capsules:
        raise RuntimeError(f"A1 benchmark: {caps.shape[0]} capsules made, {n_capsules} needed")
    return caps.tobytes()


def _decode(data: bytes, chunk: int, mode: str = "standard") -> None:
    """The live path (decode, host and device times, turns) of ``data`` fed in
    ``chunk``-byte reads."""
    asm = A1Turns(mode, sample_us=REAL_SAMPLE_US if mode == "standard" else REAL_EXPRESS_US)
    for i in range(0, len(data), chunk):
        asm.feed(i, data[i : i + chunk])


def _library(data: bytes) -> None:
    """The library's per-node decode loop over ``data``."""
    for i in range(0, len(data), 5):
        rplidar._process_scan(data[i : i + 5])


def _thread_cpu_s(ident: int | None) -> float:
    if ident is None:
        return float("nan")
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def _live(seconds: float, windows: int) -> tuple[tuple[Round, ...], tuple[Round, ...], int]:
    """Reader and emulator CPU (% of one core) per window over ``seconds`` of real-time
    scanning, and the turns read."""
    with A1Emulator(speed=1.0) as emu:
        scanner = A1Scanner(emu.path)
        reader = a1_reader("a1", emu.path, scanner=scanner, first_turn_timeout_s=3.0)
        reader.start()
        r_id = reader._thread.ident if reader._thread is not None else None
        e_id = emu._thread.ident if emu._thread is not None else None
        reader_cpu, emu_cpu = cpu_windows(
            [lambda: _thread_cpu_s(r_id), lambda: _thread_cpu_s(e_id)], seconds, windows
        )
        turns = scanner.turns_total
        reader.stop()
    return reader_cpu, emu_cpu, turns


def run(quick: bool) -> list[BenchResult]:
    """Decode throughput (× line rate, × library), live reader and emulator CPU (%)."""
    n = 100_000 if quick else 400_000
    rounds = 3 if quick else 5
    data = _stream(n)
    small_data = data[: 5 * 20_000]  # 50 ms reads at real time
    lib_data = data[: 5 * min(n, 100_000)]
    line = proto.NOMINAL_SAMPLES_PER_S
    ours = interleave(lambda: _decode(data, 4096), rounds=rounds).rounds(lambda o, _: n / o / line)
    small = interleave(lambda: _decode(small_data, 500), rounds=rounds).rounds(
        lambda o, _: len(small_data) / 5 / o / line
    )
    live_vs = interleave(
        lambda: _decode(small_data, 500), lambda: _library(small_data), rounds=rounds
    ).rounds(lambda o, r: r / o)
    caps = _express_stream(2_000 if quick else 10_000)
    express = interleave(lambda: _decode(caps, 500, "express"), rounds=rounds).rounds(
        lambda o, _: len(caps) / 84 * 32 / o / proto.NOMINAL_EXPRESS_PER_S
    )
    vs = interleave(lambda: _decode(data, len(data)), lambda: _library(lib_data), rounds=rounds)
    n_lib = len(lib_data) / 5
    ratio = vs.rounds(lambda o, r: (n / o) / (n_lib / r))
    offline = n / vs.ours_median_s
    lib = n_lib / vs.reference_median_s
    reader_pct, emu_pct, turns = _live(2.0 if quick else 6.0, 4 if quick else 6)
    return [
        BenchResult.from_rounds(
            AREA,
            "decode throughput (4 KiB reads)",
            ours,
            "x line rate",
            100.0,
            True,
            f"{n:,} nodes per round vs the A1's {line:.0f}/s, decode + turns",
        ),
        BenchResult.from_rounds(
            AREA,
            "decode throughput (500 B reads)",
            small,
            "x line rate",
            20.0,
            True,
            "with the chunk size of a 50 ms poll",
        ),
        BenchResult.from_rounds(
            AREA,
            "live decode vs rplidar._process_scan (500 B reads)",
            live_vs,
            "x",
            10.0,
            True,
            "the live path (decode, host and device times, turns) against the library's "
            "per-node loop, same bytes in the same 500-byte reads",
        ),
        BenchResult.from_rounds(
            AREA,
            "express decode throughput (500 B reads)",
            express,
            "x line rate",
            20.0,
            True,
            f"{len(caps) // 84:,} capsules, decode + turns, vs the express "
            f"{proto.NOMINAL_EXPRESS_PER_S:.0f} samples/s",
        ),
        BenchResult.from_rounds(
            AREA,
            "offline decode vs rplidar._process_scan",
            ratio,
            "x",
            10.0,
            True,
            f"one decode of the whole capture {offline:,.0f} nodes/s; the library's "
            f"per-node loop {lib:,.0f} nodes/s (same bytes; ours with turns; medians)",
        ),
        BenchResult.from_rounds(
            AREA,
            "live reader CPU",
            reader_pct,
            "% of one core",
            10.0,
            False,
            f"one A1 reader over the emulator at real time, {turns} turns",
        ),
        BenchResult.from_rounds(
            AREA,
            "emulator CPU at real time",
            emu_pct,
            "% of one core",
            10.0,
            False,
            "A1Emulator thread serving 2000 nodes/s at 5.5 Hz",
        ),
    ]
