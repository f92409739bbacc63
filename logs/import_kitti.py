"""KITTI odometry poses: one 3×4 matrix ``[R | t]`` per line, row-major, times from a file.

The KITTI odometry benchmark's pose files (``poses/NN.txt``) hold 12 numbers per
line, ``r11 r12 r13 tx r21 r22 r23 ty r31 r32 r33 tz``: the pose of the camera at
frame k in the frame of the first camera (m). They carry no times: the sequence's
``times.txt`` holds one per line (s, as ``0.000000e+00``), frame k's time on line k.
KITTI's camera frame is x right, y down, z forward; the poses are stored as given
(no axis change), which the stream's ``frame`` attribute says.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.importers import (
    MAX_ABS_POSITION_M,
    Imported,
    _check_positions,
    _gather,
    _pose_imported,
    file_sha256,
)
from sensorbench.logs.text_table import Table, floats, tables, text_lines, times_ns

ROTATION_TOLERANCE = 0.01
"""Largest accepted |RᵀR − I| entry and |det R − 1| before R is projected to a rotation."""

_NAMES = ("r11", "r12", "r13", "tx", "r21", "r22", "r23", "ty", "r31", "r32", "r33", "tz")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line."""
    return ((i, t) for i, t in text_lines(path) if t.strip(" \t\r\n\f\v"))


def read_kitti(
    path: str | os.PathLike[str],
    times: str | os.PathLike[str] | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> Imported:
    """KITTI poses from ``path`` with their times from ``times`` (see the module docstring).

    Args:
        times: the times file, one time (s) per line for each pose line.
        max_position_m: largest accepted |coordinate| (m).
        duplicates: repeated stamps: ``error``, ``first`` or ``last``.

    Raises:
        ImportFormatError: no times file, a count mismatch (both counts named), a row
            without 12 numbers, a non-number (``FILE:LINE:COLUMN``), a matrix that is
            not a rotation, a time out of range or stepping backwards.
    """
    from scipy.spatial.transform import Rotation

    path = Path(path)
    if times is None:
        raise ImportFormatError(f"{path}: KITTI poses carry no times; give --times FILE")
    times = Path(times)
    stamps = _gather(
        {"t": times_ns(t, 0, "time", "s")}
        for t in tables(times, _lines(times), None, 1, "expected one time (s), got {n} cells")
    ).get("t", np.zeros(0, np.int64))

    def convert(t: Table) -> dict[str, np.ndarray]:
        m = np.stack([floats(t, j, n) for j, n in enumerate(_NAMES)], axis=1)
        return {"lines": t.lines, "m": m}

    what = "expected 12 numbers (a 3x4 matrix [R|t], row-major), got {n}"
    got = _gather(convert(t) for t in tables(path, _lines(path), None, 12, what))
    n = len(got.get("lines", ()))
    if n != len(stamps):
        raise ImportFormatError(
            f"{path} has {n} poses but {times} has {len(stamps)} times; "
            "each pose line needs the time on the same line of the times file"
        )
    if not n:
        raise ImportFormatError(f"{path}: no poses")
    lines, t_ns = got["lines"], stamps
    mat = got["m"].reshape(-1, 3, 4)
    rot, pos = mat[:, :, :3], mat[:, :, 3]
    ortho = np.abs(np.transpose(rot, (0, 2, 1)) @ rot - np.eye(3)).max(axis=(1, 2))
    det = np.linalg.det(rot)
    bad = np.flatnonzero((ortho > ROTATION_TOLERANCE) | (np.abs(det - 1.0) > ROTATION_TOLERANCE))
    if bad.size:
        k = int(bad[0])
        raise ImportFormatError(
            f"{path}:{lines[k]}: the 3x3 part is not a rotation (|R^T R - I| up to "
            f"{ortho[k]:.3g}, det {det[k]:.4f}; tolerance {ROTATION_TOLERANCE}; "
            f"{bad.size} such line(s)); is this a KITTI pose file?"
        )
    _check_positions(path, lines, pos, [(4, "tx"), (8, "ty"), (12, "tz")], max_position_m)
    quat = Rotation.from_matrix(rot).as_quat()  # the nearest rotation: rounding removed
    attrs = {
        "source_format": "kitti",
        "time_base": "times file (s)",
        "frame": "KITTI camera frame of the first pose (x right, y down, z forward), as given",
        "times_file": times.name,
        "times_sha256": file_sha256(times),
    }
    return _pose_imported(path, lines, t_ns, pos, quat, np.ones(n, bool), duplicates, attrs)
