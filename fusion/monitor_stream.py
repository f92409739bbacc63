"""The sliding-window NIS monitor: :class:`NisMonitorStream` fed frame chunk by frame chunk
(live), :func:`nis_monitor` over a whole series (replay) through the same class, so any
chunks give the same flags, onsets and clears. The pods-against-IMU check is not causal
(its spread is the session's): replay runs it whole.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass

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

    def push(self, nis: np.ndarray | list[float]) -> tuple[list[bool], list[int], list[int]]:
        """The NIS of the next frames (nan: no update at that frame).

        Returns:
            (the frames' degraded flags, frame indices where the flag rose, where it
            fell; frames counted from the first pushed, 0).
        """
        onsets: list[int] = []
        clears: list[int] = []
        flags = []
        sums = self._sums
        for v in nis if isinstance(nis, list) else np.asarray(nis, dtype=float).tolist():
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


@dataclass
class MonitorResult:
    """Output of the NIS monitor of one axis.

    Attributes:
        degraded: (K,) True where the window ending at the latest update (at or before each
            frame, and fewer than ``window`` frames before it) is above the threshold.
        threshold: the window mean's ``level`` quantile for a consistent filter.
        onsets, clears: update indices where the flag rises and falls.
    """

    degraded: np.ndarray
    threshold: float
    onsets: np.ndarray
    clears: np.ndarray


def nis_monitor(
    nis: np.ndarray, gate: float, window: int = 50, level: float = 0.999, tau: float = 1.0
) -> MonitorResult:
    """:class:`NisMonitorStream` (same arguments) over one axis's whole NIS series (K,),
    rejected updates included, nan = no update at that frame.

    Raises:
        FusionError: window < 2 or level outside (0, 1).
    """
    mon = NisMonitorStream(gate, window, level, tau)
    flags, onsets, clears = mon.push(nis)
    return MonitorResult(
        np.array(flags, dtype=bool), mon.threshold, np.array(onsets, int), np.array(clears, int)
    )
