"""Offline decoding of RPLIDAR A1 byte captures (bare files or raw streams of sessions).

The same node decoder as the live reader (:func:`~sensorbench.drivers.a1.decode_capture`),
fed from a file: a session's raw stream (or a ``record-raw`` file with its sidecar)
carries host receive times per chunk, spread over each chunk's nodes, and the scan's
sample duration times the turns on the device's clock; a bare file has none, so its
nodes are spaced at a nominal sample rate from 0 (said so in the stream's
``time_source`` attribute).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from sensorbench.drivers.a1 import decode_capture, sample_rate_in
from sensorbench.drivers.a1_clock import describe as describe_clock
from sensorbench.errors import SessionError
from sensorbench.logs import Session, SessionWriter


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
