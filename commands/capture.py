"""``sensorbench capture``, ``sensorbench bringup`` and ``sensorbench emulate pods|robot``."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sensorbench.cli import cli, subgroup
from sensorbench.commands import options as opt
from sensorbench.commands.progress import StatusPrinter
from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.errors import SimError
from sensorbench.json_doc import to_json
from sensorbench.sim.serve import serve_until_stopped, speed_shortfall, stop_on_signals

emulate = subgroup("emulate")

_CONFIG_HELP = (
    "Robot description (TOML): devices with stable port names, kinds (ld19, a1, pods), "
    "mounts (x_m, y_m, yaw_deg), power-up order and gaps (s). See examples/robot.toml."
)
_RUN_DIR_HELP = "Directory substituted for {run_dir} in ports (emulated robots)."


@dataclass(frozen=True)
class Recording:
    """What ``capture`` and ``live`` are told to record: the robot description (TOML) and
    the directory for its ``{run_dir}``, the session file to create, the run time after
    bring-up (s; None: until stopped), the session's label and note, and whether to run
    without the devices that did not come up."""

    config_path: str
    duration_s: float | None
    output: str
    label: str
    note: str
    run_dir: str | None
    allow_missing: bool

    def config(self) -> Any:
        """The robot description, loaded and checked."""
        return load_robot_config(self.config_path, run_dir=self.run_dir)

    def printer(self, extra: Callable[..., list[str]] | None = None) -> StatusPrinter:
        """The status line until the run time (``extra``: more parts for it)."""
        return StatusPrinter(math.inf if self.duration_s is None else self.duration_s, extra=extra)

    def options(self) -> Any:
        """The capture's options (label, note, ``--allow-missing``)."""
        from sensorbench.drivers.capture import CaptureOptions

        return CaptureOptions(label=self.label, note=self.note, allow_missing=self.allow_missing)


