"""The emulator's end of a pty's modem-line channel, the DTR level the host set
(protocol and invariants: docs/A1.md, "The motor follows DTR")."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
from collections.abc import Callable

from sensorbench.drivers.serial_port import foreign_channel_dir, modem_channel_path
from sensorbench.errors import SimError

_POLL_S = 0.05  # how often the serving thread looks at its stop flag (s)


class ModemLineChannel:
    """The channel of the pty ``pty_path`` (``/dev/pts/N``), served on a thread that calls
    ``on_change`` with the new DTR level (True: asserted) on every change. SimError: the
    channel directory in /tmp is not this user's own."""

    def __init__(self, pty_path: str, on_change: Callable[[bool], None]) -> None:
        self.path = modem_channel_path(pty_path)
        self.path.parent.mkdir(mode=0o700, exist_ok=True)
        if why := foreign_channel_dir(self.path.parent):
            raise SimError(f"the modem-line channel cannot be served: {why}")
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by an emulator that died on a pty number now reused
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(os.fspath(self.path))
        self._server.listen(8)
        self._on_change = on_change
        self._clients: dict[socket.socket, bytes] = {}
        self._closed = threading.Event()
        self.dtr = False
        self.opens = 0  # host opens of the port (connections) so far
        self._thread = threading.Thread(target=self._serve, name="modem-lines", daemon=True)
        self._thread.start()

    def _set(self, level: bool) -> None:
        if level != self.dtr:
            self.dtr = level
            if not self._closed.is_set():
                self._on_change(level)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._server, *self._clients], [], [], _POLL_S)
            except (OSError, ValueError):  # a socket closed under us: closing
                return
            # hosts' closes before new opens: a close and a reopen that land in one round
            # must drop the line before raising it again (a DTR edge an Uno resets on)
            for sock in sorted(ready, key=lambda s: s is self._server):
                if sock is self._server:
                    with contextlib.suppress(OSError):
                        conn, _ = self._server.accept()
                        self._clients[conn] = b""
                        self.opens += 1
                    continue
                self._read(sock)

    def _read(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(256)
        except OSError:
            data = b""
        if not data:  # the host closed the port (or died): the line is released
            self._clients.pop(conn, None)
            with contextlib.suppress(OSError):
                conn.close()
            if not self._clients:
                self._set(False)
            return
        buf = self._clients.get(conn, b"") + data
        usable = len(buf) - len(buf) % 2
        for i in range(0, usable, 2):
            if buf[i : i + 1] == b"D":
                self._set(buf[i + 1 : i + 2] == b"1")
                with contextlib.suppress(OSError):
                    conn.sendall(b"A")
        self._clients[conn] = buf[usable:]

    def close(self) -> None:
        """Drop every connection and remove the socket, not waiting for the serving thread
        (it may wait for the caller's lock); it ends within 50 ms, applying nothing more."""
        self._closed.set()
        for conn in list(self._clients):
            with contextlib.suppress(OSError):
                conn.close()
        self.dtr = False
        with contextlib.suppress(OSError):
            self._server.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
