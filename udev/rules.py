"""Generate udev rules that name serial devices by the USB port they are plugged into
(docs/UDEV.md). Every value written is validated first; nothing is interpolated raw.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sensorbench.errors import UdevError
from sensorbench.udev.discovery import SerialDevice, find_by_port

DEFAULT_FILENAME = "70-sensorbench.rules"
BY_CHOICES = ("id-path", "kernels")
MAX_NAME_LEN = 32

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
# "<bus>-<port>[.<port>...]" with an optional ":<config>.<interface>".
_PORT_PATH = re.compile(r"^(?P<bus>\d{1,3})-(?P<ports>\d{1,3}(?:\.\d{1,3}){0,6})"
    r"(?::(?P<cfg>\d{1,2})\.(?P<iface>\d{1,2}))?$")
# What path_id produces for a USB device: "<controller>-usb-0:<ports>:<cfg>.<iface>", the
# numbers as the kernel writes them (no leading zeros: "usb-0:01.2:1.0" never matches).
_N = r"(?:0|[1-9]\d*)"
_ID_PATH = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9:._+-]*-usb(?:v\d)?-0:{_N}(?:\.{_N})*:{_N}\.{_N}$")
_HEX4 = re.compile(r"^[0-9a-f]{4}$")
_FIXED = ('GROUP="dialout"', 'MODE="0660"', 'ENV{ID_MM_DEVICE_IGNORE}="1"')
"""What every rule sets: the group and mode, and ModemManager told to leave it alone."""

# Names that already exist in /dev or that the kernel and udev create there;
# a symlink over one of them would hide or break a system device.
RESERVED_NAMES = frozenset(
    {"autofs", "block", "bsg", "btrfs-control", "bus", "char", "console", "core", "cpu",
        "cpu_dma_latency", "cuse", "disk", "dma_heap", "dri", "fb0", "fd", "full", "fuse",
        "gpiochip0", "hidraw0", "hpet", "hugepages", "hwrng", "i2c-0", "initctl", "input", "kmsg",
        "kvm", "log", "loop-control", "mapper", "mem", "mqueue", "net", "null", "nvram", "port",
        "ppp", "ptmx", "pts", "random", "rfkill", "rtc", "rtc0", "serial", "sg0", "shm", "snd",
        "stderr", "stdin", "stdout", "tty", "uhid", "uinput", "urandom", "usb", "userfaultfd",
        "vcs", "vfio", "vga_arbiter", "vhost-net", "vhost-vsock", "watchdog", "zero", "zfs"}
)  # fmt: skip
# Kernel node names (ttyUSB0, sda1, video2, ...): a name shaped like one could
# collide with a node the kernel creates later.
_RESERVED_PATTERN = re.compile(r"^(?:tty.*"
    r"|(?:pts|sr|nvme|mmcblk|loop|ram|md|dm-|nbd|zram|sg|st|nst|video|media|dvb|fb|card"
    r"|hidraw|event|js|mouse|i2c-|spidev|gpiochip|rtc|watchdog|vcs|vcsa|vcsu|lp|parport"
    r"|usbmon|rfcomm|ircomm|cu)\d.*"
    r"|(?:sd|hd|vd|xvd)[a-z]{1,3}\d*)$")


@dataclass(frozen=True)
class NameSpec:
    """One requested name: ``name`` for the device at ``where``.

    ``where`` is a USB port path (``1-1.2``, or ``1-1.2:1.0`` for one interface
    of a multi-port adapter) or a full ``ID_PATH``.
    """

    name: str
    where: str


@dataclass(frozen=True)
class Rule:
    """One validated rule: the symlink name and what it matches on."""

    name: str
    by: str
    id_path: str | None
    port_path: str | None
    interface: str | None
    vid: str | None
    pid: str | None
    note: str

    def text(self) -> str:
        """The rule line (all values validated when the rule was built)."""
        keys = ['SUBSYSTEM=="tty"']
        if self.by == "id-path":
            keys.append(f'ENV{{ID_PATH}}=="{self.id_path}"')
        elif self.interface is not None:
            # One interface of a multi-port adapter: match the interface only
            # (the vendor is on its parent usb_device, so it cannot be in this rule).
            keys.append(f'KERNELS=="{self.port_path}:{self.interface}"')
        else:
            keys.append(f'KERNELS=="{self.port_path}"')
            if self.vid is not None and self.pid is not None:
                keys.append(f'ATTRS{{idVendor}}=="{self.vid}"')
                keys.append(f'ATTRS{{idProduct}}=="{self.pid}"')
        return ", ".join([*keys, f'SYMLINK+="{self.name}"', *_FIXED])


def validate_name(name: str) -> str:
    """``name`` if it is a safe ``/dev`` symlink name (``[a-z0-9_-]`` from a letter, at most
    32, not (shaped like) a system node), else UdevError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise UdevError(
            f"invalid device name {name!r}: use lowercase letters, digits, '_' and '-', "
            "starting with a letter (e.g. lidar_front)")
    if len(name) > MAX_NAME_LEN:
        raise UdevError(f"device name {name!r} is longer than {MAX_NAME_LEN} characters")
    if name in RESERVED_NAMES or _RESERVED_PATTERN.fullmatch(name):
        raise UdevError(
            f"device name {name!r} is reserved: /dev/{name} is (or may become) a system "
            "device; choose another, e.g. lidar_front")
    return name


