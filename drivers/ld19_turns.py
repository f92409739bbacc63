"""Assemble LD19 packets into complete turns in storage units (rad CCW, m, ns).

A turn ends where the native clockwise angle wraps (drops by more than 180°, e.g.
a point under 20° after one over 340°). The first turn after construction or a
:meth:`TurnAssembler.reset` is partial (the reader opened mid-turn) and dropped.

Conversions, done once here:

- angle: native clockwise 0.01° → radians counter-clockwise, 0 = sensor forward,
  ``(2π - cw) mod 2π`` in ``[0, 2π)``;
- range: mm → m, ``0`` (no return) → ``inf``;
- time: each packet's timestamp (ms, wraps at 30000) is unwrapped by a
  :class:`~sensorbench.drivers.device_clock.DeviceClock`; the point ``i`` of a packet
  was measured ``i * dt`` after the packet's timestamp, ``dt = step / speed``. Host
  times come from the clock's fit of the lower envelope of host receive times, minus
  the known part of the delay: the rest of the packet (``11 * dt``) and its time on
  the wire (47 bytes × 10 bits / 230400 baud). With ``host_times=False`` (a bare byte
  capture without receive times) ``t_ns`` is the unwrapped device time.
"""

from __future__ import annotations

import numpy as np

from sensorbench.drivers.device_clock import DeviceClock
from sensorbench.drivers.ld19_parser import (
    ANGLE_MODULUS_CDEG,
    BAUD,
    PACKET_SIZE,
    POINTS_PER_PACKET,
    TIMESTAMP_MODULUS_MS,
    LD19Packets,
)
from sensorbench.logs import LidarTurns, TurnFlag

WIRE_S = PACKET_SIZE * 10 / BAUD  # one packet on the line (s)
NOMINAL_DT_S = 1.0 / 4500.0  # sample period used when a packet reports speed 0 (s)
_TWO_PI32 = np.float32(2 * np.pi)


def ld19_clock(nominal_slope: float | None = 1.0) -> DeviceClock:
    """A device clock for the LD19 millisecond timestamp (wraps at 30000).

    Envelope windows of 0.5 s (about 190 packets each), two minutes of memory.

    Args:
        nominal_slope: host s per device s until the fit exists: 1.0 for hardware,
            1/N for an N× emulator, None if unknown (see :class:`DeviceClock`).
    """
    return DeviceClock(
        modulus=TIMESTAMP_MODULUS_MS,
        tick_ns=1_000_000,
        window_s=0.5,
        max_windows=240,
        nominal_slope=nominal_slope,
    )


def cw_cdeg_to_ccw_rad(cw_cdeg: np.ndarray) -> np.ndarray:
    """Native clockwise angles (0.01 deg) to CCW radians in [0, 2π), float32."""
    rad = np.mod(ANGLE_MODULUS_CDEG - np.asarray(cw_cdeg, dtype=np.float64), ANGLE_MODULUS_CDEG)
    out = (rad * (np.pi / 18000.0)).astype(np.float32)
    out[out >= _TWO_PI32] = 0.0
    return out


