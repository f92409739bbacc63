"""Capture orchestration: bring every configured device up, record them all into one
file (docs/CAPTURE.md). Times in seconds.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sensorbench.drivers.device_kind import ReaderContext
from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.powerup import DeviceSpec, PowerUpSequencer
from sensorbench.drivers.reader_base import DeviceReader, ReaderStatus
from sensorbench.drivers.robot_config import DeviceConfig, PodGeometry, RobotConfig
from sensorbench.errors import SensorbenchError, SessionError
from sensorbench.logs import EncoderBatch, LidarTurns, PoseBatch, Session, SessionWriter
from sensorbench.logs.atomic_output import check_new_output

StatusCallback = Callable[[float, list[ReaderStatus]], None]


class CaptureConsumer(Protocol):
    """Work done on the data as capture records them (docs/ARCHITECTURE.md, Capture
    consumer)."""

    def declare(self, writer: SessionWriter) -> None:
        """Add the consumer's own streams to ``writer`` (before it starts)."""

    def start(self, writer: SessionWriter) -> None:
        """Start (after the bring-up, before the readers start)."""

    def consume(self, kind: str, name: str, payload: Any) -> None:
        """One item the writer took: ``kind`` ``lidar`` (:class:`~sensorbench.logs.
        LidarTurns`), ``encoder`` (:class:`~sensorbench.logs.EncoderBatch`), ``pose``
        (:class:`~sensorbench.logs.PoseBatch`) or ``event`` (``(t_ns, kind, message)``,
        ``name`` its source). Called on the producing thread: must not block."""

    def stop(self) -> None:
        """Finish (after the readers stopped, before the writer closes)."""


