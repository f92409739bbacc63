"""The sliding-window NIS monitor fed frame chunk by frame chunk.

:class:`NisMonitorStream` gives, chunk after chunk, the flags
:func:`~sensorbench.fusion.consistency.nis_monitor` gives over the whole series: the
window mean of the last ``window`` clipped NIS values (the running sum continued from
its carried value, so every difference is the one the whole series takes), the flag
of the latest update held for fewer than ``window`` frames, and the frames where it
rises and falls (``tests/test_fusion_monitor_stream.py``). The window looks back only,
so the monitor is causal; the pods-against-IMU check is not (its spread is the
session's) and has no stream.
"""

from __future__ import annotations

import math

import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.consistency import window_threshold

SCALAR_MAX = 8
"""Pushes of at most this many frames take the scalar path."""


class NisMonitorStream:
    """One axis's monitor over chunks of frames (module docstring).

    Args:
        gate: the filter's NIS gate; each NIS is clipped to it.
        window: updates per window.
        level: one-sided level of the threshold under a consistent filter.
        tau: integrated autocorrelation time of the clipped NIS
            (:func:`~sensorbench.fusion.consistency.window_threshold`; 1 = independent).
    """

    def __init__(
        self, gate: float, window: int = 50, level: float = 0.999, tau: float = 1.0
    ) -> None:
        if window < 2 or not 0 < level < 1:
            raise FusionError(f"monitor needs window >= 2 and 0 < level < 1, got {window}, {level}")
        self.gate = float(gate)
        self.window = int(window)
        self.threshold = window_threshold(self.gate, self.window, float(level), tau)
        self.frames = 0
        self.degraded = False
        self._sums = np.zeros(1)  # the running sum's last `window` + 1 values
        self._n_updates = 0
        self._flag = False  # the latest update's window above the threshold
        self._age = -1  # frames since the latest update (−1: none yet)

    def push(self, nis: np.ndarray) -> tuple[np.ndarray, list[int], list[int]]:
        """The NIS of the next frames (nan: no update at that frame).

        Returns:
            (the frames' degraded flags, frame indices where the flag rose, where it
            fell; frames counted from the first pushed, 0).
        """
        x = np.asarray(nis, dtype=float)
        onsets: list[int] = []
        clears: list[int] = []
        if x.size <= SCALAR_MAX:
            flags_ = [self._push_one(v, onsets, clears) for v in x.tolist()]
            return np.array(flags_, dtype=bool), onsets, clears
        has = np.isfinite(x)
        vals = np.minimum(x[has], self.gate)
        n0 = self._n_updates
        n1 = n0 + vals.size
        # update j (0-based, overall) completes a window when j >= window - 1: its mean is
        # (c[j + 1] - c[j + 1 - window]) / window, c the running sum with c[0] = 0
        first_sum = n0 - self._sums.size + 1  # index in c of self._sums[0]
        sums = np.cumsum(np.concatenate([self._sums[-1:], vals]))[1:]
        all_sums = np.concatenate([self._sums, sums])
        j = np.arange(n0, n1)
        full = j >= self.window - 1
        hi = j + 1 - first_sum
        lo = np.clip(j + 1 - self.window - first_sum, 0, None)
        wmean = np.full(vals.size, np.nan)
        wmean[full] = (all_sums[hi[full]] - all_sums[lo[full]]) / self.window
        flags = wmean > self.threshold
        out = np.zeros(x.size, dtype=bool)
        u = 0
        for f in range(x.size):
            if has[f]:
                self._flag = bool(flags[u])
                self._age = 0
                u += 1
            elif self._age >= 0:
                self._age += 1
            now = self._age >= 0 and self._flag and self._age < self.window
            if now != self.degraded:
                (onsets if now else clears).append(self.frames + f)
                self.degraded = now
            out[f] = now
        self._n_updates = n1
        self._sums = all_sums[-(self.window + 1) :]
        self.frames += x.size
        return out, onsets, clears

    def _push_one(self, nis: float, onsets: list[int], clears: list[int]) -> bool:
        """:meth:`push` of one frame in scalar arithmetic (a live step holds one frame or a
        few: numpy's per-call cost would dominate): the same sums, in the same order, as
        the vectorised path; the frame's flag, its rise or fall appended."""
        if math.isfinite(nis):
            sums = self._sums
            total = float(sums[-1]) + min(nis, self.gate)
            full = self._n_updates >= self.window - 1
            lo = max(sums.size - self.window, 0)  # the window's start in sums + [total]
            self._flag = full and (total - float(sums[lo])) / self.window > self.threshold
            self._age = 0
            self._n_updates += 1
            self._sums = np.append(sums[-self.window :], total)
        elif self._age >= 0:
            self._age += 1
        now = self._age >= 0 and self._flag and self._age < self.window
        if now != self.degraded:
            (onsets if now else clears).append(self.frames)
            self.degraded = now
        self.frames += 1
        return now
