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
_LAST_END = 5  # end angle of the last packet (0.01 deg; -1: none)
_TAIL_LEN = 6  # bytes kept at the head of the join buffer (< 47)
_TAIL_AT = 7  # stream offset of the tail's first byte
_HISTORY = 8  # slots above are the history resync() forgets; counters follow
# counters (int64, since construction or reset), in ParserCounters' order
(_BYTES, _PACKETS, _CRC_FAIL, _BYTES_SKIPPED, _UNKNOWN, _SPAN_FAIL, _STAMP_FAIL, _SPEED_FAIL,
    _GAPS, _LOST) = range(_HISTORY, _HISTORY + 10)  # fmt: skip
_REJECTED = _HISTORY + 10  # packets rejected by the last read; their (offset, reason) pairs follow
_STATE_SIZE = _REJECTED + 1
# why a packet with a good CRC was rejected (codes in the kernel's rejection pairs)
REJECT_REASONS = {1: "angle", 2: "timestamp", 3: "speed"}
# the per-packet fields (int64; a packet's in a row of the output block)
_SPEED, _START, _END, _STAMP, _OFFSET, _HOST_NS, _FAILURES, _LOST_BEFORE = range(8)
_ROWS = 8
_JOIN = 96  # the join buffer: the kept tail (< 47 bytes), then a read's first 48 bytes


