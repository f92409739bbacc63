"""Vectorised LD19 packet parser over numpy buffers.

The LD19 streams 47-byte packets (see ``docs`` HARDWARE.md, LD19 section)::

    0  0x54 header            6   12 x (distance uint16 mm, intensity uint8)
    1  0x2C type|count        42  end angle uint16, 0.01 deg
    2  speed uint16 deg/s     44  timestamp uint16 ms, wraps at 30000
    4  start angle 0.01 deg   46  CRC-8 (poly 0x4D) of bytes 0..45

Each :meth:`LD19Parser.feed` call appends the new bytes to the unconsumed tail of
the previous call, finds every candidate header ``0x54 0x2C`` at once, checks the
CRC of all candidates together (47 table lookups over a strided ``(k, 47)`` view),
applies a span sanity check and then accepts packets the way a byte-by-byte parser
would: from the current position, the first candidate that passes; after a failure
the search moves on by one byte (never by 47). All state lives in the instance, so
any number of lidars can be parsed in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BAUD = 230400  # LD19 line rate (baud, 8N1)
HEADER = 0x54
VER_LEN = 0x2C
PACKET_SIZE = 47
POINTS_PER_PACKET = 12
TIMESTAMP_MODULUS_MS = 30000
CRC_POLY = 0x4D
ANGLE_MODULUS_CDEG = 36000

# byte columns of the little-endian fields, for column gathers of (k, 47) packet rows
_U16_COLUMNS = np.array([2, 3, 4, 5, 42, 43, 44, 45])  # speed, start, end, timestamp
_DISTANCE_COLUMNS = np.array([6 + 3 * i + b for i in range(12) for b in (0, 1)])
_INTENSITY_COLUMNS = np.array([8 + 3 * i for i in range(12)])
PACKET_DTYPE = np.dtype(
    [
        ("header", "u1"),
        ("ver_len", "u1"),
        ("speed", "<u2"),
        ("start", "<u2"),
        ("points", [("distance", "<u2"), ("intensity", "u1")], (POINTS_PER_PACKET,)),
        ("end", "<u2"),
        ("timestamp", "<u2"),
        ("crc", "u1"),
    ]
)
assert PACKET_DTYPE.itemsize == PACKET_SIZE


def build_crc8_table(poly: int = CRC_POLY) -> np.ndarray:
    """CRC-8 lookup table for ``poly`` (MSB first, no reflection), as uint8[256]."""
    crc = np.arange(256, dtype=np.uint16)
    for _ in range(8):
        crc = np.where(crc & 0x80, (crc << 1) ^ poly, crc << 1) & 0xFF
    return crc.astype(np.uint8)


CRC8_TABLE = build_crc8_table()


def crc8(data: bytes | np.ndarray) -> int:
    """CRC-8/LD19 (poly 0x4D, init 0, no reflection, no final XOR) of ``data``."""
    crc = 0
    for byte in np.frombuffer(bytes(data), dtype=np.uint8):
        crc = int(CRC8_TABLE[crc ^ int(byte)])
    return crc


def _position_tables(table: np.ndarray, max_len: int) -> np.ndarray:
    """``T[d, v]``: CRC of byte ``v`` followed by ``d`` zero bytes (uint8[max_len, 256]).

    With init 0 and no final XOR the CRC is linear over GF(2), so the CRC of a message
    is the XOR over its bytes of ``T[bytes after it, byte]``: one gather and one XOR
    reduction for many messages at once, no loop over byte positions.
    """
    out = np.empty((max_len, 256), dtype=np.uint8)
    out[0] = table
    for d in range(1, max_len):
        out[d] = table[out[d - 1]]
    return out


# flat per-position tables, plus one zero entry that padding columns point at
_CRC_POS = np.concatenate((_position_tables(CRC8_TABLE, PACKET_SIZE).ravel(), [0])).astype(np.uint8)
_CRC_ZERO = np.uint16(PACKET_SIZE * 256)


def crc8_rows(block: np.ndarray) -> np.ndarray:
    """CRC-8 of every row of a ``(k, m)`` uint8 array at once (``m <= 47``), as uint8[k].

    One gather of per-position table entries (padded to a multiple of 8 bytes), then
    the XOR of each row, 8 bytes at a time through a uint64 view.
    """
    k, m = block.shape
    if m > PACKET_SIZE:
        raise ValueError(f"rows of at most {PACKET_SIZE} bytes, got {m}")
    width = max(8, -(-m // 8) * 8)
    idx = np.full((k, width), _CRC_ZERO, dtype=np.uint16)
    np.add(block, np.arange(m - 1, -1, -1, dtype=np.uint16) * 256, out=idx[:, :m])
    words = np.take(_CRC_POS, idx).view(np.uint64)
    x = words[:, 0].copy()
    for j in range(1, words.shape[1]):
        x ^= words[:, j]
    x ^= x >> 32
    x ^= x >> 16
    x ^= x >> 8
    return (x & 0xFF).astype(np.uint8)


def point_angles_cdeg(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Native (clockwise) angles of the 12 points of each packet, 0.01 deg, in [0, 36000).

    step = ((end - start) mod 36000) / 11 with float division (the official SDK
    divides integers and loses up to 0.1 deg).
    """
    start = np.asarray(start, dtype=np.float64)
    span = np.mod(np.asarray(end, dtype=np.float64) - start, ANGLE_MODULUS_CDEG)
    step = span / (POINTS_PER_PACKET - 1)
    i = np.arange(POINTS_PER_PACKET, dtype=np.float64)
    return np.mod(start[..., None] + step[..., None] * i, ANGLE_MODULUS_CDEG)


