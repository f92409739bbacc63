"""The HDF5 session format: writer, reader, recovery, import and export.

See ``docs/FORMAT.md`` for the layout, field by field.

The names below load on first use (PEP 562), so importing one light submodule
(``logs.exporters``' format list, ``logs.importers``' reader table) does not load
h5py: the CLI builds its command tree without it.
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
