"""LD19 benchmarks: parser throughput vs the line rate and vs a per-packet ``struct``
parser, and the emulator's CPU use at real-time rate.

Every figure is the median of several rounds with its spread: the parser against the
reference in interleaved rounds (after one untimed run of each), the line-rate
multiples in rounds of the parser alone, the emulator's CPU in consecutive windows.
"""

from __future__ import annotations

import struct
import subprocess
import time
from dataclasses import replace

import numpy as np

from sensorbench.bench import BenchResult, Round, cpu_windows, interleave
from sensorbench.drivers.ld19_parser import BAUD, LD19Parser
from sensorbench.sim.emulator_ld19 import LD19Emulator, SyntheticLD19Samples, encode_packets

LINE_RATE_BPS = BAUD / 10  # bytes per second on a 230400 baud 8N1 line
_FMT = struct.Struct("<BBHH" + "HB" * 12 + "HHB")


def _stream(n_packets: int, corrupt_every: int = 1000) -> bytes:
    """``n_packets`` packets at 10 Hz with one corrupted byte every ``corrupt_every`` packets."""
    rng = np.random.default_rng(0)
    j = np.arange(n_packets)
    start = (j * 960) % 36000
    raw = bytearray(
        encode_packets(
            np.full(n_packets, 3600),
            start,
            (start + 880) % 36000,
            rng.integers(20, 12000, (n_packets, 12)),
            rng.integers(0, 256, (n_packets, 12)),
            (j * 8 // 3) % 30000,
        )
    )
    for p in range(5, n_packets, corrupt_every):
        raw[47 * p + 20] ^= 0x5A
    return bytes(raw)


def _crc_table() -> list[int]:
    table = []
    for b in range(256):
        crc = b
        for _ in range(8):
            crc = ((crc << 1) ^ 0x4D) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return table


def struct_reference_parse(data: bytes) -> list[tuple[int, ...]]:
    """The reference: a plain per-packet parser (find header, CRC loop, ``struct``)."""
    table = _crc_table()
    out: list[tuple[int, ...]] = []
    i = 0
    n = len(data)
    while True:
        i = data.find(b"\x54\x2c", i)
        if i < 0 or i + 47 > n:
            return out
        crc = 0
        for byte in data[i : i + 47]:
            crc = table[crc ^ byte]
        if crc == 0:
            out.append(_FMT.unpack_from(data, i))
            i += 47
        else:
            i += 1


def _parse(data: bytes, chunk: int) -> None:
    """Feed ``data`` to a new :class:`LD19Parser` in reads of ``chunk`` bytes.

    Slicing ``data`` into reads is timed too (a serial read returns new bytes).
    """
    p = LD19Parser()
    for i in range(0, len(data), chunk):
        p.feed(data[i : i + chunk])


def _check_against_reference(data: bytes) -> None:
    """The parser and the reference must decode the same packets, or no ratio is shown."""
    ref = np.array(struct_reference_parse(data), dtype=np.int64).reshape(-1, 31)  # 31 fields
    ours = LD19Parser().feed(data)
    fields = (ours.speed_deg_s, ours.start_cdeg, ours.end_cdeg, ours.timestamp_ms)
    if not (
        len(ours) == len(ref)
        and np.array_equal(np.stack(fields, axis=1), ref[:, [2, 3, 28, 29]])
        and np.array_equal(ours.distance_mm, ref[:, 4:28:2])
        and np.array_equal(ours.intensity, ref[:, 5:28:2])
    ):
        raise RuntimeError("LD19 benchmark: the parser and the struct reference disagree")


def _emulator_cpu(seconds: float, windows: int) -> tuple[Round, ...]:
    """CPU use (% of one core) of the emulator at real time while a host drains its tty."""
    samples = SyntheticLD19Samples.generate(duration_s=60.0)
    with LD19Emulator(samples, speed=1.0, startup_s=0.0) as emu:
        # stderr: cat reports EIO when the emulator closes the pty under it (expected)
        drain = subprocess.Popen(
            ["cat", emu.path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            time.sleep(0.3)
            return cpu_windows([time.process_time], seconds, windows)[0]
        finally:
            drain.terminate()
            drain.wait(5)


def run(quick: bool) -> list[BenchResult]:
    """Parser throughput (line-rate multiple, ratio vs ``struct``) and emulator CPU.

    The parser's compiled kernel is warmed up first (numba compiles it, or loads it
    from its cache, on the first call): compile time is not in any figure.
    """
    n_packets = 40_000 if quick else 400_000  # 1.9 MB / 19 MB
    rounds = 3 if quick else 5
    data = _stream(n_packets)
    live_bytes = data[: 47 * 20_000]
    rate = interleave(lambda: _parse(data, 1 << 16), rounds=rounds).rounds(
        lambda o, _: len(data) / o / LINE_RATE_BPS
    )
    live = interleave(lambda: _parse(live_bytes, 1024), rounds=rounds).rounds(
        lambda o, _: len(live_bytes) / o / LINE_RATE_BPS
    )
    # ours vs the reference on the same bytes, alternating; ours takes ~1/40 of the
    # reference's time, so each of its turns parses the bytes `reps` times
    ref_bytes = data[: 47 * (5_000 if quick else 20_000)]
    _check_against_reference(ref_bytes)
    reps = 20

    def ours(chunk: int) -> None:
        for _ in range(reps):
            _parse(ref_bytes, chunk)

    def reference() -> None:
        struct_reference_parse(ref_bytes)

    vs = interleave(lambda: ours(1 << 16), reference, rounds=rounds)
    vs_live = interleave(lambda: ours(1024), reference, rounds=rounds)
    ratio = vs.rounds(lambda o, r: r / (o / reps))
    ratio_live = vs_live.rounds(lambda o, r: r / (o / reps))
    ref_rate = len(ref_bytes) / vs.reference_median_s
    cpu = _emulator_cpu(2.0 if quick else 5.0, 4 if quick else 5)
    rate_result = BenchResult.from_rounds(
        "ld19", "parse throughput (64 KiB reads)", rate, "x line rate", target=1000.0
    )
    live_result = BenchResult.from_rounds(
        "ld19", "parse throughput (1 KiB reads, live)", live, "x line rate"
    )
    live_ratio = BenchResult.from_rounds(
        "ld19", "parse speed vs per-packet struct parser (1 KiB reads)", ratio_live, "x"
    )
    return [
        replace(
            rate_result,
            detail=f"{rate_result.value * LINE_RATE_BPS / 1e6:.0f} MB/s on one core (compiled "
            "kernel, warmed up first)",
        ),
        replace(
            live_result,
            detail=f"{live_result.value * LINE_RATE_BPS / 1e6:.0f} MB/s in the reads of a "
            "live capture",
        ),
        BenchResult.from_rounds(
            "ld19",
            "parse speed vs per-packet struct parser",
            ratio,
            "x",
            target=20.0,
            detail=f"64 KiB reads; struct reference {ref_rate / 1e6:.1f} MB/s "
            f"({ref_rate / LINE_RATE_BPS:.0f}x line rate); 1 KiB reads: "
            f"{live_ratio.value:.1f}x; same packets checked first",
        ),
        replace(live_ratio, detail="same bytes and reference as above, 1 KiB reads"),
        BenchResult.from_rounds(
            "ld19",
            "emulator CPU at real time",
            cpu,
            "% of one core",
            target=10.0,
            higher_is_better=False,
            detail="375 packets/s on a pty drained by cat; process CPU per window",
        ),
    ]
