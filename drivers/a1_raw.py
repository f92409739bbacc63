"""Offline decoding of RPLIDAR A1 byte captures (bare files or raw streams of sessions).

:func:`decode_capture` turns captured bytes into turns with the live scanner's node
decoder and turn assembler (:mod:`~sensorbench.drivers.a1_turns`); :func:`decode_a1`
feeds it from a file: a session's raw stream (or a ``record-raw`` file with its sidecar)
carries host receive times per chunk, spread over each chunk's nodes, and the scan's
sample duration times the turns on the device's clock; a bare file has none, so its
nodes are spaced at a nominal sample rate from 0 (said so in the stream's
``time_source`` attribute).
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_clock import describe as describe_clock
from sensorbench.drivers.a1_protocol import A1SampleRate, possible_nodes
from sensorbench.drivers.a1_turns import TurnAssembler, spread_times
from sensorbench.errors import DriverError, SessionError
from sensorbench.logs import LidarTurns, Session, SessionWriter, TurnFlag


@dataclass
class CaptureDecode:
    """Result of :func:`decode_capture`.

    Attributes:
        turns: complete turns (and, flagged ``PACKET_LOSS``, the turn cut by each
            scan restart or the end of the capture).
        scans: scan descriptors found (scan starts).
        nodes: nodes decoded.
        bytes_skipped: bytes dropped while re-aligning (corruption, loss).
        bytes_outside_scans: bytes before the first scan descriptor (other answers).
        leading_nodes: nodes before the first start flag of each scan (no turn).
        dropped_offsets: byte offsets in the capture of the nodes dropped for an
            impossible angle (q6 >= 23040).
        ranges_beyond_limit: distances beyond 12 m, stored as ``nan``.
    """

    turns: LidarTurns
    scans: int
    nodes: int
    bytes_skipped: int
    bytes_outside_scans: int
    leading_nodes: int
    dropped_offsets: list[int] = field(default_factory=list)
    ranges_beyond_limit: int = 0


def decode_capture(
    data: bytes,
    chunk_times_ns: tuple[np.ndarray, np.ndarray] | None = None,
    t0_ns: int = 0,
    sample_rate_hz: float = proto.NOMINAL_SAMPLES_PER_S,
    require_descriptor: bool = True,
) -> CaptureDecode:
    """Decode a raw A1 byte capture (scan descriptor + standard-scan nodes) into turns.

    Each scan descriptor ``A5 5A 05 00 00 40 81`` starts a new scan (a restart cuts
    the turn in progress). Point times come from ``chunk_times_ns`` = ``(offsets,
    t_ns)`` (the byte offset where each received chunk starts and its host time, as a
    session's raw stream stores them; nodes of a chunk are spread over the gap to
    the previous chunk) or, without it, from ``t0_ns`` plus the node index at
    ``sample_rate_hz`` (a bare capture has no times; the file's attributes say so).

    Turns get device times (:mod:`~sensorbench.drivers.a1_clock`) when the capture
    holds the unit's GET_SAMPLERATE answer (a session's raw stream does) and chunk
    times: each scan's count starts at its first node, anchored at the host time of
    the chunk that completed it, as the live scanner does.

    Raises:
        DriverError: no scan descriptor while ``require_descriptor`` (not an A1
            standard-scan capture; pass ``require_descriptor=False`` for a bare node
            stream that starts on a node boundary).
    """
    rate = sample_rate_in(data)
    desc = proto.SCAN_DESCRIPTOR
    starts = []
    pos = data.find(desc)
    while pos >= 0:
        starts.append(pos)
        pos = data.find(desc, pos + len(desc))
    if not starts:
        if require_descriptor:
            raise DriverError(
                f"no A1 scan descriptor ({desc.hex(' ')}) in {len(data)} bytes: not an A1 "
                "standard-scan capture (for a bare node stream, decode without descriptor)"
            )
        segments = [(0, len(data))]
        outside = 0
    else:
        bounds = [*starts, len(data)]
        segments = [(a + len(desc), b) for a, b in itertools.pairwise(bounds)]
        outside = starts[0]
    asm = TurnAssembler()
    out: list[LidarTurns] = []
    n_nodes = 0
    skipped_total = 0
    dropped: list[int] = []
    for lo, hi in segments:
        nodes, _, skipped = proto.decode_nodes(data[lo:hi])
        skipped_total += skipped
        pos_abs = nodes.pos + lo
        dropped.extend(pos_abs[~possible_nodes(nodes)].tolist())
        if chunk_times_ns is None:
            t_ns = t0_ns + np.round((n_nodes + np.arange(len(nodes))) * 1e9 / sample_rate_hz)
            t_ns = t_ns.astype(np.int64)
        else:
            t_ns = _times_from_chunks(pos_abs, *chunk_times_ns)
        dev = None
        if rate is not None and chunk_times_ns is not None and len(nodes):
            dev = _device_times(pos_abs, rate.standard_us, *chunk_times_ns)
        n_nodes += len(nodes)
        asm.reset()
        if skipped:
            asm.mark(TurnFlag.CRC_ERRORS)
        out.append(asm.feed(nodes, t_ns, dev))
        out.append(asm.flush())
    return CaptureDecode(
        LidarTurns.concat(out),
        len(starts),
        n_nodes,
        skipped_total,
        outside,
        asm.leading_nodes_skipped,
        dropped,
        asm.ranges_beyond_limit,
    )


def sample_rate_in(data: bytes) -> A1SampleRate | None:
    """The first GET_SAMPLERATE answer in a raw capture, or None."""
    at = data.find(proto.SAMPLERATE_DESCRIPTOR)
    payload = data[at + proto.DESCRIPTOR_LEN : at + proto.DESCRIPTOR_LEN + proto.SAMPLERATE_LEN]
    if at < 0 or len(payload) < proto.SAMPLERATE_LEN:
        return None
    try:
        return A1SampleRate.from_payload(payload)
    except ValueError:
        return None


def _device_times(
    pos: np.ndarray, sample_us: int, offsets: np.ndarray, t_ns: np.ndarray
) -> np.ndarray:
    """Device times of one scan's nodes at byte offsets ``pos`` (as :class:`NodeClock`)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    first_chunk = np.searchsorted(offsets, pos[0] + proto.NODE_LEN - 1, side="right") - 1
    gaps = np.diff(pos) - proto.NODE_LEN  # bytes skipped between consecutive nodes
    idx = np.concatenate(([0], np.cumsum(1 + np.round(gaps / proto.NODE_LEN)))).astype(np.int64)
    return int(np.asarray(t_ns)[first_chunk]) + idx * int(sample_us) * 1000


