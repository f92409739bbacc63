"""Bare raw byte captures ``RAW.bin`` and their chunk-time sidecar ``RAW.bin.chunks``
(``sensorbench record-raw``, docs/CAPTURE.md): byte offset and host ns of each read."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.atomic_output import regular_input
from sensorbench.logs.text_table import ASCII_SPACE, integers, tables, text_lines

SIDECAR_SUFFIX = ".chunks"
MAGIC = "# sensorbench record-raw chunks v1"
HEADER = "offset,t_ns"


def sidecar_path(raw: str | os.PathLike[str]) -> Path:
    """The chunk-time sidecar of ``raw`` (``RAW.bin`` → ``RAW.bin.chunks``)."""
    p = Path(raw)
    return p.with_name(p.name + SIDECAR_SUFFIX)


@dataclass
class RawRecording:
    """A bare capture: its bytes and, when its sidecar exists, per-read offsets and times.

    Attributes:
        data: the bytes.
        offsets: int64 start offset of each read, or None (no sidecar).
        t_ns: int64 host receive time of each read (ns), or None.
        comments: the sidecar's comment lines (port, baud, clock), without ``#``.
    """

    data: bytes
    offsets: np.ndarray | None
    t_ns: np.ndarray | None
    comments: list[str]

    def chunks(self) -> list[tuple[int, bytes]]:
        """``(t_ns, bytes)`` per read, in order (requires the sidecar)."""
        if self.offsets is None or self.t_ns is None:
            raise ValueError("no chunk times: this capture has no sidecar")
        ends = [*self.offsets[1:].tolist(), len(self.data)]
        return [
            (int(t), self.data[int(a) : int(b)])
            for a, b, t in zip(self.offsets.tolist(), ends, self.t_ns.tolist(), strict=True)
        ]


def format_sidecar_header(port: str, baud: int) -> str:
    """The sidecar's first lines (magic comment, port/baud/clock comment, column header)."""
    return (
        f"{MAGIC}\n# port={port} baud={baud} clock=host time.monotonic_ns (CLOCK_MONOTONIC)\n"
        f"{HEADER}\n"
    )


def read_raw_recording(path: str | os.PathLike[str]) -> RawRecording:
    """Read ``path`` and, if present, its sidecar (validated column-wise,
    :mod:`sensorbench.logs.text_table`).

    Raises:
        ImportFormatError: the sidecar is malformed (``file:line:column: what``), or its
            offsets do not fit the byte file.
    """
    raw = regular_input(path, ImportFormatError)
    data = raw.read_bytes()
    side = sidecar_path(raw)
    if not side.is_file():
        return RawRecording(data, None, None, [])
    lines = [(i, t.strip(ASCII_SPACE)) for i, t in text_lines(side)]
    comments = [t[1:].strip() for _, t in lines if t.startswith("#")]
    rows = ((i, t) for i, t in lines if t and not t.startswith("#"))
    head_line, head = next(rows, (0, HEADER))
    if head != HEADER:
        raise ImportFormatError(f"{side}:{head_line}: expected the header {HEADER!r}, got {head!r}")
    chunks = list(tables(side, rows, ",", 2, "expected 'offset,t_ns', got {n} cells"))
    if not chunks:
        if data:
            raise ImportFormatError(f"{side}: no rows, but {raw.name} holds {len(data)} bytes")
        return RawRecording(data, None, None, comments)
    line = np.concatenate([t.lines for t in chunks])
    offsets = np.concatenate([integers(t, 0, "offset") for t in chunks])
    t_ns = np.concatenate([integers(t, 1, "t_ns") for t in chunks])

    def refuse(bad: np.ndarray, col: int, why: str) -> None:
        if bad.any():
            k = int(np.argmax(bad))
            raise ImportFormatError(f"{side}:{line[k]}:{col}: " + why.format(offsets[k], t_ns[k]))

    refuse(np.r_[offsets[0] != 0], 1, "the first offset must be 0, got {0}")
    refuse(np.diff(offsets, prepend=-1) <= 0, 1, "offset {0} not above the previous one")
    refuse(offsets >= len(data), 1, f"offset {{0}} beyond {raw.name} ({len(data)} B)")
    refuse(np.diff(t_ns, prepend=t_ns[0]) < 0, 2, "t_ns {1} before the previous row's")
    return RawRecording(data, offsets, t_ns, comments)
