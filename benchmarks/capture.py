"""Capture cost: the capture process's CPU with the whole emulated robot at real rate,
the pod emulator's CPU, and the pod parser's throughput against a byte-by-byte
reference parser.

The four emulated devices (LD19, two A1s, pod MCU) run in a separate process
(``sensorbench emulate robot``), so only the capture's own work is measured: the
capture runs in this process and its CPU time (``time.process_time``) is taken over
the recording phase only (after bring-up), from the first to the last status tick,
split into consecutive windows at the ticks. Every figure is the median of several
rounds with its spread: CPU use per window, the parser against the reference in
interleaved rounds (after one untimed run of each).
"""

from __future__ import annotations

import binascii
import itertools
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sensorbench.benchmarks import BenchResult, Round, cpu_windows, interleave
from sensorbench.drivers import pods_protocol as proto
from sensorbench.drivers.capture import run_capture
from sensorbench.drivers.pods_parser import PodStreamParser
from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG
from sensorbench.sim.emulator_pods import encode_binary


def _capture_cpu(duration_s: float) -> BenchResult:
    with tempfile.TemporaryDirectory(prefix="sensorbench-bench-") as tmp:
        run = Path(tmp) / "run"
        emu = subprocess.Popen(
            [sys.executable, "-c", "from sensorbench.cli import main; main()", "emulate",
             "robot", "--run-dir", str(run), "--duration", str(duration_s + 60)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            if emu.stdout is None:
                raise RuntimeError("emulate robot: no stdout pipe")
            for _ in range(4):  # one line per device once they are all up
                emu.stdout.readline()
            ticks: list[tuple[float, float]] = []
            result = run_capture(
                load_robot_config(DEFAULT_CONFIG, run_dir=run),
                Path(tmp) / "bench.h5",
                duration_s,
                on_status=lambda *_: ticks.append((time.monotonic(), time.process_time())),
            )
        finally:
            emu.terminate()
            emu.wait(10)
    if len(ticks) < 2 or not result.ok:
        return BenchResult(
            "capture",
            "capture CPU, 4 devices at real rate",
            float("nan"),
            "% of one core",
            25.0,
            False,
            f"capture failed: {result.error}",
        )
    wall = ticks[-1][0] - ticks[0][0]
    cpu = ticks[-1][1] - ticks[0][1]
    windows = min(5, len(ticks) - 1)
    edges = [round(k * (len(ticks) - 1) / windows) for k in range(windows + 1)]
    rounds = tuple(
        Round(c1 - c0, None, 100.0 * (c1 - c0) / (w1 - w0))
        for (w0, c0), (w1, c1) in itertools.pairwise([ticks[e] for e in edges])
    )
    rates = ", ".join(
        f"{d.name} {d.items / result.recorded_s:.0f} {'fr' if d.kind == 'pods' else 'pt'}/s"
        for d in result.devices
    )
    total_bytes = sum(d.bytes for d in result.devices)
    return BenchResult.from_rounds(
        "capture",
        "capture CPU, 4 devices at real rate",
        rounds,
        "% of one core",
        25.0,
        False,
        f"{cpu:.2f} s CPU over {wall:.1f} s recording in {windows} windows; {rates}; "
        f"{total_bytes / result.recorded_s / 1000:.1f} kB/s raw (emulators in another process)",
    )


def _reference_parse(data: bytes) -> int:
    """Byte-by-byte reference: find sync, check len and CRC with the scalar CRC."""
    i, n, frames = 0, len(data), 0
    while i + 4 <= n:
        if data[i] != proto.SYNC0 or data[i + 1] != proto.SYNC1:
            i += 1
            continue
        length = data[i + 2]
        end = i + 3 + length + 2
        if end > n or proto.payload_length_from_flags(np.array([data[i + 3]]))[0] != length:
            i += 1
            continue
        (crc,) = struct.unpack_from("<H", data, end - 2)
        if crc != binascii.crc_hqx(data[i + 2 : end - 2], proto.CRC16_INIT):
            i += 1
            continue
        frames += 1
        i = end
    return frames


def _parse(data: bytes, chunk: int) -> int:
    """Frames :class:`PodStreamParser` finds in ``data`` fed in ``chunk``-byte reads."""
    p = PodStreamParser(3, 16)
    return sum(len(p.feed(data[i : i + chunk])) for i in range(0, len(data), chunk))


def _parser_throughput(n_frames: int, rounds: int) -> list[BenchResult]:
    rng = np.random.default_rng(0)
    counts = np.cumsum(rng.integers(-300, 300, size=(n_frames, 3)), axis=0) % 2**16
    idx = np.arange(n_frames)
    data, flen = encode_binary(idx % 2**16, idx * 5000 % 2**32, counts, 16,
                               rng.normal(size=n_frames).astype(np.float32),
                               rng.normal(size=n_frames).astype(np.float32))  # fmt: skip
    chunk = 4096
    got, ref = _parse(data, chunk), _reference_parse(data)
    if not got == ref == n_frames:
        raise RuntimeError(f"pod benchmark: parser {got}, reference {ref}, sent {n_frames}")
    vs = interleave(lambda: _parse(data, chunk), lambda: _reference_parse(data), rounds=rounds)
    ours = vs.ours_median_s
    reference = vs.reference_median_s
    line_rate = 200.0  # frames/s of the MCU at its default rate
    return [
        BenchResult.from_rounds("capture", "pod parser vs byte-by-byte reference",
                    vs.rounds(lambda o, r: r / o), "x", None, True,
                    f"{got / ours:.0f} frames/s vs {ref / reference:.0f} frames/s (medians), "
                    f"{flen}-byte frames in {chunk}-byte reads"),
        BenchResult.from_rounds("capture", "pod parser vs MCU line rate",
                    vs.rounds(lambda o, _: got / o / line_rate), "x",
                    10.0, True, "frames decoded per second / 200 frames/s sent (≥ 10: keeps "
                    "up with a 10x emulation)"),
    ]  # fmt: skip


def _pod_emulator_cpu(seconds: float, windows: int) -> BenchResult:
    """The pod emulator alone at real rate; `cat` drains the pty in another process."""
    from sensorbench.sim.emulator_pods import PodEmulator
    from sensorbench.sim.simulation import Simulation

    em = PodEmulator(Simulation("square", seed=0).pods(), loop=True)
    drain = subprocess.Popen(["cat", em.path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        em.start()
        time.sleep(0.5)
        w0, b0 = time.monotonic(), em.port.stats.bytes_delivered
        (cpu,) = cpu_windows([time.process_time], seconds, windows)
        w1, b1 = time.monotonic(), em.port.stats.bytes_delivered
    finally:
        em.stop()
        drain.terminate()
        drain.wait(5)
    return BenchResult.from_rounds(
        "capture", "pod emulator CPU at real rate", cpu, "% of one core", 10.0, False,
        f"{(b1 - b0) / (w1 - w0):.0f} B/s delivered (200 binary frames/s with IMU)",
    )  # fmt: skip


def run(quick: bool) -> list[BenchResult]:
    """Capture CPU at real rate (quick: 5 s, else 20 s), the pod emulator's CPU, and
    the pod parser's throughput."""
    results = _parser_throughput(20_000 if quick else 100_000, 3 if quick else 5)
    if os.name == "posix":
        results.insert(0, _pod_emulator_cpu(3.0 if quick else 10.0, 3 if quick else 5))
        results.insert(0, _capture_cpu(5.0 if quick else 20.0))
    return results
