"""An LDROBOT LD19 on a pseudo-terminal: 47-byte packets, CRC-8, the 30000 ms wrap; a
packet leaves when its last byte would have left the UART (docs/LD19.md, Emulator)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.ld19_parser import (
    ANGLE_MODULUS_CDEG,
    MAX_SPEED_DEG_S,
    PACKET_DTYPE,
    PACKET_SIZE,
    POINTS_PER_PACKET,
    TIMESTAMP_MODULUS_MS,
    crc8_rows,
)
from sensorbench.errors import SimError
from sensorbench.sim.emulator_base import (
    LidarSamples,
    PtyEmulator,
    Records,
    SimClock,
    check_sweep,
    room_ranges,
)
from sensorbench.sim.pty import Faults, PtyPort

BAUD = 230400
WIRE_S = PACKET_SIZE * 10 / BAUD  # time one packet occupies the line (s)
PAYLOAD_HEADER_MM = 0x2C54  # little-endian bytes 54 2C
IMPOSSIBLE_FIELDS = {1: "timestamp", 2: "speed", 3: "angle", 4: "span"}  # truth codes
_MAX_BURST_S = 0.25  # simulated seconds emitted at most per pump (after a host stall)
_MIN_TICK_S = 0.008  # shortest host sleep between pumps: sends go in bursts of ~3 packets
_MAX_SLEEP_S = 0.05  # longest host sleep between pumps (stop latency)


class LD19SampleSource(LidarSamples, Protocol):
    """Device-native LD19 samples plus the speed the head reports, ``speed_deg_s`` (°/s)."""

    speed_deg_s: np.ndarray


REAL_SAMPLES_PER_S = get_kind("ld19").sim_defaults["samples_per_s"]
"""Samples per second of the real LD06 captures (packet span over reported speed;
their stamps say 4547): 454-455 points per 10 Hz turn (the datasheet's 4500 gives 450)."""


@dataclass(frozen=True)
class LD19Realism:
    """How a real LD19/LD06's stream departs from an ideal sweep (docs/LD19.md, "A real
    capture"): ranges rounded to ``range_step_m`` (m; 0: not), a fraction of no-returns
    with intensity 150-255, the head speed an AR(1) of σ ``speed_sd_deg_s`` (°/s) new each
    turn with 1/e correlation after ``speed_corr_turns``, return intensity ``at_0m +
    per_m × range`` ± ``intensity_sd``, and a fraction ``p_dim`` of returns at 100-208.
    """

    range_step_m: float = 0.001
    p_no_return_intensity: float = 0.05
    speed_sd_deg_s: float = 6.0
    speed_corr_turns: float = 1.0
    intensity_at_0m: float = 238.0
    intensity_per_m: float = -4.0
    intensity_sd: float = 4.0
    p_dim: float = 0.05


@dataclass
class SyntheticLD19Samples:
    """LD19 samples of a rectangular room, for emulation without a scenario: the sensor at
    ``(x, y)`` in a ``width`` × ``depth`` m room, ranges with Gaussian noise ``sigma_m``
    (m), a fraction ``p_no_return`` of beams returning 0, the rest :class:`LD19Realism`.
    """

    t_s: np.ndarray
    angle_deg_cw: np.ndarray
    range_m: np.ndarray
    intensity: np.ndarray
    speed_deg_s: np.ndarray

    @classmethod
    def generate(
        cls, duration_s: float = 10.0, rate_hz: float = 10.0,
        samples_per_s: float = REAL_SAMPLES_PER_S, width: float = 6.0, depth: float = 8.0,
        x: float = 2.5, y: float = 3.0, sigma_m: float = 0.005, p_no_return: float = 0.01,
        seed: int = 0, realism: LD19Realism | None = None,
    ) -> SyntheticLD19Samples:  # fmt: skip
        """Samples for ``duration_s`` s (rounded down to whole packets)."""
        rl = LD19Realism() if realism is None else realism
        check_sweep(duration_s, rate_hz, samples_per_s)
        rng = np.random.default_rng(seed)
        n = int(duration_s * samples_per_s) // POINTS_PER_PACKET * POINTS_PER_PACKET
        if n == 0:
            raise SimError(f"{duration_s} s is shorter than one LD19 packet")
        t = np.arange(n) / samples_per_s
        k = int(duration_s * rate_hz * 1.1) + 3  # turns, with room for slow ones
        rho = float(np.exp(-1.0 / rl.speed_corr_turns)) if rl.speed_corr_turns > 0 else 0.0
        wander = np.empty(k)
        wander[0] = rng.normal(0.0, rl.speed_sd_deg_s)
        shocks = rng.normal(0.0, rl.speed_sd_deg_s * np.sqrt(1.0 - rho**2), k)
        for i in range(1, k):
            wander[i] = rho * wander[i - 1] + shocks[i]
        # the speed changes once per turn, at a packet boundary
        n_pk = n // POINTS_PER_PACKET
        pk_turn = np.floor(np.arange(n_pk) * POINTS_PER_PACKET * rate_hz / samples_per_s)
        speed_pk = rate_hz * 360.0 + wander[pk_turn.astype(np.int64)]
        dt_pk = POINTS_PER_PACKET / samples_per_s
        start_pk = np.concatenate(([0.0], np.cumsum(speed_pk * dt_pk)[:-1]))
        within = np.arange(POINTS_PER_PACKET) / samples_per_s
        angle_cw = np.mod(start_pk[:, None] + speed_pk[:, None] * within[None, :], 360.0).ravel()
        speed = np.repeat(speed_pk, POINTS_PER_PACKET)
        r = room_ranges(angle_cw, width, depth, x, y) + rng.normal(0.0, sigma_m, n)
        if rl.range_step_m > 0:
            r = np.round(r / rl.range_step_m) * rl.range_step_m
        lost = rng.random(n) < p_no_return
        r[lost] = 0.0
        level = rl.intensity_at_0m + rl.intensity_per_m * r + rng.normal(0.0, rl.intensity_sd, n)
        dim = rng.random(n) < rl.p_dim
        level[dim] = rng.uniform(100.0, 208.0, int(dim.sum()))
        inten = np.clip(np.round(level), 0, 255).astype(np.uint8)
        lit = rng.random(n) < rl.p_no_return_intensity
        inten[lost] = np.where(lit[lost], rng.integers(150, 256, n)[lost], 0).astype(np.uint8)
        return cls(t, angle_cw, r, inten, speed)


@dataclass
class LD19Truth(Records):
    """Every packet the emulator encoded, in order (``k`` packets): its first sample's
    emission time ``t_s`` and the time it was put on the line ``sent_t_s`` (simulated s),
    ``host_ns`` (``time.monotonic_ns()``) of its chunk, the encoded ``speed``, ``start``,
    ``end``, ``timestamp`` (°/s, 0.01 °, 0.01 °, ms) and ``(k, 12)`` ``distance_mm``,
    ``intensity`` with the points' times ``point_t_s`` (s), its first byte's ``offset`` in
    the link's offered stream (-1 and not ``offered`` if never offered), the replugs
    before it (``power_cycle``), and ``impossible``: 0 or its :data:`IMPOSSIBLE_FIELDS`
    code."""

    t_s: np.ndarray
    sent_t_s: np.ndarray
    host_ns: np.ndarray
    speed: np.ndarray
    start: np.ndarray
    end: np.ndarray
    timestamp: np.ndarray
    distance_mm: np.ndarray
    intensity: np.ndarray
    offset: np.ndarray
    offered: np.ndarray
    power_cycle: np.ndarray
    point_t_s: np.ndarray
    impossible: np.ndarray
    DTYPES = (float, float, np.int64, *[np.uint16] * 5, np.uint8, np.int64, bool, np.int64,
              float, np.uint8)  # fmt: skip
    WIDE = frozenset({"distance_mm", "intensity", "point_t_s"})


def encode_packets(
    speed: np.ndarray, start: np.ndarray, end: np.ndarray, distance_mm: np.ndarray,
    intensity: np.ndarray, timestamp: np.ndarray,
) -> bytes:  # fmt: skip
    """The exact bytes of ``k`` packets, CRC included: ``speed`` (°/s), ``start``, ``end``
    (0.01 ° clockwise), ``(k, 12)`` ``distance_mm`` (0: no return) and ``intensity``, and
    device ``timestamp`` (ms)."""
    speed = np.atleast_1d(np.asarray(speed))
    k = speed.size
    rec = np.zeros(k, dtype=PACKET_DTYPE)
    rec["header"], rec["ver_len"], rec["speed"] = 0x54, 0x2C, speed
    rec["start"], rec["end"] = np.atleast_1d(start), np.atleast_1d(end)
    rec["points"]["distance"] = np.asarray(distance_mm).reshape(k, POINTS_PER_PACKET)
    rec["points"]["intensity"] = np.asarray(intensity).reshape(k, POINTS_PER_PACKET)
    rec["timestamp"] = np.atleast_1d(timestamp)
    raw = rec.view(np.uint8).reshape(k, PACKET_SIZE)
    raw[:, -1] = crc8_rows(raw[:, :-1])
    return raw.tobytes()


def _make_impossible(
    code: np.ndarray, u: np.ndarray, speed: np.ndarray, start: np.ndarray, end: np.ndarray,
    ts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Copies of the fields with the field ``code`` names made impossible, at fraction
    ``u`` of its impossible range: timestamp in [30000, 65535], speed in
    [MAX_SPEED_DEG_S + 1, 65535] deg/s, start angle in [36000, 65535] (0.01 deg), or
    the end angle 36.01 to 359.99 deg after the start."""
    speed, start, end, ts = speed.copy(), start.copy(), end.copy(), ts.copy()

    def pick(lo: int, hi: int, sel: np.ndarray) -> np.ndarray:
        return (lo + np.floor(u[sel] * (hi - lo + 1))).astype(np.int64).clip(lo, hi)

    sel = code == 1
    ts[sel] = pick(TIMESTAMP_MODULUS_MS, 65535, sel)
    sel = code == 2
    speed[sel] = pick(MAX_SPEED_DEG_S + 1, 65535, sel)
    sel = code == 3
    start[sel] = pick(ANGLE_MODULUS_CDEG, 65535, sel)
    sel = code == 4
    # a span the SDK rejects at any possible speed (<= MAX_SPEED_DEG_S: 37.4 deg)
    end[sel] = (start[sel] + pick(4000, ANGLE_MODULUS_CDEG - 1, sel)) % 36000
    return speed, start, end, ts


@dataclass(frozen=True)
class LD19Quirks:
    """Protocol oddities the emulator injects: per packet, the probability that one
    distance is 0x2C54 mm (``header_in_payload_rate``) or one field impossible with a good
    CRC (``impossible_rate``); ``timestamp_start_ms``, the device time (ms) at power-on."""

    header_in_payload_rate: float = 0.0
    impossible_rate: float = 0.0
    timestamp_start_ms: int = 0

    def __post_init__(self) -> None:
        for name in ("header_in_payload_rate", "impossible_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise SimError(f"{name} must be in [0, 1]")
        if not 0 <= self.timestamp_start_ms < TIMESTAMP_MODULUS_MS:
            raise SimError("timestamp_start_ms must be in [0, 30000)")


class LD19Emulator(PtyEmulator):
    """One emulated LD19 streaming on a pty, a thread paced by a :class:`SimClock` at
    ``speed`` (simulated s per host s): ``samples`` (a multiple of 12, time-ordered) looped
    (``loop``) or once, the first packet ``startup_s`` (simulated s) after power-on, with
    ``quirks``; ``record_truth`` keeps every packet for :meth:`truth` (~100 bytes each)."""

    def __init__(
        self,
        samples: LD19SampleSource | None = None,
        link: str | None = None,
        speed: float = 1.0,
        startup_s: float = 3.0,
        faults: Faults | None = None,
        quirks: LD19Quirks = LD19Quirks(),
        loop: bool = True,
        seed: int = 0,
        autostart: bool = True,
        record_truth: bool = True,
    ) -> None:
        src = samples if samples is not None else SyntheticLD19Samples.generate(seed=seed)
        t = np.asarray(src.t_s, dtype=np.float64)
        n = t.size
        if n < POINTS_PER_PACKET or n % POINTS_PER_PACKET or np.any(np.diff(t) < 0):
            raise SimError(f"LD19 samples: need a positive multiple of 12 in time order, got {n}")
        if startup_s < 0:
            raise SimError("startup_s must be >= 0")
        k = n // POINTS_PER_PACKET
        shape = (k, POINTS_PER_PACKET)
        ang = np.asarray(src.angle_deg_cw, dtype=np.float64).reshape(shape)
        rng_m = np.asarray(src.range_m, dtype=np.float64).reshape(shape)
        self._t_points = t.reshape(shape)
        self._t_first = self._t_points[:, 0]
        self._t_send = t.reshape(shape)[:, -1] + WIRE_S
        self._speed = np.clip(
            np.round(np.asarray(src.speed_deg_s, dtype=np.float64).reshape(shape)[:, 0]), 0, 65535
        ).astype(np.uint16)
        self._start = (np.round(ang[:, 0] * 100).astype(np.int64) % 36000).astype(np.uint16)
        self._end = (np.round(ang[:, -1] * 100).astype(np.int64) % 36000).astype(np.uint16)
        metres = np.nan_to_num(rng_m, posinf=0.0)
        self._dist = np.clip(np.round(metres * 1000), 0, 65535).astype(np.uint16)
        self._inten = np.clip(np.asarray(src.intensity).reshape(shape), 0, 255).astype(np.uint8)
        self._period = float(t[-1] - t[0] + np.median(np.diff(t)))  # n >= 12: one loop (s)
        self.n_packets = k  # packets in one pass over the samples

        self.speed = float(speed)
        self.clock = SimClock(speed)
        self.startup_s = float(startup_s)
        self.quirks = quirks
        self.loop = loop
        self.record_truth = record_truth
        self.packets_sent = 0
        self.host_bytes_ignored = 0
        super().__init__(PtyPort(link=link, baud=BAUD, faults=faults, seed=seed))
        # payload headers and impossible fields are drawn once per packet of the pass,
        # so they do not depend on how sends are batched
        rng = np.random.default_rng([seed, 0x1D19])
        self._payload_hit = rng.random(k) < quirks.header_in_payload_rate
        self._payload_pt = rng.integers(0, POINTS_PER_PACKET, k)
        bad = np.random.default_rng([seed, 0xBAD])
        hit = bad.random(k) < quirks.impossible_rate
        self._impossible = np.where(hit, bad.integers(1, 5, k), 0).astype(np.uint8)
        self._impossible_u = bad.random(k)  # where in its impossible range the value lies
        self._lock = threading.RLock()
        self._cursor = 0  # index of the next packet (counting loops: i = loop * k + j)
        self._power_on_s = 0.0
        self._power_cycle = 0
        self._truth: list[LD19Truth] = []
        self.finished = threading.Event()
        if autostart:
            self.start()

    def start(self) -> LD19Emulator:
        """Power on and start streaming (after ``startup_s``)."""
        if self._thread is None:
            with self._lock:
                self.clock = SimClock(self.speed)
                self._power_on_s = 0.0
                self._cursor = self._first_packet_after(self.startup_s)
            self._start_thread("ld19-emulator")
        return self

    @property
    def achieved_speed(self) -> float:
        """Simulated seconds served per host second since power-on (``speed`` if it kept up)."""
        with self._lock:
            return self.clock.achieved_speed(float(self._send_time(self._cursor)))

    def unplug(self) -> None:
        """Pull the cable: the pty disappears and the unit loses power."""
        with self._lock:
            super().unplug()

    def replug(self) -> None:
        """Plug back in: a new pty behind the same link; streams again after ``startup_s``."""
        with self._lock:
            super().replug()
            self._power_cycle += 1
            self._power_on_s = self.clock.now()
            self._cursor = max(
                self._cursor, self._first_packet_after(self._power_on_s + self.startup_s)
            )

    def truth(self) -> LD19Truth:
        """Every packet encoded so far (a snapshot)."""
        with self._lock:
            return LD19Truth.concat(list(self._truth), POINTS_PER_PACKET)

    def _send_time(self, i: np.ndarray | int) -> np.ndarray:
        """Simulated send time of packet ``i`` (counting loops)."""
        i = np.asarray(i, dtype=np.int64)
        k = self.n_packets
        return self._t_send[i % k] + (i // k) * self._period - self._t_first[0]

    def _first_packet_after(self, t_s: float) -> int:
        """Index of the first packet whose first sample is at or after ``t_s``."""
        loop = int(np.floor(t_s / self._period))
        rel = t_s - loop * self._period + self._t_first[0]
        return loop * self.n_packets + int(np.searchsorted(self._t_first, rel, side="left"))

    def _run(self) -> None:
        while not self._stop.is_set():
            now = self.clock.now()
            with self._lock:
                # no RX pin: whatever the host writes goes nowhere (drained, never answered)
                self.host_bytes_ignored += len(self.port.recv(0.0))
                self._pump(now)
                if not self.loop and self._cursor >= self.n_packets:
                    self.finished.set()
                    return
                nxt = float(self._send_time(self._cursor))
            wait = min(max((nxt - self.clock.now()) / self.speed, _MIN_TICK_S), _MAX_SLEEP_S)
            self._stop.wait(wait)

    def _send(self, data: bytes, k: int) -> np.ndarray:
        """Send ``k`` packets; return each one's offset in the offered stream (-1: not offered).

        With link faults on, packets go one ``send`` each, so the fault pattern
        depends only on the seed and the packet sequence, not on host timing.
        """
        stats = self.port.stats
        f = self.port.faults
        if f.corrupt_rate > 0 or f.drop_rate > 0:
            offset = np.full(k, -1, dtype=np.int64)
            for i in range(k):
                before = stats.bytes_offered
                self.port.send(data[i * PACKET_SIZE : (i + 1) * PACKET_SIZE])
                if stats.bytes_offered > before:
                    offset[i] = before
            return offset
        before = stats.bytes_offered
        self.port.send(data)
        if stats.bytes_offered == before:
            return np.full(k, -1, dtype=np.int64)
        return before + PACKET_SIZE * np.arange(k, dtype=np.int64)

    def _pump(self, now: float) -> None:
        """Encode and send every packet whose send time has come (at most ``_MAX_BURST_S``)."""
        k = self.n_packets
        i0 = self._cursor
        if not self.loop and i0 >= k:
            return
        loop, j0 = divmod(i0, k)
        base = loop * self._period - self._t_first[0]  # simulated time of this pass's start
        limit = min(now, float(self._t_send[j0]) + base + _MAX_BURST_S) - base
        j1 = int(np.searchsorted(self._t_send, limit, side="right"))
        if j1 <= j0:
            return
        due = np.arange(i0, loop * k + j1)
        self._cursor = int(due[-1]) + 1
        if not self.port.plugged:
            return
        j = due % k
        loops = due // k
        t_first = self._t_first[j] + loops * self._period - self._t_first[0]
        dist = self._dist[j].copy()
        hit = np.flatnonzero(self._payload_hit[j])
        dist[hit, self._payload_pt[j[hit]]] = PAYLOAD_HEADER_MM
        ms = np.floor((t_first - self._power_on_s) * 1000.0).astype(np.int64)
        ts = ((ms + self.quirks.timestamp_start_ms) % TIMESTAMP_MODULUS_MS).astype(np.uint16)
        speed, start, end = self._speed[j], self._start[j], self._end[j]
        code = self._impossible[j]
        if code.any():
            # the value moves on with each pass, so every emission is a distinct packet
            u = np.mod(self._impossible_u[j] + loops * 0.6180339887, 1.0)
            speed, start, end, ts = _make_impossible(code, u, speed, start, end, ts)
        data = encode_packets(speed, start, end, dist, self._inten[j], ts)
        host_ns = time.monotonic_ns()
        offset = self._send(data, due.size)
        self.packets_sent += int(np.count_nonzero(offset >= 0))
        if not self.record_truth:
            return
        point_t = self._t_points[j] + (loops * self._period - self._t_first[0])[:, None]
        cycle = np.full(due.size, self._power_cycle, dtype=np.int64)
        self._truth.append(LD19Truth(
            t_first, self._send_time(due), np.full(due.size, host_ns, dtype=np.int64), speed,
            start, end, ts, dist, self._inten[j], offset, offset >= 0, cycle, point_t, code,
        ))  # fmt: skip
