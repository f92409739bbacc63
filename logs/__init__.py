"""The HDF5 session format: writer, reader, replay, recovery, import and export.

See ``docs/FORMAT.md`` for the layout, field by field.
"""

from sensorbench.logs.batches import EncoderBatch, Event, LidarTurns, PoseBatch
from sensorbench.logs.reader import ReplayItem, Session
from sensorbench.logs.schema import (
    NO_DEVICE_TIME,
    SCHEMA_VERSION,
    FileStatus,
    PoseFlag,
    TurnFlag,
)
from sensorbench.logs.writer import SessionWriter

__all__ = [
    "NO_DEVICE_TIME",
    "SCHEMA_VERSION",
    "EncoderBatch",
    "Event",
    "FileStatus",
    "LidarTurns",
    "PoseBatch",
    "PoseFlag",
    "ReplayItem",
    "Session",
    "SessionWriter",
    "TurnFlag",
]
