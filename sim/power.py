"""A shared USB power bus that browns out when two lidar motors spin up together: a motor
start within ``inrush_s`` (simulated s) of another's browns every unit involved out."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sensorbench.errors import SimError
from sensorbench.sim.emulator_base import SimClock

if TYPE_CHECKING:
    from sensorbench.sim.emulator_a1 import A1Emulator

BROWNOUT_MODES = ("error", "silent")


@dataclass(frozen=True)
class BrownOut:
    """One brown-out: when (simulated s) and which devices it hit."""

    t_s: float
    devices: tuple[str, ...]


class PowerBus:
    """A hub's 5 V rail shared by several emulated lidars: a motor start within
    ``inrush_s`` of another's browns the bus out, into ``mode`` ``"error"`` (health
    ``error_code`` until RESET) or ``"silent"`` (reboot, no answer for ``outage_s``);
    simulated s on ``clock`` (a new real-time clock if None)."""

    def __init__(
        self,
        inrush_s: float = 1.5,
        mode: str = "error",
        error_code: int = 0x8002,
        outage_s: float = 2.0,
        clock: SimClock | None = None,
    ) -> None:
        if mode not in BROWNOUT_MODES:
            raise SimError(f"brown-out mode must be one of {BROWNOUT_MODES}, got {mode!r}")
        if inrush_s < 0 or outage_s < 0:
            raise SimError("inrush_s and outage_s must be >= 0 s")
        if not 0 <= error_code <= 0xFFFF:
            raise SimError(f"error_code must fit 16 bits, got {error_code}")
        self.inrush_s = inrush_s
        self.mode = mode
        self.error_code = error_code
        self.outage_s = outage_s
        self.clock = clock or SimClock(1.0)
        self.brownouts: list[BrownOut] = []
        self.motor_starts: list[tuple[float, str]] = []  # (simulated s, device name)
        self._starts: dict[str, float] = {}
        self._devices: dict[str, A1Emulator] = {}
        self._lock = threading.Lock()

    def attach(self, device: A1Emulator) -> None:
        """Put a device on this bus (names must be unique)."""
        with self._lock:
            if device.name in self._devices:
                raise SimError(f"a device named {device.name!r} is already on this bus")
            self._devices[device.name] = device

    def motor_started(self, device: A1Emulator) -> bool:
        """Record a motor start now; True if it browned the bus out."""
        now = self.clock.now()
        with self._lock:
            hit = [other for name, other in self._devices.items() if name != device.name
                and other.motor_on and now - self._starts.get(name, -math.inf) < self.inrush_s]
            self._starts[device.name] = now
            self.motor_starts.append((now, device.name))
            if not hit:
                return False
            victims = [device, *hit]
            self.brownouts.append(BrownOut(now, tuple(sorted(v.name for v in victims))))
        for victim in victims:
            victim.brown_out(self.mode, self.error_code, self.outage_s)
        return True
