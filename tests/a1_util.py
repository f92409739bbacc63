"""Helpers of the A1 tests: an independent decoder written from the protocol tables.

The ``ref_*`` decoders use nothing of the driver's protocol module: they are the
reference the emulator and the driver are both checked against; ``decode_capsules``
runs the driver's own compiled pass over one block.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import serial

from sensorbench.drivers import a1_decode as dec
from sensorbench.drivers.a1_protocol import NODE_LEN
from sensorbench.drivers.a1_reader import A1Scanner


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


def decode_nodes(data: bytes | bytearray | memoryview) -> tuple[Nodes, int, int]:
    """Frame and decode as many whole standard-scan nodes as possible from ``data``.

    Returns ``(nodes, consumed, skipped)``: ``consumed`` bytes were used (keep
    ``data[consumed:]`` for the next call), of which ``skipped`` were discarded while
    re-aligning after invalid nodes (corruption or lost bytes).
    """
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    offs = np.empty(buf.size // NODE_LEN + 1, np.int64)
    k, used, skipped = dec.frame_nodes(buf, offs)
    o = offs[:k]
    b0 = buf[o]
    b1 = buf[o + 1].astype(np.uint16)
    nodes = Nodes(
        start=(b0 & 1).astype(bool),
        quality=(b0 >> 2).astype(np.uint8),
        angle_q6=(b1 >> 1) | (buf[o + 2].astype(np.uint16) << 7),
        dist_q2=buf[o + 3].astype(np.uint16) | (buf[o + 4].astype(np.uint16) << 8),
        pos=o.copy(),
    )
    return nodes, int(used), int(skipped)


def started_scanner(path: str, events: list | None = None, **kw: Any) -> A1Scanner:
    """An opened, scanning A1Scanner on ``path`` (``read_timeout_s`` 0.5 s unless given)
    whose events are appended to ``events``."""
    kw.setdefault("read_timeout_s", 0.5)
    if events is not None:
        kw["on_event"] = lambda *e: events.append(e)
    sc = A1Scanner(path, **kw)
    sc.open()
    sc.start()
    return sc


def read_exact(ser: serial.Serial, n: int, timeout_s: float = 2.0) -> bytes:
    """Read exactly ``n`` bytes or fail the test after ``timeout_s`` s."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    while len(buf) < n:
        buf += ser.read(n - len(buf))
        if time.monotonic() > deadline:
            raise AssertionError(f"got {len(buf)} of {n} bytes within {timeout_s} s: {buf.hex()}")
    return buf


def read_for(ser: serial.Serial, seconds: float) -> bytes:
    """Everything that arrives in ``seconds`` s."""
    deadline = time.monotonic() + seconds
    buf = b""
    while time.monotonic() < deadline:
        buf += ser.read(max(1, ser.in_waiting))
    return buf


def descriptor_fields(raw: bytes) -> tuple[int, int, int]:
    """(length, mode, type) from the 7-byte table: A5 5A, 30-bit length | 2-bit mode << 30, type."""
    assert raw[:2] == b"\xa5\x5a", raw.hex()
    word = raw[2] | raw[3] << 8 | raw[4] << 16 | raw[5] << 24
    return word & ((1 << 30) - 1), word >> 30, raw[6]


@dataclass
class RefNodes:
    start: np.ndarray
    quality: np.ndarray
    angle_q6: np.ndarray
    dist_q2: np.ndarray


def ref_decode_nodes(data: bytes) -> RefNodes:
    """Decode aligned 5-byte nodes one by one, asserting every check bit."""
    assert len(data) % 5 == 0
    s, q, a, d = [], [], [], []
    for i in range(0, len(data), 5):
        b = data[i : i + 5]
        start = b[0] & 1
        inverse = (b[0] >> 1) & 1
        assert start != inverse, f"node {i // 5}: S and !S equal"
        assert b[1] & 1 == 1, f"node {i // 5}: check bit not 1"
        s.append(bool(start))
        q.append(b[0] >> 2)
        a.append((b[1] >> 1) + (b[2] << 7))
        d.append(b[3] + (b[4] << 8))
    return RefNodes(np.array(s, bool), np.array(q), np.array(a), np.array(d))


