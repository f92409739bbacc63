"""Shared pytest configuration: the ``slow`` marker and its opt-in flag, the
``real_data`` marker, where the statistical tests keep their results
(tests/shared_run_util.py: pytest's cache dir), and, under pytest-xdist (``./dev test``
runs it with ``-n`` workers), one numba cache per worker
(:func:`_numba_cache_per_worker`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

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


def _warm_readers() -> None:
    from sensorbench.drivers import kernels

    kernels.warm_up()


def _warm_kernels() -> None:
    from sensorbench.live.odometry import OdometryModels
    from sensorbench.sim.emulated_robot import DEFAULT_CONFIG

    _warm_readers()
    models = DEFAULT_CONFIG.parent / "models"
    for imu in (False, True):
        files = (models / "pods-emulated.toml", models / "noise-emulated.toml")
        OdometryModels.from_files(*files, imu=imu).warm_up()


WARM_UPS = {"warm_readers": _warm_readers, "warm_kernels": _warm_kernels}
"""The numba warm-ups a test takes as a fixture of that name."""
WARMED_S: dict[str, float] = {}
"""Each warm-up run before the tests, its wall time (s): a compile from an empty cache
(minutes on a loaded 2-core machine), else a load from the cache (seconds)."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Run the warm-ups the collected tests take before the first test, outside every
    test's timeout: a session fixture's cold compile was charged to the first test that
    took it, whose 300 s it could use up on its own (the filters' compile alone took over
    150 s at load 5). The fixtures then find them done."""
    if session.config.option.collectonly:
        return
    wanted = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    for name, warm in WARM_UPS.items():
        if name in wanted:
            start = time.monotonic()
            warm()
            WARMED_S[name] = time.monotonic() - start


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if WARMED_S:
        terminalreporter.write_line("numba warm-up before the tests: " + ", ".join(
            f"{name} {s:.1f} s" for name, s in WARMED_S.items()))  # fmt: skip


@pytest.fixture(scope="session")
def warm_readers() -> None:
    """Compile (or load from this worker's numba cache) the reader kernels before a test
    gives a ``capture`` subprocess a deadline to start recording: from an empty cache
    their compile takes ~22 s idle and over 30 s under load; the subprocess shares the
    cache (``NUMBA_CACHE_DIR`` is inherited). Done before the tests
    (:func:`pytest_runtestloop`); here for a run without that hook."""
    _warm_readers()


@pytest.fixture(scope="session")
def warm_kernels(warm_readers: None) -> None:
    """Compile (or load from this worker's numba cache) the reader kernels and the
    emulated robot's filters before a test starts a robot whose clock is already running.

    From an empty cache the compile takes minutes under load, longer than a short
    scenario's pose samples last or a fixture waits for a first estimate; a ``live``
    subprocess shares the cache (``NUMBA_CACHE_DIR`` is inherited) and then starts in
    about a second, as on a robot after its first run. Done before the tests
    (:func:`pytest_runtestloop`).
    """
    _warm_kernels()
