"""sensorbench: bring up, capture, characterize and validate robot sensors."""

import logging
import os
from pathlib import Path


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata on first use (importing
    ``importlib.metadata`` costs more than the rest of the CLI's start-up)."""
    if name != "__version__":
        raise AttributeError(f"module 'sensorbench' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sensorbench")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def _writable_dir(path: Path) -> bool:
    """True when ``path`` is (made) a directory this process can write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _home_cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME`` (default ``~/.cache``)``/sensorbench/numba``; None with no
    home at all (no ``$HOME`` and no passwd entry: a systemd ``DynamicUser=`` service)."""
    base = os.environ.get("XDG_CACHE_HOME")
    try:
        return Path(base or Path.home() / ".cache") / "sensorbench" / "numba"
    except RuntimeError:  # Path.home(): "Could not determine home directory"
        return None


def _numba_cache_dir() -> Path | None:
    """Where numba's ``cache=True`` kernels go: the home's cache (:func:`_home_cache_dir`),
    never beside the source, where they survive ``pip uninstall`` and the leftover folder
    shadows a later editable install. A service without a writable home, or without a
    home at all (systemd's ``ProtectHome=``, ``DynamicUser=``), gets a directory of its own
    under the temp directory, used only while it is this user's and nobody else may write
    it (numba's cache files are pickles: a directory another user controls would run
    their code); None when neither can be written (numba's own locators are tried)."""
    home = _home_cache_dir()
    if home is not None and _writable_dir(home):
        return home
    import stat
    import tempfile

    # drivers/serial_port.foreign_channel_dir's rule for /tmp; the package's root may
    # import no layer above it (docs/ARCHITECTURE.md), so it is spelled out here
    try:
        temp = Path(tempfile.gettempdir()) / f"sensorbench-numba-{os.getuid()}"
        temp.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(temp)  # a link planted in its place is not followed
    except OSError:  # no writable temp directory
        return None
    mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
    return temp if mine and os.access(temp, os.W_OK | os.X_OK) else None


def _sources_digest(root: str) -> str:
    """8 hex digits of the size and modification time (ns) of every module of the package
    at ``root`` (its ``tests`` and folders that are no package aside). numba keys a cached
    kernel on its own file alone: a kernel whose callee in another module changed (a
    ``git pull`` that touched only the callee) went on running the callee's old code. A
    new digest is a new cache directory."""
    import zlib

    def stamps(folder: str) -> list[str]:
        out = []
        for entry in os.scandir(folder):
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "tests" and os.path.isfile(f"{entry.path}/__init__.py"):
                        out += stamps(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    out.append(f"{entry.path}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:  # removed while we looked (a checkout in progress)
                continue
        return out

    return f"{zlib.crc32(chr(10).join(sorted(stamps(root))).encode()):08x}"


STALE_CACHE_S = 7 * 86400
"""A cache directory of other sources that no import used for this long (s) is removed
when a new one is made (numba's machine code for sources since changed: about 2 MB each,
one more at every change of a checkout)."""


def _use_cache(parent: Path, digest: str) -> Path:
    """``parent/digest``, marked as used now (its modification time). When it is new, the
    other directories in ``parent`` (the package's own: other digests, and numba's
    folders of the layout before digests) that nothing used for :data:`STALE_CACHE_S`
    are removed; files and links are left. numba makes a removed directory again if a
    process still running from it compiles."""
    here = parent / digest
    try:
        os.utime(here)
        return here
    except FileNotFoundError:
        pass
    except OSError:  # not ours to mark (a read-only cache): used as it is
        return here
    import shutil
    import time

    cutoff = time.time() - STALE_CACHE_S
    try:
        old = [e.path for e in os.scandir(parent) if e.name != digest
               and e.is_dir(follow_symlinks=False)
               and e.stat(follow_symlinks=False).st_mtime < cutoff]  # fmt: skip
    except OSError:  # no parent yet, or not readable: nothing to prune
        return here
    for path in old:
        shutil.rmtree(path, ignore_errors=True)
    return here


if "NUMBA_CACHE_DIR" not in os.environ and (_cache := _numba_cache_dir()) is not None:
    # an explicit one wins; ours holds one directory per state of the sources
    _digest = _sources_digest(os.path.dirname(__file__))
    os.environ["NUMBA_CACHE_DIR"] = str(_use_cache(_cache, _digest))

# A library does not print: without a handler the application installs (``demo`` shows
# them in its progress lines), drivers' warnings went to stderr through logging's
# last-resort handler, across the capture status line; each is also a bring-up row or a
# session event
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = ["__version__"]
