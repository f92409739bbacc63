"""An RPLIDAR A1 on a pseudo-terminal: the Slamtec request/response protocol, byte-exact
(bytes, behaviour and sources: docs/A1.md, Emulator)."""

from __future__ import annotations

import functools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from sensorbench.drivers import a1_protocol as proto
from sensorbench.errors import SimError
from sensorbench.sim.a1_samples import REAL_EXPRESS_US, RoomSamples
from sensorbench.sim.emulator_base import LidarSamples, PtyEmulator, Records, SimClock
from sensorbench.sim.modem_lines import ModemLineChannel
from sensorbench.sim.power import PowerBus
from sensorbench.sim.pty import Faults, PtyPort

_TICK_S = 0.01  # host seconds between pump iterations
_MAX_BURST_S = 0.25  # emulated seconds emitted at most per pump (after a stall of the host)
_FULL_Q6 = 360 * 64
_FULL_Q16 = 360 << 16
_MID_OFFSET_DEG = 31.5 / 8  # express start angles sit mid-range above the samples
_MAX_MM = 0x3FFF  # express: 14-bit distance field


class LidarSampleSource(LidarSamples, Protocol):
    """Device-native A1 samples plus each sample's turn index ``turn`` (a change starts a turn)."""

    turn: np.ndarray


@dataclass
class A1Truth(Records):
    """Every node the emulator put on the line, in order: emission time ``t_s`` (simulated
    s), ``host_ns`` of its chunk (``time.monotonic_ns()``), the encoded ``start``,
    ``quality``, ``angle_q6``, ``dist_q2`` (express: what the capsules decode to),
    ``delivered`` (False if the link dropped it or, express, the next capsule) and ``express``.
    """

    t_s: np.ndarray
    host_ns: np.ndarray
    start: np.ndarray
    quality: np.ndarray
    angle_q6: np.ndarray
    dist_q2: np.ndarray
    delivered: np.ndarray
    express: np.ndarray
    DTYPES = (float, np.int64, bool, np.uint8, np.uint16, np.uint16, bool, bool)


def encode_nodes(
    start: np.ndarray, quality: np.ndarray, angle_q6: np.ndarray, dist_q2: np.ndarray
) -> bytes:
    """Standard-scan node bytes for the given fields (vectorised)."""
    out = np.empty((start.size, 5), dtype=np.uint8)
    s, a, d = start.astype(np.uint8), angle_q6.astype(np.uint16), dist_q2.astype(np.uint16)
    out[:, 0] = (quality.astype(np.uint8) << 2) | ((1 - s) << 1) | s
    out[:, 1] = ((a & 0x7F) << 1) | 1
    out[:, 2], out[:, 3], out[:, 4] = a >> 7, d & 0xFF, d >> 8
    return out.tobytes()


@dataclass(frozen=True)
class PacketStream:
    """A looped sample stream as a scan's packets, ``(m, 5)`` standard nodes or ``(m, 84)``
    express capsules (S flag clear), and what a correct decoder outputs per ``(m, n)``
    sample: ``t_s`` (s), ``start`` (express: the SDK's sync bit), ``quality``,
    ``angle_q6`` (q6 ° clockwise), ``dist_q2`` (q2 mm). ``t_end_s``: each packet's
    emission time (s); ``period_s``: one loop (s); ``sample_us``: median spacing (µs).
    """

    packets: np.ndarray
    t_end_s: np.ndarray
    period_s: float
    sample_us: int
    t_s: np.ndarray
    start: np.ndarray
    quality: np.ndarray
    angle_q6: np.ndarray
    dist_q2: np.ndarray
    express: bool

    def __len__(self) -> int:
        return int(self.t_end_s.size)


def _period(t: np.ndarray) -> tuple[float, float]:
    """A looped stream's period and median spacing (s); SimError without two ordered times."""
    if t.size < 2 or np.any(np.diff(t) < 0):
        raise SimError("A1 samples need at least 2 points in time order")
    dt = float(np.median(np.diff(t)))
    return float(t[-1] - t[0]) + dt, dt


