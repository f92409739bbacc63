"""A1 turns: a scan's bytes, read by read or from a capture, cut into complete turns.

The live scanner and ``sensorbench decode a1`` share :class:`A1Turns`, so decoding a
session's raw bytes again gives the live turns exactly (timing: docs/A1.md, Device-side
turn timing).
"""


from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from sensorbench.drivers import a1_decode as k
from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_protocol import (
    CAPSULE_LEN,
    A1SampleRate,
    describe_clock,
)
from sensorbench.drivers.device_protocol import pick_raw_stream
from sensorbench.errors import DriverError
from sensorbench.logs import LidarTurns, Session, SessionWriter, TurnFlag

_START_CAP = 4096


def _counter(slot: int, doc: str) -> Any:
    """A read-only count: the totals of earlier scans plus the current scan's."""
    return property(lambda self: int(self._totals[slot] + self._st[slot]), doc=doc)


class A1Turns:
    """Bytes of one scan in ``mode`` (``standard``: 5-byte nodes, ``express``: 84-byte
    capsules) in, complete turns out: a turn runs from a start flag to the next (or
    :meth:`flush`, flagged ``PACKET_LOSS``); dropped and skipped nodes: docs/A1.md, Turns.

    ``sample_us``: the mode's sample duration (µs) for device times (0 or None: none);
    ``max_node_ns``: host-time spreading, at most this much per node (ns);
    ``nominal_us`` > 0 for a capture without receive times: every time is the first
    read's ``t_ns`` + sample index × this (µs).
    """

    def __init__(self, mode: str = "standard", sample_us: float | None = None,
            max_node_ns: int = 1_000_000, nominal_us: float = 0.0) -> None:
        self._check(mode)
        self.mode = mode
        self._cfg = (round((sample_us or 0) * 1000), int(max_node_ns), round(nominal_us * 1000))
        self.offset = 0
        """Stream offset of the next byte fed (the offline decoder sets it per scan)."""
        self.dropped_offsets: list[int] = []
        """Stream offsets of the nodes dropped for an impossible angle."""
        self.last_skipped = 0
        """Bytes the last :meth:`feed` skipped re-aligning."""
        self._totals = np.zeros(k.STATE_SIZE, np.int64)
        self._prev = np.zeros(CAPSULE_LEN, np.uint8)
        self._tb = np.empty((5, _START_CAP), np.int64)
        self._ob = np.empty((3, _START_CAP), np.int64)
        self._offs = np.empty(_START_CAP, np.int64)
        self._work = np.empty(_START_CAP, np.uint8)
        self._st = k.new_state(*self._cfg)

    # -- counters -------------------------------------------------------------------

    nodes_total = _counter(k.NODES, "Nodes framed (standard) or decoded from capsules (express).")
    bytes_skipped = _counter(k.SKIPPED, "Bytes discarded re-aligning (corruption or link loss).")
    nodes_dropped = _counter(k.DROPPED, "Nodes dropped for an impossible angle (q6 ≥ 23040).")
    ranges_beyond_limit = _counter(k.BEYOND, "Distances beyond 12 m (stored as ``nan``).")
    leading_nodes_skipped = _counter(k.LEADING,
        "Nodes before the first start flag of each scan (no turn).")
    samples_estimated_lost = _counter(k.LOST,
        "Samples estimated lost from the bytes skipped (and undecodable express capsules).")
    capsules = _counter(k.CAPSULES, "Express capsules accepted.")

    # -- the stream -------------------------------------------------------------------

    def mark(self, flag: TurnFlag) -> None:
        """Set ``flag`` on the turn being assembled."""
        self._st[k.FLAGS] |= int(flag)

    def reset(self, offset: int | None = None, mode: str | None = None,
            sample_us: float | None = None, nominal_us: float | None = None) -> None:
        """A new scan (start, restart, reconnect): no tail, no turn, no clock anchor;
        ``offset``: of the next byte (default: past the tail); the others, given, change
        the scan's."""
        if mode is not None:
            self._check(mode)
            self.mode = mode
        if sample_us is not None:
            self._cfg = (round(sample_us * 1000), *self._cfg[1:])
        if nominal_us is not None:
            self._cfg = (*self._cfg[:2], round(nominal_us * 1000))
        self._totals[k.NODES : k.RESETS + 1] += self._st[k.NODES : k.RESETS + 1]
        self.offset = self.offset + int(self._st[k.TAIL]) if offset is None else int(offset)
        self._st = k.new_state(*self._cfg)

    def feed(self, t_ns: int, data: bytes) -> LidarTurns:
        """Decode ``data`` (the scan's bytes read at host ``t_ns``, ns) after the kept
        tail; returns the turns it completed. One compiled call a read (a wake-up of the
        reader): the arrays are built only when a turn completes."""
        if self.mode == "standard":
            got = k.standard_feed(data, int(t_ns), self.offset, self._st, self._work,
                self._offs, self._tb, self._ob)  # fmt: skip
        else:
            got = k.express_feed(data, int(t_ns), self.offset, self._st, self._work,
                self._prev, self._tb, self._ob)  # fmt: skip
        if got[0] < 0:  # a buffer too small for this read: grow, then decode it
            self._reserve(got[1], got[1] - int(self._st[k.FILL]), got[2])
            return self.feed(t_ns, data)
        cuts, dropped, self.last_skipped = got
        self.offset += len(data)
        if dropped:
            self.dropped_offsets.extend(self._ob[2, :dropped].tolist())
        if not cuts:
            return _EMPTY
        ends = self._ob[0, :cuts]
        turns = self._turns(ends.copy(), self._ob[1, :cuts].copy())
        last, fill = int(ends[-1]), int(self._st[k.FILL])
        self._tb[:, : fill - last] = self._tb[:, last:fill]
        self._st[k.FILL] = fill - last
        return turns

    def flush(self) -> LidarTurns:
        """Emit the turn in progress, flagged ``PACKET_LOSS`` (it is incomplete); the
        next node starts nothing until a start flag."""
        fill = int(self._st[k.FILL])
        flags = int(self._st[k.FLAGS]) | int(TurnFlag.PACKET_LOSS)
        self._st[k.FILL] = 0
        self._st[k.FLAGS] = 0
        self._st[k.STARTED] = 0
        if fill == 0:
            return _EMPTY
        return self._turns(np.array([fill]), np.array([flags]))

    # -- internals ------------------------------------------------------------------

    @staticmethod
    def _check(mode: str) -> None:
        if mode not in ("standard", "express"):
            raise ValueError(f"scan mode must be 'standard' or 'express', got {mode!r}")

    def _reserve(self, nodes: int, per_read: int, n_bytes: int) -> None:
        """Room for ``nodes`` in the turn buffer, ``per_read`` nodes of one read and
        ``n_bytes`` (the tail and a read) in the work buffer."""
        if n_bytes > self._work.size:
            grown_work = np.empty(max(n_bytes, 2 * self._work.size), np.uint8)
            grown_work[: self._work.size] = self._work
            self._work = grown_work
        if nodes > self._tb.shape[1]:
            grown = np.empty((5, max(nodes, 2 * self._tb.shape[1])), np.int64)
            grown[:, : self._tb.shape[1]] = self._tb
            self._tb = grown
        if per_read > self._ob.shape[1]:
            self._ob = np.empty((3, max(per_read, 2 * self._ob.shape[1])), np.int64)
            self._offs = np.empty(self._ob.shape[1], np.int64)

    def _turns(self, ends: np.ndarray, flags: np.ndarray) -> LidarTurns:
        """The turns ``[0, ends[0])``, ``[ends[0], ends[1])``... of the turn buffer."""
        t_first, dev, count, angle, rng, quality, t = k.turn_arrays(self._tb, ends)
        return LidarTurns(t_first, dev, np.full(ends.size, np.nan), count, flags, angle, rng,
            quality, t)


