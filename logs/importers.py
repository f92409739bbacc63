"""Import foreign files into sessions: mocap and pose logs (TUM, EuRoC, Motive CSV), pod CSV.

Every parser checks what it reads and fails with ``file:line: what is wrong``
(:class:`~sensorbench.errors.ImportFormatError`): missing columns, non-numeric
cells, non-monotonic or duplicate timestamps, quaternions far from unit norm,
unknown units. Motive's blank cells (occlusion) become invalid samples with
``nan`` pose, never zeros.
"""

from __future__ import annotations

import csv
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.import_times import TimeOrder, flag_corrections, order_times
from sensorbench.logs.model_file import file_sha256
from sensorbench.logs.plain_columns import float_column, int_column, ns_column, plain_text
from sensorbench.logs.schema import NO_DEVICE_TIME, PoseFlag
from sensorbench.logs.values import batch_problems, parse_float, parse_int

QUAT_NORM_TOLERANCE = 0.01
"""Largest accepted deviation of a quaternion's norm from 1 before normalization."""

MAX_ABS_POSITION_M = 1e4
"""Default largest accepted |coordinate| of an imported position (m).

No indoor or campus-scale mocap or pose log reaches 10 km from its origin; a larger
value is a unit or parsing error (one 1e6 cell gave a 25 km alignment residual).
Every reader takes ``max_position_m``; the CLI's ``--max-position-m`` sets it.
"""

_INT64_MAX = int(np.iinfo(np.int64).max)
_MAX_TIME_S = _INT64_MAX / 1e9

_MOTIVE_UNITS = {"meters": 1.0, "centimeters": 0.01, "millimeters": 0.001}
def _y_up_to_z_up() -> Any:
    """Motive's Y-up world to Z-up: x' = x, y' = -z, z' = y (OptiTrack's own C3D Z-up
    preset). scipy loads here: the CLI starts without it."""
    from scipy.spatial.transform import Rotation

    return Rotation.from_matrix([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])


@dataclass
class Imported:
    """A parsed file: its samples and the attributes to store with the stream."""

    batch: PoseBatch | EncoderBatch | LidarTurns
    attrs: dict[str, Any] = field(default_factory=dict)
    dropped_lines: list[int] = field(default_factory=list)
    """File lines dropped because their stamp repeats (``--duplicates``)."""
    relocalized_lines: list[int] = field(default_factory=list)
    """File lines of kept poses flagged RELOCALIZED because they corrected a repeat."""


def _read_text(path: Path) -> list[str]:
    if not path.is_file():
        raise ImportFormatError(f"{path}: no such file")
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path}: not a text file ({exc})") from exc


_ASCII_SPACE = " \t\r\n\f\v"


def _ascii_split(text: str) -> list[str]:
    """Cells separated by ASCII whitespace (``str.split`` also splits at a no-break space,
    which then hides in a number's place)."""
    return [c for c in re.split(r"[ \t\r\n\f\v]+", text) if c]


def _where(path: Path, line: int, col: int) -> str:
    """``file:line:column``, both 1-based; the column is the field's number in its row."""
    return f"{path}:{line}:{col}"


def _number(
    path: Path, line: int, col: int, name: str, cell: str, *, allow_nan: bool = False
) -> float:
    """A finite float from ``cell`` (``nan`` too if ``allow_nan``); errors name the cell.

    Strict ASCII decimal (:func:`~sensorbench.logs.values.parse_float`): ``1_0``,
    full-width digits or a no-break space are not numbers."""
    value = parse_float(cell)
    if value is None:
        raise ImportFormatError(
            f"{_where(path, line, col)}: column {name!r}: {cell.strip()!r} is not a number "
            "(ASCII decimal digits)"
        )
    if not (math.isfinite(value) or (allow_nan and math.isnan(value))):
        raise ImportFormatError(
            f"{_where(path, line, col)}: column {name!r}: {cell.strip()!r} is not a finite number"
        )
    return value


def _in_int64(path: Path, line: int, col: int, name: str, value: int, unit: str = "") -> int:
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise ImportFormatError(
            f"{_where(path, line, col)}: column {name!r}: {value}{unit} is out of range "
            "(it does not fit a 64-bit integer count of ns)"
        )
    return value


def _seconds_to_ns(path: Path, line: int, col: int, name: str, cell: str) -> int:
    """Exact decimal seconds -> int ns (float64 would lose up to ~100 ns at epoch scale)."""
    return _decimal_to_ns(path, line, col, name, cell, "s")


_NS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}


def _decimal_to_ns(path: Path, line: int, col: int, name: str, cell: str, unit: str) -> int:
    """Exact decimal time in ``unit`` (s, ms, us, ns) -> int ns, rounded half up."""
    scale = _NS_PER_UNIT[unit]
    digits = len(str(scale)) - 1
    text = cell.strip(" \t")
    m = re.fullmatch(r"([+-]?)([0-9]*)\.?([0-9]*)", text, re.ASCII)
    if m and (m.group(2) or m.group(3)):
        sign = -1 if m.group(1) == "-" else 1
        frac = (m.group(3) + "0" * digits)[:digits]
        rounding = 1 if len(m.group(3)) > digits and m.group(3)[digits] >= "5" else 0
        ns = sign * (int(m.group(2) or "0") * scale + int(frac or "0") + rounding)
    else:
        value = _number(path, line, col, name, cell)
        ns = _INT64_MAX + 1 if abs(value) * scale >= _INT64_MAX else round(value * scale)
    if abs(ns) > _INT64_MAX:
        raise ImportFormatError(
            f"{_where(path, line, col)}: column {name!r}: {text!r} {unit} is out of range "
            f"(|t| must stay below {_MAX_TIME_S:.4g} s)"
        )
    return ns


