"""``sensorbench record-raw``: a serial port's bytes, exactly, with host receive times."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json


def _hex(_ctx: click.Context, _param: click.Parameter, value: str | None) -> bytes:
    if not value:
        return b""
    try:
        return bytes.fromhex(value.replace(":", " "))
    except ValueError:
        raise click.BadParameter(f"not hex bytes: {value!r} (e.g. 'a5 20')") from None


@cli.command("record-raw")
@click.argument("port")
@click.option("--baud", type=click.IntRange(50, 20_000_000), default=None,
    help="Line rate: 230400 for an LD19, 115200 for an A1 [default: the --config device's].")
@opt.config_option("A robot configuration: PORT may then be a device's name, and --baud and "
    "--dtr default to that device's.", required=False)
@opt.run_dir_option("The directory substituted for {run_dir} in --config's ports.")
@click.option("--duration", "duration_s", type=opt.FiniteFloat(min=0.0, min_open=True),
    required=True, help="Seconds to record.")
@opt.output_option("Byte file; the read times go to OUTPUT.chunks beside it.", required=True)
@opt.flag_option("--force", "Replace an existing OUTPUT (and its .chunks).")
@click.option("--send", callback=_hex, default=None,
    help="Hex bytes written once after opening: an A1 streams only after a scan request, "
    "'a5 20' (standard) or 'a5 59 a5 82 05 00 00 00 00 00 22' (its sample durations, then "
    "express; decode a1 then times it on the device clock).")
@click.option("--dtr", type=click.Choice(["low", "high"]), default=None,
    help="DTR level to open with [default: low for a --config device of kind a1 (an A1's "
    "motor stops while DTR is high), else high, as every open leaves it: an A1 recorded "
    "without --config needs --dtr low].")
@opt.json_option()
def record_raw_cmd(port: str, baud: int | None, config_path: str | None, run_dir: str | None,
        duration_s: float, output: Path, force: bool, send: bytes, dtr: str | None,
        as_json: bool) -> None:
    """Record PORT's bytes for --duration seconds into OUTPUT, exactly as received.

    The port is set raw, 8N1 at --baud. OUTPUT holds the bytes, OUTPUT.chunks the byte
    offset and host monotonic time (ns) of every read; both appear when the recording ends
    (duration, Ctrl-C, or the device going away); an existing OUTPUT is refused unless
    --force. See docs/CAPTURE.md.
    """
    from sensorbench.drivers.raw_recorder import configured_device, open_dtr, record_raw
    from sensorbench.drivers.robot_config import load_robot_config
    from sensorbench.sim.serve import stop_on_signals

    level = None if dtr is None else dtr == "high"
    if config_path is not None:
        dev = configured_device(load_robot_config(config_path, run_dir=run_dir), port)
        port, baud = dev.port, baud or dev.baud
        level = open_dtr(dev.kind) if level is None else level
    if baud is None:
        raise click.UsageError("--baud is needed (or --config naming the device)")

    def progress(seconds: float, nbytes: int) -> None:
        if sys.stderr.isatty():
            click.echo(f"\r{seconds:6.1f} s  {nbytes} bytes", err=True, nl=False)

    with stop_on_signals() as stop:
        res = record_raw(
            port, baud, duration_s, output, force=force, send=send,
            dtr=True if level is None else level, stop=stop, on_progress=progress,
        )  # fmt: skip
    if sys.stderr.isatty():
        click.echo("", err=True)
    keys = ("bytes", "reads", "duration_s", "stopped_by", "message")
    doc = {"output": str(res.path), "chunks": str(res.sidecar)} | {k: getattr(res, k) for k in keys}
    if as_json:
        click.echo(to_json(doc))
        return
    click.echo(
        f"{res.path}: {res.bytes} bytes in {res.reads} reads over {res.duration_s:.1f} s "
        f"(stopped by {res.stopped_by}); read times in {res.sidecar}")
    if res.message:
        click.echo(res.message)
