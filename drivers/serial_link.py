"""The serial transport of every device: one port, one step of reading, the protocol on top.

:class:`SerialLink` is the transport half of pyserial's ``threaded.ReaderThread`` /
``threaded.Protocol`` pair, without the thread (that is
:class:`~sensorbench.drivers.serial_reader.ReaderThread`). It owns everything that
is not protocol-specific, once for the LD19, the pods and the A1:

- opening the port with a deadline, through the one port-opening function
  (:func:`~sensorbench.drivers.serial_port.open_serial`; :class:`DeviceUnavailable`
  if it cannot be opened) or the protocol's :meth:`SerialLink.open_port`;
- :meth:`SerialLink.poll`, one step: read what arrived (the wait bounded by the
  caller), stamp it with the host receive time (``time.monotonic_ns()``), hand the
  raw bytes to the session writer (``append_raw``) and then to the protocol hook
  :meth:`~SerialLink.consume`; or, while the port is gone, one reopen attempt;
- health: a ``stale`` event after ``stale_after_s`` without bytes, a ``note`` when data
  resumes, and (with ``restart_after_s``) the protocol's :meth:`~SerialLink.restart`
  after a longer silence; an ``overrun`` event when more than ``backlog_limit`` bytes
  wait in the port (counted in :attr:`SerialLink.overruns`, nothing discarded); a
  deadline (``first_valid_timeout_s``) for the first valid item after a reopen (an
  ``error`` event and ``last_error``);
- unplug (``SerialException`` / ``OSError`` such as EIO, or
  :class:`~sensorbench.errors.DeviceUnplugged` from a protocol's request): an
  ``unplug`` event, the port is closed, :meth:`~SerialLink.on_lost` is called, and
  the link retries opening the same path with exponential backoff (``backoff_s`` up
  to ``backoff_max_s``) once the path exists again; a reopen runs
  :meth:`~SerialLink.on_reconnect` and :meth:`~SerialLink.on_open` (a request/response
  start-up may fail there: then the attempt failed and is retried later), then a
  ``reconnect`` event. Silence and backoff are decided by the one reconnect machine,
  :class:`~sensorbench.drivers.link_watch.LinkWatch`;
- events (kept in :attr:`SerialLink.events`, the most recent 1000, written to the
  session and passed to ``on_event``) and status snapshots (:class:`ReaderStatus`).

A protocol subclasses it and overrides the hooks; the LD19 and the pods are
stream-only (``consume`` parses what arrived), the A1
(:class:`~sensorbench.drivers.a1_scanner.A1Scanner`) also overrides ``open_port``,
``close_port``, ``waiting``, ``open_link`` and ``on_open`` (identify, health, start
the scan with rplidar-roboticia's request/response calls on the open port, at the
start and after each reopen), ``read_chunk``, ``on_lost`` and ``restart``. Hooks run
on the thread that calls :meth:`~SerialLink.poll` and must not block longer than one
request; ``counters`` and ``diagnose`` may be called from other threads and should
only read plain attributes.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import serial

from sensorbench.drivers.link_watch import Backlog, LinkWatch, Silence
from sensorbench.drivers.reader_base import RateMeter, ReaderStatus, record_event, seconds_since
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import DeviceUnavailable, DeviceUnplugged, DriverError

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter

EventSink = Callable[[int, str, str], None]
"""``sink(t_ns, kind, message)``; kinds as in the session event table."""

PORT_GONE = (serial.SerialException, OSError, TypeError, DeviceUnplugged)
"""What a read of a port that went away raises (pyserial raises TypeError when the fd
vanishes under a read in progress; a protocol's request raises DeviceUnplugged)."""


class SerialLink:
    """One device's port and its protocol hooks (see the module docstring).

    Args:
        name: device name (session stream names, event source).
        port: path to open, preferably the stable name (udev symlink or emulator link).
        baud: line speed (baud).
        writer: session writer receiving raw bytes, events and decoded data, or None.
        read_timeout_s: longest wait of one read of the port (s).
        read_size: bytes requested per read (a read returns earlier with what arrived).
        open_timeout_s: deadline for the port to appear and open in :meth:`open_link` (s).
        first_valid_timeout_s: deadline for the first valid item after opening (s);
            None to skip the check.
        stale_after_s: silence after which a ``stale`` event is emitted (s).
        backoff_s, backoff_max_s: first and largest wait between reopen attempts (s).
        restart_after_s: silence after which the protocol is restarted (s), or None.
        exclusive: ask pyserial for an exclusive lock on the port.
        on_event: optional ``sink(t_ns, kind, message)`` called with every event.
    """

    kind = "serial"
    valid_item = "valid packet"
    """What :meth:`consume` counts, as the no-valid-data error names it."""
    backlog_limit: int | None = None
    """Bytes waiting in the port beyond which an ``overrun`` is reported, or None
    (asking costs an ioctl that some emulated ttys do not support)."""

    def __init__(
        self,
        name: str,
        port: str | os.PathLike[str],
        baud: int,
        writer: SessionWriter | None = None,
        *,
        read_timeout_s: float = 0.02,
        read_size: int = 4096,
        open_timeout_s: float = 2.0,
        first_valid_timeout_s: float | None = 3.5,
        stale_after_s: float = 0.5,
        backoff_s: float = 0.05,
        backoff_max_s: float = 1.0,
        restart_after_s: float | None = None,
        exclusive: bool = True,
        on_event: EventSink | None = None,
    ) -> None:
        self.name = name
        self.port = os.fspath(port)
        self.baud = int(baud)
        self.writer = writer
        self.read_timeout_s = read_timeout_s
        self.read_size = read_size
        self.open_timeout_s = open_timeout_s
        self.first_valid_timeout_s = first_valid_timeout_s
        self.exclusive = exclusive
        self.on_event = on_event
        self.watch = LinkWatch(stale_after_s, backoff_s, backoff_max_s, restart_after_s)
        self.backlog = Backlog(self.backlog_limit)

        self.events: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=1000)
        self.bytes_total = 0
        self.valid_total = 0
        self.reconnects = 0
        self.unplugs = 0
        self.restarts = 0
        self.reader_failures = 0
        self.reader_down = False  # the reading thread ended on a failure, not on stop()
        self.last_error: str | None = None
        self.first_valid = threading.Event()
        self.bytes_at_open = 0  # bytes_total when the port was last (re)opened
        self.opened_ns = 0
        self._ser: serial.Serial | None = None
        self._valid_since_open = False
        self._no_valid_reported = False
        self._lock = threading.Lock()
        self._last_data_ns: int | None = None
        self._rates = RateMeter()

    # -- hooks (override) ------------------------------------------------------------

    def declare_streams(self, writer: SessionWriter) -> None:
        """Add the decoded data streams of this device to ``writer`` (raw is added by the base)."""

    def raw_attrs(self) -> dict[str, Any]:
        """Attributes of the raw byte stream."""
        return {"port_path": self.port, "baud": self.baud, "kind": self.kind}

    def open_port(self) -> serial.Serial:
        """Open the port once (no retry); raises :class:`DeviceUnavailable`."""
        return open_serial(
            self.port, self.baud, timeout_s=self.read_timeout_s, exclusive=self.exclusive
        )

    def close_port(self, ser: serial.Serial) -> None:
        """Close the port; never raises (an unplugged port may fail to close)."""
        with contextlib.suppress(serial.SerialException, OSError):
            ser.close()

    def on_open(self, ser: serial.Serial) -> None:
        """Called right after each open, before data is read; e.g. a start-up exchange.

        Raises:
            DriverError: the device is not ready; after a reopen the attempt counts as
                failed and is retried with backoff.
        """

    def read_chunk(self, ser: serial.Serial, max_wait_s: float) -> bytes:
        """Read what arrived, waiting at most about ``max_wait_s`` (s) for it."""
        return ser.read(self.read_size)

    def waiting(self, ser: serial.Serial) -> int:
        """Bytes received and not yet read (asked only with a ``backlog_limit``)."""
        return int(ser.in_waiting)

    def consume(self, t_ns: int, data: bytes) -> int:
        """Parse one received chunk stamped ``t_ns`` (ns); return valid items decoded."""
        raise NotImplementedError

    def on_lost(self) -> None:
        """The port went away: flush what the loss cut (called after the port closed)."""

    def on_reconnect(self) -> None:
        """Reset protocol state that must not span an unplug or a failed read."""

    def restart(self, ser: serial.Serial) -> serial.Serial:
        """Restart the protocol after ``restart_after_s`` of silence; return the port
        to read from (the same, or one the protocol reopened)."""
        return ser

    def start_note(self) -> str:
        """The message of the ``start`` event."""
        return f"opened {self.port} at {self.baud} baud"

    def reopen_note(self) -> str:
        """The message of a ``reconnect`` event."""
        return f"reopened {self.port}"

    def diagnose(self) -> str:
        """What was seen since the port was (re)opened, for the no-valid-data error."""
        n = self.bytes_total - self.bytes_at_open
        return f"{n} bytes, 0 valid packets: wrong baud rate or wrong device?"

    def counters(self) -> tuple[int, int, int, int]:
        """(check failures, items known lost, decoded items, complete turns) since start."""
        return (0, 0, 0, 0)

    def final_note(self) -> str | None:
        """What the reader skipped and counted, recorded as a ``note`` event at stop."""
        return None

    # -- the link ---------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while the port is open and its start-up has succeeded."""
        return self._ser is not None

    def declare(self, writer: SessionWriter) -> None:
        """Add the raw byte stream and the decoded streams to ``writer`` before it starts."""
        self.writer = writer
        writer.add_raw(self.name, attrs=self.raw_attrs())
        self.declare_streams(writer)

    def open_link(self) -> None:
        """Open the port within ``open_timeout_s``, run :meth:`on_open`, emit ``start``.

        Raises:
            DriverError: the port cannot be opened in time, or the start-up failed.
        """
        ser = self._open_with_deadline(self.open_timeout_s)
        try:
            self.on_open(ser)
        except BaseException:
            self.close_port(ser)
            raise
        self.attach(ser)
        self._event(self.opened_ns, "start", self.start_note())

    def attach(self, ser: serial.Serial) -> None:
        """Read from ``ser`` from now on (opened and started up); silence counts from now."""
        self.opened_ns = time.monotonic_ns()
        self.bytes_at_open = self.bytes_total
        self._valid_since_open = False
        self._no_valid_reported = False
        self._ser = ser
        self.watch.opened(self.opened_ns)

    def poll(self, max_wait_s: float) -> tuple[int, bytes]:
        """One step: read once, or (port gone) make one reopen attempt when it is due.

        Returns ``(t_ns, data)``: the host time of the step and the bytes received
        (empty when nothing came). Waits at most about ``max_wait_s`` (s) plus, on a
        reopen, the protocol's start-up.
        """
        ser = self._ser
        if ser is None:
            now = time.monotonic_ns()
            if self.watch.attempt_due(now):
                if self._reopen():
                    return time.monotonic_ns(), b""
                self.watch.attempt_failed(now)
            time.sleep(min(max_wait_s, self.watch.wait_s(time.monotonic_ns())))
            return time.monotonic_ns(), b""
        try:
            self._check_backlog(ser)
            data = self.read_chunk(ser, max_wait_s)
        except PORT_GONE as exc:
            self._unplugged(exc)
            return time.monotonic_ns(), b""
        t_ns = time.monotonic_ns()
        if data:
            self._received(t_ns, data)
        else:
            self._silent(t_ns, ser)
        if self.reconnects and not self._valid_since_open:
            self._check_first_valid(t_ns)
        return t_ns, data

    def close(self) -> None:
        """Close the port (no reopen follows until :meth:`open_link` or :meth:`attach`)."""
        self._drop_port()

    def no_valid_error(self, elapsed_s: float) -> str:
        """The message when nothing valid arrived within ``elapsed_s`` (s) of opening."""
        return (
            f"{self.name}: no {self.valid_item} on {self.port} within {elapsed_s:.1f} s of "
            f"opening at {self.baud} baud: {self.diagnose()}"
        )

    def status(self) -> ReaderStatus:
        """Current health snapshot; rates are over the time since the previous call."""
        crc, drops, items, turns = self.counters()
        with self._lock:
            n_bytes, last = self.bytes_total, self._last_data_ns
        rates = self._rates.rates(n_bytes, items, turns)
        return ReaderStatus(
            name=self.name,
            kind=self.kind,
            port=self.port,
            connected=self.connected,
            bytes_per_s=rates[0],
            items_per_s=rates[1],
            turns_per_s=rates[2],
            crc_errors=crc,
            drops=drops,
            since_last_data_s=seconds_since(last),
            reconnects=self.reconnects,
            last_error=self.last_error,
            reader_failures=self.reader_failures,
            reader_down=self.reader_down,
        )

    @property
    def overruns(self) -> int:
        """Backlogs beyond ``backlog_limit`` bytes (counted, nothing dropped)."""
        return self.backlog.overruns

    # -- internals ------------------------------------------------------------------

    def _event(self, t_ns: int, kind: str, message: str) -> None:
        exc = record_event(self.events, self.writer, self.name, t_ns, kind, message)
        if exc is not None:  # the writer failed (e.g. disk full)
            self.last_error = f"{self.name}: session writer failed: {exc}"
        if kind == "error":
            self.last_error = message
        if self.on_event is not None:
            self.on_event(t_ns, kind, message)

    def _open_with_deadline(self, timeout_s: float) -> serial.Serial:
        deadline = time.monotonic() + timeout_s
        self.watch.lost(time.monotonic_ns())
        while True:
            try:
                return self.open_port()
            except DeviceUnavailable as exc:
                now = time.monotonic_ns()
                self.watch.attempt_failed(now)
                if time.monotonic() + self.watch.wait_s(now) > deadline:
                    raise DeviceUnavailable(
                        f"{self.name}: within {timeout_s:.1f} s, {exc}. "
                        "Check the cable, the udev name and that no other program holds the port."
                    ) from exc
                time.sleep(self.watch.wait_s(now))

    def _drop_port(self) -> None:
        ser, self._ser = self._ser, None
        if ser is not None:
            self.close_port(ser)

    def _check_backlog(self, ser: serial.Serial) -> None:
        if self.backlog.limit is None:
            return
        waiting = self.waiting(ser)
        if self.backlog.check(waiting):
            self._event(
                time.monotonic_ns(),
                "overrun",
                f"host fell behind: {waiting} bytes waiting on {self.port} (kept, not flushed)",
            )

    def _check_first_valid(self, t_ns: int) -> None:
        """After a reconnect: report (once) a device that sends nothing valid in time."""
        limit = self.first_valid_timeout_s
        if limit is None or self._no_valid_reported or (t_ns - self.opened_ns) / 1e9 < limit:
            return
        self._no_valid_reported = True
        self._event(
            t_ns,
            "error",
            f"{self.name}: no {self.valid_item} on {self.port} within {limit:.1f} s of "
            f"reopening at {self.baud} baud: {self.diagnose()}",
        )

    def _received(self, t_ns: int, data: bytes) -> None:
        with self._lock:
            self.bytes_total += len(data)
            self._last_data_ns = t_ns
        if self.watch.data(t_ns):
            self._event(t_ns, "note", "data resumed")
        if self.writer is not None:
            self.writer.append_raw(self.name, t_ns, data)
        n_valid = self.consume(t_ns, data)
        if n_valid:
            self.valid_total += n_valid
            self._valid_since_open = True
            self.first_valid.set()

    def _silent(self, t_ns: int, ser: serial.Serial) -> None:
        silent_s = self.watch.silent_s(t_ns)
        verdict = self.watch.silence(t_ns)
        if verdict is Silence.STALE:
            self._event(t_ns, "stale", f"no bytes for {silent_s:.2f} s on {self.port}")
        elif verdict is Silence.RESTART:
            self._event(t_ns, "error", f"silent for {silent_s:.1f} s on {self.port}: restarting")
            try:
                self._ser = self.restart(ser)
            except DeviceUnplugged as exc:
                self._unplugged(exc)
                return
            except DriverError as exc:
                self._event(time.monotonic_ns(), "error", f"restart after silence failed: {exc}")
                return
            self.restarts += 1

    def _unplugged(self, exc: BaseException) -> None:
        self._drop_port()
        self.unplugs += 1
        self.watch.lost(time.monotonic_ns())
        self.last_error = f"{self.name}: {self.port} went away: {exc}"
        self._event(time.monotonic_ns(), "unplug", self.last_error)
        self.on_lost()

    def _reopen(self) -> bool:
        if not os.path.exists(self.port):
            return False
        try:
            ser = self.open_port()
        except DeviceUnavailable:
            return False
        self.on_reconnect()
        try:
            self.on_open(ser)
        except DriverError as exc:
            self.close_port(ser)
            self.last_error = str(exc)
            return False
        self.attach(ser)
        self.reconnects += 1
        self._event(time.monotonic_ns(), "reconnect", self.reopen_note())
        return True
