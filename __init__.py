"""sensorbench: bring up, capture, characterize and validate robot sensors."""

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


def _writable_dir(path: Path, private: bool) -> bool:
    """True when ``path`` is (made) a directory this process can write; with ``private``
    also only when it is this user's and nobody else may write it (numba's cache files
    are pickles: a directory another user controls would run their code)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
    except OSError:
        return False
    if private and (st.st_uid != os.getuid() or st.st_mode & 0o022):
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _numba_cache_dir() -> Path | None:
    """Where numba's ``cache=True`` kernels go: ``$XDG_CACHE_HOME`` (default ``~/.cache``),
    never beside the source, where they survive ``pip uninstall`` and the leftover folder
    shadows a later editable install. A service without a writable home, or without a
    home at all (systemd's ``ProtectHome=``, ``DynamicUser=``) gets a directory of its own
    user under the temp directory; None when neither can be written (numba's own
    locators are tried then)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no $HOME and no passwd entry (a systemd DynamicUser= service)
            base = ""
    home = Path(base) / "sensorbench" / "numba"
    if base and _writable_dir(home, private=False):
        return home
    import tempfile

    try:
        temp = Path(tempfile.gettempdir()) / f"sensorbench-numba-{os.getuid()}"
    except OSError:  # no writable temp directory either
        return None
    return temp if _writable_dir(temp, private=True) else None


if "NUMBA_CACHE_DIR" not in os.environ:  # an explicit one wins
    _cache = _numba_cache_dir()
    if _cache is not None:
        os.environ["NUMBA_CACHE_DIR"] = str(_cache)

__all__ = ["__version__"]
