"""Integrity checks and recovery of sessions whose writer died.

:func:`check_session` validates the layout against schema version 1 and the
internal consistency of every stream. :func:`recover_session` rebuilds a file
whose writer was killed: it copies the self-consistent prefix of every stream
(everything up to the writer's last flush) into a fresh file marked RECOVERED,
keeps the original beside it, and reports what it kept and what it dropped.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.reader import open_h5
from sensorbench.logs.schema import (
    ENCODER_FIELDS,
    EVENT_DTYPE,
    GROUPS,
    LIBVER,
    LIDAR_POINT_FIELDS,
    POSE_FIELDS,
    RAW_CHUNK_DTYPE,
    TURN_DTYPE,
    FileStatus,
)

_REQUIRED_ROOT_ATTRS = (
    "format",
    "schema_version",
    "software_version",
    "wall_clock_anchor_ns",
    "monotonic_anchor_ns",
    "label",
    "config_text",
)
_COLUMNS = {
    "lidar": {**LIDAR_POINT_FIELDS, "turns": TURN_DTYPE},
    "raw": {"data": "u1", "chunks": RAW_CHUNK_DTYPE},
    "encoder": {**ENCODER_FIELDS, "counts": "<i8"},
    "pose": {**POSE_FIELDS, "position": "<f8", "quat_xyzw": "<f8"},
}


@dataclass
class CheckReport:
    """Outcome of :func:`check_session`.

    ``errors`` are violations of the format (the file is unusable as written);
    ``warnings`` are oddities worth a look (non-monotonic host time, unclosed file).
    ``consistent_rows`` maps ``kind/name`` to the rows a reader will return.
    """

    path: Path
    status: FileStatus
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    consistent_rows: dict[str, int] = field(default_factory=dict)
    dangling_rows: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the file has no format errors and was closed (or recovered)."""
        return not self.errors and self.status != FileStatus.WRITING


def _stream_rows(kind: str, g: h5py.Group) -> tuple[int, int]:
    """(consistent rows, rows present in the longest column) of one stream."""
    if kind == "lidar":
        n_pts = min(g[c].shape[0] for c in LIDAR_POINT_FIELDS)
        idx = g["turns"][:]
        ends = idx["offset"] + idx["count"].astype(np.int64)
        n = int(np.searchsorted(ends, n_pts, "right")) if len(idx) else 0
        used = int(ends[n - 1]) if n else 0
        longest = max(g[c].shape[0] for c in LIDAR_POINT_FIELDS)
        return n, len(idx) - n + (longest - used)
    if kind == "raw":
        chunks = g["chunks"][:]
        ends = chunks["offset"] + chunks["length"]
        n = int(np.searchsorted(ends, g["data"].shape[0], "right")) if len(chunks) else 0
        used = int(ends[n - 1]) if n else 0
        return n, len(chunks) - n + (g["data"].shape[0] - used)
    lengths = [g[c].shape[0] for c in _COLUMNS[kind]]
    return min(lengths), max(lengths) - min(lengths)


def check_session(path: str | os.PathLike[str]) -> CheckReport:
    """Validate a session file against the schema; never modifies it."""
    path = Path(path)
    with open_h5(path) as f:
        status = FileStatus(int(f["_status"][0])) if "_status" in f else FileStatus.WRITING
        report = CheckReport(path, status)
        for key in _REQUIRED_ROOT_ATTRS:
            if key not in f.attrs:
                report.errors.append(f"root attribute {key!r} missing")
        if "_status" not in f:
            report.errors.append("dataset /_status missing")
        if "events" not in f:
            report.errors.append("dataset /events missing")
        elif f["events"].dtype != EVENT_DTYPE:
            report.errors.append(f"/events has dtype {f['events'].dtype}, expected {EVENT_DTYPE}")
        for kind, group_name in GROUPS.items():
            for name, g in f.get(group_name, {}).items():
                _check_stream(report, kind, f"{group_name}/{name}", g)
        if status == FileStatus.WRITING:
            report.warnings.append(
                "the file was not closed: its writer is still running or was killed; "
                "`sensorbench check --recover` rebuilds it"
            )
    return report


