"""Integrity checks and recovery of sessions whose writer died (docs/FORMAT.md,
"Consistency and recovery"); a file another process writes is never touched."""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

from sensorbench.errors import OutputError, SessionError
from sensorbench.logs.atomic_output import disk_error, link_no_clobber, same_file, temp_name
from sensorbench.logs.batches import EncoderBatch, LidarTurns
from sensorbench.logs.h5_output import guarded_h5
from sensorbench.logs.reader import (
    SUPERBLOCK_SWMR_WRITE,
    SUPERBLOCK_WRITE_ACCESS,
    TRUTH_ROWS,
    EncoderStream,
    LidarStream,
    PoseStream,
    RawStream,
    columns_of,
    open_h5,
    stream_rows,
    superblock_flags,
    truth_problems,
)
from sensorbench.logs.schema import GROUPS, LIDAR_POINT_FIELDS, FileStatus
from sensorbench.logs.update_lock import UpdateLock, locked_by_writer, writer_alive, writer_of
from sensorbench.logs.values import (
    batch_problems,
    order_problems,
    stamp_problems,
    structure_problems,
)

_REQUIRED_ROOT_ATTRS = ("format", "schema_version", "software_version", "wall_clock_anchor_ns",
                        "monotonic_anchor_ns", "label", "config_text")  # fmt: skip


