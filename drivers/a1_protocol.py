"""RPLIDAR A1 wire format: descriptors, info/health payloads, vectorised scan nodes.

Everything here is pure (no I/O) so the live driver, the offline ``decode a1``
command and the benchmark share one decoder.

Standard scan node (5 bytes, Slamtec protocol v1):

| byte | bits | field |
|---|---|---|
| 0 | 0 | S: first node of a new turn |
| 0 | 1 | !S: inverse of S (check) |
| 0 | 2..7 | quality 0..63 |
| 1 | 0 | C: check bit, always 1 |
| 1..2 | 1..15 | angle, q6 degrees (1/64 °), clockwise |
| 3..4 | all | distance, q2 millimetres (1/4 mm), 0 = no return |

The node checks are weak (3 bits), so after an invalid node the stream is
re-aligned by sliding one byte at a time until :data:`RESYNC_RUN` consecutive
nodes are valid (and read angles below 360 deg), never by skipping a whole node.

A node that passes its checks but reads an impossible angle (q6 >= 23040, i.e.
360.00 deg or more: real units send 23040 now and then, and the vendor SDK and
``rplidar-roboticia`` accept it) is framed like any other node, then dropped and
counted by the turn assembler (:func:`possible_nodes`), not taken for misalignment:
it does not make its turn corrupt. A distance beyond the datasheet's 12 m
(:data:`MAX_RANGE_Q2`) is stored as invalid (``nan``) and counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYNC = 0xA5
SYNC2 = 0x5A
CMD_STOP = 0x25
CMD_RESET = 0x40
CMD_SCAN = 0x20
CMD_FORCE_SCAN = 0x21
CMD_GET_INFO = 0x50
CMD_GET_HEALTH = 0x52
CMD_GET_SAMPLERATE = 0x59  # firmware >= 1.17

DESCRIPTOR_LEN = 7
NODE_LEN = 5
INFO_LEN = 20
HEALTH_LEN = 3
TYPE_INFO = 0x04
TYPE_HEALTH = 0x06
TYPE_SAMPLE_RATE = 0x15
SAMPLERATE_LEN = 4
SAMPLERATE_MIN_FIRMWARE = (1, 17)
TYPE_SCAN = 0x81
MODE_SINGLE = 0
MODE_MULTI = 1

BAUD = 115200
NOMINAL_SAMPLES_PER_S = 2000.0  # standard scan
ANGLE_Q6_FULL = 360 * 64
RESYNC_RUN = 4
# datasheet limit (Slamtec RPLIDAR A1 datasheet, ranging range 0.15..12 m; docs/A1.md "Limits")
MAX_RANGE_M = 12.0
MAX_RANGE_Q2 = int(MAX_RANGE_M * 4000)  # q2 mm

HEALTH_STATUS = {0: "good", 1: "warning", 2: "error"}


def descriptor(length: int, mode: int, dtype: int) -> bytes:
    """A 7-byte response descriptor: ``A5 5A``, 30-bit length + 2-bit mode, type."""
    word = (length & 0x3FFFFFFF) | ((mode & 0x3) << 30)
    return bytes([SYNC, SYNC2]) + word.to_bytes(4, "little") + bytes([dtype])


SCAN_DESCRIPTOR = descriptor(NODE_LEN, MODE_MULTI, TYPE_SCAN)
INFO_DESCRIPTOR = descriptor(INFO_LEN, MODE_SINGLE, TYPE_INFO)
HEALTH_DESCRIPTOR = descriptor(HEALTH_LEN, MODE_SINGLE, TYPE_HEALTH)
SAMPLERATE_DESCRIPTOR = descriptor(SAMPLERATE_LEN, MODE_SINGLE, TYPE_SAMPLE_RATE)


def parse_descriptor(raw: bytes) -> tuple[int, int, int]:
    """``(length, mode, type)`` of a 7-byte descriptor; ValueError if it is not one."""
    if len(raw) != DESCRIPTOR_LEN or raw[0] != SYNC or raw[1] != SYNC2:
        raise ValueError(f"not a response descriptor: {raw.hex(' ')}")
    word = int.from_bytes(raw[2:6], "little")
    return word & 0x3FFFFFFF, word >> 30, raw[6]


@dataclass(frozen=True)
class A1Info:
    """GET_INFO answer: model id, firmware (major, minor), hardware id, 16-byte serial."""

    model: int
    firmware: tuple[int, int]
    hardware: int
    serial: str  # 32 upper-case hex digits

    @classmethod
    def from_payload(cls, raw: bytes) -> A1Info:
        """Decode the 20-byte payload (model, fw minor, fw major, hardware, serial)."""
        if len(raw) != INFO_LEN:
            raise ValueError(f"info payload must be {INFO_LEN} bytes, got {len(raw)}")
        return cls(raw[0], (raw[2], raw[1]), raw[3], raw[4:].hex().upper())


@dataclass(frozen=True)
class A1Health:
    """GET_HEALTH answer: status (``good``/``warning``/``error``) and its error code."""

    status: str
    error_code: int

    @classmethod
    def from_payload(cls, raw: bytes) -> A1Health:
        """Decode the 3-byte payload: status, then the error code as little-endian uint16."""
        if len(raw) != HEALTH_LEN:
            raise ValueError(f"health payload must be {HEALTH_LEN} bytes, got {len(raw)}")
        if raw[0] not in HEALTH_STATUS:
            raise ValueError(f"unknown health status {raw[0]}")
        return cls(HEALTH_STATUS[raw[0]], raw[1] | (raw[2] << 8))


@dataclass(frozen=True)
class A1SampleRate:
    """GET_SAMPLERATE answer: time between two samples (µs) in standard and express scan.

    In standard scan every sample is one node, so ``standard_us`` × nodes is the time
    the head took to produce them, on the device's own clock.
    """

    standard_us: int
    express_us: int

    @classmethod
    def from_payload(cls, raw: bytes) -> A1SampleRate:
        """Decode the 4-byte payload: uint16 standard, uint16 express (µs, little-endian)."""
        if len(raw) != SAMPLERATE_LEN:
            raise ValueError(f"sample-rate payload must be {SAMPLERATE_LEN} bytes, got {len(raw)}")
        std, exp = raw[0] | (raw[1] << 8), raw[2] | (raw[3] << 8)
        if std == 0:
            raise ValueError("standard sample duration 0 µs")
        return cls(std, exp)


@dataclass
class Nodes:
    """Decoded standard-scan nodes, device-native units.

    Attributes:
        start: True on the first node of a turn.
        quality: 0..63.
        angle_q6: clockwise angle in 1/64 degree.
        dist_q2: distance in 1/4 mm; 0 = no return.
        pos: byte offset of each node in the buffer that was decoded.
    """

    start: np.ndarray
    quality: np.ndarray
    angle_q6: np.ndarray
    dist_q2: np.ndarray
    pos: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def angle_ccw_rad(self) -> np.ndarray:
        """Bearing in rad, counter-clockwise, in [0, 2π) (float64)."""
        deg_cw = self.angle_q6.astype(np.float64) / 64.0
        return np.deg2rad(np.mod(-deg_cw, 360.0)) % (2 * np.pi)

    @property
    def range_m(self) -> np.ndarray:
        """Range in m, ``inf`` where the device sent 0 (no return), ``nan`` beyond
        :data:`MAX_RANGE_Q2` (invalid) (float64)."""
        r = self.dist_q2.astype(np.float64) / 4000.0
        r[self.dist_q2 == 0] = np.inf
        r[self.dist_q2 > MAX_RANGE_Q2] = np.nan
        return r


def possible_nodes(nodes: Nodes) -> np.ndarray:
    """Per node, True if its angle is possible (q6 below 23040, i.e. under 360 deg)."""
    return nodes.angle_q6 < ANGLE_Q6_FULL


def _valid_at(buf: np.ndarray, offsets: np.ndarray, angle_in_range: bool) -> np.ndarray:
    """The node checks at ``offsets`` (S and !S differ, C is 1), and with
    ``angle_in_range`` also an angle below 360 deg (for re-aligning)."""
    b0 = buf[offsets]
    b1 = buf[offsets + 1]
    flags_ok = (b0 & 1) != ((b0 >> 1) & 1)
    check_ok = (b1 & 1) == 1
    if not angle_in_range:
        return flags_ok & check_ok
    angle = (b1.astype(np.uint16) >> 1) | (buf[offsets + 2].astype(np.uint16) << 7)
    return flags_ok & check_ok & (angle < ANGLE_Q6_FULL)


def decode_nodes(data: bytes | bytearray | memoryview) -> tuple[Nodes, int, int]:
    """Decode as many whole nodes as possible from the start of ``data``.

    Returns ``(nodes, consumed, skipped)``: ``consumed`` bytes were used (keep
    ``data[consumed:]`` for the next call), of which ``skipped`` were discarded
    while re-aligning after invalid nodes (corruption or lost bytes).
    """
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    n = buf.size
    pieces: list[np.ndarray] = []
    pos = 0
    skipped = 0
    while n - pos >= NODE_LEN:
        k = (n - pos) // NODE_LEN
        offs = pos + NODE_LEN * np.arange(k)
        ok = _valid_at(buf, offs, angle_in_range=False)
        bad = np.flatnonzero(~ok)
        good_until = k if bad.size == 0 else int(bad[0])
        pieces.append(offs[:good_until])
        pos += NODE_LEN * good_until
        if bad.size == 0:
            break
        # re-align: slide byte by byte to an offset followed by RESYNC_RUN valid nodes
        need = NODE_LEN * RESYNC_RUN
        cand = np.arange(pos + 1, n - need + 1)
        if cand.size == 0:
            break  # not enough bytes to decide; keep them for the next call
        run_ok = np.ones(cand.size, dtype=bool)
        for j in range(RESYNC_RUN):
            run_ok &= _valid_at(buf, cand + NODE_LEN * j, angle_in_range=True)
        hit = np.flatnonzero(run_ok)
        new_pos = int(cand[-1]) + 1 if hit.size == 0 else int(cand[hit[0]])
        if (new_pos - pos) % NODE_LEN and pieces and pieces[-1].size:
            # a byte was lost or inserted: the node before the first invalid one was
            # read across the slip and passed the weak checks by chance; drop it too
            pieces[-1] = pieces[-1][:-1]
            skipped += NODE_LEN
        skipped += new_pos - pos
        pos = new_pos
        if hit.size == 0:
            break
    offs = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
    b0 = buf[offs]
    b1 = buf[offs + 1].astype(np.uint16)
    b2 = buf[offs + 2].astype(np.uint16)
    b3 = buf[offs + 3].astype(np.uint16)
    b4 = buf[offs + 4].astype(np.uint16)
    nodes = Nodes(
        start=(b0 & 1).astype(bool),
        quality=(b0 >> 2).astype(np.uint8),
        angle_q6=(b1 >> 1) | (b2 << 7),
        dist_q2=b3 | (b4 << 8),
        pos=offs.astype(np.int64),
    )
    return nodes, pos, skipped
