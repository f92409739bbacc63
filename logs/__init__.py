"""The HDF5 session format (``docs/FORMAT.md``): writer, reader, recovery, import, export.

The names below load on first use (PEP 562): importing a light submodule (the CLI's
format lists) does not load h5py.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sensorbench.logs.batches import EncoderBatch, Event, LidarTurns, PoseBatch
    from sensorbench.logs.reader import Session
    from sensorbench.logs.schema import (
        NO_DEVICE_TIME,
        SCHEMA_VERSION,
        FileStatus,
        PoseFlag,
        TurnFlag,
    )
    from sensorbench.logs.writer import SessionWriter

_HOME = {
    **dict.fromkeys(("EncoderBatch", "Event", "LidarTurns", "PoseBatch"), "batches"),
    **dict.fromkeys(("NO_DEVICE_TIME", "SCHEMA_VERSION", "FileStatus", "PoseFlag", "TurnFlag"),
                    "schema"),
    "Session": "reader",
    "SessionWriter": "writer",
}  # fmt: skip

__all__ = ["NO_DEVICE_TIME", "SCHEMA_VERSION", "EncoderBatch", "Event", "FileStatus", "LidarTurns",
           "PoseBatch", "PoseFlag", "Session", "SessionWriter", "TurnFlag"]  # fmt: skip


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
