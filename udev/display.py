"""How ``sensorbench devices`` shows what it found: a table of serial devices (node, USB
port path, VID:PID, serial, kind, ID_PATH, model) as text lines or one JSON document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sensorbench.drivers.capture_display import table
from sensorbench.udev.discovery import SerialDevice


def device_kind(device: SerialDevice, probe: Any | None) -> str:
    """The probed kind (:class:`~sensorbench.udev.probe.ProbeResult`), else the bridge
    guessed from VID:PID with a ``?`` (``cp210x?``), else ``?``."""
    if probe is not None:
        return str(probe.kind)
    return f"{device.bridge}?" if device.bridge else "?"


def devices_doc(
    devices: Sequence[SerialDevice], probes: Mapping[str, Any], brltty: Any | None
) -> dict[str, Any]:
    """``devices --json``: every device with its kind and probe, and the brltty check."""
    out = []
    for device in devices:
        result = probes.get(device.node)
        entry = device.as_dict()
        entry["kind"] = device_kind(device, result)
        entry["probe"] = result.as_dict() if result is not None else None
        out.append(entry)
    doc: dict[str, Any] = {"devices": out}
    if brltty is not None:
        doc["brltty"] = brltty.as_dict()
    return doc


def devices_lines(
    devices: Sequence[SerialDevice], probes: Mapping[str, Any], show_all: bool
) -> list[str]:
    """The table (columns padded to their widest cell), then each probe's detail (s) and
    each device's udev links."""
    if not devices:
        return ["no serial devices found" + ("" if show_all else " on USB (try --all)")]
    header = ("NODE", "PORT", "VID:PID", "SERIAL", "KIND", "ID_PATH", "MODEL")
    rows = [(d.node, d.port_path or "-", d.usb_id or "-", d.serial or "-",
         device_kind(d, probes.get(d.node)), d.id_path or "-", d.model or "-")
        for d in devices
    ]  # fmt: skip
    out = table([header, *rows]).split("\n")
    for device in devices:
        result = probes.get(device.node)
        if result is not None:
            out.append(f"{device.node}: {result.detail} ({result.elapsed_s:.2f} s)")
        if device.devlinks:
            out.append(f"{device.node}: links {' '.join(device.devlinks)}")
    return out
