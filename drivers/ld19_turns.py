"""Assemble LD19 packets into complete turns in storage units (rad CCW, m, ns).

``t_ns`` increases strictly (docs/LD19.md, Time).
"""

from __future__ import annotations

import numpy as np

from sensorbench.drivers.device_clock import DeviceClock
from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.ld19_parser import (
    ANGLE_MODULUS_CDEG,
    BAUD,
    MAX_RANGE_MM,
    PACKET_SIZE,
    POINTS_PER_PACKET,
    TIMESTAMP_MODULUS_MS,
    LD19Packets,
    possible_packets,
)
from sensorbench.logs import LidarTurns, TurnFlag

WIRE_S = PACKET_SIZE * 10 / BAUD  # one packet on the line (s)
# sample period used when a packet reports speed or span 0 (s): the device's real rate
NOMINAL_DT_S = 1.0 / get_kind("ld19").sim_defaults["samples_per_s"]
_TWO_PI32 = np.float32(2 * np.pi)
_STAMP_NS = 1_000_000  # one timestamp tick (ns)
WRAP_DROP_CDEG = 18000.0  # a step back of the angle this large (0.01 deg) starts a turn
CATCH_UP_RATE = 0.5
"""After the clock fit moved back, stored host times advance at ``1 - CATCH_UP_RATE``
of the fit's rate until they meet it again (a jump ``J`` is absorbed over ``2 J``)."""
_NO_TURNS = LidarTurns.empty()
for _a in vars(_NO_TURNS).values():
    _a.flags.writeable = False  # shared by every push that completes no turn


def ld19_clock(nominal_slope: float | None = 1.0) -> DeviceClock:
    """A device clock for the LD19 millisecond timestamp (wraps at 30000): windows of 0.5 s
    (about 190 packets each), two minutes of memory, ``nominal_slope`` as
    :class:`DeviceClock`'s."""
    return DeviceClock(modulus=TIMESTAMP_MODULUS_MS, tick_ns=1_000_000, window_s=0.5,
        max_windows=240, nominal_slope=nominal_slope)


def cw_cdeg_to_ccw_rad(cw_cdeg: np.ndarray) -> np.ndarray:
    """Native clockwise angles (0.01 deg) to CCW radians in [0, 2π), float32."""
    rad = np.mod(ANGLE_MODULUS_CDEG - np.asarray(cw_cdeg, dtype=np.float64), ANGLE_MODULUS_CDEG)
    out = (rad * (np.pi / 18000.0)).astype(np.float32)
    out[out >= _TWO_PI32] = 0.0
    return out


def _strictly_increasing(t: np.ndarray) -> np.ndarray:
    """``t`` (int64 ns) raised where needed so that each value exceeds the one before
    by at least 1 ns (a no-op on a strictly increasing sequence)."""
    idx = np.arange(t.size, dtype=np.int64)
    return np.maximum.accumulate(t - idx) + idx