class TurnAssembler:
    """Packets in, complete turns out; all state per instance.

    Args:
        clock: device clock to unwrap timestamps and map them to the host (a fresh
            LD19 clock by default).
        host_times: map device times to the host clock (True) or store device times.
        wrap_drop_cdeg: a drop of the clockwise angle larger than this (0.01 deg)
            between consecutive points starts a new turn.
    """

    def __init__(
        self,
        clock: DeviceClock | None = None,
        host_times: bool = True,
        wrap_drop_cdeg: float = 18000.0,
    ) -> None:
        self.clock = clock if clock is not None else ld19_clock()
        self.host_times = host_times
        self.wrap_drop_cdeg = float(wrap_drop_cdeg)
        self.turns_out = 0
        self.partial_dropped = 0
        self.reset()

    def reset(self, after_reconnect: bool = False) -> None:
        """Drop the turn in progress and restart the clock (the device power-cycled).

        Args:
            after_reconnect: flag the next complete turn ``AFTER_RECONNECT``.
        """
        self.clock.reset()
        self._pending: dict[str, np.ndarray] | None = None
        self._seen_wrap = False
        self._next_flags = int(TurnFlag.AFTER_RECONNECT) if after_reconnect else 0

    @property
    def pending_points(self) -> int:
        """Points of the turn in progress."""
        return 0 if self._pending is None else int(self._pending["cw"].size)

    def push(self, pk: LD19Packets) -> LidarTurns:
        """Add packets (stream order); return the turns they complete."""
        k = len(pk)
        if k == 0:
            return LidarTurns.empty()
        dev_ns = self.clock.update(pk.host_ns, pk.timestamp_ms)
        span = np.mod(pk.end_cdeg.astype(np.float64) - pk.start_cdeg, ANGLE_MODULUS_CDEG)
        speed = pk.speed_deg_s.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = np.where(
                (speed > 0) & (span > 0),
                span / 100.0 / (POINTS_PER_PACKET - 1) / speed,
                NOMINAL_DT_S,
            )
        offs = np.arange(POINTS_PER_PACKET) * dt[:, None]  # s after the packet stamp
        dev_pt = dev_ns[:, None] + np.rint(offs * 1e9).astype(np.int64)
        if self.host_times:
            slope = self.clock.estimate().slope
            lag = np.rint(slope * ((POINTS_PER_PACKET - 1) * dt + WIRE_S) * 1e9).astype(np.int64)
            first = self.clock.to_host(dev_ns) - lag
            t_pt = first[:, None] + np.rint(slope * offs * 1e9).astype(np.int64)
        else:
            t_pt = dev_pt
        # A gap before a packet is a loss in the turn that packet belongs to, and also in
        # the turn before it unless that turn had reached its last step before 360 deg.
        cw = pk.angles_cdeg()
        loss = np.where(pk.lost_before > 0, int(TurnFlag.PACKET_LOSS), 0).astype(np.uint16)
        pflag = np.zeros((k, POINTS_PER_PACKET), dtype=np.uint16)
        pflag[:, 0] = loss | np.where(pk.failures_before > 0, int(TurnFlag.CRC_ERRORS), 0)
        last = self._pending["cw"][-1] if self._pending is not None else np.inf
        prev_cw = np.concatenate(([last], cw[:-1, -1]))
        step = span / (POINTS_PER_PACKET - 1)
        cut_short = prev_cw + step < ANGLE_MODULUS_CDEG - step / 2
        prev_loss = np.where(cut_short, loss, 0).astype(np.uint16)
        pflag[:-1, -1] |= prev_loss[1:]
        if prev_loss[0] and self._pending is not None:
            self._pending["flag"][-1] |= prev_loss[0]
        new = {
            "cw": cw.ravel(),
            "range": pk.distance_mm.ravel(),
            "intensity": pk.intensity.ravel(),
            "t": t_pt.ravel(),
            "dev": dev_pt.ravel(),
            "speed": np.repeat(speed, POINTS_PER_PACKET),
            "flag": pflag.ravel(),
        }
        if self._pending is not None:
            new = {key: np.concatenate((self._pending[key], v)) for key, v in new.items()}
        starts = np.flatnonzero(np.diff(new["cw"]) < -self.wrap_drop_cdeg) + 1
        if starts.size == 0:
            self._pending = {key: v.copy() for key, v in new.items()}
            return LidarTurns.empty()
        cut = int(starts[-1])
        self._pending = {key: v[cut:].copy() for key, v in new.items()}
        bounds = np.concatenate(([0], starts))
        if not self._seen_wrap:
            self._seen_wrap = True
            self.partial_dropped += 1
            bounds = bounds[1:]
        if bounds.size < 2:
            return LidarTurns.empty()
        lo = int(bounds[0])
        done = {key: v[lo:cut] for key, v in new.items()}
        rel = bounds[:-1] - lo
        count = np.diff(bounds)
        flags = np.bitwise_or.reduceat(done["flag"], rel)
        flags[0] |= self._next_flags
        self._next_flags = 0
        rng = done["range"].astype(np.float32) / np.float32(1000.0)
        rng[done["range"] == 0] = np.inf
        turns = LidarTurns(
            t_first_ns=done["t"][rel],
            device_ns=done["dev"][rel],
            speed_hz=np.add.reduceat(done["speed"], rel) / count / 360.0,
            count=count,
            flags=flags,
            angle=cw_cdeg_to_ccw_rad(done["cw"]),
            range=rng,
            intensity=done["intensity"],
            t_ns=done["t"],
        )
        self.turns_out += turns.n_turns
        return turns
