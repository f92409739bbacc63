"""Reading sessions: lazy, time-sliced access per stream, read-only and SWMR-safe.

Every read returns a self-consistent prefix (docs/FORMAT.md, "Consistency and recovery").
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Generic, TypeVar

import h5py
import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.atomic_output import regular_input
from sensorbench.logs.batches import EncoderBatch, Event, LidarTurns, PoseBatch
from sensorbench.logs.schema import (
    FORMAT_NAME,
    GROUPS,
    LIDAR_POINT_FIELDS,
    OPTIONAL_COLUMNS,
    SCHEMA_VERSION,
    STREAM_COLUMNS,
    FileStatus,
    attr_value,
)
from sensorbench.logs.swmr_read import open_swmr
from sensorbench.logs.update_lock import locked_by_writer
from sensorbench.logs.values import batch_problems, structure_problems

B = TypeVar("B", LidarTurns, EncoderBatch, PoseBatch)


def attrs_dict(obj: h5py.HLObject) -> dict[str, Any]:
    """HDF5 attributes as plain Python values (JSON-encoded dicts are decoded)."""
    out: dict[str, Any] = {}
    for key, value in obj.attrs.items():
        value = attr_value(value)
        if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
            with contextlib.suppress(json.JSONDecodeError):
                value = json.loads(value)
        out[key] = value
    return out


def _window(t: h5py.Dataset | np.ndarray, n: int, t0: int | None, t1: int | None) -> slice:
    """Row range of the first ``n`` rows whose time lies in ``[t0, t1)`` (times sorted)."""
    if t0 is None and t1 is None:
        return slice(0, n)
    times = np.asarray(t[:n])
    lo = 0 if t0 is None else int(np.searchsorted(times, t0, "left"))
    hi = n if t1 is None else int(np.searchsorted(times, t1, "left"))
    return slice(lo, max(lo, hi))


class _Stream:
    kind = ""

    def __init__(self, group: h5py.Group) -> None:
        self._g = group
        self.name = group.name.rsplit("/", 1)[-1]

    @property
    def attrs(self) -> dict[str, Any]:
        """The stream's attributes (units, frame, device metadata)."""
        return attrs_dict(self._g)

    def __len__(self) -> int:
        """Rows (lidar: turns, raw: chunks) of the stream's consistent data."""
        return stream_rows(self.kind, self._g)[0]


class _Rows(_Stream, Generic[B]):
    """A stream read by time window into a batch of type ``B``."""

    _time = ""  # the column a window selects on (ns)
    _batch: type[B]

    def read(
        self, t0_ns: int | None = None, t1_ns: int | None = None, *, validate: bool = True
    ) -> B:
        """The rows whose time lies in ``[t0_ns, t1_ns)`` (ns; all by default): a lidar's
        turns by their first point's host time, encoder frames by host time, pose samples
        by their time (with their covariance if stored).

        Raises:
            SessionError: ``validate`` and a row read is impossible
                (:func:`~sensorbench.logs.values.batch_problems`).
        """
        batch = self._read(t0_ns, t1_ns)
        problems = batch_problems(self._g.name.lstrip("/"), batch) if validate else []
        if problems:
            path = self._g.file.filename
            raise SessionError(
                f"{path}: {'; '.join(str(p) for p in problems[:3])}; the data cannot be used "
                f"as stored (`sensorbench check {path}` lists every problem)"
            )
        return batch

    def _read(self, t0_ns: int | None, t1_ns: int | None) -> B:
        sel = _window(self._g[self._time], len(self), t0_ns, t1_ns)
        return self._batch(**{c: self._g[c][sel] for c in columns_of(self.kind, self._g)})


