"""Benchmarks printed by ``sensorbench bench``.

Every module in this package exposes ``run(quick: bool) -> list[BenchResult]``.
Each result is a ratio or rate measured in one run, with the target it is held to.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class BenchResult:
    """One measured figure.

    ``higher_is_better`` decides how ``value`` compares with ``target``.
    """

    area: str
    name: str
    value: float
    unit: str
    target: float | None = None
    higher_is_better: bool = True
    detail: str = ""

    @property
    def meets_target(self) -> bool | None:
        """True/False against the target, None when there is no target."""
        if self.target is None:
            return None
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def as_dict(self) -> dict:
        """JSON-ready dict including the verdict."""
        return {**asdict(self), "meets_target": self.meets_target}


def modules() -> list[str]:
    """Names of the benchmark modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__))


def run_all(
    quick: bool = False,
    only: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[BenchResult]:
    """Run every benchmark module (or those named in ``only``) and collect results."""
    results: list[BenchResult] = []
    for name in modules():
        if only and name not in only:
            continue
        if progress is not None:
            progress(name)
        module = importlib.import_module(f"{__name__}.{name}")
        results.extend(module.run(quick))
    return results
