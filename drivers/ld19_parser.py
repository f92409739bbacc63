"""LD19 packet parser: one compiled pass over each read (rules: docs/LD19.md, Protocol).

State between reads lives in the instance, so any number of lidars parse in one process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

BAUD = 230400  # LD19 line rate (baud, 8N1)
HEADER = 0x54
VER_LEN = 0x2C
PACKET_SIZE = 47
POINTS_PER_PACKET = 12
TIMESTAMP_MODULUS_MS = 30000
CRC_POLY = 0x4D
ANGLE_MODULUS_CDEG = 36000
# datasheet limits (LDROBOT LD19 datasheet, performance table; docs/LD19.md "Limits"):
# scan frequency 5..13 Hz, ranging 0.02..12 m
MAX_SCAN_HZ = 13.0
MAX_SPEED_DEG_S = int(2 * MAX_SCAN_HZ * 360)  # twice the fastest scan: not a measurement
MAX_RANGE_MM = 12000  # a distance beyond it is stored as invalid (nan) and counted
SPAN_PER_SPEED = 250
"""The vendor SDK's packet-span check: ``250 × span ≤ speed`` (whole degrees, deg/s;
docs/LD19.md, Parser rules)."""
_OUT_BLOCK = 1024  # packets' room allocated at once for small reads (~100 kB, 2.7 s at 10 Hz)
REJECTED_KEPT = 10000  # offsets of rejected packets kept per parser (the count is exact)

PACKET_DTYPE = np.dtype([("header", "u1"), ("ver_len", "u1"), ("speed", "<u2"), ("start", "<u2"),
    ("points", [("distance", "<u2"), ("intensity", "u1")], (POINTS_PER_PACKET,)),
    ("end", "<u2"), ("timestamp", "<u2"), ("crc", "u1")])  # fmt: skip
assert PACKET_DTYPE.itemsize == PACKET_SIZE


def build_crc8_table(poly: int = CRC_POLY) -> np.ndarray:
    """CRC-8 lookup table for ``poly`` (MSB first, no reflection), as uint8[256]."""
    crc = np.arange(256, dtype=np.uint16)
    for _ in range(8):
        crc = np.where(crc & 0x80, (crc << 1) ^ poly, crc << 1) & 0xFF
    return crc.astype(np.uint8)


CRC8_TABLE = build_crc8_table()


def _position_tables(table: np.ndarray, max_len: int) -> np.ndarray:
    """``T[d, v]``: CRC of byte ``v`` followed by ``d`` zero bytes (uint8[max_len, 256]);
    the CRC is linear, so a message's is the XOR of its bytes' (docs/LD19.md, Parser rules)."""
    out = np.empty((max_len, 256), dtype=np.uint8)
    out[0] = table
    for d in range(1, max_len):
        out[d] = table[out[d - 1]]
    return out


_CRC_AFTER = _position_tables(CRC8_TABLE, PACKET_SIZE)
# [j, v]: the CRC contribution of byte v at offset j of a 47-byte packet (the kernel's)
_CRC_AT = _CRC_AFTER[::-1].copy()


def crc8_rows(block: np.ndarray) -> np.ndarray:
    """CRC-8 of every row of a ``(k, m)`` uint8 array at once (``m <= 47``), as uint8[k]:
    the XOR of each byte's entry in the per-position tables."""
    m = block.shape[1]
    if m > PACKET_SIZE:
        raise ValueError(f"rows of at most {PACKET_SIZE} bytes, got {m}")
    return np.bitwise_xor.reduce(_CRC_AFTER[np.arange(m - 1, -1, -1), block], axis=1,
        initial=np.uint8(0))


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


