"""Session format version 1: constants, flags and on-disk dtypes.

Every field is documented in ``docs/FORMAT.md``; keep the two in step.
"""

from __future__ import annotations

import unicodedata
from enum import IntEnum, IntFlag
from typing import Any

import numpy as np

SCHEMA_VERSION = 1
"""Version of the session layout written by this software."""

FORMAT_NAME = "sensorbench-session"
"""Value of the root attribute ``format``: how a session is told from a foreign HDF5 file."""

NO_DEVICE_TIME = int(np.iinfo(np.int64).min)
"""Sentinel for "the device sent no time for this sample" in any ``device_ns`` field."""

LIBVER = ("v110", "v110")
"""HDF5 format bounds: SWMR-capable and readable by HDF5 1.10 tools (Debian 12)."""


class TurnFlag(IntFlag):
    """Per-turn flags of a lidar stream."""

    PACKET_LOSS = 1
    """Packets or nodes are known lost inside this turn (device time or sequence gap)."""
    AFTER_RECONNECT = 2
    """The first complete turn after the device was reconnected."""
    CRC_ERRORS = 4
    """At least one packet failed its check while this turn was assembled."""
    SINGLE_LIDAR = 8
    """A merged turn of one lidar alone: the other had no turn near it (docs/LIDAR.md)."""


class PoseFlag(IntFlag):
    """Per-sample flags of a pose stream."""

    RELOCALIZED = 1
    """The sensor relocalized into its map at this sample (a new offset starts here)."""
    PAUSED = 2
    """The sensor reported a pause (e.g. covered); the sample may be held or stale."""
    DEGRADED = 4
    """An estimate whose filter's consistency monitor is raised at this sample."""
    COASTING = 8
    """An estimate at a frame that ends a gap of the pod stream longer than the filters'
    ``stale_s``: the filters predicted over the gap."""


class FileStatus(IntEnum):
    """Value of the ``/_status`` dataset."""

    WRITING = 0
    """A writer has the file open (or died with it open)."""
    CLOSED = 1
    """The writer closed the file cleanly."""
    RECOVERED = 2
    """``sensorbench check`` rebuilt the file after its writer died."""


TURN_DTYPE = np.dtype([("offset", "<i8"), ("count", "<i4"), ("t_first_ns", "<i8"),
                       ("device_ns", "<i8"), ("speed_hz", "<f4"), ("flags", "<u2")])  # fmt: skip
RAW_CHUNK_DTYPE = np.dtype([("t_ns", "<i8"), ("offset", "<i8"), ("length", "<i4")])
EVENT_DTYPE = np.dtype([("t_ns", "<i8"), ("source", "S32"), ("kind", "S24"), ("message", "S232")])

LIDAR_POINT_FIELDS = {"angle": "<f4", "range": "<f4", "intensity": "<u2", "t_ns": "<i8"}

POSE_KINDS = ("mocap", "pose_sensor", "estimate")

GROUPS = {"lidar": "lidar", "raw": "raw", "encoder": "encoders", "pose": "pose"}
"""Stream kind -> HDF5 group name."""

STREAM_COLUMNS: dict[str, dict[str, str | np.dtype]] = {
    "lidar": {**LIDAR_POINT_FIELDS, "turns": TURN_DTYPE},
    "raw": {"data": "u1", "chunks": RAW_CHUNK_DTYPE},
    "encoder": {"host_ns": "<i8", "device_ns": "<i8", "seq": "<i8", "yaw": "<f8",
                "yaw_rate": "<f8", "counts": "<i8"},
    "pose": {"t_ns": "<i8", "valid": "u1", "flags": "u1", "position": "<f8", "quat_xyzw": "<f8"},
}  # fmt: skip
"""Stream kind -> its datasets and their dtypes."""

ROW_SHAPE = {"position": (3,), "quat_xyzw": (4,), "covariance": (6, 6)}
"""The shape of one row of a dataset whose rows are not single values (an encoder's
``counts``: one per counter)."""

OPTIONAL_COLUMNS: dict[str, dict[str, str]] = {"pose": {"covariance": "<f8"}}
"""Stream kind -> datasets a stream may have beside its own (``docs/FORMAT.md``): a pose
``covariance`` (n, 6, 6), an estimate's or a ROS bag's, in ROS order."""

RESERVED_NAMES = ("events", "truth", "_status")
"""Names no stream may take: the file's root entries; ``events`` also names the event
table wherever a command takes a stream name (``export --stream events``, replay)."""

MERGED_STREAM = "merged"
"""The merged dual-scan stream (``merge``, ``live``)."""
ESTIMATE_STREAM = "estimate"
"""The split filters' estimate stream (``replay -o``, ``live``)."""
LIVE_OUTPUTS = (MERGED_STREAM, ESTIMATE_STREAM)
"""The streams ``live`` writes beside the devices': no device may take their names."""

MAX_NAME_BYTES = EVENT_DTYPE["source"].itemsize
"""Longest stream name (UTF-8 bytes): a device's events carry its name as their source."""

KIND_NAMES = {"pods": "encoder", "ld19": "lidar", "a1": "lidar", "mocap": "pose",
              "pose_sensor": "pose", "estimate": "pose"}  # fmt: skip
"""Default stream names that belong to one kind of stream; no other kind may take them."""


def attr_value(value: Any) -> Any:
    """An HDF5 attribute or field value as plain Python: bytes as UTF-8 text (bytes that
    do not decode replaced), numpy scalars and arrays as numbers and lists."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.tolist() if isinstance(value, np.generic | np.ndarray) else value


def name_conflict(kind: str, name: str, existing: list[tuple[str, str]]) -> str:
    """Why a new ``kind`` stream may not be called ``name`` ("" when it may), ``existing``
    being (kind, name) pairs: docs/FORMAT.md, "Stream names"."""
    odd = [c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")]
    if name in ("", ".", "..") or "/" in name or odd or name != name.strip():
        return (
            f"invalid stream name {name!r}: a printable name without '/', control "
            "characters or blanks at its ends, not '.' or '..'"
        )
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        return (
            f"stream name {name!r} is {len(name.encode('utf-8'))} bytes (UTF-8): at most "
            f"{MAX_NAME_BYTES}, as the events table holds a source name (a device's events "
            "under a cut name are not its own)"
        )
    if name in RESERVED_NAMES:
        return f"stream name {name!r} is reserved (names: {', '.join(RESERVED_NAMES)})"
    owner = KIND_NAMES.get(name)
    if owner is not None and kind not in (owner, "raw"):
        return f"{kind} stream name {name!r} is reserved for {owner} streams"
    for other_kind, other in existing:
        if other != name or other_kind == kind:
            continue
        if "raw" in (kind, other_kind):
            continue  # a device's raw bytes beside its decoded stream
        return (
            f"cannot add {kind} stream {name!r}: a {other_kind} stream has that name "
            "(stream names are unique across kinds)"
        )
    return ""