_EMPTY = LidarTurns.empty()
for _a in vars(_EMPTY).values():
    _a.flags.writeable = False  # shared by every read that completes no turn (most reads)


# -- captures: offline decoding (``sensorbench decode a1``) -------------------------


@dataclass
class CaptureDecode:
    """Result of :func:`decode_capture`: the turns (the one cut by each scan restart or
    the end flagged ``PACKET_LOSS``), the scan descriptors found, each scan's mode, the
    ``decoder`` with its counters, the bytes before the first scan descriptor and the
    capture's GET_SAMPLERATE answer (None: none)."""

    turns: LidarTurns
    scans: int
    modes: list[str]
    decoder: A1Turns
    bytes_outside_scans: int
    sample_rate: A1SampleRate | None


_DESCRIPTORS = {proto.SCAN_DESCRIPTOR: "standard", proto.EXPRESS_DESCRIPTOR: "express"}
_DESCRIPTOR_RE = re.compile(b"|".join(map(re.escape, _DESCRIPTORS)))


def decode_capture(data: bytes, chunk_times_ns: tuple[np.ndarray, np.ndarray] | None = None,
        sample_rate_hz: float | None = None, require_descriptor: bool = True,
        mode: str = "standard") -> CaptureDecode:
    """Decode a raw A1 byte capture (scan descriptors + nodes or capsules) into turns.

    Each scan descriptor starts a new scan in its mode. With ``chunk_times_ns`` =
    ``(offsets, t_ns)`` (each received chunk's byte offset and host time) every chunk is
    fed as received, so the turns are the live scanner's; without it the capture is one
    chunk at 0 timed by sample index × the unit's GET_SAMPLERATE duration if the
    capture holds it, else 1 / ``sample_rate_hz`` (default nominal 2000/s or 4000/s).
    DriverError: no scan descriptor while ``require_descriptor`` (False: a bare stream of
    ``mode`` that starts on a node or capsule boundary).
    """
    rate = proto.find_answer(data, proto.SAMPLERATE_DESCRIPTOR, A1SampleRate.from_payload)
    found = [(m.start(), _DESCRIPTORS[m.group()]) for m in _DESCRIPTOR_RE.finditer(data)]
    ends = [at for at, _ in found[1:]] + [len(data)]
    segments = [(at + proto.DESCRIPTOR_LEN, end, m)  # (first byte, end, mode) of each scan
        for (at, m), end in zip(found, ends, strict=False)]
    scans = len(segments)
    outside = segments[0][0] - proto.DESCRIPTOR_LEN if segments else 0
    if not segments:
        if require_descriptor:
            raise DriverError(f"no A1 scan descriptor ({proto.SCAN_DESCRIPTOR.hex(' ')} standard, "
                f"{proto.EXPRESS_DESCRIPTOR.hex(' ')} express) in {len(data)} bytes: not an "
                "A1 scan capture (for a bare node stream, decode without descriptor)")
        segments = [(0, len(data), mode)]
    bare = chunk_times_ns is None
    offsets, times = (np.zeros(1), np.zeros(1)) if bare else chunk_times_ns  # type: ignore[misc]
    offsets, times = np.asarray(offsets, np.int64), np.asarray(times, np.int64)
    dec = A1Turns(segments[0][2])
    out: list[LidarTurns] = []
    for lo, hi, seg_mode in segments:
        sample_us = 0 if rate is None else rate.sample_us(seg_mode)
        nominal = sample_us or 1e6 / (sample_rate_hz or _NOMINAL_HZ[seg_mode])
        dec.reset(lo, seg_mode, sample_us, nominal if bare else None)
        bounds = np.clip(np.append(offsets, hi), lo, hi)  # chunk c: [bounds[c], bounds[c + 1])
        for c in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
            out.append(dec.feed(int(times[c]), data[bounds[c] : bounds[c + 1]]))
        out.append(dec.flush())
    return CaptureDecode(LidarTurns.concat(out), scans, [m for _, _, m in segments], dec,
        outside, rate)


