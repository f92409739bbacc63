"""A serial device on a real pseudo-terminal with a stable symlink, and byte-level faults
(corruption, drops, stall, unplug/replug, slow start, baud mismatch) counted in
:attr:`PtyPort.stats`."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
import termios
import threading
import time
import tty
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sensorbench.errors import SimError
from sensorbench.logs.atomic_output import disk_error_text, file_kind

_BAUD_CONSTANTS = {
    getattr(termios, f"B{rate}"): rate
    for rate in (9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600)
    if hasattr(termios, f"B{rate}")
}


@dataclass
class Faults:
    """Byte-level fault knobs of one emulated link: the probability that a sent byte is
    replaced by a random other value (``corrupt_rate``) or lost (``drop_rate``), and the
    seconds after power-on (construction or replug) the device neither sends nor answers."""

    corrupt_rate: float = 0.0
    drop_rate: float = 0.0
    slow_start_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("corrupt_rate", "drop_rate"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise SimError(f"Faults.{name} must be in [0, 1), got {value}")
        if self.slow_start_s < 0:
            raise SimError(f"Faults.slow_start_s must be >= 0 s, got {self.slow_start_s}")


@dataclass
class LinkStats:
    """What the link did, for comparison with a driver's counters."""

    bytes_offered: int = 0
    bytes_delivered: int = 0
    bytes_corrupted: int = 0
    bytes_dropped: int = 0
    bytes_overrun: int = 0
    bytes_garbled_baud: int = 0
    corrupted_offsets: list[int] = field(default_factory=list)
    dropped_offsets: list[int] = field(default_factory=list)
    unplugs: int = 0
    replugs: int = 0


def _check_link(link: Path) -> None:
    """Refuse a ``link`` path that holds anything but a symbolic link (an earlier run's):
    a regular file, a directory, a device node (``/dev/null``) is never replaced, and
    ``-`` (standard output elsewhere) is not a link's name."""
    if link == Path("-"):
        raise SimError("'-' is not a --link path: give the path the device's link should "
                       "have (for a link named '-', its absolute path)")
    try:
        mode = os.lstat(link).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SimError(f"cannot make the link {link}: {disk_error_text(exc)}") from None
    if not stat.S_ISLNK(mode):
        raise SimError(f"{link} is {file_kind(mode)}: the emulator replaces only a symbolic "
                       "link there (an earlier run's); choose another --link path")


