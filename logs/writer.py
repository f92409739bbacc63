"""The session writer: many producer threads, one HDF5 file, nothing lost on a crash.

Producers call the ``append_*`` methods, which only validate and enqueue; one writer
thread wakes every ``flush_interval_s``, extends each dataset once and flushes
(docs/FORMAT.md, "Why this layout": SWMR, libver, no compression).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from sensorbench import __version__
from sensorbench.errors import OutputError, SessionError
from sensorbench.logs.atomic_output import PendingOutput, PendingUpdate, check_output, unchanged
from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.h5_output import (
    GuardedFile,
    NoRoomError,
    close_guarded,
    disk_error_text,
    open_guarded,
    release_room,
    reserve_room,
)
from sensorbench.logs.schema import (
    EVENT_DTYPE,
    FORMAT_NAME,
    GROUPS,
    LIBVER,
    LIDAR_POINT_FIELDS,
    POSE_KINDS,
    RAW_CHUNK_DTYPE,
    ROW_SHAPE,
    SCHEMA_VERSION,
    STREAM_COLUMNS,
    TURN_DTYPE,
    FileStatus,
    name_conflict,
)
from sensorbench.logs.update_lock import UpdateLock, writer_record

_CHUNK_ROWS = {"lidar": 32768, "raw": 65536, "encoder": 4096, "pose": 4096, "index": 1024}
"""Rows to a chunk of a stream's columns: points, bytes, frames, samples; spans of an
index (lidar ``turns``, raw ``chunks``)."""
_STOP = object()
_ROOM_MARGIN = 2**18
"""Room a live writer reserves for a flush beyond the chunks it adds: the index and
header blocks HDF5 adds (bytes; at most 6.4 KiB a flush measured over 179 flushes of
five streams)."""


def _set_attrs(obj: h5py.HLObject, attrs: dict[str, Any] | None) -> None:
    """Store ``attrs`` on ``obj``, dicts as JSON text and None as ""."""
    for key, value in (attrs or {}).items():
        text = json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
        obj.attrs[key] = "" if value is None else text


@dataclass
class _Rows:
    """What the writer keeps of one of its datasets (h5py asks HDF5 on every read; the
    writer holds its datasets, so an ``id`` stays theirs): rows stored, rows and bytes
    per chunk, the shape of a row, and the file and memory dataspaces and the memory
    type (of dtype ``mem_dtype``) its writes reuse: h5py makes each anew for every write
    otherwise, the type taking as long as the write (compound ones longer)."""

    n: int
    per_chunk: int
    chunk_bytes: int
    row_shape: tuple[int, ...]
    file_space: h5py.h5s.SpaceID
    mem_space: h5py.h5s.SpaceID
    mem_dtype: np.dtype | None = None
    mem_type: h5py.h5t.TypeID | None = None

    @classmethod
    def of(cls, ds: h5py.Dataset) -> _Rows:
        chunks = ds.chunks
        return cls(ds.shape[0], chunks[0], int(np.prod(chunks)) * ds.dtype.itemsize, ds.shape[1:],
            ds.id.get_space(), h5py.h5s.create_simple((1,)))

    def new_chunk_bytes(self, rows: int) -> int:
        """Bytes of the chunks HDF5 allocates when ``rows`` rows are added."""
        chunks = -(-(self.n + rows) // self.per_chunk) + (self.n // -self.per_chunk)
        return chunks * self.chunk_bytes

    def append(self, ds: h5py.Dataset, data: np.ndarray) -> None:
        """Store ``data`` after the rows of ``ds`` through h5py's low-level calls (its
        ``ds[n:] = data`` costs about three times as much, some 35 datasets a flush)."""
        data = np.ascontiguousarray(data)
        shape = (self.n + len(data), *self.row_shape)
        ds.id.set_extent(shape)
        space = self.file_space
        space.set_extent_simple(shape, (h5py.h5s.UNLIMITED, *self.row_shape))
        space.select_hyperslab((self.n,) + (0,) * len(self.row_shape), data.shape)
        self.mem_space.set_extent_simple(data.shape)
        if data.dtype != self.mem_dtype:
            self.mem_dtype, self.mem_type = data.dtype, h5py.h5t.py_create(data.dtype)
        ds.id.write(self.mem_space, space, data, self.mem_type)
        self.n += len(data)


def _joined(batches: list[Any], name: str) -> np.ndarray:
    """Column ``name`` of ``batches`` end to end (a lone batch's own array: batches are
    checked where they are built, so nothing is converted again)."""
    if len(batches) == 1:
        return getattr(batches[0], name)
    return np.concatenate([getattr(b, name) for b in batches])


@dataclass
class _Stream:
    kind: str
    name: str
    group: h5py.Group
    pending: list[Any] = field(default_factory=list)
    written: int = 0
    """Points (lidar) or bytes (raw) stored: where the next span starts."""
    n_counts: int = 0
    """Counters per frame of an encoder stream."""
    covariance: bool = False
    """A pose stream with a covariance column."""
    datasets: dict[str, h5py.Dataset] = field(default_factory=dict)
    """The group's datasets by name, looked up once (h5py builds a new object each time)."""

    def ds(self, name: str) -> h5py.Dataset:
        got = self.datasets.get(name)
        if got is None:
            got = self.datasets[name] = self.group[name]
        return got