def _times_from_chunks(pos: np.ndarray, offsets: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """Host time of nodes at byte offsets ``pos`` from chunk start offsets and times."""
    offsets = np.asarray(offsets, dtype=np.int64)
    t_ns = np.asarray(t_ns, dtype=np.int64)
    end = pos + proto.NODE_LEN - 1  # a node is complete when its last byte arrived
    chunk = np.searchsorted(offsets, end, side="right") - 1
    out = np.empty(pos.size, dtype=np.int64)
    for c in np.unique(chunk):
        sel = np.flatnonzero(chunk == c)
        prev = int(t_ns[c - 1]) if c > 0 else None
        out[sel] = spread_times(prev, int(t_ns[c]), sel.size)
    return out


def _read_input(raw: Path, stream: str | None) -> tuple[bytes, Any, str]:
    """Bytes, optional (offsets, times) and a description of where they came from."""
    if not h5py.is_hdf5(raw):
        from sensorbench.logs.raw_file import read_raw_recording, sidecar_path

        rec = read_raw_recording(raw)
        if rec.offsets is None:
            return rec.data, None, f"raw byte file {raw.name}"
        where = f"raw byte file {raw.name}, read times from {sidecar_path(raw).name}"
        return rec.data, (rec.offsets, rec.t_ns), where
    with Session(raw) as s:
        names = s.raw_names()
        if stream is None:
            if len(names) != 1:
                raise SessionError(f"{raw}: raw streams {names}; choose one with --stream")
            stream = names[0]
        if stream not in names:
            raise SessionError(f"{raw}: no raw stream {stream!r}; it has {names}")
        chunks = list(s.raw(stream).iter_chunks())
    data = b"".join(c for _, c in chunks)
    sizes = np.array([len(c) for _, c in chunks], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    times = np.array([t for t, _ in chunks], dtype=np.int64)
    return data, (offsets, times), f"raw stream {stream!r} of session {raw.name}"


def decode_a1(
    raw: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    name: str = "a1",
    stream: str | None = None,
    sample_rate_hz: float = 2000.0,
    require_descriptor: bool = True,
    label: str = "",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Decode ``raw`` (bare capture or session) into a new session ``output``.

    Args:
        raw: a file of received bytes (with host read times when ``record-raw`` wrote
            its ``.chunks`` sidecar), or a session whose raw stream is decoded again.
        output: session file to write.
        name: lidar stream name in the output.
        stream: raw stream of a source session (default: its only one).
        sample_rate_hz: nodes per second that give a bare file's points times (Hz).
        require_descriptor: the capture starts with the scan descriptor
            ``A5 5A 05 00 00 40 81``; False for a bare node stream.
        label: session label.
        overwrite: replace ``output`` if it exists.

    Returns:
        A summary: scans, turns, points, nodes, bytes, bytes skipped, the nodes dropped
        for an impossible angle (with their byte offsets) and ranges beyond the limit.

    Raises:
        SessionError: the source session has no such raw stream (or several and no
            ``stream``), or the output cannot be written.
    """
    raw, output = Path(raw), Path(output)
    data, chunks, source = _read_input(raw, stream)
    if chunks is None:
        result = decode_capture(
            data, sample_rate_hz=sample_rate_hz, require_descriptor=require_descriptor
        )
        time_source = f"synthetic: node index at {sample_rate_hz:g} Hz from 0 (no host times)"
    else:
        result = decode_capture(data, chunk_times_ns=chunks, require_descriptor=require_descriptor)
        time_source = "host receive times of the raw chunks, spread over each chunk"
    with SessionWriter(
        output,
        label=label,
        swmr=False,
        overwrite=overwrite,
        attrs={"source": f"decode a1 of {source}"},
    ) as w:
        w.add_lidar(
            name,
            attrs={
                "model": "A1",
                "decoded_from": str(raw),
                "time_source": time_source,
                "device_time": (
                    describe_clock(sample_rate_in(data))
                    if chunks is not None
                    else "none: a bare capture has no chunk times to anchor the node count"
                ),
            },
        )
        w.add_raw(name, attrs={"kind": "a1", "baud": 115200, "source": str(raw)})
        w.start()
        t0 = int(result.turns.t_first_ns[0]) if result.turns.n_turns else 0
        w.append_raw(name, t0, data)
        if result.turns.n_turns:
            w.append_turns(name, result.turns)
        if result.bytes_skipped:
            w.event(
                t0,
                name,
                "crc_burst",
                f"{result.bytes_skipped} bytes skipped while re-aligning nodes",
            )
    return {
        "output": str(output),
        "stream": name,
        "scans": result.scans,
        "turns": result.turns.n_turns,
        "points": result.turns.n_points,
        "nodes": result.nodes,
        "bytes": len(data),
        "bytes_skipped": result.bytes_skipped,
        "bytes_outside_scans": result.bytes_outside_scans,
        "leading_nodes_without_turn": result.leading_nodes,
        "nodes_dropped": len(result.dropped_offsets),
        "nodes_dropped_offsets": result.dropped_offsets,
        "ranges_beyond_limit": result.ranges_beyond_limit,
    }
