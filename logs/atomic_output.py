"""Safe output files: no silent overwrite, never over an input, visible only when complete
(docs/FORMAT.md, "Writing safely"); every command that writes a file goes through here."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click

from sensorbench.errors import OutputError, SensorbenchError, SessionError
from sensorbench.logs.update_lock import DEFAULT_WAIT_S, UpdateLock, writer_of

PathLike = str | os.PathLike[str]


WRITE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}
)
"""Errors that mean "this disk or directory cannot take the output" (full, read-only,
failing, not writable, immutable): reported as bad input (exit 2)."""
PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP})
"""Errors that mean "the kernel refuses this path" (a name too long, a loop of symbolic
links), wherever it is looked at: reported as bad input (exit 2)."""


def disk_error_text(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: an OSError in words and its symbol."""
    name = errno.errorcode.get(exc.errno or 0, "")
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


def disk_error(exc: BaseException, path: Path, consequence: str) -> BaseException:
    """``exc`` as an :class:`OutputError` naming ``path`` when it is a failed write
    (full, read-only or failing disk, a directory not writable, :data:`WRITE_ERRNOS`); any
    other ``exc`` as is."""
    if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
        return OutputError(f"cannot write {path}: {disk_error_text(exc)}; {consequence}")
    return exc


def refuse_dash(path: PathLike) -> None:
    """OutputError for the output ``-``: a user writing ``-o -`` meant standard output,
    not a file or directory named ``-`` (a command that can write standard output does
    so without ``-o``)."""
    if Path(path) == Path("-"):
        raise OutputError("'-' is not standard output here: give a path (for a file or "
                          "directory named '-', its absolute path); a command that prints "
                          "does so without -o")


def make_dir(path: Path, consequence: str) -> None:
    """``mkdir -p path`` for an output directory; OutputError naming ``path`` and
    ``consequence`` when it cannot be made (what is there instead, when it is not one)."""
    refuse_dash(path)
    if os.path.lexists(path) and not path.is_dir():
        raise OutputError(f"{path} is {file_kind(os.lstat(path).st_mode)}, not a directory: "
                          f"choose another or remove it; {consequence}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {disk_error_text(exc)}; {consequence}") from exc


def unchanged(pending: PendingOutput) -> str:
    """What a failed ``pending`` left as it was, in words."""
    if isinstance(pending, PendingUpdate):
        return "it is unchanged"
    if pending.force and pending.path.exists():
        return "the existing file is unchanged"
    return "nothing was written"


def same_file(a: PathLike, b: PathLike) -> bool:
    """True when ``a`` and ``b`` name the same file (same resolved path or same inode)."""
    pa, pb = Path(a), Path(b)
    if os.path.realpath(pa) == os.path.realpath(pb):  # never raises, a loop of links too
        return True
    try:
        return os.path.samefile(pa, pb)
    except OSError:
        return False


_NOT_REGULAR = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def regular_input(
    path: PathLike, error: type[SensorbenchError] = SessionError, what: str = "file"
) -> Path:
    """``path`` when it names a regular file to read (a link to one counts); ``what`` names
    it in the messages ("model file").

    Raises:
        error: no such file, or what it is instead: a directory, a device (``/dev/zero``
            never ends), a FIFO (a read waits for a writer forever) or a socket.
    """
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{path}: cannot read {what}: no such file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {disk_error_text(exc)}") from None
    if stat.S_ISREG(mode):
        return path
    raise error(f"{path} is {file_kind(mode)}, not a {what} to read")


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a FIFO (named pipe)")."""
    if stat.S_ISREG(mode):
        return "a regular file"
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
    return next((k for test, k in _NOT_REGULAR if test(mode)), kind)


