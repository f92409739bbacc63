"""The serial transport of every device: one port, one step of reading, the protocol on
top (docs/ARCHITECTURE.md). Times in seconds unless ``_ns``.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import os
import select
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import serial

from sensorbench.drivers.link_watch import LinkWatch, Silence
from sensorbench.drivers.reader_base import RateMeter, ReaderStatus, record_event, seconds_since
from sensorbench.errors import DeviceUnavailable, DeviceUnplugged, DriverError

if TYPE_CHECKING:
    from sensorbench.drivers.device_protocol import DeviceProtocol
    from sensorbench.logs import SessionWriter

EventSink = Callable[[int, str, str], None]
"""``sink(t_ns, kind, message)``; kinds as in the session event table."""

PORT_GONE = (serial.SerialException, OSError, TypeError, DeviceUnplugged)
"""What a read of a port that went away raises (pyserial raises TypeError when the fd
vanishes under a read in progress; a protocol's request raises DeviceUnplugged)."""


class Port(Protocol):
    """What the link reads through: an open port of one device."""

    def read(self, max_wait_s: float) -> bytes:
        """What arrived, waiting at most about ``max_wait_s`` (s); b"" if nothing."""

    def close(self) -> None:
        """Close the port; never raises (an unplugged port may fail to close)."""


def read_waiting(fd: int, path: str, rdev: int, max_wait_s: float) -> bytes:
    """Every byte that arrived on the non-blocking tty ``fd`` (opened at ``path`` as
    device ``rdev``), waiting at most ``max_wait_s`` (s) for the first: one ``select`` and
    one read (a reader that fell behind catches up in one step). OSError when the port
    is gone: it errors, or it reports end of file with its tty hung up or ``path`` gone
    or replaced; an end of file on a present port is no data (no spin: 1 ms)."""
    if not select.select([fd], [], [], max_wait_s)[0]:
        return b""
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            break
        if not data:
            if not chunks:  # end of file: OSError unless the port is still there, open
                fcntl.ioctl(fd, termios.TIOCINQ, b"\0\0\0\0")  # EIO once hung up
                try:
                    same = os.stat(path).st_rdev == rdev
                except FileNotFoundError:
                    same = False
                if not same:  # one errno for gone or replaced, as readers treat them alike
                    raise OSError(errno.ENODEV, f"{path} is gone or another device now")
                time.sleep(min(max_wait_s, 0.001))  # no spin on a spurious wake-up
            break
        chunks.append(data)
        if len(data) < 1 << 16:  # the tty had no more: no second read to hear EAGAIN
            break
    return b"".join(chunks)


class SerialPort:
    """The standard :class:`Port` on the open ``ser``: a read takes everything waiting
    (:func:`read_waiting`)."""

    def __init__(self, ser: serial.Serial, path: str) -> None:
        self.ser = ser
        self.path = path
        self.fd: int = ser.fileno()
        os.set_blocking(self.fd, False)
        self._rdev = os.fstat(self.fd).st_rdev

    def read(self, max_wait_s: float) -> bytes:
        """Every byte that arrived, waiting at most ``max_wait_s`` (s) for the first;
        OSError when the port is gone."""
        return read_waiting(self.fd, self.path, self._rdev, max_wait_s)

    def close(self) -> None:
        """Close the port; never raises."""
        with contextlib.suppress(serial.SerialException, OSError):
            self.ser.close()


@dataclass(frozen=True)
class LinkConfig:
    """Deadlines and backoff of one link.

    Attributes:
        read_timeout_s: longest wait of one read of a :class:`SerialPort` when nothing
            arrives (s); a read returns as soon as bytes are there.
        open_timeout_s: deadline for the port to appear and open in
            :meth:`SerialLink.open_link` (s).
        first_valid_timeout_s: deadline for the first valid item after opening (s);
            None to skip the check.
        stale_after_s: silence after which a ``stale`` event is emitted (s).
        backoff_max_s: largest wait between reopen attempts, doubling from 50 ms (s).
        restart_after_s: silence after which the protocol is restarted (s), or None.
    """

    read_timeout_s: float = 0.02
    open_timeout_s: float = 2.0
    first_valid_timeout_s: float | None = 3.5
    stale_after_s: float = 0.5
    backoff_max_s: float = 1.0
    restart_after_s: float | None = None


class SerialLink:
    """Device ``name``'s port (a stable name survives replugs) and its ``protocol`` object
    (which it sets ``link`` of); ``writer`` (or None) receives raw bytes, events and
    decoded data, ``on_event`` every event. ``baud`` and ``kind``: the protocol's by default.
    """

    def __init__(self, name: str, port: str | os.PathLike[str], protocol: DeviceProtocol,
            writer: SessionWriter | None = None, *, baud: int | None = None,
            kind: str | None = None, config: LinkConfig | None = None,
            on_event: EventSink | None = None) -> None:
        config = config or LinkConfig()
        self.name = name
        self.port = os.fspath(port)
        self.protocol = protocol
        self.writer = writer
        self._preamble_due = True  # the protocol's preamble goes before the first stored chunk
        self.baud = int(protocol.baud if baud is None else baud)
        self.kind = kind or protocol.kind
        self.config = config
        self.first_valid_timeout_s = config.first_valid_timeout_s
        self.on_event = on_event
        self.watch = LinkWatch(config.stale_after_s, backoff_max_s=config.backoff_max_s,
            restart_after_s=config.restart_after_s)
        self.overruns = 0  # episodes of more than the protocol's backlog_limit bytes waiting
        self._behind = False  # in such an episode

        self.events: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=1000)
        self.bytes_total = 0
        self.reconnects = 0
        self.unplugs = 0
        self.restarts = 0
        self.reader_failures = 0
        self.reader_down = False  # the reading thread ended on a failure, not on stop()
        self.last_error: str | None = None
        self._refusals: set[str] = set()  # reasons of refused reopens said since the last open
        self.first_valid = threading.Event()
        self.bytes_at_open = 0  # bytes_total when the port was last (re)opened
        self.opened_ns = 0
        self._port: Port | None = None
        self._valid_since_open = False
        self._no_valid_reported = False
        self._lock = threading.Lock()
        self._last_data_ns: int | None = None
        self._rates = RateMeter()
        protocol.link = self

    # -- for the protocol -----------------------------------------------------------

    def event(self, t_ns: int, kind: str, message: str) -> None:
        """Record an event of this device (session, :attr:`events`, ``on_event``)."""
        exc = record_event(self.events, self.writer, self.name, t_ns, kind, message)
        if exc is not None:  # the writer failed (e.g. disk full)
            self.last_error = f"{self.name}: session writer failed: {exc}"
        if kind == "error":
            self.last_error = message
        if self.on_event is not None:
            self.on_event(t_ns, kind, message)

    @property
    def bytes_since_open(self) -> int:
        """Bytes received since the port was last (re)opened."""
        return self.bytes_total - self.bytes_at_open

    # -- the link ---------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while the port is open and its start-up has succeeded."""
        return self._port is not None

    def declare(self, writer: SessionWriter) -> None:
        """Add the raw byte stream (attributes: port, baud, kind and wire protocol) and the
        decoded streams to ``writer`` before it starts."""
        self.writer = writer
        self._preamble_due = True
        attrs: dict[str, Any] = {"port_path": self.port, "baud": self.baud, "kind": self.kind}
        if self.protocol.wire:
            attrs["protocol"] = self.protocol.wire
        writer.add_raw(self.name, attrs=attrs)
        self.protocol.declare_streams(writer)

    def open_link(self) -> None:
        """Open the port through the protocol within ``open_timeout_s``, emit ``start``;
        DriverError when it cannot be opened in time or the start-up failed."""
        port = self._open_with_deadline(self.config.open_timeout_s)
        self.attach(port)
        note = self.protocol.start_note()
        self.event(self.opened_ns, "start", note or f"opened {self.port} at {self.baud} baud")

    def attach(self, port: Port) -> None:
        """Read from ``port`` from now on (opened and started up); silence counts from now."""
        self.opened_ns = time.monotonic_ns()
        self.bytes_at_open = self.bytes_total
        self._valid_since_open = False
        self._no_valid_reported = False
        self._port = port
        self._refusals.clear()
        self.watch.opened(self.opened_ns)

    def poll(self, max_wait_s: float) -> tuple[int, bytes]:
        """One step: read once, or (port gone) make one reopen attempt when it is due.

        Returns ``(t_ns, data)``: the host time of the step and the bytes received
        (empty when nothing came). Waits at most about ``max_wait_s`` (s) plus, on a
        reopen, the protocol's start-up.
        """
        port = self._port
        if port is None:
            now = time.monotonic_ns()
            if self.watch.attempt_due(now):
                if self._reopen():
                    return time.monotonic_ns(), b""
                self.watch.attempt_failed(now)
            time.sleep(min(max_wait_s, self.watch.wait_s(time.monotonic_ns())))
            return time.monotonic_ns(), b""
        try:
            data = port.read(max_wait_s)
        except PORT_GONE as exc:
            self._unplugged(exc)
            return time.monotonic_ns(), b""
        t_ns = time.monotonic_ns()
        backlog = self.protocol.backlog_limit
        if backlog is not None and (self._behind or len(data) > backlog):  # else a no-op
            self._check_backlog(t_ns, len(data), backlog)
        if data:
            self.received(t_ns, data)
        else:
            self._silent(t_ns)
        limit = self.first_valid_timeout_s  # after a reconnect: nothing valid in time, once
        if (self.reconnects and not self._valid_since_open and limit is not None
                and not self._no_valid_reported and (t_ns - self.opened_ns) / 1e9 >= limit):
            self._no_valid_reported = True
            self.event(t_ns, "error", self.no_valid_error(limit, "reopening"))
        return t_ns, data

    def drain(self) -> None:
        """Take what reached the host and is not read yet, without waiting (at a stop: the
        bytes that arrived before it are recorded, however late the reader ran)."""
        port = self._port
        if port is None:
            return
        try:
            data = port.read(0.0)
        except PORT_GONE:
            return
        if data:
            self.received(time.monotonic_ns(), data)

    def received(self, t_ns: int, data: bytes) -> None:
        """Bytes that arrived at ``t_ns``: counted, stored raw, then consumed."""
        with self._lock:
            self.bytes_total += len(data)
            self._last_data_ns = t_ns
        if self.watch.data(t_ns):
            self.event(t_ns, "note", "data resumed")
        if self.writer is not None:
            if self._preamble_due:
                self._preamble_due = False
                for t_pre, pre in self.protocol.take_preamble():
                    self.writer.append_raw(self.name, t_pre, pre)
            self.writer.append_raw(self.name, t_ns, data)
        n_valid = self.protocol.consume(t_ns, data)
        if n_valid:
            self._valid_since_open = True
            if not self.first_valid.is_set():  # set() takes a lock and notifies: once
                self.first_valid.set()

    def close(self) -> None:
        """Close the port (no reopen follows until :meth:`open_link` or :meth:`attach`)."""
        port, self._port = self._port, None
        if port is not None:
            port.close()

    def no_valid_error(self, elapsed_s: float, since: str = "opening") -> str:
        """The message when nothing valid arrived within ``elapsed_s`` (s) of ``since``."""
        return (f"{self.name}: no {self.protocol.valid_item} on {self.port} within "
            f"{elapsed_s:.1f} s of {since} at {self.baud} baud: {self.protocol.diagnose()}")

    def status(self) -> ReaderStatus:
        """Current health snapshot; rates are over the time since the previous call."""
        crc, drops, items, turns = self.protocol.counters()
        with self._lock:
            n_bytes, last = self.bytes_total, self._last_data_ns
        rates = self._rates.rates(n_bytes, items, turns)
        return ReaderStatus(name=self.name, kind=self.kind, port=self.port,
            connected=self.connected, bytes_per_s=rates[0], items_per_s=rates[1],
            turns_per_s=rates[2], crc_errors=crc, drops=drops,
            since_last_data_s=seconds_since(last), reconnects=self.reconnects,
            last_error=self.last_error, reader_failures=self.reader_failures,
            reader_down=self.reader_down, mode=self.protocol.mode_label)

    # -- internals ------------------------------------------------------------------

    def _open_with_deadline(self, timeout_s: float) -> Port:
        deadline = time.monotonic() + timeout_s
        self.watch.lost(time.monotonic_ns())
        while True:
            try:
                return self.protocol.open_port(reopen=False)
            except DeviceUnavailable as exc:
                now = time.monotonic_ns()
                self.watch.attempt_failed(now)
                if time.monotonic() + self.watch.wait_s(now) > deadline:
                    msg = (f"{self.name}: within {timeout_s:.1f} s, {exc}. Check the cable, the "
                        "udev name and that no other program holds the port.")
                    raise DeviceUnavailable(msg) from exc
                time.sleep(self.watch.wait_s(now))

    def _check_backlog(self, t_ns: int, n_read: int, limit: int) -> None:
        """One ``overrun`` per episode of more than ``limit`` bytes waiting (the protocol's
        ``backlog_limit``): a read takes all that waits, so ``n_read`` is the backlog (the
        episode ends below half); :meth:`poll` calls it only in or into an episode."""
        if n_read < limit // 2:
            self._behind = False
        elif n_read > limit and not self._behind:
            self._behind = True
            self.overruns += 1
            self.event(t_ns, "overrun",
                f"host fell behind: {n_read} bytes waiting on {self.port} (kept, not flushed)")

    def _silent(self, t_ns: int) -> None:
        silent_s = self.watch.silent_s(t_ns)
        verdict = self.watch.silence(t_ns)
        if verdict is Silence.STALE:
            self.event(t_ns, "stale", f"no bytes for {silent_s:.2f} s on {self.port}")
        elif verdict is Silence.RESTART:
            self.event(t_ns, "error", f"silent for {silent_s:.1f} s on {self.port}: restarting")
            try:
                self.protocol.restart()
            except DeviceUnplugged as exc:
                self._unplugged(exc)
                return
            except DriverError as exc:
                self.event(time.monotonic_ns(), "error", f"restart after silence failed: {exc}")
                return
            self.restarts += 1

    def _unplugged(self, exc: BaseException) -> None:
        self.close()
        self.unplugs += 1
        self.watch.lost(time.monotonic_ns())
        self.last_error = f"{self.name}: {self.port} went away: {exc}"
        self.event(time.monotonic_ns(), "unplug", self.last_error)
        self.protocol.on_lost()

    def _reopen(self) -> bool:
        if not os.path.exists(self.port):
            return False
        self.protocol.reset()
        try:
            port = self.protocol.open_port(reopen=True)
        except DeviceUnavailable:
            return False
        except DriverError as exc:  # e.g. another unit on the path: said once, then retried
            self.last_error = str(exc)
            if self.last_error not in self._refusals:
                self._refusals.add(self.last_error)
                self.event(time.monotonic_ns(), "error", f"reopen refused, retrying: {exc}")
            return False
        self.attach(port)
        self.reconnects += 1
        note = self.protocol.reopen_note()
        self.event(time.monotonic_ns(), "reconnect", note or f"reopened {self.port}")
        return True
