"""The protocol object of one serial device: what a device kind adds to the shared link.

The link does port, deadlines, raw stream, events and status; the protocol decodes
(hooks: docs/ARCHITECTURE.md). Hooks run on the polling thread; ``counters`` and
``diagnose`` may be called from other threads and only read plain attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sensorbench.drivers.serial_link import SerialPort
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import SessionError

if TYPE_CHECKING:
    from sensorbench.drivers.serial_link import Port, SerialLink
    from sensorbench.logs import Session, SessionWriter


def pick_raw_stream(session: Session, name: str | None, wire: str, option: str) -> str:
    """The raw stream of ``session`` to decode offline: ``name``; else the only one whose
    ``protocol`` (or ``kind``) attribute is ``wire``; else the session's only raw stream.

    Raises:
        SessionError: no raw stream ``name``, or no single candidate (naming ``option``).
    """
    names = session.raw_names()
    if name is not None:
        if name not in names:
            raise SessionError(f"{session.path} has no raw stream {name!r} (it has {names})")
        return name
    attrs = [session.raw(n).attrs for n in names]
    own = [n for n, a in zip(names, attrs, strict=True) if a.get("protocol", a.get("kind")) == wire]
    if len(own) == 1:
        return own[0]
    if len(names) == 1:
        return names[0]
    raise SessionError(
        f"{session.path} has raw streams {names}: say which one is the {wire} with {option}")


class DeviceProtocol:
    """Base of every device's protocol object (see the module docstring); :attr:`link` is
    set by the link it sits on."""

    kind = "serial"
    """The device kind (the robot.toml ``kind``), unless the link is given another."""
    wire = ""
    """The wire protocol stored as the raw stream's ``protocol`` attribute."""
    baud = 115200
    """Default line speed (baud); the link may be given another."""
    mode_label = ""
    """The device's running mode for the status line (an A1's scan mode), or empty."""
    valid_item = "valid packet"
    """What :meth:`consume` counts, as the no-valid-data error names it."""
    backlog_limit: int | None = None
    """Bytes waiting in the port (what one read takes) beyond which an ``overrun`` is
    reported, or None."""

    link: SerialLink

    # -- every device ---------------------------------------------------------------

    def declare_streams(self, writer: SessionWriter) -> None:
        """Add the decoded data streams of this device to ``writer`` (raw is the link's)."""
        raise NotImplementedError

    def consume(self, t_ns: int, data: bytes) -> int:
        """Parse one received chunk stamped ``t_ns`` (ns); return valid items completed."""
        raise NotImplementedError

    def reset(self) -> None:
        """Drop state that must not span an unplug or a failed read (a partial frame)."""

    def diagnose(self) -> str:
        """What was seen since the port was (re)opened, for the no-valid-data error."""
        return (f"{self.link.bytes_since_open} bytes, 0 {self.valid_item}s: "
            "wrong baud rate or wrong device?")

    def counters(self) -> tuple[int, int, int, int]:
        """(check failures, items known lost, decoded items, complete turns) since start."""
        return (0, 0, 0, 0)

    def final_note(self) -> str | None:
        """What was decoded and skipped, recorded as a ``note`` event at stop."""
        return None

    # -- request/response devices -----------------------------------------------------

    def open_port(self, reopen: bool) -> Port:
        """Open the port once (no retry) and run the device's start-up, if it has one.

        ``reopen`` is True after an unplug (the device may still be booting).

        Raises:
            DeviceUnavailable: the port cannot be opened (retried with backoff).
            DriverError: the start-up failed (the port is closed again; after a
                reopen the attempt counts as failed and is retried).
        """
        link = self.link
        ser = open_serial(link.port, link.baud, timeout_s=link.config.read_timeout_s)
        return SerialPort(ser, link.port)

    def restart(self) -> None:
        """Restart the device after ``restart_after_s`` of silence (only called when
        the link has a ``restart_after_s``)."""

    def on_lost(self) -> None:
        """The port went away: flush what the loss cut (called after the port closed)."""

    def start_note(self) -> str | None:
        """The message of the ``start`` event, or None for the link's."""
        return None

    def reopen_note(self) -> str | None:
        """The message of a ``reconnect`` event, or None for the link's."""
        return None

    def take_preamble(self) -> list[tuple[int, bytes]]:
        """``(t_ns, chunk)`` received before a session's writer was attached (a device
        the bring-up started and handed over), stored ahead of the first chunk so the
        raw stream holds the device's whole exchange; empty by default."""
        return []