def _integer(path: Path, line: int, col: int, name: str, cell: str) -> int:
    parsed = parse_int(cell)
    if parsed is not None:
        value = parsed
    else:
        number = _number(path, line, col, name, cell)
        if number != int(number):
            raise ImportFormatError(
                f"{_where(path, line, col)}: column {name!r}: {cell.strip()!r} is not an integer"
            ) from None
        value = int(number)
    return _in_int64(path, line, col, name, value)


def _check_positions(
    path: Path, lines: np.ndarray, pos: np.ndarray, cols: list[tuple[int, str]], limit: float
) -> None:
    """Refuse any position coordinate beyond ``limit`` (m); names the first and counts all."""
    bad = np.abs(pos) > limit
    if bad.any():
        r, k = (int(v) for v in np.argwhere(bad)[0])
        col, name = cols[k]
        raise ImportFormatError(
            f"{_where(path, int(lines[r]), col)}: column {name!r}: {pos[r, k]:g} m is beyond "
            f"the position limit of {limit:g} m ({int(bad.sum())} such value(s) in the file); "
            "check the units, or raise the limit with --max-position-m"
        )


def _check_quats(path: Path, lines: np.ndarray, q: np.ndarray, valid: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(q, axis=1)
    bad = np.flatnonzero(valid & ~(np.abs(norm - 1.0) <= QUAT_NORM_TOLERANCE))
    if bad.size:
        k = int(bad[0])
        raise ImportFormatError(
            f"{path}:{lines[k]}: quaternion norm {norm[k]:.4f} is not 1 "
            f"(tolerance {QUAT_NORM_TOLERANCE}); is the column order right?"
        )
    out = q.copy()
    out[valid] /= norm[valid, None]
    return out


def _pose_imported(
    path: Path,
    lines: np.ndarray,
    t_ns: np.ndarray,
    pos: np.ndarray,
    quat: np.ndarray,
    valid: np.ndarray,
    duplicates: str,
    attrs: dict[str, Any],
    flags: np.ndarray | None = None,
) -> Imported:
    """Checked, de-duplicated pose samples (see :mod:`sensorbench.logs.import_times`)."""
    if len(t_ns) == 0:
        raise ImportFormatError(f"{path}: no samples")
    lines = np.asarray(lines)
    t_ns = np.asarray(t_ns, dtype=np.int64)
    order = order_times(path, lines, t_ns, duplicates)
    quat = _check_quats(path, lines, quat, valid)
    pos = np.where(valid[:, None], pos, np.nan)
    quat = np.where(valid[:, None], quat, np.nan)
    flags = np.zeros(len(t_ns), np.uint8) if flags is None else flags.astype(np.uint8)
    if not order.keep.all():  # a flag on any line of a run of equal stamps holds for the run
        new_run = np.r_[True, np.diff(t_ns) != 0]
        flags = np.bitwise_or.reduceat(flags, np.flatnonzero(new_run))[np.cumsum(new_run) - 1]
    corrected = np.zeros(len(t_ns), bool)
    if duplicates == "last":
        corrected = flag_corrections(order, t_ns, pos, quat, valid)
        flags = flags | np.where(corrected, np.uint8(PoseFlag.RELOCALIZED), np.uint8(0))
    k = order.keep
    batch = PoseBatch.from_arrays(t_ns[k], pos[k], quat[k], valid[k], flags[k])
    return Imported(
        batch,
        {**attrs, **_duplicate_attrs(duplicates, order, int(corrected.sum()))},
        order.dropped_lines,
        [int(n) for n in lines[corrected]],
    )


def _duplicate_attrs(duplicates: str, order: TimeOrder, n_corrected: int) -> dict[str, Any]:
    return {
        "duplicates_policy": duplicates,
        "duplicate_lines_dropped": len(order.dropped_lines),
        "duplicates_flagged_relocalized": n_corrected,
    }


def _plain_tum(kept: list[tuple[int, str]]) -> tuple[np.ndarray, np.ndarray] | None:
    """Times (ns) and the (n, 8) values of TUM rows that are all plain (8 finite ASCII
    decimal numbers, fixed-point times), read at once; None for anything else, which
    the cell-by-cell reader then names (:mod:`~sensorbench.logs.plain_columns`)."""
    body = "\n".join(text for _, text in kept)
    if not kept or not plain_text(body.replace(",", " ")):
        return None
    rows = [text.replace(",", " ").split() for _, text in kept]
    if any(len(r) != 8 for r in rows):
        return None
    times = ns_column([r[0] for r in rows], "s")
    data = float_column([c for r in rows for c in r])
    if times is None or data is None:
        return None
    return times, data.reshape(-1, 8)


def _tum_cell_by_cell(path: Path, kept: list[tuple[int, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Times (ns) and (n, 8) values of TUM rows, each cell checked; errors name it."""
    names = ("timestamp", "tx", "ty", "tz", "qx", "qy", "qz", "qw")
    rows, times = [], []
    for i, text in kept:
        cells = _ascii_split(text.replace(",", " "))
        if len(cells) != 8:
            raise ImportFormatError(
                f"{path}:{i}: expected 8 columns (timestamp tx ty tz qx qy qz qw), got {len(cells)}"
            )
        rows.append(
            [
                _number(path, i, j, n, c)
                for j, (n, c) in enumerate(zip(names, cells, strict=True), start=1)
            ]
        )
        times.append(_seconds_to_ns(path, i, 1, "timestamp", cells[0]))
    return np.array(times, dtype=np.int64), np.array(rows, dtype=np.float64).reshape(-1, 8)


def read_tum(
    path: str | os.PathLike[str],
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> Imported:
    """TUM trajectory: ``timestamp tx ty tz qx qy qz qw`` (s, m), ``#`` comments.

    Args:
        max_position_m: largest accepted |coordinate| (m); beyond it is an error.
        duplicates: repeated stamps: ``error``, ``first`` or ``last`` (see
            :mod:`sensorbench.logs.import_times`).
    """
    path = Path(path)
    kept = [
        (i, text)
        for i, text in enumerate((t.strip(_ASCII_SPACE) for t in _read_text(path)), start=1)
        if text and not text.startswith("#")
    ]
    times, data = _plain_tum(kept) or _tum_cell_by_cell(path, kept)
    lines = [i for i, _ in kept]
    _check_positions(
        path, np.array(lines), data[:, 1:4], [(2, "tx"), (3, "ty"), (4, "tz")], max_position_m
    )
    return _pose_imported(
        path,
        np.array(lines),
        np.array(times),
        data[:, 1:4],
        data[:, 4:8],
        np.ones(len(data), bool),
        duplicates,
        {"source_format": "tum", "time_base": "file timestamps (s)"},
    )


def read_euroc(
    path: str | os.PathLike[str],
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> Imported:
    """EuRoC CSV: ``#timestamp [ns]``, position x y z (m), quaternion **w x y z**.

    Args:
        max_position_m: largest accepted |coordinate| (m); beyond it is an error.
        duplicates: repeated stamps: ``error``, ``first`` or ``last`` (see
            :mod:`sensorbench.logs.import_times`).
    """
    path = Path(path)
    text = _read_text(path)
    header: list[str] | None = None
    rows, lines = [], []
    for i, row in enumerate(csv.reader(text), start=1):
        if not row or not "".join(row).strip():
            continue
        if row[0].lstrip().startswith("#") or (header is None and not _is_number(row[0])):
            if header is None:
                header = [c.strip().lstrip("#").strip() for c in row]
            continue
        rows.append((i, row))
        lines.append(i)
    if header is None:
        header = ["timestamp", "px", "py", "pz", "qw", "qx", "qy", "qz"]
        cols = dict(zip(header, range(8), strict=True))
    else:
        cols = _euroc_columns(path, header)
    data = np.empty((len(rows), 7))
    t_ns = np.empty(len(rows), dtype=np.int64)
    order = ["px", "py", "pz", "qx", "qy", "qz", "qw"]
    for r, (i, row) in enumerate(rows):
        if len(row) < len(header):
            raise ImportFormatError(f"{path}:{i}: {len(row)} cells, header has {len(header)}")
        t_ns[r] = _integer(path, i, cols["timestamp"] + 1, "timestamp", row[cols["timestamp"]])
        for k, name in enumerate(order):
            data[r, k] = _number(path, i, cols[name] + 1, name, row[cols[name]])
    _check_positions(
        path,
        np.array(lines),
        data[:, 0:3],
        [(cols[c] + 1, c) for c in ("px", "py", "pz")],
        max_position_m,
    )
    return _pose_imported(
        path,
        np.array(lines),
        t_ns,
        data[:, 0:3],
        data[:, 3:7],
        np.ones(len(data), bool),
        duplicates,
        {"source_format": "euroc", "time_base": "file timestamps (ns)"},
    )


def _is_number(cell: str) -> bool:
    return parse_float(cell) is not None


def _euroc_columns(path: Path, header: list[str]) -> dict[str, int]:
    cols: dict[str, int] = {}

    def take(key: str, j: int) -> None:
        if key in cols:  # two columns for one quantity: which one is meant is unknowable
            raise ImportFormatError(
                f"{path}:1: header columns {cols[key] + 1} ({header[cols[key]]!r}) and "
                f"{j + 1} ({header[j]!r}) are both {key}; keep one"
            )
        cols[key] = j

    for j, name in enumerate(header):
        low = name.lower()
        if "timestamp" in low:
            take("timestamp", j)
        m = re.match(r"p_\w*?_([xyz])\b", low)
        if m:
            take(f"p{m.group(1)}", j)
        m = re.match(r"q_\w*?_([wxyz])\b", low)
        if m:
            take(f"q{m.group(1)}", j)
    missing = [c for c in ("timestamp", "px", "py", "pz", "qw", "qx", "qy", "qz") if c not in cols]
    if missing:
        raise ImportFormatError(
            f"{path}:1: EuRoC header lacks columns for {', '.join(missing)} "
            "(expected #timestamp, p_*_x/y/z, q_*_w/x/y/z)"
        )
    return cols


def read_motive(
    path: str | os.PathLike[str],
    body: str | None = None,
    up: str = "y",
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> Imported:
    """OptiTrack Motive CSV export (versions 1.21–1.25), one rigid body.

    The header is parsed by its row labels (Type, Name, ID, optional Parent, the
    category row and the ``Frame, Time`` row), never by fixed column numbers.
    A frame whose rigid-body cells are blank or ``nan`` is occluded: an invalid
    sample. Infinite values and positions beyond ``max_position_m`` are errors.

    Args:
        body: rigid-body name; may be omitted when the file has exactly one.
        up: ``y`` (Motive's default: converted to Z-up by C, a +90° rotation about X,
            so (x, y, z) → (x, −z, y); both the world and the body's own axes are
            converted, so the orientation becomes C·R·Cᵀ and a body at identity in
            Motive stays at identity) or ``z`` (kept as is).
        max_position_m: largest accepted |coordinate| after unit conversion (m).
        duplicates: repeated stamps: ``error``, ``first`` or ``last``.
    """
    path = Path(path)
    if up not in ("y", "z"):
        raise ImportFormatError(f"{path}: up axis must be 'y' or 'z', got {up!r}")
    rows = list(csv.reader(_read_text(path)))
    if not rows:
        raise ImportFormatError(f"{path}:1: empty file")
    meta = {rows[0][k].strip(): rows[0][k + 1].strip() for k in range(0, len(rows[0]) - 1, 2)}
    if "Format Version" not in meta:
        raise ImportFormatError(f"{path}:1: not a Motive export (no 'Format Version' key)")
    units_name = meta.get("Length Units", "Meters")
    scale = _MOTIVE_UNITS.get(units_name.lower())
    if scale is None:
        raise ImportFormatError(
            f"{path}:1: unknown Length Units {units_name!r} "
            "(known: Meters, Centimeters, Millimeters)"
        )
    rot_type = meta.get("Rotation Type", "Quaternion")
    if rot_type.lower() != "quaternion":
        raise ImportFormatError(f"{path}:1: Rotation Type {rot_type!r}; export quaternions")
    labelled: dict[str, list[str]] = {}
    category: list[str] | None = None
    component: list[str] | None = None
    data_start = None
    for i in range(1, len(rows)):
        row = [c.strip() for c in rows[i]]
        if not any(row):
            continue
        label = row[0] or (row[1] if len(row) > 1 else "")
        if row[0] == "Frame":
            component, data_start = row, i + 1
            break
        if label in ("Type", "Name", "ID", "Parent"):
            labelled[label] = row
        elif not row[0] and (len(row) < 2 or not row[1]):
            category = row
    if component is None or data_start is None or category is None or "Name" not in labelled:
        raise ImportFormatError(
            f"{path}: Motive header rows (Type/Name/ID, category, 'Frame,Time') not found"
        )
    width = len(component)

    def cell(row: list[str], j: int) -> str:
        return row[j] if j < len(row) else ""

    types, names = labelled.get("Type", []), labelled["Name"]
    bodies = sorted(
        {cell(names, j) for j in range(width) if cell(types, j) == "Rigid Body" and cell(names, j)}
    )
    if body is None:
        if len(bodies) != 1:
            raise ImportFormatError(
                f"{path}: {len(bodies)} rigid bodies ({', '.join(bodies) or 'none'}); pick one"
            )
        body = bodies[0]
    elif body not in bodies:
        raise ImportFormatError(f"{path}: no rigid body {body!r} (have: {', '.join(bodies)})")
    cols: dict[str, int] = {}
    ids = labelled.get("ID", [])
    for j in range(width):
        if cell(types, j) == "Rigid Body" and cell(names, j) == body:
            key = f"{cell(category, j)}.{cell(component, j)}"
            if key in cols:  # a second body of that name: which one is meant is unknowable
                name_line = next(r + 1 for r in range(data_start) if rows[r][:1] == ["Name"])
                raise ImportFormatError(
                    f"{path}:{name_line}: two rigid bodies are named {body!r} (IDs "
                    f"{cell(ids, cols[key])} and {cell(ids, j)}); rename one in Motive"
                )
            cols[key] = j
    time_col = next((j for j, c in enumerate(component) if c.startswith("Time")), None)
    needed = [f"Rotation.{a}" for a in "XYZW"] + [f"Position.{a}" for a in "XYZ"]
    missing = [k for k in needed if k not in cols]
    if time_col is None:
        missing.insert(0, "Time (Seconds)")
    if missing or time_col is None:
        raise ImportFormatError(
            f"{path}:{data_start}: rigid body {body!r} lacks columns {', '.join(missing)}"
        )
    t, pos, quat, valid, lines = [], [], [], [], []
    for i in range(data_start, len(rows)):
        row = rows[i]
        if not any(c.strip() for c in row):
            continue
        line = i + 1
        if len(row) < width:  # Motive writes every cell (blank ones too): the row was cut
            raise ImportFormatError(
                f"{path}:{line}: {len(row)} cells, the header has {width}; the row is truncated"
            )
        t.append(_seconds_to_ns(path, line, time_col + 1, "Time (Seconds)", cell(row, time_col)))
        values = []
        for k in needed:
            c = cell(row, cols[k]).strip()
            values.append(_number(path, line, cols[k] + 1, k, c, allow_nan=True) if c else math.nan)
        if any(math.isnan(v) for v in values):
            valid.append(False)
            pos.append([np.nan] * 3)
            quat.append([np.nan] * 4)
        else:
            quat.append(values[:4])
            pos.append([v * scale for v in values[4:]])
            valid.append(True)
        lines.append(line)
    valid_a = np.array(valid, dtype=bool)
    if lines and not valid_a.any():
        raise ImportFormatError(
            f"{path}: rigid body {body!r} is blank (occluded) in all {len(lines)} frames; "
            "nothing to import"
        )
    pos_a, quat_a = np.array(pos).reshape(-1, 3), np.array(quat).reshape(-1, 4)
    quat_a = _check_quats(path, np.array(lines), quat_a, valid_a)
    _check_positions(
        path,
        np.array(lines),
        np.where(valid_a[:, None], pos_a, 0.0),
        [(cols[f"Position.{a}"] + 1, f"Position.{a}") for a in "XYZ"],
        max_position_m,
    )
    frame = (
        "Motive world, Z-up"
        if up == "z"
        else "Motive world and body axes converted Y-up -> Z-up: (x, -z, y), R' = C R C^T"
    )
    if up == "y" and valid_a.any():
        from scipy.spatial.transform import Rotation

        c = _y_up_to_z_up()
        pos_a[valid_a] = c.apply(pos_a[valid_a])
        rot = Rotation.from_quat(quat_a[valid_a])
        quat_a[valid_a] = (c * rot * c.inv()).as_quat()
    attrs = {
        "source_format": "motive",
        "time_base": "Motive take time (s since capture start)",
        "frame": frame,
        "rigid_body": body,
        "motive_format_version": meta.get("Format Version", ""),
        "capture_start_time": meta.get("Capture Start Time", ""),
        "source_length_units": units_name,
    }
    return _pose_imported(
        path, np.array(lines), np.array(t), pos_a, quat_a, valid_a, duplicates, attrs
    )


POD_TIME_COLUMNS = {"t_s": "s", "t_ms": "ms", "t_us": "us", "t_ns": "ns", "host_ns": "ns"}
"""The pod CSV's time columns and their units (one of them per file)."""

POD_OPTIONAL_COLUMNS = ("device_ns", "device_us", "seq", "yaw", "yaw_rate")
POD_CSV_COLUMNS = (*POD_TIME_COLUMNS, "c0", "c1", "...", *POD_OPTIONAL_COLUMNS)
"""Column names the pod CSV reader knows, as shown (counters ``c0, c1, ...``: any number)."""


def _is_pod_column(name: str) -> bool:
    named = name in POD_TIME_COLUMNS or name in POD_OPTIONAL_COLUMNS
    return named or re.fullmatch(r"c\d+", name) is not None


def _resolve_columns(
    path: Path, head_line: int, header: list[str], mapping: dict[str, str], names: list[str]
) -> dict[str, int]:
    """Column index of each of ``names`` found in the file (under its mapped header)."""
    where = {h: j for j, h in reversed(list(enumerate(header)))}
    used: dict[str, str] = {}
    for name, h in mapping.items():
        if h not in where:
            raise ImportFormatError(
                f"{path}:{head_line}: --columns {name}={h}: no column {h!r} in the header "
                f"(columns: {', '.join(header)})"
            )
        if h in used:
            raise ImportFormatError(
                f"{path}:{head_line}: --columns maps column {h!r} twice ({used[h]}, {name})"
            )
        used[h] = name
    col: dict[str, int] = {}
    for name in names:
        h = mapping.get(name, name)
        # a header taken by a mapping is that mapping's, not a same-named default's
        if h in where and (name in mapping or h not in used):
            col[name] = where[h]
    return col


class PodTable(NamedTuple):
    """What :func:`read_pod_csv` learnt from a pod CSV's header."""

    path: Path
    header: list[str]
    col: dict[str, int]
    """Column name -> cell index."""
    mapping: dict[str, str]
    time_name: str
    n_counters: int


PodColumns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""host ns, device ns, seq, counts (n, pods), yaw (rad), yaw rate (rad/s)."""


def _plain_pods(t: PodTable, rows: list[tuple[int, str]], sep: str | None) -> PodColumns | None:
    """The columns of pod rows whose cells are all plain, read at once
    (:mod:`~sensorbench.logs.plain_columns`); None for anything else (the cell-by-cell
    reader then names it)."""
    if sep is not None and any('"' in raw for _, raw in rows):
        return None
    split = [_ascii_split(raw) if sep is None else raw.split(sep) for _, raw in rows]
    if any(len(cells) != len(t.header) for cells in split):
        return None
    columns = list(zip(*split, strict=True))
    by_name = {name: columns[j] for name, j in t.col.items()}
    unit = POD_TIME_COLUMNS[t.time_name]
    time_cells = by_name[t.time_name]
    got = {"host": int_column(time_cells) if unit == "ns" else ns_column(time_cells, unit)}
    for name in [f"c{k}" for k in range(t.n_counters)] + ["device_ns", "seq"]:
        if name in by_name:
            got[name] = int_column(by_name[name])
    if "device_us" in by_name and "device_ns" not in by_name:
        us = int_column(by_name["device_us"])
        limit = _INT64_MAX // 1000
        fits = us is not None and -limit <= us.min() and us.max() <= limit
        got["device_ns"] = us * 1000 if fits and us is not None else None
    for name in ("yaw", "yaw_rate"):
        if name in by_name:
            got[name] = float_column(by_name[name])
    plain = {name: v for name, v in got.items() if v is not None}
    if len(plain) < len(got):
        return None
    n = len(rows)
    return (
        plain["host"],
        plain.get("device_ns", np.full(n, NO_DEVICE_TIME, np.int64)),
        plain.get("seq", np.arange(n, dtype=np.int64)),
        np.stack([plain[f"c{k}"] for k in range(t.n_counters)], axis=1),
        plain.get("yaw", np.full(n, np.nan)),
        plain.get("yaw_rate", np.full(n, np.nan)),
    )


def _pods_cell_by_cell(t: PodTable, rows: list[tuple[int, str]], sep: str | None) -> PodColumns:
    """The columns of pod rows, each cell checked; errors name the file, line and column."""
    path, col, mapping = t.path, t.col, t.mapping
    n = len(rows)
    host = np.empty(n, np.int64)
    counts = np.empty((n, t.n_counters), np.int64)
    dev = np.full(n, NO_DEVICE_TIME, np.int64)
    seq = np.arange(n, dtype=np.int64)
    yaw, rate = np.full(n, np.nan), np.full(n, np.nan)
    for r, (i, raw) in enumerate(rows):
        cells = _split_cells(raw, sep)
        if len(cells) != len(t.header):
            raise ImportFormatError(f"{path}:{i}: {len(cells)} cells, header has {len(t.header)}")

        def cell(name: str, cells: list[str] = cells, i: int = i) -> tuple:
            return path, i, col[name] + 1, mapping.get(name, name), cells[col[name]]

        where_, line_, j, label, text = cell(t.time_name)
        unit = POD_TIME_COLUMNS[t.time_name]
        host[r] = (
            _integer(where_, line_, j, label, text)
            if unit == "ns"
            else _decimal_to_ns(where_, line_, j, label, text, unit)
        )
        for k in range(t.n_counters):
            counts[r, k] = _integer(*cell(f"c{k}"))
        if "device_ns" in col:
            dev[r] = _integer(*cell("device_ns"))
        elif "device_us" in col:
            where_, line_, j, label, text = cell("device_us")
            us = _integer(where_, line_, j, label, text)
            dev[r] = _in_int64(where_, line_, j, label, us * 1000, " ns")
        if "seq" in col:
            seq[r] = _integer(*cell("seq"))
        for name, out in (("yaw", yaw), ("yaw_rate", rate)):
            if name in col:  # nan = no IMU value, as in the session (docs/FORMAT.md)
                out[r] = _number(*cell(name), allow_nan=True)
    return host, dev, seq, counts, yaw, rate


def read_pod_csv(
    path: str | os.PathLike[str],
    columns: dict[str, str] | None = None,
    duplicates: str = "last",
) -> Imported:
    """Pod encoder CSV with a header row (any logger's: map its headers with ``columns``).

    Columns (by header name, any order, extra columns ignored): one time column,
    ``t_s`` (s), ``t_ms`` (ms), ``t_us`` (µs), ``t_ns`` or ``host_ns`` (ns), decimal
    and exact; counters ``c0, c1, ...`` (cumulative counts, integers, any number from
    ``c0`` on without gaps); optional ``device_ns`` or ``device_us`` (MCU time, ns or
    µs), ``seq``, ``yaw`` (rad), ``yaw_rate`` (rad/s). Cells are separated by commas,
    semicolons or whitespace (whichever the header uses); ``#`` lines are comments.

    Args:
        columns: column name -> header in the file, e.g. ``{"t_s": "t", "c0":
            "count0"}`` for a ``t,count0,...`` file.
        duplicates: repeated stamps: ``error``, ``first`` or ``last``.
    """
    path = Path(path)
    mapping = dict(columns or {})
    for name in mapping:
        if not _is_pod_column(name):
            raise ImportFormatError(
                f"--columns {name}={mapping[name]}: unknown column name {name!r} "
                f"(known: {', '.join(POD_CSV_COLUMNS)})"
            )
    rows = [
        (i, t)
        for i, t in enumerate(_read_text(path), start=1)
        if t.strip() and not t.lstrip().startswith("#")
    ]
    if not rows:
        raise ImportFormatError(f"{path}:1: empty file")
    head_line, head = rows[0]
    sep = ";" if ";" in head else ("," if "," in head else None)
    header = _split_cells(head, sep)
    counter_names = {n for n in [*header, *mapping] if re.fullmatch(r"c\d+", n)}
    mapped_time = any(n in POD_TIME_COLUMNS for n in mapping)  # the one to use
    col = _resolve_columns(
        path,
        head_line,
        header,
        mapping,
        [*POD_TIME_COLUMNS, *sorted(counter_names), *POD_OPTIONAL_COLUMNS],
    )
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise ImportFormatError(
            f"{path}:{head_line}: column(s) {', '.join(repeated)} repeated in the header; "
            "which one is meant is unknowable, keep one"
        )
    times = [n for n in POD_TIME_COLUMNS if n in col and (n in mapping or not mapped_time)]
    hint = "; map other names with --columns NAME=HEADER,... (e.g. t_s=t,c0=count0)"
    if len(times) != 1:
        what = "no time column" if not times else f"several time columns ({', '.join(times)})"
        raise ImportFormatError(
            f"{path}:{head_line}: {what}: one of {', '.join(POD_TIME_COLUMNS)} is needed "
            f"(columns: {', '.join(header)}){hint}"
        )
    time_name = times[0]
    counters = sorted(int(n[1:]) for n in col if re.fullmatch(r"c\d+", n))
    if not counters or counters != list(range(len(counters))):
        found = ", ".join(f"c{k}" for k in counters) or "none"
        raise ImportFormatError(
            f"{path}:{head_line}: counter columns must be c0, c1, ... without gaps (found: "
            f"{found}; columns: {', '.join(header)}){hint}"
        )
    n = len(rows) - 1
    if n == 0:
        raise ImportFormatError(f"{path}: no samples")
    lines = np.array([i for i, _ in rows[1:]], dtype=np.int64)
    table = PodTable(path, header, col, mapping, time_name, len(counters))
    host, dev, seq, counts, yaw, rate = _plain_pods(table, rows[1:], sep) or _pods_cell_by_cell(
        table, rows[1:], sep
    )
    order = order_times(path, lines, host, duplicates)
    k = order.keep
    batch = EncoderBatch(host[k], dev[k], seq[k], counts[k], yaw[k], rate[k])
    attrs = {
        "source_format": "csv",
        "time_base": f"file timestamps ({time_name}: {POD_TIME_COLUMNS[time_name]})",
    }
    if mapping:
        attrs["column_map"] = ",".join(f"{k}={v}" for k, v in mapping.items())
    return Imported(batch, {**attrs, **_duplicate_attrs(duplicates, order, 0)}, order.dropped_lines)


POSE_CSV_COLUMNS = (
    "t_s",
    "host_ns",
    "x",
    "y",
    "z",
    "qx",
    "qy",
    "qz",
    "qw",
    "yaw",
    "relocalized",
    "paused",
)
"""Column names the generic pose CSV reader knows (``--columns NAME=HEADER`` maps others)."""


def parse_column_map(text: str | None, what: str = "pose") -> dict[str, str]:
    """``"t_s=time,x=pos_x"`` -> ``{"t_s": "time", "x": "pos_x"}``, the names checked
    against the pose CSV's (``what`` = ``pose`` or ``mocap``) or the pod CSV's (``pods``)."""
    known = POD_CSV_COLUMNS if what == "pods" else POSE_CSV_COLUMNS
    is_known = _is_pod_column if what == "pods" else POSE_CSV_COLUMNS.__contains__
    out: dict[str, str] = {}
    for entry in (text or "").split(","):
        if not entry.strip():
            continue
        name, sep, header = (v.strip() for v in entry.partition("="))
        if not sep or not name or not header:
            raise ImportFormatError(f"--columns entry {entry.strip()!r} is not NAME=HEADER")
        if not is_known(name):
            raise ImportFormatError(
                f"--columns {name}={header}: unknown column name {name!r} "
                f"(known: {', '.join(known)})"
            )
        if name in out:
            raise ImportFormatError(f"--columns names {name!r} twice")
        out[name] = header
    return out


def _split_cells(text: str, sep: str | None) -> list[str]:
    if sep is None:
        return _ascii_split(text)
    return [c.strip() for c in next(csv.reader([text], delimiter=sep))]


def read_pose_csv(
    path: str | os.PathLike[str],
    columns: dict[str, str] | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> Imported:
    """Generic pose/mocap CSV: one header row naming the columns, one pose per line.

    Columns (by header name, any order, extra columns ignored): time ``t_s`` (s) or
    ``host_ns`` (ns); position ``x``, ``y``, ``z`` (m; ``z`` may be left out with
    ``yaw``: 0); orientation ``qx, qy, qz, qw`` or planar ``yaw`` (rad about z);
    optional ``relocalized`` and ``paused`` (0/1) that become the RELOCALIZED and
    PAUSED flags. Cells are separated by commas, semicolons or whitespace (whichever
    the header uses); lines starting with ``#`` are comments.

    Args:
        columns: column name -> header in the file, for headers named otherwise.
        max_position_m: largest accepted |coordinate| (m).
        duplicates: repeated stamps: ``error``, ``first`` or ``last``.
    """
    path = Path(path)
    mapping = dict(columns or {})
    text = _read_text(path)
    rows = [
        (i, t) for i, t in enumerate(text, start=1) if t.strip() and not t.lstrip().startswith("#")
    ]
    if not rows:
        raise ImportFormatError(f"{path}: no header row (and no samples)")
    head_line, head = rows[0]
    sep = ";" if ";" in head else ("," if "," in head else None)
    header = _split_cells(head, sep)
    where = {h: j for j, h in reversed(list(enumerate(header)))}
    for name, h in mapping.items():
        if h not in where:
            raise ImportFormatError(
                f"{path}:{head_line}: --columns {name}={h}: no column {h!r} in the header "
                f"(columns: {', '.join(header)})"
            )
    col = {n: where[mapping.get(n, n)] for n in POSE_CSV_COLUMNS if mapping.get(n, n) in where}
    quat_names = ("qx", "qy", "qz", "qw")
    has_quat = all(n in col for n in quat_names)
    missing = [n for n in ("x", "y") if n not in col]
    if "t_s" not in col and "host_ns" not in col:
        missing.insert(0, "t_s or host_ns")
    if not has_quat and "yaw" not in col:
        missing.append("qx, qy, qz, qw or yaw")
    if has_quat and "z" not in col:
        missing.append("z")
    if missing:
        raise ImportFormatError(
            f"{path}:{head_line}: header lacks {'; '.join(missing)} (columns: "
            f"{', '.join(header)}); map other names with --columns NAME=HEADER,..."
        )
    n = len(rows) - 1
    t_ns = np.empty(n, np.int64)
    pos = np.zeros((n, 3))
    quat = np.empty((n, 4))
    flags = np.zeros(n, np.uint8)
    lines = np.empty(n, np.int64)
    for r, (i, raw) in enumerate(rows[1:]):
        cells = _split_cells(raw, sep)
        lines[r] = i
        if len(cells) != len(header):
            raise ImportFormatError(f"{path}:{i}: {len(cells)} cells, header has {len(header)}")

        def cell(name: str, cells: list[str] = cells, i: int = i) -> tuple:
            return path, i, col[name] + 1, mapping.get(name, name), cells[col[name]]

        if "host_ns" in col:
            t_ns[r] = _integer(*cell("host_ns"))
        else:
            t_ns[r] = _seconds_to_ns(*cell("t_s"))
        for k, name in enumerate(("x", "y", "z")):
            if name in col:
                pos[r, k] = _number(*cell(name))
        if has_quat:
            quat[r] = [_number(*cell(q)) for q in quat_names]
        else:
            yaw = _number(*cell("yaw"))
            quat[r] = [0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)]
        for name, bit in (("relocalized", PoseFlag.RELOCALIZED), ("paused", PoseFlag.PAUSED)):
            if name in col:
                where_, line_, j, label, value = cell(name)
                if value not in ("0", "1"):
                    raise ImportFormatError(
                        f"{_where(where_, line_, j)}: column {label!r}: {value!r} must be 0 or 1"
                    )
                flags[r] |= np.uint8(bit) if value == "1" else np.uint8(0)
    pos_cols = [(col[c] + 1, mapping.get(c, c)) for c in ("x", "y", "z") if c in col]
    _check_positions(
        path, lines, pos[:, [k for k, c in enumerate("xyz") if c in col]], pos_cols, max_position_m
    )
    attrs = {
        "source_format": "csv",
        "time_base": "file timestamps (" + ("ns" if "host_ns" in col else "s") + ")",
        "orientation": "quaternion" if has_quat else "planar yaw",
    }
    if mapping:
        attrs["column_map"] = ",".join(f"{k}={v}" for k, v in mapping.items())
    return _pose_imported(path, lines, t_ns, pos, quat, np.ones(n, bool), duplicates, attrs, flags)


def _read_kitti(path: str | os.PathLike[str], **options: Any) -> Imported:
    from sensorbench.logs.import_kitti import read_kitti  # it builds on this module

    return read_kitti(path, **options)


READERS = {
    ("mocap", "motive"): read_motive,
    ("mocap", "tum"): read_tum,
    ("mocap", "euroc"): read_euroc,
    ("pose", "tum"): read_tum,
    ("pose", "euroc"): read_euroc,
    ("pose", "motive"): read_motive,
    ("mocap", "csv"): read_pose_csv,
    ("pose", "csv"): read_pose_csv,
    ("pods", "csv"): read_pod_csv,
    ("mocap", "kitti"): _read_kitti,
    ("pose", "kitti"): _read_kitti,
}
"""(what, format) -> parser."""


def refuse_impossible(
    source: Path, name: str, batch: PoseBatch | EncoderBatch | LidarTurns
) -> None:
    """The last check before a parsed batch is written: the session's own value checks
    (:mod:`sensorbench.logs.values`), so an import never stores what ``check`` refuses.

    Raises:
        ImportFormatError: naming ``source`` and the first impossible sample.
    """
    problems = batch_problems(name, batch)
    if problems:
        raise ImportFormatError(f"{source}: " + "; ".join(str(p) for p in problems[:3]))


class ImportResult(NamedTuple):
    """What :func:`import_file` added, and what it dropped or flagged on the way."""

    name: str
    """Stream name."""
    samples: int
    """Samples written."""
    dropped_lines: list[int]
    """File lines dropped because their stamp repeats."""
    relocalized_lines: list[int]
    """File lines of kept poses flagged RELOCALIZED (they corrected a repeated stamp)."""


def import_file(
    what: str,
    source: str | os.PathLike[str],
    fmt: str,
    session: str | os.PathLike[str],
    name: str | None = None,
    **options: Any,
) -> ImportResult:
    """Parse ``source`` and add it to ``session`` (created if missing) as a new stream.

    Args:
        what: ``mocap`` (pose stream of kind mocap), ``pose`` (pose_sensor) or ``pods``.
        fmt: ``motive``, ``tum``, ``euroc``, ``kitti`` or ``csv``.
        name: stream name (default: ``mocap``, ``pose_sensor`` or ``pods``).
        options: parser options (``body``, ``up`` for Motive; ``times`` for KITTI;
            ``max_position_m``; ``duplicates``).
    """
    from sensorbench.logs.writer import SessionWriter

    parser = READERS.get((what, fmt))
    if parser is None:
        known = ", ".join(f"{w} --format {f}" for w, f in READERS)
        raise ImportFormatError(f"cannot import {what} from format {fmt!r} (known: {known})")
    source = Path(source)
    imported = parser(source, **options)
    default_name = {"mocap": "mocap", "pose": "pose_sensor", "pods": "pods"}[what]
    name = name or default_name
    refuse_impossible(source, name, imported.batch)
    attrs = {
        **imported.attrs,
        "source_file": source.name,
        "source_sha256": file_sha256(source),
    }
    session = Path(session)
    if session.exists():
        writer = SessionWriter.add_to(session)
    else:
        writer = SessionWriter(session, label=f"import {what}", swmr=False)
    with writer:
        batch = imported.batch
        if isinstance(batch, EncoderBatch):
            writer.add_encoder(name, n_counts=batch.counts.shape[1], attrs=attrs)
            writer.append_encoder(name, batch)
        else:
            kind = "mocap" if what == "mocap" else "pose_sensor"
            writer.add_pose(name, kind=kind, attrs=attrs)
            writer.append_pose(name, batch)
    return ImportResult(
        name, len(imported.batch), imported.dropped_lines, imported.relocalized_lines
    )
