"""The suite under pytest-xdist (``./dev test``): tests that share state stay on one worker.

A module's tests that share a module-scoped fixture or a module cache must run on the
worker that built it (tests/conftest.py groups them for ``--dist loadgroup``); tests of
no group spread over the workers. Checked by running a small suite in a child pytest
with the project's conftest and two workers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
N_TESTS = 12  # per module: all on one worker by chance has probability 2 * 2**-12 at most

RAN = '''
def ran(module, i, value):
    """Record which worker ran test ``i`` of ``module`` (and a value it saw)."""
    path = os.path.join(os.environ["RAN_DIR"], f"{module}-{i}")
    with open(path, "w") as f:
        f.write(f"{os.environ['PYTEST_XDIST_WORKER']} {value}")
'''

FIXTURE_MODULE = f"""
import os, pytest
{RAN}

@pytest.fixture(scope="module")
def built():
    return os.getpid()

@pytest.mark.parametrize("i", range({N_TESTS}))
def test_uses_the_module_fixture(built, i):
    ran("fixture", i, built)
"""

CACHE_MODULE = f"""
import os, time
from functools import cache

import pytest
{RAN}
@cache
def chunk(i):
    return i

@pytest.mark.parametrize("i", range({N_TESTS}))
def test_fills_the_module_cache(i):
    ran("cache", i, chunk(i))
"""

FREE_MODULE = f"""
import os, time

import pytest
{RAN}
@pytest.mark.parametrize("i", range({N_TESTS}))
def test_shares_nothing(i):
    time.sleep(0.2)
    ran("free", i, i)
"""


def test_xdist_keeps_stateful_modules_on_one_worker_and_spreads_the_rest(tmp_path):
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_fixture.py").write_text(FIXTURE_MODULE)
    (tmp_path / "test_cache.py").write_text(CACHE_MODULE)
    (tmp_path / "test_free.py").write_text(FREE_MODULE)
    out = tmp_path / "ran"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(HERE), "RAN_DIR": str(out)}
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = defaultdict(set)
    pids: set[str] = set()
    for path in out.iterdir():
        module = path.name.split("-")[0]
        worker, value = path.read_text().split()
        workers[module].add(worker)
        if module == "fixture":
            pids.add(value)
    assert len(list(out.iterdir())) == 3 * N_TESTS
    assert len(workers["fixture"]) == 1 and len(pids) == 1, (workers, pids)
    assert len(workers["cache"]) == 1, workers
    # the free tests are handed out one by one: both workers take some
    assert workers["free"] == {"gw0", "gw1"}, workers
