"""LD19 test helpers, written from the protocol table (docs/LD19.md), not from the driver.

``ref_crc8`` computes the CRC bit by bit from the polynomial; ``ref_decode`` is a
plain byte-by-byte parser with ``struct`` that follows the documented rules: frame
on ``54 2C``, check the CRC (and the field rules: span sanity, timestamp below
30000 ms, speed at most twice the datasheet's 13 Hz), on failure move on by one
byte; count unknown packet types right after a packet, failures before each packet
and packets lost in device-timestamp gaps (exact fractions, ties to even). Tests
compare the compiled driver and the emulator against these.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import serial
from sink_util import WriterSink

from sensorbench.drivers.ld19_parser import POINTS_PER_PACKET, LD19Packets, point_angles_cdeg
from sensorbench.logs import LidarTurns
from sensorbench.sim.emulator_ld19 import LD19Realism, SyntheticLD19Samples

MANUAL_PACKET = bytes.fromhex(
    "54 2C 68 08 AB 7E E0 00 E4 DC 00 E2 D9 00 E5 D5 00 E3 D3 00 E4 D0 00 E9 CD 00 E4"
    " CA 00 E2 C7 00 E9 C5 00 E5 C2 00 E5 C0 00 E5 BE 82 3A 1A 50"
)
MANUAL_PACKET_10HZ = bytes.fromhex(
    "54 2C 10 0E AB 7E E0 00 E4 DC 00 E2 D9 00 E5 D5 00 E3 D3 00 E4 D0 00 E9 CD 00 E4"
    " CA 00 E2 C7 00 E9 C5 00 E5 C2 00 E5 C0 00 E5 BE 82 3A 1A"
)
"""The manual's packet at 3600 deg/s (its CRC appended below): as printed, at 2152
deg/s, its 10-degree span is one the vendor SDK drops (docs/LD19.md)."""
MANUAL_FIELDS = {
    "speed": 2152,
    "start": 32427,
    "end": 33470,
    "timestamp": 6714,
    "first": (224, 228),
    "last": (192, 229),
}
_FMT = "<BBHH" + "HB" * 12 + "HHB"


def ref_crc8(data: bytes) -> int:
    """CRC-8, poly 0x4D, init 0, MSB first, no reflection, no final XOR; bit by bit."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x4D) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


@dataclass
class RefPacket:
    """One packet as decoded by the reference parser."""

    offset: int
    speed: int
    start: int
    end: int
    distance: tuple[int, ...]
    intensity: tuple[int, ...]
    timestamp: int


def ref_unpack(offset: int, raw: bytes) -> RefPacket:
    """Fields of one 47-byte packet with ``struct``."""
    f = struct.unpack(_FMT, raw)
    pts = f[4:28]
    return RefPacket(offset, f[2], f[3], f[28], tuple(pts[0::2]), tuple(pts[1::2]), f[29])


@dataclass
class RefResult:
    """Reference parse of a whole stream."""

    packets: list[RefPacket] = field(default_factory=list)
    crc_failures: int = 0
    span_failures: int = 0
    timestamp_failures: int = 0
    speed_failures: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (offset, reason)
    unknown_packets: int = 0
    failures_before: list[int] = field(default_factory=list)  # per packet
    lost_before: list[int] = field(default_factory=list)  # per packet


def ref_period_ms(p: RefPacket) -> Fraction | None:
    """12 angular steps of ``span / 11`` at the reported speed (ms); None if speed or span is 0."""
    span = (p.end - p.start) % 36000
    if p.speed == 0 or span == 0:
        return None
    step_deg = Fraction(span, 100 * 11)
    return 12 * step_deg / p.speed * 1000


REF_MAX_SPEED = 2 * 13 * 360  # deg/s: twice the LD19 datasheet's fastest scan (13 Hz)


