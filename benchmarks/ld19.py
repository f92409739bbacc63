"""LD19 benchmarks: parser throughput vs the line rate and vs a reference parser, and the
emulator's CPU use at real-time rate.

The reference is the strongest one this machine can run: a plain C state machine
(``bench/ld19_reference.c``, compiled with the system ``cc -O2`` when the benchmark
starts, :mod:`sensorbench.benchmarks.c_reference`), fed the same reads through ``ctypes``;
without a compiler, a per-packet Python parser (find the header, CRC loop, ``struct``),
said so in the result. Both use the driver's CRC table
(:data:`~sensorbench.drivers.ld19_parser.CRC8_TABLE`) and must decode exactly the
packets ours does before any ratio is shown.

Every figure is the median of several rounds with its spread: the parser against the
reference in interleaved rounds (after one untimed run of each), the line-rate
multiples in rounds of the parser alone, the emulator's CPU in consecutive windows.
"""

from __future__ import annotations

import ctypes
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from sensorbench.benchmarks import BenchResult, Round, cpu_windows, interleave
from sensorbench.benchmarks.c_reference import CReferenceUnavailable, compiler_version, load
from sensorbench.drivers.ld19_parser import BAUD, CRC8_TABLE, LD19Parser
from sensorbench.sim.emulator_ld19 import LD19Emulator, SyntheticLD19Samples, encode_packets

LINE_RATE_BPS = BAUD / 10  # bytes per second on a 230400 baud 8N1 line
_FMT = struct.Struct("<BBHH" + "HB" * 12 + "HHB")
_FIELDS = [2, 3, *range(4, 28), 28, 29]
"""The struct fields the C reference writes, in its order (speed, start, 12 × (distance,
intensity), end, timestamp)."""


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


def struct_reference_parse(data: bytes, chunk: int = 0) -> np.ndarray:
    """The Python reference: a plain per-packet parser (find header, CRC loop, ``struct``),
    as an (n, 28) array like the C reference's (``chunk`` is ignored: it parses the whole
    capture)."""
    table = CRC8_TABLE.tolist()
    out: list[tuple[int, ...]] = []
    i = 0
    n = len(data)
    while True:
        i = data.find(b"\x54\x2c", i)
        if i < 0 or i + 47 > n:
            return np.array(out, dtype=np.int64).reshape(-1, 31)[:, _FIELDS]
        crc = 0
        for byte in data[i : i + 47]:
            crc = table[crc ^ byte]
        if crc == 0:
            out.append(_FMT.unpack_from(data, i))
            i += 47
        else:
            i += 1


def c_reference() -> Callable[[bytes, int], np.ndarray]:
    """The C state machine as ``parse(data, chunk) -> (n, 28) int32``, fed ``chunk``-byte
    reads (each a ``ctypes`` call, as a serial read would be; the pointers it passes are
    derived once per capture, so a read costs the call and the C, not the harness).

    Raises:
        CReferenceUnavailable: no compiler.
    """
    lib = load("ld19_reference")
    fn = lib.ld19_feed
    fn.restype = ctypes.c_int64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_int64]  # fmt: skip
    table = np.ascontiguousarray(CRC8_TABLE, dtype=np.uint8)

    table_p = table.ctypes.data

    def parse(data: bytes, chunk: int) -> np.ndarray:
        state = np.zeros(52, dtype=np.uint8)  # 47 bytes + int32, as the C struct
        out = np.empty((len(data) // 47 + 1, 28), dtype=np.int32)
        # every pointer derived once, before the reads: per read only the call remains
        state_p, base, row, cap = state.ctypes.data, out.ctypes.data, out.strides[0], len(out)
        found = 0
        for i in range(0, len(data), chunk):
            part = data[i : i + chunk]
            found += fn(state_p, part, len(part), table_p, base + found * row, cap - found)
        return out[:found]

    return parse


def _parse(data: bytes, chunk: int) -> None:
    """Parse ``data`` with a new :class:`LD19Parser` in reads of ``chunk`` bytes as the
    live reader does: each read into the parser's buffers, the packets taken as one batch
    where a turn ends (``LD19Protocol.consume``), the rest at the end; the C reference
    also parses each read into its output and returns a count.

    Slicing ``data`` into reads is timed too (a serial read returns new bytes).
    """
    p = LD19Parser()
    for i in range(0, len(data), chunk):
        if p.scan(data[i : i + chunk]) and p.stepped_back:
            p.take()
    p.take()


def _check_against_reference(data: bytes, reference: Callable[[bytes, int], np.ndarray]) -> None:
    """The parser and the reference must decode the same packets, or no ratio is shown."""
    ref = reference(data, 1024).astype(np.int64)
    ours = LD19Parser().feed(data)
    fields = (ours.speed_deg_s, ours.start_cdeg, ours.end_cdeg, ours.timestamp_ms)
    if not (
        len(ours) == len(ref)
        and np.array_equal(np.stack(fields, axis=1), ref[:, [0, 1, 26, 27]])
        and np.array_equal(ours.distance_mm, ref[:, 2:26:2])
        and np.array_equal(ours.intensity, ref[:, 3:26:2])
    ):
        raise RuntimeError("LD19 benchmark: the parser and the reference disagree")


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
    """Parser throughput (line-rate multiple, ratio vs the reference) and emulator CPU.

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
    # ours vs the reference on the same bytes in the same reads, alternating
    try:
        reference = c_reference()
        ref_name = f"C state machine ({compiler_version() or 'cc'} -O2)"
        ref_bytes = data
    except CReferenceUnavailable as exc:
        reference = struct_reference_parse
        ref_name = f"per-packet struct parser in Python ({exc})"
        ref_bytes = data[: 47 * (5_000 if quick else 20_000)]
    _check_against_reference(ref_bytes, reference)

    def versus(chunk: int) -> tuple[Round, ...]:
        timing = interleave(
            lambda: _parse(ref_bytes, chunk), lambda: reference(ref_bytes, chunk), rounds=rounds
        )
        return timing.rounds(lambda o, r: r / o)

    ratio, ratio_live = versus(1 << 16), versus(1024)
    cpu = _emulator_cpu(2.0 if quick else 5.0, 4 if quick else 5)
    rate_result = BenchResult.from_rounds(
        "ld19", "parse throughput (64 KiB reads)", rate, "x line rate", target=1000.0
    )
    live_result = BenchResult.from_rounds(
        "ld19", "parse throughput (1 KiB reads, live)", live, "x line rate"
    )
    live_ratio = BenchResult.from_rounds(  # target: issue 36, at least the C state machine
        "ld19", "parse speed vs reference parser (1 KiB reads)", ratio_live, "x", target=1.0
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
            "parse speed vs reference parser (64 KiB reads)",
            ratio,
            "x",
            detail=f"reference: {ref_name}, {len(ref_bytes) / 1e6:.1f} MB in the same reads; "
            "the same packets checked first",
        ),
        replace(live_ratio, detail=f"reference: {ref_name}; the reads of a live capture, a "
                "batch taken a turn as the live reader does"),
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