_NOMINAL_HZ = {"standard": proto.NOMINAL_SAMPLES_PER_S, "express": proto.NOMINAL_EXPRESS_PER_S}


def _time_bases(
    result: CaptureDecode, received: bool, sample_rate_hz: float | None
) -> tuple[str, str]:
    """The ``time_base`` and ``device_time`` attributes of a decoded capture's turns."""
    modes = sorted(set(result.modes))
    rate = result.sample_rate
    if received:
        return ("host monotonic_ns at receive (raw chunks), spread over each read's nodes",
            "; ".join(describe_clock(rate, m) for m in modes))
    if rate is not None and all(rate.sample_us(m) > 0 for m in result.modes):
        durations = ", ".join(f"{m} {rate.sample_us(m)} us" for m in modes)
        base = ("device: sample index x the unit's sample duration (GET_SAMPLERATE: "
            f"{durations}) from 0; no host receive times")
        return base, base
    hz = ", ".join(f"{m} {sample_rate_hz or _NOMINAL_HZ[m]:g} Hz" for m in modes)
    return (f"nominal: sample index at {hz} from 0 (no receive times, no GET_SAMPLERATE "
        "answer): invented times", "none: no GET_SAMPLERATE answer in the capture")


def _read_input(raw: Path, stream: str | None) -> tuple[bytes, Any, str, np.ndarray | None]:
    """Bytes, optional (offsets, times), a description of where they came from, and the
    first-node receive times of the turns a session's capture stored (None: no such
    stream)."""
    if not h5py.is_hdf5(raw):
        from sensorbench.logs.raw_file import read_raw_recording, sidecar_path

        rec = read_raw_recording(raw)
        if rec.offsets is None:
            return rec.data, None, f"raw byte file {raw.name}", None
        where = f"raw byte file {raw.name}, read times from {sidecar_path(raw).name}"
        return rec.data, (rec.offsets, rec.t_ns), where, None
    with Session(raw) as s:
        stream = pick_raw_stream(s, stream, "rplidar", "--stream")
        chunks = list(s.raw(stream).iter_chunks())
        live = s.lidar(stream).read().t_first_ns if stream in s.lidar_names() else None
    data = b"".join(c for _, c in chunks)
    offsets = np.cumsum([0] + [len(c) for _, c in chunks[:-1]], dtype=np.int64)
    times = np.array([t for t, _ in chunks], dtype=np.int64)
    return data, (offsets, times), f"raw stream {stream!r} of session {raw.name}", live