@dataclass
class CheckReport:
    """Outcome of :func:`check_session`.

    ``errors`` are violations of the format (the file is unusable as written);
    ``warnings`` are oddities worth a look (per-point time reversals, unclosed file).
    ``consistent_rows`` maps ``kind/name`` to the rows a reader will return.
    ``in_use`` is empty, or says which live process is writing the file (then it
    must not be recovered); ``writer_unknown`` is set when the writer ran on
    another host, so whether it still runs cannot be told from here.
    ``point_time_reversals`` maps each lidar stream whose per-point ``t_ns`` steps
    backwards to ``{"count": steps, "points": points, "max_s": largest step (s)}``.
    """

    path: Path
    status: FileStatus
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    consistent_rows: dict[str, int] = field(default_factory=dict)
    dangling_rows: dict[str, int] = field(default_factory=dict)
    in_use: str = ""
    writer_unknown: str = ""
    point_time_reversals: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the file has no format errors and was closed (or recovered)."""
        return not self.errors and self.status != FileStatus.WRITING

    @property
    def repairable(self) -> bool:
        """True when :func:`recover_session` gives a valid file: an unclosed file without
        format errors, or a closed one whose only errors are rows past its consistent
        data (a write that failed, e.g. on a full disk)."""
        if self.status == FileStatus.WRITING:
            return not self.errors
        return bool(self.dangling_rows) and len(self.errors) == len(self.dangling_rows)


def check_session(path: str | os.PathLike[str]) -> CheckReport:
    """Validate a session file against the schema; never modifies it (a file another
    process holds open for writing is not even opened: the report says it is in use)."""
    path = Path(path)
    if path.is_file() and locked_by_writer(path):
        report = CheckReport(path, FileStatus.WRITING)
        report.in_use = "another process has it open for writing (HDF5 file lock)"
        return report
    with open_h5(path, check_layout=False) as f:
        layout = structure_problems(f)
        damaged = {p.dataset for p in layout}
        sound_status = "_status" in f and "_status" not in damaged
        status = FileStatus(int(f["_status"][0])) if sound_status else FileStatus.WRITING
        report = CheckReport(path, status)
        if status == FileStatus.WRITING and sound_status:
            _judge_writer(report, f["_status"].attrs)
        missing = [key for key in _REQUIRED_ROOT_ATTRS if key not in f.attrs]
        report.errors += [f"root attribute {key!r} missing" for key in missing]
        if "_status" not in f:
            report.errors.append("_status: missing")
        report.errors += [str(p) for p in layout]
        if "events" not in damaged:
            report.errors += [str(p) for p in stamp_problems("events/t_ns", f["events"]["t_ns"])[0]]
            report.warnings += _count_losses(f["events"])
        for kind, group_name in GROUPS.items():
            if group_name in damaged or not isinstance(f.get(group_name), h5py.Group):
                continue
            for name in f[group_name]:
                key = f"{group_name}/{name}"
                if not any(d == key or d.startswith(key + "/") for d in damaged):
                    _check_stream(report, kind, key, f[key])
        if isinstance(f.get("truth"), h5py.Group):
            report.errors += _truth_problems(f["truth"], damaged)
        if status == FileStatus.WRITING and not report.in_use:
            report.warnings.append(
                "the file was not closed: its writer was killed or failed; "
                "`sensorbench check --recover` rebuilds it"
            )
    return report


def _truth_problems(truth: h5py.Group, damaged: set[str]) -> list[str]:
    """:func:`truth_problems` of every truth group holding one of :data:`TRUTH_ROWS`'s
    datasets (a partner without its times too) whose layout is sound (``damaged``: the
    datasets the layout check named, never read)."""
    groups: list[h5py.Group] = [truth]
    truth.visititems(lambda _, obj: groups.append(obj) if isinstance(obj, h5py.Group) else None)
    out = []
    for g in groups:
        if any(d.startswith(g.name.lstrip("/") + "/") for d in damaged):
            continue
        for times, partners in TRUTH_ROWS.items():
            if times in g or any(n in g for n, _ in partners):
                out += truth_problems(g, times)
    return out


def _count_losses(events: h5py.Dataset) -> list[str]:
    """A warning per device whose own count of lost counts (``count_loss`` events: the
    pod MCU's error block) says counts are missing from its stream."""
    rows = events[:]
    lost = [
        s.decode() if isinstance(s, bytes) else str(s)
        for s, k in zip(rows["source"], rows["kind"], strict=True)
        if k in (b"count_loss", "count_loss")
    ]
    return [
        f"{name}: the device reported counts it lost in {lost.count(name)} reads "
        "(count_loss events): fits and replays over those intervals are not exact"
        for name in sorted(set(lost))
    ]


def refuse_unusable(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], command: str
) -> None:
    """Refuse (SessionError) to let ``command`` read a session (or any of ``paths``) that
    is being written or whose writer died (``check --recover`` first), or count one
    recording twice: a session given twice, or a copy of it (the same host and clock
    anchors, not two pieces of a split). Each file is opened once."""
    seen: dict[tuple, Path] = {}
    for one in [paths] if isinstance(paths, (str, os.PathLike)) else paths:
        path = Path(one)
        key = _closed_recording(path, command)
        for (k, p), first in seen.items():
            if k == key[0] and (p == key[1] or 0 in (p, key[1])):
                what = (f"{path} is given twice" if same_file(first, path) else
                        f"{first} and {path} are one recording (the same host and clock "
                        "anchors: a copy, or a piece of the other)")  # fmt: skip
                raise SessionError(f"{what}; {command} counts each recording once")
        seen[key] = path


def _closed_recording(path: Path, command: str) -> tuple[tuple, int]:
    """The recording ``path`` holds (host, monotonic and wall clock anchors) and its split
    piece (0: whole); SessionError unless it is a closed session nobody writes."""
    writer = writer_of(path)
    if writer:
        raise SessionError(
            f"{path} is being written ({writer}); {command} reads a closed session: "
            "run it when the recording has stopped"
        )
    with open_h5(path) as f:
        closed = "_status" in f and int(f["_status"][0]) != FileStatus.WRITING
        a = f.attrs
        key = (str(a.get("hostname", "")), int(a.get("monotonic_anchor_ns", 0)),
               int(a.get("wall_clock_anchor_ns", 0)))  # fmt: skip
        piece = int(a.get("split_piece", 0))
    if not closed:
        raise SessionError(
            f"{path} was not closed (its writer was killed or failed); {command} reads a "
            f"closed session: `sensorbench check {path}` recovers it"
        )
    return key, piece