def node_stream(src: LidarSampleSource) -> PacketStream:
    """Standard-scan nodes of ``src``: a sample at 360 deg exactly is sent as q6 23040
    (360.00 deg), as real units do now and then (drivers drop such a node); other
    angles wrap into [0, 360); ranges clip to the 16-bit field, qualities to 0..63."""
    t = np.asarray(src.t_s, dtype=np.float64)
    period, dt = _period(t)
    deg = np.asarray(src.angle_deg_cw, dtype=np.float64)
    q6 = np.round(deg * 64).astype(np.int64)
    angle = np.where(deg == 360.0, _FULL_Q6, q6 % _FULL_Q6).astype(np.uint16)
    rng_m = np.asarray(src.range_m, dtype=np.float64)
    dist = np.clip(np.round(rng_m * 4000.0), 0, 0xFFFF).astype(np.uint16)
    quality = np.clip(np.asarray(src.intensity, dtype=np.int64), 0, 63).astype(np.uint8)
    turn = np.asarray(src.turn)
    start = np.concatenate(([True], turn[1:] != turn[:-1]))
    nodes = np.frombuffer(encode_nodes(start, quality, angle, dist), np.uint8).reshape(-1, 5)
    col = (t[:, None], start[:, None], quality[:, None], angle[:, None], dist[:, None])
    return PacketStream(nodes, t, period, round(dt * 1e6), *col, express=False)


def express_stream(src: LidarSamples) -> PacketStream:
    """Express capsules of ``src``'s samples (0 m: no return), truncated to whole
    capsules; the stream loops. Each start angle is a line
    fit through the capsule's readings, each offset the nearest representable one; what
    they decode to is computed with the SDK's fixed point in numpy, independently of the
    driver's compiled decoder (docs/A1.md, Protocol).
    """
    n_per = proto.NODES_PER_CAPSULE
    m = len(src.t_s) // n_per
    if m < 2:
        raise ValueError(f"an express stream needs at least 64 samples, got {len(src.t_s)}")
    n = m * n_per
    t = np.asarray(src.t_s[:n], dtype=np.float64).reshape(m, n_per)
    a = np.degrees(np.unwrap(np.radians(np.asarray(src.angle_deg_cw[:n], dtype=np.float64))))
    a = a.reshape(m, n_per)
    j = np.arange(n_per, dtype=np.float64)
    jc = j - j.mean()
    slope = (a - a.mean(axis=1, keepdims=True)) @ jc / (jc @ jc)
    first = a.mean(axis=1) - slope * j.mean()
    start_q6 = np.mod(np.round((first + _MID_OFFSET_DEG) * 64).astype(np.int64), _FULL_Q6)
    prev_q8 = start_q6 << 2
    diff = np.roll(start_q6, -1) * 4 - prev_q8
    diff[diff < 0] += 360 << 8
    inc = diff << 3
    nominal = (prev_q8 << 8)[:, None] + np.arange(n_per)[None, :] * inc[:, None]
    want = np.mod(nominal / 65536.0 - a + 180.0, 360.0) - 180.0  # offset that fits (°)
    offset = np.clip(np.round(want * 8), 0, 63).astype(np.int64)
    angle = np.mod((nominal - (offset << 13)) >> 10, _FULL_Q6)
    sync = np.mod(nominal + inc[:, None], _FULL_Q16) < inc[:, None]
    metres = np.asarray(src.range_m[:n], dtype=np.float64).reshape(m, n_per)
    mm = np.clip(np.round(metres * 1000.0), 0, _MAX_MM).astype(np.int64)
    words = (mm << 2) | (offset >> 4)
    caps = np.zeros((m, proto.CAPSULE_LEN), np.uint8)
    caps[:, 2] = start_q6 & 0xFF
    caps[:, 3] = start_q6 >> 8
    cab = caps[:, 4:].reshape(m, 16, 5)
    cab[:, :, 0] = words[:, 0::2] & 0xFF
    cab[:, :, 1] = words[:, 0::2] >> 8
    cab[:, :, 2] = words[:, 1::2] & 0xFF
    cab[:, :, 3] = words[:, 1::2] >> 8
    cab[:, :, 4] = (offset[:, 0::2] & 0xF) | ((offset[:, 1::2] & 0xF) << 4)
    check = np.bitwise_xor.reduce(caps[:, 2:], axis=1)
    caps[:, 0] = 0xA0 | (check & 0xF)
    caps[:, 1] = 0x50 | (check >> 4)
    period, dt = _period(t.ravel())
    quality = np.where(mm > 0, proto.EXPRESS_QUALITY, 0).astype(np.uint8)
    return PacketStream(
        caps, t[:, -1].copy(), period, round(dt * 1e6), t, sync, quality,
        angle.astype(np.uint16), (mm * 4).astype(np.uint16), express=True,
    )  # fmt: skip


