"""The serial transport: the one function that opens a device's port, and its modem
lines (a pty's DTR through an emulator's channel: docs/A1.md, Emulator).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import time
from pathlib import Path

import serial

from sensorbench.errors import DeviceUnavailable
from sensorbench.logs.atomic_output import file_kind

NO_MODEM_ERRNOS = frozenset({errno.ENOTTY, errno.EINVAL})
"""ioctl errors of a tty without modem lines (a pty, some adapters)."""

GONE_ERRNOS = frozenset({errno.EIO, errno.ENXIO, errno.ENODEV, errno.EBADF})
"""errors of a port whose device went away (USB cable pulled, adapter reset)."""

_ACK_TIMEOUT_S = 5.0
"""Longest wait (s) for an emulator to apply a DTR change. Its thread takes the device's
lock to apply it, which a loaded host can keep from it for over a second; a wait that ends
drops the channel, which the emulator reads as DTR released."""


def modem_channel_path(port: str | os.PathLike[str]) -> Path:
    """Where an emulator publishes the modem lines of the pty ``port`` resolves to.

    ``/tmp/sensorbench-modem-UID/pts-N`` for ``/dev/pts/N`` (or a link to it); the
    same for every process of the user, whatever path they opened.
    """
    real = os.path.realpath(os.fspath(port))
    name = real.strip("/").replace("/", "-").removeprefix("dev-")
    return Path(f"/tmp/sensorbench-modem-{os.getuid()}") / name


def foreign_channel_dir(directory: Path) -> str | None:
    """Why the channel directory ``directory`` must not be used (None: it is a directory of
    this user's that no one else can write). /tmp is shared: another user may have made
    the directory (or a link in its place) to take the channels over."""
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is {file_kind(st.st_mode)}, not a directory"
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        return (f"{directory} belongs to uid {st.st_uid} with mode "
            f"{stat.S_IMODE(st.st_mode):o}: another user may have made it; remove it")
    return None


class ModemSerial(serial.Serial):
    """pyserial's ``Serial`` whose DTR also reaches an emulator through its channel.

    :attr:`modem_lines` says where DTR went: ``"tty"`` (the device's own line),
    ``"channel"`` (an emulator's modem-line channel) or ``None`` (nowhere: a pty
    without a channel; the level is remembered but has no effect).
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.modem_lines: str | None = None
        self._channel: socket.socket | None = None
        super().__init__(*args, **kwargs)

    def _update_dtr_state(self) -> None:
        try:
            super()._update_dtr_state()
        except OSError as err:
            if err.errno not in NO_MODEM_ERRNOS:
                raise
            self._send_to_channel(b"D1" if self._dtr_state else b"D0")
            return
        self.modem_lines = "tty"

    def _send_to_channel(self, message: bytes) -> None:
        if self._channel is None:
            self._channel = self._connect_channel()
            if self._channel is None:
                self.modem_lines = None
                return
        try:
            self._channel.sendall(message)
            self._channel.settimeout(_ACK_TIMEOUT_S)
            acked = self._channel.recv(1) == b"A"
        except OSError:
            acked = False
        if not acked:
            self._drop_channel()
            self.modem_lines = None
            return
        self.modem_lines = "channel"

    def _connect_channel(self) -> socket.socket | None:
        """The emulator's channel of this pty; None without one, or when its directory is
        not this user's own (:func:`foreign_channel_dir`)."""
        path = modem_channel_path(self.port)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(OSError):
            if foreign_channel_dir(path.parent) is None:
                sock.connect(os.fspath(path))
                return sock
        sock.close()
        return None

    def _drop_channel(self) -> None:
        sock, self._channel = self._channel, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        """Close the port; its modem lines drop (on a pty: the channel closes)."""
        try:
            super().close()
        finally:
            self._drop_channel()


def open_hint(port: str, err: BaseException) -> str:
    """Why ``port`` could not be opened and what to do, from the open error."""
    if not os.path.exists(port):
        return (f"{port} does not exist. Is the device plugged in? If it is a udev name, "
            "check the rules with `sensorbench devices`.")
    text = str(err)
    if isinstance(err, PermissionError) or "Permission denied" in text:
        return (f"{port}: permission denied. Add your user to the 'dialout' group (then log "
            "in again) or install the udev rules.")
    if "exclusively" in text or "Resource temporarily unavailable" in text:
        return f"{port} is held by another program (a capture, a probe, a terminal?)"
    mode = os.stat(port).st_mode
    if not stat.S_ISCHR(mode) or "Inappropriate ioctl" in text:  # a file, a FIFO, /dev/null
        what = file_kind(mode) if not stat.S_ISCHR(mode) else "not a tty"
        return f"{port}: {what}, not a serial port"
    return f"{port}: {err}. Is another program using it?"


def open_serial(port: str | os.PathLike[str], baud: int, *, timeout_s: float,
        write_timeout_s: float | None = None, dtr: bool = True,
        flush_input: bool = True) -> ModemSerial:
    """Open ``port`` raw at ``baud``, 8N1, no flow control; the only port-opening function
    (DeviceUnavailable, with :func:`open_hint`'s reason). Longest wait of one read
    ``timeout_s`` and of one write ``write_timeout_s`` (s; None blocks); exclusive (a
    second opener gets ``busy``); ``dtr``: the level set right after the open (True, as
    every open does anyway, stops an A1's motor); ``flush_input``: discard what arrived
    before the open.
    """
    path = os.fspath(port)
    ser = ModemSerial()
    ser.port = path
    ser.baudrate = baud
    ser.timeout = timeout_s
    ser.write_timeout = write_timeout_s
    ser.exclusive = True
    ser.dtr = dtr
    try:
        ser.open()
    except (serial.SerialException, OSError) as err:
        raise DeviceUnavailable(f"cannot open {open_hint(path, err)}") from err
    if flush_input:
        ser.reset_input_buffer()
    return ser


def read_for(port: serial.Serial, seconds: float, enough: int | None = None) -> bytes:
    """Read whatever arrives for ``seconds`` (s), or until ``enough`` bytes came.

    Reads in short timed slices (20 ms) instead of asking ``in_waiting`` (an ioctl
    that some tty drivers, and umockdev's emulated ttys, do not support).
    """
    deadline = time.monotonic() + seconds
    chunks = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (enough is not None and len(chunks) >= enough):
            return bytes(chunks)
        port.timeout = min(0.02, remaining)
        want = 4096 if enough is None else min(4096, enough - len(chunks))
        chunks += port.read(want)
