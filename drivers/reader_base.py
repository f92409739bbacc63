"""What every live device reader shares with the capture loop: status and the protocol."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from sensorbench.errors import SensorbenchError

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


@dataclass(frozen=True)
class ReaderStatus:
    """A snapshot of one reader's health (device ``name``, ``kind`` and the ``port`` it
    opened), for the live status line and the summary.

    Attributes:
        connected: True while the port is open and delivering.
        bytes_per_s: received bytes per second over the last status interval (B/s).
        items_per_s: decoded points (lidars) or frames (pods) per second (1/s).
        turns_per_s: complete turns per second for lidars, 0 for pods (1/s).
        crc_errors: packets/frames that failed their check since start.
        drops: items known lost since start (sequence or device-time gaps, overruns).
        since_last_data_s: seconds since the last byte arrived (s); inf before any.
        reconnects: successful reconnections after an unplug.
        last_error: the most recent error message, or None.
        reader_failures: times the reader thread raised and was restarted (each one
            lost the decoded data of what it was reading: an ``error`` event says so).
        reader_down: True when the reader thread ended although it was not stopped:
            whatever the device sends is lost.
        mode: the device's running mode (an A1's scan mode), or empty.
    """

    name: str
    kind: str
    port: str
    connected: bool
    bytes_per_s: float
    items_per_s: float
    turns_per_s: float
    crc_errors: int
    drops: int
    since_last_data_s: float
    reconnects: int
    last_error: str | None = None
    reader_failures: int = 0
    reader_down: bool = False
    mode: str = ""


@runtime_checkable
class DeviceReader(Protocol):
    """The interface capture relies on: the :class:`~sensorbench.drivers.serial_reader.SerialReader`
    of every serial device kind implements it, and so may a source that is not a serial
    device (the emulated network pose source)."""

    name: str

    def declare(self, writer: SessionWriter) -> None:
        """Add this device's streams (data and raw bytes) to ``writer`` before it starts."""

    def start(self) -> None:
        """Open the device (within its deadline) and start the reader thread."""

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and close the port within ``timeout_s`` (s)."""

    def status(self) -> ReaderStatus:
        """Current health snapshot; cheap, thread-safe."""


class RateMeter:
    """Per-second rates of cumulative counters between successive calls, on host ``clock``
    (s); thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._prev: tuple[float, ...] | None = None

    def rates(self, *totals: int) -> tuple[float, ...]:
        """Increase of each total per host second (1/s) since the previous call; zeros on
        the first call and when no host time passed."""
        now = self._clock()
        with self._lock:
            prev, self._prev = self._prev, (now, *totals)
        if prev is None or now <= prev[0]:
            return (0.0,) * len(totals)
        dt = now - prev[0]
        return tuple((c - p) / dt for c, p in zip(totals, prev[1:], strict=True))


def seconds_since(t_ns: int | None) -> float:
    """Host seconds (s) from ``t_ns`` (``time.monotonic_ns()``) to now; inf for None."""
    return float("inf") if t_ns is None else (time.monotonic_ns() - t_ns) / 1e9


def record_event(events: collections.deque[tuple[int, str, str]], writer: SessionWriter | None,
        source: str, t_ns: int, kind: str, message: str) -> SensorbenchError | None:
    """Keep an event in ``events`` and write it to the session unless the writer failed;
    returns the error of a failed write (disk full) instead of raising, so a reader thread
    reports it in its status rather than dying on it."""
    events.append((t_ns, kind, message))
    if writer is None or writer.error is not None:
        return None
    try:
        writer.event(t_ns, source, kind, message)
    except SensorbenchError as exc:
        return exc
    return None


def join_thread(thread: threading.Thread | None, name: str, timeout_s: float) -> str | None:
    """Wait at most ``timeout_s`` (s) for a reader thread to end; None when it ended (or
    there was none), else the error for the reader's status (a stuck thread is reported)."""
    if thread is None:
        return None
    thread.join(timeout_s)
    if thread.is_alive():
        return f"{name}: reader thread did not stop within {timeout_s:g} s"
    return None
