"""Who writes a session. One writer at a time for every read-modify-swap: :class:`UpdateLock`,
an advisory ``flock`` on the sidecar ``.NAME.lock`` (docs/FORMAT.md, "Writing safely"); the
writer record in the ``/_status`` attributes (pid, host, boot id, process start ticks: a
recycled pid or a reboot is told apart), judged by :func:`writer_alive` (docs/FORMAT.md, "A
file in use is never touched")."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sensorbench.errors import OutputError
from sensorbench.logs.schema import attr_value

DEFAULT_WAIT_S = 60.0
"""How long a second writer waits for the lock before it is refused (s)."""

_POLL_S = 0.05


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The sidecar lock file of session ``path``: ``.NAME.lock`` in its directory."""
    p = Path(path)
    return p.with_name(f".{p.name}.lock")


def locked_by_writer(path: str | os.PathLike[str]) -> bool:
    """True when another open file holds an exclusive ``flock`` on ``path``: an
    :class:`UpdateLock`'s holder, or HDF5 writing the file (it releases that lock when it
    switches to SWMR mode, so this sees non-SWMR writers only)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)
    return False


def writer_of(path: str | os.PathLike[str], *, sidecar: bool = True) -> str:
    """Who has the session ``path`` open for writing, in words; "" when nobody does.

    Sees a sensorbench writer of any kind (its :class:`UpdateLock`; not asked when
    ``sidecar`` is False, for the holder of that lock) and any process holding HDF5's
    write lock on the file itself.
    """
    p = Path(path)
    if sidecar and locked_by_writer(lock_path(p)):
        return f"{UpdateLock(p).holder()} writes it (lock file {lock_path(p)})"
    if locked_by_writer(p):
        return "another process has it open for writing (HDF5 file lock)"
    return ""


class UpdateLock:
    """Exclusive right to replace ``path`` (see the module docstring).

    Args:
        path: the session file.
        wait_s: longest wait for another holder to finish (s).
    """

    def __init__(self, path: str | os.PathLike[str], wait_s: float = DEFAULT_WAIT_S) -> None:
        self.path = Path(path)
        self.lock_file = lock_path(self.path)
        self.wait_s = wait_s
        self._fd: int | None = None

    def acquire(self) -> UpdateLock:
        """Take the lock, waiting up to ``wait_s``.

        Raises:
            OutputError: another process held it for the whole wait, or the sidecar
                cannot be created (read-only directory).
        """
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise OutputError(
                    f"cannot update {self.path}: cannot create its lock file "
                    f"{self.lock_file} ({exc.strerror}); it is unchanged"
                ) from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise OutputError(
                        f"cannot update {self.path}: cannot lock {self.lock_file} "
                        f"({exc.strerror}); it is unchanged"
                    ) from exc
                if time.monotonic() >= deadline:
                    raise OutputError(
                        f"{self.path} is being updated by {self.holder()} (for longer than "
                        f"{self.wait_s:g} s); it is unchanged: try again when that has finished"
                    ) from None
                time.sleep(_POLL_S)
                continue
            if self._is_current(fd):
                break
            os.close(fd)  # the holder deleted that file as it released it: take the new one
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def _is_current(self, fd: int) -> bool:
        try:
            on_disk = os.stat(self.lock_file)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)

    def holder(self) -> str:
        """``process PID`` of the lock's holder, as its sidecar says."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(self.lock_file.read_text().split()[0])
            return f"process {pid}"
        return "another process"

    def release(self) -> None:
        """Delete the sidecar and drop the lock (idempotent)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.lock_file)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> UpdateLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def _start_ticks(pid: int) -> int:
    """Start time of process ``pid`` in clock ticks since boot; -1 if unknown, -2 if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return -2
    except OSError:
        return -1
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 else -1


def writer_record() -> dict[str, Any]:
    """The attributes identifying this process as a file's writer."""
    pid = os.getpid()
    return {
        "writer_pid": pid,
        "writer_host": socket.gethostname(),
        "writer_boot_id": _boot_id(),
        "writer_start_ticks": _start_ticks(pid),
        "writer_started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@dataclass(frozen=True)
class WriterState:
    """Whether a file's recorded writer is still running.

    ``alive`` is True (running), False (gone) or None (cannot be told from here,
    e.g. the file was written on another host). ``text`` says which process it is.
    """

    alive: bool | None
    text: str


def writer_alive(attrs: Any) -> WriterState:
    """Judge the writer record in ``attrs`` (the ``/_status`` attributes)."""
    if "writer_pid" not in attrs:
        return WriterState(False, "no writer record (the file predates writer records)")
    pid = int(attrs["writer_pid"])
    host = str(attr_value(attrs.get("writer_host", "")))
    started = str(attr_value(attrs.get("writer_started_utc", "?")))
    who = f"pid {pid} on host {host}, started {started}"
    if host != socket.gethostname():
        return WriterState(None, who)
    boot = str(attr_value(attrs.get("writer_boot_id", "")))
    if boot and _boot_id() and boot != _boot_id():
        return WriterState(False, who + " (before the last reboot)")
    ticks = _start_ticks(pid)
    if ticks == -2:
        return WriterState(False, who)
    recorded = int(attrs.get("writer_start_ticks", -1))
    if ticks >= 0 and recorded >= 0:
        return WriterState(ticks == recorded, who)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return WriterState(False, who)
    except PermissionError:
        pass
    return WriterState(True, who)
