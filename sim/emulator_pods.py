"""The pod microcontroller, emulated byte-exactly on a pseudo-terminal: one frame per
sample (binary or CSV, docs/PROTOCOLS.md) at its simulated time; a stall or unplug loses
that interval's frames (``seq`` runs on)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from sensorbench.drivers import pods_protocol as proto
from sensorbench.errors import SimError
from sensorbench.sim.emulator_base import PtyEmulator, Records, SimClock
from sensorbench.sim.pty import Faults, PtyPort

MAX_FRAMES_PER_WRITE = 512
TICK_S = 0.01  # host s: frames due within one tick go out in one write (a USB frame's worth)


@dataclass
class PodTruth(Records):
    """Every frame the emulator handed to the link, in order: ``index`` into the sample
    arrays (the unwrapped sequence number); the 16-bit ``seq``, 32-bit MCU time ``t_us``
    (µs) and ``counts_raw`` sent; unwrapped ``mcu_time_us`` (µs) and cumulative ``counts``
    (ticks); ``yaw_rate``, ``yaw`` as encoded (rad/s, rad; nan if none); the first byte's
    ``offset`` among the bytes the link accepted (-1 and not ``delivered`` if discarded)
    and the frame's ``length`` (bytes)."""

    index: np.ndarray
    seq: np.ndarray
    t_us: np.ndarray
    mcu_time_us: np.ndarray
    counts_raw: np.ndarray
    counts: np.ndarray
    yaw_rate: np.ndarray
    yaw: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    delivered: np.ndarray
    DTYPES = (*[np.int64] * 6, float, float, np.int64, np.int64, bool)
    WIDE = frozenset({"counts_raw", "counts"})


def encode_binary(
    seq: np.ndarray, t_us: np.ndarray, counts_raw: np.ndarray, counter_bits: int,
    yaw_rate: np.ndarray | None = None, yaw: np.ndarray | None = None,
) -> tuple[bytes, int]:  # fmt: skip
    """Binary frames for k samples at once (``seq``, ``t_us``, ``counts_raw`` reduced to
    their widths); returns (bytes, frame length)."""
    k, n_pods = counts_raw.shape
    imu = yaw_rate is not None
    width = counter_bits // 8
    fields: list[tuple] = [("sync", "u1", (2,)), ("len", "u1"), ("flags", "u1"), ("seq", "<u2"),
        ("t_us", "<u4"), ("counts", f"<u{width}", (n_pods,))]  # fmt: skip
    if imu:
        fields += [("yaw_rate", "<f4"), ("yaw", "<f4")]
    fields.append(("crc", "<u2"))
    rec = np.zeros(k, dtype=np.dtype(fields))
    rec["sync"] = (proto.SYNC0, proto.SYNC1)
    length = rec.dtype.itemsize
    rec["len"] = length - proto.HEADER_LEN - proto.CRC_LEN  # flags to the last payload byte
    rec["flags"] = proto.make_flags(n_pods, counter_bits, imu)
    rec["seq"], rec["t_us"], rec["counts"] = seq, t_us, counts_raw
    if imu:
        rec["yaw_rate"], rec["yaw"] = yaw_rate, yaw
    rows = rec.view(np.uint8).reshape(k, length)
    rec["crc"] = proto.crc16_rows(rows[:, 2 : length - 2])
    return rec.tobytes(), length


def encode_csv(
    seq: np.ndarray, t_us: np.ndarray, counts_raw: np.ndarray, counter_bits: int,
    yaw_rate: np.ndarray | None = None, yaw: np.ndarray | None = None,
) -> list[bytes]:  # fmt: skip
    """CSV lines for k samples (counters printed as signed integers of their width)."""
    half, mod = 1 << (counter_bits - 1), 1 << counter_bits
    signed = np.where(counts_raw >= half, counts_raw - mod, counts_raw)
    cols = [seq.astype(np.int64), t_us.astype(np.int64), *signed.T]
    text = [",".join(map(str, row)) for row in zip(*(c.tolist() for c in cols), strict=True)]
    if yaw_rate is not None:
        text = [
            f"{line},{r:.7g},{y:.7g}"
            for line, r, y in zip(text, yaw_rate.tolist(), yaw.tolist(), strict=True)
        ]
    return [(line + "\n").encode() for line in text]


