"""``sensorbench bench``: run the benchmarks and print measured ratios."""

from __future__ import annotations

import json

import click

from sensorbench import bench


def register(cli: click.Group) -> None:
    """Attach the ``bench`` command."""
    cli.add_command(bench_cmd)


@click.command("bench")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option("--quick", is_flag=True, help="Smaller workloads (noisier figures).")
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(bench.modules()),
    help="Run only this benchmark module (repeatable).",
)
def bench_cmd(as_json: bool, quick: bool, only: tuple[str, ...]) -> None:
    """Measure throughput and cost as ratios and rates, each from several rounds.

    A ratio against a reference times ours and the reference alternately, round after
    round, after the same warm-up; each figure is the median round, shown with the
    smallest and largest round (--json lists every round). Targets come from the
    project's issues; a missed target is shown, not hidden.
    """

    def progress(name: str) -> None:
        if not as_json:
            click.echo(f"running {name} ...", err=True)

    results = bench.run_all(quick=quick, only=list(only) or None, progress=progress)
    if as_json:
        click.echo(json.dumps([r.as_dict() for r in results], indent=2))
        return
    width = max((len(f"{r.area}: {r.name}") for r in results), default=10)
    for r in results:
        verdict = {True: "ok", False: "MISSED", None: ""}[r.meets_target]
        target = ""
        if r.target is not None:
            target = f"(target {'≥' if r.higher_is_better else '≤'} {r.target:g})"
        label = f"{r.area}: {r.name}"
        spread = ""
        if r.spread is not None:
            spread = f"[{r.spread[0]:.4g} .. {r.spread[1]:.4g}, {len(r.rounds)} rounds]"
        click.echo(
            f"{label:<{width}}  {r.value:>12.4g} {r.unit:<14} {spread:<36} {target:<18} {verdict}"
        )