class PtyPort:
    """One end of an emulated serial link on a pseudo-terminal, with an optional stable
    symlink ``link`` to it; a host that configures another ``baud`` than the device's reads
    garbage; :meth:`send` waits ``write_timeout_s`` (s) for room before an overrun."""

    def __init__(
        self,
        link: str | os.PathLike[str] | None = None,
        baud: int | None = None,
        faults: Faults | None = None,
        seed: int = 0,
        write_timeout_s: float = 0.5,
    ) -> None:
        self.link = Path(link) if link is not None else None
        self.baud = baud
        self.faults = faults or Faults()
        self.stats = LinkStats()
        self.write_timeout_s = write_timeout_s
        self._rng = np.random.default_rng(seed)
        self._lock = threading.RLock()
        self._master: int | None = None
        self._slave: int | None = None
        self._path: str | None = None
        self._powered_at = 0.0
        self._stalled_until = 0.0
        self._generation = 0
        self._open_pty()

    def _open_pty(self) -> None:
        if self.link is not None:
            _check_link(self.link)
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no CR/LF translation: the line carries bytes as-is
        os.set_blocking(master, False)
        self._master, self._slave = master, slave
        self._generation += 1
        self._path = os.ttyname(slave)
        self._powered_at = time.monotonic()
        if self.link is not None:
            tmp = self.link.with_name(f".{self.link.name}.{os.getpid()}.tmp")
            try:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                tmp.symlink_to(self._path)
                tmp.replace(self.link)  # atomic: a reader never sees the link missing on replug
            except OSError as exc:
                for fd in (master, slave):
                    os.close(fd)
                self._master = self._slave = self._path = None
                why = disk_error_text(exc)
                raise SimError(f"cannot make the link {self.link}: {why}") from None

    @property
    def path(self) -> str:
        """The current pty node (``/dev/pts/N``); changes on replug."""
        if self._path is None:
            raise SimError("the emulated device is unplugged: it has no tty path")
        return self._path

    @property
    def master_fd(self) -> int:
        """The pty's master descriptor (non-blocking), for a device process that writes
        it directly (the firmware harness); changes on replug."""
        if self._master is None:
            raise SimError("the emulated device is unplugged: it has no pty")
        return self._master

    @property
    def name(self) -> str:
        """The stable link if there is one, else the pty node."""
        return str(self.link) if self.link is not None else self.path

    @property
    def plugged(self) -> bool:
        """True while the pty exists."""
        return self._master is not None

    def unplug(self) -> None:
        """Make the device disappear: the pty is closed and the link removed."""
        with self._lock:
            if self._master is None:
                return
            if self.link is not None and self.link.is_symlink():  # ours, or an earlier run's
                with contextlib.suppress(FileNotFoundError):
                    self.link.unlink()
            for fd in (self._master, self._slave):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._master = self._slave = None
            self._path = None
            self.stats.unplugs += 1

    def replug(self) -> None:
        """Bring the device back on a new pty behind the same link (power-on again)."""
        with self._lock:
            if self._master is not None:
                return
            self._open_pty()
            self.stats.replugs += 1

    def close(self) -> None:
        """Unplug for good."""
        self.unplug()

    def __enter__(self) -> PtyPort:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stall(self, seconds: float) -> None:
        """Go silent for ``seconds`` (s): sent bytes are discarded, requests unanswered."""
        self._stalled_until = time.monotonic() + seconds

    @property
    def silent(self) -> bool:
        """True while stalled or still in the slow-start window."""
        now = time.monotonic()
        return now < self._stalled_until or now < self._powered_at + self.faults.slow_start_s

    def host_baud(self) -> int | None:
        """The baud rate the host configured on the tty, or None if unknown/unplugged."""
        with self._lock:
            if self._slave is None:
                return None
            attrs = termios.tcgetattr(self._slave)
        return _BAUD_CONSTANTS.get(attrs[5])

    def _apply_faults(self, data: bytes) -> bytes:
        buf = np.frombuffer(data, dtype=np.uint8).copy()
        base = self.stats.bytes_offered
        f = self.faults
        if f.corrupt_rate > 0:
            hit = np.flatnonzero(self._rng.random(buf.size) < f.corrupt_rate)
            if hit.size:
                buf[hit] ^= self._rng.integers(1, 256, size=hit.size, dtype=np.uint8)
                self.stats.bytes_corrupted += int(hit.size)
                self.stats.corrupted_offsets.extend((hit + base).tolist())
        if f.drop_rate > 0:
            drop = self._rng.random(buf.size) < f.drop_rate
            idx = np.flatnonzero(drop)
            if idx.size:
                self.stats.bytes_dropped += int(idx.size)
                self.stats.dropped_offsets.extend((idx + base).tolist())
                buf = buf[~drop]
        return buf.tobytes()

    def send(self, data: bytes) -> int:
        """Put device bytes on the line; returns how many reached the pty buffer (none while
        unplugged, stalled or slow-starting)."""
        if not data:
            return 0
        with self._lock:
            if self._master is None or self.silent:
                return 0
            out = self._apply_faults(data)
            self.stats.bytes_offered += len(data)
            if self.baud is not None:
                host = self.host_baud()
                if host is not None and host != self.baud:
                    out = self._rng.integers(0, 256, size=len(out), dtype=np.uint8).tobytes()
                    self.stats.bytes_garbled_baud += len(out)
            master = self._master
        return self._write_all(master, out)

    def _write_all(self, master: int, out: bytes) -> int:
        deadline = time.monotonic() + self.write_timeout_s
        view = memoryview(out)
        written = 0
        while written < len(out):
            try:
                written += os.write(master, view[written:])
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                select.select([], [master], [], min(remaining, 0.05))
            except OSError as exc:  # unplugged under our feet
                if exc.errno in (errno.EIO, errno.EBADF):
                    break
                raise
        self.stats.bytes_delivered += written
        self.stats.bytes_overrun += len(out) - written
        return written

    def recv(self, timeout_s: float) -> bytes:
        """Bytes the host wrote, waiting at most ``timeout_s`` (s); b"" if none or while the
        device is silent. A read happens under the lock and only if the pty is still the
        one polled: fd numbers are reused on replug."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._lock:
                master, generation = self._master, self._generation
            remaining = deadline - time.monotonic()
            if master is None:
                time.sleep(max(0.0, min(remaining, 0.05)))
                if time.monotonic() >= deadline:
                    return b""
                continue
            try:
                ready, _, _ = select.select([master], [], [], max(0.0, min(remaining, 0.05)))
            except (OSError, ValueError):
                ready = []
            if ready:
                with self._lock:
                    if self._generation != generation or self._master is None:
                        continue
                    try:
                        data = os.read(self._master, 65536)
                    except (BlockingIOError, InterruptedError):
                        data = b""
                    except OSError:
                        return b""
                if data:
                    return b"" if self.silent else data
            if time.monotonic() >= deadline:
                return b""
