"""``sensorbench demo``: the emulated robot end to end, from ptys to the HTML report."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json


def _holds_demo(out_dir: Path) -> bool:
    """True when ``out_dir`` already holds a demo's sessions."""
    return (out_dir / "sessions").exists() and any((out_dir / "sessions").glob("*.h5"))


@cli.command("demo")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path),
    default=Path("sensorbench-demo"), show_default=True,
    help="Directory for sessions/, models/ and report/ (created; must not hold a previous "
    "demo). Without -o, a previous demo in the default folder is kept and the next free "
    "sensorbench-demo-N is used.")
@opt.flag_option("--quick",
    "One repeat of each drive, 3 one-loop campaign sessions, 200 draws (under a minute).")
@opt.number_option(
    "--speed", None, opt.FiniteFloat(min=1.0, max=10.0), None,
    "Emulation speed of every session: simulated seconds per host second; above 10 "
    "the readers fall behind on two cores [default: 10].",
)  # fmt: skip
@opt.seed_option(1, "Simulation and Monte Carlo seed.")
@opt.flag_option("--live",
    "Run the emulated robot live instead (sensorbench live, the shipped models fitted on "
    "it): open the view in Foxglove; until Ctrl-C or --duration.")
@click.option("--foxglove", "foxglove_addr", default="127.0.0.1:8765", show_default=True,
    metavar="[HOST:]PORT", help="--live: where the Foxglove WebSocket server listens.")
@opt.number_option(
    "--duration", "duration_s", opt.FiniteFloat(min=0.0, min_open=True), None,
    "--live: run time after bring-up (s); default: until Ctrl-C.",
)  # fmt: skip
@click.option("--pods-firmware", type=click.Path(dir_okay=False, exists=True), metavar="ELF",
    help="--live: run this ATmega328P image (make -C firmware) under simavr as the pod MCU.")
@opt.json_option("Print one JSON summary document.")
def demo_cmd(out_dir: Path, quick: bool, speed: float | None, seed: int, live: bool,
        foxglove_addr: str, duration_s: float | None, pods_firmware: str | None, as_json: bool
) -> None:
    """Bring up the emulated robot, capture a campaign, fit, validate and report.

    The emulated devices are recorded by the real capture path at SPEED× real time; then
    every fit, the validation, the lidar characterization, the scan merge and the HTML
    report (docs/DEMO.md). Prints the key recovered values next to the simulated truth
    (SI units; τ on the files' time base, simulated τ ÷ SPEED) and the report's path.
    Exit 0 when every step ran (whatever the verdict), 2 when a step failed.
    """
    from sensorbench.demo.campaign import demo_plan, run_demo
    from sensorbench.demo.display import demo_doc, demo_lines

    ctx = click.get_current_context()
    if live:
        _live_demo(out_dir, foxglove_addr, duration_s, pods_firmware, as_json)
        return
    flags = {"foxglove_addr": "--foxglove", "duration_s": "--duration",
        "pods_firmware": "--pods-firmware"}  # fmt: skip
    for name, flag in flags.items():
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(f"{flag} applies to --live only")
    if _holds_demo(out_dir):
        if ctx.get_parameter_source("out_dir") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(
                f"{out_dir} holds a previous demo; choose another -o or remove it")
        previous, n = out_dir, 2  # the first of out_dir-2, out_dir-3, ... without a demo
        while _holds_demo(out_dir := previous.with_name(f"{previous.name}-{n}")):
            n += 1
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
    total = time.monotonic() - t0
    click.echo(to_json(demo_doc(res, warnings, total)) if as_json
        else "\n".join(demo_lines(res, total)))


def _live_demo(out_dir: Path, foxglove_addr: str, duration_s: float | None,
        pods_firmware: str | None, as_json: bool) -> None:
    """``demo --live``: the emulated robot live, the view on ``foxglove_addr``; the pod MCU
    the ``pods_firmware`` image under simavr when given."""
    from sensorbench.commands.live import end_live_run
    from sensorbench.commands.progress import StatusPrinter
    from sensorbench.demo.live import MODELS, run_live_demo
    from sensorbench.drivers.capture_display import format_summary
    from sensorbench.live.runtime import format_live_status
    from sensorbench.live.udp import parse_address
    from sensorbench.sim.serve import stop_on_signals

    address = parse_address(foxglove_addr)
    duration = math.inf if duration_s is None else duration_s
    printer = StatusPrinter(duration)

    def status(elapsed_s: float, statuses: list, runtime: Any) -> None:
        printer.extra = lambda t, st: format_live_status(runtime.on_status(t, st))
        printer(elapsed_s, statuses)

    if not as_json:
        click.echo(
            f"live demo: the emulated robot at real rate; open ws://{address[0]}:{address[1]} "
            "in Foxglove (Open connection, Foxglove WebSocket), a 3D panel with display frame "
            "odom; Ctrl-C stops", err=True)
    with stop_on_signals() as stop:
        run = run_live_demo(
            out_dir, address, duration, stop,
            on_status=None if as_json else status, pods_firmware=pods_firmware,
        )  # fmt: skip
    printer.done()  # nothing to end under --json: it never drew
    if not as_json:
        click.echo(format_summary(run.result))
    end_live_run(run.result, run.runtime, as_json,
        lambda ok: {"session": str(run.session), "ok": ok},
        f"replay it: sensorbench replay {run.session} --pods {MODELS / 'pods-emulated.toml'} "
        f"--noise {MODELS / 'noise-emulated.toml'} --no-repair")  # fmt: skip
