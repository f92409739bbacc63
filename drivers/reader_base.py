"""What every live device reader shares with the capture loop: status and the protocol.

A reader owns one serial device. Capture builds readers from the robot
configuration, lets each declare its streams on the session writer before the
writer starts (SWMR freezes the layout), starts them, polls :meth:`status` about
twice a second for the status line, and stops them on exit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


@dataclass(frozen=True)
class ReaderStatus:
    """A snapshot of one reader's health, for the live status line and the summary.

    Attributes:
        name: device name from the robot configuration (e.g. ``lidar_front``).
        kind: ``ld19``, ``a1`` or ``pods``.
        port: the path the reader opened (stable name or tty node).
        connected: True while the port is open and delivering.
        bytes_per_s: received bytes per second over the last status interval (B/s).
        items_per_s: decoded points (lidars) or frames (pods) per second (1/s).
        turns_per_s: complete turns per second for lidars, 0 for pods (1/s).
        crc_errors: packets/frames that failed their check since start.
        drops: items known lost since start (sequence or device-time gaps, overruns).
        since_last_data_s: seconds since the last byte arrived (s); inf before any.
        reconnects: successful reconnections after an unplug.
        last_error: the most recent error message, or None.
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


@runtime_checkable
class DeviceReader(Protocol):
    """The interface capture relies on; LD19, A1 and pod readers implement it."""

    name: str

    def declare(self, writer: SessionWriter) -> None:
        """Add this device's streams (data and raw bytes) to ``writer`` before it starts."""

    def start(self) -> None:
        """Open the device (within its deadline) and start the reader thread."""

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread and close the port within ``timeout_s`` (s)."""

    def status(self) -> ReaderStatus:
        """Current health snapshot; cheap, thread-safe."""