class LidarStream(_Rows[LidarTurns]):
    """One lidar's turns in a session."""

    kind = "lidar"

    @property
    def n_turns(self) -> int:
        """Number of complete turns stored."""
        return len(self)

    @property
    def n_points(self) -> int:
        """Number of points belonging to stored turns."""
        index = self.read_index()
        return int(index["offset"][-1] + index["count"][-1]) if len(index) else 0

    def read_index(self) -> np.ndarray:
        """The per-turn index: offset, count, t_first_ns, device_ns, speed_hz, flags."""
        return self._g["turns"][: self.n_turns]

    def _read(self, t0_ns: int | None, t1_ns: int | None) -> LidarTurns:
        index = self.read_index()
        sel = _window(index["t_first_ns"], len(index), t0_ns, t1_ns)
        index = index[sel]
        if len(index) == 0:
            return LidarTurns.empty()
        start = int(index["offset"][0])
        stop = int(index["offset"][-1] + index["count"][-1])
        turns = {c: index[c] for c in ("t_first_ns", "device_ns", "speed_hz", "count", "flags")}
        return LidarTurns(**turns, **{c: self._g[c][start:stop] for c in LIDAR_POINT_FIELDS})


class RawStream(_Stream):
    """The raw bytes received from one serial device."""

    kind = "raw"

    def _chunks(self) -> np.ndarray:
        return self._g["chunks"][: len(self)]

    @property
    def chunk_times_ns(self) -> np.ndarray:
        """Host receive time of each chunk (ns)."""
        return self._chunks()["t_ns"]

    @property
    def n_bytes(self) -> int:
        """Bytes stored in complete chunks."""
        chunks = self._chunks()
        return int(chunks["offset"][-1] + chunks["length"][-1]) if len(chunks) else 0

    def read_bytes(self) -> bytes:
        """Every stored byte, in receive order."""
        return self._g["data"][: self.n_bytes].tobytes()

    def iter_chunks(self) -> Iterator[tuple[int, bytes]]:
        """(host receive time ns, bytes) for each chunk as it was received."""
        chunks = self._chunks()
        data = self._g["data"][: self.n_bytes]
        for t, off, length in zip(chunks["t_ns"], chunks["offset"], chunks["length"], strict=True):
            yield int(t), data[off : off + length].tobytes()


class EncoderStream(_Rows[EncoderBatch]):
    """Encoder frames (pods, optional IMU yaw)."""

    kind = "encoder"
    _time = "host_ns"
    _batch = EncoderBatch

    @property
    def n_counts(self) -> int:
        """Counters per frame."""
        return int(self._g["counts"].shape[1])


class PoseStream(_Rows[PoseBatch]):
    """Pose samples (mocap, pose sensor, estimate)."""

    kind = "pose"
    _time = "t_ns"
    _batch = PoseBatch

    @property
    def has_covariance(self) -> bool:
        """True when the stream stores each sample's pose covariance (6×6, ROS order)."""
        return "covariance" in self._g


def _spans(offset: np.ndarray, length: np.ndarray, available: int) -> tuple[int, int]:
    """(leading index rows whose spans follow each other from 0 within ``available``
    items, the items they use): a damaged offset ends the consistent rows."""
    length = length.astype(np.int64)
    ends = np.cumsum(length)
    ok = (offset == ends - length) & (length >= 0) & (ends <= available)
    n = int(ok.size if ok.all() else np.argmin(ok))
    return n, int(ends[n - 1]) if n else 0


def stream_rows(kind: str, g: h5py.Group) -> tuple[int, int]:
    """(consistent rows, rows present in the longest column) of one stream."""
    if kind in ("lidar", "raw"):  # an index of spans over flat items (points, bytes)
        lidar = kind == "lidar"
        idx = g["turns" if lidar else "chunks"][:]
        items = [g[c].shape[0] for c in (LIDAR_POINT_FIELDS if lidar else ("data",))]
        n, used = _spans(idx["offset"], idx["count" if lidar else "length"], min(items))
        return n, len(idx) - n + (max(items) - used)
    lengths = [g[c].shape[0] for c in columns_of(kind, g)]
    return min(lengths), max(lengths) - min(lengths)


def columns_of(kind: str, g: h5py.Group) -> list[str]:
    """The stream's own datasets and the optional ones it has."""
    own = [str(c) for c in STREAM_COLUMNS[kind]]
    return own + [c for c in OPTIONAL_COLUMNS.get(kind, {}) if c in g]


