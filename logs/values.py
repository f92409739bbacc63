"""One value checker for sessions, asked by the reader, ``check``, the exporters and the
importers alike (docs/FORMAT.md, "Consistency and recovery"): :func:`structure_problems`
for the layout, the ``*_problems`` functions for the samples."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.model_keys import COUNT, FLAG, INT, NONNEG, POSITIVE, REAL
from sensorbench.logs.schema import (
    EVENT_DTYPE,
    GROUPS,
    LIDAR_POINT_FIELDS,
    NO_DEVICE_TIME,
    OPTIONAL_COLUMNS,
    ROW_SHAPE,
    STREAM_COLUMNS,
    FileStatus,
)

if TYPE_CHECKING:  # h5py loads with the first file checked: the CLI starts without it
    import h5py

MAX_ABS_STAMP_NS = 2**62
"""Largest |time| a stamp may have (ns, ≈ 146 years): any two stamps then differ by less
than int64 holds, so no time difference overflows (``INT64_MAX`` gave a span of 9.2e9 s)."""

MAX_ABS_POSITION_M = 1e7
"""Largest |coordinate| of a stored position (m): beyond the Earth's radius is absurd
(the importers' default limit is tighter, ``--max-position-m``)."""

MAX_RANGE_M = 1e4
"""Largest finite lidar range (m); the lidars here reach 12 m, a LaserScan's range_max
rarely 100 m."""

MAX_SPEED_HZ = 1000.0
"""Largest turn rate a lidar stream may report (Hz)."""

QUAT_NORM_TOLERANCE = 1e-3
"""Largest deviation of a stored valid quaternion's norm from 1."""

MAX_ABS_COUNT = 2**53
"""Largest |cumulative encoder count| (exact in float64; 285 years at 1e6 counts/s): a
larger one, INT64_MIN among them, is a sentinel or garbage, not a count."""

MAX_COUNTS_PER_S = 1e7
"""Fastest plausible encoder count rate (counts/s): a dead wheel of 8192 counts per rev
and 35 mm at 10 m/s makes 7.5e5. A counter wrapping at 16 or 32 bits, or garbage,
steps far faster."""

WRAP_COUNTS_PER_S = 1e6
"""Fastest plausible count rate (counts/s) of a step shaped like a 16- or 32-bit counter's
wrap (within 2**b/16 of ±2**b, both counts inside a b-bit range): :data:`MAX_COUNTS_PER_S`
misses a 16-bit wrap between frames more than 6.6 ms apart (a 49 Hz robot's 20 ms), this
misses it only below 16 Hz."""

MIN_STEP_S = 0.005
"""Interval assumed between two frames with equal or closer stamps (s): one frame at
200 Hz, so a step of up to MAX_COUNTS_PER_S × 5 ms = 50 000 counts is always possible."""

_TWO_PI = 2.0 * np.pi


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a dataset: where (``dataset``, first bad ``index``), how many."""

    dataset: str
    message: str
    index: int | None = None
    count: int = 1

    def __str__(self) -> str:
        where = f"/{self.dataset}" + ("" if self.index is None else f"[{self.index}]")
        more = f" ({self.count} rows)" if self.count > 1 else ""
        return f"{where}: {self.message}{more}"


def _first(dataset: str, bad: np.ndarray, message: str) -> list[Problem]:
    """A problem at the first True of ``bad`` (rows; a 2-D mask counts rows), or none."""
    rows = bad.any(axis=1) if bad.ndim == 2 else bad
    where = np.flatnonzero(rows)
    if where.size == 0:
        return []
    return [Problem(dataset, message, int(where[0]), int(where.size))]


def stamp_problems(
    dataset: str, t_ns: np.ndarray, *, sentinel: bool = False
) -> tuple[list[Problem], np.ndarray]:
    """Stamps outside ±:data:`MAX_ABS_STAMP_NS` (``sentinel``: ``INT64_MIN`` allowed)."""
    t = np.asarray(t_ns, dtype=np.int64)
    bad = (t > MAX_ABS_STAMP_NS) | (t < -MAX_ABS_STAMP_NS)
    if sentinel:
        bad &= t != NO_DEVICE_TIME
    if not bad.any():
        return [], bad
    k = int(np.argmax(bad))
    return _first(dataset, bad, f"{int(t[k])} ns is not a possible time (|t| <= 2**62 ns)"), bad


def order_problems(
    dataset: str, t_ns: np.ndarray, *, strict: bool, skip: np.ndarray | None = None
) -> tuple[list[Problem], np.ndarray]:
    """Times that step backwards (or repeat, when ``strict``) from the latest one before
    them; ``skip`` rows (impossible stamps, reported apart) are left out of the order.

    Returns the problems and the rows to drop so that the rest is in order.
    """
    t = np.asarray(t_ns, dtype=np.int64)
    bad = np.zeros(t.size, bool)
    if t.size < 2:
        return [], bad
    keep = np.ones(t.size, bool) if skip is None else ~skip
    idx = np.flatnonzero(keep)
    tk = t[idx]
    if tk.size < 2:
        return [], bad
    latest = np.maximum.accumulate(tk)[:-1]
    late = tk[1:] <= latest if strict else tk[1:] < latest
    bad[idx[1:][late]] = True
    back = tk[1:] < latest
    problems: list[Problem] = []
    if back.any():
        k = int(idx[1:][back][0])
        largest = float(np.max(latest[back] - tk[1:][back])) / 1e9
        text = f"time goes backwards {int(back.sum())} times (largest {largest:.6f} s)"
        problems.append(Problem(dataset, text, k))
    same = tk[1:] == latest
    if strict and same.any():
        first = int(idx[1:][same][0])
        problems.append(Problem(dataset, "time repeats a stamp", first, int(same.sum())))
    return problems, bad


def pose_problems(key: str, b: PoseBatch) -> tuple[list[Problem], np.ndarray]:
    """Problems of pose samples and the rows that hold them (``key``: ``pose/NAME``).

    Valid samples need a finite position within :data:`MAX_ABS_POSITION_M` and a finite
    unit quaternion; stamps must be possible and strictly increasing.
    """
    problems, bad_t = stamp_problems(f"{key}/t_ns", b.t_ns)
    order, late = order_problems(f"{key}/t_ns", b.t_ns, strict=True, skip=bad_t)
    problems += order
    v = b.valid
    pos_bad = v[:, None] & ~(np.abs(b.position) <= MAX_ABS_POSITION_M)
    text = f"a valid sample's position is not finite or beyond {MAX_ABS_POSITION_M:g} m"
    problems += _first(f"{key}/position", pos_bad, text)
    norm = np.linalg.norm(b.quat_xyzw, axis=1)
    q_bad = v & ~(np.abs(norm - 1.0) <= QUAT_NORM_TOLERANCE)
    problems += _first(f"{key}/quat_xyzw", q_bad, "a valid sample's quaternion is not unit")
    return problems, bad_t | late | pos_bad.any(axis=1) | q_bad


def encoder_problems(key: str, b: EncoderBatch) -> tuple[list[Problem], np.ndarray]:
    """Problems of encoder frames and the rows that hold them (``key``: ``encoders/NAME``).

    Host stamps must be possible and never step backwards (equal stamps are frames of
    one read); device stamps possible or ``INT64_MIN``; IMU values finite or ``nan``.
    """
    problems, bad_t = stamp_problems(f"{key}/host_ns", b.host_ns)
    order, late = order_problems(f"{key}/host_ns", b.host_ns, strict=False, skip=bad_t)
    problems += order
    dev, bad_dev = stamp_problems(f"{key}/device_ns", b.device_ns, sentinel=True)
    problems += dev
    bad = bad_t | late | bad_dev
    seq_back = np.r_[False, np.diff(b.seq) < 0]
    problems += _first(f"{key}/seq", seq_back, "the sequence number steps back (wrapped?)")
    count_problems, bad_counts = count_steps(key, b.host_ns, b.counts)
    problems += count_problems
    bad |= seq_back | bad_counts.any(axis=1)
    for col in ("yaw", "yaw_rate"):
        values = getattr(b, col)
        inf = np.isinf(values)
        problems += _first(f"{key}/{col}", inf, "an IMU value is infinite (nan means none)")
        bad |= inf
    return problems, bad


def count_steps(
    key: str, host_ns: np.ndarray, counts: np.ndarray
) -> tuple[list[Problem], np.ndarray]:
    """Counts beyond :data:`MAX_ABS_COUNT` and steps faster than :data:`MAX_COUNTS_PER_S`
    (over the frames' host interval, at least :data:`MIN_STEP_S`), and where they are
    (a mask shaped like ``counts``)."""
    c = np.asarray(counts, dtype=np.int64)
    c = c.reshape(len(host_ns), -1) if c.size else c.reshape(len(host_ns), 0)
    huge = (c > MAX_ABS_COUNT) | (c < -MAX_ABS_COUNT)
    problems = _first(
        f"{key}/counts", huge, "a count beyond ±2**53 is not a cumulative count (INT64_MIN?)"
    )
    cf = np.where(huge, 0, c).astype(np.float64)
    dt = np.maximum(np.diff(np.asarray(host_ns, np.float64)) / 1e9, MIN_STEP_S)
    step = np.abs(np.diff(cf, axis=0))
    fast = np.zeros(c.shape, bool)
    fast[1:] = (step > MAX_COUNTS_PER_S * dt[:, None]) | (
        _wrap_shaped(cf, step) & (step > WRAP_COUNTS_PER_S * dt[:, None]))
    fast[1:] &= ~(huge[1:] | huge[:-1])
    if fast.any():
        r, k = (int(v) for v in np.argwhere(fast)[0])
        jump = int(c[r, k]) - int(c[r - 1, k])
        bits = [b for b in (16, 32) if abs(abs(jump) - 2**b) < 2**b // 16]
        wrap = f" (a {bits[0]}-bit counter wrapping?)" if bits else ""
        limit = MAX_COUNTS_PER_S if abs(jump) > MAX_COUNTS_PER_S * dt[r - 1] else WRAP_COUNTS_PER_S
        text = (f"counter c{k} jumps by {jump} in {dt[r - 1]:.3g} s, faster than "
                f"{limit:g} counts/s{wrap}; counts must be cumulative and unwrapped")
        problems += _first(f"{key}/counts", fast, text)
    return problems, huge | fast


def _wrap_shaped(cf: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Which steps of the counts ``cf`` (float, n × N; ``step`` their |diff|) look like a
    16- or 32-bit counter's wrap: within 2**b/16 of 2**b, both counts in [-2**(b-1), 2**b)."""
    out = np.zeros(step.shape, bool)
    for b in (16, 32):
        inside = (cf >= -(2.0 ** (b - 1))) & (cf < 2.0**b)
        out |= (np.abs(step - 2.0**b) < 2.0**b / 16) & inside[1:] & inside[:-1]
    return out


def lidar_problems(key: str, t: LidarTurns) -> tuple[list[Problem], np.ndarray]:
    """Problems of lidar turns and the turns that hold them (``key``: ``lidar/NAME``).

    Angles finite in [0, 2π) rad; ranges ``nan``, ``inf`` or finite in [0,
    :data:`MAX_RANGE_M`] m; point and turn stamps possible, turn stamps never stepping
    backwards; reported speeds ``nan`` or in [0, :data:`MAX_SPEED_HZ`] Hz.
    """
    angle_bad = ~((t.angle >= 0) & (t.angle < _TWO_PI + 1e-6))
    problems = _first(f"{key}/angle", angle_bad, "angle is not finite in [0, 2π) rad")
    r = t.range
    range_bad = ~(np.isnan(r) | np.isposinf(r) | ((r >= 0) & (r <= MAX_RANGE_M)))
    problems += _first(f"{key}/range", range_bad, f"range is negative or beyond {MAX_RANGE_M:g} m")
    pt, pt_bad = stamp_problems(f"{key}/t_ns", t.t_ns)
    problems += pt
    first, first_bad = stamp_problems(f"{key}/turns.t_first_ns", t.t_first_ns)
    problems += first
    order, late = order_problems(
        f"{key}/turns.t_first_ns", t.t_first_ns, strict=False, skip=first_bad
    )
    problems += order
    speed = t.speed_hz
    speed_bad = ~(np.isnan(speed) | ((speed >= 0) & (speed <= MAX_SPEED_HZ)))
    problems += _first(f"{key}/turns.speed_hz", speed_bad, "speed is not nan or in [0, 1000] Hz")
    point_bad = angle_bad | range_bad | pt_bad
    turn_of = np.repeat(np.arange(t.n_turns), t.count)
    bad_turns = np.zeros(t.n_turns, bool)
    bad_turns[turn_of[point_bad]] = True
    return problems, bad_turns | first_bad | late | speed_bad


def _problems(
    key: str, batch: PoseBatch | EncoderBatch | LidarTurns
) -> tuple[list[Problem], np.ndarray]:
    if isinstance(batch, PoseBatch):
        return pose_problems(key, batch)
    if isinstance(batch, EncoderBatch):
        return encoder_problems(key, batch)
    return lidar_problems(key, batch)


def batch_problems(key: str, batch: PoseBatch | EncoderBatch | LidarTurns) -> list[Problem]:
    """The problems of any batch (:func:`pose_problems`, :func:`encoder_problems`,
    :func:`lidar_problems`)."""
    return _problems(key, batch)[0]


# ---------------------------------------------------------------- the file's layout


def _column_shape(kind: str, col: str, ds: h5py.Dataset, n_counts: object) -> str:
    """Why ``ds`` has the wrong shape for column ``col`` ("" when it is right)."""
    if col in ROW_SHAPE:
        row = ROW_SHAPE[col]
        ok = ds.shape[1:] == row
        return "" if ok else f"shape {ds.shape}, expected (n, {', '.join(map(str, row))})"
    if kind == "encoder" and col == "counts":
        if ds.ndim != 2:
            return f"shape {ds.shape}, expected (n, counters)"
        if isinstance(n_counts, int | np.integer) and ds.shape[1] != int(n_counts):
            return f"{ds.shape[1]} counters, the stream's n_counts says {int(n_counts)}"
        return ""
    return "" if ds.ndim == 1 else f"shape {ds.shape}, expected one row per sample"


def _links(group: h5py.Group, prefix: str) -> tuple[list[str], list[Problem]]:
    """Names in ``group`` that are hard links; a soft or external link is a problem
    (it can point anywhere, itself included)."""
    import h5py

    names, problems = [], []
    for name in group:
        link = group.get(name, getlink=True)
        if isinstance(link, h5py.HardLink):
            names.append(name)
        else:
            kind = "an external" if isinstance(link, h5py.ExternalLink) else "a soft"
            problems.append(Problem(f"{prefix}{name}", f"{kind} link, not a stream"))
    return names, problems


def structure_problems(f: h5py.File) -> list[Problem]:
    """Every departure of ``f``'s layout from the format (``docs/FORMAT.md``): a dataset
    missing, not a dataset, of the wrong dtype or shape, or declaring more rows than the
    file holds; a stream that is not a group or is a link; an attribute a reader uses of
    the wrong type or value. Column values are not read."""
    import h5py

    problems: list[Problem] = []
    root, links = _links(f, "")
    problems += links
    if "events" not in root:
        problems.append(Problem("events", "missing"))
    elif not isinstance(f["events"], h5py.Dataset):
        problems.append(Problem("events", "not a dataset"))
    elif (e := f["events"]).dtype != EVENT_DTYPE or e.ndim != 1:
        text = f"dtype {e.dtype} shape {e.shape}, expected one row of {EVENT_DTYPE} per event"
        problems.append(Problem("events", text))
    if "_status" in root:
        status = f["_status"]
        if not isinstance(status, h5py.Dataset) or status.shape != (1,) or status.dtype != "u1":
            problems.append(Problem("_status", "not one uint8 status value"))
        elif (value := int(status[0])) not in set(FileStatus):
            states = "0 writing, 1 closed, 2 recovered"
            problems.append(Problem("_status", f"{value} is no status ({states})"))
    problems += _attr_problems("", f.attrs, _ROOT_ATTRS)
    for kind, group_name in GROUPS.items():
        if group_name not in root:
            problems.append(Problem(group_name, "missing (every session has the group)"))
            continue
        group = f[group_name]
        if not isinstance(group, h5py.Group):
            problems.append(Problem(group_name, "not a group"))
            continue
        names, links = _links(group, f"{group_name}/")
        problems += links
        for name in names:
            problems += _stream_structure(kind, f"{group_name}/{name}", group[name])
    return problems + _oversized(f)


def _is_json(v: Any) -> bool:
    import json

    try:
        json.loads(v)
    except (TypeError, ValueError):
        return False
    return True


def _is_mount(v: Any) -> bool:
    a = np.asarray(v)
    return a.shape == (3,) and a.dtype.kind in "iuf" and bool(np.isfinite(a).all())


def _is_text(v: Any) -> bool:
    """UTF-8 text (h5py hands undecodable bytes over as lone surrogates)."""
    if not isinstance(v, str | bytes):
        return False
    try:
        v.decode("utf-8") if isinstance(v, bytes) else v.encode("utf-8")
    except UnicodeError:
        return False
    return True


def _is_names(v: Any) -> bool:
    return isinstance(v, np.ndarray) and v.ndim == 1 and all(_is_text(x) for x in v.tolist())


def _is_polygon(v: Any) -> bool:
    a = np.asarray(v)
    return a.size == 0 or (a.ndim == 2 and a.shape[1] == 2 and a.dtype.kind in "iuf"
                           and bool(np.isfinite(a).all()))  # fmt: skip


_TEXT = (_is_text, "UTF-8 text")
_ROOT_ATTRS = {
    **dict.fromkeys(
        ("format", "software_version", "label", "config_text", "created_utc", "scenario",
         "hostname", "note", "robot", "recorded_by", "recovered_utc"),
        _TEXT,
    ),
    **dict.fromkeys(("wall_clock_anchor_ns", "monotonic_anchor_ns", "sim_t0_ns"), INT),
    **dict.fromkeys(("seed", "campaign_session"), COUNT),
    "simulated": (FLAG[0], "a boolean"),
    "powerup_order": (_is_names, "a list of device names"),
    "footprint_m": (_is_polygon, "(x, y) vertices in m"),
    "duration_s": (NONNEG[0], "a finite duration ≥ 0 s"),
    "requested_duration_s": (lambda v: POSITIVE[0](v) or (REAL[0](v) and v == -1), "> 0 s or -1"),
    "devices_json": (_is_json, "JSON text"),
    "bringup_json": (_is_json, "JSON text"),
}
"""Root attributes a reader uses: name → (test, what it must be)."""

_STREAM_ATTRS = {
    "n_counts": (lambda v: COUNT[0](v) and v >= 1, "an integer ≥ 1"),
    "kind": _TEXT,
    "mount_xy_yaw": (_is_mount, "three finite numbers (m, m, rad)"),
    "counter_bits": (lambda v: COUNT[0](v) and 1 <= v <= 64, "an integer 1..64"),
    "clock_nominal_slope": POSITIVE,
    "rate_hz": (POSITIVE[0], "a finite rate > 0 Hz"),
}
"""Stream attributes a reader uses: name → (test, what it must be)."""


def _attr_problems(key: str, attrs: Any, spec: dict[str, tuple[Any, str]]) -> list[Problem]:
    """A problem for each attribute of ``spec`` present in ``attrs`` that fails its test."""
    problems = []
    for name, (test, what) in spec.items():
        if name in attrs and not test(value := attrs[name]):
            plain = value.tolist() if isinstance(value, np.ndarray | np.generic) else value
            shown = repr(plain)[:60]
            problems.append(Problem(key, f"attribute {name!r} is {shown}, not {what}"))
    return problems


_SLACK_BYTES = 2**20


def _oversized(f: h5py.File) -> list[Problem]:
    """Datasets declaring more bytes than the whole file holds (nothing is compressed):
    rows never written, which a read would allocate (a 2**40-row shape in a 1 MB file)."""
    import h5py

    size = f.id.get_filesize()
    problems: list[Problem] = []

    def visit(name: str, obj: h5py.HLObject) -> None:
        if isinstance(obj, h5py.Dataset) and obj.nbytes > size + _SLACK_BYTES:
            text = f"shape {obj.shape} declares {obj.nbytes} bytes, the whole file holds {size}"
            problems.append(Problem(name, f"{text}: rows that were never written"))

    f.visititems(visit)
    return problems


def _stream_structure(kind: str, key: str, g: h5py.HLObject) -> list[Problem]:
    import h5py

    if not isinstance(g, h5py.Group):
        return [Problem(key, "not a group")]
    problems: list[Problem] = []
    cols, links = _links(g, f"{key}/")
    columns = STREAM_COLUMNS[kind]
    problems += [p for p in links if p.dataset.rsplit("/", 1)[-1] in columns]
    for col, dtype in {**columns, **OPTIONAL_COLUMNS.get(kind, {})}.items():
        where = f"{key}/{col}"
        if col not in cols:
            if col in columns and not any(p.dataset == where for p in problems):
                problems.append(Problem(where, "missing"))
            continue
        ds = g[col]
        if not isinstance(ds, h5py.Dataset):
            problems.append(Problem(where, "not a dataset"))
        elif ds.dtype != np.dtype(dtype):
            problems.append(Problem(where, f"dtype {ds.dtype}, expected {np.dtype(dtype)}"))
        elif ds.ndim == 0:
            problems.append(Problem(where, "a scalar, expected one row per sample"))
        elif text := _column_shape(kind, col, ds, g.attrs.get("n_counts")):
            problems.append(Problem(where, text))
    return problems + _attr_problems(key, g.attrs, _STREAM_ATTRS)


# ---------------------------------------------------------------- exporting

Batch = TypeVar("Batch", PoseBatch, EncoderBatch, LidarTurns)


def _keep(batch: Batch, keep: np.ndarray) -> Batch:
    """The rows (pose samples, encoder frames, lidar turns) of ``batch`` where ``keep``;
    optional columns that are absent (None) stay absent."""
    rows = {f.name: keep for f in fields(batch)}
    if isinstance(batch, LidarTurns):  # per-point columns follow their turns
        points = np.repeat(keep, batch.count)
        rows.update(dict.fromkeys(LIDAR_POINT_FIELDS, points))
    columns = {name: getattr(batch, name) for name in rows}
    kept: dict[str, Any] = {n: None if c is None else c[rows[n]] for n, c in columns.items()}
    return type(batch)(**kept)


def exportable(
    source: str, key: str, batch: Batch, *, skip_invalid: bool = False
) -> tuple[Batch, np.ndarray]:
    """``batch`` if all its samples are possible; else refused (SessionError naming
    ``source``, the datasets and the first bad indices), or with ``skip_invalid`` without
    the impossible rows (lidar: whole turns); and the mask of the rows (pose samples,
    encoder frames, lidar turns) left out."""
    from sensorbench.errors import SessionError

    problems, bad = _problems(key, batch)
    if not problems:
        return batch, bad
    if not skip_invalid:
        shown = "; ".join(str(p) for p in problems[:3])
        raise SessionError(
            f"{source}: {shown}; nothing exported (--skip-invalid leaves the invalid samples "
            "out and counts them)"
        )
    return _keep(batch, ~bad), bad
