"""sensorbench: bring up, capture, characterize and validate robot sensors."""

import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("sensorbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"


def _numba_cache_dir() -> Path:
    """Where numba's ``cache=True`` kernels go: the user's cache, never the package.

    numba caches next to the source by default, i.e. inside ``site-packages/sensorbench``;
    those files survive ``pip uninstall`` and the leftover folder then shadows a later
    editable install as a namespace package. ``$XDG_CACHE_HOME`` (default ``~/.cache``)
    keeps them out of the package; an explicit ``NUMBA_CACHE_DIR`` still wins.
    """
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sensorbench" / "numba"


os.environ.setdefault("NUMBA_CACHE_DIR", str(_numba_cache_dir()))

__all__ = ["__version__"]
