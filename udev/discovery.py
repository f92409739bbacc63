"""Find every serial (tty) device with pyudev, describe where it is plugged in, and show
them as ``sensorbench devices`` does (text table or JSON document)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyudev

from sensorbench.drivers.capture_display import table
from sensorbench.errors import UdevError

# A USB interface's kernel name: "<bus>-<port>[.<port>...]:<config>.<interface>".
_INTERFACE_NAME = re.compile(r"^(?P<port>\d+-\d+(?:\.\d+)*):(?P<cfg>\d+)\.(?P<iface>\d+)$")
# A USB device's kernel name: "<bus>-<port>[.<port>...]" (root hubs are "usbN").
_DEVICE_NAME = re.compile(r"^\d+-\d+(?:\.\d+)*$")

# Bridges whose device is only known after probing; used to guess a kind.
KNOWN_BRIDGES: dict[tuple[int, int], str] = {(0x10C4, 0xEA60): "cp210x", (0x1A86, 0x7523): "ch340",
    (0x0403, 0x6001): "ft232r", (0x0403, 0x6015): "ft-x"}


@dataclass(frozen=True)
class SerialDevice:
    """One tty on real hardware, as udev sees it; the USB fields (``port_path`` ``1-1.2``,
    ``interface`` ``1.0``, ids, strings) are None off USB and where the device gives none.

    Attributes:
        subsystem_parent: the subsystem of the tty's hardware parent (``usb-serial``,
            ``usb`` for CDC-ACM, ``pnp``, ``platform``...; the ``serial-base``
            layer of kernels >= 6.5 is skipped).
        id_path: udev's ``ID_PATH`` (set by ``60-serial.rules``'s path_id), or None.
        serial: the USB serial string (often ``0001`` on CP2102s: not unique).
        vendor, model: USB manufacturer and product strings (or udev's ID_VENDOR, ID_MODEL).
        driver: kernel driver of the interface (``cp210x``, ``cdc_acm``).
        devlinks: the symlinks udev made for this node (``DEVLINKS``), sorted.
    """

    node: str
    sys_path: str
    subsystem_parent: str | None
    id_path: str | None
    port_path: str | None
    interface: str | None
    vid: int | None
    pid: int | None
    serial: str | None
    vendor: str | None
    model: str | None
    driver: str | None
    devlinks: tuple[str, ...]

    @property
    def usb_id(self) -> str | None:
        """``"10c4:ea60"`` or None when the device is not on USB."""
        if self.vid is None or self.pid is None:
            return None
        return f"{self.vid:04x}:{self.pid:04x}"

    @property
    def bridge(self) -> str | None:
        """The USB-UART bridge family guessed from VID:PID (``cp210x``...), or None."""
        if self.vid is None or self.pid is None:
            return None
        return KNOWN_BRIDGES.get((self.vid, self.pid))


def port_path_from_sys_path(sys_path: str) -> tuple[str | None, str | None]:
    """``(port_path, interface)`` parsed from a sysfs path, e.g. ``("1-1.2", "1.0")``: from
    the string alone, so also for a device just removed (its sysfs directory gone)."""
    for part in reversed(sys_path.split("/")):
        match = _INTERFACE_NAME.fullmatch(part)
        if match:
            return match["port"], f"{match['cfg']}.{match['iface']}"
    for part in reversed(sys_path.split("/")):
        if _DEVICE_NAME.fullmatch(part):
            return part, None
    return None, None


def _attr(device: pyudev.Device | None, name: str) -> str | None:
    if device is None:
        return None
    try:
        value = device.attributes.asstring(name)
    except (KeyError, UnicodeDecodeError):
        return None
    value = value.strip()
    return value or None


def _hex_id(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def _udev_string(properties: Mapping[str, str], key: str) -> str | None:
    """udev's ID_VENDOR/ID_MODEL with ``_`` standing for spaces, as a fallback."""
    value = properties.get(key)
    return value.replace("_", " ") if value else None


def describe(device: pyudev.Device) -> SerialDevice:
    """Describe one tty :class:`pyudev.Device` (see :class:`SerialDevice`)."""
    props = device.properties
    parent = _hardware_parent(device)
    usb_device = device.find_parent("usb", "usb_device")
    usb_interface = device.find_parent("usb", "usb_interface")
    port_path = interface = None
    if usb_device is not None:
        port_path = usb_device.sys_name
        if usb_interface is not None:
            _, interface = port_path_from_sys_path(usb_interface.sys_path)
    vid = _hex_id(_attr(usb_device, "idVendor") or props.get("ID_VENDOR_ID"))
    pid = _hex_id(_attr(usb_device, "idProduct") or props.get("ID_MODEL_ID"))
    serial = _attr(usb_device, "serial") or props.get("ID_SERIAL_SHORT")
    vendor = _attr(usb_device, "manufacturer") or _udev_string(props, "ID_VENDOR")
    model = _attr(usb_device, "product") or _udev_string(props, "ID_MODEL")
    driver = None
    if usb_interface is not None:
        driver = _driver(usb_interface) or props.get("ID_USB_DRIVER")
    elif parent is not None:
        driver = _driver(parent)
    links = tuple(sorted(props.get("DEVLINKS", "").split()))
    return SerialDevice(node=device.device_node or f"/dev/{device.sys_name}",
        sys_path=device.sys_path,
        subsystem_parent=parent.subsystem if parent is not None else None,
        id_path=props.get("ID_PATH"), port_path=port_path, interface=interface, vid=vid, pid=pid,
        serial=serial, vendor=vendor, model=model, driver=driver, devlinks=links)


def _hardware_parent(device: pyudev.Device) -> pyudev.Device | None:
    """The tty's nearest parent that is not the ``serial-base`` layer (kernels >= 6.5)."""
    parent = device.parent
    while parent is not None and parent.subsystem == "serial-base":
        parent = parent.parent
    return parent


def _is_hardware(device: pyudev.Device) -> bool:
    """True for a tty backed by hardware: not a virtual console, pty or one of the ``ttyS*``
    placeholders the 8250 driver registers whether or not a UART exists (as pyserial)."""
    parent = _hardware_parent(device)
    if parent is None:
        return False
    return not (parent.subsystem == "platform" and _driver(parent) == "serial8250")


def _driver(device: pyudev.Device) -> str | None:
    """The bound kernel driver: the ``driver`` link, else the uevent's ``DRIVER``."""
    return device.driver or device.properties.get("DRIVER")


def list_serial_devices(usb_only: bool = False) -> list[SerialDevice]:
    """Every hardware tty (``usb_only``: on USB) with its node, ``ID_PATH``, USB port path
    and identity, sorted by port path (USB first), then node; UdevError when udev cannot be
    queried."""
    try:
        tty = pyudev.Context().list_devices(subsystem="tty")
        devices = [describe(d) for d in tty if _is_hardware(d)]
    except (OSError, ImportError) as exc:
        raise UdevError(
            f"cannot list tty devices through udev ({exc}); is /sys mounted and libudev installed?"
        ) from exc
    if usb_only:
        devices = [d for d in devices if d.port_path is not None]
    return sorted(devices, key=_sort_key)


def _sort_key(device: SerialDevice) -> tuple:
    if device.port_path is None:
        return (1, (), device.node)
    bus, _, ports = device.port_path.partition("-")
    numbers = tuple(int(p) for p in ports.split("."))
    return (0, (int(bus), *numbers), device.interface or "", device.node)


def find_by_port(devices: Iterable[SerialDevice], port_path: str) -> list[SerialDevice]:
    """The devices plugged into ``port_path``: ``1-1.2`` (every interface of that USB
    device) or ``1-1.2:1.0`` (that interface only)."""
    port, _, interface = port_path.partition(":")
    return [
        d for d in devices if d.port_path == port and (not interface or d.interface == interface)]


def device_kind(device: SerialDevice, probe: Any | None) -> str:
    """The probed kind (:class:`~sensorbench.udev.probe.ProbeResult`), else the bridge
    guessed from VID:PID with a ``?`` (``cp210x?``), else ``?``."""
    if probe is not None:
        return str(probe.kind)
    return f"{device.bridge}?" if device.bridge else "?"


def devices_doc(
    devices: Sequence[SerialDevice], probes: Mapping[str, Any], brltty: Any | None
) -> dict[str, Any]:
    """``devices --json``: every device (ids as ``"10c4"`` hex strings) with its kind and
    probe (elapsed s), and the brltty check."""
    out = []
    for d in devices:
        result = probes.get(d.node)
        probe = None if result is None else {
            **asdict(result), "elapsed_s": round(result.elapsed_s, 4)}
        out.append({**asdict(d), "vid": None if d.vid is None else f"{d.vid:04x}",
            "pid": None if d.pid is None else f"{d.pid:04x}", "usb_id": d.usb_id,
            "bridge": d.bridge, "kind": device_kind(d, result), "probe": probe})  # fmt: skip
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
