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
@click.option("--baud", type=click.IntRange(min=50), required=True,
    help="Line rate: 230400 for an LD19, 115200 for an A1.")
@click.option("--duration", "duration_s", type=opt.FiniteFloat(min=0.0, min_open=True),
    required=True, help="Seconds to record.")
@opt.output_option("Byte file; the read times go to OUTPUT.chunks beside it.", required=True)
@opt.flag_option("--force", "Replace an existing OUTPUT (and its .chunks).")
@click.option("--send", callback=_hex, default=None,
    help="Hex bytes written once after opening: an A1 streams only after a scan request, "
    "'a5 20' (standard) or 'a5 59 a5 82 05 00 00 00 00 00 22' (its sample durations, then "
    "express; decode a1 then times it on the device clock).")
@click.option("--dtr", type=click.Choice(["low", "high"]), default=None,
    help="DTR level to open with (an A1's motor spins with DTR low) [default: pyserial's, high].")
@opt.json_option()
def record_raw_cmd(port: str, baud: int, duration_s: float, output: Path, force: bool, send: bytes,
        dtr: str | None, as_json: bool) -> None:
    """Record PORT's bytes for --duration seconds into OUTPUT, exactly as received.

    The port is set raw (no canonical mode, no echo, no CR/LF translation, no
    XON/XOFF or RTS/CTS flow control, 8N1 at --baud), which `cat` does not do.
    OUTPUT holds the bytes; OUTPUT.chunks (text) the byte offset and host
    monotonic time (ns) of every read (docs/CAPTURE.md). `sensorbench decode
    ld19|a1 OUTPUT` uses those times. Both files appear when the recording ends
    (duration, Ctrl-C, or the device going away); an existing OUTPUT is refused
    unless --force.
    """
    from sensorbench.drivers.raw_recorder import record_raw
    from sensorbench.sim.serve import stop_on_signals

    def progress(seconds: float, nbytes: int) -> None:
        if sys.stderr.isatty():
            click.echo(f"\r{seconds:6.1f} s  {nbytes} bytes", err=True, nl=False)

    with stop_on_signals() as stop:
        res = record_raw(
            port, baud, duration_s, output, force=force, send=send,
            dtr=None if dtr is None else dtr == "high", stop=stop, on_progress=progress,
        )  # fmt: skip
    if sys.stderr.isatty():
        click.echo("", err=True)
    doc = {
        "output": str(res.path),
        "chunks": str(res.sidecar),
        "bytes": res.bytes,
        "reads": res.reads,
        "duration_s": res.duration_s,
        "stopped_by": res.stopped_by,
        "message": res.message,
    }
    if as_json:
        click.echo(to_json(doc))
        return
    click.echo(
        f"{res.path}: {res.bytes} bytes in {res.reads} reads over {res.duration_s:.1f} s "
        f"(stopped by {res.stopped_by}); read times in {res.sidecar}")
    if res.message:
        click.echo(res.message)
