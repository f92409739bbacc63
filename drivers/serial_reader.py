"""The one reader of every serial device: a link run on a thread of its own."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from sensorbench.drivers.reader_base import join_thread
from sensorbench.errors import DeviceProtocolError, DeviceSilent, DriverError

if TYPE_CHECKING:
    from sensorbench.drivers.reader_base import ReaderStatus
    from sensorbench.drivers.serial_link import SerialLink
    from sensorbench.logs import SessionWriter


class SerialReader:
    """Runs ``link.poll`` on a thread of its own, ``poll_s`` (s; the link's
    ``read_timeout_s`` by default) at most per step, bounding how fast :meth:`stop` is seen.

    A raising hook is an ``error`` event, the protocol is reset and reading resumes
    after a backoff; only a failed session writer ends the thread.
    """

    def __init__(self, link: SerialLink, poll_s: float | None = None) -> None:
        self.link = link
        self.name = link.name
        self.poll_s = link.config.read_timeout_s if poll_s is None else poll_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.protocol = link.protocol  # the device's protocol object
        self.events = link.events  # the link's most recent events (t_ns, kind, message)

    def declare(self, writer: SessionWriter) -> None:
        """Add the device's raw and decoded streams to ``writer`` before it starts."""
        self.link.declare(writer)

    def status(self) -> ReaderStatus:
        """Health snapshot; rates over the time since the previous call."""
        return self.link.status()

    def start(self) -> None:
        """Open the link (unless it is open), start the thread, and wait for data; DriverError,
        saying what was seen, when the port cannot be opened in time, its start-up failed
        or nothing valid arrived within the link's ``first_valid_timeout_s``."""
        link = self.link
        if self._thread is not None:
            raise DriverError(f"{link.name}: reader already started")
        if not link.connected:
            link.open_link()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"reader-{link.name}", daemon=True)
        self._thread.start()
        limit = link.first_valid_timeout_s
        if limit is None or link.first_valid.wait(limit):
            return
        msg = link.no_valid_error((time.monotonic_ns() - link.opened_ns) / 1e9)
        link.event(time.monotonic_ns(), "error", msg)
        silent = link.bytes_since_open == 0
        self.stop()
        raise (DeviceSilent if silent else DeviceProtocolError)(msg)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and close the link within ``timeout_s`` (s)."""
        link = self.link
        self._stop.set()
        thread, self._thread = self._thread, None
        stuck = join_thread(thread, link.name, timeout_s)
        if stuck:
            link.last_error = stuck
        link.close()
        if thread is not None:
            note = link.protocol.final_note()
            if note:
                link.event(time.monotonic_ns(), "note", note)
            link.event(time.monotonic_ns(), "stop", "reader stopped")

    @property
    def running(self) -> bool:
        """True while the reader thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> SerialReader:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        link = self.link
        delay = link.watch.backoff_s
        while True:
            try:
                while not self._stop.is_set():
                    link.poll(self.poll_s)
                link.drain()
                return
            except Exception as exc:  # a hook bug or a failed writer: never die silently
                link.reader_failures += 1
                writer_failed = link.writer is not None and link.writer.error is not None
                then = "stopped: the session writer failed" if writer_failed else "restarting"
                link.event(time.monotonic_ns(), "error",
                    f"{link.name}: reader thread failed: {exc!r}; {then}")
                if writer_failed:
                    self._end_early()
                    return
            try:
                link.protocol.reset()  # the state of the failed read cannot be trusted
            except Exception as exc:
                link.event(time.monotonic_ns(), "error",
                    f"{link.name}: reader cannot restart: {exc!r}")
                self._end_early()
                return
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, link.watch.backoff_max_s)

    def _end_early(self) -> None:
        self.link.reader_down = True
        self.link.close()