def parse_port_path(text: str) -> tuple[str, str | None]:
    """Split a USB port path: ``"1-1.2:1.0"`` → ``("1-1.2", "1.0")``; no interface → None.
    UdevError unless ``<bus>-<port>[.<port>...][:<config>.<interface>]``, numbers 1..255."""
    match = _PORT_PATH.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise UdevError(
            f"invalid USB port path {text!r}: expected e.g. 1-1.2 (bus 1, port 1, hub port 2) "
            "or 1-1.2:1.0 for one interface; see `sensorbench devices`")
    numbers = [int(match["bus"]), *(int(p) for p in match["ports"].split("."))]
    if min(numbers) < 1 or max(numbers) > 255:
        raise UdevError(f"invalid USB port path {text!r}: bus and port numbers are 1..255")
    port = f"{numbers[0]}-{'.'.join(map(str, numbers[1:]))}"
    if match["cfg"] is None:
        return port, None
    return port, f"{int(match['cfg'])}.{int(match['iface'])}"


def validate_id_path(text: str) -> str:
    """``text`` if it is a USB ``ID_PATH`` as path_id writes it, else UdevError."""
    if not isinstance(text, str) or len(text) > 200 or not _ID_PATH.fullmatch(text):
        raise UdevError(f"invalid ID_PATH {text!r}: expected e.g. pci-0000:00:14.0-usb-0:1.2:1.0 "
            "(see `sensorbench devices`)")
    return text


def is_id_path(text: str) -> bool:
    """True when ``text`` looks like an ``ID_PATH`` rather than a port path."""
    return "-usb" in text


def parse_name_spec(text: str) -> NameSpec:
    """Parse ``NAME=PORTPATH`` (or ``NAME=ID_PATH``) from the command line (UdevError: no
    ``=``, or an invalid name or location)."""
    name, sep, where = text.partition("=")
    if not sep or not name or not where:
        raise UdevError(f"expected NAME=PORTPATH (e.g. front=1-1.2), got {text!r}")
    validate_name(name)
    if is_id_path(where):
        validate_id_path(where)
    else:
        parse_port_path(where)
    return NameSpec(name, where)


def _clean_hex(value: int | None) -> str | None:
    if value is None:
        return None
    text = f"{value:04x}"
    if not _HEX4.fullmatch(text):
        raise UdevError(f"USB id {value!r} is not a 16-bit number")
    return text


def _comment_safe(text: str | None) -> str:
    """Reduce a device-provided string to characters harmless in a comment."""
    if not text:
        return "?"
    return re.sub(r"[^A-Za-z0-9 ._:/-]", "_", text)[:60]


