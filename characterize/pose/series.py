"""The per-axis pose-error series the fit, the Monte Carlo and the validation share: axes
in :data:`POSE_AXES` order (x, y, z in m; roll, pitch, yaw in rad), times in s."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sensorbench.errors import FitError
from sensorbench.logs.model_keys import POSE_AXES

AXIS_UNITS: dict[str, str] = {
    "x": "m", "y": "m", "z": "m", "roll": "rad", "pitch": "rad", "yaw": "rad"
}

DISPLAY_UNITS: dict[str, tuple[float, str, str]] = {
    "m": (1000.0, "mm", "{:9.3f}"),
    "rad": (180.0 / math.pi, "deg", "{:9.4f}"),
    "s": (1.0, "s", "{:9.3f}"),
}
"""Stored unit → (scale, display unit, format of the scaled value) in tables and figures."""


def param_unit(axis: str, param: str) -> str:
    """Unit of a pose-error model parameter of ``axis``: s for ``tau_s``, else the axis's."""
    return "s" if param == "tau_s" else AXIS_UNITS[axis]


@dataclass
class ErrorSeries:
    """One session's aligned pose error. ``reloc`` (N,): True at the first sample of every
    relocalization segment (always at sample 0), where a new offset b is drawn; ``wrong``
    (N,): True at the first sample of every segment named a wrong relocalization
    (:func:`error_model.name_wrong`), whose offset is unknown to every fit."""

    t_s: np.ndarray  # (N,) s, strictly increasing (any origin)
    error: np.ndarray  # (N, 6) per axis in POSE_AXES order (m, rad)
    reloc: np.ndarray
    name: str = "session"
    meta: dict = field(default_factory=dict)
    wrong: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        self.t_s = np.asarray(self.t_s, dtype=np.float64)
        self.error = np.asarray(self.error, dtype=np.float64)
        self.reloc = np.asarray(self.reloc, dtype=bool).copy()
        n = self.t_s.shape[0]
        if self.t_s.ndim != 1 or n < 3:
            raise FitError(f"{self.name}: need at least 3 error samples, got {n}")
        if self.error.shape != (n, len(POSE_AXES)):
            raise FitError(f"{self.name}: error must be (N, 6), got {self.error.shape}")
        if self.reloc.shape != (n,):
            raise FitError(f"{self.name}: reloc must be (N,), got {self.reloc.shape}")
        if not np.all(np.isfinite(self.t_s)) or np.any(np.diff(self.t_s) <= 0):
            raise FitError(f"{self.name}: sample times must be finite and strictly increasing")
        if not np.all(np.isfinite(self.error)):
            raise FitError(f"{self.name}: error contains nan/inf; drop invalid samples first")
        self.reloc[0] = True
        wrong = np.asarray(self.wrong, dtype=bool)
        wrong = np.zeros(n, bool) if wrong.size == 0 else wrong
        if wrong.shape != (n,):
            raise FitError(f"{self.name}: wrong must be (N,), got {wrong.shape}")
        self.wrong = wrong & self.reloc

    @property
    def n(self) -> int:
        """Number of samples."""
        return int(self.t_s.shape[0])

    @property
    def duration_s(self) -> float:
        """Time from first to last sample, seconds."""
        return float(self.t_s[-1] - self.t_s[0])

    @property
    def segment_id(self) -> np.ndarray:
        """``(N,)`` int: index of the relocalization segment of every sample."""
        return np.cumsum(self.reloc) - 1

    @property
    def n_segments(self) -> int:
        """Number of relocalization segments."""
        return int(self.reloc.sum())

    @property
    def wrong_segments(self) -> np.ndarray:
        """``(n_segments,)`` bool: the segment is a named wrong relocalization."""
        return self.wrong[self.reloc]

    def reloc_times_s(self) -> np.ndarray:
        """Times of the relocalizations after the first sample, seconds."""
        return self.t_s[1:][self.reloc[1:]]
