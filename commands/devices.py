"""``sensorbench devices``: list serial devices with their USB port path; optionally probe them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.udev.discovery import SerialDevice, list_serial_devices

if TYPE_CHECKING:
    from sensorbench.udev.probe import ProbeResult


def _kind(device: SerialDevice, probe: ProbeResult | None) -> str:
    if probe is not None:
        return probe.kind
    return f"{device.bridge}?" if device.bridge else "?"


@cli.command("devices")
@opt.flag_option(
    "--probe",
    "Open each listed device and find out what answers: listen for an LD19-protocol "
    "lidar (LD19 or LD06, 230400 baud) and the pod MCU (115200), then ask for an A1's "
    "GET_INFO. Opening a port stops an A1's motor and closing it starts it again; do not "
    "probe during a capture.",
)
@opt.number_option(
    "--listen", "listen_s", opt.FiniteFloat(0.05, 5.0), 0.35,
    "Seconds each listen-only probe listens per device (s).",
)  # fmt: skip
@opt.flag_option("--all", "Also list serial ports not on USB.", "show_all")
@opt.json_option()
def devices_cmd(probe: bool, listen_s: float, show_all: bool, as_json: bool) -> None:
    """List serial devices: node, USB port path, ID_PATH, VID:PID, serial, kind.

    Identical adapters (two A1s and an LD19 behind CP2102s, all 10c4:ea60 with
    serial 0001) differ only in their USB port path (e.g. 1-1.2 = bus 1, root
    port 1, hub port 2): name them with `sensorbench udev rules --name
    NAME=PORTPATH`. Without --probe the kind is only the bridge guessed from
    VID:PID (e.g. "cp210x?"). With --probe it is ld19, a1, pods, unknown, busy
    or error. With --probe, or when nothing is found, brltty (which takes CP2102
    adapters away on Ubuntu) is looked for: its process, its udev rule and its
    kernel log line; a warning gives the fix (JSON: "brltty").
    """
    devices = list_serial_devices(usb_only=not show_all)
    probes: dict[str, ProbeResult] = {}
    brltty = None
    if probe or not devices:  # brltty takes CP2102 nodes away: say so when it may have
        from sensorbench.udev.brltty import check_brltty

        brltty = check_brltty()
    if probe:
        from sensorbench.udev.probe import KINDS, probe_port  # numba kernels: only to probe

        for device in devices:
            probes[device.node] = probe_port(device.node, KINDS, listen_s=listen_s)
    if brltty is not None and brltty.found and not as_json:
        click.echo(f"warning: {brltty.message()}", err=True)
    if as_json:
        out = []
        for device in devices:
            entry = device.as_dict()
            result = probes.get(device.node)
            entry["kind"] = _kind(device, result)
            entry["probe"] = result.as_dict() if result is not None else None
            out.append(entry)
        doc: dict = {"devices": out}
        if brltty is not None:
            doc["brltty"] = brltty.as_dict()
        click.echo(to_json(doc))
        return
    if not devices:
        click.echo("no serial devices found" + ("" if show_all else " on USB (try --all)"))
        return
    header = ("NODE", "PORT", "VID:PID", "SERIAL", "KIND", "ID_PATH", "MODEL")
    rows = [
        (
            d.node,
            d.port_path or "-",
            d.usb_id or "-",
            d.serial or "-",
            _kind(d, probes.get(d.node)),
            d.id_path or "-",
            d.model or "-",
        )
        for d in devices
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for device in devices:
        result = probes.get(device.node)
        if result is not None:
            click.echo(f"{device.node}: {result.detail} ({result.elapsed_s:.2f} s)")
        if device.devlinks:
            click.echo(f"{device.node}: links {' '.join(device.devlinks)}")
