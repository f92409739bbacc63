"""``sensorbench devices``: list serial devices (and probe them); ``sensorbench udev rules``
and ``sensorbench udev install``: name them by USB port."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from sensorbench.cli import cli, subgroup
from sensorbench.commands import options as opt
from sensorbench.errors import UdevError
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import atomic_output, check_output
from sensorbench.udev.discovery import devices_doc, devices_lines, list_serial_devices
from sensorbench.udev.install import RULES_DIR, install_rules
from sensorbench.udev.rules import (
    BY_CHOICES,
    DEFAULT_FILENAME,
    generate,
    is_id_path,
    parse_name_spec,
)

udev = subgroup("udev")


@udev.command("rules")
@click.option("--name", "names", multiple=True, required=True, metavar="NAME=PORTPATH",
    help="Create /dev/NAME for the device at USB port path PORTPATH (e.g. "
    "lidar_front=1-1.2, or 1-1.2:1.0 for one interface); repeatable. PORTPATH may also be "
    "a full ID_PATH. NAME: lowercase letters, digits, '_' and '-'.")
@click.option("--by", type=click.Choice(BY_CHOICES), default="id-path", show_default=True,
    help="Match on udev's ID_PATH (the device plugged in, or its ID_PATH given) or on "
    "KERNELS (absent devices too; bakes in the bus number). See docs/UDEV.md.")
@opt.output_option(
    f"Write the rules here (e.g. {DEFAULT_FILENAME}) instead of stdout.", force="OUTPUT"
)
def rules_cmd(names: tuple[str, ...], by: str, output: Path | None, force: bool) -> None:
    """Generate udev rules naming each device by the USB port it is plugged into.

    Install the file with `sensorbench udev install FILE`. See docs/UDEV.md.
    """
    if output is not None:
        check_output(output, force=force)
    specs = [parse_name_spec(text) for text in names]
    if by == "kernels":
        # Present devices add their vendor/product to the rule; none are required.
        try:
            devices = list_serial_devices()
        except UdevError:
            devices = []
    elif all(is_id_path(spec.where) for spec in specs):
        devices = []
    else:
        devices = list_serial_devices()
    text = generate(specs, devices, by)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        with atomic_output(output, force=force) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UdevError(f"cannot write {output}: {exc}") from exc
    click.echo(
        f"wrote {output}; install it with: sensorbench udev install {shlex.quote(str(output))}")


@udev.command("install")
@click.argument("file", type=opt.IN_FILE)
@click.option("--rules-dir", type=click.Path(file_okay=False, path_type=Path), default=RULES_DIR,
    show_default=True,
    help="Where udev reads local rules (e.g. a mounted image's etc/udev/rules.d).")
@click.option("--filename", default=DEFAULT_FILENAME, show_default=True,
    help="Installed file name; must sort after 60-serial.rules (which sets ID_PATH).")
@opt.flag_option("--no-reload",
    "Only copy the file; do not run udevadm (e.g. when preparing an image).")
@opt.flag_option("--force",
    "Replace an installed file of that name whose contents differ (refused otherwise).")
def install_cmd(file: Path, rules_dir: Path, filename: str, no_reload: bool, force: bool) -> None:
    """Check FILE, install it into the udev rules directory, reload udev, re-trigger ttys.

    Needs root. Without it nothing changes and the exact command to run is printed. An
    installed file of that name with other contents is replaced only with --force.
    """
    result = install_rules(file, rules_dir=rules_dir, filename=filename, reload=not no_reload,
        force=force)
    verb = "replaced" if result.replaced else "installed"
    click.echo(f"{verb} {result.path} ({', '.join('/dev/' + n for n in result.names)})")
    for command in result.commands:
        click.echo(f"ran: {command}")
    if no_reload:
        click.echo("udev not reloaded (--no-reload); the names appear after a reload or replug",
            err=True)


@cli.command("devices")
@opt.flag_option("--probe",
    "Open each listed device and find out what answers (LD19/LD06, pod MCU, A1). "
    "Opening a port stops an A1's motor: do not probe during a capture.")
@opt.number_option(
    "--listen", "listen_s", opt.FiniteFloat(0.05, 5.0), 0.35,
    "Seconds each listen-only probe listens per device (s).",
)  # fmt: skip
@opt.flag_option("--all", "Also list serial ports not on USB.", "show_all")
@opt.json_option()
def devices_cmd(probe: bool, listen_s: float, show_all: bool, as_json: bool) -> None:
    """List serial devices: node, USB port path, ID_PATH, VID:PID, serial, kind.

    Identical adapters differ only in their USB port path: name them with `sensorbench
    udev rules --name NAME=PORTPATH`. The kind is the bridge guessed from VID:PID, or with
    --probe ld19, a1, pods, unknown, busy or error; with --probe or when nothing is found
    brltty is looked for (JSON: "brltty"). See docs/UDEV.md.
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
    click.echo(to_json(devices_doc(devices, probes, brltty)) if as_json
        else "\n".join(devices_lines(devices, probes, show_all)))
