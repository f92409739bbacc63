"""Whole-file readers of the import formats: each ``stream_X``'s samples at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sensorbench.logs import text_table
from sensorbench.logs.importers import (
    Imported,
    ImportStream,
    stream_euroc,
    stream_motive,
    stream_pod_csv,
    stream_pose_csv,
    stream_tum,
)


def _whole_file(stream: Callable[..., ImportStream]) -> Callable[..., Imported]:
    def read(*args: Any, **kwargs: Any) -> Imported:
        return stream(*args, **kwargs).whole()

    return read


read_tum = _whole_file(stream_tum)
read_euroc = _whole_file(stream_euroc)
read_motive = _whole_file(stream_motive)
read_pose_csv = _whole_file(stream_pose_csv)
read_pod_csv = _whole_file(stream_pod_csv)


def parse_int(text: str) -> int | None:
    """An integer written in ASCII decimal digits (optional sign); None otherwise."""
    return int(text.strip(" \t")) if text_table._INTS.cell.fullmatch(text) else None