class TurnAssembler:
    """Packets in, complete turns out; all state per instance. ``host_times``: map device
    times to the host through ``clock`` (a fresh :func:`ld19_clock` by default), else store
    device times; a drop of the clockwise angle larger than :data:`WRAP_DROP_CDEG` between
    consecutive points starts a new turn."""

    def __init__(self, clock: DeviceClock | None = None, host_times: bool = True) -> None:
        self.clock = clock if clock is not None else ld19_clock()
        self.host_times = host_times
        self.turns_out = 0
        self.points_out = 0
        self.partial_dropped = 0
        self.packets_rejected = 0
        self.ranges_beyond_limit = 0
        self._last_t: int | None = None  # last stored time of the stream (ns); kept by reset
        self.reset()

    def reset(self, after_reconnect: bool = False) -> None:
        """Drop the turn in progress and restart the clock (the device power-cycled);
        ``after_reconnect`` flags the next complete turn ``AFTER_RECONNECT``."""
        self.clock.reset()
        self._next_dev: int | None = None  # predicted device ns of the next packet's first point
        self._last_dev: int | None = None  # device ns of the last stored-time point
        self._pending: dict[str, np.ndarray] | None = None
        self._seen_wrap = False
        self._next_flags = int(TurnFlag.AFTER_RECONNECT) if after_reconnect else 0

    def push(self, pk: LD19Packets) -> LidarTurns:
        """Add packets (stream order); return the turns they complete (one pass: batches
        that end a turn are the cheap ones, ``LD19Protocol.consume``). The turns and
        their times are those of the same packets in any batching, but for the device
        clock's fit, which maps a batch's times when it is pushed."""
        ok = possible_packets(pk)
        if not ok.all():
            self.packets_rejected += int(np.count_nonzero(~ok))
            pk = pk.select(ok)
        if len(pk) == 0:
            return _NO_TURNS
        span = np.mod(pk.end_cdeg.astype(np.float64) - pk.start_cdeg, ANGLE_MODULUS_CDEG)
        speed = pk.speed_deg_s.astype(np.float64)
        t_pt, dev_pt = self._point_times(pk, span, speed)
        cw = pk.angles_cdeg()
        pflag = self._point_flags(pk, cw, span)
        new = {"cw": cw.ravel(), "range": pk.distance_mm.ravel(), "intensity": pk.intensity.ravel(),
            "t": t_pt.ravel(), "dev": dev_pt.ravel(), "speed": np.repeat(speed, POINTS_PER_PACKET),
            "flag": pflag.ravel()}
        if self._pending is not None:
            new = {key: np.concatenate((self._pending[key], v)) for key, v in new.items()}
        starts = np.flatnonzero(np.diff(new["cw"]) < -WRAP_DROP_CDEG) + 1
        if starts.size == 0:
            self._pending = {key: v.copy() for key, v in new.items()}
            return _NO_TURNS
        cut = int(starts[-1])
        self._pending = {key: v[cut:].copy() for key, v in new.items()}
        bounds = np.concatenate(([0], starts))
        if not self._seen_wrap:
            self._seen_wrap = True
            self.partial_dropped += 1
            bounds = bounds[1:]
        if bounds.size < 2:
            return _NO_TURNS
        lo = int(bounds[0])
        done = {key: v[lo:cut] for key, v in new.items()}
        rel = bounds[:-1] - lo
        count = np.diff(bounds)
        flags = np.bitwise_or.reduceat(done["flag"], rel)
        flags[0] |= self._next_flags
        self._next_flags = 0
        rng = done["range"].astype(np.float32) / np.float32(1000.0)
        rng[done["range"] == 0] = np.inf
        beyond = done["range"] > MAX_RANGE_MM
        rng[beyond] = np.nan
        self.ranges_beyond_limit += int(np.count_nonzero(beyond))
        turns = LidarTurns(t_first_ns=done["t"][rel], device_ns=done["dev"][rel],
            speed_hz=np.add.reduceat(done["speed"], rel) / count / 360.0, count=count,
            flags=flags, angle=cw_cdeg_to_ccw_rad(done["cw"]), range=rng,
            intensity=done["intensity"], t_ns=done["t"])
        self.turns_out += turns.n_turns
        self.points_out += turns.n_points
        return turns

    def _point_times(
        self, pk: LD19Packets, span: np.ndarray, speed: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(k, 12)`` point times (ns: host times, or device times without host times)
        and device times (ns), from each packet's angular span (0.01 deg) and speed (deg/s)."""
        stamp_ns = self.clock.update(pk.host_ns, pk.timestamp_ms)
        with np.errstate(divide="ignore", invalid="ignore"):
            dt = np.where((speed > 0) & (span > 0),
                span / 100.0 / (POINTS_PER_PACKET - 1) / speed, NOMINAL_DT_S)
        dev_ns = self._track(stamp_ns, dt, pk.lost_before)
        offs = np.arange(POINTS_PER_PACKET) * dt[:, None]  # s after the packet's first point
        dev_pt = dev_ns[:, None] + np.rint(offs * 1e9).astype(np.int64)
        if not self.host_times:
            return _strictly_increasing(dev_pt.ravel()).reshape(dev_pt.shape), dev_pt
        slope = self.clock.slope
        lag = np.rint(slope * ((POINTS_PER_PACKET - 1) * dt + WIRE_S) * 1e9).astype(np.int64)
        first = self.clock.to_host(dev_ns) - lag
        t_pt = first[:, None] + np.rint(slope * offs * 1e9).astype(np.int64)
        return self._no_step_back(t_pt.ravel(), dev_pt.ravel(), slope).reshape(t_pt.shape), dev_pt

    def _point_flags(self, pk: LD19Packets, cw: np.ndarray, span: np.ndarray) -> np.ndarray:
        """``(k, 12)`` turn flags carried by the points (CRC errors and packet loss); a loss
        before the first packet may flag the last pending point.

        A gap before a packet is a loss in the turn that packet belongs to, and also in
        the turn before it unless that turn had reached its last step before 360 deg.
        """
        loss = np.where(pk.lost_before > 0, int(TurnFlag.PACKET_LOSS), 0).astype(np.uint16)
        pflag = np.zeros((len(pk), POINTS_PER_PACKET), dtype=np.uint16)
        pflag[:, 0] = loss | np.where(pk.failures_before > 0, int(TurnFlag.CRC_ERRORS), 0)
        last = self._pending["cw"][-1] if self._pending is not None else np.inf
        prev_cw = np.concatenate(([last], cw[:-1, -1]))
        step = span / (POINTS_PER_PACKET - 1)
        cut_short = prev_cw + step < ANGLE_MODULUS_CDEG - step / 2
        prev_loss = np.where(cut_short, loss, 0).astype(np.uint16)
        pflag[:-1, -1] |= prev_loss[1:]
        if prev_loss[0] and self._pending is not None:
            self._pending["flag"][-1] |= prev_loss[0]
        return pflag

    def _track(self, stamp_ns: np.ndarray, dt_s: np.ndarray, lost: np.ndarray) -> np.ndarray:
        """Device ns of each packet's first point: the previous packet's first point plus
        its duration (``12 * dt``, times one more per lost packet), within the
        millisecond its own (floored) stamp allows."""
        period = np.rint(POINTS_PER_PACKET * dt_s * 1e9).astype(np.int64).tolist()
        out = []
        nxt = self._next_dev
        for s, p, n_lost in zip(stamp_ns.tolist(), period, lost.tolist(), strict=True):
            t = s if nxt is None else min(max(nxt + n_lost * p, s), s + _STAMP_NS - 1)
            out.append(t)
            nxt = t + p
        self._next_dev = nxt
        return np.asarray(out, dtype=np.int64)

    def _no_step_back(self, t: np.ndarray, dev: np.ndarray, slope: float) -> np.ndarray:
        """Host times ``t`` (ns) of points at device times ``dev`` (ns), never at or
        before the last stored one: where the fit moved back, run at
        ``1 - CATCH_UP_RATE`` of its rate from the last stored point until meeting it."""
        if self._last_t is not None:
            since = np.maximum(dev - (dev[0] if self._last_dev is None else self._last_dev), 0)
            floor = self._last_t + 1 + np.floor((1 - CATCH_UP_RATE) * slope * since)
            t = np.maximum(t, floor.astype(np.int64))
        t = _strictly_increasing(t)
        self._last_t, self._last_dev = int(t[-1]), int(dev[-1])
        return t
