"""``sensorbench decode a1`` and ``sensorbench emulate a1``."""

from __future__ import annotations

from pathlib import Path

import click

from sensorbench.cli import subgroup
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import check_output

decode = subgroup("decode")
emulate = subgroup("emulate")


@decode.command("a1")
@click.argument("raw", type=opt.IN_FILE)
@opt.output_option("Session file to create (.h5).", required=True, force="OUTPUT")
@click.option("--name", default="a1", show_default=True, help="Lidar stream name in the session.")
@click.option("--stream",
    help="When RAW is a session: which raw stream to decode (default: its only rplidar one).")
@opt.number_option(
    "--sample-rate", "sample_rate_hz", opt.FiniteFloat(min=1.0), None,
    "Samples per second (Hz) that time a bare byte file without read times nor the unit's "
    "GET_SAMPLERATE answer [default: the nominal 2000 standard, 4000 express].",
)  # fmt: skip
@opt.flag_option("--no-descriptor",
    "RAW is a bare stream starting on a node (or capsule) boundary, without scan "
    "descriptor.")
@click.option("--scan-mode", type=click.Choice(["standard", "express"]), default="standard",
    show_default=True,
    help="With --no-descriptor: the stream's scan mode (5-byte nodes or 84-byte capsules).")
@click.option("--label", default="", help="Session label.")
@opt.json_option("Print the summary as one JSON document.")
def decode_a1_cmd(raw: Path, output: Path, name: str, stream: str | None,
        sample_rate_hz: float | None, no_descriptor: bool, scan_mode: str, label: str, force: bool,
        as_json: bool) -> None:
    """Decode an RPLIDAR A1 raw capture (standard nodes or express capsules) into a session.

    RAW is a file of received bytes (host read times from its RAW.chunks sidecar) or a
    session whose raw stream is decoded again. Turns: angles rad CCW, ranges m (inf: no
    return), quality 0..63 as intensity; a turn cut short is flagged PACKET_LOSS. Without
    read times samples are spaced by the unit's sample duration, else --sample-rate (said
    in the stream's time_base). See docs/A1.md.
    """
    from sensorbench.drivers.a1_turns import decode_a1
    from sensorbench.drivers.decode_display import a1_decode_lines

    check_output(output, force=force, inputs=[raw])
    summary = decode_a1(
        raw, output, name=name, stream=stream, sample_rate_hz=sample_rate_hz,
        require_descriptor=not no_descriptor, mode=scan_mode, label=label, overwrite=force,
    )  # fmt: skip
    if as_json:
        click.echo(to_json(summary))
        return
    click.echo("\n".join(a1_decode_lines(output, summary)))


@emulate.command("a1")
@click.option("--scenario",
    help="Scenario (name or TOML path) whose A1 samples are served; default: a 6 x 8 m "
    "room seen from inside, no scenario needed.")
@click.option("--device", help="Which A1 of the scenario (default: its first A1).")
@opt.seed_option()
@opt.SPEED
@opt.LINK
@click.option("--serial", "serial_hex", default="000102030405060708090a0b0c0d0e0f",
    show_default=True, help="The unit's 16-byte serial number, 32 hex digits (GET_INFO).")
@opt.DURATION
def emulate_a1_cmd(scenario: str | None, device: str | None, seed: int, speed: float,
        link: str | None, serial_hex: str, duration_s: float | None) -> None:
    """Serve an emulated RPLIDAR A1 (115200 baud) on a pty and print its path.

    Without --scenario it scans a 6 x 8 m room with the real-capture defaults; with
    --scenario the scenario's A1 samples, looped, under its [faults.<device>] link knobs.
    Runs until Ctrl-C (or --duration). See docs/A1.md, "Emulator".
    """
    from sensorbench.sim.emulator_a1 import A1Emulator
    from sensorbench.sim.emulator_base import link_faults
    from sensorbench.sim.kind_emulators import a1_unit
    from sensorbench.sim.serve import serve_until_stopped, speed_shortfall, stop_on_signals

    samples = express = None
    faults = None
    knobs: dict = {}
    if scenario is not None:
        from sensorbench.sim.simulation import Simulation

        sim = Simulation(scenario, seed=seed)
        name = sim.pick_lidar(("a1",), device)
        samples = sim.lidar(name)
        express = sim.lidar(name, samples_per_s=2.0 * float(samples.params["samples_per_s"]))
        knobs = sim.scenario.faults(name)
        faults = link_faults(knobs)
    with stop_on_signals() as stop:  # before the pty exists: a Ctrl-C from then on stops cleanly
        em = A1Emulator(
            samples, express_samples=express, link=link, speed=speed, faults=faults, seed=seed,
            record_truth=False, unit=a1_unit(serial_hex, knobs),
        )  # fmt: skip
        try:
            click.echo(em.link)
            serve_until_stopped(stop, duration_s)
            if shortfall := speed_shortfall(speed, em.achieved_speed):  # counted while scanned
                click.echo(shortfall, err=True)
        finally:
            em.stop()
