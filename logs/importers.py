"""Import foreign files into sessions: mocap and pose logs (TUM, EuRoC, Motive CSV), pod CSV.

Every parser checks what it reads and fails with ``file:line: what is wrong``
(:class:`~sensorbench.errors.ImportFormatError`): missing columns, non-numeric
cells, non-monotonic or duplicate timestamps, quaternions far from unit norm,
unknown units. Motive's blank cells (occlusion) become invalid samples with
``nan`` pose, never zeros.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import EncoderBatch, PoseBatch
from sensorbench.logs.schema import NO_DEVICE_TIME

QUAT_NORM_TOLERANCE = 0.01
"""Largest accepted deviation of a quaternion's norm from 1 before normalization."""

_MOTIVE_UNITS = {"meters": 1.0, "centimeters": 0.01, "millimeters": 0.001}


@dataclass
class Imported:
    """A parsed file: its samples and the attributes to store with the stream."""

    batch: PoseBatch | EncoderBatch
    attrs: dict[str, Any] = field(default_factory=dict)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, for provenance."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_text(path: Path) -> list[str]:
    if not path.is_file():
        raise ImportFormatError(f"{path}: no such file")
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path}: not a text file ({exc})") from exc


def _number(path: Path, line: int, column: str, cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise ImportFormatError(
            f"{path}:{line}: column {column!r}: {cell.strip()!r} is not a number"
        ) from None


def _seconds_to_ns(path: Path, line: int, column: str, cell: str) -> int:
    """Exact decimal seconds -> int ns (float64 would lose up to ~100 ns at epoch scale)."""
    text = cell.strip()
    m = re.fullmatch(r"([+-]?)(\d*)\.?(\d*)", text)
    if m and (m.group(2) or m.group(3)):
        sign = -1 if m.group(1) == "-" else 1
        frac = (m.group(3) + "000000000")[:9]
        rounding = 1 if len(m.group(3)) > 9 and m.group(3)[9] >= "5" else 0
        return sign * (int(m.group(2) or "0") * 1_000_000_000 + int(frac) + rounding)
    return round(_number(path, line, column, cell) * 1e9)


def _integer(path: Path, line: int, column: str, cell: str) -> int:
    try:
        return int(cell.strip())
    except ValueError:
        value = _number(path, line, column, cell)
        if value != int(value):
            raise ImportFormatError(
                f"{path}:{line}: column {column!r}: {cell.strip()!r} is not an integer"
            ) from None
        return int(value)


def _check_times(path: Path, lines: np.ndarray, t_ns: np.ndarray) -> None:
    dt = np.diff(t_ns)
    bad = np.flatnonzero(dt <= 0)
    if bad.size:
        k = int(bad[0]) + 1
        what = "duplicate" if dt[bad[0]] == 0 else "non-monotonic"
        raise ImportFormatError(
            f"{path}:{lines[k]}: {what} timestamp (previous sample at line {lines[k - 1]}); "
            "timestamps must strictly increase"
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


def _pose_batch(
    path: Path,
    lines: np.ndarray,
    t_ns: np.ndarray,
    pos: np.ndarray,
    quat: np.ndarray,
    valid: np.ndarray,
) -> PoseBatch:
    if len(t_ns) == 0:
        raise ImportFormatError(f"{path}: no samples")
    t_ns = np.asarray(t_ns, dtype=np.int64)
    _check_times(path, lines, t_ns)
    quat = _check_quats(path, lines, quat, valid)
    pos = np.where(valid[:, None], pos, np.nan)
    quat = np.where(valid[:, None], quat, np.nan)
    return PoseBatch.from_arrays(t_ns, pos, quat, valid)


def read_tum(path: str | os.PathLike[str]) -> Imported:
    """TUM trajectory: ``timestamp tx ty tz qx qy qz qw`` (s, m), ``#`` comments."""
    path = Path(path)
    rows, lines, times = [], [], []
    for i, text in enumerate(_read_text(path), start=1):
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        cells = text.replace(",", " ").split()
        if len(cells) != 8:
            raise ImportFormatError(
                f"{path}:{i}: expected 8 columns (timestamp tx ty tz qx qy qz qw), got {len(cells)}"
            )
        names = ("timestamp", "tx", "ty", "tz", "qx", "qy", "qz", "qw")
        rows.append([_number(path, i, n, c) for n, c in zip(names, cells, strict=True)])
        times.append(_seconds_to_ns(path, i, "timestamp", cells[0]))
        lines.append(i)
    data = np.array(rows, dtype=np.float64).reshape(-1, 8)
    batch = _pose_batch(
        path,
        np.array(lines),
        np.array(times),
        data[:, 1:4],
        data[:, 4:8],
        np.ones(len(data), bool),
    )
    return Imported(batch, {"source_format": "tum", "time_base": "file timestamps (s)"})


def read_euroc(path: str | os.PathLike[str]) -> Imported:
    """EuRoC CSV: ``#timestamp [ns]``, position x y z (m), quaternion **w x y z**."""
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
        t_ns[r] = _integer(path, i, "timestamp", row[cols["timestamp"]])
        for k, name in enumerate(order):
            data[r, k] = _number(path, i, name, row[cols[name]])
    batch = _pose_batch(
        path, np.array(lines), t_ns, data[:, 0:3], data[:, 3:7], np.ones(len(data), bool)
    )
    return Imported(batch, {"source_format": "euroc", "time_base": "file timestamps (ns)"})


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _euroc_columns(path: Path, header: list[str]) -> dict[str, int]:
    cols: dict[str, int] = {}
    for j, name in enumerate(header):
        low = name.lower()
        if "timestamp" in low and "timestamp" not in cols:
            cols["timestamp"] = j
        m = re.match(r"p_\w*?_([xyz])\b", low)
        if m and f"p{m.group(1)}" not in cols:
            cols[f"p{m.group(1)}"] = j
        m = re.match(r"q_\w*?_([wxyz])\b", low)
        if m and f"q{m.group(1)}" not in cols:
            cols[f"q{m.group(1)}"] = j
    missing = [c for c in ("timestamp", "px", "py", "pz", "qw", "qx", "qy", "qz") if c not in cols]
    if missing:
        raise ImportFormatError(
            f"{path}:1: EuRoC header lacks columns for {', '.join(missing)} "
            "(expected #timestamp, p_*_x/y/z, q_*_w/x/y/z)"
        )
    return cols


def read_motive(path: str | os.PathLike[str], body: str | None = None, up: str = "y") -> Imported:
    """OptiTrack Motive CSV export (versions 1.21–1.25), one rigid body.

    The header is parsed by its row labels (Type, Name, ID, optional Parent, the
    category row and the ``Frame, Time`` row), never by fixed column numbers.

    Args:
        body: rigid-body name; may be omitted when the file has exactly one.
        up: ``y`` (Motive's default: converted to Z-up by a +90° rotation about X,
            so (x, y, z) → (x, −z, y)) or ``z`` (kept as is).
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
    for j in range(width):
        if cell(types, j) == "Rigid Body" and cell(names, j) == body:
            key = f"{cell(category, j)}.{cell(component, j)}"
            cols.setdefault(key, j)
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
        t.append(_seconds_to_ns(path, line, "Time (Seconds)", cell(row, time_col)))
        cells = [cell(row, cols[k]).strip() for k in needed]
        if any(not c for c in cells):
            valid.append(False)
            pos.append([np.nan] * 3)
            quat.append([np.nan] * 4)
        else:
            values = [_number(path, line, k, c) for k, c in zip(needed, cells, strict=True)]
            quat.append(values[:4])
            pos.append([v * scale for v in values[4:]])
            valid.append(True)
        lines.append(line)
    valid_a = np.array(valid, dtype=bool)
    pos_a, quat_a = np.array(pos).reshape(-1, 3), np.array(quat).reshape(-1, 4)
    quat_a = _check_quats(path, np.array(lines), quat_a, valid_a)
    frame = "Motive world, Z-up" if up == "z" else "Motive world converted Y-up -> Z-up: (x, -z, y)"
    if up == "y" and valid_a.any():
        from scipy.spatial.transform import Rotation  # loaded here: the CLI starts without scipy

        y_up_to_z_up = Rotation.from_euler("x", 90, degrees=True)
        pos_a[valid_a] = y_up_to_z_up.apply(pos_a[valid_a])
        quat_a[valid_a] = (y_up_to_z_up * Rotation.from_quat(quat_a[valid_a])).as_quat()
    batch = _pose_batch(path, np.array(lines), np.array(t), pos_a, quat_a, valid_a)
    attrs = {
        "source_format": "motive",
        "time_base": "Motive take time (s since capture start)",
        "frame": frame,
        "rigid_body": body,
        "motive_format_version": meta.get("Format Version", ""),
        "capture_start_time": meta.get("Capture Start Time", ""),
        "source_length_units": units_name,
    }
    return Imported(batch, attrs)


def read_pod_csv(path: str | os.PathLike[str]) -> Imported:
    """Pod encoder CSV with a header row.

    Columns: a time column ``t_s`` (s) or ``host_ns`` (ns); counters ``c0, c1, ...``
    (cumulative counts, integers); optional ``device_ns`` or ``device_us`` (MCU
    time, ns or µs), ``seq``, ``yaw`` (rad), ``yaw_rate`` (rad/s).
    """
    path = Path(path)
    rows = [(i, r) for i, r in enumerate(csv.reader(_read_text(path)), start=1) if r]
    if not rows:
        raise ImportFormatError(f"{path}:1: empty file")
    header = [c.strip() for c in rows[0][1]]
    idx = {name: j for j, name in enumerate(header)}
    counters = sorted(
        (int(m.group(1)), j) for j, n in enumerate(header) if (m := re.fullmatch(r"c(\d+)", n))
    )
    if "t_s" not in idx and "host_ns" not in idx:
        raise ImportFormatError(f"{path}:1: no time column (t_s or host_ns) in header {header}")
    if not counters or [k for k, _ in counters] != list(range(len(counters))):
        raise ImportFormatError(f"{path}:1: counter columns must be c0, c1, ... (got {header})")
    n = len(rows) - 1
    host = np.empty(n, np.int64)
    counts = np.empty((n, len(counters)), np.int64)
    dev = np.full(n, NO_DEVICE_TIME, np.int64)
    seq = np.arange(n, dtype=np.int64)
    yaw, rate = np.full(n, np.nan), np.full(n, np.nan)
    lines = np.empty(n, np.int64)
    for r, (i, row) in enumerate(rows[1:]):
        lines[r] = i
        if len(row) != len(header):
            raise ImportFormatError(f"{path}:{i}: {len(row)} cells, header has {len(header)}")
        if "host_ns" in idx:
            host[r] = _integer(path, i, "host_ns", row[idx["host_ns"]])
        else:
            host[r] = _seconds_to_ns(path, i, "t_s", row[idx["t_s"]])
        for k, j in counters:
            counts[r, k] = _integer(path, i, f"c{k}", row[j])
        if "device_ns" in idx:
            dev[r] = _integer(path, i, "device_ns", row[idx["device_ns"]])
        elif "device_us" in idx:
            dev[r] = _integer(path, i, "device_us", row[idx["device_us"]]) * 1000
        if "seq" in idx:
            seq[r] = _integer(path, i, "seq", row[idx["seq"]])
        if "yaw" in idx:
            yaw[r] = _number(path, i, "yaw", row[idx["yaw"]])
        if "yaw_rate" in idx:
            rate[r] = _number(path, i, "yaw_rate", row[idx["yaw_rate"]])
    if n == 0:
        raise ImportFormatError(f"{path}: no samples")
    _check_times(path, lines, host)
    batch = EncoderBatch(host, dev, seq, counts, yaw, rate)
    return Imported(batch, {"source_format": "csv", "time_base": "file timestamps"})


READERS = {
    ("mocap", "motive"): read_motive,
    ("mocap", "tum"): read_tum,
    ("mocap", "euroc"): read_euroc,
    ("pose", "tum"): read_tum,
    ("pose", "euroc"): read_euroc,
    ("pose", "motive"): read_motive,
    ("pods", "csv"): read_pod_csv,
}
"""(what, format) -> parser."""


def import_file(
    what: str,
    source: str | os.PathLike[str],
    fmt: str,
    session: str | os.PathLike[str],
    name: str | None = None,
    **options: Any,
) -> tuple[str, int]:
    """Parse ``source`` and add it to ``session`` (created if missing) as a new stream.

    Args:
        what: ``mocap`` (pose stream of kind mocap), ``pose`` (pose_sensor) or ``pods``.
        fmt: ``motive``, ``tum``, ``euroc`` or ``csv``.
        name: stream name (default: ``mocap``, ``pose_sensor`` or ``pods``).
        options: parser options (``body``, ``up`` for Motive).

    Returns:
        The stream name and the number of samples imported.
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
    return name, len(imported.batch)
