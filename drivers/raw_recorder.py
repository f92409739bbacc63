"""Record a serial port's bytes exactly as received (port set raw), with host receive
times; both files are renamed into place at the end (docs/CAPTURE.md, Raw recordings).
"""

from __future__ import annotations

import contextlib
import os
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

import serial

from sensorbench.drivers.robot_config import DeviceConfig, RobotConfig
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import ConfigError, DriverError, SessionError
from sensorbench.logs.atomic_output import atomic_output, check_output
from sensorbench.logs.raw_file import format_sidecar_header, sidecar_path

_POLL_S = 0.05  # longest single read (s); the duration is checked between reads
_FLUSH_S = 1.0  # longest time between flushes of both files (s)

_IFLAG_OFF = (termios.IGNBRK | termios.BRKINT | termios.PARMRK | termios.ISTRIP | termios.INLCR
    | termios.IGNCR | termios.ICRNL | termios.IXON | termios.IXOFF | termios.IXANY | termios.INPCK)
_LFLAG_OFF = (termios.ICANON | termios.ECHO | termios.ECHOE | termios.ECHOK | termios.ECHONL
    | termios.ISIG | termios.IEXTEN)


@dataclass(frozen=True)
class RawRecordResult:
    """What :func:`record_raw` wrote: ``reads`` that returned data (rows of the sidecar),
    host seconds recorded (s), ``stopped_by`` ``duration``, ``stop`` or ``unplug`` and
    why (``message``, '' for ``duration``)."""

    path: Path
    sidecar: Path
    bytes: int
    reads: int
    duration_s: float
    stopped_by: str
    message: str = ""


def set_raw(fd: int, baud: int) -> None:
    """Put the tty ``fd`` in raw 8N1 mode at ``baud`` with no flow control (termios);
    DriverError for a rate termios does not know."""
    speed = getattr(termios, f"B{baud}", None)
    if speed is None:
        raise DriverError(f"baud rate {baud} is not a standard termios rate")
    iflag, oflag, cflag, lflag, _, _, cc = termios.tcgetattr(fd)
    iflag &= ~_IFLAG_OFF
    oflag &= ~termios.OPOST
    cflag &= ~(termios.CSIZE | termios.PARENB | termios.CSTOPB | termios.CRTSCTS)
    cflag |= termios.CS8 | termios.CREAD | termios.CLOCAL
    lflag &= ~_LFLAG_OFF
    cc[termios.VMIN] = 0
    cc[termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, [iflag, oflag, cflag, lflag, speed, speed, cc])


def configured_device(config: RobotConfig, port: str) -> DeviceConfig:
    """The device of ``config`` named ``port``, or whose port is the same file (else
    ConfigError)."""
    for dev in config.devices:
        if port == dev.name or os.path.realpath(port) == os.path.realpath(dev.port):
            return dev
    names = ", ".join(f"{d.name} ({d.port})" for d in config.devices)
    raise ConfigError(f"{config.source}: no device is {port!r}; its devices: {names}")


def open_dtr(kind: str) -> bool:
    """The DTR level ``record_raw`` opens a device of ``kind`` with: low for an A1 (its
    USB adapter stops the motor while DTR is asserted), high (as every open leaves
    it) for the others."""
    return kind != "a1"


def record_raw(port: str, baud: int, duration_s: float, output: str | os.PathLike[str], *,
        force: bool = False, send: bytes = b"", dtr: bool = True,
        stop: threading.Event | None = None,
        on_progress: Callable[[float, int], None] | None = None) -> RawRecordResult:
    """Record ``port`` at ``baud`` for ``duration_s`` s into ``output`` and its sidecar
    ``output + ".chunks"`` (``force``: replacing both). ``send``: bytes written once after
    opening (``A5 20``, an A1's scan request); ``dtr``: the DTR level set right after the
    open (:func:`open_dtr`); ``stop`` ends the recording early (kept); ``on_progress``
    is called about once a second with (seconds, bytes) so far.

    Raises:
        OutputError: the output (or its sidecar) exists and not ``force``, or is not a
            regular file nobody writes (:func:`~sensorbench.logs.atomic_output.check_output`).
        SessionError: its directory is not writable.
        DriverError: the port cannot be opened or configured.
    """
    if not duration_s > 0:
        raise DriverError(f"duration must be > 0 s, got {duration_s}")
    out = Path(output)
    side = sidecar_path(out)
    for p in (out, side):
        check_output(p, force=force)
    if not os.access(out.parent, os.W_OK):
        raise SessionError(f"cannot write {out}: directory {out.parent} is not writable")
    stop = stop or threading.Event()
    ser = open_serial(port, baud, timeout_s=_POLL_S, dtr=dtr, flush_input=False)
    try:
        set_raw(ser.fileno(), baud)
        with (  # the sidecar is renamed into place first
            atomic_output(out, force=force) as tmp_bin,
            atomic_output(side, force=force) as tmp_side,
            open(tmp_bin, "wb") as fb,
            open(tmp_side, "w", encoding="utf-8") as fs):
            fs.write(format_sidecar_header(port, baud))
            if send:
                ser.write(send)
                ser.flush()
            result = _copy(ser, fb, fs, duration_s, stop, on_progress)
    finally:
        with contextlib.suppress(serial.SerialException, OSError):
            ser.close()
    return RawRecordResult(out, side, *result)


def _copy(ser: serial.Serial, fb: BinaryIO, fs: TextIO, duration_s: float, stop: threading.Event,
        on_progress: Callable[[float, int], None] | None) -> tuple[int, int, float, str, str]:
    """Copy ``ser``'s bytes into ``fb`` and each read's offset and host time (ns) into
    ``fs`` until ``duration_s`` (s), ``stop`` or the port going away; returns (bytes,
    reads, seconds, stopped_by, message)."""
    total, reads, stopped_by, message = 0, 0, "duration", ""
    t0 = time.monotonic()
    last_flush = t0
    while True:
        now = time.monotonic()
        if now - t0 >= duration_s:
            break
        if stop.is_set():
            stopped_by = "stop"
            break
        try:
            data = ser.read(max(1, ser.in_waiting))
        except (serial.SerialException, OSError) as err:
            stopped_by = "unplug"
            message = f"{ser.port} went away after {total} bytes: {err}"
            break
        if data:
            fs.write(f"{total},{time.monotonic_ns()}\n")
            fb.write(data)
            total += len(data)
            reads += 1
        if now - last_flush >= _FLUSH_S:
            fb.flush()
            fs.flush()
            last_flush = now
            if on_progress is not None:
                on_progress(now - t0, total)
    return total, reads, time.monotonic() - t0, stopped_by, message
