"""The live pose over UDP: one fixed-size binary datagram per filtered frame, its layout
docs/FORMAT.md, "Live pose datagrams" (``struct`` format :data:`FORMAT`). The sender
never blocks and never raises: a datagram the kernel refuses is counted (one nobody
receives is not seen: the socket is unconnected).
"""

from __future__ import annotations

import math
import socket
import struct
from typing import NamedTuple

from sensorbench.errors import LiveError

MAGIC = b"SBLP"
VERSION = 1
FORMAT = "<4sBBHIqq3d3d6d"
_STRUCT = struct.Struct(FORMAT)
SIZE = _STRUCT.size
PREDICTED = 16
"""Flag of a datagram sent while no frame arrives: the pose is the filters' prediction."""


class PoseDatagram(NamedTuple):
    """One datagram (fields as docs/FORMAT.md lays them out)."""

    flags: int
    frames: int
    seq: int
    stamp_ns: int
    wall_ns: int
    pose: tuple[float, float, float]
    velocity: tuple[float, float, float]
    covariance: tuple[float, float, float, float, float, float]

    def pack(self, seq: int | None = None) -> bytes:
        """The datagram's bytes, with sequence number ``seq`` in place of ``self.seq``."""
        return _STRUCT.pack(MAGIC, VERSION, self.flags, self.frames,
                            (self.seq if seq is None else seq) & 0xFFFFFFFF, self.stamp_ns,
                            self.wall_ns, *self.pose, *self.velocity, *self.covariance)  # fmt: skip


def unpack(data: bytes) -> PoseDatagram:
    """Decode one datagram.

    Raises:
        LiveError: not a version-1 datagram of this format.
    """
    if len(data) != SIZE or data[:4] != MAGIC:
        raise LiveError(f"not a sensorbench live pose datagram ({len(data)} bytes)")
    f = _STRUCT.unpack(data)
    if f[1] != VERSION:
        raise LiveError(f"live pose datagram version {f[1]}, this reader knows {VERSION}")
    return PoseDatagram(f[2], f[3], f[4], f[5], f[6], f[7:10], f[10:13], f[13:19])


def wrap_yaw(yaw: float) -> float:
    """An angle (rad) wrapped to (−π, π]."""
    w = math.remainder(yaw, 2.0 * math.pi)
    return math.pi if w == -math.pi else w


def parse_address(text: str, default_host: str = "127.0.0.1", lowest: int = 0) -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` → (host, port); ``lowest`` 1 for a destination (port 0
    means "any free port" only where one listens).

    Raises:
        LiveError: not a host and a port in ``lowest``..65535.
    """
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = default_host, text
    host = host.strip("[]") or default_host
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not lowest <= number <= 65535:
        raise LiveError(f"{text!r}: give HOST:PORT or PORT, the port in {lowest}..65535")
    return host, number


class UdpPublisher:
    """Sends :class:`PoseDatagram` s to ``(host, port)``, never blocking.

    Attributes:
        sent, dropped: datagrams sent, and those the kernel refused.
        last_error: why the last one was dropped, or None.
    """

    def __init__(self, host: str, port: int) -> None:
        try:
            info = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        except OSError as exc:
            raise LiveError(f"--udp {host}:{port}: {exc}") from exc
        self.address = info[4]
        self.sock = socket.socket(info[0], socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)  # a LAN broadcast too
        self.sock.setblocking(False)
        self.seq = 0
        self.sent = 0
        self.dropped = 0
        self.last_error: str | None = None

    def send(self, datagram: PoseDatagram) -> None:
        """Send one datagram; its ``seq`` is replaced by the publisher's."""
        data = datagram.pack(self.seq)
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        try:
            self.sock.sendto(data, self.address)
            self.sent += 1
        except OSError as exc:  # EAGAIN, ENOBUFS, ENETUNREACH, ...
            self.dropped += 1
            self.last_error = f"UDP pose to {self.address}: {exc}"

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()
