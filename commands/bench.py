"""``sensorbench bench``: run the checkout's ``benchmarks/`` (not installed with the
package: docs/ARCHITECTURE.md, layer 10) and print measured ratios."""

from __future__ import annotations

import json
from typing import Any

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt

BENCH_NAMES = (
    "a1", "capture", "filters", "ld19", "lidar", "live", "pose_error", "rosbag", "session", "sim"
)
"""The benchmark modules (``benchmarks/*.py`` but the shared helpers); a test checks the list."""


@cli.command("bench")
@opt.json_option()
@opt.flag_option("--quick", "Smaller workloads (noisier figures).")
@click.option("--only", multiple=True, type=click.Choice(BENCH_NAMES),
    help="Run only this benchmark module (repeatable).")
def bench_cmd(as_json: bool, quick: bool, only: tuple[str, ...]) -> None:
    """Measure throughput and cost as ratios and rates, each from several rounds.

    Each figure is the median round, shown with the smallest and largest (--json lists
    every round); a missed target is shown, not hidden. See docs/ARCHITECTURE.md.
    """

    try:  # the checkout's benchmarks package: a clear error from an installed wheel
        from sensorbench import benchmarks as bench
    except ImportError:
        raise click.ClickException(
            "the benchmarks are not installed with the package: run them from a source "
            "checkout with `./dev bench` (an editable install)") from None

    def progress(name: str) -> None:  # on stderr, so --json's document stays clean
        click.echo(f"running {name} ...", err=True)

    def done(name: str, results: list[Any]) -> None:
        if not as_json:
            for r in results:
                click.echo(_row(r))

    results = bench.run_all(quick=quick, only=list(only) or None, progress=progress, done=done)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))


def _row(r: Any) -> str:
    """One figure as a table row: name, median, unit, spread over rounds, target, verdict."""
    verdict = {True: "ok", False: "MISSED", None: ""}[r.meets_target]
    target = ""
    if r.target is not None:
        target = f"(target {'≥' if r.higher_is_better else '≤'} {r.target:g})"
    spread = ""
    if r.spread is not None:
        spread = f"[{r.spread[0]:.4g} .. {r.spread[1]:.4g}, {len(r.rounds)} rounds]"
    return (
        f"{r.area + ': ' + r.name:<56}  {r.value:>12.4g} {r.unit:<14} {spread:<36} "
        f"{target:<18} {verdict}"
    )