@dataclass
class LD19Packets:
    """Decoded packets, ``k`` of them, in stream order.

    Attributes:
        speed_deg_s: rotation speed reported by the device (deg/s; 3600 = 10 Hz).
        start_cdeg, end_cdeg: start and end angle of the packet (0.01 deg, clockwise).
        timestamp_ms: device timestamp (ms, wraps at 30000).
        distance_mm: ``(k, 12)`` distances (mm; 0 = no return).
        intensity: ``(k, 12)`` intensities (0..255).
        host_ns: host receive time of the read that completed each packet (ns).
        stream_offset: offset of each packet's first byte in the parser's input
            stream (bytes since construction or the last :meth:`LD19Parser.reset`).
        failures_before: candidate packets rejected (CRC or span sanity) since the
            previous accepted packet.
        lost_before: packets missing before this one, from the device-timestamp gap.
    """

    speed_deg_s: np.ndarray
    start_cdeg: np.ndarray
    end_cdeg: np.ndarray
    timestamp_ms: np.ndarray
    distance_mm: np.ndarray
    intensity: np.ndarray
    host_ns: np.ndarray
    stream_offset: np.ndarray
    failures_before: np.ndarray
    lost_before: np.ndarray

    def __len__(self) -> int:
        return int(self.speed_deg_s.shape[0])

    def angles_cdeg(self) -> np.ndarray:
        """``(k, 12)`` native clockwise point angles (0.01 deg) in [0, 36000)."""
        return point_angles_cdeg(self.start_cdeg, self.end_cdeg)

    @classmethod
    def empty(cls) -> LD19Packets:
        """No packets."""
        return cls.from_blocks(np.zeros((0, PACKET_SIZE), np.uint8), 0, np.zeros(0, np.int64))

    @classmethod
    def from_blocks(
        cls,
        blk: np.ndarray,
        host_ns: int,
        stream_offset: np.ndarray,
        head: np.ndarray | None = None,
    ) -> LD19Packets:
        """Decode the fields of ``(k, 47)`` packet bytes (little-endian, per the table).

        Args:
            blk: packet bytes, one packet per row.
            host_ns: host receive time given to every packet (ns).
            stream_offset: offset of each packet in the parser's input stream.
            head: ``(k, 4)`` speed, start, end, timestamp if already extracted.
        """
        k = blk.shape[0]
        if head is None:
            head = blk.take(_U16_COLUMNS, axis=1).view("<u2")
        return cls(
            speed_deg_s=head[:, 0],
            start_cdeg=head[:, 1],
            end_cdeg=head[:, 2],
            timestamp_ms=head[:, 3],
            distance_mm=blk.take(_DISTANCE_COLUMNS, axis=1).view("<u2"),
            intensity=blk.take(_INTENSITY_COLUMNS, axis=1),
            host_ns=np.full(k, host_ns, dtype=np.int64),
            stream_offset=np.asarray(stream_offset, dtype=np.int64),
            failures_before=np.zeros(k, dtype=np.int64),
            lost_before=np.zeros(k, dtype=np.int64),
        )

    @classmethod
    def concat(cls, parts: list[LD19Packets]) -> LD19Packets:
        """Concatenate batches in order."""
        if not parts:
            return cls.empty()
        names = cls.__dataclass_fields__
        return cls(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})


