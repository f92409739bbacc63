"""Shared pytest configuration: the ``slow`` marker and its opt-in flag, and what keeps
the suite right under pytest-xdist (``./dev test`` runs it with ``-n`` workers and
``--dist loadgroup``).

Under xdist:

- tests of a module that keeps state from one test to the next run on one worker
  (:func:`_keeps_state`): a module-scoped fixture would otherwise be built once per
  worker, and the statistical modules' chunk tests fill a module cache that their
  pooled tests read;
- the long work is handed out first (:func:`_long_work_first`), so that no worker
  starts a long group or a slow test when the others are nearly done;
- each worker compiles numba's ``cache=True`` kernels into its own directory
  (:func:`_numba_cache_per_worker`).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest


def _numba_cache_per_worker() -> None:
    """Give this xdist worker (and the processes it starts) its own numba cache.

    numba writes each cache file atomically, but it numbers a kernel's compiled
    signatures from its index without a lock: two processes that add different
    signatures of one kernel at once can both write ``<kernel>.1.nbc``, leaving an
    index entry whose file holds the other signature's machine code. One directory
    per worker (kept between runs, so only the first run after a change compiles) has
    a single writer. An explicit ``NUMBA_CACHE_DIR`` is left alone.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or "NUMBA_CACHE_DIR" in os.environ:
        return
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    os.environ["NUMBA_CACHE_DIR"] = str(Path(base) / "sensorbench" / f"numba-xdist-{worker}")


_numba_cache_per_worker()  # before any test module imports sensorbench (and numba)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow", action="store_true", default=False, help="also run tests marked slow"
    )


def _keeps_state(item: pytest.Item, module: ModuleType) -> bool:
    """Whether ``item`` shares state with other tests of its module.

    It uses a fixture of module (or class or package) scope, or its module defines a
    ``functools.cache``/``lru_cache`` function (the chunk/pooled pattern of the
    statistical tests). Modules that share state otherwise (pytest's cache, files)
    say so with ``pytestmark = pytest.mark.xdist_group(...)``.
    """
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        for defs in info.name2fixturedefs.values():
            if any(d.scope in ("module", "class", "package") for d in defs):
                return True
    return any(
        hasattr(v, "cache_info") and getattr(v, "__module__", None) == module.__name__
        for v in vars(module).values()
    )


def _group(item: pytest.Item) -> str | None:
    """The item's xdist group, if it has one."""
    for mark in item.iter_markers("xdist_group"):
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    return None


def _long_work_first(items: list[pytest.Item], runslow: bool) -> None:
    """Order ``items`` for xdist: the likely long work units first.

    xdist hands out work units (a group, or one test) in collection order when
    ``--no-loadscope-reorder`` is given (pyproject's addopts); the many short tests
    then fill the workers' last minutes instead of a long one starting when the
    others are nearly done. First the groups that hold slow tests, then the slow
    tests, then the other groups (whose module fixtures are the suite's long setups),
    then the rest. The sort is stable: a group's tests keep their order.
    """
    slow_groups = {_group(i) for i in items if runslow and "slow" in i.keywords} - {None}

    def rank(item: pytest.Item) -> int:
        group = _group(item)
        if group in slow_groups:
            return 0
        if runslow and "slow" in item.keywords:
            return 1
        return 2 if group is not None else 3

    items.sort(key=rank)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and _group(item) is None and _keeps_state(item, module):
            item.add_marker(pytest.mark.xdist_group(module.__name__))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _long_work_first(items, config.getoption("--runslow"))
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_data(*files): needs real files from shared/data/real (tests/real_data.py)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    from real_data import in_ci, missing_reason, present

    for mark in item.iter_markers("real_data"):
        for f in mark.args:
            if not present(f):
                if in_ci():
                    pytest.fail(missing_reason(f) + "; CI=true, so this fails instead of skipping")
                pytest.skip(missing_reason(f))
