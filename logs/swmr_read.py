"""Open a file its writer holds (or held) for SWMR writing, with a bound on the metadata
retries.

A SWMR reader retries a metadata read whose checksum fails, since the writer may be in
the middle of a flush; HDF5 sleeps between attempts, doubling the sleep from 1 ns, so
``n`` attempts wait about 2**n ns in all before giving an object up. Its default of 100
attempts never ends on a damaged file (measured: 30 attempts 1.1 s, 100 over 5 minutes for
one object). :data:`READ_ATTEMPTS` bounds it; the setting is not in h5py's API, so it is
made on the HDF5 library h5py loaded.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from functools import cache

import h5py

READ_ATTEMPTS = 27
"""Metadata read attempts of a SWMR reader: about 0.13 s of retries before a checksum
failure is final; a writer's flush takes milliseconds."""


@cache
def _set_read_attempts() -> Callable[[int, int], int] | None:
    """``H5Pset_metadata_read_attempts`` of the HDF5 library loaded by h5py, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libhdf5" in line}
    except OSError:
        return None
    for path in sorted(paths):
        if "_hl" in os.path.basename(path):
            continue
        try:
            fn = ctypes.CDLL(path).H5Pset_metadata_read_attempts
        except (OSError, AttributeError):
            continue
        fn.argtypes = [ctypes.c_int64, ctypes.c_uint]
        fn.restype = ctypes.c_int
        return fn
    return None


def open_swmr(path: str | os.PathLike[str]) -> h5py.File:
    """``path`` opened read-only for SWMR reading, a damaged object given up after
    :data:`READ_ATTEMPTS` (HDF5's default where its library cannot be reached); OSError
    as :class:`h5py.File` raises it."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
    setter = _set_read_attempts()
    if setter is not None:
        setter(fapl.id, READ_ATTEMPTS)
    flags = h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ
    return h5py.File(h5py.h5f.open(os.fsencode(path), flags, fapl=fapl))
