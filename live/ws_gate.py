"""The live view's front door: the Foxglove server under both names of its protocol.

The ``foxglove-sdk`` server refuses clients that offer only the protocol's published
name, ``foxglove.websocket.v1`` (the same protocol as its ``foxglove.sdk.v1``).
:class:`SubprotocolGate` relays every connection to it, renaming that offer in the
handshake and the answer; every other byte goes through unchanged.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time

from sensorbench.errors import LiveError

PUBLISHED = b"foxglove.websocket.v1"
SDK = b"foxglove.sdk.v1"
_HEAD_LIMIT = 65536  # bytes of an HTTP upgrade head at most
_HANDSHAKE_S = 10.0
"""A connection's whole handshake (the client's head, the server's answer) must be over
within this from its accept (s), else it is closed."""
MAX_CONNECTIONS = 32
"""Client connections served at once; one more is closed at its accept."""
_PROTOCOL = re.compile(rb"^(sec-websocket-protocol:)([^\r\n]*)", re.I | re.M)


def _read_head(sock: socket.socket, deadline: float) -> tuple[bytes, bytes]:
    """(the HTTP head up to its blank line, the bytes read after it); b"" heads on EOF.
    ``deadline``: monotonic time (s) by which the whole head must have come, else
    ``TimeoutError``."""
    data = b""
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(deadline - time.monotonic(), 1e-3))
        chunk = sock.recv(4096)
        if not chunk or len(data) > _HEAD_LIMIT:
            return b"", b""
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    return data[:end], data[end:]


def ws_url(host: str, port: int) -> str:
    """The view's URL: ``ws://HOST:PORT``, an IPv6 host in brackets."""
    return f"ws://[{host}]:{port}" if ":" in host else f"ws://{host}:{port}"


def _offered(head: bytes) -> list[bytes]:
    return [p.strip() for m in _PROTOCOL.finditer(head) for p in m.group(2).split(b",")]


class SubprotocolGate:
    """Listens on ``(host, port)`` and relays to the server on ``127.0.0.1:inner_port``.

    Raises:
        LiveError: cannot listen there (port taken, host unknown).
    """

    def __init__(self, host: str, port: int, inner_port: int) -> None:
        self.inner = ("127.0.0.1", inner_port)
        try:
            family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
            both = host == "::" and socket.has_dualstack_ipv6()  # every interface: IPv4 too
            self.sock = socket.create_server((host, port), family=family, dualstack_ipv6=both)
        except OSError as exc:
            raise LiveError(f"cannot serve the live view on {host}:{port}: {exc}") from exc
        self.port = int(self.sock.getsockname()[1])
        self._open: set[socket.socket] = set()  # every socket, from its accept or connect
        self._clients = 0
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="live-view-gate", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop listening and end every connection, relayed or in its handshake."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        with self._lock:
            self._closed = True
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
        self._thread.join(2.0)

    def _track(self, s: socket.socket) -> None:
        """Keep ``s`` for :meth:`close` (ended at once if that has run)."""
        with self._lock:
            self._open.add(s)
            if self._closed:
                s.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:  # closed
                return
            with self._lock:
                full = self._clients >= MAX_CONNECTIONS
                self._clients += not full
            if full:
                client.close()
                continue
            threading.Thread(target=self._relay, args=(client,), name="live-view-client",
                             daemon=True).start()  # fmt: skip

    def _relay(self, client: socket.socket) -> None:
        deadline = time.monotonic() + _HANDSHAKE_S
        upstream: socket.socket | None = None
        try:
            self._track(client)
            head, rest = _read_head(client, deadline)
            if not head:
                return
            offered = _offered(head)
            renamed = PUBLISHED in offered and SDK not in offered
            if renamed:
                head = _PROTOCOL.sub(rb"\1 " + SDK, head, count=1)
            upstream = socket.create_connection(self.inner, max(deadline - time.monotonic(), 1e-3))
            self._track(upstream)
            upstream.sendall(head + rest)
            answer, more = _read_head(upstream, deadline)
            if not answer:
                return
            if renamed:
                answer = _PROTOCOL.sub(rb"\1 " + PUBLISHED, answer, count=1)
            client.sendall(answer + more)
            client.settimeout(None)
            upstream.settimeout(None)
            back = threading.Thread(target=_pipe, args=(upstream, client),
                                    name="live-view-client", daemon=True)  # fmt: skip
            back.start()
            _pipe(client, upstream)
            back.join()
        except OSError:  # TimeoutError too: the handshake took too long
            pass
        finally:
            with self._lock:
                self._open.difference_update((client, upstream))
                self._clients -= 1
            for s in (client, upstream):
                if s is not None:
                    s.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until either ends; then end both directions."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
