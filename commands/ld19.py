"""``sensorbench decode ld19`` and ``sensorbench emulate ld19`` (and ``emulate ld06``: one
``emulate`` command per registered kind of the LD19 protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sensorbench.cli import subgroup
from sensorbench.commands import options as opt
from sensorbench.drivers.device_kinds import all_kinds
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import check_output

decode = subgroup("decode")


@decode.command("ld19")
@click.argument("source", type=opt.IN_FILE)
@opt.output_option("Session file (.h5) to write.", required=True, force="OUTPUT")
@click.option("--device",
    help="Raw stream to decode when SOURCE is a session (default: its only LD19 raw stream).")
@click.option("--name", help="Lidar stream name in OUTPUT (default: the device or 'ld19').")
@opt.flag_option("--near-filter",
    "Mark points the official SDK's near filter rejects as nan (default: keep raw points).")
@opt.json_option()
def decode_ld19_cmd(source: Path, output: Path, device: str | None, name: str | None,
        near_filter: bool, force: bool, as_json: bool) -> None:
    """Decode LD19 bytes from SOURCE into a session of complete turns.

    SOURCE is a bare byte capture (`record-raw`; its RAW.bin.chunks sidecar gives host
    read times) or a session whose raw stream of an LD19 is decoded again. Turns: angles
    rad CCW, ranges m (inf: no return), intensity 0..255, int64 ns times (without read
    times: the unwrapped device time, said in the stream's time_base). The raw bytes are
    copied into OUTPUT. See docs/LD19.md.
    """
    from sensorbench.drivers.decode_display import ld19_decode_lines
    from sensorbench.drivers.ld19_decode import decode_ld19

    check_output(output, force=force, inputs=[source])
    summary = decode_ld19(
        source, output, device=device, name=name, near_filter=near_filter, overwrite=force
    )
    if as_json:
        click.echo(to_json(summary))
        return
    click.echo("\n".join(ld19_decode_lines(summary)))


def emulate_command(kind_name: str, model: str) -> click.Command:
    """``emulate KIND``: serve an emulated LD19-protocol lidar of the registered kind."""

    @click.command(kind_name)
    @click.option("--scenario", metavar="NAME|FILE",
        help=f"Scenario whose lidar to play (default: a synthetic 6 x 8 m room seen at the "
        f"{model}'s datasheet rates).")
    @click.option("--lidar", help="Lidar of the scenario (default: its first LD19-protocol one).")
    @opt.seed_option()
    @opt.SPEED
    @opt.LINK
    @opt.number_option(
        "--startup", None, opt.FiniteFloat(0.0, 3600.0), 3.0,
        "Seconds (simulated) from power-on to the first packet; real units take ~3 s.",
    )  # fmt: skip
    @click.option("--faults/--no-faults", default=True, show_default=True,
        help="Apply the scenario's [faults.<lidar>] table: corruption, drops, slow start, "
        "stalls and unplug/replug at the given simulated times (s).")
    @opt.DURATION
    def emulate_cmd(**options: Any) -> None:
        """Serve an emulated lidar on a pseudo-terminal until Ctrl-C.

        Prints the tty path (and the link); 230400 baud, 8N1, the scenario's samples looped.
        See docs/LD19.md, "Emulator".
        """
        _serve_ld19_protocol(kind_name, **options)

    emulate_cmd.help = (emulate_cmd.help or "").replace("an emulated lidar", f"an emulated {model}")
    return emulate_cmd


def _serve_ld19_protocol(
    kind_name: str, scenario: str | None, lidar: str | None, seed: int, speed: float,
    link: str | None, startup: float, faults: bool, duration_s: float | None,
) -> None:  # fmt: skip
    """Serve ``emulate KIND`` (the options as the command's; times in s)."""
    from sensorbench.drivers.device_kinds import get_kind
    from sensorbench.sim.emulator_base import apply_fault, fault_schedule, link_faults
    from sensorbench.sim.emulator_ld19 import LD19Emulator
    from sensorbench.sim.kind_emulators import synthetic_ld19_samples
    from sensorbench.sim.serve import serve_until_stopped, speed_shortfall, stop_on_signals

    kind = get_kind(kind_name)
    faults_on_link = None
    schedule: list[tuple[float, str, float]] = []
    if scenario is None:
        samples = synthetic_ld19_samples(kind, 60.0, seed)
        source = "synthetic room"
    else:
        from sensorbench.sim.simulation import Simulation

        sim = Simulation(scenario, seed=seed)
        models = tuple(k.name for k in all_kinds() if k.protocol == kind.protocol)
        lidar = sim.pick_lidar(models, lidar)
        samples = sim.lidar(lidar)
        source = f"scenario {sim.scenario.name!r}, lidar {lidar!r}, seed {seed}"
        if faults:
            knobs = sim.scenario.faults(lidar)
            faults_on_link = link_faults(knobs)
            schedule = fault_schedule(knobs)
    with stop_on_signals() as stop:
        emu = LD19Emulator(
            samples, link=link, speed=speed, startup_s=startup, faults=faults_on_link, seed=seed,
            record_truth=False,
        )  # fmt: skip

        def on_fault(t: float, action: str, arg: float) -> None:
            click.echo(f"t = {t:g} s: {action}", err=True)
            apply_fault(emu, action, arg, speed)

        try:
            click.echo(emu.path)
            if link is not None:
                click.echo(f"link: {link}", err=True)
            click.echo(
                f"{kind.model} emulator ({source}) at {kind.baud} baud, {speed:g}x; Ctrl-C to stop",
                err=True)
            serve_until_stopped(
                stop, duration_s, clock=emu.clock, schedule=schedule, on_fault=on_fault
            )
            if shortfall := speed_shortfall(speed, emu.achieved_speed):
                click.echo(shortfall, err=True)
        finally:
            emu.stop()
    st = emu.port.stats
    click.echo(f"sent {st.bytes_delivered} bytes ({emu.packets_sent} packets)", err=True)


for _kind in all_kinds():  # ``emulate KIND`` for every registered LD19-protocol kind
    if _kind.protocol == "ld19":
        subgroup("emulate").add_command(emulate_command(_kind.name, _kind.model))
