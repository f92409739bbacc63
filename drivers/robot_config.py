"""The robot description (``robot.toml``), validated before any device is opened.

A bad file raises :class:`~sensorbench.errors.ConfigError` starting ``FILE:LINE:``.
Every key and its unit: docs/CAPTURE.md.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.drivers import pods_kind
from sensorbench.drivers.device_kinds import get_kind, kind_names
from sensorbench.drivers.port_power import POWER_METHODS, PortPower
from sensorbench.errors import ConfigError, FusionError
from sensorbench.logs import toml_schema
from sensorbench.logs.atomic_output import file_kind
from sensorbench.logs.schema import LIVE_OUTPUTS, name_conflict
from sensorbench.logs.toml_schema import FL, F, Free, I, KeyPath, S, SchemaError, Table, Tables

STANDARD_BAUDS = (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 250000,
                  460800, 500000, 576000, 921600, 1000000, 1500000, 2000000, 3000000)  # fmt: skip
"""Line rates (baud) a device may be configured at: the standard ones USB-serial bridges
(CP210x, CH340, FTDI) run exactly. Any other (``baud = 12345``, a typo) would read garbage."""

POWER_BACKENDS = ("none", *POWER_METHODS)
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
MAX_NAME_LEN = 32
"""Longest device name (bytes): the name is the event ``source`` of the session, S32."""
MAX_WAIT_S = 60.0
"""Longest power-up gap or power-switch settle time (s): far beyond any device's spin-up."""
MAX_TIMEOUT_S = 120.0
"""Longest power-up deadline of a device (s)."""
MAX_MOUNT_M = 10.0
"""Largest |x| or |y| of a mount or pod wheel (m): no robot here is 20 m across."""
_SERIAL_TTY_TYPES = ("serial", "pty:slave")
"""``/proc/tty/drivers`` types of the ttys a device can sit on (USB serial, UART, ACM,
the emulators' pseudo-terminals); not consoles, ``/dev/tty`` or pty masters."""


def is_serial_tty(rdev: int) -> bool:
    """True when device number ``rdev`` belongs to a serial tty driver (a pseudo-terminal
    slave included), from ``/proc/tty/drivers``; True when that file cannot be read."""
    try:
        text = Path("/proc/tty/drivers").read_text()
    except OSError:
        return True
    major, minor = os.major(rdev), os.minor(rdev)
    for line in text.splitlines():
        cells = line.split()
        if len(cells) < 5 or cells[-1] not in _SERIAL_TTY_TYPES or not cells[-3].isdigit():
            continue
        lo, _, hi = cells[-2].partition("-")
        if int(cells[-3]) == major and int(lo) <= minor <= int(hi or lo):
            return True
    return False


@dataclass(frozen=True)
class Mount:
    """Sensor pose in the body frame: x forward, y left (m); yaw CCW (rad)."""

    x_m: float
    y_m: float
    yaw_rad: float

    def as_list(self) -> list[float]:
        """``[x_m, y_m, yaw_rad]`` (session attr ``mount_xy_yaw``)."""
        return [self.x_m, self.y_m, self.yaw_rad]

    @classmethod
    def from_seq(cls, xy_yaw: object) -> Mount:
        """From ``[x, y, yaw]`` (m, m, rad), e.g. a stream's ``mount_xy_yaw`` attribute."""
        v = np.asarray(xy_yaw, dtype=float).ravel()
        if v.size != 3 or not np.all(np.isfinite(v)):
            raise FusionError(f"a mount is [x_m, y_m, yaw_rad]; got {xy_yaw!r}")
        return cls(float(v[0]), float(v[1]), float(v[2]))


