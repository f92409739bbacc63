"""Installation hygiene: compiled-kernel caches stay outside the installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import sensorbench


def _numba_cache_dir(env: dict[str, str]) -> str:
    code = "import json, sensorbench, numba.core.config as c; print(json.dumps(c.CACHE_DIR))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_numba_cache_is_outside_the_package(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    cache = Path(_numba_cache_dir(env)).resolve()
    package = Path(sensorbench.__file__).resolve().parent
    assert cache.parent == tmp_path.resolve() / "sensorbench" / "numba"  # then the sources' digest
    assert package not in cache.parents


def test_explicit_numba_cache_dir_wins(tmp_path: Path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "mine"))
    assert Path(_numba_cache_dir(env)) == tmp_path / "mine"


def test_every_subpackage_is_in_the_package_list() -> None:
    """setuptools installs only the listed packages: a new subpackage must be listed
    (``benchmarks`` is left out on purpose: it runs from a checkout, commands/bench.py)."""
    root = Path(__file__).resolve().parents[1]
    setup = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    listed = set(setup["setuptools"]["packages"])
    skip = {"tests", "build", "docs", "benchmarks"}
    found = {"sensorbench"} | {
        ".".join(("sensorbench", *init.parent.relative_to(root).parts))
        for init in root.rglob("__init__.py")
        if init.parent != root
        and not init.relative_to(root).parts[0].startswith(".")
        and init.relative_to(root).parts[0] not in skip
    }
    data_only = set(setup["setuptools"]["package-data"])
    assert found <= listed
    assert listed - found <= data_only
