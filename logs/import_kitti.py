"""KITTI odometry poses: one 3×4 matrix ``[R | t]`` (m) per line, row-major, frame k's time
(s) on line k of the sequence's ``times.txt``; stored in KITTI's camera axes as given
(docs/FORMAT.md, "KITTI odometry poses")."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.importers import (
    MAX_ABS_POSITION_M,
    ImportStream,
    _check_positions,
    _pose_chunk,
    _pose_stream,
    file_sha256,
)
from sensorbench.logs.text_table import Table, content_lines, floats, tables, times_ns

ROTATION_TOLERANCE = 0.01
"""Largest accepted |RᵀR − I| entry and |det R − 1| before R is projected to a rotation."""

_NAMES = ("r11", "r12", "r13", "tx", "r21", "r22", "r23", "ty", "r31", "r32", "r33", "tz")


def stream_kitti(
    path: str | os.PathLike[str],
    times: str | os.PathLike[str] | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> ImportStream:
    """KITTI poses from ``path`` with their times, one (s) per pose line, from ``times``;
    both read a chunk at a time. ``max_position_m``: largest accepted |coordinate| (m).

    Raises:
        ImportFormatError: no times file, a count mismatch (both counts named), a row
            without 12 numbers, a non-number (``FILE:LINE:COLUMN``), a matrix that is
            not a rotation, a time out of range or stepping backwards.
    """
    path = Path(path)
    if times is None:
        raise ImportFormatError(f"{path}: KITTI poses carry no times; give --times FILE")
    times = Path(times)
    stamps = tables(times, content_lines(times, comments=True), None, 1,
                    "expected one time (s), got {n} cells")  # fmt: skip
    what = "expected 12 numbers (a 3x4 matrix [R|t], row-major), got {n}"
    poses = tables(path, content_lines(path, comments=True), None, 12, what)

    def chunks() -> Iterator[dict[str, np.ndarray]]:
        counts = [0, 0]  # poses, times
        for tp, tt in itertools.zip_longest(poses, stamps):
            counts[0] += 0 if tp is None else len(tp.lines)
            counts[1] += 0 if tt is None else len(tt.lines)
            if tp is None or tt is None or counts[0] != counts[1]:  # both totals named
                counts[0] += sum(len(t.lines) for t in poses)
                counts[1] += sum(len(t.lines) for t in stamps)
                raise ImportFormatError(
                    f"{path} has {counts[0]} poses but {times} has {counts[1]} times; "
                    "each pose line needs the time on the same line of the times file"
                )
            yield _kitti_chunk(tp, times_ns(tt, 0, "time", "s"), max_position_m)
        attrs["times_sha256"] = file_sha256(times)  # once read: a bad file is refused first

    attrs = {
        "source_format": "kitti",
        "time_base": "times file (s)",
        "frame": "KITTI camera frame of the first pose (x right, y down, z forward), as given",
        "times_file": times.name,
    }
    return _pose_stream(path, chunks(), attrs, duplicates)


def _kitti_chunk(t: Table, t_ns: np.ndarray, max_position_m: float) -> dict[str, np.ndarray]:
    """A chunk's poses: the 3x3 part must be a rotation (projected to the nearest one)."""
    from scipy.spatial.transform import Rotation

    mat = np.stack([floats(t, j, n) for j, n in enumerate(_NAMES)], axis=1).reshape(-1, 3, 4)
    rot, pos = mat[:, :, :3], mat[:, :, 3]
    ortho = np.abs(np.transpose(rot, (0, 2, 1)) @ rot - np.eye(3)).max(axis=(1, 2))
    det = np.linalg.det(rot)
    bad = np.flatnonzero((ortho > ROTATION_TOLERANCE) | (np.abs(det - 1.0) > ROTATION_TOLERANCE))
    if bad.size:
        k = int(bad[0])
        raise ImportFormatError(
            f"{t.path}:{t.lines[k]}: the 3x3 part is not a rotation (|R^T R - I| up to "
            f"{ortho[k]:.3g}, det {det[k]:.4f}; tolerance {ROTATION_TOLERANCE}; "
            f"{bad.size} such line(s) in lines {t.lines[0]}-{t.lines[-1]}); is this a KITTI "
            "pose file?"
        )
    _check_positions(t.path, t.lines, pos, [(4, "tx"), (8, "ty"), (12, "tz")], max_position_m)
    quat = Rotation.from_matrix(rot).as_quat()  # the nearest rotation: rounding removed
    return _pose_chunk(t.path, t.lines, t_ns, pos, quat, np.ones(len(pos), bool))
