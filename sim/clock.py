"""Emulation time: simulated seconds that run ``speed`` times faster than the wall."""

from __future__ import annotations

import threading
import time

from sensorbench.errors import SimError


class SimClock:
    """Maps host monotonic time to simulated time at ``speed`` simulated seconds per host
    second (1.0: real time)."""

    def __init__(self, speed: float = 1.0) -> None:
        if not speed > 0:
            raise SimError(f"speed must be > 0, got {speed}")
        self.speed = float(speed)
        # host monotonic ns of simulated 0: one reading, which does not move with
        # scheduling as ``monotonic_ns() - now() / speed`` does
        self.t0_ns = time.monotonic_ns()

    def now(self) -> float:
        """Simulated seconds since the clock was created (s)."""
        return (time.monotonic_ns() - self.t0_ns) * 1e-9 * self.speed

    def achieved_speed(self, served_s: float) -> float:
        """Simulated seconds served (up to ``served_s``, s) per host second since the
        clock started: ``speed`` when the server kept up, less when it fell behind."""
        host_s = (time.monotonic_ns() - self.t0_ns) * 1e-9
        return min(served_s, self.now()) / host_s if host_s > 0 else self.speed

    def sleep_until(self, sim_t: float, stop: threading.Event | None = None) -> None:
        """Sleep until simulated time ``sim_t`` (s); returns early if ``stop.is_set()``."""
        while (remaining := (sim_t - self.now()) / self.speed) > 0:
            if stop is not None and stop.is_set():
                return
            time.sleep(min(remaining, 0.05))