@dataclass(frozen=True)
class DeviceConfig:
    """One configured device: the ``[[devices]]`` keys (docs/CAPTURE.md, robot.toml) with
    ``{run_dir}`` substituted in ``port`` and the ``[powerup]`` defaults applied; ``line``:
    of its ``[[devices]]`` header; ``options``: the validated extra keys of a kind whose
    keys are not fields here (its ``parse_options`` returns ``{"options": {...}}``).
    """

    name: str
    kind: str
    port: str
    baud: int
    mount: Mount | None
    gap_s: float
    timeout_s: float
    serial: str | None = None
    protocol: str = "binary"
    counter_bits: int = 16
    n_pods: int = 3
    imu: bool = False
    power: PortPower | None = None
    line: int = 0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PodWheel:
    """Nominal position (m) and rolling direction (rad CCW from body x) of one pod."""

    x_m: float
    y_m: float
    angle_rad: float


@dataclass(frozen=True)
class PodGeometry:
    """Nominal pod geometry: wheel radius (m), encoder counts per wheel revolution; the
    board counting them and the drive's top speed (m/s, None: not stated)."""

    wheel_radius_m: float
    counts_per_rev: int
    wheels: tuple[PodWheel, ...]
    board: str = "other"
    top_speed_m_s: float | None = None

    def count_rate_warning(self) -> str | None:
        """Why the drive's top speed would lose counts on the board, or None."""
        limit = pods_kind.BOARD_COUNT_RATE.get(self.board)
        if self.top_speed_m_s is None or limit is None:
            return None
        rate = self.top_speed_m_s / (2 * math.pi * self.wheel_radius_m) * self.counts_per_rev
        if rate <= limit:
            return None
        return (f"[pods] top_speed_m_s = {self.top_speed_m_s:g} is {rate:,.0f} counts/s per pod "
            f"({self.counts_per_rev} counts/rev, {self.wheel_radius_m:g} m wheels), above the "
            f"{self.board}'s measured {limit:,.0f} counts/s with every count kept "
            "(firmware/README.md): it will lose counts at speed (each loss is reported); "
            "use fewer counts/rev or a board that counts in hardware (stm32f4)")


@dataclass(frozen=True)
class RobotConfig:
    """A validated robot description; :attr:`text` is the file as read (for the session)."""

    name: str
    devices: tuple[DeviceConfig, ...]
    powerup_order: tuple[str, ...]
    footprint_m: np.ndarray
    pods: PodGeometry | None
    text: str
    source: str
    extra: dict[str, Any] = field(default_factory=dict)

    def device(self, name: str) -> DeviceConfig:
        """The device called ``name``; ConfigError if there is none."""
        for dev in self.devices:
            if dev.name == name:
                return dev
        raise ConfigError(f"{self.source}: no device named {name!r}")

    def ordered_devices(self) -> list[DeviceConfig]:
        """Devices in power-up order."""
        return [self.device(n) for n in self.powerup_order]


class _Lines:
    """Line numbers of keys in TOML text, for error messages: of ``[table]``, ``[[devices]]``
    (indexed), ``key = value`` (dotted too) and one-line inline tables' keys, by path
    (``("devices", 1, "mount", "x_m")``)."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"'. ]+?)\s*=(.*)$")
    _INLINE_KEY = re.compile(r"[{,]\s*([A-Za-z0-9_\-]+)\s*=")

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple, int] = {}
        arrays: dict[str, int] = {}
        current: tuple = ()
        for no, line in enumerate(text.splitlines(), start=1):
            m = self._HEADER.match(line)
            if m:
                parts = tuple(p.strip().strip("\"'") for p in m.group(2).split("."))
                if m.group(1) == "[[":
                    idx = arrays.get(parts[0], -1) + 1
                    arrays[parts[0]] = idx
                    current = (parts[0], idx, *parts[1:])
                elif parts[0] in arrays:
                    current = (parts[0], arrays[parts[0]], *parts[1:])
                else:
                    current = parts
                self.lines.setdefault(current, no)
                continue
            m = self._KEY.match(line)
            if m and not line.lstrip().startswith("#"):
                key = tuple(p.strip().strip("\"'") for p in m.group(1).split("."))
                path = current + key
                self.lines.setdefault(path, no)
                for sub in self._INLINE_KEY.findall(m.group(2)):
                    self.lines.setdefault((*path, sub), no)

    def find(self, *path: object) -> int:
        """Line of ``path`` or of its longest recorded prefix; 0 if unknown."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return 0