def possible_packets(pk: LD19Packets) -> np.ndarray:
    """Per packet, True if every field is possible: angles below 360 deg, a span the
    vendor SDK accepts (:data:`SPAN_PER_SPEED`), a timestamp below 30000 ms, a speed within
    :data:`MAX_SPEED_DEG_S` (the parser's rules, for packets from elsewhere)."""
    start = pk.start_cdeg.astype(np.int64)
    end = pk.end_cdeg.astype(np.int64)
    return ((start < ANGLE_MODULUS_CDEG) & (end < ANGLE_MODULUS_CDEG)
        & (np.mod(end // 100 - start // 100, 360) * SPAN_PER_SPEED <= pk.speed_deg_s)
        & (pk.timestamp_ms.astype(np.int64) < TIMESTAMP_MODULUS_MS)
        & (pk.speed_deg_s.astype(np.int64) <= MAX_SPEED_DEG_S))


# the kernel's state vector (int64, carried between reads)
_EXPECT_AT = 0  # stream offset right after the last packet, its bytes not yet seen (-1: none)
_PENDING = 1  # failures since the last packet, not yet attributed to one
_LAST_TS = 2  # timestamp of the last packet (ms; -1: none)
_PERIOD_SPAN = 3  # span (0.01 deg) and speed (deg/s) of the last packet that had a
_PERIOD_SPEED = 4  # period, i.e. both > 0 (0: none yet)
_TAIL_LEN = 5  # bytes kept in the tail buffer (< 47)
_TAIL_AT = 6  # stream offset of the tail's first byte
_HISTORY = 7  # slots above are the history resync() forgets; counters follow
# counters (int64, since construction or reset), in ParserCounters' order
(_BYTES, _PACKETS, _CRC_FAIL, _BYTES_SKIPPED, _UNKNOWN, _SPAN_FAIL, _STAMP_FAIL, _SPEED_FAIL,
    _GAPS, _LOST) = range(_HISTORY, _HISTORY + 10)  # fmt: skip
_STATE_SIZE = _HISTORY + 10
# why a packet with a good CRC was rejected (codes in the kernel's rejection rows)
REJECT_REASONS = {1: "angle", 2: "timestamp", 3: "speed"}
# rows of the per-packet fields (int64)
_SPEED, _START, _END, _STAMP, _OFFSET, _HOST_NS, _FAILURES, _LOST_BEFORE = range(8)
_ROWS = 8


def _new_state() -> np.ndarray:
    """The kernel state of a parser that has seen nothing."""
    state = np.zeros(_STATE_SIZE, dtype=np.int64)
    _forget(state)
    return state


def _forget(state: np.ndarray) -> None:
    """The history of ``state`` as new (resync), keeping the stream offset and counters."""
    at = state[_TAIL_AT] + state[_TAIL_LEN]
    state[:_HISTORY] = 0
    state[_EXPECT_AT] = state[_LAST_TS] = -1
    state[_TAIL_AT] = at


@numba.njit(cache=True, nogil=True)
def _lost_in_gap(gap_ms: int, span: int, speed: int) -> int:
    """Packets lost in a gap of ``gap_ms``: ``round(gap / period) - 1`` (ties to even), >= 0,
    in exact integers: a period is 12 steps of ``span / 11`` (0.01 deg) at ``speed`` (deg/s),
    so ``gap / period`` is ``11 gap speed / (120 span)``."""
    num = 11 * gap_ms * speed
    den = 120 * span
    if 2 * num < 3 * den:  # under 1.5 periods (the usual case): none, and no division
        return 0
    q = num // den
    twice_r = 2 * (num - q * den)
    if twice_r > den or (twice_r == den and q % 2 == 1):
        q += 1
    return q - 1


@numba.njit(cache=True, nogil=True)
def _u16(buf: np.ndarray, i: int) -> int:
    """Little-endian uint16 at ``buf[i]``."""
    return np.int64(buf[i]) | (np.int64(buf[i + 1]) << 8)


@numba.njit(cache=True, nogil=True, inline="always")
def _reject_reason(s: int, t: int, sp: int, ts: int, max_speed: int) -> int:
    """Why a packet with a good CRC is impossible (a :data:`REJECT_REASONS` code), or 0:
    start ``s`` or end ``t`` angle (0.01 deg) out of range or a span the vendor SDK
    rejects at speed ``sp`` (deg/s), timestamp ``ts`` (ms) out of range, or ``sp`` above
    ``max_speed``."""
    span_deg = (t // 100 - s // 100) % 360
    if s >= ANGLE_MODULUS_CDEG or t >= ANGLE_MODULUS_CDEG or span_deg * SPAN_PER_SPEED > sp:
        return 1
    if ts >= TIMESTAMP_MODULUS_MS:
        return 2
    return 3 if sp > max_speed else 0


@numba.njit(cache=True, nogil=True, inline="always")
def _gap(state, ts: int, span: int, sp: int, last_ts: int) -> int:
    """Packets lost before the packet at timestamp ``ts`` (ms) after the one at
    ``last_ts`` (-1: none), judged by the last known period (with none known yet, by this
    packet's of ``span`` at ``sp``; a packet reporting speed or span 0 has none and leaves
    the last one in place); counts the gap and updates the period in ``state``."""
    has_period = sp > 0 and span > 0
    if state[_PERIOD_SPEED] == 0 and has_period:
        state[_PERIOD_SPAN], state[_PERIOD_SPEED] = span, sp
    missing = 0
    if last_ts >= 0 and state[_PERIOD_SPEED] > 0:
        gap = (ts - last_ts) % TIMESTAMP_MODULUS_MS
        missing = _lost_in_gap(gap, state[_PERIOD_SPAN], state[_PERIOD_SPEED])
        if missing > 0:
            state[_GAPS] += 1
            state[_LOST] += missing
    if has_period:
        state[_PERIOD_SPAN], state[_PERIOD_SPEED] = span, sp
    return missing


@numba.njit(cache=True, nogil=True, inline="always")
def _with_tail(new: np.ndarray, state: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """The kept tail followed by ``new``; counts the new bytes."""
    tl = state[_TAIL_LEN]
    state[_BYTES] += new.size
    return np.concatenate((tail[:tl], new))  # a slice store compiles a shape-error message


@numba.njit(cache=True, nogil=True, inline="always")
def _keep_tail(buf: np.ndarray, pos: int, state: np.ndarray, tail: np.ndarray) -> None:
    """Keep ``buf[pos:]``, the bytes not consumed, for the next read."""
    for i in range(pos, buf.size):  # under 47 bytes; not a slice store: see _with_tail
        tail[i - pos] = buf[i]
    state[_TAIL_LEN] = buf.size - pos
    state[_TAIL_AT] += pos


@numba.njit(cache=True, nogil=True, inline="always")
def _points(
    buf: np.ndarray, pos: int, row: int, distance: np.ndarray, intensity: np.ndarray
) -> None:
    """Store the 12 points (distance mm, intensity) of the packet at ``buf[pos]`` from
    ``distance[row]`` and ``intensity[row]`` on."""
    pts = buf[pos + 6 : pos + 6 + 3 * POINTS_PER_PACKET]
    for i in range(POINTS_PER_PACKET):
        distance[row + i] = np.uint16(pts[3 * i]) | (np.uint16(pts[3 * i + 1]) << np.uint16(8))
        intensity[row + i] = pts[3 * i + 2]


@numba.njit(cache=True, nogil=True)
def _scan(new, host_ns, max_speed, state, tail, fields, distance, intensity, at, rejected):
    """Parse the kept tail plus ``new`` in one pass (docs/LD19.md, Parser rules); returns
    ``(k, n_rejected)``. ``state`` and ``tail`` are updated in place; the packets are
    ``k`` columns of ``fields`` (rows ``_SPEED`` ...) from ``at`` on and ``12 k`` values of
    the flat ``distance`` and ``intensity`` (flat: 2x faster stores) from ``12 at`` on,
    the rejected candidates' stream offset and reason code the first ``n_rejected``
    columns of ``rejected``; the caller sizes the outputs for the read. Never raises:
    every index is bounded by the buffer.
    """
    buf = _with_tail(new, state, tail)
    n = buf.size
    base = state[_TAIL_AT]
    e = state[_EXPECT_AT] - base  # the previous read's last packet ended here
    if e >= 0 and e + 1 < n:  # its next two bytes are here (a short read may hold them)
        state[_UNKNOWN] += buf[e] == HEADER and buf[e + 1] != VER_LEN
        state[_EXPECT_AT] = -1
    if n < PACKET_SIZE:  # too short to decide anything else: keep it all
        _keep_tail(buf, 0, state, tail)
        return 0, 0
    last_start = n - PACKET_SIZE
    n_rej = 0
    pending = state[_PENDING]
    last_ts = state[_LAST_TS]
    k = 0
    pos = 0
    while pos <= last_start:
        if buf[pos] != HEADER or buf[pos + 1] != VER_LEN:
            pos += 1
            continue
        crc = 0
        for j in range(PACKET_SIZE):
            crc ^= _CRC_AT[j, buf[pos + j]]
        s = _u16(buf, pos + 4)
        t = _u16(buf, pos + 42)
        sp = _u16(buf, pos + 2)
        ts = _u16(buf, pos + 44)
        reason = 0 if crc != 0 else _reject_reason(s, t, sp, ts, max_speed)
        if crc != 0 or reason:
            state[_CRC_FAIL if crc != 0 else _SPAN_FAIL + reason - 1] += 1
            if reason:
                rejected[0, n_rej] = base + pos
                rejected[1, n_rej] = reason
                n_rej += 1
            pending += 1
            pos += 1
            continue

        col = at + k
        for row, v in enumerate((sp, s, t, ts, base + pos, host_ns)):  # rows _SPEED.._HOST_NS
            fields[row, col] = v
        _points(buf, pos, POINTS_PER_PACKET * col, distance, intensity)
        fields[_FAILURES, col] = pending
        pending = 0
        span = t - s if t >= s else t - s + ANGLE_MODULUS_CDEG
        fields[_LOST_BEFORE, col] = _gap(state, ts, span, sp, last_ts)
        last_ts = ts
        k += 1
        pos += PACKET_SIZE

        # an unknown packet type exactly where the next packet was expected
        if pos + 1 < n:
            if buf[pos] == HEADER and buf[pos + 1] != VER_LEN:
                state[_UNKNOWN] += 1
        else:
            state[_EXPECT_AT] = base + pos

    state[_PENDING] = pending
    state[_LAST_TS] = last_ts
    state[_PACKETS] += k
    state[_BYTES_SKIPPED] += pos - PACKET_SIZE * k
    _keep_tail(buf, pos, state, tail)
    return k, n_rej


_SCAN_ENTRY: Callable[..., tuple[int, int]] | None = None


def _scan_entry() -> Callable[..., tuple[int, int]]:
    """:func:`_scan`'s compiled entry point, without the dispatcher (its per-call type
    resolution was a third of a 1 KiB read's cost; :meth:`LD19Parser.feed` always passes
    the one signature). It is compiled for a read-only input, and serves writeable ones
    as they are: unboxing checks only the item size, and the kernel never writes it.
    The first call compiles or loads the kernel."""
    global _SCAN_ENTRY
    if _SCAN_ENTRY is None:
        ro = np.zeros(PACKET_SIZE, np.uint8)
        ro.flags.writeable = False
        z = np.zeros
        _scan(ro, 0, 0, _new_state(), z(64, np.uint8),
              z((_ROWS, 1), np.int64), z(POINTS_PER_PACKET, np.uint16),
              z(POINTS_PER_PACKET, np.uint8), 0, z((2, 1), np.int64))  # fmt: skip
        (signature,) = _scan.signatures
        _SCAN_ENTRY = _scan.overloads[signature].entry_point  # type: ignore[attr-defined]
    return _SCAN_ENTRY


def _row(i: int, doc: str) -> Any:
    """A property: row ``i`` of the packets' ``fields`` (int64, one value per packet)."""
    return property(lambda self: self.fields[i], doc=doc)


@dataclass
class LD19Packets:
    """Decoded packets, ``k`` of them, in stream order: ``fields`` (``int64[8, k]``, read
    through the properties below), ``distance_mm`` (``(k, 12)``, mm; 0 = no return) and
    ``intensity`` (``(k, 12)``, 0..255)."""

    fields: np.ndarray
    distance_mm: np.ndarray
    intensity: np.ndarray

    speed_deg_s = _row(_SPEED, "Rotation speed reported by the device (deg/s; 3600 = 10 Hz).")
    start_cdeg = _row(_START, "Start angle of each packet (0.01 deg, clockwise).")
    end_cdeg = _row(_END, "End angle of each packet (0.01 deg, clockwise).")
    timestamp_ms = _row(_STAMP, "Device timestamp (ms, wraps at 30000).")
    stream_offset = _row(_OFFSET,
        "Offset of each packet's first byte in the parser's input stream (bytes since "
        "construction or the last :meth:`LD19Parser.reset`).")
    host_ns = _row(_HOST_NS, "Host receive time of the read that completed each packet (ns).")
    failures_before = _row(_FAILURES,
        "Candidate packets rejected (CRC or an impossible field) since the previous "
        "accepted packet.")
    lost_before = _row(_LOST_BEFORE,
        "Packets missing before this one, from the device-timestamp gap.")

    def __len__(self) -> int:
        return int(self.distance_mm.shape[0])

    def angles_cdeg(self) -> np.ndarray:
        """``(k, 12)`` native clockwise point angles (0.01 deg) in [0, 36000)."""
        return point_angles_cdeg(self.start_cdeg, self.end_cdeg)

    def select(self, keep: np.ndarray) -> LD19Packets:
        """The packets where ``keep`` (bool or indices) selects."""
        return LD19Packets(self.fields[:, keep], self.distance_mm[keep], self.intensity[keep])

    @classmethod
    def empty(cls) -> LD19Packets:
        """No packets."""
        return cls(np.zeros((_ROWS, 0), np.int64), np.zeros((0, POINTS_PER_PACKET), np.uint16),
            np.zeros((0, POINTS_PER_PACKET), np.uint8))

    @classmethod
    def concat(cls, parts: list[LD19Packets]) -> LD19Packets:
        """Concatenate batches in order."""
        if not parts:
            return cls.empty()
        return cls(np.concatenate([p.fields for p in parts], axis=1),
            np.concatenate([p.distance_mm for p in parts]),
            np.concatenate([p.intensity for p in parts]))


_EMPTY = LD19Packets.empty()
for _a in (_EMPTY.fields, _EMPTY.distance_mm, _EMPTY.intensity):
    _a.flags.writeable = False  # shared by every read that completes no packet


@dataclass
class ParserCounters:
    """What the parser saw since construction or :meth:`LD19Parser.reset`; each counter's
    meaning: docs/LD19.md, Parser rules (``Counters``)."""

    bytes: int = 0
    packets: int = 0
    crc_failures: int = 0
    bytes_skipped: int = 0
    unknown_packets: int = 0
    span_failures: int = 0
    timestamp_failures: int = 0
    speed_failures: int = 0
    timestamp_gaps: int = 0
    lost_packets: int = 0

    @property
    def impossible_packets(self) -> int:
        """Packets with a good CRC and an impossible field (angles, timestamp, speed)."""
        return self.span_failures + self.timestamp_failures + self.speed_failures


class LD19Parser:
    """Incremental LD19 packet parser (compiled single pass); one instance per device.

    Attributes:
        rejected: ``(stream offset, reason)`` of the packets with a good CRC and an
            impossible field (reason ``angle``, ``timestamp`` or ``speed``), the first
            :data:`REJECTED_KEPT` of them (the counters count them all).
    """

    def __init__(self) -> None:
        self._tail = np.zeros(64, dtype=np.uint8)  # the kernel keeps < 47 bytes here
        self._reserve(0)
        self._out_at = self._out_room = 0
        self.reset()

    def reset(self) -> None:
        """Forget the tail, the stream position, the last timestamp and all counters."""
        self._state = _new_state()
        self.rejected: list[tuple[int, str]] = []

    def resync(self) -> None:
        """Drop the unconsumed tail and the timestamp history (e.g. after a reconnect).

        Counters are kept; the tail bytes are counted as skipped.
        """
        self._state[_BYTES_SKIPPED] += self._state[_TAIL_LEN]
        _forget(self._state)

    @property
    def counters(self) -> ParserCounters:
        """What the parser saw since construction or :meth:`reset` (a snapshot)."""
        return ParserCounters(*self._state[_BYTES : _LOST + 1].tolist())

    @property
    def pending_bytes(self) -> int:
        """Bytes kept from earlier reads that may still start a packet."""
        return int(self._state[_TAIL_LEN])

    def feed(
        self, data: bytes | bytearray | memoryview | np.ndarray, host_ns: int = 0
    ) -> LD19Packets:
        """Parse ``data`` (bytes as received, or a uint8 array) after the kept tail; return
        the packets it completes, each given ``host_ns``, the receive time of ``data`` (ns)."""
        if isinstance(data, np.ndarray):
            new = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
        else:
            new = np.frombuffer(data, np.uint8)  # positional: dtype= costs ~0.2 us a read
        room = new.size + PACKET_SIZE
        if room > self._room:
            self._reserve(new.size)
        at = self._out_at
        if at + room // PACKET_SIZE > self._out_room:
            at = self._new_block(room // PACKET_SIZE)
        fields, distance, intensity, flat_distance, flat_intensity = self._out
        # host_ns as given: the entry point takes any integer as int64, like int()
        k, n_rej = (_SCAN_ENTRY or _scan_entry())(new, host_ns, MAX_SPEED_DEG_S,
            self._state, self._tail, fields, flat_distance, flat_intensity, at,
            self._rejected)  # fmt: skip
        if n_rej:
            keep = min(n_rej, REJECTED_KEPT - len(self.rejected))
            self.rejected.extend(
                (off, REJECT_REASONS[code]) for off, code in self._rejected[:, :keep].T.tolist())
        if k == 0:
            return _EMPTY
        self._out_at = at + k
        return LD19Packets(fields[:, at : at + k], distance[at : at + k], intensity[at : at + k])

    def _new_block(self, cap: int) -> int:
        """Fresh output buffers for at least ``cap`` packets: reads take successive
        slices of them (the packets returned are views, never written again), so small
        reads share one allocation (:data:`_OUT_BLOCK`); returns the first free packet (0)."""
        room = max(cap, _OUT_BLOCK)
        distance = np.empty((room, POINTS_PER_PACKET), np.uint16)
        intensity = np.empty((room, POINTS_PER_PACKET), np.uint8)
        # the kernel stores the points through flat views of them
        self._out = (np.empty((_ROWS, room), np.int64), distance, intensity,
            distance.reshape(-1), intensity.reshape(-1))  # fmt: skip
        self._out_at, self._out_room = 0, room
        return 0

    def _reserve(self, n: int) -> None:
        """The rejection buffer for a read of ``n`` bytes (plus the tail)."""
        room = max(n + PACKET_SIZE, 1 << 12)
        self._rejected = np.empty((2, room // 2 + 1), np.int64)
        self._room = room