def _forget(state: np.ndarray) -> None:
    """The history of ``state`` as new (resync), keeping the stream offset and counters."""
    at = state[_TAIL_AT] + state[_TAIL_LEN]
    state[:_HISTORY] = 0
    state[_EXPECT_AT] = state[_LAST_TS] = state[_LAST_END] = -1
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
def _reject_reason(s: int, t: int, sp: int, ts: int) -> int:
    """Why a packet with a good CRC is impossible (a :data:`REJECT_REASONS` code), or 0:
    start ``s`` or end ``t`` angle (0.01 deg) out of range or a span the vendor SDK
    rejects at speed ``sp`` (deg/s), timestamp ``ts`` (ms) out of range, or ``sp`` above
    :data:`MAX_SPEED_DEG_S`."""
    span_deg = (t // 100 - s // 100) % 360
    if s >= ANGLE_MODULUS_CDEG or t >= ANGLE_MODULUS_CDEG or span_deg * SPAN_PER_SPEED > sp:
        return 1
    if ts >= TIMESTAMP_MODULUS_MS:
        return 2
    return 3 if sp > MAX_SPEED_DEG_S else 0


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
def _points(
    buf: np.ndarray, pos: int, row: int, distance: np.ndarray, intensity: np.ndarray
) -> None:
    """Store the 12 points (distance mm, intensity) of the packet at ``buf[pos]`` from
    ``distance[row]`` and ``intensity[row]`` on."""
    for i in range(POINTS_PER_PACKET):
        p = pos + 6 + 3 * i
        distance[row + i] = np.uint16(buf[p]) | (np.uint16(buf[p + 1]) << np.uint16(8))
        intensity[row + i] = buf[p + 2]


@numba.njit(cache=True, nogil=True)
def _run(buf, pos, stop, off, host_ns, col, state, fields, distance, intensity, v):
    """Parse ``buf`` (its first byte at stream offset ``off``) from ``pos`` while the
    position is below ``stop``, the packets stored from row ``col`` on; ``v``: failures
    not yet given to a packet, the last timestamp, the last end angle, rejections in this
    read and whether an angle stepped back. Returns the position reached, the next free
    row and ``v`` updated. Called twice a read, not inlined: inlined twice, the pass
    was a tenth slower."""
    pending, last_ts, last_end, n_rej, back = v
    while pos < stop:
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
        reason = 0 if crc != 0 else _reject_reason(s, t, sp, ts)
        if crc != 0 or reason:
            state[_CRC_FAIL if crc != 0 else _SPAN_FAIL + reason - 1] += 1
            if reason:
                state[_STATE_SIZE + 2 * n_rej] = off + pos
                state[_STATE_SIZE + 2 * n_rej + 1] = reason
                n_rej += 1
            pending += 1
            pos += 1
            continue

        for row, x in enumerate((sp, s, t, ts, off + pos, host_ns, pending)):  # _SPEED.._FAILURES
            fields[col, row] = x
        _points(buf, pos, POINTS_PER_PACKET * col, distance, intensity)
        pending = 0
        span = t - s if t >= s else t - s + ANGLE_MODULUS_CDEG
        fields[col, _LOST_BEFORE] = _gap(state, ts, span, sp, last_ts)
        last_ts = ts
        back |= s < last_end or t < s
        last_end = t
        col += 1
        pos += PACKET_SIZE

        # an unknown packet type exactly where the next packet was expected
        if pos + 1 < len(buf):
            if buf[pos] == HEADER and buf[pos + 1] != VER_LEN:
                state[_UNKNOWN] += 1
        else:
            state[_EXPECT_AT] = off + pos
    return pos, col, (pending, last_ts, last_end, n_rej, back)


@numba.njit(cache=True, nogil=True)
def _scan(new, host_ns, at, state, join, fields, distance, intensity):
    """Parse the kept tail plus ``new`` in one pass (docs/LD19.md, Parser rules) and keep
    the new tail. The packets are ``k`` rows of ``fields`` (columns ``_SPEED`` ...) from
    ``at`` on and ``12 k`` values of the flat ``distance`` and ``intensity`` (flat: 2x
    faster stores) from ``12 at`` on, the rejected candidates' (stream offset, reason
    code) pairs after the state; the caller sizes the outputs for the read. Returns ``4 k +
    2 b + r``: ``b`` 1 if a native angle stepped back from the packet before them or among
    them, ``r`` 1 if a packet was rejected. Never raises: every index is bounded by the
    buffers. The tail is kept at the head of ``join`` and the read's first 48 bytes are
    copied after it, where a packet starting in the tail ends; the rest is read in place
    (a copy of the whole read or a joined array cost more than they saved).
    """
    tl = state[_TAIL_LEN]
    m = min(len(new), PACKET_SIZE + 1)
    for i in range(m):
        join[tl + i] = new[i]
    head = join[: tl + m]
    state[_BYTES] += len(new)
    base = state[_TAIL_AT]
    e = state[_EXPECT_AT] - base  # the previous read's last packet ended here
    if e >= 0 and e + 1 < head.size:  # its next two bytes are here (a short read may hold them)
        state[_UNKNOWN] += head[e] == HEADER and head[e + 1] != VER_LEN
        state[_EXPECT_AT] = -1
    v = (state[_PENDING], state[_LAST_TS], state[_LAST_END], 0, False)
    pos, col, v = _run(head, 0, min(tl, head.size - PACKET_SIZE + 1), base, host_ns, at,
        state, fields, distance, intensity, v)  # fmt: skip
    if pos >= tl:
        pos, col, v = _run(new, pos - tl, len(new) - PACKET_SIZE + 1, base + tl, host_ns, col,
            state, fields, distance, intensity, v)  # fmt: skip
        for i in range(pos, len(new)):  # keep the rest (under 47 bytes): not a slice store,
            join[i - pos] = new[i]  # whose shape-error message costs seconds of compile
        pos += tl
    else:  # a short read: the head holds it all
        for i in range(pos, head.size):
            join[i - pos] = join[i]
    state[_PENDING], state[_LAST_TS], state[_LAST_END], state[_REJECTED], back = v
    k = col - at
    state[_TAIL_LEN] = tl + len(new) - pos
    state[_TAIL_AT] = base + pos
    state[_PACKETS] += k
    state[_BYTES_SKIPPED] += pos - PACKET_SIZE * k
    return 4 * k + 2 * back + (state[_REJECTED] > 0)


_SCAN_ENTRY: Callable[..., int] | None = None


def _scan_entry() -> Callable[..., int]:
    """:func:`_scan`'s compiled entry point, without the dispatcher (its per-call type
    resolution was a third of a 1 KiB read's cost; :meth:`LD19Parser.scan` always passes
    the one signature). It is compiled for ``bytes`` and serves any one-dimensional buffer
    of bytes (``bytearray``, a contiguous uint8 array): unboxing reads the buffer protocol,
    and the kernel never writes it. The first call compiles or loads the kernel."""
    global _SCAN_ENTRY
    if _SCAN_ENTRY is None:
        z = np.zeros
        _scan(bytes(PACKET_SIZE), 0, 0, z(_STATE_SIZE + 2, np.int64), z(_JOIN, np.uint8),
              z((1, _ROWS), np.int64), z(POINTS_PER_PACKET, np.uint16),
              z(POINTS_PER_PACKET, np.uint8))  # fmt: skip
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

    :meth:`scan` parses a read into the parser's buffers, :meth:`take` returns the packets
    not taken yet as one batch, :meth:`feed` does both.

    Attributes:
        rejected: ``(stream offset, reason)`` of the packets with a good CRC and an
            impossible field (reason ``angle``, ``timestamp`` or ``speed``), the first
            :data:`REJECTED_KEPT` of them (the counters count them all).
        stepped_back: whether the native angle stepped back in the packets of the last
            :meth:`scan` (from the packet before them, or among them): a turn ended there.
    """

    def __init__(self) -> None:
        self._state = np.zeros(_STATE_SIZE, np.int64)
        self._join = np.zeros(_JOIN, np.uint8)
        self._taken = self._out_at = self._room = 0
        self._max_read = -1
        self._views: tuple[np.ndarray, ...] = ()  # fields (k, 8), distances, intensities
        self._make_room(0)
        self.reset()

    def reset(self) -> None:
        """Forget the tail, the stream position, the last timestamp, the packets not
        taken and all counters."""
        self._state[:] = 0
        self.resync()
        self.rejected: list[tuple[int, str]] = []

    def resync(self) -> None:
        """Drop the unconsumed tail, the packets not taken and the timestamp and angle
        history (e.g. after a reconnect).

        Counters are kept; the tail bytes are counted as skipped.
        """
        self._state[_BYTES_SKIPPED] += self._state[_TAIL_LEN]
        _forget(self._state)
        self._taken = self._out_at
        self.stepped_back = False

    @property
    def counters(self) -> ParserCounters:
        """What the parser saw since construction or :meth:`reset` (a snapshot)."""
        return ParserCounters(*self._state[_BYTES : _LOST + 1].tolist())

    @property
    def pending_bytes(self) -> int:
        """Bytes kept from earlier reads that may still start a packet."""
        return int(self._state[_TAIL_LEN])

    @property
    def unread(self) -> int:
        """Packets scanned and not taken yet."""
        return self._out_at - self._taken

    def scan(self, data: bytes | bytearray | memoryview | np.ndarray, host_ns: int = 0) -> int:
        """Parse ``data`` (bytes as received, or a uint8 array) after the kept tail; the
        packets it completes, each given ``host_ns`` (the receive time of ``data``, ns),
        join those :meth:`take` returns. Returns how many it completed."""
        if type(data) not in (bytes, bytearray):  # the kernel takes 1-D byte buffers
            data = np.ascontiguousarray(data if isinstance(data, np.ndarray)
                else np.frombuffer(data, np.uint8), dtype=np.uint8).reshape(-1)  # fmt: skip
        at = self._out_at
        if len(data) > self._fits:
            at = self._make_room(len(data))
        fields, distance, intensity = self._flat
        # host_ns as given: the entry point takes any integer as int64, like int()
        r = (_SCAN_ENTRY or _scan_entry())(data, host_ns, at, self._state, self._join, fields,
            distance, intensity)  # fmt: skip
        k = r >> 2
        if r & 1:
            self._keep_rejected()
        self.stepped_back = r & 2 > 0
        self._out_at = at + k
        self._fits -= PACKET_SIZE * k
        return k

    def take(self) -> LD19Packets:
        """The packets scanned since the last call, in stream order (views of the parser's
        buffers, never written again; a shared read-only empty batch when there are none)."""
        lo, hi = self._taken, self._out_at
        if lo == hi:
            return _EMPTY
        self._taken = hi
        fields, distance, intensity = self._views
        return LD19Packets(fields[lo:hi].T, distance[lo:hi], intensity[lo:hi])

    def feed(
        self, data: bytes | bytearray | memoryview | np.ndarray, host_ns: int = 0
    ) -> LD19Packets:
        """:meth:`scan` ``data`` received at ``host_ns`` (ns), then :meth:`take`."""
        self.scan(data, host_ns)
        return self.take()

    def _keep_rejected(self) -> None:
        """Keep the last read's rejected packets, up to :data:`REJECTED_KEPT` in all."""
        n = min(int(self._state[_REJECTED]), REJECTED_KEPT - len(self.rejected))
        pairs = self._state[_STATE_SIZE : _STATE_SIZE + 2 * n].reshape(-1, 2).tolist()
        self.rejected.extend((off, REJECT_REASONS[code]) for off, code in pairs)

    def _make_room(self, n: int) -> int:
        """Buffers for a read of ``n`` bytes; returns the first free packet row. Reads
        of up to ``_fits`` bytes have room: a read completes fewer than ``n / 47 + 1``
        packets and rejects fewer than ``n / 2 + 24``."""
        if n > self._max_read:
            self._reserve(n)
        if (n + PACKET_SIZE) // PACKET_SIZE > self._room - self._out_at:  # twice the unread:
            self._new_block(2 * self.unread + (n + PACKET_SIZE) // PACKET_SIZE)  # amortised
        self._fits = min(self._max_read, (self._room - self._out_at - 1) * PACKET_SIZE)
        return self._out_at

    def _new_block(self, cap: int) -> None:
        """Fresh output buffers for at least ``cap`` packets, the packets not taken moved
        in: reads fill successive rows (the batches taken are views, never written
        again), so small reads share one allocation (:data:`_OUT_BLOCK`)."""
        room = max(cap, _OUT_BLOCK)
        lo, hi = self._taken, self._out_at
        views: tuple[np.ndarray, ...] = (np.empty((room, _ROWS), np.int64),
            np.empty((room, POINTS_PER_PACKET), np.uint16),
            np.empty((room, POINTS_PER_PACKET), np.uint8))  # fmt: skip
        if hi > lo:
            for new, old in zip(views, self._views, strict=True):
                new[: hi - lo] = old[lo:hi]
        self._views = views
        # the kernel stores the points through flat views
        self._flat = (views[0], views[1].reshape(-1), views[2].reshape(-1))
        self._room, self._taken, self._out_at = room, 0, hi - lo

    def _reserve(self, n: int) -> None:
        """Room for the rejections of a read of up to ``n`` bytes (at least 4 KiB)."""
        self._max_read = max(n, 1 << 12)
        state = np.zeros(_STATE_SIZE + 2 * ((self._max_read + PACKET_SIZE) // 2 + 1), np.int64)
        state[:_STATE_SIZE] = self._state[:_STATE_SIZE]
        self._state = state