class _TappedWriter(SessionWriter):
    """A session writer that hands every item it takes to a :class:`CaptureConsumer`."""

    def __init__(self, consumer: CaptureConsumer, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.consumer: CaptureConsumer | None = consumer

    def _tap(self, kind: str, name: str, payload: Any) -> None:
        consumer = self.consumer
        if consumer is None:
            return
        try:
            consumer.consume(kind, name, payload)
        except Exception as exc:  # a consumer bug never stops a reader
            self.consumer = None
            message = f"{type(consumer).__name__} failed and was dropped: {exc!r}"
            super().event(time.monotonic_ns(), "capture", "error", message)

    def append_turns(self, name: str, turns: LidarTurns) -> None:
        """Queue turns, then hand them to the consumer."""
        super().append_turns(name, turns)
        self._tap("lidar", name, turns)

    def append_encoder(self, name: str, batch: EncoderBatch) -> None:
        """Queue encoder frames, then hand them to the consumer."""
        super().append_encoder(name, batch)
        self._tap("encoder", name, batch)

    def append_pose(self, name: str, batch: PoseBatch) -> None:
        """Queue pose samples, then hand them to the consumer."""
        super().append_pose(name, batch)
        self._tap("pose", name, batch)

    def event(self, t_ns: int, source: str, kind: str, message: str = "") -> None:
        """Queue an event, then hand it to the consumer."""
        super().event(t_ns, source, kind, message)
        self._tap("event", source, (int(t_ns), str(kind), str(message)))


@dataclass(frozen=True)
class BringupResult:
    """One device's bring-up: ``ok`` when it delivered valid data within its deadline,
    ``seconds`` from the start request to that or to the failure (s), ``message`` what
    was seen (identity, or why it failed)."""

    name: str
    kind: str
    port: str
    ok: bool
    seconds: float
    message: str


@dataclass(frozen=True)
class DeviceSummary:
    """What one device left in the session file: ``bytes`` raw, ``items`` points (lidars),
    frames (pods) or poses, ``turns`` complete turns (lidars; 0 for pods), ``unplugs``
    events; the rest is the reader's final :class:`ReaderStatus`."""

    name: str
    kind: str
    port: str
    bytes: int
    items: int
    turns: int
    crc_errors: int
    drops: int
    reconnects: int
    unplugs: int
    last_error: str | None
    reader_failures: int = 0
    reader_down: bool = False

    @property
    def data_lost(self) -> bool:
        """True when the reader failed while the device was recording."""
        return self.reader_failures > 0 or self.reader_down


@dataclass
class CaptureResult:
    """The outcome of :func:`run_capture`: ``recorded_s`` from the end of bring-up to the
    stop (s); ``stopped_by`` ``"duration"``, ``"stop"`` (signal), ``"bringup"`` (a device
    failed to come up), ``"disk"`` (full or nearly so) or ``"error"`` (the writer failed
    otherwise), with the ``error`` message for the last two; ``bringup`` in power-up order.
    """

    path: Path
    recorded_s: float
    stopped_by: str
    error: str | None = None
    bringup: list[BringupResult] = field(default_factory=list)
    devices: list[DeviceSummary] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every device came up, no reader lost data (a reader thread that
        failed) and the file was closed without error."""
        return (self.stopped_by in ("duration", "stop") and all(b.ok for b in self.bringup)
            and not any(d.data_lost for d in self.devices))

    @property
    def exit_code(self) -> int:
        """The command's exit code: 0 when :attr:`ok`, 2 when a full disk stopped the
        recording (the file is closed and valid), otherwise 1."""
        return 0 if self.ok else 2 if self.stopped_by == "disk" else 1


def make_reader(dev: DeviceConfig, speed: float = 1.0, handle: Any = None,
        pods: PodGeometry | None = None) -> DeviceReader:
    """The reader for one configured device (not started), from its registered kind;
    the arguments are :class:`~sensorbench.drivers.device_kind.ReaderContext`'s."""
    attrs: dict[str, Any] = {"port_path": dev.port, "config_line": dev.line}
    if dev.mount is not None:
        attrs["mount_xy_yaw"] = dev.mount.as_list()
        attrs["mount_units"] = "m, m, rad (CCW, body frame: x forward, y left)"
    return get_kind(dev.kind).reader(dev, ReaderContext(attrs, speed, handle, pods))


def bring_up(config: RobotConfig, keep: bool) -> tuple[list[BringupResult], dict[str, Any]]:
    """Staggered power-up of every configured device, one retry each;
    returns one result per device in power-up order and, with ``keep``, the handles of
    the ready devices whose kind keeps them (the A1 scanners, spinning) by name."""
    specs = [DeviceSpec(dev.name, kind=dev.kind, port=dev.port, delay_after_s=dev.gap_s,
        ready_timeout_s=dev.timeout_s, options={"config": dev}, power=dev.power)
        for dev in config.ordered_devices()]  # fmt: skip
    seq = PowerUpSequencer(specs, retries=1)  # its run compiles the kernels first
    rows = seq.run(keep=keep)
    handles = dict(seq.handles) if keep else {}
    results = []
    for row in rows:
        dev = config.device(row.device)
        kind = get_kind(dev.kind)
        ok, message = row.ready, row.why
        if ok and row.serial:
            message = f"{kind.model} serial {row.serial}"
            if dev.serial and row.serial.upper() != dev.serial.upper():
                ok = False
                message = (f"reports serial {row.serial}, the configuration expects "
                    f"{dev.serial.upper()}: are front and rear swapped? Check the udev names")
        elif ok:
            message = f"valid data on {row.tty or dev.port}"
        if row.attempts > 1:
            message += f" (attempt {row.attempts})"
        if row.warning:
            message += f"; warning: {row.warning}"
        results.append(
            BringupResult(dev.name, dev.kind, dev.port, ok, row.time_to_first_turn_s, message))
        handle = handles.get(dev.name)
        if handle is not None and not (kind.keeps_bringup_handle and ok):
            handle.close()  # stream devices: the reader reopens; a wrong unit: not used
            handles.pop(dev.name)
    return results, handles


def _on_each(
    readers: Sequence[DeviceReader], call: Callable[[DeviceReader], None], join_s: float
) -> dict[str, str]:
    """Call ``call`` on every reader concurrently, waiting at most ``join_s`` (s) for
    each; returns the error message of each that raised a driver or session error."""
    errors: dict[str, str] = {}

    def run(reader: DeviceReader) -> None:
        try:
            call(reader)
        except SensorbenchError as exc:
            errors[reader.name] = str(exc)

    threads = [threading.Thread(target=run, args=(r,), name=r.name, daemon=True) for r in readers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join_s)
    return errors


def _stop_all(readers: Sequence[DeviceReader], timeout_s: float = 3.0) -> None:
    """Stop every reader concurrently (each within ``timeout_s``, s); an error (the final
    ``stop`` event of a failed writer, after the port closed) is dropped."""
    _on_each(readers, lambda r: r.stop(timeout_s), timeout_s + 1.0)


def run_bringup(config: RobotConfig) -> list[BringupResult]:
    """Bring every device up without recording, then close them (``sensorbench bringup``)."""
    return bring_up(config, keep=False)[0]


@dataclass(frozen=True)
class CaptureOptions:
    """How :func:`run_capture` records: ``label`` and ``note`` (root attributes), the
    devices' emulation ``speed`` (1.0 for hardware), whether to record with the devices
    that came up when some did not (``allow_missing``), the status and flush periods (s).
    ``min_free_bytes``: stop cleanly when the file system has less free space than this
    or than 4 s of the file's growth, so the file is closed intact before the disk is full.
    """

    label: str = ""
    note: str = ""
    speed: float = 1.0
    allow_missing: bool = False
    status_interval_s: float = 0.5
    flush_interval_s: float = 0.5
    min_free_bytes: int = 32 * 2**20


def run_capture(config: RobotConfig, output: str | os.PathLike[str], duration_s: float,
        options: CaptureOptions | None = None, *, on_status: StatusCallback | None = None,
        on_bringup: Callable[[BringupResult], None] | None = None,
        stop: threading.Event | None = None, extra_readers: Sequence[DeviceReader] = (),
        consumer: CaptureConsumer | None = None) -> CaptureResult:
    """Record every configured device into the new session ``output`` (OutputError if it
    exists or cannot be created) for ``duration_s`` s after the bring-up (``inf``: until
    ``stop`` is set; the bring-up is not interrupted, each step has its own deadline).

    ``on_status(recorded_s, statuses)`` is called every ``status_interval_s`` and must not
    block; ``on_bringup`` with each device's bring-up result. ``extra_readers``: sources
    that are not serial devices (the demo's pose source), run with the readers but not
    brought up nor summarised.
    """
    opts = options or CaptureOptions()
    if not duration_s > 0:
        raise SessionError(f"duration must be > 0 s, got {duration_s}")
    check_new_output(output)
    stop = stop or threading.Event()
    result = CaptureResult(Path(output), 0.0, "duration")
    result.bringup, handles = bring_up(config, keep=True)
    if on_bringup is not None:
        for row in result.bringup:
            on_bringup(row)
    up = {b.name for b in result.bringup if b.ok}
    attrs = _session_attrs(config, opts.note, duration_s, result.bringup)
    make: Callable[..., SessionWriter] = (  # with a consumer: one that hands it every item
        SessionWriter if consumer is None else functools.partial(_TappedWriter, consumer))
    writer = make(output, label=opts.label, config_text=config.text,
        flush_interval_s=opts.flush_interval_s, attrs=attrs)
    readers = {
        d.name: make_reader(d, opts.speed, handles.get(d.name), config.pods)
        for d in config.devices
        if d.name in up}
    readers.update({r.name: r for r in extra_readers})
    for reader in readers.values():
        reader.declare(writer)
    if consumer is not None:
        consumer.declare(writer)
    writer.start()
    now = time.monotonic_ns()
    for b in result.bringup:
        kind = "note" if b.ok else "error"
        writer.event(now, b.name, kind, f"bring-up {'ok' if b.ok else 'FAILED'}: {b.message}")
    t0 = time.monotonic()
    missing = len(up) < len(result.bringup) and not opts.allow_missing
    if stop.is_set() or missing or not readers:
        result.stopped_by = "stop" if stop.is_set() else "bringup"
        _stop_all(list(readers.values()))
    else:
        t0 = _record_readers(writer, list(readers.values()), result, consumer, duration_s, stop,
            on_status, opts)
    result.recorded_s = time.monotonic() - t0
    statuses = {name: r.status() for name, r in readers.items() if name in up}  # final counters
    try:
        if writer.error is None:
            writer.event(time.monotonic_ns(), "capture", "stop", f"stopped by {result.stopped_by}")
        writer.close()
    except SessionError as exc:
        result.stopped_by, result.error = _writer_stop(writer, exc)
    result.devices = summarize(Path(output), config, statuses)
    return result


def _session_attrs(
    config: RobotConfig, note: str, duration_s: float, bringup: list[BringupResult]
) -> dict[str, Any]:
    """The session's root attributes: the note, the robot, its devices and the bring-up."""
    devices = [{"name": d.name, "kind": d.kind, "port": d.port} for d in config.devices]
    return {"note": note, "robot": config.name, "recorded_by": "sensorbench capture",
        "requested_duration_s": duration_s if math.isfinite(duration_s) else -1.0,
        "devices_json": json.dumps(devices), "powerup_order": list(config.powerup_order),
        "footprint_m": config.footprint_m, "bringup_json": json.dumps([vars(b) for b in bringup])}


def _record_readers(writer: SessionWriter, readers: list[DeviceReader], result: CaptureResult,
        consumer: CaptureConsumer | None, duration_s: float, stop: threading.Event,
        on_status: StatusCallback | None, opts: CaptureOptions) -> float:
    """Start the consumer and the readers, record until the end, stop them; sets
    ``result``'s stop reason and error and marks readers that failed to start as failed
    in its bring-up. Returns the monotonic time (s) the recording started."""
    if consumer is not None:
        consumer.start(writer)
    for name, message in _on_each(readers, lambda r: r.start(), 60.0).items():
        writer.event(time.monotonic_ns(), name, "error", f"reader failed to start: {message}")
        result.bringup = [BringupResult(b.name, b.kind, b.port, False, b.seconds, message)
            if b.name == name else b for b in result.bringup]
    writer.event(time.monotonic_ns(), "capture", "start", f"recording {len(readers)} devices")
    t0 = time.monotonic()
    result.stopped_by, result.error = _record(writer, readers, t0, duration_s, stop, on_status,
        opts)
    _stop_all(readers)
    if consumer is not None:
        consumer.stop()
    return t0


def _writer_stop(writer: SessionWriter, exc: BaseException) -> tuple[str, str]:
    """(stopped_by, message) of a writer that failed: ``"disk"`` when the disk is full."""
    from sensorbench.logs.h5_output import NoRoomError

    cause = writer.error if writer.error is not None else exc
    if isinstance(cause, NoRoomError):  # the writer stopped before HDF5 wrote any of a flush
        return "disk", (
            f"the disk is full ({cause.strerror}): capture stopped and {writer.path} closed "
            "intact with everything up to the last flush; free space before the next capture")
    full = (isinstance(cause, OSError) and cause.errno == 28) or "No space" in str(cause)
    what = "the disk is full" if full else f"writing failed ({cause})"
    return "disk" if full else "error", (
        f"{what}: capture stopped. {writer.path} holds everything up to the last flush "
        f"(≤ {writer.flush_interval_s:g} s before the failure); free space, then run "
        f"`sensorbench check --recover {writer.path}`")


class _DiskGuard:
    """Watches the output's file system: too little room left for the next seconds? (HDF5
    does not fail cleanly on ENOSPC: docs/CAPTURE.md, What capture does.)"""

    def __init__(self, path: Path, min_free_bytes: int) -> None:
        self.path = path
        self.min_free_bytes = int(min_free_bytes)
        self._last_size = 0
        self._last_t = time.monotonic()

    def check(self) -> str | None:
        """None while there is room; otherwise the message to stop with."""
        try:
            size = self.path.stat().st_size
            free = shutil.disk_usage(self.path.parent).free
        except OSError:
            return None
        now = time.monotonic()
        rate = max(size - self._last_size, 0) / max(now - self._last_t, 1e-3)
        self._last_size, self._last_t = size, now
        reserve = max(self.min_free_bytes, 4.0 * rate)
        if free >= reserve:
            return None
        return (f"the disk is nearly full ({free / 2**20:.1f} MiB free on the file system of "
            f"{self.path}, the file grows {rate / 2**20:.2f} MiB/s): capture stopped and the "
            "file closed intact; free space before the next capture")


def _record(writer: SessionWriter, readers: list[DeviceReader], t0: float, duration_s: float,
        stop: threading.Event, on_status: StatusCallback | None,
        opts: CaptureOptions) -> tuple[str, str | None]:
    """The status loop; returns (stopped_by, error). A reader connected again gets a
    ``note`` event stating its data gap (:func:`_gap_text`)."""
    guard = _DiskGuard(writer.path, opts.min_free_bytes)
    connected = {r.name: r.status().connected for r in readers}  # also starts the rates
    while True:
        elapsed = time.monotonic() - t0
        remaining = duration_s - elapsed
        if remaining <= 0:
            return "duration", None
        if stop.wait(min(opts.status_interval_s, remaining)):
            return "stop", None
        if writer.error is not None:
            return _writer_stop(writer, writer.error)
        low = guard.check()
        if low is not None:
            return "disk", low
        statuses = [r.status() for r in readers]
        for reader, st in zip(readers, statuses, strict=True):
            if st.connected and not connected[reader.name]:
                writer.event(time.monotonic_ns(), reader.name, "note", _gap_text(reader))
            connected[reader.name] = st.connected
        if on_status is not None:
            on_status(time.monotonic() - t0, statuses)


def _gap_text(reader: DeviceReader) -> str:
    """``data gap N s`` from the reader's last unplug and reconnect events."""
    events = list(getattr(reader, "events", []))
    unplug = [t for t, kind, _ in events if kind == "unplug"]
    back = [t for t, kind, _ in events if kind == "reconnect"]
    if unplug and back and back[-1] >= unplug[-1]:
        return f"data gap: unplugged for {(back[-1] - unplug[-1]) / 1e9:.2f} s, reconnected"
    return "data gap: the device was disconnected and is delivering again"


def summarize(
    path: Path, config: RobotConfig, statuses: dict[str, ReaderStatus]
) -> list[DeviceSummary]:
    """Per-device contents of the session file for the devices that recorded (0 where the
    file cannot be read, e.g. the disk filled before a flush)."""
    counts: dict[str, tuple[int, int, int]] = {}
    unplugs: collections.Counter[str] = collections.Counter()
    # h5py raises RuntimeError on a file whose writer hit ENOSPC
    with contextlib.suppress(SessionError, OSError, RuntimeError), Session(path) as ses:
        unplugs.update(ev.source for ev in ses.events() if ev.kind == "unplug")
        for name in statuses:
            n_bytes = ses.raw(name).n_bytes if name in ses.raw_names() else 0
            counts[name] = (n_bytes, 0, 0)
            if name in ses.encoder_names():
                counts[name] = (n_bytes, len(ses.encoder(name)), 0)
            elif name in ses.lidar_names():
                lidar = ses.lidar(name)
                counts[name] = (n_bytes, lidar.n_points, lidar.n_turns)
            elif name in ses.pose_names():
                counts[name] = (n_bytes, len(ses.pose(name)), 0)
    return [DeviceSummary(name, config.device(name).kind, config.device(name).port,
            *counts.get(name, (0, 0, 0)), st.crc_errors, st.drops, st.reconnects,
            unplugs.get(name, 0), st.last_error, st.reader_failures, st.reader_down)
        for name, st in statuses.items()
    ]  # fmt: skip