def build_rule(spec: NameSpec, devices: Sequence[SerialDevice] = (), by: str = "id-path") -> Rule:
    """Validate one spec and resolve it against discovered devices.

    With ``by="id-path"`` a port path must be resolvable to a present device's
    ``ID_PATH`` (or give the ``ID_PATH`` itself); with ``by="kernels"`` the port
    path is used directly and the vendor/product come from the device if present.
    UdevError: invalid input, no or several devices at the port, no ID_PATH.
    """
    if by not in BY_CHOICES:
        raise UdevError(f"unknown rule key {by!r}: use one of {', '.join(BY_CHOICES)}")
    name = validate_name(spec.name)
    if is_id_path(spec.where):
        id_path = validate_id_path(spec.where)
        if by != "id-path":
            raise UdevError(
                f"{name}: an ID_PATH ({id_path}) was given but rules by kernels need a port "
                "path (e.g. 1-1.2)")
        match = [d for d in devices if d.id_path == id_path]
        device = match[0] if len(match) == 1 else None
        return Rule(name, by, id_path, None, None, None, None, _note(name, device, id_path))
    port, interface = parse_port_path(spec.where)
    match = find_by_port(devices, spec.where if interface is None else f"{port}:{interface}")
    if len(match) > 1:
        interfaces = ", ".join(f"{port}:{d.interface}" for d in match)
        raise UdevError(
            f"{name}: {port} has {len(match)} serial interfaces ({interfaces}); name one of them")
    device = match[0] if match else None
    if by == "id-path":
        if device is None:
            raise UdevError(
                f"{name}: no serial device is plugged into {port}; plug it in, give its "
                "ID_PATH instead, or use --by kernels")
        if device.id_path is None:
            raise UdevError(f"{name}: udev set no ID_PATH on {device.node} (is 60-serial.rules "
                "installed?); use --by kernels")
        id_path = validate_id_path(device.id_path)
        return Rule(name, by, id_path, port, interface, None, None, _note(name, device, port))
    vid = _clean_hex(device.vid) if device is not None else None
    pid = _clean_hex(device.pid) if device is not None else None
    where = port if interface is None else f"{port}:{interface}"
    return Rule(name, by, None, port, interface, vid, pid, _note(name, device, where))


def _note(name: str, device: SerialDevice | None, where: str) -> str:
    if device is None:
        return f"{name}: {where} (device not present when generated)"
    ident = device.usb_id or "not USB"
    return (f"{name}: port {device.port_path or '?'}, {ident} serial "
        f"{_comment_safe(device.serial)} ({_comment_safe(device.model)})")


def build_rules(
    specs: Iterable[NameSpec], devices: Sequence[SerialDevice] = (), by: str = "id-path"
) -> list[Rule]:
    """Build and cross-check all rules: UdevError for an invalid spec, a name given twice
    or two names for one location."""
    rules: list[Rule] = []
    for spec in specs:
        rule = build_rule(spec, devices, by)
        for other in rules:
            if rule.name == other.name:
                raise UdevError(f"device name {rule.name!r} is given twice; names must be unique")
            if _overlap(rule, other):
                where = rule.id_path or _kernels_where(rule)
                raise UdevError(f"{rule.name} and {other.name} name the same device ({where}); "
                    "give each port one name")
        rules.append(rule)
    if not rules:
        raise UdevError("no device names given: use --name NAME=PORTPATH (e.g. front=1-1.2)")
    return rules


def _kernels_where(rule: Rule) -> str:
    """The port path a rule by kernels matches, with its interface if it names one."""
    return f"{rule.port_path}:{rule.interface}" if rule.interface else str(rule.port_path)


def _overlap(a: Rule, b: Rule) -> bool:
    """True when rules ``a`` and ``b`` match the same tty: the same ``ID_PATH``, or by
    kernels the same port where either names no interface (``1-1.2`` covers
    ``1-1.2:1.0``) or both name the same one."""
    if a.by == "id-path":
        return a.id_path == b.id_path
    if a.port_path != b.port_path:
        return False
    return a.interface is None or b.interface is None or a.interface == b.interface


def generate(
    specs: Iterable[NameSpec], devices: Sequence[SerialDevice] = (), by: str = "id-path"
) -> str:
    """Validate ``specs``, resolve them against ``devices`` and return the rules text: a
    header with the command that regenerates it, then a comment and a rule per device."""
    rules = build_rules(specs, devices, by)
    command = ["sensorbench udev rules"]
    for rule in rules:
        where = rule.id_path if rule.port_path is None else _kernels_where(rule)
        command.append(f"--name {rule.name}={where}")
    lines = [
        "# Generated by sensorbench; regenerate rather than edit.",
        "# Names serial devices by the USB port they are plugged into (identical",
        "# adapters cannot be told apart by ID). Install with `sensorbench udev install`",
        f"# as /etc/udev/rules.d/{DEFAULT_FILENAME}: it must sort after 60-serial.rules,",
        "# which sets ID_PATH.",
        "# GROUP/MODE instead of uaccess: a headless robot has no seat. ModemManager is",
        "# told to leave the devices alone.",
        f"# Regenerate: {' '.join(command)} --by {by}",
    ]
    for rule in rules:
        lines += ["", f"# {rule.note}", rule.text()]
    return "\n".join(lines) + "\n"


_RULE_LINE = re.compile(r'SYMLINK\+="([^"]*)"')


