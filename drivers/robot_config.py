"""The robot description (``robot.toml``), validated before any device is opened.

A bad file raises :class:`~sensorbench.errors.ConfigError` starting ``FILE:LINE:``.
Every key and its unit: docs/CAPTURE.md.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.drivers import pods_kind
from sensorbench.drivers.device_kind import DeviceKind
from sensorbench.drivers.device_kinds import get_kind, kind_names, option_keys
from sensorbench.drivers.port_power import POWER_METHODS, PortPower
from sensorbench.errors import ConfigError
from sensorbench.logs.schema import name_conflict

STANDARD_BAUDS = (1200, 2400, 4800, 9600, 19200, 38400, 57600, 115200, 230400, 250000,
                  460800, 500000, 576000, 921600, 1000000, 1500000, 2000000, 3000000)  # fmt: skip
"""Line rates (baud) a device may be configured at: the standard ones USB-serial bridges
(CP210x, CH340, FTDI) run exactly. Any other (``baud = 12345``, a typo) would read garbage."""

_COMMON_KEYS = frozenset({"name", "kind", "port", "baud", "mount", "gap_s", "timeout_s", "power"})
POWER_BACKENDS = ("none", *POWER_METHODS)
_TABLE_KEYS = {"robot": {"name", "footprint_m"},
    "powerup": {"order", "gap_s", "timeout_s", "backend"},
    "pods": {"wheel_radius_m", "counts_per_rev", "wheels", "board", "top_speed_m_s"},
    "emulation": {"scenario", "seed"}}
"""Keys each single table accepts (``[[devices]]`` entries: the kind registry's)."""
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


class _Validator:
    def __init__(self, text: str, source: str, run_dir: str | None) -> None:
        text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Windows editors)
        self.text = text
        self.source = source
        self.run_dir = run_dir
        self.where = _Lines(text)

    def fail(self, path: tuple, message: str) -> ConfigError:
        line = self.where.find(*path)
        return ConfigError(f"{self.source}:{line}: {message}")

    def number(self, table: dict, key: str, path: tuple, *, minimum: float | None = None,
            maximum: float | None = None, default: float | None = None) -> float:
        if key not in table:
            if default is None:
                raise self.fail(path, f"missing '{key}'")
            return default
        value = table[key]
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not abs(value) <= sys.float_info.max):  # nan, inf, an int past float
            raise self.fail((*path, key), f"'{key}' must be a finite number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail((*path, key), f"'{key}' must be >= {minimum:g}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail((*path, key), f"'{key}' must be <= {maximum:g}, got {value}")
        return float(value)

    def mount(self, table: Any, path: tuple, what: str) -> Mount:
        if not isinstance(table, dict):
            raise self.fail(path,
                f"{what}: 'mount' must be a table like {{x_m = 0.1, y_m = 0.0, yaw_deg = 180}}")
        unknown = set(table) - {"x_m", "y_m", "yaw_deg", "yaw_rad"}
        missing = [k for k in ("x_m", "y_m") if k not in table]
        yaws = [k for k in ("yaw_deg", "yaw_rad") if k in table]
        if unknown or missing or len(yaws) != 1:
            bad = sorted(unknown) or missing or ["yaw"]
            raise self.fail((*path, bad[0]) if unknown else path,
                f"{what}: mount keys must carry units: x_m, y_m (metres) and exactly one of "
                f"yaw_deg or yaw_rad; got {sorted(table)}")
        x = self.number(table, "x_m", path, minimum=-MAX_MOUNT_M, maximum=MAX_MOUNT_M)
        y = self.number(table, "y_m", path, minimum=-MAX_MOUNT_M, maximum=MAX_MOUNT_M)
        turn = 360.0 if yaws[0] == "yaw_deg" else 2 * math.pi
        yaw = self.number(table, yaws[0], path, minimum=-turn, maximum=turn)
        return Mount(x, y, math.radians(yaw) if yaws[0] == "yaw_deg" else yaw)

    def port(self, value: Any, path: tuple, what: str) -> str:
        if not isinstance(value, str) or not value.strip() or not value.isprintable():
            raise self.fail(path, f"{what}: 'port' must be a non-empty path string without "
                f"control characters, got {value!r}")
        if "{run_dir}" in value:
            if self.run_dir is None:
                raise self.fail(path,
                    f"{what}: port {value!r} uses {{run_dir}}: this "
                    "configuration is for emulated devices; give a run directory")
            value = value.replace("{run_dir}", self.run_dir)
        if "{" in value or "}" in value:
            raise self.fail(path,
                f"{what}: unknown placeholder in port {value!r} (only {{run_dir}} is supported)")
        return value

    def port_identity(self, dev: DeviceConfig, path: tuple) -> tuple[str, int | None]:
        """(the port's real path, its device number if it exists): how the kernel names it
        (docs/CAPTURE.md, robot.toml: ``port``)."""
        real = os.path.realpath(re.sub(r"^/+", "/", dev.port))
        try:
            st = os.stat(real)
        except OSError:
            return real, None
        if not stat.S_ISCHR(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "a regular file"
            raise self.fail(path,
                f"device {dev.name!r}: port {dev.port} is {what}, not a serial port")
        if not is_serial_tty(st.st_rdev):
            raise self.fail(path,
                f"device {dev.name!r}: port {dev.port} is a character device "
                f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)} that is not a tty, not a "
                "serial port (/proc/tty/drivers lists the serial ones)")
        return real, st.st_rdev

    def power(self, value: Any, path: tuple, what: str, backend: str) -> PortPower:
        if backend == "none":
            raise self.fail(path,
                f"{what}: 'power' needs a switching backend: "
                '[powerup] backend = "uhubctl" (or "sysfs")')
        if (not isinstance(value, dict) or set(value) - {"hub", "port", "settle_s"}
                or not isinstance(value.get("hub"), str) or isinstance(value.get("port"), bool)
                or not isinstance(value.get("port"), int)):
            raise self.fail(path,
                f"{what}: 'power' must be a table like {{hub = \"1-1.4\", port = 2}} "
                "(the hub's USB name as uhubctl -l takes it, the port number; optional "
                "settle_s, the wait for the tty after switching on)")
        settle = self.number(value, "settle_s", path, minimum=0.1, maximum=MAX_WAIT_S, default=3.0)
        try:
            return PortPower(value["hub"], value["port"], method=backend, settle_s=settle)
        except ConfigError as err:
            raise self.fail(path, f"{what}: {err}") from err

    def device_kind(self, i: int, table: dict) -> tuple[str, str, DeviceKind]:
        """Device ``i``'s name, how errors name it, and its kind; its keys all known."""
        path = ("devices", i)
        name = table.get("name")
        what = f"device {name!r}" if name else f"device #{i + 1}"
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise self.fail((*path, "name"),
                f"{what}: 'name' must be letters, digits, _ or - starting with a letter")
        if len(name) > MAX_NAME_LEN:
            raise self.fail((*path, "name"),
                f"device {name[:40]!r}...: 'name' must be at most {MAX_NAME_LEN} characters "
                f"(it is the event source in the session), got {len(name)}")
        known = _COMMON_KEYS | option_keys()
        unknown = sorted(set(table) - known)
        if unknown:
            raise self.fail((*path, unknown[0]),
                f"{what}: unknown key '{unknown[0]}' (known: {', '.join(sorted(known))})")
        kind_name = table.get("kind")
        if kind_name not in kind_names():
            raise self.fail((*path, "kind"),
                f"{what}: unknown kind {kind_name!r}; expected one of {', '.join(kind_names())}")
        return name, what, get_kind(kind_name)

    def device(
        self, i: int, table: Any, gap_s: float, timeout_s: float, backend: str = "none"
    ) -> DeviceConfig:
        path = ("devices", i)
        line = self.where.find(*path)
        if not isinstance(table, dict):
            raise self.fail(path, "each [[devices]] entry must be a table")
        name, what, kind = self.device_kind(i, table)
        kind_name = kind.name
        taken = name_conflict("lidar" if kind.mounted else "encoder", name, [])
        if taken:
            raise self.fail((*path, "name"), f"{what}: {taken}")
        if "port" not in table:
            raise self.fail(path,
                f"{what}: missing 'port' (the device's stable path, e.g. /dev/{name} "
                "from `sensorbench udev rules`)")
        port = self.port(table["port"], (*path, "port"), what)
        baud = table.get("baud", kind.baud)
        if isinstance(baud, bool) or not isinstance(baud, int) or baud not in STANDARD_BAUDS:
            raise self.fail((*path, "baud"),
                f"{what}: 'baud' = {baud!r} is not a standard line rate ("
                + ", ".join(str(b) for b in STANDARD_BAUDS if b >= 9600)
                + f"; {kind.name}'s default is {kind.baud})")
        if not kind.mounted:
            mount = None
            if "mount" in table:
                raise self.fail((*path, "mount"),
                    f"{what}: {kind.name} has no mount; its geometry is the [{kind.name}] table")
        else:
            if "mount" not in table:
                raise self.fail(path,
                    f"{what}: missing 'mount' "
                    "(e.g. mount = {x_m = 0.1, y_m = 0.0, yaw_deg = 180})")
            mount = self.mount(table["mount"], (*path, "mount"), what)
        for key in sorted(set(table) - _COMMON_KEYS - kind.option_keys):
            owners = [k for k in kind_names() if key in get_kind(k).option_keys]
            raise self.fail((*path, key), f"{what}: '{key}' only applies to {' and '.join(owners)}")
        extra = kind.parse_options(self, table, path, what) if kind.parse_options else {}
        if "power" in table:
            extra["power"] = self.power(table["power"], (*path, "power"), what, backend)
        return DeviceConfig(name=name, kind=kind_name, port=port, baud=baud, mount=mount,
            gap_s=self.number(table, "gap_s", path, minimum=0, maximum=MAX_WAIT_S, default=gap_s),
            timeout_s=self.number(table, "timeout_s", path, minimum=0.1, maximum=MAX_TIMEOUT_S,
                default=timeout_s), line=line, **extra)

    def pods(self, table: Any) -> PodGeometry:
        path = ("pods",)
        if not isinstance(table, dict):
            raise self.fail(path, "[pods] must be a table")
        radius = self.number(table, "wheel_radius_m", path, minimum=1e-4, maximum=1.0)
        cpr = table.get("counts_per_rev")
        if isinstance(cpr, bool) or not isinstance(cpr, int) or cpr <= 0:
            raise self.fail((*path, "counts_per_rev"),
                "[pods] counts_per_rev must be a positive integer")
        wheels = table.get("wheels")
        if not isinstance(wheels, list) or not wheels:
            raise self.fail((*path, "wheels"),
                "[pods] wheels must be a list of {x_m = ..., y_m = ..., angle_deg = ...}")
        out = []
        for k, w in enumerate(wheels):
            wpath = (*path, "wheels")
            if (not isinstance(w, dict) or set(w) - {"x_m", "y_m", "angle_deg", "angle_rad"}
                    or (("angle_deg" in w) == ("angle_rad" in w))):
                raise self.fail(wpath,
                    f"[pods] wheel {k}: keys must carry units: x_m, y_m and "
                    "exactly one of angle_deg or angle_rad")
            angle_key = "angle_deg" if "angle_deg" in w else "angle_rad"
            angle = self.number(w, angle_key, wpath)
            out.append(
                PodWheel(self.number(w, "x_m", wpath, minimum=-MAX_MOUNT_M, maximum=MAX_MOUNT_M),
                    self.number(w, "y_m", wpath, minimum=-MAX_MOUNT_M, maximum=MAX_MOUNT_M),
                    math.radians(angle) if angle_key == "angle_deg" else angle))
        board = table.get("board", "other")
        if board not in pods_kind.BOARDS:
            raise self.fail((*path, "board"),
                f"[pods] board must be one of {', '.join(map(repr, pods_kind.BOARDS))}, "
                f"got {board!r}")
        top = (self.number(table, "top_speed_m_s", path, minimum=1e-3, maximum=100.0)
            if "top_speed_m_s" in table else None)
        return PodGeometry(radius, cpr, tuple(out), board, top)

    def footprint(self, robot: dict) -> np.ndarray:
        path = ("robot", "footprint_m")
        pts = robot.get("footprint_m")
        if pts is None:
            return np.zeros((0, 2))
        try:
            arr = np.asarray(pts, dtype=np.float64)
        except (TypeError, ValueError):
            arr = np.zeros((0,))
        if (arr.ndim != 2 or arr.shape[1] != 2 or arr.shape[0] < 3
                or not (np.abs(arr) <= MAX_MOUNT_M).all()):
            raise self.fail(path,
                f"footprint_m must be a list of at least 3 [x, y] points within "
                f"{MAX_MOUNT_M:g} m of the body origin")
        return arr

    def emulation(self, table: dict) -> None:
        """``[emulation]``: ``scenario`` a name or path (checked by the emulator, which knows
        the scenarios), ``seed`` an int64 seed."""
        scenario = table.get("scenario", "square")
        if not isinstance(scenario, str) or not scenario.strip():
            raise self.fail(("emulation", "scenario"),
                f"[emulation] scenario must be a scenario name or .toml path, got {scenario!r}")
        seed = table.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise self.fail(("emulation", "seed"),
                f"[emulation] seed must be an integer in [0, 2**63 - 1], got {seed!r}")

    def check_keys(self, doc: dict) -> None:
        """Refuse unknown tables and unknown keys in every single table."""
        known = {"devices", *_TABLE_KEYS}
        for key in doc:
            if key not in known:
                names = ", ".join(sorted(known))
                raise self.fail((key,), f"unknown table '{key}' (known: {names})")
        for table, keys in _TABLE_KEYS.items():
            if table not in doc:
                continue
            value = doc[table]
            if not isinstance(value, dict):
                raise self.fail((table,), f"[{table}] must be a table")
            unknown = sorted(set(value) - keys)
            if unknown:
                raise self.fail((table, unknown[0]),
                    f"[{table}]: unknown key '{unknown[0]}' (known: {', '.join(sorted(keys))})")

    def devices(self, devices_raw: Any, powerup: dict) -> list[DeviceConfig]:
        """The ``[[devices]]`` tables, with the ``[powerup]`` defaults; names and ports
        (also through links and device numbers) unique."""
        gap_s = self.number(powerup, "gap_s", ("powerup",), minimum=0, maximum=MAX_WAIT_S,
            default=3.0)
        timeout_s = self.number(powerup, "timeout_s", ("powerup",), minimum=0.1,
            maximum=MAX_TIMEOUT_S, default=10.0)
        backend = powerup.get("backend", "none")
        if backend not in POWER_BACKENDS:
            raise self.fail(("powerup", "backend"),
                f"powerup.backend must be one of {', '.join(POWER_BACKENDS)}, got {backend!r}")
        if not isinstance(devices_raw, list) or not devices_raw:
            raise self.fail(("devices",), "no devices: add at least one [[devices]] table")
        devices: list[DeviceConfig] = []
        seen: dict[str, int] = {}
        ports: dict[str | int, str] = {}
        for i, table in enumerate(devices_raw):
            dev = self.device(i, table, gap_s, timeout_s, backend)
            if dev.name in seen:
                raise self.fail(("devices", i, "name"),
                    f"duplicate device name {dev.name!r} (first defined at line {seen[dev.name]})")
            real, device_id = self.port_identity(dev, ("devices", i, "port"))
            other = ports.get(real) or (ports.get(device_id) if device_id is not None else None)
            if other is not None:
                alias = "" if real == dev.port else f" (that is {real})"
                raise self.fail(("devices", i, "port"),
                    f"device {dev.name!r}: port {dev.port}{alias} is already used by {other!r}")
            seen[dev.name] = self.where.find("devices", i, "name")
            ports[real] = dev.name
            if device_id is not None:
                ports[device_id] = dev.name
            devices.append(dev)
        return devices

    def run(self) -> RobotConfig:
        try:
            doc = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"line (\d+)", str(exc))
            line = m.group(1) if m else 0
            raise ConfigError(f"{self.source}:{line}: invalid TOML: {exc}") from exc
        self.check_keys(doc)
        robot = doc.get("robot", {})
        powerup = doc.get("powerup", {})
        if not isinstance(robot, dict) or not isinstance(powerup, dict):
            raise self.fail(("robot",), "[robot] and [powerup] must be tables")
        devices = self.devices(doc.get("devices"), powerup)
        names = [d.name for d in devices]
        order = powerup.get("order", names)
        if (not isinstance(order, list) or sorted(order) != sorted(names)
                or len(set(order)) != len(order)):
            raise self.fail(("powerup", "order"),
                "powerup.order must list every device exactly "
                f"once; devices are {sorted(names)}, got {order!r}")
        pods = self.pods(doc["pods"]) if "pods" in doc else None
        for dev in devices:
            if dev.kind == "pods" and pods is not None and len(pods.wheels) != dev.n_pods:
                raise self.fail(("pods", "wheels"),
                    f"[pods] lists {len(pods.wheels)} wheels "
                    f"but device {dev.name!r} has n_pods = {dev.n_pods}")
        name = robot.get("name", Path(self.source).stem)
        if not isinstance(name, str) or not name.isprintable():
            raise self.fail(("robot", "name"), "robot.name must be a string without control "
                f"characters, got {name!r}")
        emulation = doc.get("emulation", {})
        self.emulation(emulation)
        return RobotConfig(name=name, devices=tuple(devices), powerup_order=tuple(order),
            footprint_m=self.footprint(robot), pods=pods, text=self.text, source=self.source,
            extra={"emulation": emulation,
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
    from sensorbench.logs.atomic_output import regular_input

    try:
        text = regular_input(path, ConfigError).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the robot configuration: {exc}") from exc
    return parse_robot_config(text, os.fspath(path), run_dir)
