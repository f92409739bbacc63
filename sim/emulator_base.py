"""What the pty emulators (LD19, A1, pod MCU) share: emulation time (:class:`SimClock`), the
lidar sample fields, the synthetic room, one device served on one pty by one thread
(:class:`PtyEmulator`), truth records, and a scenario's ``[faults.<device>]`` knobs as link
faults and timed faults."""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from sensorbench.errors import SimError
from sensorbench.sim.pty import Faults, PtyPort

_E = TypeVar("_E", bound="PtyEmulator")
_R = TypeVar("_R", bound="Records")


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

    def host_ns(self, t_s: np.ndarray) -> np.ndarray:
        """Host monotonic time (int64 ns) of simulated times ``t_s`` (s)."""
        return self.t0_ns + np.round(np.asarray(t_s, float) / self.speed * 1e9).astype(np.int64)

    def sleep_until(self, sim_t: float, stop: threading.Event | None = None) -> None:
        """Sleep until simulated time ``sim_t`` (s); returns early if ``stop.is_set()``."""
        while (remaining := (sim_t - self.now()) / self.speed) > 0:
            if stop is not None and stop.is_set():
                return
            time.sleep(min(remaining, 0.05))


class LidarSamples(Protocol):
    """Device-native lidar samples: emission times ``t_s`` (s), head angle ``angle_deg_cw``
    (deg, clockwise), ``range_m`` (m; 0 or inf: no return), ``intensity`` (device units)."""

    t_s: np.ndarray
    angle_deg_cw: np.ndarray
    range_m: np.ndarray
    intensity: np.ndarray


def check_sweep(duration_s: float, rate_hz: float, samples_per_s: float) -> None:
    """Raise :class:`SimError` unless a synthetic sweep's duration and rates make sense."""
    if not (duration_s > 0 and rate_hz > 0 and samples_per_s > rate_hz):
        raise SimError("duration_s, rate_hz > 0 and samples_per_s > rate_hz required")


def room_ranges(
    angle_deg_cw: np.ndarray, width: float, depth: float, x: float, y: float
) -> np.ndarray:
    """Noise-free range (m) to the walls (at 0 and ``width``/``depth``, m) of a room from a
    sensor at ``(x, y)`` facing +x, along beam angles ``angle_deg_cw`` (deg, clockwise)."""
    ccw = np.deg2rad(-np.asarray(angle_deg_cw, dtype=np.float64))
    c, s = np.cos(ccw), np.sin(ccw)
    with np.errstate(divide="ignore", invalid="ignore"):
        tx = np.where(c > 0, (width - x) / c, np.where(c < 0, -x / c, np.inf))
        ty = np.where(s > 0, (depth - y) / s, np.where(s < 0, -y / s, np.inf))
    return np.minimum(tx, ty)


class Records:
    """Base of a dataclass of equal-length arrays, one row each; ``DTYPES`` gives each
    field's dtype, in order, and ``WIDE`` the fields that are ``(rows, width)``."""

    DTYPES: ClassVar[tuple[type, ...]] = ()
    WIDE: ClassVar[frozenset[str]] = frozenset()

    def __len__(self) -> int:
        return int(getattr(self, fields(self)[0].name).shape[0])

    def select(self: _R, mask: np.ndarray) -> _R:
        """The rows where ``mask`` is True."""
        cols = {f.name: getattr(self, f.name)[mask] for f in fields(self)}
        return type(self)(**cols)

    @classmethod
    def concat(cls: type[_R], parts: Sequence[_R], width: int = 0) -> _R:
        """``parts`` joined field by field, in order; none gives zero rows (``width``
        columns in the ``WIDE`` fields)."""
        names = [f.name for f in fields(cls)]
        if not parts:
            dts = zip(names, cls.DTYPES, strict=True)
            return cls(*(np.zeros((0, width) if k in cls.WIDE else 0, dt) for k, dt in dts))
        return cls(**{k: np.concatenate([getattr(p, k) for p in parts]) for k in names})


class PtyEmulator(abc.ABC):
    """One emulated device on a pty, served by one thread (:meth:`_run`), started by
    :meth:`_start_thread` at power-on (:meth:`start`, or construction for a device that
    waits for requests); the context manager only guarantees :meth:`stop`."""

    def __init__(self, port: PtyPort) -> None:
        self.port = port
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def _run(self) -> None:
        """The device: serve the port until ``self._stop`` is set."""

    def start(self: _E) -> _E:
        """Power on (a streaming device starts its thread here); returns self."""
        return self

    def _start_thread(self, name: str) -> None:
        """Start the device thread (once; later calls do nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    @property
    def path(self) -> str:
        """The current pty node."""
        return self.port.path

    @property
    def link(self) -> str:
        """The stable name if one was given, else the pty node."""
        return self.port.name

    def stall(self, seconds: float) -> None:
        """Go silent for ``seconds`` host seconds (what the device sends meanwhile is lost)."""
        self.port.stall(seconds)

    def unplug(self) -> None:
        """Pull the cable: the pty disappears; what the device sends meanwhile is lost."""
        self.port.unplug()

    def replug(self) -> None:
        """Plug back in: a new pty behind the same link."""
        self.port.replug()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread (waiting at most ``timeout_s`` s) and remove the pty."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.port.close()

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def link_faults(knobs: Mapping[str, Any]) -> Faults:
    """The byte-level link faults of a scenario's ``[faults.<device>]`` knobs."""
    return Faults(
        corrupt_rate=knobs.get("corrupt_rate", 0.0),
        drop_rate=knobs.get("drop_rate", 0.0),
        slow_start_s=knobs.get("slow_start_s", 0.0),
    )


def fault_schedule(knobs: Mapping[str, Any]) -> list[tuple[float, str, float]]:
    """Timed faults of ``[faults.<device>]`` knobs as ``(t_s, action, arg)`` rows in time
    order (simulated s): ``stall`` (``arg``: its length, s), ``unplug``, ``replug``
    (``replug_after_s`` after each unplug; ``arg`` 0)."""
    schedule = [(t, "stall", knobs.get("stall_s", 0.0)) for t in knobs.get("stall_at_s", [])]
    for t in knobs.get("unplug_at_s", []):
        schedule += [(t, "unplug", 0.0), (t + knobs.get("replug_after_s", 1.0), "replug", 0.0)]
    return sorted(schedule)


def apply_fault(emulator: Any, action: str, arg: float, speed: float) -> None:
    """Apply one :func:`fault_schedule` row to ``emulator`` running at ``speed``× real time."""
    if action == "stall":
        emulator.stall(arg / speed)
    else:
        getattr(emulator, action)()
