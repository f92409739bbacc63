"""One writer at a time for every read-modify-swap of a session: :class:`UpdateLock`, an
advisory ``flock`` on the sidecar ``.NAME.lock`` (docs/FORMAT.md, "Writing safely")."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

from sensorbench.errors import OutputError

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