def recording_options(verb: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The device and session options ``capture`` and ``live`` share (``verb``: "Record" or
    "Run", for the help texts), given to the command as one ``recording``
    (:class:`Recording`)."""
    return opt.grouped(
        "recording", Recording,
        opt.config_option(_CONFIG_HELP),
        opt.number_option(
            "--duration", "duration_s", opt.FiniteFloat(min=0.0, min_open=True), None,
            f"{verb} time after bring-up (s); default: until Ctrl-C or SIGTERM.",
        ),
        click.option(
            "-o", "--output", required=True, type=click.Path(dir_okay=False),
            help="Session file to create (.h5); refused if it exists.",
        ),
        click.option("--label", default="", help="What this session is (e.g. square, static)."),
        click.option("--note", default="", help="Free text stored with the session."),
        opt.run_dir_option(_RUN_DIR_HELP),
        opt.flag_option("--allow-missing",
            f"{verb} with the devices that came up when some did not."),
    )  # fmt: skip


def record(config: Any, output: str, options: Any, printer: StatusPrinter, as_json: bool,
        consumer: Any = None) -> Any:
    """``run_capture`` as ``capture`` and ``live`` run it: until ``printer.duration_s`` or
    Ctrl-C/SIGTERM, bring-up rows on stderr (not with ``as_json``), the status line from
    ``printer``; returns the capture's result."""
    from sensorbench.drivers.capture import run_capture

    if not as_json and config.pods is not None and (warning := config.pods.count_rate_warning()):
        click.echo(f"warning: {warning}", err=True)

    def bringup_row(row: Any) -> None:
        if not as_json:
            state = "ok" if row.ok else "FAILED"
            click.echo(
                f"bring-up {row.name}: {state} ({row.seconds:.1f} s) {row.message}", err=True
            )

    with stop_on_signals() as stop:
        result = run_capture(
            config, output, printer.duration_s, options,
            on_status=printer, on_bringup=bringup_row, stop=stop, consumer=consumer,
        )  # fmt: skip
    printer.done()
    return result


def capture_doc(result: Any) -> dict[str, Any]:
    """A capture's result (:class:`~sensorbench.drivers.capture.CaptureResult`) as the
    ``--json`` document of ``capture`` and ``live``."""
    keys = ("recorded_s", "stopped_by", "error", "ok")
    return {"path": str(result.path), **{k: getattr(result, k) for k in keys}} | {
        "bringup": [vars(b) for b in result.bringup],
        "devices": [vars(d) for d in result.devices],
    }


def echo_result(result: Any) -> None:
    """A capture's summary on stdout, after its bring-up table if it stopped there."""
    from sensorbench.drivers.capture_display import format_bringup, format_summary

    if result.stopped_by == "bringup":
        click.echo(format_bringup(result.bringup))
    click.echo(format_summary(result))


@cli.command("capture")
@recording_options("Record")
@opt.json_option("Print the summary as one JSON document.")
@click.pass_context
def capture_cmd(ctx: click.Context, recording: Recording, as_json: bool) -> None:
    """Record every configured device into one session file.

    Brings the devices up in the config's power-up order, then records raw bytes and
    decoded data of all of them, with a status line on stderr, until --duration, Ctrl-C
    or SIGTERM. An unplugged device is reopened when it returns. Exit 0 when recorded, 1
    when a device failed to come up, a reader thread failed or writing failed, 2 on bad
    input or a full disk (the file closed intact). See docs/CAPTURE.md.
    """
    config = recording.config()
    result = record(config, recording.output, recording.options(), recording.printer(), as_json)
    if as_json:
        click.echo(to_json(capture_doc(result)))
    else:
        echo_result(result)
    if result.error:
        click.echo(f"error: {result.error}", err=True)
    if not result.ok:
        ctx.exit(result.exit_code)


@cli.command("bringup")
@opt.config_option(_CONFIG_HELP)
@opt.run_dir_option(_RUN_DIR_HELP)
@opt.json_option("Print the table as one JSON document.")
@click.pass_context
def bringup_cmd(ctx: click.Context, config_path: str, run_dir: str | None, as_json: bool) -> None:
    """Staggered power-up check of every configured device, then close them.

    Each device is opened in power-up order, checked, started and must deliver valid data
    within its timeout; prints one row per device. brltty, which takes CP2102 adapters
    away, is looked for first. Exit 1 if any device failed, 2 on a bad configuration. See
    docs/CAPTURE.md.
    """
    from sensorbench.drivers.capture import run_bringup
    from sensorbench.drivers.capture_display import format_bringup
    from sensorbench.udev.brltty import check_brltty

    config = load_robot_config(config_path, run_dir=run_dir)
    brltty = check_brltty()
    if brltty.found:  # before the bring-up: a missing port then has its explanation
        click.echo(f"warning: {brltty.message()}", err=True)
    if config.pods is not None and (warning := config.pods.count_rate_warning()):
        click.echo(f"warning: {warning}", err=True)
    results = run_bringup(config)
    click.echo(to_json([vars(r) for r in results]) if as_json else format_bringup(results))
    if not all(r.ok for r in results):
        ctx.exit(1)


@emulate.command("pods")
@click.option("--scenario", default="square", show_default=True,
    help="Scenario name or TOML path whose pod samples are served.")
@opt.seed_option()
@opt.SPEED
@click.option("--protocol", type=click.Choice(["binary", "csv"]), default="binary",
    show_default=True, help="Frame format (docs/PROTOCOLS.md).")
@opt.LINK
@opt.DURATION
@click.option("--firmware", "elf", type=click.Path(dir_okay=False, exists=True),
    help="Run this ATmega328P image (make -C firmware) under simavr instead.")
@click.option("--trajectory", type=click.Path(dir_okay=False, exists=True),
    help="--firmware: the counts to drive onto the encoder pins, rows 't_us c0 c1 c2' "
    "(default: the scenario's pods).")
@click.option("--auto-reset/--no-auto-reset", default=True, show_default=True,
    help="--firmware: opening the port (DTR) resets the MCU, as on an Arduino Uno or Nano.")
@opt.number_option(
    "--boot-s", None, opt.FiniteFloat(0.0, 60.0), 1.0,
    "--firmware: silence after a reset before the image restarts (s; optiboot waits 1 s).",
)  # fmt: skip
@click.option("--events", type=click.Path(dir_okay=False),
    help="--firmware: append the harness's events (boots, their counts, resets) to this file.")
def emulate_pods_cmd(scenario: str, seed: int, speed: float, protocol: str, link: str | None,
        duration_s: float | None, elf: str | None, trajectory: str | None, auto_reset: bool,
        boot_s: float, events: str | None) -> None:
    """Serve the pod MCU (115200 baud) on a pty; print its path.

    Emulated frames (3 counters + IMU) loop over the scenario; with --firmware the real
    AVR image runs under simavr, its encoder pins driven by the scenario's pod counts (or
    --trajectory). Stops on Ctrl-C, SIGTERM or --duration. See firmware/README.md.
    """
    from sensorbench.sim.simulation import Simulation

    firmware = None
    if elf is None:
        if trajectory is not None or events is not None:
            raise click.UsageError("--trajectory and --events apply to --firmware only")
        from sensorbench.sim.emulator_pods import PodEmulator

        sim = Simulation(scenario, seed=seed)
        em: Any = PodEmulator(sim.pods(), variant=protocol, link=link, speed=speed, loop=True)
    else:
        if protocol != "binary":
            raise click.UsageError("--firmware sends binary frames only (no --protocol csv)")
        from sensorbench.sim.emulator_firmware import FirmwarePodEmulator
        from sensorbench.sim.pod_trajectory import PodTrajectory

        path = (
            PodTrajectory.read(trajectory)
            if trajectory is not None
            else PodTrajectory.from_samples(Simulation(scenario, seed=seed).pods())
        )
        em = firmware = FirmwarePodEmulator(
            elf, path, link=link, speed=speed, loop=True, auto_reset=auto_reset, boot_s=boot_s,
            events=events,
        )  # fmt: skip
    click.echo(em.link)
    sys.stdout.flush()
    em.start()
    try:
        with stop_on_signals() as stop:
            # the looped firmware only finishes when its harness dies
            serve_until_stopped(
                stop, duration_s, until=firmware.finished if firmware is not None else None
            )
            achieved = em.achieved_speed if firmware is None else None
    finally:
        em.stop()
    if firmware is not None:
        if firmware.errors:
            raise SimError("the firmware harness stopped: " + "; ".join(firmware.errors[-3:]))
        achieved = firmware.achieved_speed  # the harness reports it on exit
    if achieved is not None and (shortfall := speed_shortfall(speed, achieved)):
        click.echo(shortfall, err=True)


@emulate.command("robot")
@opt.run_dir_option("Directory for the device links ({run_dir} in the config).", required=True)
@opt.config_option("Emulated robot config (default: the shipped robot-emulated.toml).", False)
@click.option("--scenario", default=None, help="Scenario (default: the config's [emulation]).")
@opt.seed_option(default=None)
@opt.SPEED
@opt.DURATION
@click.option("--pods-firmware", type=click.Path(dir_okay=False, exists=True),
    help="Run this ATmega328P image under simavr as the pod MCU (config entry: binary, "
    "3 pods, imu = false).")
def emulate_robot_cmd(run_dir: str, config_path: str | None, scenario: str | None,
        seed: int | None, speed: float, duration_s: float | None, pods_firmware: str | None
) -> None:
    """Serve every device of an emulated robot (LD19, two A1s, pods) on ptys.

    Prints one line per device (name and stable path), then runs until Ctrl-C.
    Capture from it with `sensorbench capture --config <config> --run-dir <run-dir>`.
    """
    from sensorbench.sim.emulated_robot import EmulatedRobot

    robot = EmulatedRobot(
        Path(run_dir), config_path, scenario=scenario, seed=seed, speed=speed,
        pods_firmware=pods_firmware,
    )  # fmt: skip
    robot.start()
    try:
        for name in robot.devices:
            click.echo(f"{name} {robot.link(name)}")
        sys.stdout.flush()
        with stop_on_signals() as stop:
            serve_until_stopped(stop, duration_s)
    finally:
        robot.stop()
    for name, achieved in robot.achieved_speeds.items():
        if achieved is not None and (shortfall := speed_shortfall(speed, achieved)):
            click.echo(f"{name}: {shortfall}", err=True)
