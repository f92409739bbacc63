"""``sensorbench demo``: the emulated robot end to end, from ptys to the HTML report."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import click

from sensorbench.commands.option_types import SEED, FiniteFloat
from sensorbench.json_doc import to_json


def _holds_demo(out_dir: Path) -> bool:
    """True when ``out_dir`` already holds a demo's sessions."""
    return (out_dir / "sessions").exists() and any((out_dir / "sessions").glob("*.h5"))


def _next_free(out_dir: Path) -> Path:
    """``out_dir-2``, ``out_dir-3``, ...: the first that holds no demo."""
    n = 2
    while _holds_demo(out_dir.with_name(f"{out_dir.name}-{n}")):
        n += 1
    return out_dir.with_name(f"{out_dir.name}-{n}")


def register(cli: click.Group) -> None:
    """Attach ``demo``."""
    cli.add_command(demo_cmd)


@click.command("demo")
@click.option(
    "-o",
    "--output",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sensorbench-demo"),
    show_default=True,
    help="Directory for sessions/, models/ and report/ (created; must not hold a previous "
    "demo). Without -o, a previous demo in the default folder is kept and the next free "
    "sensorbench-demo-N is used.",
)
@click.option(
    "--quick",
    is_flag=True,
    help="One repeat of each drive, 3 one-loop campaign sessions, 200 draws (under a minute).",
)
@click.option(
    "--speed",
    type=FiniteFloat(min=1.0, max=10.0),
    default=None,
    help="Emulation speed of every session: simulated seconds per host second; above 10 "
    "the readers fall behind on two cores [default: 10].",
)
@click.option(
    "--seed", default=1, show_default=True, type=SEED, help="Simulation and Monte Carlo seed."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary document.")
def demo_cmd(out_dir: Path, quick: bool, speed: float | None, seed: int, as_json: bool) -> None:
    """Bring up the emulated robot, capture a campaign, fit, validate and report.

    The LD19, both A1s and the pod MCU are emulated byte-exactly on pseudo-terminals
    with stable names, brought up one after another and recorded by the real capture
    path at SPEED× real time; mocap and the pose sensor come from an emulated network
    source. Fixed drives (forward, sideways, spin, square), a static lidar session and
    a relocalization campaign are captured; then pod fit, noise fit, replay, pose-error
    fit, leave-one-session-out validation, lidar characterization and scan merge, and
    the HTML report. Prints the key recovered values next to the simulated truth (SI
    units; τ on the files' time base, i.e. simulated τ ÷ SPEED) and the report's path.
    Exit 0 when every step ran (the validation verdict is printed and in the report),
    2 when a step failed.
    """
    from sensorbench.demo.campaign import demo_plan, run_demo, summary_rows

    if _holds_demo(out_dir):
        if click.get_current_context().get_parameter_source("out_dir") is not (
            click.core.ParameterSource.DEFAULT
        ):
            raise click.UsageError(
                f"{out_dir} holds a previous demo; choose another -o or remove it"
            )
        previous, out_dir = out_dir, _next_free(out_dir)
        if not as_json:
            click.echo(f"{previous} holds a previous demo, kept; writing to {out_dir}", err=True)
    plan = demo_plan(quick=quick, speed=speed, seed=seed)
    t0 = time.monotonic()

    warnings: list[str] = []

    def say(msg: str) -> None:
        if not as_json:
            click.echo(f"[{time.monotonic() - t0:6.1f} s] {msg}", err=True)

    class _Warnings(logging.Handler):
        """Driver warnings (e.g. a reader falling behind) into the progress lines."""

        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())
            say(f"warning ({record.name}): {record.getMessage()}")

    handler = _Warnings(logging.WARNING)
    logger = logging.getLogger("sensorbench")
    logger.addHandler(handler)
    try:
        res = run_demo(out_dir, plan, progress=say)
    finally:
        logger.removeHandler(handler)
    rows = summary_rows(res)
    total = time.monotonic() - t0
    if as_json:
        doc = {
            "report": str(res.report),
            "models": {k: str(v) for k, v in res.models.items()},
            "sessions": {k: str(c.path) for k, c in res.sessions.items()},
            "summary": rows,
            "validation": res.report_data.get("validation"),
            "filter_honesty": _honesty_rows(res.report_data.get("replay") or []),
            "timings_s": res.timings_s,
            "warnings": warnings,
            "total_s": total,
        }
        click.echo(to_json(doc))
        return
    click.echo(f"{'quantity':<40} {'recovered':>12} {'±1σ':>10} {'truth':>12}")
    for r in rows:
        click.echo(f"{r['name']:<40} {r['value']:12.5g} {r['sigma']:10.2g} {r['truth']:12.5g}")
        if "host clock" in r["name"] and r.get("clock_note", "").startswith("host clock unrel"):
            click.echo(f"  ^ {r['clock_note']}")
    honesty = _honesty_rows(res.report_data.get("replay") or [])
    if honesty:
        click.echo(
            "split filters, truth inside the stated 2σ (expected 95.4 %): "
            + "; ".join(
                f"{h['session']} {h['axis']} {h['in_2sigma'] * 100:.0f} %" for h in honesty
            )
        )
    v = res.report_data.get("validation")
    if v is not None:
        verdicts = ", ".join(
            f"{c['name']} {'pass' if c['passed'] else 'FAIL'}"
            + _wrong_note(c.get("simulated_wrong_relocalizations"))
            for c in v["sessions"]
        )
        click.echo(
            f"validation (leave-one-session-out, {v['n_draws']} draws): "
            f"{'PASSED' if v['passed'] else 'FAILED'} ({verdicts})"
        )
    click.echo(f"done in {total:.0f} s; report: {res.report}")


def _honesty_rows(replay: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claimed against actual per replayed session and axis (from the report's replay)."""
    return [
        {
            "session": r["session"],
            "axis": axis,
            "mean_nees": c["mean_nees"],
            "nees_band95": c["nees_band95"],
            "in_1sigma": c["coverage"]["1sigma"]["actual"],
            "in_2sigma": c["coverage"]["2sigma"]["actual"],
            "in_3sigma": c["coverage"]["3sigma"]["actual"],
            "rejected": r["rejection_rate"]["actual"][axis],
            "rejected_nominal": r["rejection_rate"]["nominal"],
            "degraded_fraction": r["monitor"][axis]["degraded_fraction"],
            "nis_mean": ((r.get("nis") or {}).get(axis) or {}).get("mean"),
            "nis_band95": ((r.get("nis") or {}).get(axis) or {}).get("band95"),
        }
        for r in replay
        for axis, c in (r.get("consistency") or {}).items()
    ]


def _wrong_note(n: int | None) -> str:
    """`` (k simulated wrong relocalizations)`` for a session that has any, else empty."""
    return f" ({n} simulated wrong relocalization{'s' if n > 1 else ''})" if n else ""