def ref_decode(stream: bytes) -> RefResult:
    """Byte-by-byte reference parser over a complete stream."""
    out = RefResult()
    i = 0
    n = len(stream)
    failures = 0
    period: Fraction | None = None  # of the last packet that had one
    while i + 47 <= n:
        if stream[i] != 0x54 or stream[i + 1] != 0x2C:
            i += 1
            continue
        raw = stream[i : i + 47]
        if ref_crc8(raw) != 0:
            out.crc_failures += 1
            failures += 1
            i += 1
            continue
        p = ref_unpack(i, raw)
        reason = None
        # the vendor SDK's span check (lipkg.cpp): whole degrees x 250 <= speed
        span_deg = (p.end // 100 - p.start // 100) % 360
        if p.start >= 36000 or p.end >= 36000 or span_deg * 250 > p.speed:
            out.span_failures += 1
            reason = "angle"
        elif p.timestamp >= 30000:
            out.timestamp_failures += 1
            reason = "timestamp"
        elif p.speed > REF_MAX_SPEED:
            out.speed_failures += 1
            reason = "speed"
        if reason is not None:
            out.rejected.append((i, reason))
            failures += 1
            i += 1
            continue
        own = ref_period_ms(p)
        judge = period if period is not None else own
        lost = 0
        if out.packets and judge is not None:
            gap = (p.timestamp - out.packets[-1].timestamp) % 30000
            lost = max(round(gap / judge) - 1, 0)  # round(): ties to even
        period = own if own is not None else period
        out.packets.append(p)
        out.failures_before.append(failures)
        out.lost_before.append(lost)
        failures = 0
        i += 47
        if i + 1 < n and stream[i] == 0x54 and stream[i + 1] != 0x2C:
            out.unknown_packets += 1
    return out


def packet_rows(pk) -> np.ndarray:
    """``(k, 28)`` int rows (speed, start, end, timestamp, 12 distances, 12 intensities).

    Works for the driver's ``LD19Packets`` and the emulator's ``LD19Truth``.
    """
    if hasattr(pk, "speed_deg_s"):
        cols = (pk.speed_deg_s, pk.start_cdeg, pk.end_cdeg, pk.timestamp_ms)
    else:
        cols = (pk.speed, pk.start, pk.end, pk.timestamp)
    head = np.stack([np.asarray(c, dtype=np.int64) for c in cols], axis=1)
    return np.concatenate(
        (head, np.asarray(pk.distance_mm, np.int64), np.asarray(pk.intensity, np.int64)), axis=1
    )


def truth_points(truth) -> dict[str, np.ndarray]:
    """Every point an ``LD19Truth`` encodes, flat: ``t_s`` (simulated s), ``angle_cdeg``
    (0.01 deg, clockwise, as the packet encodes it), ``distance_mm``, ``intensity`` and
    ``packet`` (index of its packet in the truth)."""
    return {
        "t_s": truth.point_t_s.ravel(),
        "angle_cdeg": point_angles_cdeg(truth.start, truth.end).ravel(),
        "distance_mm": truth.distance_mm.ravel(),
        "intensity": truth.intensity.ravel(),
        "packet": np.repeat(np.arange(len(truth)), POINTS_PER_PACKET),
    }


def ref_rows(packets: list[RefPacket]) -> np.ndarray:
    """The same rows from reference packets."""
    return np.array(
        [(p.speed, p.start, p.end, p.timestamp, *p.distance, *p.intensity) for p in packets],
        dtype=np.int64,
    ).reshape(-1, 28)


def capture(ser: serial.Serial, done, quiet_s: float = 0.3, deadline_s: float = 20.0) -> bytes:
    """Read ``ser`` until ``done.is_set()`` and ``quiet_s`` without bytes (or the deadline)."""
    buf = bytearray()
    end = time.monotonic() + deadline_s
    last = time.monotonic()
    while time.monotonic() < end:
        chunk = ser.read(65536)
        now = time.monotonic()
        if chunk:
            buf += chunk
            last = now
        elif done.is_set() and now - last > quiet_s:
            break
    return bytes(buf)


MANUAL_PACKET_10HZ += bytes([ref_crc8(MANUAL_PACKET_10HZ)])


def ideal_samples(
    duration_s: float = 10.0, seed: int = 0, p_no_return: float = 0.01
) -> SyntheticLD19Samples:
    """An idealised sweep of the emulator's room: the datasheet's 4500 samples/s at a
    constant 10 Hz (exactly 450 points per turn)."""
    return SyntheticLD19Samples.generate(duration_s, seed=seed, p_no_return=p_no_return,
        samples_per_s=4500.0, realism=LD19Realism(speed_sd_deg_s=0.0))


def TurnSink() -> WriterSink[LidarTurns]:
    """A writer stand-in for an LD19 reader's link that keeps its turns."""
    return WriterSink(LidarTurns.concat)


def concat_packets(parts: list[LD19Packets]) -> LD19Packets:
    """The parser's batches ``parts`` as one, in order."""
    if not parts:
        return LD19Packets.empty()
    return LD19Packets(np.concatenate([p.fields for p in parts], axis=1),
        np.concatenate([p.distance_mm for p in parts]),
        np.concatenate([p.intensity for p in parts]))  # fmt: skip
