"""An RPLIDAR A1 on a pseudo-terminal: the Slamtec request/response protocol, byte-exact.

The emulator serves one unit on a :class:`~sensorbench.sim.pty.PtyPort` at 115200
baud, paced by a :class:`~sensorbench.sim.clock.SimClock` (``speed`` times real
time). It plays device-native samples (``angle_deg_cw``, ``range_m``, ``intensity``,
``turn``, ``t_s``: the shape of ``Simulation.lidar(name)``) as standard-scan nodes.

Requests (``A5 cmd`` or ``A5 cmd len payload xor`` when ``cmd & 0x80``):

- GET_INFO 0x50: descriptor ``A5 5A 14 00 00 00 04`` + model, firmware minor,
  firmware major, hardware, 16-byte serial;
- GET_HEALTH 0x52: descriptor ``A5 5A 03 00 00 00 06`` + status (0 good, 1 warning,
  2 error) and the error code as uint16 little-endian;
- SCAN 0x20 / FORCE_SCAN 0x21: descriptor ``A5 5A 05 00 00 40 81``, then 5-byte
  nodes until STOP (refused, no answer, while health is ``error``);
- STOP 0x25: no answer; scanning and (no DTR on a pty) the motor stop;
- RESET 0x40: reboot: silent for ``reset_silence_s``, then a text banner, idle;
- SET_PWM 0xF0, EXPRESS_SCAN 0x82: ignored (the A1 has no PWM; express is not emulated).

While scanning only STOP, RESET, SCAN and FORCE_SCAN are acted on; other
requests are ignored, as the host must stop a scan before asking anything else.
A pty has no DTR, so the scan request is the motor start: after it the motor
spins up for ``spinup_s`` before nodes flow. The first node after a start is
wherever the head happens to be; the start flag marks each new turn.

Every node put on the line is recorded in :meth:`A1Emulator.truth` (emission time,
host send time, start flag, quality, q6 angle, q2 distance, delivered), so tests
compare a driver's output against exactly what was sent.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sensorbench.errors import SimError
from sensorbench.sim.clock import SimClock
from sensorbench.sim.emulator_base import (
    LidarSamples,
    PtyEmulator,
    check_sweep,
    concat_records,
    room_ranges,
)
from sensorbench.sim.power import PowerBus
from sensorbench.sim.pty import Faults, PtyPort

BAUD = 115200
_SYNC = 0xA5
_INFO_DESC = bytes.fromhex("a55a1400000004")
_HEALTH_DESC = bytes.fromhex("a55a0300000006")
_SCAN_DESC = bytes.fromhex("a55a0500004081")
_TICK_S = 0.01  # host seconds between pump iterations
_MAX_BURST_S = 0.25  # emulated seconds emitted at most per pump (after a stall of the host)


class LidarSampleSource(LidarSamples, Protocol):
    """Device-native A1 samples (the fields of ``Simulation.lidar(name)`` used here).

    Adds to :class:`~sensorbench.sim.emulator_base.LidarSamples` the turn index of
    each sample, ``turn`` (a change marks the start of a turn).
    """

    turn: np.ndarray


@dataclass
class RoomSamples:
    """A1 samples of a rectangular room around the sensor, for scenario-free emulation.

    The sensor sits at ``(x, y)`` in a ``width`` × ``depth`` m room (walls at 0 and
    width/depth); ranges get Gaussian noise of ``sigma_m``; beams beyond
    ``max_range_m`` or with probability ``p_no_return`` return 0.
    """

    t_s: np.ndarray
    angle_deg_cw: np.ndarray
    range_m: np.ndarray
    intensity: np.ndarray
    turn: np.ndarray

    @classmethod
    def generate(
        cls,
        duration_s: float = 20.0,
        rate_hz: float = 5.5,
        samples_per_s: float = 2000.0,
        width: float = 6.0,
        depth: float = 8.0,
        x: float = 2.5,
        y: float = 3.0,
        sigma_m: float = 0.01,
        p_no_return: float = 0.02,
        max_range_m: float = 12.0,
        seed: int = 0,
    ) -> RoomSamples:
        """Samples for ``duration_s`` s at ``rate_hz`` turns/s and ``samples_per_s``."""
        check_sweep(duration_s, rate_hz, samples_per_s)
        rng = np.random.default_rng(seed)
        n = int(duration_s * samples_per_s)
        t = np.arange(n) / samples_per_s
        phase = t * rate_hz
        turn = np.floor(phase).astype(np.int64)
        angle_cw = (phase - turn) * 360.0
        r = room_ranges(angle_cw, width, depth, x, y) + rng.normal(0.0, sigma_m, n)
        lost = (r > max_range_m) | (rng.random(n) < p_no_return)
        r[lost] = 0.0
        quality = np.clip(np.round(60 - 3 * r), 1, 63).astype(np.uint8)
        quality[lost] = 0
        return cls(t, angle_cw, r, quality, turn)


@dataclass
class A1Truth:
    """Every node the emulator put on the line, in order.

    Attributes:
        t_s: emission time (simulated s).
        host_ns: host ``time.monotonic_ns()`` when the chunk was sent.
        start: start-of-turn flag.
        quality, angle_q6, dist_q2: the encoded node fields.
        delivered: False if the link dropped the node (unplugged, silent, overrun).
    """

    t_s: np.ndarray
    host_ns: np.ndarray
    start: np.ndarray
    quality: np.ndarray
    angle_q6: np.ndarray
    dist_q2: np.ndarray
    delivered: np.ndarray

    def __len__(self) -> int:
        return int(self.t_s.size)


def encode_nodes(
    start: np.ndarray, quality: np.ndarray, angle_q6: np.ndarray, dist_q2: np.ndarray
) -> bytes:
    """Standard-scan node bytes for the given fields (vectorised)."""
    k = start.size
    out = np.empty((k, 5), dtype=np.uint8)
    s = start.astype(np.uint8)
    out[:, 0] = (quality.astype(np.uint8) << 2) | ((1 - s) << 1) | s
    a = angle_q6.astype(np.uint16)
    out[:, 1] = ((a & 0x7F) << 1) | 1
    out[:, 2] = a >> 7
    d = dist_q2.astype(np.uint16)
    out[:, 3] = d & 0xFF
    out[:, 4] = d >> 8
    return out.tobytes()


def banner(model: int, firmware: tuple[int, int], hardware: int) -> bytes:
    """The text an A1 prints when it boots (the host must discard it)."""
    major, minor = firmware
    return (
        f"RP LIDAR System.\r\nFirmware Ver {major}.{minor:02d} - rtm, HW Ver {hardware}\r\n"
        f"Model: {model}\r\n"
    ).encode("ascii")


class A1Emulator(PtyEmulator):
    """One emulated RPLIDAR A1 serving the Slamtec protocol on a pty.

    Args:
        samples: what the head sees (``Simulation.lidar(name)`` or :class:`RoomSamples`);
            played in emulation time and looped.
        link: stable symlink to the pty (like a udev name), optional.
        serial: the unit's 16-byte serial number (bytes or 32 hex digits).
        speed: emulation speed-up (ignored when ``clock`` or ``power`` gives a clock).
        name: the unit's name on a power bus.
        model, firmware, hardware: GET_INFO fields (A1M8 firmware 1.29, hardware 7).
        spinup_s: simulated seconds from motor start to the first node.
        reset_silence_s: simulated seconds of silence after RESET before the banner.
        faults: byte-level link faults (corruption, drops, slow start).
        power: a shared :class:`~sensorbench.sim.power.PowerBus` (brown-out model).
        clock: the emulation clock (default: the power bus's, else a new one at ``speed``).
        seed: seed of the link fault stream.
        health: initial GET_HEALTH answer (status 0/1/2, error code), see :meth:`set_health`.
        record_truth: keep every sent node for :meth:`truth` (about 23 bytes per node,
            160 MB per hour at real time: turn off for long-running servers).
    """

    def __init__(
        self,
        samples: LidarSampleSource | None = None,
        link: str | None = None,
        serial: bytes | str = bytes(range(16)),
        speed: float = 1.0,
        name: str = "a1",
        model: int = 0x18,
        firmware: tuple[int, int] = (1, 29),
        hardware: int = 7,
        spinup_s: float = 0.5,
        reset_silence_s: float = 0.5,
        faults: Faults | None = None,
        power: PowerBus | None = None,
        clock: SimClock | None = None,
        seed: int = 0,
        record_truth: bool = True,
        health: tuple[int, int] = (0, 0),
    ) -> None:
        serial_bytes = bytes.fromhex(serial) if isinstance(serial, str) else bytes(serial)
        if len(serial_bytes) != 16:
            raise SimError(f"an A1 serial number is 16 bytes, got {len(serial_bytes)}")
        src = samples if samples is not None else RoomSamples.generate()
        self._t = np.asarray(src.t_s, dtype=np.float64)
        if self._t.size < 2 or np.any(np.diff(self._t) < 0):
            raise SimError("A1 samples need at least 2 points in time order")
        q6 = np.round(np.asarray(src.angle_deg_cw, dtype=np.float64) * 64).astype(np.int64)
        self._angle_q6 = (q6 % (360 * 64)).astype(np.uint16)
        rng_m = np.asarray(src.range_m, dtype=np.float64)
        self._dist_q2 = np.clip(np.round(rng_m * 4000.0), 0, 0xFFFF).astype(np.uint16)
        self._quality = np.clip(np.asarray(src.intensity, dtype=np.int64), 0, 63).astype(np.uint8)
        self._quality[self._dist_q2 == 0] = 0
        turn = np.asarray(src.turn)
        self._start = np.empty(turn.size, dtype=bool)
        self._start[0] = True
        self._start[1:] = turn[1:] != turn[:-1]
        dt = float(np.median(np.diff(self._t)))
        self._period = float(self._t[-1] - self._t[0]) + dt

        self.name = name
        self.serial = serial_bytes
        self.model, self.firmware, self.hardware = model, firmware, hardware
        self.spinup_s = spinup_s
        self.reset_silence_s = reset_silence_s
        self.power = power
        self.clock = clock or (power.clock if power is not None else SimClock(speed))
        super().__init__(PtyPort(link=link, baud=BAUD, faults=faults, seed=seed))

        self.health_status = 0
        self.health_code = 0
        self.requests: list[int] = []  # every command byte received, in order
        self._lock = threading.RLock()
        self._rx = b""
        self._motor = False
        self._scanning = False
        self._emit_from = 0.0  # simulated time of the next node to emit
        self._quiet_until = 0.0  # simulated time until which the unit is rebooting
        self._banner_due = False
        self._truth: list[A1Truth] = []
        self.record_truth = record_truth
        self.set_health(*health)
        if power is not None:
            power.attach(self)
        self._actions: queue.Queue[tuple[Callable[[], None], threading.Event]] = queue.Queue()
        self._start_thread(f"a1-emulator-{name}")

    # -- public knobs --------------------------------------------------------------

    @property
    def motor_on(self) -> bool:
        """True while the motor spins (after a scan request, until STOP/RESET/brown-out)."""
        return self._motor

    @property
    def scanning(self) -> bool:
        """True while nodes are being sent (or about to, during spin-up)."""
        return self._scanning

    def set_health(self, status: int, error_code: int = 0) -> None:
        """Force the health answer: 0 good, 1 warning, 2 error (cleared by RESET)."""
        if status not in (0, 1, 2) or not 0 <= error_code <= 0xFFFF:
            raise SimError("health status must be 0, 1 or 2 and the code fit 16 bits")
        with self._lock:
            self.health_status, self.health_code = status, error_code

    def unplug(self) -> None:
        """Pull the USB cable: the pty disappears and the unit loses power."""
        self._on_thread(self._do_unplug)

    def replug(self, boot_s: float = 0.2) -> None:
        """Plug back in: a new pty behind the same link; the unit boots (banner) and idles."""
        self._on_thread(lambda: self._do_replug(boot_s))

    def _on_thread(self, action: Callable[[], None]) -> None:
        # pty fds are closed and reopened only between two recv() calls of the emulator
        # thread: a new pty reusing the old fd numbers must not be read by a recv()
        # that started on the old one.
        if self._thread is None or not self._thread.is_alive():
            action()
            return
        done = threading.Event()
        self._actions.put((action, done))
        if not done.wait(2.0):
            raise SimError(f"A1 emulator {self.name}: its thread did not act within 2 s")

    def _do_unplug(self) -> None:
        with self._lock:
            self.port.unplug()
            self._scanning = False
            self._motor = False

    def _do_replug(self, boot_s: float) -> None:
        with self._lock:
            self.port.replug()
            self._reboot(boot_s)

    def brown_out(self, mode: str, error_code: int, outage_s: float) -> None:
        """Called by the power bus: stop, then error state or reboot with silence."""
        with self._lock:
            self._scanning = False
            self._motor = False
            if mode == "error":
                self.health_status, self.health_code = 2, error_code
            else:
                self._reboot(outage_s)

    def truth(self) -> A1Truth:
        """Every node sent so far (a snapshot)."""
        with self._lock:
            chunks = list(self._truth)
        if not chunks:
            e = np.empty(0)
            return A1Truth(
                e,
                e.astype(np.int64),
                e.astype(bool),
                e.astype(np.uint8),
                e.astype(np.uint16),
                e.astype(np.uint16),
                e.astype(bool),
            )
        return concat_records(A1Truth, chunks)

    # -- the device ----------------------------------------------------------------

    def _reboot(self, quiet_s: float) -> None:
        self._scanning = False
        self._motor = False
        self._rx = b""
        self._quiet_until = self.clock.now() + quiet_s
        self._banner_due = True

    def _run(self) -> None:
        while not self._stop.is_set():
            while not self._actions.empty():
                action, done = self._actions.get()
                action()
                done.set()
            data = self.port.recv(_TICK_S)
            now = self.clock.now()
            motor_started = False
            with self._lock:
                if now < self._quiet_until:
                    data = b""
                elif self._banner_due:
                    self._banner_due = False
                    self.health_status, self.health_code = 0, 0
                    self.port.send(banner(self.model, self.firmware, self.hardware))
                if data:
                    self._rx += data
                    motor_started = self._handle_requests(now)
                if self._scanning:
                    self._pump(now)
            if motor_started and self.power is not None:
                self.power.motor_started(self)

    def _handle_requests(self, now: float) -> bool:
        """Act on complete requests in the receive buffer; True if the motor started."""
        started = False
        rx = self._rx
        while rx:
            if rx[0] != _SYNC:
                rx = rx[1:]
                continue
            if len(rx) < 2:
                break
            cmd = rx[1]
            if cmd & 0x80:
                if len(rx) < 3 or len(rx) < 4 + rx[2]:
                    break
                size = rx[2]
                rx = rx[4 + size :]
                self.requests.append(cmd)
                continue  # PWM and express: not acted on by an A1 emulator
            rx = rx[2:]
            self.requests.append(cmd)
            if cmd == 0x25:
                self._scanning = False
                self._motor = False
            elif cmd == 0x40:
                self._reboot(self.reset_silence_s)
                rx = b""
            elif cmd in (0x20, 0x21):
                if self.health_status == 2:
                    continue  # protection stop: no scan until a RESET clears the error
                if not self._motor:
                    self._motor = True
                    started = True
                    self._emit_from = now + self.spinup_s
                else:
                    self._emit_from = now
                self._scanning = True
                # state first, then the answer: a host that has read the descriptor
                # must find the motor on (it read False under load when this came first)
                self.port.send(_SCAN_DESC)
            elif self._scanning:
                continue
            elif cmd == 0x50:
                self.port.send(
                    _INFO_DESC
                    + bytes([self.model, self.firmware[1], self.firmware[0], self.hardware])
                    + self.serial
                )
            elif cmd == 0x52:
                code = self.health_code.to_bytes(2, "little")
                self.port.send(_HEALTH_DESC + bytes([self.health_status]) + code)
        self._rx = rx
        return started

    def _pump(self, now: float) -> None:
        """Send every node whose emission time has come."""
        t0 = self._emit_from
        if now <= t0:
            return
        t1 = min(now, t0 + _MAX_BURST_S)
        loops = np.floor(np.array([t0, t1]) / self._period)
        idx_parts = []
        time_parts = []
        for loop in range(int(loops[0]), int(loops[1]) + 1):
            base = loop * self._period
            lo = np.searchsorted(self._t, t0 - base, side="left")
            hi = np.searchsorted(self._t, t1 - base, side="left")
            if hi > lo:
                idx_parts.append(np.arange(lo, hi))
                time_parts.append(self._t[lo:hi] + base)
        self._emit_from = t1
        if not idx_parts:
            return
        idx = np.concatenate(idx_parts)
        t_s = np.concatenate(time_parts)
        start, quality = self._start[idx], self._quality[idx]
        angle, dist = self._angle_q6[idx], self._dist_q2[idx]
        host_ns = time.monotonic_ns()
        written = self.port.send(encode_nodes(start, quality, angle, dist))
        if not self.record_truth:
            return
        delivered = (np.arange(idx.size) + 1) * 5 <= written
        self._truth.append(
            A1Truth(
                t_s,
                np.full(idx.size, host_ns, dtype=np.int64),
                start,
                quality,
                angle,
                dist,
                delivered,
            )
        )