def check_rules_text(text: str) -> list[str]:
    """Check a rules file before installing it; return the symlink names it creates.

    Every non-comment line must be a rule this module would write: tty-only,
    a valid name, ``GROUP="dialout"``, ``MODE="0660"``, ModemManager ignored,
    no ``RUN``/``PROGRAM``/``IMPORT``/``OWNER`` and no other assignments, exactly one
    port (``ENV{ID_PATH}`` or ``KERNELS`` as the kernel spells it), no key twice; else
    UdevError naming the line and what is wrong.
    """
    names: list[str] = []
    rules_seen = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {number}"
        if line.count('"') % 2:
            raise UdevError(f"{where}: unbalanced quote")
        # the keys: split on commas outside quotes (followed by an even number of quotes)
        keys = [k.strip() for k in re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', line)]
        if keys[0] != 'SUBSYSTEM=="tty"':
            raise UdevError(f'{where}: rule must start with SUBSYSTEM=="tty"')
        symlinks = _RULE_LINE.findall(line)
        if len(symlinks) != 1:
            raise UdevError(f"{where}: rule must add exactly one SYMLINK")
        validate_name(symlinks[0])
        if symlinks[0] in names:
            raise UdevError(f"{where}: name {symlinks[0]!r} is used twice")
        names.append(symlinks[0])
        allowed_fixed = {f'SYMLINK+="{symlinks[0]}"', *_FIXED}
        if not allowed_fixed.issubset(keys):
            raise UdevError(f'{where}: rule must set GROUP="dialout", MODE="0660" and '
                'ENV{ID_MM_DEVICE_IGNORE}="1"')
        matches = [k for k in keys[1:] if k not in allowed_fixed]
        for key in matches:
            _check_match_key(key, where)
        _check_one_port(matches, where)
        _check_same_parent(keys, where)
        rules_seen += 1
    if not rules_seen:
        raise UdevError("the rules file contains no rule")
    return names


_MATCH_KEY = re.compile(
    r'^(?P<key>ENV\{ID_PATH\}|KERNELS|ATTRS\{idVendor\}|ATTRS\{idProduct\})=="(?P<value>[^"]*)"$')


def _check_match_key(key: str, where: str) -> None:
    match = _MATCH_KEY.fullmatch(key)
    if match is None:
        raise UdevError(f"{where}: {key!r} is not allowed (only ENV{{ID_PATH}}, KERNELS, "
            "ATTRS{idVendor}/{idProduct} matches and the fixed assignments)")
    value = match["value"]
    if match["key"] == "ENV{ID_PATH}":
        validate_id_path(value)
    elif match["key"] == "KERNELS":
        port, interface = parse_port_path(value)
        kernel_name = port if interface is None else f"{port}:{interface}"
        if value != kernel_name:  # the kernel writes no leading zeros: "01-1.2" never matches
            raise UdevError(f"{where}: {key} never matches: the kernel names that port "
                f'{kernel_name!r}; write KERNELS=="{kernel_name}"')
    elif not _HEX4.fullmatch(value):
        raise UdevError(f"{where}: {key} must be 4 lowercase hex digits")


def _check_one_port(matches: list[str], where: str) -> None:
    """Refuse a rule that does not name exactly one port (by ``ENV{ID_PATH}`` or
    ``KERNELS``) or gives a key twice: without a port it matches every tty, or every
    adapter with those identical IDs, and the name lands on whichever came last; a key
    given twice with two values never matches."""
    names = [k.partition("==")[0] for k in matches]
    for name in set(names):
        if names.count(name) > 1:
            raise UdevError(f"{where}: more than one {name} key (one value each; the rule "
                "could never match two)")
    ports = [n for n in names if n in ("ENV{ID_PATH}", "KERNELS")]
    if len(ports) != 1:
        if ports:
            raise UdevError(f"{where}: the rule has both ENV{{ID_PATH}} and KERNELS; name "
                "the USB port once")
        raise UdevError(f"{where}: the rule names no USB port (ENV{{ID_PATH}} or KERNELS): it "
            "would match every tty, or every adapter with the same IDs, and the name would "
            "land on whichever appeared last")


def _check_same_parent(keys: list[str], where: str) -> None:
    """Refuse a rule whose parent keys name two different parents (it never matches)."""
    kernels = [k for k in keys if k.startswith("KERNELS==")]
    attrs = [k for k in keys if k.startswith("ATTRS{")]
    if kernels and attrs and ":" in kernels[0]:
        raise UdevError(
            f"{where}: {kernels[0]} names a USB interface but {attrs[0]} lives on its parent "
            "usb_device; udev needs every parent key of a rule to match the same parent, so "
            "this rule never matches (drop the interface or the ATTRS)")
