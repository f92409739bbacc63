"""Encoder frames as filter input, batch by batch (:class:`OdometryStream`): frame times on
the causal frame clock (:mod:`~sensorbench.fusion.frame_clock`), tick increments between
consecutive kept frames (a frame not after the previous kept one is dropped; wrapping
counters unwrapped) and the IMU's yaw increments. Every quantity depends only on the
frames before it, so ``replay`` (a whole stream) and ``live`` (each batch) get the same
numbers to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.frame_clock import FrameClock
from sensorbench.logs import EncoderBatch


@dataclass(frozen=True)
class OdometryFrames:
    """Kept encoder frames after the stream's first, in order.

    Attributes:
        t_s: (k,) frame times (s) relative to the stream's ``t0_ns``.
        dn: (k, N) tick increments from the kept frame before each.
        imu_dtheta: (k,) IMU yaw increment over each step (rad, wrapped to [−π, π]),
            nan where either end has no yaw.
        yaw: (k,) the frames' IMU yaw (rad), nan where none.
    """

    t_s: np.ndarray
    dn: np.ndarray
    imu_dtheta: np.ndarray
    yaw: np.ndarray

    def __len__(self) -> int:
        return int(self.t_s.size)

    @classmethod
    def empty(cls, n_counts: int) -> OdometryFrames:
        """No frames."""
        return cls(np.empty(0), np.empty((0, n_counts)), np.empty(0), np.empty(0))

    @classmethod
    def concat(cls, parts: list[OdometryFrames], n_counts: int) -> OdometryFrames:
        """Consecutive parts as one."""
        if not parts:
            return cls.empty(n_counts)
        return cls(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)))


def wrapped_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a − b`` of angles (rad) wrapped as :func:`numpy.unwrap` wraps a step: to
    [−π, π), +π kept for a positive step of exactly π."""
    dd = np.asarray(a, float) - np.asarray(b, float)
    out = np.mod(dd + np.pi, 2.0 * np.pi) - np.pi
    return np.where((out == -np.pi) & (dd > 0), np.pi, out)


