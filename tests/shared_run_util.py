"""Results computed once per test run and shared by the tests of every xdist worker.

The statistical tests compute many independent cases (campaigns, seeds) in chunk
tests and pool them in other tests. With the cases in a module cache, every test of
the module must run on one worker (tests/conftest.py), and that one group is the
suite's longest. Here a case is computed by whichever test asks first and kept as a
pickle in a directory of the run that all workers see (:func:`run_dir`); a test that
asks for a case another worker is computing waits for it (an ``flock`` on the case's
lock file, released by the kernel even if that worker dies), and computes the case
itself only when no result is there. So chunk tests and pooled tests can be
scheduled anywhere, in any order, and every case is still computed once per run.
Results never outlive the run: each run has its own directory.
"""

from __future__ import annotations

import fcntl
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
_loaded: dict[Path, object] = {}  # this process's copies of the results it has read


def run_dir(factory: pytest.TempPathFactory, name: str) -> Path:
    """A directory ``name`` shared by every worker of this run (this process alone
    without xdist): under xdist, each worker's base temp dir is a child of the run's."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    path = base / f"shared-{name}"
    path.mkdir(exist_ok=True)
    return path


def computed_once(directory: Path, key: str, compute: Callable[[], T]) -> T:
    """``compute()``'s result for ``key``, computed once per run whichever worker asks."""
    result = directory / f"{key}.pickle"
    if result in _loaded:
        return _loaded[result]  # type: ignore[return-value]
    with open(directory / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while another worker computes the case
        if result.exists():
            with open(result, "rb") as f:
                value = pickle.load(f)
        else:
            value = compute()
            partial = result.with_suffix(".partial")
            with open(partial, "wb") as f:
                pickle.dump(value, f)
            partial.rename(result)
    _loaded[result] = value
    return value
