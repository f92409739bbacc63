"""Import foreign files into sessions: mocap and pose logs (TUM, EuRoC, Motive, KITTI), pod CSV.

Every parser reads its file in bounded chunks, a column at a time, through
:mod:`~sensorbench.logs.text_table`, and fails with ``file:line:column: what is wrong``
(docs/FORMAT.md, "Import formats"). Every ``stream_*`` reader takes ``max_position_m``
(largest accepted |coordinate|, m) and ``duplicates`` (:mod:`~sensorbench.logs.import_times`).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.import_times import TimeOrder, flag_corrections, order_times
from sensorbench.logs.model_file import file_sha256
from sensorbench.logs.schema import NO_DEVICE_TIME, PoseFlag
from sensorbench.logs.text_table import (
    CHUNK_ROWS,
    Table,
    content_lines,
    flags01,
    floats,
    integers,
    parse_float,
    sep_of,
    splitter,
    tables,
    text_lines,
    times_ns,
)
from sensorbench.logs.values import batch_problems, count_steps

QUAT_NORM_TOLERANCE = 0.01
"""Largest accepted deviation of a quaternion's norm from 1 before normalization."""

MAX_ABS_POSITION_M = 1e4
"""Default largest accepted |coordinate| of an imported position (m): no indoor or
campus-scale log reaches 10 km, a larger value is a unit or parsing error."""

_MOTIVE_UNITS = {"meters": 1.0, "centimeters": 0.01, "millimeters": 0.001}


def _y_up_to_z_up(v: np.ndarray) -> np.ndarray:
    """Vectors (n, 3) from Motive's Y-up world to Z-up: (x, y, z) -> (x, -z, y), OptiTrack's
    own C3D Z-up preset, a +90° rotation C about x. A quaternion's vector part turns the
    same way under C·R·Cᵀ (its scalar part is unchanged)."""
    return np.stack([v[:, 0], -v[:, 2], v[:, 1]], axis=1)


@dataclass
class Imported:
    """A parsed file: its samples, the attributes to store with the stream, and the lines
    dropped or flagged as :class:`ImportStream` lists them."""

    batch: PoseBatch | EncoderBatch | LidarTurns
    attrs: dict[str, Any] = field(default_factory=dict)
    dropped_lines: list[int] = field(default_factory=list)
    relocalized_lines: list[int] = field(default_factory=list)


class ImportStream(NamedTuple):
    """A file read chunk by chunk: iterating :attr:`batches` parses it, memory bounded by
    a chunk (:data:`~sensorbench.logs.text_table.CHUNK_ROWS` rows)."""

    attrs: dict[str, Any]
    """Stream attributes known from the header."""
    batches: Iterator[Any]
    """Checked, de-duplicated samples (:class:`PoseBatch` or :class:`EncoderBatch`), a
    chunk at a time; raises :class:`ImportFormatError` at the first problem."""
    duplicates: str
    """The policy for repeated stamps."""
    dropped_lines: list[int]
    """File lines dropped for a repeated stamp, filled while :attr:`batches` runs."""
    relocalized_lines: list[int]
    """File lines of kept poses flagged RELOCALIZED, filled while :attr:`batches` runs."""
    n_counts: int = 0
    """Counters per frame (pods)."""

    def whole(self) -> Imported:
        """Every sample in one batch (the whole file in memory), with its attributes."""
        parts = list(self.batches)
        cols = [f.name for f in fields(parts[0]) if getattr(parts[0], f.name) is not None]
        batch = type(parts[0])(**{c: np.concatenate([getattr(b, c) for b in parts]) for c in cols})
        return Imported(batch, self.final_attrs(), self.dropped_lines, self.relocalized_lines)

    def final_attrs(self) -> dict[str, Any]:
        """:attr:`attrs` with what the policy dropped and flagged (once read)."""
        return {
            **self.attrs,
            "duplicates_policy": self.duplicates,
            "duplicate_lines_dropped": len(self.dropped_lines),
            "duplicates_flagged_relocalized": len(self.relocalized_lines),
        }