def _superblock_eof(head: bytes) -> int | None:
    """End-of-file address recorded in an HDF5 superblock at offset 0 (bytes), or None."""
    version = head[8]
    offset = {0: 40, 1: 44, 2: 28, 3: 28}.get(version)
    if offset is None or len(head) < offset + 8:
        return None
    size_of_offsets = head[13] if version in (0, 1) else head[9]
    if size_of_offsets != 8:
        return None
    return int.from_bytes(head[offset : offset + 8], "little")


SUPERBLOCK_WRITE_ACCESS = 0x1
"""Superblock (v2/v3) consistency flag: the file is open for writing (set until closed)."""
SUPERBLOCK_SWMR_WRITE = 0x4
"""Superblock (v2/v3) consistency flag: the file is open for SWMR writing."""


def superblock_flags(head: bytes) -> int | None:
    """File-consistency flags of a v2/v3 superblock at offset 0, or None for older ones.

    HDF5 sets them when a writer opens the file and clears them when it closes it,
    so a set flag means "open for writing now, or its writer died"."""
    if len(head) < 12 or head[8] not in (2, 3):
        return None
    return head[11]


def _unopenable(path: Path, head: bytes, exc: OSError) -> str:
    """Why HDF5 refused to open ``path``, in words the user can act on."""
    if locked_by_writer(path):
        return (
            f"{path}: in use: another process has it open for writing; "
            "try again when it has finished"
        )
    flags = superblock_flags(head) or 0
    if flags & SUPERBLOCK_WRITE_ACCESS and not flags & SUPERBLOCK_SWMR_WRITE:
        return (
            f"{path}: its writer died while the file was open for writing (not SWMR), so "
            "HDF5 refuses to open it; on a copy, `h5clear -s COPY` (hdf5-tools) clears the "
            "mark and `sensorbench check COPY` then validates what it holds"
        )
    return f"{path}: cannot be opened as HDF5 ({exc}); the file is truncated or corrupt"


def layout_error(path: Path, f: h5py.File) -> SessionError | None:
    """The error for a file whose layout departs from the format (None when it does not):
    names the file and every bad dataset (:func:`~sensorbench.logs.values.structure_problems`)."""
    problems = structure_problems(f)
    if not problems:
        return None
    shown = "; ".join(str(p) for p in problems[:10])
    more = f" and {len(problems) - 10} more" if len(problems) > 10 else ""
    return SessionError(
        f"{path}: the file is damaged: {shown}{more} (`sensorbench check {path}` lists "
        "every problem)"
    )


def _refuse_dangling(path: Path, f: h5py.File) -> None:
    """Refuse a file marked closed with rows past its consistent data (a damaged index
    or a write that failed): a reader would take the prefix without a word."""
    if "_status" not in f or int(f["_status"][0]) == FileStatus.WRITING:
        return
    for kind, group in GROUPS.items():
        for name in f[group]:
            _, dangling = stream_rows(kind, f[f"{group}/{name}"])
            if dangling:
                raise SessionError(
                    f"{path}: /{group}/{name}: {dangling} rows beyond the consistent data of "
                    f"a closed file; `sensorbench check --recover {path}` keeps the consistent "
                    "ones"
                )


def _root_attr(path: Path, f: h5py.File, name: str, default: Any) -> Any:
    """The file's attribute ``name`` (``default`` when it has none); SessionError when it
    is there but cannot be read (a damaged file)."""
    try:
        if name not in f.attrs:
            return default
        return f.attrs[name]
    except (KeyError, OSError, RuntimeError) as exc:
        detail = exc.args[0] if exc.args else repr(exc)
        raise SessionError(f"{path}: the file is corrupt ({detail}); it cannot be read") from exc


