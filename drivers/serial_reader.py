"""The one reader thread of every serial device, and the stream-only reader base.

:class:`ReaderThread` is the thread half of pyserial's ``threaded.ReaderThread`` /
``threaded.Protocol`` pair: it runs :meth:`SerialLink.poll
<sensorbench.drivers.serial_link.SerialLink.poll>` of one link in a loop until
stopped, for the LD19, the pods and the A1 alike. The link
(:mod:`~sensorbench.drivers.serial_link`) owns the port, the stamping, the raw
stream, stale/unplug/reconnect/overrun events and the status; the thread owns:

- :meth:`ReaderThread.start`: open the link if it is not open yet (a link already
  started, e.g. an A1 the power-up sequencer left spinning, is taken over as it is),
  start the thread, and wait for the first valid item within the link's
  ``first_valid_timeout_s``; past it :meth:`start` raises :class:`DeviceSilent` (no
  byte since opening) or :class:`DeviceProtocolError` (bytes, none valid), with the
  link's :meth:`diagnose` in the message;
- a hook that raises (a decoding bug, an impossible value that got through) does not
  end the thread: an ``error`` event names the exception, ``reader_failures`` counts
  it, the protocol state is dropped (``on_reconnect``) and reading resumes after a
  short backoff; only a failed session writer ends the thread (nothing could be
  recorded any more), and a thread that ended is ``reader_down`` in the status;
- :meth:`ReaderThread.stop`: stop within a deadline (a thread stuck in a driver call
  is reported in ``last_error``), close the link, record the final note and ``stop``.

:class:`SerialReader` is a link that runs itself on a :class:`ReaderThread`: the base
of the stream-only readers. How to subclass (the LD19 reader in
``drivers/ld19_reader.py`` is a complete example)::

    class PodReader(SerialReader):
        kind = "pods"                       # ReaderStatus.kind and event source tag

        def declare_streams(self, writer):  # add the decoded stream(s); raw is added here
            writer.add_encoder(self.name, n_counts=3, attrs={...})

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

The other hooks (``open_port``, ``on_open``, ``read_chunk``, ``on_lost``, ``restart``)
are described in :mod:`~sensorbench.drivers.serial_link`; the A1 uses them. Without
a writer (``writer=None``) raw bytes are not stored and events are kept only in
``events`` (the most recent 1000).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sensorbench.drivers.reader_base import join_thread
from sensorbench.drivers.serial_link import SerialLink
from sensorbench.errors import DeviceProtocolError, DeviceSilent, DriverError


class ReaderThread:
    """Runs ``link.poll`` on a thread of its own (see the module docstring).

    Args:
        link: the device's link (port and protocol).
        poll_s: longest wait of one step (s); bounds how fast :meth:`stop` is seen.
    """

    def __init__(self, link: SerialLink, poll_s: float) -> None:
        self.link = link
        self.poll_s = poll_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Open the link (unless it is open), start the thread, and wait for data.

        Raises:
            DriverError: the port cannot be opened in time or its start-up failed, or
                (when the link's ``first_valid_timeout_s`` is set) nothing valid
                arrived within it; the message says what was seen.
        """
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
        link._event(time.monotonic_ns(), "error", msg)
        silent = link.bytes_total == link.bytes_at_open
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
            note = link.final_note()
            if note:
                link._event(time.monotonic_ns(), "note", note)
            link._event(time.monotonic_ns(), "stop", "reader stopped")

    @property
    def running(self) -> bool:
        """True while the reader thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> ReaderThread:
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
                return
            except Exception as exc:  # a hook bug or a failed writer: never die silently
                link.reader_failures += 1
                writer_failed = link.writer is not None and link.writer.error is not None
                then = "stopped: the session writer failed" if writer_failed else "restarting"
                link._event(
                    time.monotonic_ns(),
                    "error",
                    f"{link.name}: reader thread failed: {exc!r}; {then}",
                )
                if writer_failed:
                    self._end_early()
                    return
            try:
                link.on_reconnect()  # the state of the failed read cannot be trusted
            except Exception as exc:
                link._event(
                    time.monotonic_ns(), "error", f"{link.name}: reader cannot restart: {exc!r}"
                )
                self._end_early()
                return
            if self._stop.wait(delay):
                return
            delay = min(delay * 2, link.watch.backoff_max_s)

    def _end_early(self) -> None:
        self.link.reader_down = True
        self.link.close()


class SerialReader(SerialLink, ReaderThread):
    """Base of the stream-only serial device readers: a link on its own reader thread.

    Args: as :class:`~sensorbench.drivers.serial_link.SerialLink`; each step of the
    thread waits at most ``read_timeout_s``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        SerialLink.__init__(self, *args, **kwargs)
        ReaderThread.__init__(self, self, self.read_timeout_s)

    def __enter__(self) -> SerialReader:
        self.start()
        return self
