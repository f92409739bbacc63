"""Reference implementations in C, compiled with the system compiler when a benchmark runs.

A benchmark that compares one of our kernels with "the strongest reference we can run"
writes that reference as a small C file beside it (``bench/NAME.c``: plain C99, no
dependencies). :func:`load` compiles it once per process with ``cc -O2 -shared -fPIC``
(``$CC`` if set) into a temporary directory removed at exit, and returns the library
for :mod:`ctypes`. Compiling is not timed. Without a compiler the benchmark says so and
falls back to its Python reference (:class:`CReferenceUnavailable` carries why).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent


class CReferenceUnavailable(RuntimeError):
    """No C compiler, or the reference did not compile (the message says which)."""


def compiler() -> str | None:
    """Path of the C compiler (``$CC`` or ``cc``), or None."""
    return shutil.which(os.environ.get("CC", "cc"))


@functools.cache
def compiler_version() -> str:
    """First line of ``cc --version`` (for the benchmark's detail), or ""."""
    cc = compiler()
    if cc is None:
        return ""
    done = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else ""


@functools.cache
def load(name: str) -> ctypes.CDLL:
    """``bench/NAME.c`` compiled and loaded (once per process).

    Raises:
        CReferenceUnavailable: no compiler, or it failed (its message included).
    """
    cc = compiler()
    if cc is None:
        raise CReferenceUnavailable("no C compiler (cc) on this machine")
    source = _HERE / f"{name}.c"
    work = Path(tempfile.mkdtemp(prefix="sensorbench-cref-"))
    atexit.register(shutil.rmtree, work, True)
    lib = work / f"{name}.so"
    done = subprocess.run(
        [cc, "-O2", "-std=c99", "-shared", "-fPIC", "-o", str(lib), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise CReferenceUnavailable(f"{cc} failed on {source.name}: {done.stderr.strip()}")
    return ctypes.CDLL(str(lib))
