"""HDF5 output that survives a full or failing disk (docs/FORMAT.md, "A full or read-only
disk"): offline writers write through a :class:`GuardedFile`, a live recording reserves
room before each flush (:func:`reserve_room`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import resource
import shutil
from collections.abc import Iterator
from pathlib import Path

import h5py

from sensorbench.errors import OutputError
from sensorbench.logs.atomic_output import disk_error_text
from sensorbench.logs.schema import LIBVER


class NoRoomError(OSError):
    """The disk (or the file-size limit) has no room for the next flush; nothing of it
    was written, so the file stays consistent up to the last flush."""


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
_FALLOC_FL_KEEP_SIZE = 1
_FALLOC_FL_PUNCH_HOLE = 2


def reserve_room(fd: int, path: str | os.PathLike[str], growth: int) -> int:
    """Allocate ``growth`` bytes past the end of the file open as ``fd`` (its size
    unchanged; where the file system cannot, its free space is checked instead); returns
    that end (bytes). :func:`release_room` gives back what was not used.

    Raises:
        NoRoomError: the file system has not that room (ENOSPC), or the end would pass
            the process's file-size limit (EFBIG); the message names ``path``.
    """
    end = os.fstat(fd).st_size + max(int(growth), 0)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and end > limit:
        raise NoRoomError(errno.EFBIG, os.strerror(errno.EFBIG), str(path))
    if _LIBC.fallocate(fd, _FALLOC_FL_KEEP_SIZE, 0, end) == 0:
        return end
    code = ctypes.get_errno()
    if code in (errno.EOPNOTSUPP, errno.ENOSYS):
        if shutil.disk_usage(Path(path).parent).free >= growth:
            return end
        code = errno.ENOSPC
    raise NoRoomError(code, os.strerror(code), str(path))


def release_room(fd: int, end: int) -> None:
    """Free what :func:`reserve_room` allocated past the file's end, up to ``end`` (bytes;
    best effort: a file system that cannot punch holes keeps it until the file goes)."""
    size = os.fstat(fd).st_size
    if end > size:
        _LIBC.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, size, end - size)


class GuardedFile:
    """A file for h5py's file-object driver that records, never raises, I/O errors
    (``create``: a new file, which must not exist)."""

    def __init__(self, path: str | os.PathLike[str], *, create: bool) -> None:
        self.path = Path(path)
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_EXCL if create else 0)
        self._fd = os.open(self.path, flags, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise
        self._pos = 0
        self._size = os.fstat(self._fd).st_size
        self.error: OSError | None = None
        self._held: list[tuple[int, bytes]] = []
        """(offset, bytes) written after the first failure, in write order."""

    # -- the file-object protocol h5py uses: seek, tell, read(into), write, truncate, flush

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:
        view = memoryview(buffer).cast("B")
        n = 0
        if self._pos < self._size:
            try:
                n = os.preadv(self._fd, [view], self._pos)
            except OSError as exc:
                self._fail(exc)
        view[n:] = bytes(len(view) - n)  # past the end of what is on disk: zeros
        for offset, data in self._held:  # later writes win
            lo, hi = max(offset, self._pos), min(offset + len(data), self._pos + len(view))
            if lo < hi:
                view[lo - self._pos : hi - self._pos] = data[lo - offset : hi - offset]
                n = max(n, hi - self._pos)
        self._pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        size = max(0, self._size - self._pos) if size < 0 else size
        buffer = bytearray(size)
        return bytes(buffer[: self.readinto(buffer)])

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        if self.error is None:
            done = 0
            try:
                while done < len(view):
                    done += os.pwrite(self._fd, view[done:], self._pos + done)
            except OSError as exc:
                self._fail(exc)
                self._held.append((self._pos + done, bytes(view[done:])))
        else:
            self._held.append((self._pos, bytes(view)))
        self._pos += len(view)
        self._size = max(self._size, self._pos)
        return len(view)

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if self.error is None:
            try:
                os.ftruncate(self._fd, size)
            except OSError as exc:
                self._fail(exc)
        self._size = size
        return size

    def flush(self) -> None:
        """Nothing to do: every write went straight to the file."""

    # -- for the writer

    def _fail(self, exc: OSError) -> None:
        if self.error is None:
            self.error = exc

    def raise_if_failed(self) -> None:
        """Raise the first disk error as :class:`OSError` with this file's name."""
        if self.error is not None:
            raise OSError(self.error.errno, self.error.strerror, str(self.path))

    def fsync(self) -> None:
        """Flush to the disk; a failure is recorded like any other."""
        if self.error is None:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self._fail(exc)

    def close(self) -> None:
        """Close the descriptor (idempotent); writes held in memory are dropped."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._held.clear()


def open_guarded(path: str | os.PathLike[str], mode: str = "w") -> tuple[h5py.File, GuardedFile]:
    """An HDF5 file at ``path`` on a :class:`GuardedFile`: mode ``w`` creates it (it must
    not exist), ``r+`` opens an existing one for changes."""
    if mode not in ("w", "r+"):
        raise ValueError(f"mode must be 'w' or 'r+', got {mode!r}")
    guard = GuardedFile(path, create=mode == "w")
    try:
        f = h5py.File(guard, mode, libver=LIBVER)
    except BaseException:
        guard.close()
        raise
    return f, guard


def close_guarded(f: h5py.File, guard: GuardedFile) -> None:
    """Close the HDF5 file and then its guard; an HDF5 error at close is recorded."""
    try:
        f.close()
    except (OSError, RuntimeError) as exc:
        guard._fail(exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc)))
    guard.fsync()
    guard.close()


@contextlib.contextmanager
def guarded_h5(
    path: str | os.PathLike[str], *, shown: str | os.PathLike[str] | None = None
) -> Iterator[h5py.File]:
    """``with guarded_h5(path) as f:`` — a new HDF5 file, fsynced and closed at the end of
    the block; OutputError naming ``shown`` (default ``path``) when a write failed."""
    try:
        f, guard = open_guarded(path)
    except OSError as exc:
        raise OutputError(f"cannot write {shown or path}: {disk_error_text(exc)}") from exc
    try:
        yield f
    finally:
        close_guarded(f, guard)
    if guard.error is not None:
        raise OutputError(f"cannot write {shown or path}: {disk_error_text(guard.error)}")