def _judge_writer(report: CheckReport, status_attrs: h5py.AttributeManager) -> None:
    """Set ``in_use``/``writer_unknown`` for an unclosed file from its flags and writer record."""
    with open(report.path, "rb") as fh:
        flags = superblock_flags(fh.read(64))
    if flags is not None and not flags & (SUPERBLOCK_WRITE_ACCESS | SUPERBLOCK_SWMR_WRITE):
        return  # HDF5 closed the file: whatever wrote it has let go of it
    state = writer_alive(status_attrs)
    if state.alive:
        report.in_use = f"its writer is running ({state.text})"
    elif state.alive is None:
        report.writer_unknown = (
            f"its writer ({state.text}) ran on another host; check cannot see whether it still runs"
        )


def _check_stream(report: CheckReport, kind: str, key: str, g: h5py.Group) -> None:
    """Rows, dangling rows and every value of one stream whose layout is sound."""
    n, dangling = stream_rows(kind, g)
    report.consistent_rows[key] = n
    closed = report.status != FileStatus.WRITING
    if dangling:
        report.dangling_rows[key] = dangling
        if closed:
            report.errors.append(
                f"{key}: {dangling} rows beyond the consistent data in a closed file "
                f"({_lengths(kind, g)})"
            )
        else:
            report.warnings.append(f"{key}: {dangling} rows past the last consistent write")
    if kind == "raw":
        t_ns = g["chunks"][:n]["t_ns"]  # offsets contiguous up to n (stream_rows)
        problems, bad = stamp_problems(f"{key}/chunks.t_ns", t_ns)
        problems += order_problems(f"{key}/chunks.t_ns", t_ns, strict=False, skip=bad)[0]
        report.errors += [str(p) for p in problems]
        return
    if kind == "pose" and "kind" not in g.attrs:
        report.errors.append(f"{key}: attribute 'kind' missing")
    batch = _STREAMS[kind](g).read(validate=False)  # the n consistent rows
    report.errors += [str(p) for p in batch_problems(key, batch)]
    if isinstance(batch, LidarTurns):
        _point_reversals(report, key, batch.t_ns)
    elif isinstance(batch, EncoderBatch):
        _repeated_frames(report, key, batch)


_STREAMS = {"lidar": LidarStream, "encoder": EncoderStream, "pose": PoseStream}


def _lengths(kind: str, g: h5py.Group) -> str:
    text = ", ".join(f"{c} {g[c].shape[0]}" for c in columns_of(kind, g))
    if kind == "lidar" and g["turns"].shape[0]:
        last = g["turns"][-1]
        text += f"; the turns end at point {int(last['offset']) + int(last['count'])}"
    return "rows: " + text


def _point_reversals(report: CheckReport, key: str, t: np.ndarray) -> None:
    """A warning (and :attr:`CheckReport.point_time_reversals`) when a lidar's per-point
    times step backwards."""
    step = np.diff(t)
    back = step < 0
    count = int(np.count_nonzero(back))
    if count:
        largest = float(-step[back].min()) / 1e9
        report.point_time_reversals[key] = {"count": count, "points": int(t.size), "max_s": largest}
        report.warnings.append(
            f"{key}/t_ns: per-point time steps backwards {count} times in {t.size} points "
            f"(largest {largest * 1e3:.3f} ms)"
        )


def _repeated_frames(report: CheckReport, key: str, batch: EncoderBatch) -> None:
    """A warning when encoder rows repeat the row before them (sequence number, device
    time and counts): a frame stored twice, which the filters' input drops."""
    same = (batch.seq[1:] == batch.seq[:-1]) & (batch.device_ns[1:] == batch.device_ns[:-1])
    same &= np.all(batch.counts[1:] == batch.counts[:-1], axis=1)
    count = int(np.count_nonzero(same))
    if count:
        report.warnings.append(
            f"{key}: {count} of {len(batch)} frames repeat the frame before them (sequence "
            f"number, device time and counts; the first at row {int(np.argmax(same)) + 1}): "
            "stored twice, dropped by replay and the fits"
        )


