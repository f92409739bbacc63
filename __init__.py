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


def _numba_cache_dir() -> Path:
    """Where numba's ``cache=True`` kernels go: ``$XDG_CACHE_HOME`` (default ``~/.cache``),
    never beside the source, where they survive ``pip uninstall`` and the leftover folder
    shadows a later editable install; an explicit ``NUMBA_CACHE_DIR`` still wins."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sensorbench" / "numba"


os.environ.setdefault("NUMBA_CACHE_DIR", str(_numba_cache_dir()))

__all__ = ["__version__"]