def refuse_replacing(path: Path, *, locked: bool = False) -> None:
    """Refuse to replace ``path`` unless it is absent or a regular file nobody writes
    (``locked``: the caller holds ``path``'s update lock).

    Raises:
        OutputError: ``path`` is a device node, FIFO, socket or symbolic link, or a
            session a process has open for writing; the message names which.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    never = "it is never replaced, --force or not: choose another output"
    for test, kind in _NOT_REGULAR:
        if test(mode):
            raise OutputError(f"{path} is {kind}, not a regular file; {never}")
    writer = writer_of(path, sidecar=not locked) if stat.S_ISREG(mode) else ""
    if writer:
        raise OutputError(f"{path} is open for writing: {writer}; {never}")


def check_output(path: PathLike, *, force: bool = False, inputs: Iterable[PathLike] = ()) -> Path:
    """Refuse an output path that cannot be written safely; returns it as a Path.

    Raises:
        OutputError: ``path`` is ``-``, one of ``inputs`` (even with ``force``), a directory,
            in a directory that does not exist, exists and ``force`` is False, or is
            not a regular file nobody writes (:func:`refuse_replacing`).
    """
    path = Path(path)
    try:
        return _check_output(path, force, inputs)
    except OSError as exc:  # a name too long, a loop of links, a path the kernel refuses
        raise OutputError(f"cannot write {path}: {disk_error_text(exc)}") from None


def _check_output(path: Path, force: bool, inputs: Iterable[PathLike]) -> Path:
    refuse_dash(path)
    for item in inputs:
        if item is not None and same_file(path, item):
            raise OutputError(
                f"{path} is also an input of this command ({item}); "
                "it is never written over, --force or not: choose another output"
            )
    if path.is_dir():
        raise OutputError(f"{path} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        what = ("is not a directory" if parent.exists() else "is a symbolic link that leads "
                "nowhere" if parent.is_symlink() else "does not exist")
        raise OutputError(f"cannot write {path}: directory {parent} {what}")
    if force:
        refuse_replacing(path)
    elif os.path.lexists(path):
        raise OutputError(f"{path} exists; choose another name or pass --force to replace it")
    return path


def check_new_output(path: PathLike) -> Path:
    """:func:`check_output` without ``--force`` (a recording never replaces a file), its
    directory writable too; returns the output as a Path.

    Raises:
        OutputError: as :func:`check_output`, or the directory is not writable."""
    if os.path.lexists(path):
        raise OutputError(f"{path} exists; a recording never replaces a file: choose another name")
    path = check_output(path)
    if not os.access(path.parent, os.W_OK):
        raise OutputError(f"cannot write {path}: directory {path.parent} is not writable")
    return path


def replace_into(tmp: Path, path: Path) -> None:
    """Rename the complete file ``tmp`` over ``path`` (``--force``), holding ``path``'s
    update lock and checking again, so that a writer that started meanwhile keeps its file.

    Raises:
        OutputError: ``path`` became something :func:`refuse_replacing` refuses.
    """
    refuse_replacing(path)
    lock = UpdateLock(path, wait_s=0.0)
    try:
        lock.acquire()
    except OutputError:
        raise OutputError(
            f"{path} is open for writing: {lock.holder()} writes it; it is never replaced, "
            "--force or not: choose another output"
        ) from None
    try:
        refuse_replacing(path, locked=True)
        os.replace(tmp, path)
    finally:
        lock.release()


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temp_name(path: Path) -> Path:
    """A fresh hidden name beside ``path`` that keeps its suffix (plotting needs it)."""
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    return path.with_name(f".{path.name}.{token}.partial{path.suffix}")


def link_no_clobber(src: Path, dst: Path) -> None:
    """Give ``src``'s file the name ``dst`` too; OutputError if ``dst`` exists. Without
    hard links the file is renamed instead (``src`` is then gone)."""
    appeared = OutputError(f"{dst} appeared while it was being written; nothing replaced")
    try:
        os.link(src, dst)
    except FileExistsError:
        raise appeared from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        # no hard links on this file system: the existence check and rename race
        if dst.exists():
            raise appeared from None
        os.rename(src, dst)


class PendingOutput:
    """A file being written at :attr:`tmp` that becomes :attr:`path` on :meth:`commit`
    (``force``: replacing an existing one; never one of ``inputs``)."""

    def __init__(
        self, path: PathLike, *, force: bool = False, inputs: Iterable[PathLike] = ()
    ) -> None:
        self.path = check_output(path, force=force, inputs=inputs)
        self.force = force
        self.tmp = temp_name(self.path)
        self.done = False

    def commit(self) -> Path:
        """Flush the temporary file to disk and rename it into place; returns the path
        (OutputError if the output appeared meanwhile, without ``force``)."""
        if self.done:
            return self.path
        try:
            with open(self.tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            if isinstance(self, PendingUpdate):
                os.replace(self.tmp, self.path)  # under the lock this update holds
            elif self.force:
                replace_into(self.tmp, self.path)
            else:
                link_no_clobber(self.tmp, self.path)
                self.tmp.unlink(missing_ok=True)
        except BaseException:
            self.discard()
            raise
        _fsync_dir(self.path.parent)
        self.done = True
        return self.path

    def discard(self) -> None:
        """Delete the temporary file (the old output, if any, is untouched)."""
        self.done = True
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_output(
    path: PathLike, *, force: bool = False, inputs: Iterable[PathLike] = ()
) -> Iterator[Path]:
    """Yield a temporary path to write; it becomes ``path`` only if the block succeeds
    (OutputError as :func:`check_output`, or if the output appeared meanwhile)."""
    pending = PendingOutput(path, force=force, inputs=inputs)
    try:
        yield pending.tmp
        if not pending.tmp.exists():
            raise OutputError(f"nothing was written to {pending.path}")
        pending.commit()
    except BaseException as exc:
        pending.discard()
        raise disk_error(exc, pending.path, unchanged(pending)) from exc


class PendingUpdate(PendingOutput):
    """A complete copy of an existing file, modified at :attr:`tmp`, swapped in at commit.

    The file's :class:`~sensorbench.logs.update_lock.UpdateLock` is held from the copy to
    the swap (or discard), so a second update waits (up to ``wait_s``, s) and starts from
    this one's result; the commit still refuses if the original changed meanwhile.
    """

    def __init__(self, path: PathLike, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise OutputError(f"{self.path}: no such file to update")
        self.force = True
        self.tmp = temp_name(self.path)
        self.done = False
        self._lock = UpdateLock(self.path, wait_s).acquire()
        try:
            self._stamp = self._identity()
            shutil.copy2(self.path, self.tmp)
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError):
                raise OutputError(
                    f"cannot copy {self.path} to update it ({disk_error_text(exc)}); "
                    "it is unchanged"
                ) from exc
            raise

    def _identity(self) -> tuple[int, int, int, int]:
        st = self.path.stat()
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def commit(self) -> Path:
        """Swap the modified copy in, unless the original changed meanwhile."""
        try:
            if self._identity() != self._stamp:
                self.discard()
                raise OutputError(
                    f"{self.path} changed while it was being updated; it is unchanged"
                )
            return super().commit()
        finally:
            self._lock.release()

    def discard(self) -> None:
        """Delete the copy and release the lock (the original is untouched)."""
        super().discard()
        self._lock.release()


@contextlib.contextmanager
def atomic_figures(
    directory: PathLike, *, force: bool = False, inputs: Iterable[PathLike] = ()
) -> Iterator[Path]:
    """Yield a fresh hidden directory inside ``directory`` to write figures into; when the
    block succeeds each moves to ``directory / path.name`` by one rename, or none does
    (OutputError) if any would replace an existing file (without ``force``) or an input."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise OutputError(f"{target} is a file; give a directory for the figures")
    work = target / f".figures.{os.getpid()}-{secrets.token_hex(4)}.partial"
    make_dir(target, "no figure was written")
    try:
        work.mkdir()
    except OSError as exc:
        raise disk_error(exc, target, "no figure was written") from exc
    try:
        yield work
        made = sorted(p for p in work.iterdir() if p.is_file())
        for p in made:
            check_output(target / p.name, force=force, inputs=inputs)
        for p in made:
            replace_into(p, target / p.name)
        _fsync_dir(target)
    except BaseException as exc:
        raise disk_error(exc, target, "no figure was replaced") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def force_option(what: str = "the output") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``--force`` flag (alias ``--overwrite``) every writing command takes."""
    help_text = f"Replace {what} if it exists (never one of the command's inputs)."
    return click.option("--force", "--overwrite", "force", is_flag=True, help=help_text)