def _check_positions(
    path: Path, lines: np.ndarray, pos: np.ndarray, cols: list[tuple[int, str]], limit: float
) -> None:
    """Refuse any position coordinate beyond ``limit`` (m); names the first and counts all."""
    bad = np.abs(pos) > limit
    if bad.any():
        r, k = (int(v) for v in np.argwhere(bad)[0])
        col, name = cols[k]
        raise ImportFormatError(
            f"{path}:{int(lines[r])}:{col}: column {name!r}: {pos[r, k]:g} m is beyond "
            f"the position limit of {limit:g} m ({int(bad.sum())} such value(s) in lines "
            f"{int(lines[0])}-{int(lines[-1])}); check the units, or raise the limit with "
            "--max-position-m (georeferenced coordinates such as UTM: --max-position-m 1e7; "
            "they are kept as float64)"
        )


def _pose_chunk(
    path: Path,
    lines: np.ndarray,
    t_ns: np.ndarray,
    pos: np.ndarray,
    quat: np.ndarray,
    valid: np.ndarray,
    flags: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """A chunk's poses (ns, m, xyzw), quaternions checked and normalized, invalid ones nan."""
    norm = np.linalg.norm(quat, axis=1)
    bad = np.flatnonzero(valid & ~(np.abs(norm - 1.0) <= QUAT_NORM_TOLERANCE))
    if bad.size:
        k = int(bad[0])
        raise ImportFormatError(
            f"{path}:{lines[k]}: quaternion norm {norm[k]:.4f} is not 1 "
            f"(tolerance {QUAT_NORM_TOLERANCE}); is the column order right?"
        )
    quat = quat / np.where(valid, norm, 1.0)[:, None]
    return {
        "lines": np.asarray(lines),
        "t": np.asarray(t_ns, dtype=np.int64),
        "pos": np.where(valid[:, None], pos, np.nan),
        "quat": np.where(valid[:, None], quat, np.nan),
        "valid": valid,
        "flags": np.zeros(len(valid), np.uint8) if flags is None else flags.astype(np.uint8),
    }


def _rows(got: dict[str, np.ndarray], rows: slice) -> dict[str, np.ndarray]:
    return {key: value[rows] for key, value in got.items()}


def _joined(a: dict[str, np.ndarray] | None, b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return b if a is None else {key: np.concatenate([a[key], b[key]]) for key in b}


def _whole_runs(
    path: Path, chunks: Iterable[dict[str, np.ndarray]], key: str
) -> Iterator[dict[str, np.ndarray]]:
    """The rows of ``chunks`` regrouped so that no run of equal ``key`` stamps spans two
    units: a run at a chunk's end is held back until it is whole.

    Raises:
        ImportFormatError: a run longer than a chunk (memory stays bounded).
    """
    held: dict[str, np.ndarray] | None = None
    for got in chunks:
        unit = _joined(held, got)
        other = np.flatnonzero(unit[key] != unit[key][-1])
        cut = int(other[-1]) + 1 if other.size else 0
        held = _rows(unit, slice(cut, None))
        if len(held[key]) > CHUNK_ROWS:
            raise ImportFormatError(
                f"{path}:{int(held['lines'][0])}: more than {CHUNK_ROWS} samples in a row "
                "share one timestamp; not a time series"
            )
        if cut:
            yield _rows(unit, slice(0, cut))
    if held is not None:
        yield held


def _ordered(
    path: Path,
    chunks: Iterable[dict[str, np.ndarray]],
    key: str,
    duplicates: str,
    dropped: list[int],
    check: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> Iterator[tuple[dict[str, np.ndarray], TimeOrder, np.ndarray]]:
    """The rows of ``chunks`` a unit of whole runs of equal ``key`` stamps at a time
    (:func:`_whole_runs`: ``duplicates`` sees every run whole), each unit after the last row
    kept before it (``check``, then time order, see :mod:`sensorbench.logs.import_times`):
    (those rows, their order, the rows to write)."""
    last: dict[str, np.ndarray] | None = None  # the last row kept
    for unit in _whole_runs(path, chunks, key):
        ctx = _joined(last, unit)
        if check is not None:
            check(ctx)
        order = order_times(path, ctx["lines"], ctx[key], duplicates)
        dropped += order.dropped_lines
        keep = order.keep.copy()
        keep[0] &= last is None  # written with the unit before
        yield ctx, order, keep
        end = int(np.flatnonzero(order.keep)[-1])
        last = _rows(ctx, slice(end, end + 1))
    if last is None:
        raise ImportFormatError(f"{path}: no samples")


def _pose_batches(
    path: Path,
    chunks: Iterable[dict[str, np.ndarray]],
    duplicates: str,
    dropped: list[int],
    relocalized: list[int],
) -> Iterator[PoseBatch]:
    """The poses of ``chunks`` (:func:`_pose_chunk`), checked and de-duplicated
    (:func:`_ordered`)."""
    for ctx, order, keep in _ordered(path, chunks, "t", duplicates, dropped):
        t, flags = ctx["t"], ctx["flags"]
        if not order.keep.all():  # a flag on any line of a run of equal stamps holds for the run
            new_run = np.r_[True, np.diff(t) != 0]
            flags = np.bitwise_or.reduceat(flags, np.flatnonzero(new_run))[np.cumsum(new_run) - 1]
        if duplicates == "last":
            corrected = flag_corrections(order, t, ctx["pos"], ctx["quat"], ctx["valid"])
            flags = flags | np.where(corrected, np.uint8(PoseFlag.RELOCALIZED), np.uint8(0))
            relocalized += [int(n) for n in ctx["lines"][corrected]]
        pos, quat, valid = ctx["pos"][keep], ctx["quat"][keep], ctx["valid"][keep]
        yield PoseBatch(t[keep], pos, quat, valid, flags[keep])


def _pose_stream(
    path: Path, chunks: Iterable[dict[str, np.ndarray]], attrs: dict[str, Any], duplicates: str
) -> ImportStream:
    dropped: list[int] = []
    relocalized: list[int] = []
    batches = _pose_batches(path, chunks, duplicates, dropped, relocalized)
    return ImportStream(attrs, batches, duplicates, dropped, relocalized)


def _pose_imported(
    path: Path,
    lines: np.ndarray,
    t_ns: np.ndarray,
    pos: np.ndarray,
    quat: np.ndarray,
    duplicates: str,
    attrs: dict[str, Any],
) -> Imported:
    """Checked, de-duplicated pose samples given all at once (a ROS bag's; all valid)."""
    valid = np.ones(len(t_ns), bool)
    chunk = _pose_chunk(path, np.asarray(lines), t_ns, pos, quat, valid)
    return _pose_stream(path, [chunk] if len(t_ns) else [], attrs, duplicates).whole()


def stream_tum(
    path: str | os.PathLike[str],
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> ImportStream:
    """TUM trajectory: ``timestamp tx ty tz qx qy qz qw`` (s, m), ``#`` comments."""
    path = Path(path)
    rows = ((i, text.replace(",", " ")) for i, text in content_lines(path))
    what = "expected 8 columns (timestamp tx ty tz qx qy qz qw), got {n}"
    col = {n: j for j, n in enumerate(("t_s", "x", "y", "z", "qx", "qy", "qz", "qw"))}
    label = {"t_s": "timestamp", "x": "tx", "y": "ty", "z": "tz"}
    chunks = (
        _pose_columns(t, col, label, max_position_m) for t in tables(path, rows, None, 8, what)
    )
    attrs = {"source_format": "tum", "time_base": "file timestamps (s)"}
    return _pose_stream(path, chunks, attrs, duplicates)


def _header_then_rows(path: Path, is_header: Any) -> tuple[str | None, Iterator[tuple[int, str]]]:
    """The first non-blank line (when ``is_header(text)``) and the remaining non-blank,
    non-``#`` lines."""
    lines = content_lines(path, comments=True)
    first = next(lines, None)
    if first is None:
        return None, iter(())
    rest = ((i, t) for i, t in lines if not t.lstrip().startswith("#"))
    if is_header(first[1]):
        return first[1], rest
    return None, itertools.chain([first], rest)


def stream_euroc(
    path: str | os.PathLike[str],
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> ImportStream:
    """EuRoC CSV: ``#timestamp [ns]``, position x y z (m), quaternion **w x y z**."""
    path = Path(path)
    split = splitter(",")

    def is_header(text: str) -> bool:
        return text.lstrip().startswith("#") or parse_float(split(text)[0]) is None

    head, rows = _header_then_rows(path, is_header)
    if head is None:
        header = ["timestamp", "px", "py", "pz", "qw", "qx", "qy", "qz"]
        cols = dict(zip(header, range(8), strict=True))
    else:
        header = [c.strip().lstrip("#").strip() for c in split(head)]
        cols = _euroc_columns(path, header)
    col = {"host_ns": cols["timestamp"], **{c: cols[f"p{c}"] for c in "xyz"},
           **{q: cols[q] for q in ("qx", "qy", "qz", "qw")}}  # fmt: skip
    label = {"host_ns": "timestamp", "x": "px", "y": "py", "z": "pz"}
    what = f"{{n}} cells, header has {len(header)}"
    chunks = (
        _pose_columns(t, col, label, max_position_m)
        for t in tables(path, rows, ",", len(header), what, at_least=True)
    )
    attrs = {"source_format": "euroc", "time_base": "file timestamps (ns)"}
    return _pose_stream(path, chunks, attrs, duplicates)


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


_MOTIVE_VALUES = [f"Rotation.{a}" for a in "XYZW"] + [f"Position.{a}" for a in "XYZ"]


def stream_motive(
    path: str | os.PathLike[str],
    body: str | None = None,
    up: str = "y",
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> ImportStream:
    """OptiTrack Motive CSV export (docs/FORMAT.md), one rigid body (``body``: may be
    omitted when the file has one); ``up``: ``y`` (Motive's default: world and body axes
    converted to Z-up, :func:`_y_up_to_z_up`) or ``z`` (kept as is).
    """
    path = Path(path)
    if up not in ("y", "z"):
        raise ImportFormatError(f"{path}: up axis must be 'y' or 'z', got {up!r}")
    lines = text_lines(path)
    meta, scale = _motive_meta(path, next(lines, None))
    head = _motive_header(path, lines)
    body, (time_col, *cols) = _motive_body(path, head, body)
    pos_cols = [(j + 1, n) for j, n in zip(cols[4:], _MOTIVE_VALUES[4:], strict=True)]

    def convert(t: Table) -> dict[str, np.ndarray]:
        named = zip(cols, _MOTIVE_VALUES, strict=True)
        v = np.stack([floats(t, j, n, missing="blank") for j, n in named], axis=1)
        valid = ~np.isnan(v).any(axis=1)
        quat, pos = v[:, :4], v[:, 4:] * scale
        seen = np.where(valid[:, None], pos, 0.0)
        _check_positions(path, t.lines, seen, pos_cols, max_position_m)
        if up == "y":
            pos = _y_up_to_z_up(pos)
            quat = np.column_stack([_y_up_to_z_up(quat[:, :3]), quat[:, 3]])
        t_ns = times_ns(t, time_col, "Time (Seconds)", "s")
        return _pose_chunk(path, t.lines, t_ns, pos, quat, valid)

    # Motive writes every cell (blank ones too): a row with fewer was cut
    what = f"{{n}} cells, the header has {head.width}; the row is truncated"
    rows = ((i, text) for i, text in lines if text.strip(" \t\r,"))
    frames = [0, 0]  # rows, valid rows

    def chunks() -> Iterator[dict[str, np.ndarray]]:
        for t in tables(path, rows, ",", head.width, what, at_least=True):
            chunk = convert(t)
            frames[0] += len(chunk["valid"])
            frames[1] += int(chunk["valid"].sum())
            yield chunk
        if frames[0] and not frames[1]:
            raise ImportFormatError(
                f"{path}: rigid body {body!r} is blank (occluded) in all {frames[0]} frames; "
                "nothing to import"
            )

    attrs = {
        "source_format": "motive",
        "time_base": "Motive take time (s since capture start)",
        "frame": "Motive world, Z-up"
        if up == "z"
        else "Motive world and body axes converted Y-up -> Z-up: (x, -z, y), R' = C R C^T",
        "rigid_body": body,
        "motive_format_version": meta.get("Format Version", ""),
        "capture_start_time": meta.get("Capture Start Time", ""),
        "source_length_units": meta.get("Length Units", "Meters"),
    }
    return _pose_stream(path, chunks(), attrs, duplicates)


def _motive_meta(path: Path, first: tuple[int, str] | None) -> tuple[dict[str, str], float]:
    """The first row's keys and values, and the length unit (m)."""
    if first is None:
        raise ImportFormatError(f"{path}:1: empty file")
    top = splitter(",")(first[1])
    meta = {top[k]: top[k + 1] for k in range(0, len(top) - 1, 2)}
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
    return meta, scale


class _MotiveHeader(NamedTuple):
    labelled: dict[str, tuple[int, list[str]]]
    """Row label (Type, Name, ID, Parent) -> (file line, cells)."""
    category: list[str]
    component: list[str]
    data_line: int
    """The file line after the ``Frame, Time`` row."""

    @property
    def width(self) -> int:
        return len(self.component)

    @property
    def time_col(self) -> int | None:
        return next((j for j, c in enumerate(self.component) if c.startswith("Time")), None)

    def cell(self, label: str, j: int) -> str:
        row = self.labelled.get(label, (0, []))[1]
        return row[j] if j < len(row) else ""


def _motive_header(path: Path, lines: Iterator[tuple[int, str]]) -> _MotiveHeader:
    """The header rows after the first, by their labels (never by fixed positions), up to
    and including the ``Frame, Time`` row."""
    split = splitter(",")
    labelled: dict[str, tuple[int, list[str]]] = {}
    category: list[str] | None = None
    for i, text in lines:
        row = split(text)
        if not any(row):
            continue
        label = row[0] or (row[1] if len(row) > 1 else "")
        if row[0] == "Frame":
            if category is None or "Name" not in labelled:
                break
            return _MotiveHeader(labelled, category, row, i + 1)
        if label in ("Type", "Name", "ID", "Parent"):
            labelled[label] = (i, row)
        elif not row[0] and (len(row) < 2 or not row[1]):
            category = row
    raise ImportFormatError(
        f"{path}: Motive header rows (Type/Name/ID, category, 'Frame,Time') not found"
    )


def _motive_body(path: Path, head: _MotiveHeader, body: str | None) -> tuple[str, list[int]]:
    """The rigid body to read and its columns: the time's, then :data:`_MOTIVE_VALUES`'."""
    width = head.width
    rigid = [j for j in range(width) if head.cell("Type", j) == "Rigid Body"]
    bodies = sorted({head.cell("Name", j) for j in rigid if head.cell("Name", j)})
    if body is None:
        if len(bodies) != 1:
            raise ImportFormatError(
                f"{path}: {len(bodies)} rigid bodies ({', '.join(bodies) or 'none'}); pick one"
            )
        body = bodies[0]
    elif body not in bodies:
        raise ImportFormatError(f"{path}: no rigid body {body!r} (have: {', '.join(bodies)})")
    cols: dict[str, int] = {}
    for j in range(width):
        if head.cell("Type", j) == "Rigid Body" and head.cell("Name", j) == body:
            key = f"{head.category[j] if j < len(head.category) else ''}.{head.component[j]}"
            if key in cols:  # a second body of that name: which one is meant is unknowable
                raise ImportFormatError(
                    f"{path}:{head.labelled['Name'][0]}: two rigid bodies are named {body!r} "
                    f"(IDs {head.cell('ID', cols[key])} and {head.cell('ID', j)}); rename one "
                    "in Motive"
                )
            cols[key] = j
    time_col = head.time_col
    missing = [k for k in _MOTIVE_VALUES if k not in cols]
    if time_col is None:
        missing.insert(0, "Time (Seconds)")
    if missing or time_col is None:
        raise ImportFormatError(
            f"{path}:{head.data_line}: rigid body {body!r} lacks columns {', '.join(missing)}"
        )
    return body, [time_col, *(cols[k] for k in _MOTIVE_VALUES)]


POD_TIME_COLUMNS = {"t_s": "s", "t_ms": "ms", "t_us": "us", "t_ns": "ns", "host_ns": "ns"}
"""The pod CSV's time columns and their units (one of them per file)."""

POD_OPTIONAL_COLUMNS = ("device_ns", "device_us", "seq", "yaw", "yaw_rate")
POD_CSV_COLUMNS = (*POD_TIME_COLUMNS, "c0", "c1", "...", *POD_OPTIONAL_COLUMNS)
"""Column names the pod CSV reader knows, as shown (counters ``c0, c1, ...``: any number)."""


def _is_pod_column(name: str) -> bool:
    named = name in POD_TIME_COLUMNS or name in POD_OPTIONAL_COLUMNS
    return named or re.fullmatch(r"c\d+", name) is not None


def _csv_header(path: Path) -> tuple[int, list[str], str | None, Iterator[tuple[int, str]]]:
    """A CSV's header row (its line, cells and separator) and the rows after it."""
    rows = content_lines(path)
    head_line, head = next(rows, (1, None))
    if head is None:
        raise ImportFormatError(f"{path}:1: empty file (no header row, no samples)")
    sep = sep_of(head)
    return head_line, splitter(sep)(head), sep, rows


def _column_map(mapping: dict[str, str]) -> dict[str, str]:
    """The ``column_map`` attribute of a CSV read with ``--columns`` (none without)."""
    return {"column_map": ",".join(f"{k}={v}" for k, v in mapping.items())} if mapping else {}


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
    """What :func:`stream_pod_csv` learnt from a pod CSV's header."""

    col: dict[str, int]
    """Column name -> cell index."""
    mapping: dict[str, str]
    time_name: str
    n_counters: int

    def label(self, name: str) -> str:
        """The column's header in the file."""
        return self.mapping.get(name, name)


def _pod_columns(p: PodTable, t: Table, first_row: int) -> dict[str, np.ndarray]:
    """host ns, device ns, seq (without a column: the row number, from ``first_row``),
    counts (n, pods), yaw (rad), yaw rate (rad/s) of a chunk."""
    n, col = len(t.lines), p.col
    unit = POD_TIME_COLUMNS[p.time_name]
    tc = col[p.time_name]
    host = times_ns(t, tc, p.label(p.time_name), unit)
    counts = [integers(t, col[f"c{k}"], p.label(f"c{k}")) for k in range(p.n_counters)]
    dev = np.full(n, NO_DEVICE_TIME, np.int64)
    if "device_ns" in col:
        dev = integers(t, col["device_ns"], p.label("device_ns"))
    elif "device_us" in col:  # exact, and refused where it does not fit int64 ns
        dev = times_ns(t, col["device_us"], p.label("device_us"), "us")
    out = {"lines": t.lines, "host": host, "dev": dev, "counts": np.stack(counts, axis=1)}
    out["seq"] = (
        integers(t, col["seq"], p.label("seq")) if "seq" in col else first_row + np.arange(n)
    )
    for name in ("yaw", "yaw_rate"):  # nan = no IMU value, as in the session (docs/FORMAT.md)
        missing = np.full(n, np.nan)
        out[name] = floats(t, col[name], p.label(name), missing="nan") if name in col else missing
    return out


def check_pod_columns(path: Path, got: dict[str, np.ndarray], p: PodTable) -> None:
    """Refuse what FORMAT.md rules out of a pod CSV although each cell is a number: counts
    that are not cumulative (INT64_MIN, a wrap, a jump no wheel makes in the interval) and
    ``seq`` or device times that step back (wrapped, or an MCU reset); names the cell.

    Raises:
        ImportFormatError: ``file:line:column`` of the first such cell.
    """
    lines = got["lines"]
    problems, bad = count_steps("counts", got["host"], got["counts"])
    if problems:
        r, k = (int(v) for v in np.argwhere(bad)[0])
        raise ImportFormatError(
            f"{path}:{int(lines[r])}:{p.col[f'c{k}'] + 1}: column {p.label(f'c{k}')!r}: "
            f"{problems[0].message}"
        )
    dev = got["dev"]
    dev_back = (dev[1:] < dev[:-1]) & (dev[1:] != NO_DEVICE_TIME) & (dev[:-1] != NO_DEVICE_TIME)
    for name, back, why in (
        ("seq", np.diff(got["seq"]) < 0 if "seq" in got else np.zeros(0, bool), "sequence number"),
        ("device_ns" if "device_ns" in p.col else "device_us", dev_back, "device time"),
    ):
        if back.any():
            r = int(np.argmax(back)) + 1
            raise ImportFormatError(
                f"{path}:{int(lines[r])}:{p.col[name] + 1}: column {p.label(name)!r}: the "
                f"{why} steps back from line {int(lines[r - 1])} (a counter that wraps, or a "
                "device restart); the column must be unwrapped (docs/FORMAT.md), or leave it out"
            )


def stream_pod_csv(
    path: str | os.PathLike[str],
    columns: dict[str, str] | None = None,
    duplicates: str = "last",
) -> ImportStream:
    """Pod encoder CSV with a header row naming :data:`POD_CSV_COLUMNS` (docs/FORMAT.md);
    ``columns``: column name -> header in the file, e.g. ``{"t_s": "t", "c0": "count0"}``.
    """
    path = Path(path)
    mapping = dict(columns or {})  # names checked by parse_column_map
    head_line, header, sep, rows = _csv_header(path)
    counter_names = {n for n in [*header, *mapping] if re.fullmatch(r"c\d+", n)}
    mapped_time = any(n in POD_TIME_COLUMNS for n in mapping)  # the one to use
    names = [*POD_TIME_COLUMNS, *sorted(counter_names), *POD_OPTIONAL_COLUMNS]
    col = _resolve_columns(path, head_line, header, mapping, names)
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
    table = PodTable(col, mapping, time_name, len(counters))
    what = f"{{n}} cells, header has {len(header)}"
    chunks = (
        _pod_columns(table, t, k * CHUNK_ROWS)  # every chunk but the last is full
        for k, t in enumerate(tables(path, rows, sep, len(header), what))
    )
    attrs = {
        "source_format": "csv",
        "time_base": f"file timestamps ({time_name}: {POD_TIME_COLUMNS[time_name]})",
        **_column_map(mapping),
    }
    dropped: list[int] = []
    cols = ("host", "dev", "seq", "counts", "yaw", "yaw_rate")
    units = _ordered(
        path, chunks, "host", duplicates, dropped, lambda u: check_pod_columns(path, u, table)
    )
    batches = (EncoderBatch(*(u[c][keep] for c in cols)) for u, _, keep in units)
    return ImportStream(attrs, batches, duplicates, dropped, [], len(counters))


POSE_CSV_COLUMNS = ("t_s", "host_ns", "x", "y", "z", "qx", "qy", "qz", "qw", "yaw", "relocalized",
                    "paused")  # fmt: skip
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


def stream_pose_csv(
    path: str | os.PathLike[str],
    columns: dict[str, str] | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> ImportStream:
    """Generic pose/mocap CSV, one header row naming :data:`POSE_CSV_COLUMNS`
    (docs/FORMAT.md: ``t_s`` s or ``host_ns`` ns, ``x, y, z`` m, ``qx..qw`` or ``yaw`` rad);
    ``columns`` maps a column name to the file's header.
    """
    path = Path(path)
    mapping = dict(columns or {})
    head_line, header, sep, rows = _csv_header(path)
    col = _pose_csv_columns(path, head_line, header, mapping)
    has_quat = all(q in col for q in ("qx", "qy", "qz", "qw"))
    what = f"{{n}} cells, header has {len(header)}"
    attrs = {
        "source_format": "csv",
        "time_base": "file timestamps (" + ("ns" if "host_ns" in col else "s") + ")",
        "orientation": "quaternion" if has_quat else "planar yaw",
        **_column_map(mapping),
    }
    chunks = (
        _pose_columns(t, col, mapping, max_position_m)
        for t in tables(path, rows, sep, len(header), what)
    )
    return _pose_stream(path, chunks, attrs, duplicates)


def _pose_columns(
    t: Table, col: dict[str, int], label: dict[str, str], limit: float
) -> dict[str, np.ndarray]:
    """A chunk's poses from its columns ``col`` (:data:`POSE_CSV_COLUMNS` name -> cell
    index; each named ``label.get(name, name)`` in messages), positions within ``limit`` (m)."""

    def num(name: str, read: Any = floats) -> np.ndarray:
        return read(t, col[name], label.get(name, name))

    n = len(t.lines)
    if "host_ns" in col:
        t_ns = num("host_ns", integers)
    else:
        t_ns = times_ns(t, col["t_s"], label.get("t_s", "t_s"), "s")
    xyz = [k for k, c in enumerate("xyz") if c in col]
    pos = np.zeros((n, 3))
    for k in xyz:
        pos[:, k] = num("xyz"[k])
    if all(q in col for q in ("qx", "qy", "qz", "qw")):
        quat = np.stack([num(q) for q in ("qx", "qy", "qz", "qw")], axis=1)
    else:
        half = num("yaw") / 2
        quat = np.stack([0 * half, 0 * half, np.sin(half), np.cos(half)], axis=1)
    flags = np.zeros(n, np.uint8)
    for name, bit in (("relocalized", PoseFlag.RELOCALIZED), ("paused", PoseFlag.PAUSED)):
        if name in col:
            flags |= np.where(num(name, flags01), np.uint8(bit), np.uint8(0))
    pos_cols = [(col["xyz"[k]] + 1, label.get("xyz"[k], "xyz"[k])) for k in xyz]
    _check_positions(t.path, t.lines, pos[:, xyz], pos_cols, limit)
    return _pose_chunk(t.path, t.lines, t_ns, pos, quat, np.ones(n, bool), flags)


def _pose_csv_columns(
    path: Path, head_line: int, header: list[str], mapping: dict[str, str]
) -> dict[str, int]:
    """The pose CSV's columns (name -> cell index); refuses a header that lacks any."""
    col = _resolve_columns(path, head_line, header, mapping, list(POSE_CSV_COLUMNS))
    has_quat = all(q in col for q in ("qx", "qy", "qz", "qw"))
    missing = [n for n in ("x", "y") if n not in col]
    if "t_s" not in col and "host_ns" not in col:
        missing.insert(0, "t_s or host_ns")
    if not has_quat and "yaw" not in col:
        missing.append("qx, qy, qz, qw or yaw")
    if has_quat and "z" not in col:
        missing.append("z")
    taken = {h: n for n, h in mapping.items()}  # a header cell --columns gave another name
    missing = [f"{n} (--columns reads its column as {taken[n]})" if n in taken else n
               for n in missing]  # fmt: skip
    if missing:
        raise ImportFormatError(
            f"{path}:{head_line}: header lacks {'; '.join(missing)} (columns: "
            f"{', '.join(header)}); map other names with --columns NAME=HEADER,..."
        )
    return col


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


_POSE_READERS: dict[str, Callable[..., ImportStream]] = {
    "motive": stream_motive, "tum": stream_tum, "euroc": stream_euroc,
    "csv": stream_pose_csv, "kitti": stream_kitti,
}  # fmt: skip
READERS: dict[tuple[str, str], Callable[..., ImportStream]] = {
    **{(what, fmt): read for what in ("mocap", "pose") for fmt, read in _POSE_READERS.items()},
    ("pods", "csv"): stream_pod_csv,
}
"""(what, format) -> parser: every pose format reads mocap and pose streams alike."""


def refuse_impossible(
    source: Path, name: str, batch: PoseBatch | EncoderBatch | LidarTurns
) -> None:
    """Refuse (ImportFormatError naming ``source``) a parsed batch the session's own value
    checks refuse, so an import never stores what ``check`` refuses."""
    problems = batch_problems(name, batch)
    if problems:
        raise ImportFormatError(f"{source}: " + "; ".join(str(p) for p in problems[:3]))


class ImportResult(NamedTuple):
    """What :func:`import_file` added (``samples`` to stream ``name``), and the lines it
    dropped or flagged as :class:`ImportStream` lists them."""

    name: str
    samples: int
    dropped_lines: list[int]
    relocalized_lines: list[int]


def import_file(
    what: str,
    source: str | os.PathLike[str],
    fmt: str,
    session: str | os.PathLike[str],
    name: str | None = None,
    **options: Any,
) -> ImportResult:
    """Parse ``source`` and add it to ``session`` (created if missing) as a new stream,
    a chunk at a time (memory bounded whatever the file's size).

    Args:
        what: ``mocap`` (pose stream of kind mocap), ``pose`` (pose_sensor) or ``pods``.
        fmt: ``motive``, ``tum``, ``euroc``, ``kitti`` or ``csv``.
        name: stream name (default: ``mocap``, ``pose_sensor`` or ``pods``).
        options: parser options (``body``, ``up`` for Motive; ``times`` for KITTI;
            ``columns`` for CSV; ``max_position_m``; ``duplicates``).
    """
    parser = READERS.get((what, fmt))
    if parser is None:
        known = ", ".join(f"{w} --format {f}" for w, f in READERS)
        raise ImportFormatError(f"cannot import {what} from format {fmt!r} (known: {known})")
    source = Path(source)
    name = {"mocap": "mocap", "pose": "pose_sensor", "pods": "pods"}[what] if name is None else name
    stream = parser(source, **options)
    first = next(stream.batches)  # a bad file is named before the session is touched
    source_attrs = {"source_file": source.name, "source_sha256": file_sha256(source)}
    kind = "encoder" if what == "pods" else "pose"
    with session_writer(session) as writer:
        if kind == "encoder":
            writer.add_encoder(name, n_counts=stream.n_counts, attrs=stream.attrs)
        else:
            writer.add_pose(name, "mocap" if what == "mocap" else "pose_sensor", stream.attrs)
        append = writer.append_encoder if kind == "encoder" else writer.append_pose
        n = 0
        for batch in itertools.chain([first], stream.batches):
            refuse_impossible(source, name, batch)
            append(name, batch)
            n += len(batch)
        writer.update_stream_attrs(kind, name, {**stream.final_attrs(), **source_attrs})
    return ImportResult(name, n, stream.dropped_lines, stream.relocalized_lines)


def session_writer(session: str | os.PathLike[str]) -> Any:
    """An offline writer adding to ``session``, or creating it (atomic either way: a copy
    swapped in under the session's update lock, or a new file) labelled with its file's
    stem, which names it in fit messages and reports (``import pods`` named all alike)."""
    from sensorbench.logs.writer import SessionWriter

    session = Path(session)
    if session.exists():
        return SessionWriter.add_to(session)
    return SessionWriter(session, label=session.stem, swmr=False)