@dataclass
class ParserCounters:
    """What the parser saw since construction or :meth:`LD19Parser.reset`.

    Attributes:
        bytes: bytes fed.
        packets: packets accepted (CRC and span sanity passed).
        crc_failures: candidate headers examined whose CRC failed.
        bytes_skipped: bytes discarded outside accepted packets (garbage,
            failed packets, unknown packet types).
        unknown_packets: ``0x54`` headers of another type (e.g. ``0xE0`` health)
            found where the next packet was expected, right after a good packet.
        span_failures: packets with a good CRC whose angles are impossible
            (angle >= 360 deg or a span above ``max_span_cdeg``); rejected.
        timestamp_gaps: device-timestamp gaps between consecutive accepted packets
            longer than one packet period.
        lost_packets: packets missing in those gaps (gap / period - 1, rounded).
    """

    bytes: int = 0
    packets: int = 0
    crc_failures: int = 0
    bytes_skipped: int = 0
    unknown_packets: int = 0
    span_failures: int = 0
    timestamp_gaps: int = 0
    lost_packets: int = 0


class LD19Parser:
    """Incremental, vectorised LD19 packet parser; one instance per device.

    Args:
        max_span_cdeg: largest plausible angular span of one packet (0.01 deg).
            12 points at the slowest usable speed span well under 36 deg.
    """

    def __init__(self, max_span_cdeg: int = 3600) -> None:
        self.max_span_cdeg = int(max_span_cdeg)
        self.reset()

    def reset(self) -> None:
        """Forget the tail, the stream position, the last timestamp and all counters."""
        self._tail = np.zeros(0, dtype=np.uint8)
        self._tail_offset = 0
        self._expect_header_at = -1  # stream offset right after the last good packet
        self._last_ts: int | None = None
        self._last_period_ms: float | None = None
        self._pending_failures = 0
        self.counters = ParserCounters()

    def resync(self) -> None:
        """Drop the unconsumed tail and the timestamp history (e.g. after a reconnect).

        Counters are kept; the tail bytes are counted as skipped.
        """
        self.counters.bytes_skipped += int(self._tail.size)
        self._tail_offset += int(self._tail.size)
        self._tail = np.zeros(0, dtype=np.uint8)
        self._expect_header_at = -1
        self._last_ts = None
        self._last_period_ms = None
        self._pending_failures = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes kept from earlier reads that may still start a packet."""
        return int(self._tail.size)

    def feed(
        self, data: bytes | bytearray | memoryview | np.ndarray, host_ns: int = 0
    ) -> LD19Packets:
        """Parse ``data`` (appended to the kept tail); return the packets it completes.

        Args:
            data: raw bytes as received.
            host_ns: host receive time of ``data`` (ns), given to every packet it completes.
        """
        new = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        self.counters.bytes += int(new.size)
        buf = np.concatenate((self._tail, new)) if self._tail.size else new
        base = self._tail_offset
        n = int(buf.size)
        last_start = n - PACKET_SIZE  # last index where a whole packet fits
        if last_start < 0:
            self._tail = buf.copy() if buf is new else buf
            return LD19Packets.empty()

        hdr = np.flatnonzero(buf[: last_start + 1] == HEADER)
        cand = hdr[buf[hdr + 1] == VER_LEN]
        # the strided (n, 47) view: row i = the 47 bytes from i; rows of candidates
        windows = np.ndarray((last_start + 1, PACKET_SIZE), np.uint8, buf, 0, (1, 1))
        block = windows[cand]
        crc_ok = crc8_rows(block) == 0
        head = block.take(_U16_COLUMNS, axis=1).view("<u2")  # speed, start, end, timestamp
        start = head[:, 1].astype(np.int64)
        end = head[:, 2].astype(np.int64)
        good = crc_ok & (start < ANGLE_MODULUS_CDEG) & (end < ANGLE_MODULUS_CDEG)
        good &= np.mod(end - start, ANGLE_MODULUS_CDEG) <= self.max_span_cdeg

        c = self.counters
        bad = np.flatnonzero(~good)
        accepted = self._select(cand if bad.size == 0 else cand[good])
        if bad.size == 0 and accepted.size == cand.size:
            sel: slice | np.ndarray = slice(None)  # the common case: every candidate is a packet
        else:
            sel = np.searchsorted(cand, accepted)
        failed = cand[:0]
        if bad.size:
            # rejected candidates a sequential parser examines: those outside accepted packets
            outside = self._outside(cand[bad], accepted)
            failed = cand[bad][outside]
            c.crc_failures += int(np.count_nonzero(~crc_ok[bad] & outside))
            c.span_failures += int(np.count_nonzero(crc_ok[bad] & outside))
        c.packets += int(accepted.size)
        self._count_unknown(buf, base, accepted)

        consumed_to = int(accepted[-1]) + PACKET_SIZE if accepted.size else 0
        keep_from = max(consumed_to, last_start + 1)
        c.bytes_skipped += keep_from - PACKET_SIZE * int(accepted.size)
        self._tail = buf[keep_from:].copy()
        self._tail_offset = base + keep_from

        out = LD19Packets.from_blocks(block[sel], host_ns, accepted + base, head[sel])
        if failed.size or self._pending_failures:
            per = np.bincount(np.searchsorted(accepted, failed), minlength=accepted.size + 1)
            per[0] += self._pending_failures
            out.failures_before = per[:-1].astype(np.int64)
            self._pending_failures = int(per[-1])
        self._count_gaps(out)
        return out

    @staticmethod
    def _select(valid: np.ndarray) -> np.ndarray:
        """Non-overlapping packets, first valid candidate from the current position on."""
        if valid.size < 2 or np.all(np.diff(valid) >= PACKET_SIZE):
            return valid
        keep = []
        pos = -PACKET_SIZE
        for v in valid.tolist():
            if v >= pos:
                keep.append(v)
                pos = v + PACKET_SIZE
        return np.asarray(keep, dtype=np.int64)

    @staticmethod
    def _outside(cand: np.ndarray, accepted: np.ndarray) -> np.ndarray:
        """Mask of candidates that do not lie strictly inside an accepted packet."""
        if accepted.size == 0:
            return np.ones(cand.size, dtype=bool)
        idx = np.searchsorted(accepted, cand, side="right") - 1
        inside = (
            (idx >= 0)
            & (cand > accepted[np.maximum(idx, 0)])
            & (cand < accepted[np.maximum(idx, 0)] + PACKET_SIZE)
        )
        return ~inside

    def _count_unknown(self, buf: np.ndarray, base: int, accepted: np.ndarray) -> None:
        """Count ``0x54 <other type>`` found exactly where the next packet was expected."""
        if accepted.size:
            ends = accepted + PACKET_SIZE
            # positions right after a packet not followed by another packet
            expected = np.append(ends[:-1][accepted[1:] != ends[:-1]], ends[-1])
        else:
            expected = accepted
        if self._expect_header_at >= 0:
            first = self._expect_header_at - base
            if not (accepted.size and accepted[0] == first):
                expected = np.concatenate(([first], expected))
        self._expect_header_at = -1
        checkable = expected + 1 < buf.size
        if expected.size and not checkable[-1]:
            self._expect_header_at = int(expected[-1]) + base
        e = expected[checkable]
        self.counters.unknown_packets += int(
            np.count_nonzero((buf[e] == HEADER) & (buf[e + 1] != VER_LEN))
        )

    def _count_gaps(self, pk: LD19Packets) -> None:
        """Count device-timestamp gaps (mod 30000 ms) longer than one packet period.

        The period of a packet is 12 angular steps at its reported speed; a gap of
        ``g`` ms after a packet of period ``p`` means ``round(g / p) - 1`` lost packets.
        A packet reporting speed or span 0 is judged by the last valid period.
        """
        if len(pk) == 0:
            return
        ts = pk.timestamp_ms.astype(np.int64)
        span = np.mod(pk.end_cdeg.astype(np.int64) - pk.start_cdeg, ANGLE_MODULUS_CDEG)
        speed_i = pk.speed_deg_s.astype(np.int64)
        prev_ts = np.empty_like(ts)
        prev_ts[1:] = ts[:-1]
        prev_ts[0] = ts[0] if self._last_ts is None else self._last_ts
        gap = np.mod(ts - prev_ts, TIMESTAMP_MODULUS_MS)
        # fast path: every gap under 1.5 periods of the packet before it, in integers
        # (gap < 1.5 * 12/11 * span/100 deg / speed * 1000 ms), every period valid
        if self._last_period_ms is not None or self._last_ts is None:
            quiet = (speed_i > 0) & (span > 0)
            quiet[1:] &= gap[1:] * speed_i[:-1] * 22 < 360 * span[:-1]
            if self._last_period_ms is not None:
                quiet[0] &= gap[0] < 1.5 * self._last_period_ms
            if quiet.all():
                self._last_ts = int(ts[-1])
                self._last_period_ms = 120.0 / 11.0 * float(span[-1]) / float(speed_i[-1])
                return
        speed = speed_i.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            period = (10.0 * POINTS_PER_PACKET / (POINTS_PER_PACKET - 1)) * span / speed
        invalid = ~(period > 0) | ~np.isfinite(period)
        if invalid.any():  # carry the last valid period forward
            period[invalid] = np.nan
            idx = np.where(~invalid, np.arange(period.size), -1)
            np.maximum.accumulate(idx, out=idx)
            last = np.nan if self._last_period_ms is None else self._last_period_ms
            period = np.where(idx >= 0, period[np.maximum(idx, 0)], last)
        prev_ts[0] = -1 if self._last_ts is None else self._last_ts
        prev_period = np.empty_like(period)
        prev_period[1:] = period[:-1]
        prev_period[0] = np.nan if self._last_period_ms is None else self._last_period_ms
        with np.errstate(invalid="ignore"):
            lost = np.rint(gap / np.where(np.isnan(prev_period), period, prev_period)) - 1
            valid = lost > 0
        valid[0] &= prev_ts[0] >= 0
        if valid.any():
            pk.lost_before = np.where(valid, lost, 0).astype(np.int64)
            self.counters.timestamp_gaps += int(np.count_nonzero(valid))
            self.counters.lost_packets += int(pk.lost_before.sum())
        self._last_ts = int(ts[-1])
        if np.isfinite(period[-1]):
            self._last_period_ms = float(period[-1])