class SessionWriter:
    """Write one session file from any number of threads.

    Args:
        path: the ``.h5`` file to create.
        label: what the session is (e.g. ``square``, ``static``).
        config_text: the robot configuration (TOML text) the session was recorded with.
        swmr: switch to SWMR mode at :meth:`start` (keeps the file valid if the process
            dies). Offline writers (simulation, import) may pass False, which also
            allows :meth:`set_truth` at any time.
        flush_interval_s: longest time between flushes to disk (s).
        attrs: extra root attributes (str, numbers, arrays, or dicts stored as JSON).
        overwrite: replace an existing file instead of refusing (offline writers only).

    An offline writer writes a temporary file that becomes ``path`` only when
    :meth:`close` succeeds; a live writer writes ``path`` in place (recoverable).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        label: str = "",
        config_text: str = "",
        swmr: bool = True,
        flush_interval_s: float = 0.5,
        attrs: dict[str, Any] | None = None,
        overwrite: bool = False,
    ) -> None:
        self.path = Path(path)
        if not flush_interval_s > 0:
            raise SessionError(f"flush_interval_s must be > 0 s, got {flush_interval_s}")
        self._pending: PendingOutput | None = None
        self._writing: UpdateLock | None = None
        try:
            if swmr:  # a live recording is written in place: readers and `check` find it
                check_output(self.path)
                # held for the writer's life: no --force anywhere replaces the file meanwhile
                self._writing = UpdateLock(self.path, wait_s=0.0).acquire()
            else:
                self._pending = PendingOutput(self.path, force=overwrite)
        except OutputError as exc:
            raise SessionError(str(exc)) from exc
        target = self.path if self._pending is None else self._pending.tmp
        self._idle(swmr, flush_interval_s, FileStatus.CLOSED)
        self._guard: GuardedFile | None = None
        try:
            if swmr:
                self._file = h5py.File(target, "w-", libver=LIBVER)
            else:
                self._file, self._guard = open_guarded(target, "w")
        except OSError as exc:
            if self._pending is not None:
                self._pending.discard()
            self._let_go()
            raise SessionError(f"cannot create {self.path}: {disk_error_text(exc)}") from exc
        try:
            self._lay_out(label, config_text, attrs)
        except BaseException:
            self.abort()
            raise

    def _idle(self, swmr: bool, flush_interval_s: float, final_status: FileStatus) -> None:
        """The writer's state before :meth:`start`, no stream declared."""
        self.swmr = swmr
        self.flush_interval_s = flush_interval_s
        self.error: BaseException | None = None
        self._final_status = final_status
        self._reserved_end = 0
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._rows: dict[int, _Rows] = {}  # by id of the dataset
        self._pending_events: list[tuple[int, str, str, str]] = []
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stopping = threading.Event()  # wakes the writer thread before its flush time
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    def _lay_out(self, label: str, config_text: str, attrs: dict[str, Any] | None) -> None:
        """Root attributes, ``_status`` with the writer record, ``events`` and the groups."""
        f = self._file
        wall, mono = time.time_ns(), time.monotonic_ns()
        root = {
            "format": FORMAT_NAME,
            "schema_version": SCHEMA_VERSION,
            "software_version": __version__,
            "wall_clock_anchor_ns": wall,
            "monotonic_anchor_ns": mono,
            "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall / 1e9)),
            "hostname": socket.gethostname(),
            "label": label,
            "config_text": config_text,
        }
        root.update(attrs or {})
        _set_attrs(f, root)
        self._status = f.create_dataset("_status", data=np.array([FileStatus.WRITING], "u1"))
        self._status.attrs.update(writer_record())
        self._events = self._column(f, "events", EVENT_DTYPE, 256)
        for group in (*GROUPS.values(), "truth"):
            f.create_group(group)

    @classmethod
    def add_to(cls, path: str | os.PathLike[str]) -> SessionWriter:
        """Open a closed (or recovered) session to add new streams offline, atomically:
        a copy beside it replaces the original only when :meth:`close` succeeds."""
        from sensorbench.logs.reader import open_h5

        path = Path(path)
        with open_h5(path) as probe:
            if not isinstance(probe.get("_status"), h5py.Dataset):
                raise SessionError(
                    f"{path}: the file is damaged: /_status: missing (`sensorbench check "
                    f"{path}` lists every problem)"
                )
            status = FileStatus(int(probe["_status"][0]))
        if status == FileStatus.WRITING:
            raise SessionError(
                f"{path} was not closed cleanly (its writer is running or died); "
                f"run `sensorbench check {path}` first"
            )
        self = cls.__new__(cls)
        self.path = path
        self._writing = None
        self._idle(False, 0.5, status)
        try:
            self._pending = PendingUpdate(path)
        except OutputError as exc:
            raise SessionError(str(exc)) from exc
        try:
            self._file, self._guard = open_guarded(self._pending.tmp, "r+")
        except OSError as exc:
            self._pending.discard()
            raise SessionError(
                f"cannot open a copy of {path} to add to it: {disk_error_text(exc)}"
            ) from exc
        self._status = self._file["_status"]
        self._status[0] = FileStatus.WRITING
        self._events = self._file["events"]
        for kind, group_name in GROUPS.items():
            for name, group in self._file.require_group(group_name).items():
                stream = _Stream(kind, name, group, n_counts=int(group.attrs.get("n_counts", 0)))
                stream.covariance = "covariance" in group
                if kind in ("lidar", "raw"):
                    stream.written = group["angle" if kind == "lidar" else "data"].shape[0]
                self._streams[(kind, name)] = stream
        self._file.require_group("truth")
        return self

    # -- declaration -------------------------------------------------------------

    def _declare(
        self, kind: str, name: str, attrs: dict[str, Any] | None, n_counts: int = 0
    ) -> h5py.Group:
        """A new stream's group with its columns (``n_counts``: an encoder's counters)."""
        self._check_layout_open(f"add {kind} stream {name!r}", "declare every stream")
        if (kind, name) in self._streams:
            raise SessionError(f"{kind} stream {name!r} declared twice")
        problem = name_conflict(kind, name, list(self._streams))
        if problem:
            raise SessionError(f"{self.path}: {problem}")
        group = self._file[GROUPS[kind]].create_group(name)
        _set_attrs(group, attrs)
        for col, dtype in STREAM_COLUMNS[kind].items():
            row = (n_counts,) if col == "counts" else ROW_SHAPE.get(col, ())
            index = col in ("turns", "chunks")
            self._column(group, col, dtype, _CHUNK_ROWS["index" if index else kind], *row)
        with self._lock:  # an offline writer's thread may be flushing the other streams
            self._streams[(kind, name)] = _Stream(kind, name, group, n_counts=n_counts)
        return group

    @staticmethod
    def _column(group: h5py.Group, name: str, dtype: Any, chunk: int, *row: int) -> h5py.Dataset:
        """An empty resizable dataset of rows shaped ``row``, ``chunk`` rows to a chunk."""
        return group.create_dataset(
            name, shape=(0, *row), maxshape=(None, *row), dtype=dtype, chunks=(chunk, *row)
        )

    def add_lidar(self, name: str, attrs: dict[str, Any] | None = None) -> None:
        """Declare a lidar stream (attrs: model, port_path, serial, firmware, mount_xy_yaw...)."""
        self._declare("lidar", name, {"units": "angle rad CCW, range m, time ns", **(attrs or {})})

    def add_raw(self, name: str, attrs: dict[str, Any] | None = None) -> None:
        """Declare a raw byte stream (everything received from one serial device)."""
        self._declare("raw", name, attrs)

    def add_encoder(
        self, name: str, n_counts: int = 3, attrs: dict[str, Any] | None = None
    ) -> None:
        """Declare an encoder stream with ``n_counts`` cumulative counters per frame."""
        if n_counts < 1:
            raise SessionError(f"an encoder stream needs at least one counter, got {n_counts}")
        units = "counts, yaw rad, yaw_rate rad/s, time ns"
        self._declare(
            "encoder", name, {"units": units, **(attrs or {}), "n_counts": n_counts}, n_counts
        )

    def add_pose(
        self,
        name: str,
        kind: str,
        attrs: dict[str, Any] | None = None,
        covariance: bool = False,
    ) -> None:
        """Declare a pose stream of kind ``mocap``, ``pose_sensor`` or ``estimate``; with
        ``covariance``, every batch carries its (n, 6, 6) pose covariance (ROS order:
        x, y, z, rotation about x, y, z)."""
        if kind not in POSE_KINDS:
            raise SessionError(f"pose stream kind must be one of {POSE_KINDS}, got {kind!r}")
        units = "position m, quaternion xyzw, time ns"
        group = self._declare("pose", name, {"kind": kind, "units": units, **(attrs or {})})
        self._streams[("pose", name)].covariance = covariance
        if covariance:
            self._column(group, "covariance", "<f8", _CHUNK_ROWS["pose"] // 8, 6, 6)

    def stream_attrs(self, kind: str, name: str) -> dict[str, Any]:
        """The attributes of a declared stream (``kind``: lidar, raw, encoder, pose);
        SessionError for an undeclared one."""
        stream = self._streams.get((kind, name))
        if stream is None:
            raise SessionError(f"{kind} stream {name!r} was not declared in {self.path}")
        return dict(stream.group.attrs)

    def update_stream_attrs(self, kind: str, name: str, attrs: dict[str, Any]) -> None:
        """Add or change attributes of a declared stream (offline writers only; an import
        records what it dropped once it has read the whole file)."""
        if self.swmr:
            raise SessionError("a live session's stream attributes are fixed at declaration")
        self.stream_attrs(kind, name)  # refuses an undeclared stream
        with self._lock:
            _set_attrs(self._streams[(kind, name)].group, attrs)

    def add_columns(self, kind: str, name: str, columns: dict[str, np.ndarray]) -> None:
        """Store whole optional columns of a declared stream at once (an import's)."""
        self._check_layout_open(f"write columns of {kind} stream {name!r}")
        for col, data in columns.items():
            self._streams[(kind, name)].group.create_dataset(col, data=data)

    def set_truth(self, path: str, data: np.ndarray, attrs: dict[str, Any] | None = None) -> None:
        """Store a truth array at ``/truth/<path>`` (simulated sessions only)."""
        self._check_layout_open("write truth")
        _set_attrs(self._file["truth"].create_dataset(path, data=np.asarray(data)), attrs)

    def set_truth_attrs(self, attrs: dict[str, Any], path: str = "") -> None:
        """Set attributes on ``/truth`` (or on a truth dataset/group at ``path``)."""
        self._check_layout_open("write truth attributes")
        _set_attrs(self._file["truth"] if not path else self._file["truth"][path], attrs)

    def _check_layout_open(self, what: str, instead: str = "write it") -> None:
        """Refuse to ``what`` once a SWMR writer has started: SWMR freezes the layout."""
        if self._thread is not None and self.swmr:
            raise SessionError(f"cannot {what}: the writer has started (SWMR freezes the "
                               f"layout); {instead} before the first append")  # fmt: skip

    # -- running -----------------------------------------------------------------

    def start(self) -> None:
        """Freeze the layout (SWMR) and start the writer thread. Idempotent."""
        with self._lock:
            if self._thread is not None:
                return
            if self._closed:
                raise SessionError(f"{self.path} is closed")
            self._file.flush()
            if self.swmr:
                self._file.swmr_mode = True
            self._thread = threading.Thread(
                target=self._run, name=f"session-writer:{self.path.name}", daemon=True
            )
            self._thread.start()

    def _put(self, kind: str, name: str, payload: Any) -> None:
        if self.error is not None:
            raise SessionError(f"writing {self.path} failed: {self._error_text()}") from self.error
        if self._closed:
            raise SessionError(f"{self.path} is closed")
        if (kind, name) not in self._streams:
            raise SessionError(f"{kind} stream {name!r} was not declared in {self.path}")
        if self._thread is None:
            self.start()
        self._queue.put((kind, name, payload))

    def append_turns(self, name: str, turns: LidarTurns) -> None:
        """Queue complete lidar turns for stream ``name``."""
        if not isinstance(turns, LidarTurns):
            raise SessionError("append_turns takes a LidarTurns batch")
        if turns.n_turns:
            self._put("lidar", name, turns)

    def append_raw(self, name: str, t_ns: int, data: bytes) -> None:
        """Queue one chunk of received bytes with its host receive time (ns): every read
        of every reader, so the usual case is :meth:`_put`'s checks without its call."""
        if not data:
            return
        item = ("raw", name, (int(t_ns), bytes(data)))
        if self.error is None and not self._closed and self._thread is not None \
                and item[:2] in self._streams:
            self._queue.put(item)
        else:
            self._put(*item)  # raises, or starts the writer thread

    def append_encoder(self, name: str, batch: EncoderBatch) -> None:
        """Queue encoder frames for stream ``name``."""
        stream = self._streams.get(("encoder", name))
        if stream is not None and batch.counts.shape[1] != stream.n_counts:
            raise SessionError(
                f"encoder stream {name!r} has {stream.n_counts} counters, "
                f"batch has {batch.counts.shape[1]}"
            )
        if len(batch):
            self._put("encoder", name, batch)

    def append_pose(self, name: str, batch: PoseBatch) -> None:
        """Queue pose samples for stream ``name``."""
        stream = self._streams.get(("pose", name))
        if stream is not None and stream.covariance != (batch.covariance is not None):
            has = "has" if stream.covariance else "has no"
            raise SessionError(
                f"pose stream {name!r} {has} covariance column; the batch must match it"
            )
        if len(batch):
            self._put("pose", name, batch)

    def event(self, t_ns: int, source: str, kind: str, message: str = "") -> None:
        """Queue one event (unplug, reconnect, stale, crc_burst, relocalization, note...)."""
        if self.error is not None:
            raise SessionError(f"writing {self.path} failed: {self._error_text()}") from self.error
        if self._thread is None:
            self.start()
        self._queue.put(("event", "", (int(t_ns), str(source), str(kind), str(message))))

    # -- the writer thread ---------------------------------------------------------

    def _run(self) -> None:
        # each flush is due flush_interval_s after the previous one took what had arrived
        # (not after it ended): a slow flush or a late wake-up under load is not added
        # to the next data's wait for the disk
        next_flush = time.monotonic() + self.flush_interval_s
        stop = False
        try:
            while not stop:
                self._stopping.wait(max(0.0, next_flush - time.monotonic()))
                taken = time.monotonic()  # what arrived after this waits for the next flush
                with contextlib.suppress(queue.Empty):
                    item = self._queue.get_nowait()
                    while True:
                        if item is _STOP:
                            stop = True
                            break
                        self._stage(item)
                        item = self._queue.get_nowait()
                if stop or taken >= next_flush:
                    self._write_pending()
                    self._file.flush()
                    self._raise_disk_error()
                    next_flush = taken + self.flush_interval_s
            self._status[0] = self._final_status
            self._file.flush()
            self._raise_disk_error()
        except BaseException as exc:  # disk full, I/O error: keep the cause for producers
            self.error = exc
            if isinstance(exc, NoRoomError):  # nothing of the flush was written: intact
                self._status[0] = self._final_status
                self._file.flush()
        finally:
            self._close_file()

    def _raise_disk_error(self) -> None:
        if self._guard is not None:
            self._guard.raise_if_failed()

    def _let_go(self) -> None:
        """Release the live writer's lock on its file (see :mod:`~sensorbench.logs.update_lock`)."""
        if self._writing is not None:
            self._writing.release()

    def _close_file(self) -> None:
        """Close the HDF5 file; a failure to write it becomes :attr:`error`."""
        if self._guard is None:
            with contextlib.suppress(Exception):
                release_room(self._file.id.get_vfd_handle(), self._reserved_end)
            with contextlib.suppress(Exception):
                self._file.close()
            self._let_go()
            return
        close_guarded(self._file, self._guard)
        if self.error is None and self._guard.error is not None:
            self.error = OSError(
                self._guard.error.errno, self._guard.error.strerror, str(self.path)
            )

    def _stage(self, item: tuple[str, str, Any]) -> None:
        kind, name, payload = item
        if kind == "event":
            self._pending_events.append(payload)
        else:
            self._streams[(kind, name)].pending.append(payload)

    def _write_pending(self) -> None:
        """Extend every dataset by what is staged; a live writer first reserves the room
        (HDF5's own driver does not survive a full disk).

        Raises:
            NoRoomError: the disk has not the room (nothing was written).
        """
        plan: list[tuple[h5py.Dataset, np.ndarray]] = []
        with self._lock:  # a stream declared meanwhile has nothing staged yet
            streams = list(self._streams.values())
        for stream in streams:
            if stream.pending:
                plan += getattr(self, f"_rows_{stream.kind}")(stream)
                stream.pending.clear()
        if self._pending_events:
            rows = np.zeros(len(self._pending_events), dtype=EVENT_DTYPE)
            for i, (t_ns, source, kind, message) in enumerate(self._pending_events):
                rows[i] = (t_ns, source.encode()[:32], kind.encode()[:24], message.encode()[:232])
            plan.append((self._events, rows))
            self._pending_events.clear()
        kept = [self._rows.get(id(ds)) or self._rows.setdefault(id(ds), _Rows.of(ds))
                for ds, _ in plan]  # fmt: skip
        if self._guard is None:
            growth = _ROOM_MARGIN + sum(
                r.new_chunk_bytes(len(data)) for r, (_, data) in zip(kept, plan, strict=True)
            )
            fd = self._file.id.get_vfd_handle()
            self._reserved_end = reserve_room(fd, self.path, growth)
        for r, (ds, data) in zip(kept, plan, strict=True):
            if len(data):
                r.append(ds, data)

    def _rows_lidar(self, stream: _Stream) -> list[tuple[h5py.Dataset, np.ndarray]]:
        pending = stream.pending
        count = _joined(pending, "count")
        index = np.empty(count.size, dtype=TURN_DTYPE)
        offset = np.zeros(count.size, dtype=np.int64)  # of each turn's first point
        np.cumsum(count[:-1], out=offset[1:])
        index["offset"] = offset + stream.written
        index["count"] = count
        for col in ("t_first_ns", "device_ns", "speed_hz", "flags"):
            index[col] = _joined(pending, col)
        cols = [(stream.ds(c), _joined(pending, c)) for c in LIDAR_POINT_FIELDS]
        stream.written += len(cols[0][1])
        return [*cols, (stream.ds("turns"), index)]

    def _rows_raw(self, stream: _Stream) -> list[tuple[h5py.Dataset, np.ndarray]]:
        lengths = np.array([len(d) for _, d in stream.pending], dtype=np.int64)
        chunks = np.empty(len(stream.pending), dtype=RAW_CHUNK_DTYPE)
        chunks["t_ns"] = [t for t, _ in stream.pending]
        chunks["length"] = lengths
        chunks["offset"] = stream.written + np.concatenate(([0], np.cumsum(lengths)[:-1]))
        data = np.frombuffer(b"".join(d for _, d in stream.pending), dtype=np.uint8)
        stream.written += int(lengths.sum())
        return [(stream.ds("data"), data), (stream.ds("chunks"), chunks)]

    def _rows_encoder(self, stream: _Stream) -> list[tuple[h5py.Dataset, np.ndarray]]:
        """An encoder or pose stream's columns, each joined over the batches."""
        cols = [*STREAM_COLUMNS[stream.kind], *(["covariance"] if stream.covariance else [])]
        return [
            (d, _joined(stream.pending, c).astype(d.dtype, copy=False))
            for c in cols
            for d in (stream.ds(c),)
        ]

    _rows_pose = _rows_encoder

    # -- closing -----------------------------------------------------------------

    def close(self, timeout_s: float = 30.0) -> None:
        """Write everything queued, mark the file cleanly closed and close it.

        Raises:
            SessionError: if the writer failed (the file then holds everything up to
                its last successful flush) or did not finish within ``timeout_s`` (s).
        """
        if self._closed:
            return
        self.start()
        with self._lock:
            self._closed = True
        self._queue.put(_STOP)
        self._stopping.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            if self._pending is not None:
                self._pending.discard()
            raise SessionError(f"the writer of {self.path} did not finish within {timeout_s} s")
        if self.error is not None:
            if self._pending is not None:
                self._pending.discard()
                raise SessionError(
                    f"writing {self.path} failed: {self._error_text()}; {unchanged(self._pending)}"
                ) from self.error
            if isinstance(self.error, NoRoomError):
                raise SessionError(
                    f"writing {self.path} stopped: {self._error_text()}; the file is closed "
                    "intact with the data up to the last flush"
                ) from self.error
            raise SessionError(
                f"writing {self.path} failed: {self._error_text()}; the file holds the data up "
                "to the last flush, run `sensorbench check` on it"
            ) from self.error
        if self._pending is not None:
            try:
                self._pending.commit()
            except (OSError, OutputError) as exc:
                text = disk_error_text(exc) if isinstance(exc, OSError) else str(exc)
                raise SessionError(
                    f"writing {self.path} failed: {text}; {unchanged(self._pending)}"
                ) from exc

    def _error_text(self) -> str:
        return disk_error_text(self.error) if isinstance(self.error, OSError) else str(self.error)

    def abort(self) -> None:
        """Discard everything this offline writer wrote (the output stays as it was); a
        live (SWMR) writer is closed normally instead, keeping its data."""
        if self._pending is None:
            self.close()
            return
        if not self._closed:
            with self._lock:
                self._closed = True
            if self._thread is not None:
                self._queue.put(_STOP)
                self._stopping.set()
                self._thread.join(30.0)
            else:
                self._close_file()
        self._pending.discard()

    def __enter__(self) -> SessionWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None and self._pending is not None:
            self.abort()
        else:
            self.close()
