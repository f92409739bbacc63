"""Results of the statistical tests, computed once and kept by content.

The statistical tests compute many independent cases (campaigns, seeds) in chunk
tests and pool them in other tests. A case is kept as a pickle under pytest's cache
directory (:data:`RESULTS`, set by tests/conftest.py), named by its key and a hash of
the code that computes it: the package's sources, the tests' helper modules and the
test module that asks. Whichever test asks first computes it; one that asks while
another xdist worker computes it waits for it (an ``flock`` on the case's lock file,
released by the kernel even if that worker dies); later tests and later runs read it
until that code changes. So chunk tests and pooled tests can be scheduled anywhere, in
any order, and every case is computed once. Without pytest's cache (``-p
no:cacheprovider``) the results live in the run's directory (:func:`run_dir`).

A module fixture that writes files (a capture, the demo) is built once per run the same
way (:func:`once_per_run`): the tests of its module may run on several workers.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

import pytest

T = TypeVar("T")
TESTS = Path(__file__).resolve().parent
RESULTS: Path | None = None
"""Where results are kept between runs (pytest's cache dir), or None: in the run's."""
POOLED_TIMEOUT_S = 1800
"""Timeout of a pooled test (s): scheduled before the chunk tests, it computes (or waits
for) every case, up to the chunks' time together on a busy machine (each chunk test keeps
the suite's 300 s)."""
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


@cache
def _code_hash(test_module: str) -> str:
    """Hash of the package's sources, the tests' helper modules and ``test_module``."""
    root = TESTS.parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        helper = rel.parts[0] == "tests" and not rel.name.startswith("test_")
        package = rel.parts[0] not in ("tests", "benchmarks", "build", ".venv")
        if (helper or package) and "site-packages" not in rel.parts:
            h.update(str(rel).encode() + b"\0" + path.read_bytes())
    h.update(Path(test_module).read_bytes())
    return h.hexdigest()[:16]


def computed_once(
    directory: Path, key: str, compute: Callable[[], T], module: str | None = None
) -> T:
    """``compute()``'s result for ``key`` (unique within ``directory``'s name), computed
    once while the code that computes it is unchanged, whichever worker or run asks:
    the package, the tests' helpers and ``module`` (the test module whose code
    ``compute`` runs; None: the file ``compute`` is defined in)."""
    folder = directory if RESULTS is None else RESULTS / directory.name
    folder.mkdir(parents=True, exist_ok=True)
    test_module = module or compute.__code__.co_filename
    result = folder / f"{key}-{_code_hash(test_module)}.pickle"
    return _once(folder, key, result, compute)


def once_per_run(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(directory)``'s result, built once per run in a directory ``name`` that every
    worker sees, whichever worker asks first (the others wait for it)."""
    directory = run_dir(factory, name)
    return _once(directory, "result", directory / "result.pickle", lambda: build(directory))


def _once(folder: Path, key: str, result: Path, compute: Callable[[], T]) -> T:
    """``compute()``'s result kept in ``result`` (a pickle in ``folder``), computed by one
    process; older results of ``key`` (``key-*.pickle``) are removed."""
    if result in _loaded:
        return _loaded[result]  # type: ignore[return-value]
    with open(folder / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # held while another worker computes the case
        if result.exists():
            with open(result, "rb") as f:
                value = pickle.load(f)
        else:
            value = compute()
            for stale in folder.glob(f"{key}-*.pickle"):  # made by code that changed since
                stale.unlink()
            partial = result.with_suffix(".partial")
            with open(partial, "wb") as f:
                pickle.dump(value, f)
            partial.rename(result)
    _loaded[result] = value
    return value
