"""What the pods' pooled honesty tests (tests/test_pods_*honesty*.py) share: a seed's
figures computed once and kept by content (tests/shared_run_util.py), the run's directory
for them, and the (drive, axis) cases with the missed ones as strict xfails."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pods_cli_util import AXES
from shared_run_util import computed_once, run_dir

T = TypeVar("T")


def shared_root(name: str) -> Any:
    """A session fixture ``root``: the directory ``name`` every worker of the run shares."""

    @pytest.fixture(scope="session")
    def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return run_dir(tmp_path_factory, name)

    return root


def seed_result(root: Path, seed: int, run_seed: Callable[[int, Path], T], module: str) -> T:
    """``run_seed(seed, directory)``, computed once while the code of ``module`` (the test
    module that defines ``run_seed``) and the package are unchanged."""
    return computed_once(root, f"s{seed}", lambda: run_seed(seed, root / f"s{seed}"), module)


def cases(drives: Iterable[str], missed: dict[tuple[str, str], str]) -> list[Any]:
    """(drive, axis) cases, the missed ones as strict xfails with the measured figure."""
    return [
        pytest.param(d, a, marks=pytest.mark.xfail(strict=True, reason=missed[(d, a)]))
        if (d, a) in missed
        else pytest.param(d, a)
        for d in drives
        for a in AXES
    ]
