"""Encoder frame times for the filters, computed causally: the same live and in replay.

:class:`FrameClock` times each frame ``anchor + slope·device + c`` (s), the anchor the
least delayed frame of an epoch's first :data:`WARMUP_S`, c slewing after ``host_ns``
(docs/PODS.md § "Frame times of the filters"). Invariant: the arithmetic is scalar and
sequential, so any split of the frames into pushes gives the same times to the last bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sensorbench.logs import NO_DEVICE_TIME

WARMUP_S = 1.0
"""Device time (host seconds at the nominal slope) held before an epoch's anchor is set."""
MAX_SLEW = 5e-4
"""Largest rate of the correction towards ``host_ns`` (s per s): 500 ppm, five times a
crystal's tolerance (:data:`~sensorbench.fusion.pod_drive.MCU_CLOCK_TOLERANCE_PPM`)."""
TAU_S = 10.0
"""Time constant (host s) of the loop that follows ``host_ns``."""
REANCHOR_S = 0.5
"""Distance (host s) from ``host_ns`` beyond which the clock starts a new epoch."""


@dataclass
class FrameClock:
    """Causal frame times (module docstring); feed frames with :meth:`push`.

    Args:
        ref_ns: host time (ns) the returned times are relative to.
        slope: host seconds per device second (the stream's ``clock_nominal_slope``:
            1.0 for hardware, 1/N for an N× emulator).
    """

    ref_ns: int
    slope: float = 1.0
    _mode: str = "none"  # "none" (no epoch), "warm" (holding), "run"
    _d0: int = 0  # device ns at the epoch's start
    _held: list[tuple[int, float, float]] = field(default_factory=list)  # (index, h, σ)
    _anchor: float = 0.0
    _corr: float = 0.0
    _sigma: float = 0.0
    _last_d: int = 0
    _next: int = 0  # index of the next frame pushed

    def push(self, host_ns: np.ndarray, device_ns: np.ndarray) -> tuple[list[int], list[float]]:
        """Add frames (host and device ns, int64); return the frames now timed.

        Returns:
            (indices of the timed frames, counting every frame ever pushed from 0;
            their times in s relative to ``ref_ns``), in frame order.
        """
        idx: list[int] = []
        out: list[float] = []
        for h_ns, d_ns in zip(
            np.asarray(host_ns).tolist(), np.asarray(device_ns).tolist(), strict=True
        ):
            self._frame(self._next, (h_ns - self.ref_ns) * 1e-9, d_ns, idx, out)
            self._next += 1
        return idx, out

    def flush(self) -> tuple[list[int], list[float]]:
        """Time the frames still held in a warm-up (the end of the stream)."""
        idx: list[int] = []
        out: list[float] = []
        self._settle(idx, out)
        return idx, out

    def _frame(self, i: int, h: float, d: int, idx: list[int], out: list[float]) -> None:
        if d == NO_DEVICE_TIME:
            self._settle(idx, out)
            self._mode = "none"
            idx.append(i)
            out.append(h)
            return
        if self._mode == "warm":
            _, h_last, s_last = self._held[-1]
            sigma = self.slope * (d - self._d0) * 1e-9
            if d <= self._last_d or abs(h - h_last - (sigma - s_last)) > REANCHOR_S:
                self._settle(idx, out)  # the clock restarted or strayed: a new epoch
                self._begin(i, h, d)
                return
            self._held.append((i, h, sigma))
            self._last_d = d
            if sigma >= WARMUP_S:
                self._settle(idx, out)
            return
        if self._mode == "run" and d > self._last_d:
            sigma = self.slope * (d - self._d0) * 1e-9
            step = sigma - self._sigma
            base = self._anchor + sigma
            err = h - (base + self._corr)
            if abs(err) <= REANCHOR_S:
                limit = MAX_SLEW * step
                self._corr += min(max(err * min(1.0, step / TAU_S), -limit), limit)
                self._sigma = sigma
                self._last_d = d
                idx.append(i)
                out.append(base + self._corr)
                return
        self._begin(i, h, d)

    def _begin(self, i: int, h: float, d: int) -> None:
        """A new epoch whose warm-up starts with this frame."""
        self._mode = "warm"
        self._d0 = d
        self._last_d = d
        self._held = [(i, h, 0.0)]

    def _settle(self, idx: list[int], out: list[float]) -> None:
        """End a warm-up: anchor the epoch and time the frames held."""
        if self._mode != "warm":
            return
        self._anchor = min(h - sigma for _, h, sigma in self._held)
        self._corr = 0.0
        self._sigma = self._held[-1][2]
        for i, _, sigma in self._held:
            idx.append(i)
            out.append(self._anchor + sigma)
        self._held = []
        self._mode = "run"


def stamp_variance(t_s: np.ndarray) -> float:
    """Variance (s²) of white errors in frame times ``t_s`` (s): (1.4826·MAD)²/6 of their
    second differences (noise variance 6σ²), the triples around a dropped frame (a step
    over 1.5× the median) left out; 0 with fewer than 10 triples. An upper bound: it
    cannot tell receive jitter from jitter of the sampling itself."""
    t = np.asarray(t_s, dtype=float)
    if t.size < 12:
        return 0.0
    h = np.diff(t)
    short = h < 1.5 * np.median(h)
    d2 = (h[1:] - h[:-1])[short[1:] & short[:-1]]
    if d2.size < 10:
        return 0.0
    mad = float(np.median(np.abs(d2 - np.median(d2))))
    return (1.4826 * mad) ** 2 / 6.0
