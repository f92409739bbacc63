"""Live RPLIDAR A1 reader for capture: raw bytes, turns and events to the session writer.

:class:`A1Reader` implements the :class:`~sensorbench.drivers.reader_base.DeviceReader`
protocol on top of :class:`~sensorbench.drivers.a1.A1Scanner`. The A1 is a
request/response device (identify, health, reset, start scan) before it streams,
so it does not use the stream-only :mod:`~sensorbench.drivers.serial_reader` base; it
keeps the same behaviour: one thread per device, every read bounded by a short
timeout, raw bytes stamped with ``time.monotonic_ns()`` on arrival, ``stale`` /
``unplug`` / ``reconnect`` / ``overrun`` events, and :meth:`A1Reader.start` failing
with a :class:`~sensorbench.errors.DriverError` when no complete turn arrives in time.
A poll that raises does not end the thread: an ``error`` event names the exception,
:attr:`A1Reader.reader_failures` counts it, the turn in progress is dropped and
polling resumes after a short backoff (the device's bytes wait in the port buffer);
only a failed session writer ends it.

Streams declared: ``lidar/<name>`` (turns: angle rad CCW, range m with ``inf`` for no
return, quality 0..63 as intensity, host time; device time from the node count and
the unit's sample duration where it reports one (:mod:`~sensorbench.drivers.a1_clock`);
no reported speed)
and ``raw/<name>`` (every received byte, the scan descriptor included).

A scanner already brought up by the power-up sequencer (spinning) can be handed
over with ``scanner=``; then the device's serial and firmware are known before
:meth:`declare` and stored in the stream attributes.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Any

from sensorbench.drivers.a1 import A1Scanner
from sensorbench.drivers.a1_clock import describe as describe_clock
from sensorbench.drivers.reader_base import (
    RateMeter,
    ReaderStatus,
    join_thread,
    record_event,
    seconds_since,
)
from sensorbench.errors import DriverError
from sensorbench.logs import TurnFlag

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


class A1Reader:
    """One A1 in a capture session.

    Args:
        name: device name (stream names and event source).
        port: device path, preferably the stable udev name.
        writer: session writer (or set by :meth:`declare`); None keeps events only.
        attrs: extra lidar stream attributes (``frame``, ``mount_xy_yaw``...).
        scanner: an already started scanner to take over (from the sequencer).
        read_timeout_s: deadline of each request to the device (s).
        first_turn_timeout_s: deadline for the first complete turn in :meth:`start` (s);
            None to skip the check.
        stale_after_s, restart_after_s: silence before a ``stale`` event, and before the
            scan is restarted (s).
    """

    kind = "a1"

    def __init__(
        self,
        name: str,
        port: str,
        writer: SessionWriter | None = None,
        attrs: dict[str, Any] | None = None,
        scanner: A1Scanner | None = None,
        read_timeout_s: float = 1.0,
        first_turn_timeout_s: float | None = 5.0,
        stale_after_s: float = 0.5,
        restart_after_s: float = 3.0,
    ) -> None:
        self.name = name
        self.port = str(port)
        self.writer = writer
        self.attrs = dict(attrs or {})
        self.first_turn_timeout_s = first_turn_timeout_s
        self.events: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=1000)
        self.scanner = scanner or A1Scanner(
            self.port,
            read_timeout_s=read_timeout_s,
            stale_after_s=stale_after_s,
            restart_after_s=restart_after_s,
        )
        self.scanner.on_event = self._event
        if self.scanner.lidar is not None:
            self.scanner.lidar.on_event = self._event
        self.turns_total = 0
        self.points_total = 0
        self.crc_turns = 0
        self.reader_failures = 0
        self._ended_early = False  # the thread ended on a failure, not on stop()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._first_turn = threading.Event()
        self._lock = threading.Lock()
        self._rates = RateMeter()
        self._taken_over = scanner is not None and scanner.connected

    # -- DeviceReader protocol --------------------------------------------------------

    def declare(self, writer: SessionWriter) -> None:
        """Add ``lidar/<name>`` and ``raw/<name>`` to ``writer`` before it starts."""
        self.writer = writer
        info = self.scanner.info
        device = {}
        if info is not None:
            device = {
                "serial": info.serial,
                "firmware": f"{info.firmware[0]}.{info.firmware[1]:02d}",
                "hardware": info.hardware,
                "model_id": info.model,
            }
        device_time = (
            describe_clock(self.scanner.sample_rate)
            if info is not None
            else "node count x standard sample duration (GET_SAMPLERATE) where the unit "
            "reports it (turns with device_ns), else none"
        )
        writer.add_lidar(
            self.name,
            attrs={
                "model": "A1",
                "port_path": self.port,
                "intensity": "quality 0..63",
                "device_time": device_time,
                "native_units": "angle q6 degrees clockwise, distance q2 mm (converted once)",
                **device,
                **self.attrs,
            },
        )
        writer.add_raw(
            self.name,
            attrs={"port_path": self.port, "baud": 115200, "kind": "a1", "protocol": "rplidar"},
        )

    def start(self) -> None:
        """Open, identify, check health, start the scan and the thread; wait for a turn.

        Raises:
            DriverError: the device cannot be opened, is silent, unhealthy after a
                reset, or sends no complete turn within ``first_turn_timeout_s``.
        """
        if self._thread is not None:
            raise DriverError(f"{self.name}: reader already started")
        if not self._taken_over:
            info = self.scanner.open()
            self._event(
                time.monotonic_ns(),
                "start",
                f"A1 model {info.model} firmware {info.firmware[0]}.{info.firmware[1]:02d} "
                f"hardware {info.hardware} serial {info.serial} on {self.port}",
            )
            self.scanner.start()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"a1-{self.name}", daemon=True)
        self._thread.start()
        if self.first_turn_timeout_s is None:
            return
        if not self._first_turn.wait(self.first_turn_timeout_s):
            msg = (
                f"{self.name}: no complete turn from the A1 on {self.port} within "
                f"{self.first_turn_timeout_s:.1f} s ({self.scanner.bytes_total} bytes, "
                f"{self.scanner.nodes_total} nodes): is the motor spinning (DTR) and the "
                "supply strong enough?"
            )
            self._event(time.monotonic_ns(), "error", msg)
            self.stop()
            raise DriverError(msg)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (a thread still running after ``timeout_s`` s is reported in
        the status), stop the scan and the motor, close the port."""
        self._stop.set()
        thread, self._thread = self._thread, None
        stuck = join_thread(thread, self.name, timeout_s)
        if stuck:
            self.scanner.last_error = stuck
        self.scanner.close()
        if thread is not None:
            asm = self.scanner.assembler
            self._event(
                time.monotonic_ns(),
                "note",
                f"decoded {self.scanner.nodes_total} nodes; skipped: "
                f"bytes_skipped={self.scanner.bytes_skipped} "
                f"nodes_dropped={asm.nodes_dropped} (angle >= 360 deg); "
                f"ranges_beyond_limit={asm.ranges_beyond_limit} (stored as nan)",
            )
            self._event(time.monotonic_ns(), "stop", "reader stopped")

    def status(self) -> ReaderStatus:
        """Health snapshot; rates over the time since the previous call."""
        sc = self.scanner
        with self._lock:
            points, turns = self.points_total, self.turns_total
        rates = self._rates.rates(sc.bytes_total, points, turns)
        return ReaderStatus(
            name=self.name,
            kind=self.kind,
            port=self.port,
            connected=sc.online,
            bytes_per_s=rates[0],
            items_per_s=rates[1],
            turns_per_s=rates[2],
            crc_errors=self.crc_turns,
            drops=sc.bytes_skipped // 5,
            since_last_data_s=seconds_since(sc.last_data_ns),
            reconnects=sc.reconnects,
            last_error=sc.last_error,
            reader_failures=self.reader_failures,
            reader_down=self._ended_early,
        )

    def __enter__(self) -> A1Reader:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------

    def _event(self, t_ns: int, kind: str, message: str) -> None:
        exc = record_event(self.events, self.writer, self.name, t_ns, kind, message)
        if exc is not None:  # the writer failed (e.g. disk full): keep it in status
            self.scanner.last_error = f"{self.name}: cannot record event {kind!r}: {exc}"

    def _run(self) -> None:
        delay = 0.05
        while True:
            try:
                self._poll_until_stopped()
                return
            except Exception as exc:  # surface in status and the session, never die silently
                self.reader_failures += 1
                writer_failed = self.writer is not None and self.writer.error is not None
                then = "stopped: the session writer failed" if writer_failed else "restarting"
                msg = f"{self.name}: A1 reader thread failed: {exc!r}; {then}"
                self.scanner.last_error = msg
                self._event(time.monotonic_ns(), "error", msg)
                if writer_failed:
                    self._ended_early = True
                    return
            self.scanner.assembler.reset()  # the turn being read cannot be trusted
            if self._stop.wait(delay):
                return
            delay = min(2 * delay, 1.0)

    def _poll_until_stopped(self) -> None:
        while not self._stop.is_set():
            t_ns, chunk, turns = self.scanner.poll(0.05)
            if chunk and self.writer is not None:
                self.writer.append_raw(self.name, t_ns, chunk)
            if turns.n_turns:
                if self.writer is not None:
                    self.writer.append_turns(self.name, turns)
                with self._lock:
                    self.turns_total += turns.n_turns
                    self.points_total += turns.n_points
                    self.crc_turns += int(((turns.flags & TurnFlag.CRC_ERRORS) > 0).sum())
                if ((turns.flags & TurnFlag.PACKET_LOSS) == 0).any():
                    self._first_turn.set()