def as_captured(turns: LidarTurns, live_first_ns: np.ndarray | None) -> LidarTurns:
    """The decoded turns the capture itself stored: those from its first stored turn to
    its last (the raw stream also holds the bring-up's turns before, and the turn the
    stop cut after); all of them without stored turns."""
    if live_first_ns is None or live_first_ns.size == 0 or turns.n_turns == 0:
        return turns
    t = turns.t_first_ns
    a = int(np.searchsorted(t, live_first_ns[0], side="left"))
    b = int(np.searchsorted(t, live_first_ns[-1], side="right"))
    if b <= a:
        return LidarTurns.empty()
    return turns.select(slice(a, b), int(turns.offset[a]),
        int(turns.offset[b - 1] + turns.count[b - 1]))


def decode_a1(raw: str | os.PathLike[str], output: str | os.PathLike[str], *, name: str = "a1",
        stream: str | None = None, sample_rate_hz: float | None = None,
        require_descriptor: bool = True, mode: str = "standard", label: str = "",
        overwrite: bool = False) -> dict[str, Any]:
    """Decode ``raw`` into a new session ``output`` (lidar stream ``name``); returns the
    counters of :class:`CaptureDecode` and the time base.

    ``raw``: a file of received bytes (with a ``record-raw`` ``.chunks`` sidecar: host read
    times), or a session whose raw ``stream`` (default: its only rplidar one) is decoded
    again. ``sample_rate_hz`` times a bare file without the unit's GET_SAMPLERATE answer
    (Hz; default the nominal 2000 standard, 4000 express); ``require_descriptor`` and
    ``mode`` as for :func:`decode_capture`. SessionError: no such raw stream (or several
    and no ``stream``) or an unwritable output; DriverError: no scan descriptor.
    """
    raw, output = Path(raw), Path(output)
    data, chunks, source, live = _read_input(raw, stream)
    try:
        res = decode_capture(data, chunks, sample_rate_hz, require_descriptor, mode)
    except DriverError as exc:
        raise DriverError(f"{raw}: {exc}") from None
    res.turns = as_captured(res.turns, live)
    dec = res.decoder
    time_base, device_time = _time_bases(res, chunks is not None, sample_rate_hz)
    turns = res.turns
    modes = ", ".join(sorted(set(res.modes)))
    attrs = {"model": "A1", "decoded_from": str(raw), "scan_mode": modes}
    session = {"source": f"decode a1 of {source}"}
    with SessionWriter(output, label=label, swmr=False, overwrite=overwrite, attrs=session) as w:
        w.add_lidar(name, attrs={**attrs, "time_base": time_base, "device_time": device_time})
        w.add_raw(name, attrs={"kind": "a1", "baud": proto.BAUD, "source": str(raw)})
        w.start()
        t0 = int(turns.t_first_ns[0]) if turns.n_turns else 0
        w.append_raw(name, t0, data)
        if turns.n_turns:
            w.append_turns(name, turns)
        if dec.bytes_skipped:
            msg = f"{dec.bytes_skipped} bytes skipped while re-aligning nodes"
            w.event(t0, name, "crc_burst", msg)
    return {"output": str(output), "stream": name, "scans": res.scans, "scan_modes": res.modes,
        "turns": turns.n_turns, "points": turns.n_points, "nodes": dec.nodes_total,
        "bytes": len(data), "bytes_skipped": dec.bytes_skipped,
        "bytes_outside_scans": res.bytes_outside_scans,
        "leading_nodes_without_turn": dec.leading_nodes_skipped,
        "nodes_dropped": len(dec.dropped_offsets), "nodes_dropped_offsets": dec.dropped_offsets,
        "ranges_beyond_limit": dec.ranges_beyond_limit, "time_base": time_base}
