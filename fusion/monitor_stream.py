"""The sliding-window NIS monitor fed frame chunk by frame chunk: :class:`NisMonitorStream`
gives, chunk after chunk, the flags, onsets and clears
:func:`~sensorbench.fusion.consistency.nis_monitor` gives over the whole series (the
running sum continued from its carried value). The pods-against-IMU check is not causal
(its spread is the session's) and has no stream.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.consistency import window_threshold


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
        self._sums = collections.deque([0.0], self.window + 1)  # the running sum's last values
        self._n_updates = 0
        self._flag = False  # the latest update's window above the threshold
        self._age = -1  # frames since the latest update (−1: none yet)

    def push(self, nis: np.ndarray) -> tuple[list[bool], list[int], list[int]]:
        """The NIS of the next frames (nan: no update at that frame).

        Returns:
            (the frames' degraded flags, frame indices where the flag rose, where it
            fell; frames counted from the first pushed, 0).
        """
        onsets: list[int] = []
        clears: list[int] = []
        flags = []
        sums = self._sums
        for v in np.asarray(nis, dtype=float).tolist():
            if math.isfinite(v):
                total = sums[-1] + min(v, self.gate)
                full = self._n_updates >= self.window - 1
                lo = max(len(sums) - self.window, 0)  # the window's start in sums + [total]
                self._flag = full and (total - sums[lo]) / self.window > self.threshold
                self._age = 0
                self._n_updates += 1
                sums.append(total)
            elif self._age >= 0:
                self._age += 1
            now = self._age >= 0 and self._flag and self._age < self.window
            if now != self.degraded:
                (onsets if now else clears).append(self.frames)
                self.degraded = now
            self.frames += 1
            flags.append(now)
        return flags, onsets, clears