def _check_stream(report: CheckReport, kind: str, key: str, g: h5py.Group) -> None:
    for col, dtype in _COLUMNS[kind].items():
        if col not in g:
            report.errors.append(f"{key}: dataset {col!r} missing")
        elif g[col].dtype != np.dtype(dtype):
            report.errors.append(f"{key}/{col}: dtype {g[col].dtype}, expected {np.dtype(dtype)}")
    if any(e.startswith(f"{key}") for e in report.errors):
        return
    n, dangling = _stream_rows(kind, g)
    report.consistent_rows[key] = n
    if dangling:
        report.dangling_rows[key] = dangling
        report.warnings.append(f"{key}: {dangling} rows past the last consistent write")
    if kind == "lidar":
        idx = g["turns"][:n]
        expected = np.concatenate(([0], np.cumsum(idx["count"].astype(np.int64))[:-1]))
        if len(idx) and not np.array_equal(idx["offset"], expected):
            report.errors.append(f"{key}/turns: offsets are not contiguous")
        end = int(expected[-1] + idx["count"][-1]) if len(idx) else 0
        angle = g["angle"][:end]
        finite = angle[np.isfinite(angle)]
        if finite.size and (finite.min() < 0 or finite.max() >= 2 * np.pi + 1e-6):
            report.errors.append(f"{key}/angle: values outside [0, 2π) rad")
        _monotonic(report, key, idx["t_first_ns"])
    elif kind == "raw":
        chunks = g["chunks"][:n]
        expected = np.concatenate(([0], np.cumsum(chunks["length"].astype(np.int64))[:-1]))
        if len(chunks) and not np.array_equal(chunks["offset"], expected):
            report.errors.append(f"{key}/chunks: offsets are not contiguous")
        _monotonic(report, key, chunks["t_ns"])
    elif kind == "encoder":
        _monotonic(report, key, g["host_ns"][:n])
    elif kind == "pose":
        _monotonic(report, key, g["t_ns"][:n])
        if "kind" not in g.attrs:
            report.errors.append(f"{key}: attribute 'kind' missing")
        q = g["quat_xyzw"][:n]
        valid = g["valid"][:n].astype(bool)
        norm = np.linalg.norm(q[valid], axis=1)
        if norm.size and np.max(np.abs(norm - 1)) > 1e-3:
            report.errors.append(f"{key}/quat_xyzw: valid samples with non-unit quaternions")


def _monotonic(report: CheckReport, key: str, t: np.ndarray) -> None:
    back = int(np.count_nonzero(np.diff(t) < 0))
    if back:
        report.warnings.append(f"{key}: host time goes backwards {back} times")


@dataclass
class RecoveryReport:
    """What :func:`recover_session` kept and dropped."""

    path: Path
    backup: Path | None
    kept_rows: dict[str, int]
    dropped_rows: dict[str, int]
    events: int


def recover_session(
    path: str | os.PathLike[str], backup: bool = True, min_age_s: float = 2.0
) -> RecoveryReport:
    """Rebuild a session whose writer died, keeping every consistent row.

    Args:
        path: the session file.
        backup: keep the original as ``<name>.orig.h5`` (nothing is lost).
        min_age_s: refuse if the file changed within this many seconds (s), since a
            live writer may still be appending.

    Raises:
        SessionError: the file is closed already, or may still be written.
    """
    path = Path(path)
    report = check_session(path)
    if report.status != FileStatus.WRITING:
        raise SessionError(f"{path} was closed cleanly; nothing to recover")
    age = time.time() - path.stat().st_mtime
    if age < min_age_s:
        raise SessionError(
            f"{path} changed {age:.1f} s ago: a writer may still be running; stop it or wait"
        )
    tmp = path.with_name(f".{path.name}.recovering")
    kept: dict[str, int] = {}
    with open_h5(path) as src, h5py.File(tmp, "w", libver=LIBVER) as dst:
        for key, value in src.attrs.items():
            dst.attrs[key] = value
        dst.attrs["recovered_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        dst.create_dataset("_status", data=np.array([FileStatus.RECOVERED], "u1"))
        events = src["events"][:]
        dst.create_dataset("events", data=events, maxshape=(None,), chunks=(256,))
        if "truth" in src:
            src.copy(src["truth"], dst, "truth")
        else:
            dst.create_group("truth")
        for kind, group_name in GROUPS.items():
            out_group = dst.create_group(group_name)
            for name, g in src.get(group_name, {}).items():
                n, _ = _stream_rows(kind, g)
                kept[f"{group_name}/{name}"] = n
                _copy_prefix(kind, g, out_group.create_group(name), n)
    if backup:
        bak = path.with_name(path.stem + ".orig" + path.suffix)
        os.replace(path, bak)
    else:
        bak = None
    os.replace(tmp, path)
    return RecoveryReport(path, bak, kept, report.dangling_rows, len(events))


def _copy_prefix(kind: str, g: h5py.Group, out: h5py.Group, n: int) -> None:
    for key, value in g.attrs.items():
        out.attrs[key] = value
    rows = {c: n for c in _COLUMNS[kind]}
    if kind == "lidar":
        idx = g["turns"][:n]
        points = int(idx["offset"][-1] + idx["count"][-1]) if n else 0
        rows.update({c: points for c in LIDAR_POINT_FIELDS})
    elif kind == "raw":
        chunks = g["chunks"][:n]
        rows["data"] = int(chunks["offset"][-1] + chunks["length"][-1]) if n else 0
    for col, count in rows.items():
        src = g[col]
        data = src[:count]
        out.create_dataset(
            col, data=data, maxshape=(None, *src.shape[1:]), chunks=src.chunks or True
        )