def ref_turns(start: np.ndarray, *fields: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Complete turns (from one start flag up to the next) of parallel node arrays."""
    idx = np.flatnonzero(start)
    return [tuple(f[lo:hi] for f in fields) for lo, hi in itertools.pairwise(idx)]


def ccw_rad(angle_q6: np.ndarray) -> np.ndarray:
    """Native clockwise q6 degrees to counter-clockwise radians in [0, 2π)."""
    deg = np.mod(360.0 - angle_q6 / 64.0, 360.0)
    return np.deg2rad(deg)


def range_m(dist_q2: np.ndarray) -> np.ndarray:
    """q2 mm to m, inf for 0 (no return)."""
    r = dist_q2 / 4000.0
    return np.where(dist_q2 == 0, np.inf, r)


def run_with_deadline(fn: Callable[[], Any], timeout_s: float) -> tuple[bool, Any]:
    """Run ``fn`` in a daemon thread; (finished, result or exception).

    A call that does not finish in ``timeout_s`` s is left behind (daemon thread), so a
    library that hangs cannot hang the test.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # the test inspects what the library raised
            box["result"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    return (not thread.is_alive(), box.get("result"))


def encode_node(start: bool, quality: int, angle_q6: int, dist_q2: int) -> bytes:
    """One standard-scan node from the protocol table (independent of the emulator)."""
    b0 = (quality << 2) | ((0 if start else 1) << 1) | (1 if start else 0)
    return bytes([b0, ((angle_q6 & 0x7F) << 1) | 1, angle_q6 >> 7, dist_q2 & 0xFF, dist_q2 >> 8])


SCAN_DESCRIPTOR = bytes.fromhex("a55a0500004081")


def scan_bytes(raw: bytes) -> bytes:
    """The whole nodes after the last scan descriptor of a raw capture."""
    start = raw.rindex(SCAN_DESCRIPTOR) + len(SCAN_DESCRIPTOR)
    n = (len(raw) - start) // 5 * 5
    return raw[start : start + n]


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    """True as soon as ``condition()`` holds, False if it does not within ``timeout_s`` s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def express_capsule(start_q6: int, dist_mm: list[int], offset_q3: list[int], sync: bool) -> bytes:
    """One 84-byte express capsule from the SDK's layout (``sl_lidar_cmd.h``,
    ``sl_lidar_response_capsule_measurement_nodes_t``), independent of the emulator:
    start angle q6 (bit 15 the S flag), 16 cabins of two ``distance_angle`` words
    (distance mm << 2 | offset bits 4..5) and one byte of the offsets' bits 0..3."""
    body = bytearray((start_q6 | (0x8000 if sync else 0)).to_bytes(2, "little"))
    for i in range(16):
        o1, o2 = offset_q3[2 * i], offset_q3[2 * i + 1]
        body += ((dist_mm[2 * i] << 2) | (o1 >> 4)).to_bytes(2, "little")
        body += ((dist_mm[2 * i + 1] << 2) | (o2 >> 4)).to_bytes(2, "little")
        body.append((o1 & 0xF) | ((o2 & 0xF) << 4))
    check = 0
    for b in body:
        check ^= b
    return bytes([0xA0 | (check & 0xF), 0x50 | (check >> 4)]) + bytes(body)


def express_capsules(
    starts_deg: list[float], dist_mm: list[int], offset_q3: list[int] | None = None
) -> list[bytes]:
    """Capsules with the given start angles (the first with the S flag), the same 32
    distances and offsets (default 0) in each."""
    offs = offset_q3 if offset_q3 is not None else [0] * 32
    return [
        express_capsule(round(a * 64) % 23040, dist_mm, offs, i == 0)
        for i, a in enumerate(starts_deg)
    ]


def ref_express_decode(capsules: list[bytes]) -> RefNodes:
    """Decode consecutive capsules as the vendor SDK does (``handler_capsules.cpp``,
    ``_onScanNodeCapsuleData``), capsule by capsule in plain integers: each capsule's
    32 samples once the next capsule's start angle is known."""
    s, q, a, d = [], [], [], []
    for prev, cur in itertools.pairwise(capsules):
        p_q8 = (int.from_bytes(prev[2:4], "little") & 0x7FFF) << 2
        c_q8 = (int.from_bytes(cur[2:4], "little") & 0x7FFF) << 2
        diff = c_q8 - p_q8 + (360 << 8 if p_q8 > c_q8 else 0)
        inc = diff << 3
        raw = p_q8 << 8
        for i in range(16):
            cab = prev[4 + 5 * i : 9 + 5 * i]
            words = (cab[0] | cab[1] << 8, cab[2] | cab[3] << 8)
            offs = ((cab[4] & 0xF) | (words[0] & 3) << 4, (cab[4] >> 4) | (words[1] & 3) << 4)
            for w, o in zip(words, offs, strict=True):
                angle = (raw - (o << 13)) >> 10
                sync = ((raw + inc) % (360 << 16)) < inc
                raw += inc
                angle = angle + 23040 if angle < 0 else angle - 23040 if angle >= 23040 else angle
                dist = w & 0xFFFC
                s.append(sync)
                q.append(0x2F if dist else 0)
                a.append(angle)
                d.append(dist)
    return RefNodes(np.array(s, bool), np.array(q), np.array(a), np.array(d))


def capsule_fields(capsule: bytes) -> tuple[int, list[int], list[int]]:
    """(start angle q6, 32 distances mm, 32 angle offsets q3) of a capsule, per the SDK."""
    start = int.from_bytes(capsule[2:4], "little") & 0x7FFF
    dist, offs = [], []
    for i in range(16):
        cab = capsule[4 + 5 * i : 9 + 5 * i]
        w1, w2 = cab[0] | cab[1] << 8, cab[2] | cab[3] << 8
        dist += [w1 >> 2, w2 >> 2]
        offs += [(cab[4] & 0xF) | (w1 & 3) << 4, (cab[4] >> 4) | (w2 & 3) << 4]
    return start, dist, offs


def decode_capsules(data: bytes) -> tuple[Nodes, int, int]:
    """The driver's compiled express pass over one block (not a reference decoder): the
    samples of every capsule followed by another, start flags where the SDK sets its sync
    bit. Returns ``(nodes, consumed, skipped)`` like ``decode_nodes``; ``pos`` is each
    sample's index in the scan (32 per capsule, lost capsules counted)."""
    buf = np.frombuffer(bytes(data), dtype=np.uint8)
    most = (buf.size // dec.CAPSULE_LEN + 1) * dec.NODES_PER_CAPSULE
    st = dec.new_state(0, 0, 1)
    st[dec.STARTED] = 1  # every sample, not only those after the first sync bit
    tb = np.empty((5, most), np.int64)
    ob = np.empty((3, most), np.int64)
    used = dec.express_pass(buf, 0, 0, st, np.zeros(dec.CAPSULE_LEN, np.uint8), tb, ob)
    f = st[dec.FILL]
    start = np.zeros(f, bool)
    start[ob[0, : st[dec.N_CUTS]]] = True
    nodes = Nodes(
        start=start,
        quality=tb[dec.Q, :f].astype(np.uint8),
        angle_q6=tb[dec.A, :f].astype(np.uint16),
        dist_q2=tb[dec.D, :f].astype(np.uint16),
        pos=tb[dec.T, :f].copy(),  # nominal 1 ns per sample from 0: the sample index
    )
    return nodes, int(used), int(st[dec.SKIPPED])