class PodEmulator(PtyEmulator):
    """Serve the pod MCU's frames on a pty, paced by simulated time (``speed`` unless a
    ``clock`` is given): ``samples`` with ``t_s`` (s), ``mcu_time_us`` (µs, unwrapped),
    cumulative ``counts`` (int64[n, N]) and optionally ``yaw_rad``, ``yaw_rate_rad_s``,
    ``counter_bits`` (16 or 32, the default for ``counter_bits``; else 16); ``imu``: send
    the IMU fields (default: when the samples carry finite yaw); ``loop``: after the last
    sample start over, continuing time, sequence and counts."""

    def __init__(
        self,
        samples: Any,
        variant: str = "binary",
        counter_bits: int | None = None,
        imu: bool | None = None,
        link: str | None = None,
        speed: float = 1.0,
        clock: SimClock | None = None,
        faults: Faults | None = None,
        seed: int = 0,
        baud: int = proto.DEFAULT_BAUD,
        loop: bool = False,
    ) -> None:
        if variant not in proto.VARIANTS:
            raise SimError(f"pod variant must be 'binary' or 'csv', got {variant!r}")
        self.variant = variant
        self.counter_bits = int(counter_bits or getattr(samples, "counter_bits", 16))
        if self.counter_bits not in proto.COUNTER_BITS:
            raise SimError(f"counter_bits must be 16 or 32, got {self.counter_bits}")
        self._t = np.asarray(samples.t_s, dtype=np.float64)
        self._mcu_us = np.asarray(samples.mcu_time_us, dtype=np.int64)
        self._counts = np.asarray(samples.counts, dtype=np.int64)
        if self._counts.ndim != 2 or self._counts.shape[0] != self._t.size:
            raise SimError(f"counts must be (n, N) with n = {self._t.size}")
        if not 1 <= self._counts.shape[1] <= proto.MAX_PODS:
            raise SimError(f"1..{proto.MAX_PODS} pods supported, got {self._counts.shape[1]}")
        n = self._t.size
        yaw_rate = getattr(samples, "yaw_rate_rad_s", None)
        yaw = getattr(samples, "yaw_rad", None)
        self._yaw_rate = np.full(n, np.nan) if yaw_rate is None else np.asarray(yaw_rate, float)
        self._yaw = np.full(n, np.nan) if yaw is None else np.asarray(yaw, float)
        self.imu = bool(np.isfinite(self._yaw_rate).any()) if imu is None else imu
        self.n_pods = int(self._counts.shape[1])
        self.loop = loop
        dt = float(np.median(np.diff(self._t))) if n > 1 else 1.0
        self._span_s = float(self._t[-1] - self._t[0]) + dt
        self._span_us = int(self._mcu_us[-1] - self._mcu_us[0]) + round(dt * 1e6)
        self._span_counts = self._counts[-1] - self._counts[0]
        self.clock = clock or SimClock(speed)
        super().__init__(PtyPort(link=link, baud=baud, faults=faults, seed=seed))
        self._truth: list[PodTruth] = []
        self._next = 0
        self.finished = threading.Event()

    def start(self) -> PodEmulator:
        """Start serving in a thread (the MCU powers on); returns self. A host that wants
        every frame opens the tty first (pyserial flushes input on open)."""
        self._start_thread("pod-emulator")
        return self

    @property
    def achieved_speed(self) -> float:
        """Simulated seconds served per host second since the clock started (``speed`` if
        it kept up)."""
        return self.clock.achieved_speed(self._time_of(self._next))

    def _time_of(self, i: int) -> float:
        n = self._t.size
        return float(self._t[i % n]) + (i // n) * self._span_s

    def _run(self) -> None:
        n = self._t.size
        while not self._stop.is_set() and (self.loop or self._next < n):
            now = self.clock.now()
            k, rem = divmod(now - self._t[0], self._span_s)
            due = int(k) * n + int(np.searchsorted(self._t, self._t[0] + rem, side="right"))
            if not self.loop:
                due = min(due, n)
            if due > self._next:
                self._send(self._next, min(due, self._next + MAX_FRAMES_PER_WRITE))
            wake = max(self._time_of(self._next), self.clock.now() + TICK_S * self.clock.speed)
            self.clock.sleep_until(wake, self._stop)
        self.finished.set()

    def _send(self, i: int, j: int) -> None:
        idx = np.arange(i, j)
        n = self._t.size
        src, rep = idx % n, idx // n
        mcu_us = self._mcu_us[src] + rep * self._span_us
        counts = self._counts[src] + rep[:, None] * self._span_counts
        seq = idx % (1 << proto.SEQ_BITS)
        t_us = mcu_us % (1 << proto.TIME_BITS)
        raw = counts % (1 << self.counter_bits)
        rate = self._yaw_rate[src].astype(np.float32) if self.imu else None
        yaw = self._yaw[src].astype(np.float32) if self.imu else None
        if self.variant == "binary":
            data, flen = encode_binary(seq, t_us, raw, self.counter_bits, rate, yaw)
            lengths = np.full(idx.size, flen, np.int64)
        else:
            lines = encode_csv(seq, t_us, raw, self.counter_bits, rate, yaw)
            data = b"".join(lines)
            lengths = np.fromiter((len(s) for s in lines), np.int64, idx.size)
            if self.imu:
                parsed = np.array([s.split(b",")[-2:] for s in lines], dtype=np.float64)
                rate, yaw = parsed[:, 0], parsed[:, 1]
        before = self.port.stats.bytes_offered
        self.port.send(data)
        delivered = self.port.stats.bytes_offered > before
        offsets = before + np.concatenate(([0], np.cumsum(lengths)[:-1]))
        nan = np.full(idx.size, np.nan)
        rate, yaw = (nan if v is None else np.asarray(v, np.float64) for v in (rate, yaw))
        offset = offsets if delivered else np.full(idx.size, -1, np.int64)
        self._truth.append(PodTruth(idx, seq, t_us, mcu_us, raw, counts, rate, yaw, offset,
            lengths, np.full(idx.size, delivered)))  # fmt: skip
        self._next = j

    def truth(self) -> PodTruth:
        """Everything sent so far (call after :meth:`stop` for a complete record)."""
        return PodTruth.concat(list(self._truth), self.n_pods)