def open_h5(
    path: str | os.PathLike[str], *, check_layout: bool = True, dangling_ok: bool = False
) -> h5py.File:
    """Open a session read-only (SWMR-safe), with clear errors for foreign or broken files.

    Args:
        check_layout: refuse a file whose layout departs from the format
            (:func:`layout_error`); ``check`` opens with False to report it instead.
        dangling_ok: open a file marked closed with rows beyond its consistent data
            (the recovery does, to keep the consistent ones); refused otherwise.
    """
    path = regular_input(path)
    with open(path, "rb") as fh:
        head = fh.read(64)
    if head[:8] != b"\x89HDF\r\n\x1a\n":
        raise SessionError(f"{path}: not an HDF5 file, so not a sensorbench session")
    end = _superblock_eof(head)
    size = path.stat().st_size
    if end is None or size < end:
        # HDF5 can hang reading metadata past the end of a truncated file: refuse first.
        raise SessionError(
            f"{path}: the file is truncated or corrupt ({size} bytes, its header says {end}); "
            "it cannot be read"
        )
    # SWMR reading retries a failed metadata checksum (a writer may be in the middle of a
    # flush): only a file its writer opened for SWMR writing is read that way.
    swmr = bool((superblock_flags(head) or 0) & SUPERBLOCK_SWMR_WRITE)
    try:
        f = open_swmr(path) if swmr else h5py.File(path, "r")
    except OSError as exc:
        if not swmr:  # the plain open failed: trying it again changes nothing
            raise SessionError(_unopenable(path, head, exc)) from exc
        try:
            f = h5py.File(path, "r")
        except OSError as again:
            raise SessionError(_unopenable(path, head, again)) from again
    try:
        fmt = attr_value(_root_attr(path, f, "format", ""))
        version = attr_value(_root_attr(path, f, "schema_version", -1))
        if fmt != FORMAT_NAME:
            raise SessionError(f"{path}: an HDF5 file, but not a sensorbench session")
        if not isinstance(version, int) or isinstance(version, bool):
            raise SessionError(f"{path}: schema_version {version!r} is not an integer")
        if version > SCHEMA_VERSION:
            raise SessionError(
                f"{path}: session schema version {version} is newer than this software "
                f"understands ({SCHEMA_VERSION}); upgrade sensorbench"
            )
        error = layout_error(path, f) if check_layout else None
        if error is not None:
            raise error
        if check_layout and not dangling_ok:
            _refuse_dangling(path, f)
    except BaseException:
        f.close()
        raise
    return f


TRUTH_ROWS = {
    "t_ns": (("x_y_yaw", 3), ("twist_body", 3)),
    "reloc_t_ns": (("reloc_offset", 6), ("reloc_wrong", 0)),
}
"""Truth datasets that share rows (docs/SIMULATION.md): per times dataset (int64 ns, never
decreasing), the datasets of its group with one row per time and their widths (0: (N,))."""


def truth_problems(g: h5py.Group, times: str) -> list[str]:
    """Why the truth group ``g``'s dataset ``times`` and its row partners
    (:data:`TRUTH_ROWS`) cannot be used together: missing, wrong shape or type, a row
    count other than the times', times that decrease, non-finite values."""
    where = f"{g.name}/"
    if not isinstance(g.get(times), h5py.Dataset):
        return [f"{where}{times}: missing beside {', '.join(sorted(g.keys()))}"]
    t = g[times][()]
    problems = []
    if t.ndim != 1 or t.dtype.kind != "i":
        return [f"{where}{times}: must be (N,) integer ns, got {t.shape} {t.dtype}"]
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        problems.append(f"{where}{times}: times decrease at row {int(back[0]) + 1}")
    for name, width in TRUTH_ROWS[times]:
        ds = g.get(name)
        if ds is None:
            continue
        shape = (t.size, width) if width else (t.size,)
        if not isinstance(ds, h5py.Dataset) or ds.shape != shape or ds.dtype.kind not in "biuf":
            got = f"{ds.shape} {ds.dtype}" if isinstance(ds, h5py.Dataset) else "a group"
            problems.append(
                f"{where}{name}: must be {shape} numbers, a row per {times} row, got {got}")
        elif not np.all(np.isfinite(ds[()])):
            problems.append(f"{where}{name}: holds nan or inf")
    return problems


