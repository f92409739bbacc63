"""``sensorbench decode ld19`` and ``sensorbench emulate ld19``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from sensorbench.sim.serve import duration_option, link_option, seed_option, speed_option


def register(cli: click.Group) -> None:
    """Attach ``decode ld19`` and ``emulate ld19``."""
    from sensorbench.cli import subgroup

    subgroup("decode", "Decode raw byte captures into sessions.").add_command(decode_ld19_cmd)
    subgroup("emulate", "Serve emulated devices on pseudo-terminals.").add_command(emulate_ld19_cmd)


@click.command("ld19")
@click.argument("source", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Session file (.h5) to write.",
)
@click.option(
    "--device",
    default=None,
    help="Raw stream to decode when SOURCE is a session (default: its only LD19 raw stream).",
)
@click.option(
    "--name", default=None, help="Lidar stream name in OUTPUT (default: the device or 'ld19')."
)
@click.option(
    "--near-filter",
    is_flag=True,
    help="Mark points the official SDK's near filter rejects as nan (default: keep raw points).",
)
@click.option("--overwrite", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def decode_ld19_cmd(
    source: Path,
    output: Path,
    device: str | None,
    name: str | None,
    near_filter: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Decode LD19 bytes from SOURCE into a session of complete turns.

    SOURCE is a bare byte capture (``sensorbench record-raw PORT --baud 230400
    --duration S -o RAW.bin``; its RAW.bin.chunks sidecar gives host read times)
    or a session whose raw stream of an LD19 is decoded again. Stored turns:
    angles in rad CCW (0 = sensor forward), ranges in m (inf = no return),
    intensity 0..255. Times are int64 ns: for a session, the host receive times of
    its (or the sidecar's) chunks mapped through the device clock; for a bare capture, which has
    no receive times, the unwrapped device time (ms stamps), said so in the
    stream's ``time_base`` attribute. The raw bytes are copied into OUTPUT.
    """
    from sensorbench.drivers.ld19_decode import decode_ld19

    summary = decode_ld19(
        source, output, device=device, name=name, near_filter=near_filter, overwrite=overwrite
    )
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    click.echo(f"{summary['output']}: {summary['turns']} turns, {summary['points']} points")
    for key in (
        "bytes",
        "packets",
        "crc_failures",
        "bytes_skipped",
        "unknown_packets",
        "span_failures",
        "lost_packets",
    ):
        click.echo(f"  {key:16s} {summary[key]}")
    click.echo(f"  time base        {summary['time_base']}")


@click.command("ld19")
@click.option(
    "--scenario",
    default=None,
    metavar="NAME|FILE",
    help="Scenario whose LD19 to play (default: a synthetic 6 x 8 m room).",
)
@click.option("--lidar", default=None, help="Lidar of the scenario (default: its first LD19).")
@seed_option()
@speed_option()
@link_option()
@click.option(
    "--startup",
    type=click.FloatRange(min=0.0),
    default=3.0,
    show_default=True,
    help="Seconds (simulated) from power-on to the first packet; real units take ~3 s.",
)
@click.option(
    "--faults/--no-faults",
    default=True,
    show_default=True,
    help="Apply the scenario's [faults.<lidar>] table: corruption, drops, slow start, "
    "stalls and unplug/replug at the given simulated times (s).",
)
@duration_option()
def emulate_ld19_cmd(
    scenario: str | None,
    lidar: str | None,
    seed: int,
    speed: float,
    link: str | None,
    startup: float,
    faults: bool,
    duration_s: float | None,
) -> None:
    """Serve an emulated LD19 on a pseudo-terminal until Ctrl-C.

    Prints the tty path (and the link). Open it at 230400 baud, 8N1: the device
    streams 47-byte packets (12 points each, CRC-8) and ignores anything sent to it.
    The scenario's samples are replayed in a loop.
    """
    from sensorbench.errors import SimError
    from sensorbench.sim.emulator_base import apply_fault, fault_schedule, link_faults
    from sensorbench.sim.emulator_ld19 import LD19Emulator, SyntheticLD19Samples
    from sensorbench.sim.serve import serve_until_stopped, stop_on_signals

    faults_on_link = None
    schedule: list[tuple[float, str, float]] = []
    if scenario is None:
        samples = SyntheticLD19Samples.generate(duration_s=60.0, seed=seed)
        source = "synthetic room"
    else:
        from sensorbench.sim.simulation import Simulation

        sim = Simulation(scenario, seed=seed)
        ld19s = [n for n in sim.lidar_names() if sim.scenario.lidars[n]["model"] == "ld19"]
        if lidar is None:
            if not ld19s:
                raise SimError(f"scenario {scenario!r} has no LD19 lidar")
            lidar = ld19s[0]
        elif lidar not in ld19s:
            raise SimError(f"{lidar!r} is not an LD19 of scenario {scenario!r} (it has {ld19s})")
        samples = sim.lidar(lidar)
        source = f"scenario {sim.scenario.name!r}, lidar {lidar!r}, seed {seed}"
        if faults:
            knobs = sim.scenario.faults(lidar)
            faults_on_link = link_faults(knobs)
            schedule = fault_schedule(knobs)
    with stop_on_signals() as stop:
        emu = LD19Emulator(
            samples,
            link=link,
            speed=speed,
            startup_s=startup,
            faults=faults_on_link,
            seed=seed,
            record_truth=False,
        )

        def on_fault(t: float, action: str, arg: float) -> None:
            click.echo(f"t = {t:g} s: {action}", err=True)
            apply_fault(emu, action, arg, speed)

        try:
            click.echo(emu.path)
            if link is not None:
                click.echo(f"link: {link}", err=True)
            click.echo(
                f"LD19 emulator ({source}) at 230400 baud, {speed:g}x; Ctrl-C to stop", err=True
            )
            serve_until_stopped(
                stop, duration_s, clock=emu.clock, schedule=schedule, on_fault=on_fault
            )
        finally:
            emu.stop()
    st = emu.port.stats
    click.echo(f"sent {st.bytes_delivered} bytes ({emu.packets_sent} packets)", err=True)
