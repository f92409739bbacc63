"""Bare raw byte captures ``RAW.bin`` and their chunk-time sidecar ``RAW.bin.chunks``
(``sensorbench record-raw``, docs/CAPTURE.md): byte offset and host ns of each read."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.atomic_output import regular_input

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
    """Read ``path`` and, if present, its sidecar (validated).

    Raises:
        ImportFormatError: the sidecar is malformed (``file:line: what``), or its
            offsets do not fit the byte file.
    """
    raw = regular_input(path, ImportFormatError)
    data = raw.read_bytes()
    side = sidecar_path(raw)
    if not side.is_file():
        return RawRecording(data, None, None, [])
    comments: list[str] = []
    offsets: list[int] = []
    times: list[int] = []
    seen_header = False
    for i, line in enumerate(side.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.strip()
        if not text:
            continue
        if text.startswith("#"):
            comments.append(text[1:].strip())
            continue
        if not seen_header:
            if text != HEADER:
                raise ImportFormatError(f"{side}:{i}: expected the header {HEADER!r}, got {text!r}")
            seen_header = True
            continue
        cells = text.split(",")
        if len(cells) != 2:
            raise ImportFormatError(f"{side}:{i}: expected 'offset,t_ns', got {text!r}")
        try:
            off, t = int(cells[0]), int(cells[1])
        except ValueError:
            raise ImportFormatError(
                f"{side}:{i}: offset and t_ns must be integers: {text!r}"
            ) from None
        if offsets and off <= offsets[-1]:
            raise ImportFormatError(f"{side}:{i}: offset {off} not above the previous one")
        if not offsets and off != 0:
            raise ImportFormatError(f"{side}:{i}: the first offset must be 0, got {off}")
        if off >= len(data):
            raise ImportFormatError(f"{side}:{i}: offset {off} beyond {raw.name} ({len(data)} B)")
        if times and t < times[-1]:
            raise ImportFormatError(f"{side}:{i}: t_ns {t} before the previous row's")
        offsets.append(off)
        times.append(t)
    if not offsets:
        if data:
            raise ImportFormatError(f"{side}: no rows, but {raw.name} holds {len(data)} bytes")
        return RawRecording(data, None, None, comments)
    return RawRecording(
        data, np.array(offsets, dtype=np.int64), np.array(times, dtype=np.int64), comments
    )