class OdometryStream:
    """Encoder batches in, filter input out (module docstring).

    Args:
        n_counts: counters per frame.
        nominal_slope: host seconds per device second (the stream's
            ``clock_nominal_slope``; None: 1.0).
        wrap_bits: unwrap counters that wrap at ``2**wrap_bits``; None when the stream
            stores cumulative counts (every recording of ours).
    """

    def __init__(
        self, n_counts: int = 3, nominal_slope: float | None = None, wrap_bits: int | None = None
    ) -> None:
        if wrap_bits is not None and not 2 <= wrap_bits <= 63:
            raise FusionError(f"counter width must be 2..63 bits, got {wrap_bits}")
        self.n_counts = int(n_counts)
        self.slope = 1.0 if nominal_slope is None else float(nominal_slope)
        self.wrap_bits = wrap_bits
        self.t0_ns: int | None = None
        self.start_t_s: float | None = None
        self.start_yaw = np.nan
        self.dropped = 0
        self._clock: FrameClock | None = None
        self._base = 0  # index of the first frame in the buffers
        self._counts = np.empty((0, self.n_counts), dtype=np.int64)
        self._yaw = np.empty(0)
        self._last_t = -np.inf
        self._last_raw: np.ndarray | None = None
        self._last_counts: np.ndarray | None = None
        self._last_yaw = np.nan

    @classmethod
    def for_stream(cls, attrs: Mapping[str, Any], n_counts: int) -> OdometryStream:
        """The stream for an encoder stream with these attributes."""
        bits = attrs.get("counter_bits")
        wrapped = bool(attrs.get("counts_wrapped", False)) and bool(bits)
        slope = attrs.get("clock_nominal_slope")
        return cls(
            n_counts,
            None if slope is None else float(slope),
            int(bits) if wrapped and bits is not None else None,
        )

    def push(self, batch: EncoderBatch) -> OdometryFrames:
        """Add the next batch; return the frames it lets out (maybe none, maybe earlier
        frames held by the clock's warm-up)."""
        if batch.counts.shape[1] != self.n_counts:
            raise FusionError(
                f"encoder batch has {batch.counts.shape[1]} counters, the stream {self.n_counts}"
            )
        if len(batch) == 0:
            return OdometryFrames.empty(self.n_counts)
        if self._clock is None:
            self.t0_ns = int(batch.host_ns[0])
            self._clock = FrameClock(self.t0_ns, self.slope)
        idx, t = self._clock.push(batch.host_ns, batch.device_ns)
        few = len(idx) == len(batch) <= 8 and self._counts.shape[0] == 0
        if few and self._last_counts is not None and self.wrap_bits is None:
            # nothing held and every frame timed at once (a live read): no buffers
            self._base += len(idx)
            return self._few(t, batch.counts, batch.yaw, self._last_counts)
        self._counts = np.vstack([self._counts, batch.counts])
        self._yaw = np.concatenate([self._yaw, batch.yaw])
        return self._take(np.asarray(idx, dtype=np.int64), np.asarray(t, dtype=float))

    def flush(self) -> OdometryFrames:
        """The frames still held (the end of the stream)."""
        if self._clock is None:
            return OdometryFrames.empty(self.n_counts)
        idx, t = self._clock.flush()
        return self._take(np.asarray(idx, dtype=np.int64), np.asarray(t, dtype=float))

    def _take(self, idx: np.ndarray, t: np.ndarray) -> OdometryFrames:
        """Keep, unwrap and difference the timed frames ``idx`` (times ``t``, s)."""
        if idx.size == 0:
            return OdometryFrames.empty(self.n_counts)
        local = idx - self._base
        counts, yaw = self._counts[local], self._yaw[local]
        used = int(local[-1]) + 1
        self._counts, self._yaw = self._counts[used:], self._yaw[used:]
        self._base += used
        # strictly after the previous kept frame (times are sequential: a running max)
        prev = np.maximum.accumulate(np.concatenate([[self._last_t], t]))[:-1]
        keep = t > prev
        self.dropped += int(np.count_nonzero(~keep))
        t, counts, yaw = t[keep], counts[keep], yaw[keep]
        if t.size == 0:
            return OdometryFrames.empty(self.n_counts)
        self._last_t = float(t[-1])
        raw = counts
        if self.wrap_bits is not None:
            counts = self._unwrap(raw)
        if self._last_counts is None:  # the first frame: the filters start there
            self.start_t_s, self.start_yaw = float(t[0]), float(yaw[0])
            self._last_counts, self._last_yaw = counts[0], float(yaw[0])
            self._last_raw = raw[0]
            t, counts, yaw, raw = t[1:], counts[1:], yaw[1:], raw[1:]
            if t.size == 0:
                return OdometryFrames.empty(self.n_counts)
        prev_counts = np.vstack([self._last_counts[None, :], counts[:-1]])
        prev_yaw = np.concatenate([[self._last_yaw], yaw[:-1]])
        dn = (counts - prev_counts).astype(float)
        both = np.isfinite(yaw) & np.isfinite(prev_yaw)
        imu = np.where(both, wrapped_difference(yaw, prev_yaw), np.nan)
        self._last_counts, self._last_yaw, self._last_raw = counts[-1], float(yaw[-1]), raw[-1]
        return OdometryFrames(t, dn, imu, yaw)

    def _few(
        self, t: list[float], counts: np.ndarray, yaw: np.ndarray, last_counts: np.ndarray
    ) -> OdometryFrames:
        """:meth:`_take` of a few timed frames after the first (a live read) in scalars, the
        same bits (times ``t`` s, ``counts`` (k, N) after ``last_counts``, ``yaw`` rad)."""
        ts: list[float] = []
        dn: list[list[float]] = []
        imu: list[float] = []
        keep: list[int] = []
        last_t, last_yaw, last = self._last_t, self._last_yaw, last_counts.tolist()
        for i, (t_s, y, c) in enumerate(zip(t, yaw.tolist(), counts.tolist(), strict=True)):
            if not t_s > last_t:
                continue
            d = y - last_yaw  # wrapped_difference, or nan without both yaws
            w = (d + math.pi) % (2.0 * math.pi) - math.pi if math.isfinite(d) else math.nan
            imu.append(math.pi if w == -math.pi and d > 0 else w)
            dn.append([float(a - b) for a, b in zip(c, last, strict=True)])
            ts.append(t_s)
            keep.append(i)
            last_t, last_yaw, last = t_s, y, c
        self.dropped += len(t) - len(keep)
        if not keep:
            return OdometryFrames.empty(self.n_counts)
        self._last_t, self._last_yaw = last_t, last_yaw
        self._last_counts = self._last_raw = counts[keep[-1]]
        return OdometryFrames(np.array(ts), np.array(dn), np.array(imu), yaw[keep])

    def _unwrap(self, raw: np.ndarray) -> np.ndarray:
        """Cumulative counts from wrapping counters, continuing from the last frame."""
        bits = self.wrap_bits
        assert bits is not None
        modulus = np.int64(1) << np.int64(bits)
        half = modulus >> np.int64(1)
        if self._last_raw is None:
            first = ((raw[:1] + half) % modulus) - half
            steps = ((np.diff(raw, axis=0) + half) % modulus) - half
            return np.concatenate([first, first + np.cumsum(steps, axis=0)], axis=0)
        assert self._last_counts is not None
        seq = np.vstack([self._last_raw[None, :], raw])
        steps = ((np.diff(seq, axis=0) + half) % modulus) - half
        return self._last_counts + np.cumsum(steps, axis=0)