def _angle(table: dict, path: KeyPath, keys: tuple[str, str]) -> float:
    """The angle (rad) a checked ``table`` gives in degrees (``keys[0]``) or radians
    (``keys[1]``; the absent one is None)."""
    given = [k for k in keys if table[k] is not None]
    if len(given) != 1:
        raise SchemaError(path, f"must give exactly one of {' or '.join(keys)}, got "
            f"{' and '.join(given) or 'neither'}")
    return math.radians(table[keys[0]]) if given == [keys[0]] else table[keys[1]]


_XY = {"x_m": F(None, -MAX_MOUNT_M, MAX_MOUNT_M), "y_m": F(None, -MAX_MOUNT_M, MAX_MOUNT_M)}
_MOUNT = Table({**_XY, "yaw_deg": F(None, -360.0, 360.0),
    "yaw_rad": F(None, -2 * math.pi, 2 * math.pi)}, required=("x_m", "y_m"))
_WHEEL = Table({**_XY, "angle_deg": F(None), "angle_rad": F(None)}, required=("x_m", "y_m"))
_POWER = Table({"hub": S(None), "port": I(0), "settle_s": F(3.0, 0.1, MAX_WAIT_S)},
    required=("hub", "port"))
_PODS = Table({"wheel_radius_m": F(None, 1e-4, 1.0), "counts_per_rev": I(0, lo=1),
    "wheels": Tables(_WHEEL.check), "board": S("other", pods_kind.BOARDS),
    "top_speed_m_s": F(None, 1e-3, 100.0)}, required=("wheel_radius_m", "counts_per_rev", "wheels"))
_TEXT = S(None, test=str.isprintable, what="text without control characters")
_DOC = Table({
    "robot": Table({"name": _TEXT,
        "footprint_m": FL([], inner=2, lo=-MAX_MOUNT_M, hi=MAX_MOUNT_M)}),
    "powerup": Table({"order": Free(), "gap_s": F(3.0, 0, MAX_WAIT_S),
        "timeout_s": F(10.0, 0.1, MAX_TIMEOUT_S), "backend": S("none", POWER_BACKENDS)}),
    "pods": _PODS,
    "emulation": Table({"scenario": S("square", test=str.strip, what="a scenario name or path"),
        "seed": I(0, 0, 2**63 - 1)}),
    "devices": Free(),
})  # fmt: skip
"""robot.toml's tables; units and meanings: docs/CAPTURE.md."""
_NAME = S(None, test=lambda s: _NAME_RE.match(s) and len(s) <= MAX_NAME_LEN,
    what=f"letters, digits, _ or - starting with a letter, at most {MAX_NAME_LEN} characters "
    "(the event source in the session)")


