"""A reusable serial reader thread: open with a deadline, read, stamp, reconnect.

:class:`SerialReader` implements the :class:`~sensorbench.drivers.reader_base.DeviceReader`
protocol for any device on a serial port (USB-UART bridge or emulated pty). It owns
everything that is not protocol-specific:

- opening the port with a deadline, through the one port-opening function
  (:func:`~sensorbench.drivers.serial_port.open_serial`; :class:`DeviceUnavailable`
  if it cannot be opened);
- a thread that reads with a short timeout (``read_timeout_s``), stamps each chunk
  with the host receive time (``time.monotonic_ns()``), hands the raw bytes to the
  session writer (``append_raw``) and then to the protocol hook :meth:`consume`;
  a read never waits longer than ``read_timeout_s``, so the parse is never blocked
  behind a silent port and ``stop()`` returns promptly;
- health: a ``stale`` event after ``stale_after_s`` (0.5 s) without bytes; a deadline
  (``first_valid_timeout_s``, 3.5 s) for the first valid packet after opening, after
  which :meth:`start` raises :class:`DeviceSilent` (no byte) or
  :class:`DeviceProtocolError` (bytes, none valid) built by :meth:`diagnose` (after
  a reconnect the same deadline gives an ``error`` event and ``last_error``);
- a hook that raises (a decoding bug, an impossible value that got through) does not
  end the thread: an ``error`` event names the exception, :attr:`SerialReader.reader_failures`
  counts it, the protocol state is dropped (:meth:`on_reconnect`) and reading resumes
  after a short backoff; only a failed session writer ends the thread (nothing could
  be recorded any more), and a thread that ended is ``reader_down`` in the status;
- unplug (``SerialException`` / ``OSError`` such as EIO): an ``unplug`` event, the
  port is closed, and the thread retries opening the same path with exponential
  backoff (``backoff_s`` up to ``backoff_max_s``) once the path exists again, then a
  ``reconnect`` event and the :meth:`on_reconnect` hook. Silence and backoff are
  decided by the one reconnect machine, :class:`~sensorbench.drivers.link_watch.LinkWatch`,
  which the A1 scanner drives too;
- status snapshots (:class:`ReaderStatus`) computed from counters, thread-safe.

How to subclass (the LD19 reader in ``drivers/ld19_reader.py`` is a complete example)::

    class PodReader(SerialReader):
        kind = "pods"                       # ReaderStatus.kind and event source tag

        def declare_streams(self, writer):  # add the decoded stream(s); raw is added here
            writer.add_encoder(self.name, n_counts=3, attrs={...})

        def on_open(self, ser):             # optional: send start commands, flush input
            ...

        def consume(self, t_ns, data):      # parse; append decoded items to self.writer;
            ...                             # return how many valid packets/frames decoded
            return n_valid

        def on_reconnect(self):             # drop parser state that spans the unplug
            ...

        def diagnose(self):                 # text for "no valid packet within the deadline",
            n = self.bytes_total - self.bytes_at_open   # about what came since (re)opening
            return f"{n} bytes, 0 valid frames: wrong baud rate?"

        def counters(self):                 # (crc_errors, drops, items, turns) since start
            return (...)

Hooks run on the reader thread (``consume``, ``on_open``, ``on_reconnect``) and
must not block. ``counters`` and ``diagnose`` may be called from other threads
and should only read plain attributes. Without a writer (``writer=None``) raw bytes
are not stored and events are kept only in :attr:`events` (the most recent 1000).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import serial

from sensorbench.drivers.link_watch import LinkWatch, Silence
from sensorbench.drivers.reader_base import (
    RateMeter,
    ReaderStatus,
    join_thread,
    record_event,
    seconds_since,
)
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import DeviceProtocolError, DeviceSilent, DeviceUnavailable, DriverError

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


class SerialReader:
    """Base of the serial device readers; subclasses supply the protocol hooks.

    Args:
        name: device name (session stream names, event source).
        port: path to open, preferably the stable name (udev symlink or emulator link).
        baud: line speed (baud).
        writer: session writer receiving raw bytes, events and decoded data, or None.
        read_timeout_s: longest single read wait (s).
        read_size: bytes requested per read (a read returns earlier with what arrived).
        open_timeout_s: deadline for the port to appear and open in :meth:`start` (s).
        first_valid_timeout_s: deadline for the first valid packet after opening (s);
            None to skip the check in :meth:`start`.
        stale_after_s: silence after which a ``stale`` event is emitted (s).
        backoff_s, backoff_max_s: first and largest wait between reopen attempts (s).
        exclusive: ask pyserial for an exclusive lock on the port.
    """

    kind = "serial"

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
        exclusive: bool = True,
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
        self.watch = LinkWatch(stale_after_s, backoff_s, backoff_max_s)

        self.events: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=1000)
        self.bytes_total = 0
        self.valid_total = 0
        self.reconnects = 0
        self.reader_failures = 0
        self._ended_early = False  # the thread ended on a failure, not on stop()
        self.last_error: str | None = None
        self._ser: serial.Serial | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._first_valid = threading.Event()
        self.bytes_at_open = 0  # bytes_total when the port was last (re)opened
        self._open_ns = 0
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

    def on_open(self, ser: serial.Serial) -> None:
        """Called on the reader thread right after each (re)open; e.g. send a start command."""

    def consume(self, t_ns: int, data: bytes) -> int:
        """Parse one received chunk stamped ``t_ns`` (ns); return valid packets decoded."""
        raise NotImplementedError

    def on_reconnect(self) -> None:
        """Reset protocol state that must not span an unplug (called before reading again)."""

    def diagnose(self) -> str:
        """What was seen since the port was (re)opened, for the no-valid-packet error."""
        n = self.bytes_total - self.bytes_at_open
        return f"{n} bytes, 0 valid packets: wrong baud rate or wrong device?"

    def counters(self) -> tuple[int, int, int, int]:
        """(check failures, items known lost, decoded items, complete turns) since start."""
        return (0, 0, 0, 0)

    def final_note(self) -> str | None:
        """What the reader skipped and counted, recorded as a ``note`` event at stop."""
        return None

    # -- DeviceReader protocol ------------------------------------------------------

    def declare(self, writer: SessionWriter) -> None:
        """Add the raw byte stream and the decoded streams to ``writer`` before it starts."""
        self.writer = writer
        writer.add_raw(self.name, attrs=self.raw_attrs())
        self.declare_streams(writer)

    def start(self) -> None:
        """Open the port (within ``open_timeout_s``), start the thread, and wait for data.

        Raises:
            DriverError: the port cannot be opened in time, or (when
                ``first_valid_timeout_s`` is set) no valid packet arrived within it
                after opening; the message says what was seen.
        """
        if self._thread is not None:
            raise DriverError(f"{self.name}: reader already started")
        self._ser = self._open_with_deadline(self.open_timeout_s)
        opened_ns = time.monotonic_ns()
        self._opened(opened_ns)
        self._event(opened_ns, "start", f"opened {self.port} at {self.baud} baud")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"reader-{self.name}", daemon=True)
        self._thread.start()
        if self.first_valid_timeout_s is None:
            return
        if not self._first_valid.wait(self.first_valid_timeout_s):
            elapsed = (time.monotonic_ns() - opened_ns) / 1e9
            msg = (
                f"{self.name}: no valid packet on {self.port} within {elapsed:.1f} s of "
                f"opening at {self.baud} baud: {self.diagnose()}"
            )
            self.last_error = msg
            self._event(time.monotonic_ns(), "error", msg)
            silent = self.bytes_total == self.bytes_at_open
            self.stop()
            raise (DeviceSilent if silent else DeviceProtocolError)(msg)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and close the port within ``timeout_s`` (s)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        stuck = join_thread(thread, self.name, timeout_s)
        if stuck:
            self.last_error = stuck
        self._close()
        if thread is not None:
            note = self.final_note()
            if note:
                self._event(time.monotonic_ns(), "note", note)
            self._event(time.monotonic_ns(), "stop", "reader stopped")

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
            connected=self._ser is not None,
            bytes_per_s=rates[0],
            items_per_s=rates[1],
            turns_per_s=rates[2],
            crc_errors=crc,
            drops=drops,
            since_last_data_s=seconds_since(last),
            reconnects=self.reconnects,
            last_error=self.last_error,
            reader_failures=self.reader_failures,
            reader_down=self._ended_early,
        )

    def __enter__(self) -> SerialReader:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True while the reader thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # -- internals ------------------------------------------------------------------

    def _event(self, t_ns: int, kind: str, message: str) -> None:
        exc = record_event(self.events, self.writer, self.name, t_ns, kind, message)
        if exc is not None:  # the writer failed (e.g. disk full)
            self.last_error = f"{self.name}: session writer failed: {exc}"

    def _try_open(self) -> serial.Serial:
        return open_serial(
            self.port, self.baud, timeout_s=self.read_timeout_s, exclusive=self.exclusive
        )

    def _open_with_deadline(self, timeout_s: float) -> serial.Serial:
        deadline = time.monotonic() + timeout_s
        self.watch.lost(time.monotonic_ns())
        while True:
            try:
                return self._try_open()
            except DeviceUnavailable as exc:
                now = time.monotonic_ns()
                self.watch.attempt_failed(now)
                if time.monotonic() + self.watch.wait_s(now) > deadline:
                    raise DeviceUnavailable(
                        f"{self.name}: within {timeout_s:.1f} s, {exc}. "
                        "Check the cable, the udev name and that no other program holds the port."
                    ) from exc
                time.sleep(self.watch.wait_s(now))

    def _close(self) -> None:
        ser, self._ser = self._ser, None
        if ser is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                ser.close()

    def _run(self) -> None:
        delay = self.watch.backoff_s
        while True:
            try:
                self._loop()
                return
            except Exception as exc:  # a hook bug or a failed writer: never die silently
                self.reader_failures += 1
                writer_failed = self.writer is not None and self.writer.error is not None
                then = "stopped: the session writer failed" if writer_failed else "restarting"
                message = f"{self.name}: reader thread failed: {exc!r}; {then}"
                self._event(time.monotonic_ns(), "error", message)
                self.last_error = message
                if writer_failed:
                    self._ended_early = True
                    self._close()
                    return
            try:
                self.on_reconnect()  # the state of the failed read cannot be trusted
            except Exception as exc:
                message = f"{self.name}: reader cannot restart: {exc!r}"
                self._event(time.monotonic_ns(), "error", message)
                self.last_error = message
                self._ended_early = True
                self._close()
                return
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, self.watch.backoff_max_s)

    def _loop(self) -> None:
        ser = self._ser
        self.watch.opened(time.monotonic_ns())
        if ser is not None:
            self.on_open(ser)
        while not self._stop.is_set():
            ser = self._ser
            if ser is None:
                now = time.monotonic_ns()
                if self.watch.attempt_due(now):
                    if self._reopen():
                        continue
                    self.watch.attempt_failed(now)
                self._stop.wait(self.watch.wait_s(time.monotonic_ns()))
                continue
            try:
                data = ser.read(self.read_size)
            except (serial.SerialException, OSError, TypeError) as exc:
                # pyserial raises TypeError when the fd vanishes under a read in progress
                self._unplugged(exc)
                continue
            t_ns = time.monotonic_ns()
            if data:
                self._received(t_ns, data)
            else:
                self._check_stale(t_ns)
            if self.reconnects and not self._valid_since_open:
                self._check_first_valid(t_ns)

    def _opened(self, t_ns: int) -> None:
        self._open_ns = t_ns
        self.bytes_at_open = self.bytes_total
        self._valid_since_open = False
        self._no_valid_reported = False

    def _check_first_valid(self, t_ns: int) -> None:
        """After a reconnect: report (once) a device that sends nothing valid in time."""
        limit = self.first_valid_timeout_s
        if limit is None or self._no_valid_reported or (t_ns - self._open_ns) / 1e9 < limit:
            return
        self._no_valid_reported = True
        self.last_error = (
            f"{self.name}: no valid packet on {self.port} within {limit:.1f} s of reopening "
            f"at {self.baud} baud: {self.diagnose()}"
        )
        self._event(t_ns, "error", self.last_error)

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
            self._first_valid.set()

    def _check_stale(self, t_ns: int) -> None:
        if self.watch.silence(t_ns) is Silence.STALE:
            self._event(
                t_ns, "stale", f"no bytes for {self.watch.silent_s(t_ns):.2f} s on {self.port}"
            )

    def _unplugged(self, exc: BaseException) -> None:
        self._close()
        self.watch.lost(time.monotonic_ns())
        self.last_error = f"{self.name}: {self.port} went away: {exc}"
        self._event(time.monotonic_ns(), "unplug", self.last_error)

    def _reopen(self) -> bool:
        if not os.path.exists(self.port):
            return False
        try:
            ser = self._try_open()
        except DeviceUnavailable:
            return False
        self.on_reconnect()
        self._opened(time.monotonic_ns())
        self._ser = ser
        self.reconnects += 1
        self.watch.opened(time.monotonic_ns())
        self._event(time.monotonic_ns(), "reconnect", f"reopened {self.port}")
        self.on_open(ser)
        return True
