"""Benchmarks printed by ``sensorbench bench``.

Every module in this package exposes ``run(quick: bool) -> list[BenchResult]``, but the
helpers benchmarks share (:data:`HELPERS`: ``c_reference``, C references compiled at
bench time).

Method: every timed figure is measured in several rounds and reported as the median of
the rounds with their spread (smallest and largest round). A comparison with a reference
implementation times ours and the reference alternately in each round, after the same
warm-up for both (:func:`interleave`), so a load change on a shared machine hits both
sides of a round instead of one side of the ratio; the ratio is taken per round. A
rate against a fixed figure (a device's line rate, real time) is timed in rounds of
ours alone. Compute is timed in CPU seconds of this process, work that waits (the
session writer, CPU use of running devices) in wall seconds. ``bench --json``
carries every round. Accuracy figures are not timings: the filters' split/joint
ratio is a geometric mean whose rounds are its seeds.
"""

from __future__ import annotations

import importlib
import itertools
import math
import pkgutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Round:
    """One round's times (s) and the figure computed from them.

    A figure that is not a timing (an accuracy ratio per seed) has no times.
    """

    ours_s: float | None
    reference_s: float | None
    value: float


@dataclass(frozen=True)
class Timing:
    """Times (s) of the rounds of :func:`interleave`, in round order.

    ``reference_s`` is empty when only ours was timed.
    """

    ours_s: tuple[float, ...]
    reference_s: tuple[float, ...] = ()

    @property
    def ours_median_s(self) -> float:
        """Median round time of ours (s)."""
        return statistics.median(self.ours_s)

    @property
    def reference_median_s(self) -> float:
        """Median round time of the reference (s); nan when there was none."""
        return statistics.median(self.reference_s) if self.reference_s else math.nan

    def rounds(self, value: Callable[[float, float], float]) -> tuple[Round, ...]:
        """Each round with its figure ``value(ours_s, reference_s)``.

        Without a reference, ``value`` gets nan for it and the rounds record None.
        """
        if not self.reference_s:
            return tuple(Round(o, None, float(value(o, math.nan))) for o in self.ours_s)
        return tuple(
            Round(o, r, float(value(o, r)))
            for o, r in zip(self.ours_s, self.reference_s, strict=True)
        )


def interleave(
    ours: Callable[[], object],
    reference: Callable[[], object] | None = None,
    *,
    rounds: int,
    warmup: Sequence[Callable[[], object]] | None = None,
    clock: Callable[[], float] = time.process_time,
) -> Timing:
    """Time ``ours`` and ``reference`` alternately for ``rounds`` rounds.

    The warm-up runs first: ``warmup`` (one callable per side, e.g. the same small
    workload) or, by default, one untimed call of each side. The order inside a
    round alternates (ours first in even rounds, the reference first in odd ones),
    so a drift in machine load does not favour one side. ``clock`` is this process's
    CPU time by default, which other work on a shared machine does not inflate (the
    timed work is single-threaded compute); pass ``time.perf_counter`` for work that
    waits on I/O or other threads.
    """
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    sides = [ours] if reference is None else [ours, reference]
    for fn in warmup if warmup is not None else sides:
        fn()
    times: list[list[float]] = [[] for _ in sides]
    for k in range(rounds):
        order = range(len(sides)) if k % 2 == 0 else reversed(range(len(sides)))
        for i in order:
            t0 = clock()
            sides[i]()
            times[i].append(clock() - t0)
    return Timing(tuple(times[0]), tuple(times[1]) if reference is not None else ())


def cpu_windows(
    cpu_s: Sequence[Callable[[], float]], seconds: float, windows: int
) -> list[tuple[Round, ...]]:
    """CPU use of running threads or processes in ``windows`` consecutive windows.

    Each of ``cpu_s`` reads one CPU clock (s); the windows split ``seconds`` of wall
    time. Per clock, each round's ``ours_s`` is the CPU time spent in the window and
    its value that time in % of the window's wall time (% of one core).
    """
    marks = [([c() for c in cpu_s], time.monotonic())]
    for _ in range(windows):
        time.sleep(seconds / windows)
        marks.append(([c() for c in cpu_s], time.monotonic()))
    return [
        tuple(
            Round(c1[k] - c0[k], None, 100.0 * (c1[k] - c0[k]) / (w1 - w0))
            for (c0, w0), (c1, w1) in itertools.pairwise(marks)
        )
        for k in range(len(cpu_s))
    ]


@dataclass(frozen=True)
class BenchResult:
    """One measured figure: ``value`` is the median of ``rounds`` when there are rounds.

    ``higher_is_better`` decides how ``value`` compares with ``target``.
    """

    area: str
    name: str
    value: float
    unit: str
    target: float | None = None
    higher_is_better: bool = True
    detail: str = ""
    rounds: tuple[Round, ...] = ()

    @classmethod
    def from_rounds(
        cls,
        area: str,
        name: str,
        rounds: Sequence[Round],
        unit: str,
        target: float | None = None,
        higher_is_better: bool = True,
        detail: str = "",
    ) -> BenchResult:
        """The median of the rounds' figures, with every round kept."""
        value = statistics.median(r.value for r in rounds)
        return cls(area, name, value, unit, target, higher_is_better, detail, tuple(rounds))

    @property
    def spread(self) -> tuple[float, float] | None:
        """(smallest, largest) figure over the rounds; None without rounds."""
        if not self.rounds:
            return None
        values = [r.value for r in self.rounds]
        return min(values), max(values)

    @property
    def meets_target(self) -> bool | None:
        """True/False against the target, None when there is no target."""
        if self.target is None:
            return None
        return self.value >= self.target if self.higher_is_better else self.value <= self.target

    def as_dict(self) -> dict:
        """JSON-ready dict including the verdict, the spread and every round."""
        doc = asdict(self)
        doc["rounds"] = [asdict(r) for r in self.rounds]
        spread = self.spread
        doc["spread"] = None if spread is None else {"min": spread[0], "max": spread[1]}
        doc["meets_target"] = self.meets_target
        return doc


HELPERS = ("c_reference", "joint_filter")
"""Modules of this package that benchmarks share and that are no benchmark themselves."""


def modules() -> list[str]:
    """Names of the benchmark modules, sorted (not :data:`HELPERS`)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in HELPERS)


def run_all(
    quick: bool = False,
    only: list[str] | None = None,
    progress: Callable[[str], None] | None = None,
    done: Callable[[str, list[BenchResult]], None] | None = None,
) -> list[BenchResult]:
    """Run every benchmark module (or those named in ``only``) and collect results.

    ``progress(name)`` is called as a module starts, ``done(name, results)`` as soon as it
    has finished (so its figures can be shown while the next one runs).
    """
    results: list[BenchResult] = []
    for name in modules():
        if only and name not in only:
            continue
        if progress is not None:
            progress(name)
        module = importlib.import_module(f"{__name__}.{name}")
        found = list(module.run(quick))
        if done is not None:
            done(name, found)
        results.extend(found)
    return results
