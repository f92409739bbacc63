"""Per-port USB power (VBUS) switching: ``uhubctl`` or the kernel's sysfs ``disable``
files (docs/A1.md, Power-up).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sensorbench.errors import ConfigError, DriverError

_HUB_RE = re.compile(r"^\d+(-\d+(\.\d+)*)?$")
POWER_METHODS = ("uhubctl", "sysfs")


@dataclass(frozen=True)
class PortPower:
    """Switchable power of downstream USB ``port`` (1-based) of ``hub``, the hub's USB
    device name as in sysfs and uhubctl ``-l`` (``1-1.4``; ``1`` for a root hub), switched by
    ``method``; ``settle_s``: the wait for the tty to appear after switching on (s)."""

    hub: str
    port: int
    method: str = "uhubctl"
    settle_s: float = 3.0

    def __post_init__(self) -> None:
        if not _HUB_RE.match(self.hub):
            raise ConfigError(f"power hub {self.hub!r} is not a USB hub name like 1-1 or 1-1.4")
        if not 1 <= self.port <= 255:
            raise ConfigError(f"power port must be 1..255, got {self.port}")
        if self.method not in POWER_METHODS:
            raise ConfigError(f"power method must be one of {POWER_METHODS}, got {self.method!r}")

    def uhubctl_command(self, on: bool) -> list[str]:
        """The uhubctl argv that switches this port on or off."""
        return ["uhubctl", "-l", self.hub, "-p", str(self.port), "-a", "on" if on else "off"]

    def sysfs_disable_path(self, sysfs_root: str | os.PathLike[str] = "/sys") -> Path:
        """The port's ``disable`` file (write ``0`` to power on, ``1`` to power off)."""
        root_hub = "-" not in self.hub
        device = f"usb{self.hub}" if root_hub else self.hub
        interface = f"{self.hub}-0:1.0" if root_hub else f"{self.hub}:1.0"
        return (Path(sysfs_root) / "bus/usb/devices" / device / interface
            / f"{device}-port{self.port}" / "disable")

    def switch(self, on: bool, runner: Callable[..., Any] = subprocess.run,
            sysfs_root: str | os.PathLike[str] = "/sys") -> None:
        """Switch the port on or off (DriverError: uhubctl missing or failing, or the sysfs
        file not writable)."""
        if self.method == "uhubctl":
            argv = self.uhubctl_command(on)
            try:
                done = runner(argv, capture_output=True, text=True, timeout=10)
            except FileNotFoundError as err:
                raise DriverError("uhubctl is not installed: apt-get install uhubctl") from err
            except subprocess.TimeoutExpired as err:
                raise DriverError(f"{' '.join(argv)} did not finish within 10 s") from err
            if done.returncode != 0:
                raise DriverError(
                    f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}; "
                    "does the hub support per-port power, and are you root?")
            return
        for path in self.sysfs_disable_paths(sysfs_root):
            try:
                path.write_text("0" if on else "1")
            except OSError as err:
                raise DriverError(
                    f"cannot write {path}: {err}; needs Linux >= 6.0, a hub with per-port "
                    "power switching, and root") from err

    def sysfs_disable_paths(self, sysfs_root: str | os.PathLike[str] = "/sys") -> list[Path]:
        """The ``disable`` files that switch this port: its own and, on a USB 3 hub, its
        peer's (the hub's USB 3 half; the kernel links it as the port's ``peer``). A USB
        3 hub is two hubs sharing each port's VBUS: switching one half off leaves the
        power on."""
        own = self.sysfs_disable_path(sysfs_root)
        peer = own.parent / "peer" / "disable"
        return [own, peer] if (own.parent / "peer").exists() else [own]