class Session:
    """A session file opened for reading.

    Raises:
        SessionError: missing, foreign, truncated or newer-schema file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.h5 = open_h5(self.path)
        """The underlying h5py file (read-only)."""

    def close(self) -> None:
        self.h5.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def attrs(self) -> dict[str, Any]:
        return attrs_dict(self.h5)

    @property
    def label(self) -> str:
        """The session's label (e.g. ``square``)."""
        return str(attr_value(self.h5.attrs.get("label", "")))

    @property
    def config_text(self) -> str:
        """The robot configuration text recorded with the session."""
        return str(attr_value(self.h5.attrs.get("config_text", "")))

    @property
    def status(self) -> FileStatus:
        """WRITING (writer open or killed), CLOSED or RECOVERED."""
        return (
            FileStatus(int(self.h5["_status"][0])) if "_status" in self.h5 else FileStatus.WRITING
        )

    def _names(self, kind: str) -> list[str]:
        group = self.h5.get(GROUPS[kind])
        return sorted(group.keys()) if group is not None else []

    def lidar_names(self) -> list[str]:
        return self._names("lidar")

    def raw_names(self) -> list[str]:
        return self._names("raw")

    def encoder_names(self) -> list[str]:
        return self._names("encoder")

    def pose_names(self) -> list[str]:
        return self._names("pose")

    def _get(self, kind: str, name: str, cls: type[_Stream]) -> Any:
        group = self.h5.get(f"{GROUPS[kind]}/{name}")
        if group is None:
            have = ", ".join(self._names(kind)) or "none"
            raise SessionError(f"{self.path}: no {kind} stream {name!r} (have: {have})")
        return cls(group)

    def lidar(self, name: str) -> LidarStream:
        return self._get("lidar", name, LidarStream)

    def raw(self, name: str) -> RawStream:
        return self._get("raw", name, RawStream)

    def encoder(self, name: str) -> EncoderStream:
        return self._get("encoder", name, EncoderStream)

    def encoder_or_only(self) -> EncoderStream:
        """The session's first encoder stream.

        Raises:
            SessionError: the session has no encoder stream.
        """
        names = self.encoder_names()
        if not names:
            raise SessionError(f"{self.path}: no encoder stream; record the pods during the drive")
        return self.encoder(names[0])

    def pose(self, name: str) -> PoseStream:
        return self._get("pose", name, PoseStream)

    def events(self) -> list[Event]:
        """Every event, in the order written."""
        rows = self.h5["events"][:]
        return [
            Event(int(r["t_ns"]), *(attr_value(r[k]) for k in ("source", "kind", "message")))
            for r in rows
        ]

    def truth_names(self) -> list[str]:
        """Paths of every dataset under ``/truth``."""
        names: list[str] = []
        if "truth" not in self.h5:
            return names
        self.h5["truth"].visititems(
            lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None
        )
        return sorted(names)

    def truth(self, path: str) -> np.ndarray:
        """The truth dataset at ``/truth/<path>``."""
        ds = self.h5.get(f"truth/{path}")
        if not isinstance(ds, h5py.Dataset):
            raise SessionError(f"{self.path}: no truth dataset {path!r}")
        return ds[()]

    def truth_rows(self, group: str, times: str, *needed: str) -> dict[str, np.ndarray]:
        """The truth datasets of ``/truth/<group>`` that share the rows of ``times``
        (:data:`TRUTH_ROWS`), by name, ``times`` included.

        Raises:
            SessionError: no such group, one of ``needed`` missing, or
                :func:`truth_problems` found one (a damaged file)."""
        g = self.h5.get(f"truth/{group}")
        if not isinstance(g, h5py.Group):
            raise SessionError(f"{self.path}: no truth group {group!r}")
        problems = truth_problems(g, times)
        problems += [f"{g.name}/{n}: missing" for n in needed if n not in g]
        if problems:
            raise SessionError(f"{self.path}: /truth is damaged: {problems[0]}")
        names = [times, *(n for n, _ in TRUTH_ROWS[times] if n in g)]
        return {n: g[n][()] for n in names}

    def truth_attrs(self, path: str = "") -> dict[str, Any]:
        """Attributes of ``/truth`` or of a truth dataset/group."""
        obj = self.h5.get("truth" if not path else f"truth/{path}")
        if obj is None:
            raise SessionError(f"{self.path}: no truth entry {path!r}")
        return attrs_dict(obj)
