"""sensorbench: bring up, capture, characterize and validate robot sensors."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sensorbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
