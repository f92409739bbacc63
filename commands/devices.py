"""``sensorbench devices``: list serial devices with their USB port path; optionally probe them."""

from __future__ import annotations

from typing import Any

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.udev.discovery import list_serial_devices
from sensorbench.udev.display import devices_doc, devices_lines


@cli.command("devices")
@opt.flag_option("--probe",
    "Open each listed device and find out what answers: listen for an LD19-protocol "
    "lidar (LD19 or LD06, 230400 baud) and the pod MCU (115200), then ask for an A1's "
    "GET_INFO. Opening a port stops an A1's motor and closing it starts it again; do not "
    "probe during a capture.")
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
    probes: dict[str, Any] = {}
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
        click.echo(to_json(devices_doc(devices, probes, brltty)))
    else:
        click.echo("\n".join(devices_lines(devices, probes, show_all)))
