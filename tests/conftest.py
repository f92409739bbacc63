"""Shared pytest configuration: the ``slow`` marker and its opt-in flag, the
``real_data`` marker, where the statistical tests keep their results
(tests/shared_run_util.py: pytest's cache dir), and, under pytest-xdist (``./dev test``
runs it with ``-n`` workers), one numba cache per worker
(:func:`_numba_cache_per_worker`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import shared_run_util


def _numba_cache_per_worker() -> None:
    """Give this xdist worker (and the processes it starts) its own numba cache.

    numba writes each cache file atomically, but it numbers a kernel's compiled
    signatures from its index without a lock: two processes that add different
    signatures of one kernel at once can both write ``<kernel>.1.nbc``, leaving an
    index entry whose file holds the other signature's machine code. One directory
    per worker (kept between runs, so only the first run after a change compiles) has
    a single writer; below it one directory per state of the sources, as the package
    keeps its own (``sensorbench._sources_digest``). An explicit ``NUMBA_CACHE_DIR`` is
    left alone.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None or "NUMBA_CACHE_DIR" in os.environ:
        return
    import sensorbench  # its root imports no numba; it keys the cache by the sources

    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    digest = sensorbench._sources_digest(os.path.dirname(sensorbench.__file__))
    cache = sensorbench._use_cache(Path(base) / "sensorbench" / f"numba-xdist-{worker}", digest)
    os.environ["NUMBA_CACHE_DIR"] = str(cache)


_numba_cache_per_worker()  # before any test module imports sensorbench (and numba)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config: pytest.Config) -> None:
    cache = getattr(config, "cache", None)  # absent with -p no:cacheprovider
    if cache is not None:
        shared_run_util.RESULTS = cache.mkdir("sensorbench-results")
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


@pytest.fixture(scope="session")
def warm_readers() -> None:
    """Compile (or load from this worker's numba cache) the reader kernels before a test
    gives a ``capture`` subprocess a deadline to start recording: from an empty cache
    their compile takes ~22 s idle and over 30 s under load; the subprocess shares the
    cache (``NUMBA_CACHE_DIR`` is inherited)."""
    from sensorbench.drivers import kernels

    kernels.warm_up()


@pytest.fixture(scope="session")
def warm_kernels(warm_readers: None) -> None:
    """Compile (or load from this worker's numba cache) the reader kernels and the
    emulated robot's filters before a test starts a robot whose clock is already running.

    From an empty cache the compile takes over a minute under load (the filters' one
    compiled step alone ~50 s), longer than a short scenario's pose samples last or a
    fixture waits for a first estimate; a ``live`` subprocess shares the cache
    (``NUMBA_CACHE_DIR`` is inherited) and then starts in about a second, as on a robot
    after its first run.
    """
    from sensorbench.live.odometry import OdometryModels
    from sensorbench.sim.emulated_robot import DEFAULT_CONFIG

    models = DEFAULT_CONFIG.parent / "models"
    for imu in (False, True):
        files = (models / "pods-emulated.toml", models / "noise-emulated.toml")
        OdometryModels.from_files(*files, imu=imu).warm_up()