@dataclass(frozen=True)
class A1Unit:
    """One emulated A1's identity and timing: 16-byte ``serial`` (bytes or 32 hex digits),
    GET_INFO fields, simulated seconds from motor start to the first node (``spinup_s``)
    and of silence after RESET, the initial (status, code) health, and the standard
    sample duration (µs) GET_SAMPLERATE answers (None: the samples' median spacing).
    """

    serial: bytes | str = bytes(range(16))
    model: int = 0x18
    firmware: tuple[int, int] = (1, 29)
    hardware: int = 7
    spinup_s: float = 0.5
    reset_silence_s: float = 0.5
    health: tuple[int, int] = (0, 0)
    sample_us: int | None = None


class A1Emulator(PtyEmulator):
    """One emulated RPLIDAR A1 serving the Slamtec protocol on a pty: ``samples`` (what
    the head sees in standard scan, looped; default: the built-in room, both scan modes)
    and ``express_samples`` (the same scene at twice the sample rate; None with
    ``samples``: the unit ignores EXPRESS_SCAN, as firmware < 1.17), at ``speed`` unless
    ``clock`` or ``power`` gives a clock; ``record_truth`` keeps every sent node for
    :meth:`truth` (~23 bytes per node)."""

    def __init__(
        self,
        samples: LidarSampleSource | None = None,
        link: str | None = None,
        unit: A1Unit | None = None,
        speed: float = 1.0,
        name: str = "a1",
        faults: Faults | None = None,
        power: PowerBus | None = None,
        clock: SimClock | None = None,
        seed: int = 0,
        record_truth: bool = True,
        express_samples: LidarSamples | None = None,
    ) -> None:
        u = A1Unit() if unit is None else unit
        try:
            serial = bytes.fromhex(u.serial) if isinstance(u.serial, str) else bytes(u.serial)
        except ValueError:
            serial = b""
        if len(serial) != 16:
            raise SimError(f"an A1 serial number is 16 bytes (32 hex digits), got {u.serial!r}")
        self.express: PacketStream | None = None  # capsules played, looped
        if samples is None:
            self.standard, self.express = _default_room()
        else:
            self.standard = node_stream(samples)
        if express_samples is not None:
            self.express = express_stream(express_samples)
        self.sample_us = self.standard.sample_us if u.sample_us is None else int(u.sample_us)
        if not 0 < self.sample_us <= 0xFFFF:
            raise SimError(f"sample duration must be 1..65535 us, got {self.sample_us}")
        ex = self.express
        self.express_us = max(1, self.sample_us // 2) if ex is None else ex.sample_us
        self.scan_modes, self.typical_mode = self._mode_table()
        self.name, self.serial, self.power = name, serial, power
        self.model, self.firmware, self.hardware = u.model, u.firmware, u.hardware
        self.spinup_s, self.reset_silence_s = u.spinup_s, u.reset_silence_s
        self.clock = clock or (power.clock if power is not None else SimClock(speed))
        super().__init__(PtyPort(link=link, baud=proto.BAUD, faults=faults, seed=seed))

        self.health_status = self.health_code = 0
        self.requests: list[int] = []  # every command byte received, in order
        self._lock = threading.RLock()
        self._rx = b""
        self._lines = ModemLineChannel(self.port.path, self._on_dtr)
        self._powered = True
        self._motor = False
        self._motor_since = float("-inf")  # simulated time of the last motor start
        self.motor_log: list[tuple[float, bool]] = []  # (simulated s, motor on) changes
        self._scan: PacketStream | None = None  # the stream of the scan running
        # the last packet sent in this scan: (index, delivered, its loop's start s)
        self._last_sent: tuple[int, bool, float] | None = None
        self._emit_from = 0.0  # simulated time of the next node to emit
        self._scan_from = self._pumped_to = 0.0  # simulated start and last pump of a scan
        self._scanned = (0.0, 0.0)  # simulated s served and asked for by the scans before
        self._quiet_until = 0.0  # simulated time until which the unit is rebooting
        self._banner_due = False
        self._truth: list[A1Truth] = []
        self.record_truth = record_truth
        self.set_health(*u.health)
        if power is not None:
            power.attach(self)
        if self._follow_dtr(self.clock.now()) and power is not None:
            power.motor_started(self)  # enumeration: nobody holds the port yet
        self._actions: queue.Queue[tuple[Callable[[], None], threading.Event]] = queue.Queue()
        self._start_thread(f"a1-emulator-{name}")

    def _mode_table(self) -> tuple[list[tuple[str, float, int]], int]:
        """GET_LIDAR_CONF's scan modes ``(name, µs per sample, answer type)`` and the
        typical one's id: a real A1M8 1.29's (docs/A1.md) scaled to this unit's spacings."""
        modes = [("Standard", float(self.sample_us), proto.TYPE_SCAN)]
        if self.express is None:
            return modes, 0
        ex = float(self.express_us)
        ultra = 0x84  # the ultra capsules of Boost, Sensitivity, Stability: listed, not served
        modes += [
            ("Express", ex, proto.TYPE_EXPRESS),
            ("Boost", ex / 2, ultra),
            ("Sensitivity", ex / 2, ultra),
            ("Stability", ex * 201 / 254, ultra),
        ]
        return modes, 3

    @property
    def motor_on(self) -> bool:
        """True while the motor spins: powered and DTR not asserted by a host."""
        return self._motor

    @property
    def scanning(self) -> bool:
        """True while nodes are being sent (or about to, during spin-up)."""
        return self._scan is not None

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
        # between two recv() calls only: a new pty reusing the old fds must not be read
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
            self._lines.close()
            self._powered = False
            self._scan = None
            self._follow_dtr(self.clock.now())

    def _do_replug(self, boot_s: float) -> None:
        with self._lock:
            self.port.replug()
            self._lines = ModemLineChannel(self.port.path, self._on_dtr)
            self._powered = True
            self._reboot(boot_s)
            started = self._follow_dtr(self.clock.now())
        if started and self.power is not None:
            self.power.motor_started(self)  # enumeration again

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread, remove the pty and its modem-line channel."""
        super().stop(timeout_s)
        self._lines.close()

    def brown_out(self, mode: str, error_code: int, outage_s: float) -> None:
        """Called by the power bus: the scan stops, then error state or reboot (``outage_s``)."""
        with self._lock:
            self._scan = None
            if mode == "error":
                self.health_status, self.health_code = 2, error_code
            else:
                self._reboot(outage_s)

    def truth(self) -> A1Truth:
        """Every node sent so far (a snapshot)."""
        with self._lock:
            return A1Truth.concat(list(self._truth))

    def _reboot(self, quiet_s: float) -> None:
        self._scan = None
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
            with self._lock:
                if now < self._quiet_until:
                    data = b""
                elif self._banner_due:  # the boot text (the host must discard it)
                    self._banner_due = False
                    self.health_status, self.health_code = 0, 0
                    (major, minor), hw = self.firmware, self.hardware
                    self.port.send(f"RP LIDAR System.\r\nFirmware Ver {major}.{minor:02d} - rtm, "
                        f"HW Ver {hw}\r\nModel: {self.model}\r\n".encode("ascii"))
                if data:
                    self._rx += data
                    self._handle_requests(now)
                if self._scan is not None:
                    self._pump(now)

    def _on_dtr(self, _asserted: bool) -> None:
        """The host changed DTR (from the modem-line channel's thread)."""
        with self._lock:
            started = self._follow_dtr(self.clock.now())
        if started and self.power is not None:
            self.power.motor_started(self)

    def _follow_dtr(self, now: float) -> bool:
        """Set the motor from power and DTR; True if it just started (an inrush)."""
        on = self._powered and not self._lines.dtr
        if on == self._motor:
            return False
        self._motor = on
        self.motor_log.append((now, on))
        if on:
            self._motor_since = now
        return on

    def _handle_requests(self, now: float) -> None:
        """Act on complete requests in the receive buffer."""
        rx = self._rx
        while rx:
            if rx[0] != proto.SYNC:
                rx = rx[1:]
                continue
            if len(rx) < 2:
                break
            cmd = rx[1]
            if cmd & 0x80:
                if len(rx) < 3 or len(rx) < 4 + rx[2]:
                    break
                size = rx[2]
                payload, rx = rx[3 : 3 + size], rx[4 + size :]
                self.requests.append(cmd)
                express_mode = cmd == proto.CMD_EXPRESS_SCAN and size >= 1 and payload[0] in (0, 1)
                if express_mode and self.express is not None and self.health_status != 2:
                    self._start_scan(now, self.express)
                    self.port.send(proto.EXPRESS_DESCRIPTOR)
                elif (
                    cmd == proto.CMD_GET_LIDAR_CONF
                    and self._scan is None
                    and self.firmware >= proto.CONF_MIN_FIRMWARE
                ):
                    self._answer_conf(payload)
                continue  # SET_PWM: the A1 has no PWM
            rx = rx[2:]
            self.requests.append(cmd)
            if cmd == proto.CMD_STOP:
                self._scan = None
            elif cmd == proto.CMD_RESET:
                self._reboot(self.reset_silence_s)
                rx = b""
            elif cmd in (proto.CMD_SCAN, proto.CMD_FORCE_SCAN):
                if self.health_status == 2:
                    continue  # protection stop: no scan until a RESET clears the error
                # state first, then the answer: a host that has read the descriptor
                # must find the emulator scanning (under load it did not when this came first)
                self._start_scan(now, self.standard)
                self.port.send(proto.SCAN_DESCRIPTOR)
            elif self._scan is not None:
                continue
            elif cmd == proto.CMD_GET_INFO:
                self.port.send(
                    proto.INFO_DESCRIPTOR
                    + bytes([self.model, self.firmware[1], self.firmware[0], self.hardware])
                    + self.serial
                )
            elif cmd == proto.CMD_GET_HEALTH:
                code = self.health_code.to_bytes(2, "little")
                self.port.send(proto.HEALTH_DESCRIPTOR + bytes([self.health_status]) + code)
            elif cmd == proto.CMD_GET_SAMPLERATE:
                rates = self.sample_us.to_bytes(2, "little") + self.express_us.to_bytes(2, "little")
                self.port.send(proto.SAMPLERATE_DESCRIPTOR + rates)
        self._rx = rx

    def _answer_conf(self, payload: bytes) -> None:
        """GET_LIDAR_CONF: the type asked, then its value (nothing for an unknown one)."""
        if len(payload) < 4:
            return
        kind = int.from_bytes(payload[:4], "little")
        mode = int.from_bytes(payload[4:6], "little") if len(payload) >= 6 else 0
        modes = self.scan_modes
        value: bytes | None = None
        if kind == proto.CONF_SCAN_MODE_COUNT:
            value = len(modes).to_bytes(2, "little")
        elif kind == proto.CONF_SCAN_MODE_TYPICAL:
            value = self.typical_mode.to_bytes(2, "little")
        elif mode < len(modes):
            name, us, answer = modes[mode]
            value = {
                proto.CONF_SCAN_MODE_US_PER_SAMPLE: round(us * 256).to_bytes(4, "little"),
                proto.CONF_SCAN_MODE_MAX_DISTANCE: (12 << 8).to_bytes(4, "little"),
                proto.CONF_SCAN_MODE_ANS_TYPE: bytes([answer]),
                proto.CONF_SCAN_MODE_NAME: name.encode("ascii") + b"\0",
            }.get(kind)
        if value is not None:
            body = payload[:4] + value
            desc = proto.descriptor(len(body), proto.MODE_SINGLE, proto.TYPE_GET_LIDAR_CONF)
            self.port.send(desc + body)

    @property
    def achieved_speed(self) -> float:
        """Simulated seconds served per host second while a host scanned (the unit is
        silent otherwise): ``clock.speed`` when the pump kept up, less when it fell behind."""
        with self._lock:
            served, asked = self._scanned
            served += self._emit_from - self._scan_from
            asked += self._pumped_to - self._scan_from
        return self.clock.speed * served / asked if asked > 0 else self.clock.speed

    def _start_scan(self, now: float, stream: PacketStream) -> None:
        served, asked = self._scanned  # close the previous scan's account
        self._scanned = (
            served + self._emit_from - self._scan_from, asked + self._pumped_to - self._scan_from
        )
        self._emit_from = self._scan_from = self._pumped_to = now
        self._scan = stream
        self._last_sent = None

    def _pump(self, now: float) -> None:
        """Send every packet whose emission time has come (from ``spinup_s`` after the
        motor started) and record what it decodes to (a capsule once the next is sent)."""
        self._pumped_to = now
        if not self._motor:
            self._emit_from = now
            return
        t0 = max(self._emit_from, self._motor_since + self.spinup_s)
        if now <= t0:
            return
        t1 = min(now, t0 + _MAX_BURST_S)
        self._emit_from = t1
        st = self._scan
        assert st is not None
        found = _due(st.t_end_s, st.period_s, t0, t1)
        if found is None:
            return
        idx, base = found  # packet indices and the start of the loop each belongs to (s)
        packets = st.packets[idx]
        if st.express and self._last_sent is None:
            packets = packets.copy()  # a scan's first capsule: S flag set, checksum follows
            packets[0, 3] |= 0x80  # (byte 3's bit 7 is the checksum's bit 7, in byte 1)
            packets[0, 1] ^= 0x08
        host_ns = time.monotonic_ns()
        written = self.port.send(packets.tobytes())
        sent = (np.arange(idx.size) + 1) * st.packets.shape[1] <= written
        prev = self._last_sent
        self._last_sent = (int(idx[-1]), bool(sent[-1]), float(base[-1]))
        if not self.record_truth:
            return
        if st.express:  # packet k decodes with packet k + 1's start angle
            if prev is not None:
                idx = np.concatenate(([prev[0]], idx))
                sent = np.concatenate(([prev[1]], sent))
                base = np.concatenate(([prev[2]], base))
            idx, base, sent = idx[:-1], base[:-1], sent[:-1] & sent[1:]
            if idx.size == 0:
                return
        nodes = (st.t_s[idx] + base[:, None], st.start[idx], st.quality[idx], st.angle_q6[idx],
                 st.dist_q2[idx])  # fmt: skip
        t, start, quality, angle, dist = (a.ravel() for a in nodes)
        delivered = np.repeat(sent, st.t_s.shape[1])
        self._truth.append(A1Truth(t, np.full(t.size, host_ns, np.int64), start, quality, angle,
                                   dist, delivered, np.full(t.size, st.express)))  # fmt: skip


@functools.cache
def _default_room() -> tuple[PacketStream, PacketStream]:
    """The built-in room at both scan rates (one unit, seed 0), made once per process."""
    express = RoomSamples.generate(samples_per_s=1e6 / REAL_EXPRESS_US)
    return node_stream(RoomSamples.generate()), express_stream(express)


def _due(
    t: np.ndarray, period: float, t0: float, t1: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Indices of the looped times ``t`` (period ``period`` s) that fall in ``[t0, t1)``,
    in order, and the start of the loop each falls in (s); None if none."""
    base = np.arange(np.floor(t0 / period), np.floor(t1 / period) + 1) * period
    lo = np.searchsorted(t, t0 - base, side="left")
    n = np.maximum(np.searchsorted(t, t1 - base, side="left") - lo, 0)
    if not n.any():
        return None
    return np.repeat(lo - np.cumsum(n) + n, n) + np.arange(n.sum()), np.repeat(base, n)
