"""Live RPLIDAR A1 reader for capture: raw bytes, turns and events to the session writer.

:func:`a1_reader` gives the shared reader
(:class:`~sensorbench.drivers.serial_reader.SerialReader`, the same one the LD19 and
pod links run on) over the link of an :class:`~sensorbench.drivers.a1_scanner.A1Scanner`,
the A1's protocol object. So the A1 has the same behaviour as every device, from the
same code: one thread per device, every read bounded by a short timeout, raw bytes
stamped with ``time.monotonic_ns()`` on arrival, ``stale`` / ``unplug`` /
``reconnect`` / ``overrun`` events, and :meth:`SerialReader.start
<sensorbench.drivers.serial_reader.SerialReader.start>` failing with a
:class:`~sensorbench.errors.DriverError` when no complete turn arrives in time.
A poll that raises does not end the thread: an ``error`` event names the exception,
``reader_failures`` counts it, the turn in progress is dropped and polling resumes
after a short backoff (the device's bytes wait in the port buffer); only a failed
session writer ends it.

Streams declared: ``lidar/<name>`` (turns: angle rad CCW, range m with ``inf`` for no
return, quality 0..63 as intensity, host time; device time from the sample index and
the unit's sample duration where it reports one (:mod:`~sensorbench.drivers.a1_clock`);
no reported speed; the ``scan_mode`` attribute names the mode the unit ran)
and ``raw/<name>`` (every received byte, the answers and the scan descriptor included).

A scanner already brought up by the power-up sequencer (spinning) can be handed
over with ``scanner=``; then the device's serial and firmware are known before
``declare`` and stored in the stream attributes, and ``start`` does not restart the
scan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sensorbench.drivers.a1_scanner import A1Scanner
from sensorbench.drivers.serial_reader import SerialReader

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter

POLL_S = 0.05
"""Longest wait of one step of the reader thread (s)."""


def a1_reader(
    name: str,
    port: str,
    writer: SessionWriter | None = None,
    attrs: dict[str, Any] | None = None,
    scanner: A1Scanner | None = None,
    read_timeout_s: float = 1.0,
    first_turn_timeout_s: float | None = 5.0,
    stale_after_s: float = 0.5,
    restart_after_s: float = 3.0,
    scan_mode: str = "standard",
) -> SerialReader:
    """The reader of one A1 in a capture session (its protocol: ``reader.protocol``).

    Args:
        name: device name (stream names and event source).
        port: device path, preferably the stable udev name.
        writer: session writer (or set by ``declare``); None keeps events only.
        attrs: extra lidar stream attributes (``frame``, ``mount_xy_yaw``...).
        scanner: an already started scanner to take over (from the sequencer).
        read_timeout_s: deadline of each request to the device (s).
        first_turn_timeout_s: deadline for the first complete turn in ``start`` (s);
            None to skip the check.
        stale_after_s, restart_after_s: silence before a ``stale`` event, and before the
            scan is restarted (s).
        scan_mode: ``typical`` or a scan mode's name (a new scanner's; one taken over
            keeps its own).
    """
    scanner = scanner or A1Scanner(
        str(port),
        read_timeout_s=read_timeout_s,
        stale_after_s=stale_after_s,
        restart_after_s=restart_after_s,
        scan_mode=scan_mode,
    )
    link = scanner.link
    link.name = name
    link.writer = writer
    link.first_valid_timeout_s = first_turn_timeout_s
    scanner.attrs = dict(attrs or {})
    return SerialReader(link, POLL_S)