@dataclass
class RecoveryReport:
    """What :func:`recover_session` kept and dropped."""

    path: Path
    backup: Path
    kept_rows: dict[str, int]
    dropped_rows: dict[str, int]
    events: int


def backup_name(path: Path) -> Path:
    """The first free name of ``NAME.orig.h5``, ``NAME.orig-2.h5``, ``NAME.orig-3.h5``…"""
    tags = itertools.chain([".orig"], (f".orig-{k}" for k in itertools.count(2)))
    names = (path.with_name(path.stem + tag + path.suffix) for tag in tags)
    return next(name for name in names if not name.exists())


def recover_session(path: str | os.PathLike[str], force: bool = False) -> RecoveryReport:
    """Rebuild a session whose writer died (or closed with rows beyond its consistent
    data) under its name, keeping every consistent row; the original becomes
    :func:`backup_name`. ``force``: recover although the writer ran on another host.

    Raises:
        SessionError: the file is closed and consistent, or its writer still runs (or may).
    """
    path = Path(path)
    with UpdateLock(path):
        return _recover_locked(path, force)


def _recover_locked(path: Path, force: bool) -> RecoveryReport:
    report = check_session(path)
    if report.in_use:
        raise SessionError(f"{path} is in use: {report.in_use}; it was not touched")
    if report.status != FileStatus.WRITING and not report.dangling_rows:
        raise SessionError(f"{path} was closed cleanly; nothing to recover")
    if report.writer_unknown and not force:
        raise SessionError(
            f"{path}: {report.writer_unknown}; run check on that host, or pass --force "
            "once you know the writer has stopped"
        )
    tmp = temp_name(path)
    kept: dict[str, int] = {}
    try:
        with open_h5(path, dangling_ok=True) as src, guarded_h5(tmp, shown=path) as dst:
            dst.attrs.update(src.attrs)
            dst.attrs["recovered_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            status = dst.create_dataset("_status", data=np.array([FileStatus.RECOVERED], "u1"))
            status.attrs.update(src["_status"].attrs)
            events = src["events"][:]
            dst.create_dataset("events", data=events, maxshape=(None,), chunks=(256,))
            if "truth" in src:
                src.copy(src["truth"], dst, "truth")
            else:
                dst.create_group("truth")
            for kind, group_name in GROUPS.items():
                out_group = dst.create_group(group_name)
                for name, g in src.get(group_name, {}).items():
                    n, _ = stream_rows(kind, g)
                    kept[f"{group_name}/{name}"] = n
                    _copy_prefix(kind, g, out_group.create_group(name), n)
        bak = _keep_original(path)
        os.replace(tmp, path)
    except OSError as exc:
        raise disk_error(exc, path, "it is unchanged") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return RecoveryReport(path, bak, kept, report.dangling_rows, len(events))


def _keep_original(path: Path) -> Path:
    """Give the original a second, free name (hard link: ``path`` stays valid meanwhile)."""
    for _ in range(100):
        bak = backup_name(path)
        try:
            link_no_clobber(path, bak)
        except OutputError:
            continue  # the name was taken meanwhile: the next one
        return bak
    raise SessionError(f"{path}: no free name for the original beside it; nothing changed")


def _copy_prefix(kind: str, g: h5py.Group, out: h5py.Group, n: int) -> None:
    out.attrs.update(g.attrs)
    rows = {c: n for c in columns_of(kind, g)}
    if kind == "lidar":
        rows.update(dict.fromkeys(LIDAR_POINT_FIELDS, LidarStream(g).n_points))
    elif kind == "raw":
        rows["data"] = RawStream(g).n_bytes
    for col, count in rows.items():
        src = g[col]
        data = src[:count]
        out.create_dataset(
            col, data=data, maxshape=(None, *src.shape[1:]), chunks=src.chunks or True
        )