class _Validator:
    def __init__(self, text: str, source: str, run_dir: str | None) -> None:
        text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Windows editors)
        self.text = text
        self.source = source
        self.run_dir = run_dir
        self.where = _Lines(text)

    def fail(self, path: KeyPath, message: str) -> SchemaError:
        """The error for a device kind's ``parse_options`` to raise (the line is added)."""
        return SchemaError(path, message)

    def port(self, value: str, path: KeyPath) -> str:
        if not value.strip():
            raise SchemaError(path, "must be a non-empty path")
        if "{run_dir}" in value:
            if self.run_dir is None:
                raise SchemaError(path, f"{value!r} uses {{run_dir}}: this configuration is "
                    "for emulated devices; give a run directory")
            value = value.replace("{run_dir}", self.run_dir)
        if "{" in value or "}" in value:
            raise SchemaError(path,
                f"unknown placeholder in {value!r} (only {{run_dir}} is supported)")
        return value

    def port_identity(self, dev: DeviceConfig, path: KeyPath) -> tuple[str, int | None]:
        """(the port's real path, its device number if it exists): how the kernel names it
        (docs/CAPTURE.md, robot.toml: ``port``)."""
        real = os.path.realpath(re.sub(r"^/+", "/", dev.port))
        try:
            st = os.stat(real)
        except OSError:
            return real, None
        if not stat.S_ISCHR(st.st_mode):
            raise SchemaError(path, f"{dev.port} is {file_kind(st.st_mode)}, not a serial port")
        if not is_serial_tty(st.st_rdev):
            raise SchemaError(path,
                f"{dev.port} is a character device {os.major(st.st_rdev)}:"
                f"{os.minor(st.st_rdev)} that is not a tty, not a serial port "
                "(/proc/tty/drivers lists the serial ones)")
        return real, st.st_rdev

    def power(self, value: Any, path: KeyPath, backend: str) -> PortPower:
        if backend == "none":
            raise SchemaError(path,
                'needs a switching backend: [powerup] backend = "uhubctl" (or "sysfs")')
        out = _POWER.check(value, path)
        try:
            return PortPower(out["hub"], out["port"], method=backend, settle_s=out["settle_s"])
        except ConfigError as err:
            raise SchemaError(path, str(err)) from err

    def device(self, i: int, table: Any, powerup: dict) -> DeviceConfig:
        path = ("devices", i)
        if not isinstance(table, dict):
            raise SchemaError(path, f"must be a [[devices]] table, got {table!r}")
        kind_name = S(None, kind_names()).check(table.get("kind"), (*path, "kind"))
        kind = get_kind(kind_name)
        out = Table({"name": _NAME, "kind": Free(), "port": _TEXT,
            "baud": I(kind.baud, choices=STANDARD_BAUDS), "mount": Free(),
            "gap_s": F(powerup["gap_s"], 0, MAX_WAIT_S),
            "timeout_s": F(powerup["timeout_s"], 0.1, MAX_TIMEOUT_S), "power": Free(),
            **dict.fromkeys(kind.option_keys, Free())},
            required=("name", "port", "mount") if kind.mounted else ("name", "port"),
        ).check(table, path)
        if not kind.mounted and "mount" in table:
            raise SchemaError((*path, "mount"),
                f"a {kind.name} has no mount; its geometry is the [{kind.name}] table")
        taken = name_conflict("lidar" if kind.mounted else "encoder", out["name"], [])
        if out["name"] in LIVE_OUTPUTS:
            taken = f"device name {out['name']!r} is reserved: `live` writes a stream of that name"
        if taken:
            raise SchemaError((*path, "name"), taken)
        mount = None
        if kind.mounted:
            m = _MOUNT.check(out["mount"], (*path, "mount"))
            mount = Mount(m["x_m"], m["y_m"], _angle(m, (*path, "mount"), ("yaw_deg", "yaw_rad")))
        what = f"device {out['name']!r}"
        extra = kind.parse_options(self, table, path, what) if kind.parse_options else {}
        if "power" in table:
            extra["power"] = self.power(table["power"], (*path, "power"), powerup["backend"])
        return DeviceConfig(name=out["name"], kind=kind_name,
            port=self.port(out["port"], (*path, "port")), baud=out["baud"], mount=mount,
            gap_s=out["gap_s"], timeout_s=out["timeout_s"], line=self.where.find(*path), **extra)

    def pods(self, out: dict) -> PodGeometry:
        """The pod geometry of the checked ``[pods]`` table."""
        if not out["wheels"]:
            raise SchemaError(("pods", "wheels"), "must list at least one wheel")
        wheels = tuple(PodWheel(w["x_m"], w["y_m"], _angle(w, ("pods", "wheels", k),
            ("angle_deg", "angle_rad"))) for k, w in enumerate(out["wheels"]))
        return PodGeometry(out["wheel_radius_m"], out["counts_per_rev"], wheels, out["board"],
            out["top_speed_m_s"])

    def devices(self, devices_raw: Any, powerup: dict) -> list[DeviceConfig]:
        """The ``[[devices]]`` tables, with the ``[powerup]`` defaults; names and ports
        (also through links and device numbers) unique."""
        if not isinstance(devices_raw, list) or not devices_raw:
            raise SchemaError(("devices",), "no devices: add at least one [[devices]] table")
        devices: list[DeviceConfig] = []
        seen: dict[str, int] = {}
        ports: dict[str | int, str] = {}
        serials: dict[tuple[str, str], str] = {}  # (kind, serial upper-cased) -> name
        for i, table in enumerate(devices_raw):
            dev = self.device(i, table, powerup)
            if dev.name in seen:
                raise SchemaError(("devices", i, "name"),
                    f"duplicate device name {dev.name!r} (first defined at line {seen[dev.name]})")
            if dev.serial:  # the check that catches two units swapped between their ports
                same = serials.setdefault((dev.kind, dev.serial.upper()), dev.name)
                if same != dev.name:
                    raise SchemaError(("devices", i, "serial"),
                        f"serial {dev.serial!r} is already {same!r}'s: each unit reports its "
                        "own, and with two alike a swap of the two would pass unseen")
            real, device_id = self.port_identity(dev, ("devices", i, "port"))
            other = ports.get(real) or (ports.get(device_id) if device_id is not None else None)
            if other is not None:
                alias = "" if real == dev.port else f" (that is {real})"
                raise SchemaError(("devices", i, "port"),
                    f"{dev.port}{alias} is already used by {other!r}")
            seen[dev.name] = self.where.find("devices", i, "name")
            ports[real] = dev.name
            if device_id is not None:
                ports[device_id] = dev.name
            devices.append(dev)
        return devices

    def run(self) -> RobotConfig:
        raw = toml_schema.parse_toml(self.text, self.source, ConfigError)
        try:
            return self.check(raw)
        except SchemaError as exc:
            raise ConfigError(f"{self.source}:{self.where.find(*exc.path)}: {exc}") from None

    def check(self, raw: dict) -> RobotConfig:
        doc = _DOC.check(raw, ())
        powerup = doc["powerup"]
        devices = self.devices(doc["devices"], powerup)
        names = [d.name for d in devices]
        order = names if powerup["order"] is None else powerup["order"]
        if (not isinstance(order, list) or sorted(order) != sorted(names)
                or len(set(order)) != len(order)):
            raise SchemaError(("powerup", "order"), "must list every device exactly "
                f"once; devices are {sorted(names)}, got {order!r}")
        pods = self.pods(doc["pods"]) if "pods" in raw else None
        for dev in devices:
            if dev.kind == "pods" and pods is not None and len(pods.wheels) != dev.n_pods:
                raise SchemaError(("pods", "wheels"), f"lists {len(pods.wheels)} wheels "
                    f"but device {dev.name!r} has n_pods = {dev.n_pods}")
        if doc["robot"]["footprint_m"]:
            toml_schema.check_polygon(doc["robot"]["footprint_m"], ("robot", "footprint_m"))
        footprint = np.asarray(doc["robot"]["footprint_m"], dtype=np.float64).reshape(-1, 2)
        emulation = raw.get("emulation", {})
        name = doc["robot"]["name"]
        return RobotConfig(name=Path(self.source).stem if name is None else name,
            devices=tuple(devices), powerup_order=tuple(order), footprint_m=footprint,
            pods=pods, text=self.text, source=self.source, extra={"emulation": emulation,
                "emulation_lines": {k: self.where.find("emulation", k) for k in emulation}})


def parse_robot_config(text: str, source: str = "robot.toml",
        run_dir: str | os.PathLike[str] | None = None) -> RobotConfig:
    """Validate robot.toml ``text`` (ConfigError ``source:line: ...`` for the first problem
    found); ``run_dir`` is substituted for ``{run_dir}`` in ports (emulated robots)."""
    return _Validator(text, source, None if run_dir is None else os.fspath(run_dir)).run()


def load_robot_config(
    path: str | os.PathLike[str], run_dir: str | os.PathLike[str] | None = None
) -> RobotConfig:
    """Read and validate a robot.toml file (see :func:`parse_robot_config`)."""
    text = toml_schema.read_text(path, ConfigError, "robot configuration")
    return parse_robot_config(text, os.fspath(path), run_dir)
