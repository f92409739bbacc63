"""Relocalization segmentation of a pose-error series: from flags, or detected jumps.

A relocalization starts a new offset b. When the sensor stream carries flags
(``PoseFlag.RELOCALIZED = 1`` on the first sample after a relocalization), those are
used. Otherwise jumps are detected in the error's first differences: each axis'
differences are scaled robustly (median, 1.4826·MAD; a step across a gap longer than
the median sample period is further divided by √(gap / median period), so a
pause is not a jump), and a sample is a jump when the sum of squared scaled
differences over the six axes exceeds the χ²₆ quantile at ``alpha / N`` (a
Bonferroni level over the N steps) and the level persists: the change between the
median of the 0.5 s before it and the median of a 0.5-s window starting 0.5 s after it
(so an excursion reverting within 0.5 s is not seen) carries, along the jump's
direction, between half and twice the jump (a step, not a spike, a reverting
excursion or a ramp whose one-sample steps are small against its level change; see
:func:`detect_jumps`). Detections closer than ``min_separation`` samples are merged
(the largest one kept).

Both results are reported (:class:`Segmentation`) with the method that was used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import chdtri

RELOCALIZED_FLAG = 1
REVERT_S = 0.5
"""Excursions that revert within this time (s) are not steps."""
WINDOW_S = 0.5
"""Duration (s) of the windows whose medians give the level before and after a step."""


@dataclass
class Segmentation:
    """Relocalization starts (bool mask over samples) and how they were found."""

    reloc: np.ndarray
    method: str  # "flags", "detected" or "none"
    flagged_times_s: np.ndarray
    detected_times_s: np.ndarray

    @property
    def times_s(self) -> np.ndarray:
        """Times of the relocalizations used (excluding the first sample)."""
        return self.flagged_times_s if self.method == "flags" else self.detected_times_s

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "method": self.method,
            "n_segments": int(self.reloc.sum()),
            "flagged_times_s": self.flagged_times_s.tolist(),
            "detected_times_s": self.detected_times_s.tolist(),
        }


def detect_jumps(
    t_s: np.ndarray,
    error: np.ndarray,
    alpha: float = 1e-3,
    min_separation: int = 5,
    revert_s: float = REVERT_S,
    window_s: float = WINDOW_S,
) -> np.ndarray:
    """Bool mask (N,): True at the first sample after each detected step.

    A candidate is a one-sample change J (six axes, scaled robustly) beyond the χ²₆
    quantile at ``alpha / N``. It is a step when the level change L between the median
    of the ``window_s`` before it and the median of the ``window_s`` that starts
    ``revert_s`` after it (so an excursion that reverts within ``revert_s`` is not
    seen) carries, along J's direction, between half and twice J:
    ``0.5 ≤ <L, J> / <J, J> ≤ 2`` in scaled units. Below: it did not persist (a spike
    or a reverting excursion); above: the level moved mostly by other samples (a ramp,
    whose one-sample steps are small against its level change). A candidate whose
    windows leave the series is kept when the available samples satisfy the same test.
    """
    t_s = np.asarray(t_s, dtype=np.float64)
    e = np.asarray(error, dtype=np.float64)
    d = np.diff(e, axis=0)
    out = np.zeros(t_s.size, dtype=bool)
    if d.shape[0] < 10:
        return out
    dt = np.diff(t_s)
    d = d / np.sqrt(np.maximum(dt / np.median(dt), 1.0))[:, None]
    med = np.median(d, axis=0)
    mad = 1.4826 * np.median(np.abs(d - med), axis=0)
    mad = np.where(mad > 0, mad, np.inf)
    stat = np.sum(((d - med) / mad) ** 2, axis=1)
    thr = chdtri(d.shape[1], alpha / d.shape[0])  # χ² quantile, upper tail alpha/N
    cand = []
    for i in np.flatnonzero(stat > thr):
        b0 = np.searchsorted(t_s, t_s[i] - window_s)
        a0 = np.searchsorted(t_s, t_s[i + 1] + revert_s)
        a1 = np.searchsorted(t_s, t_s[i + 1] + revert_s + window_s, side="right")
        after = e[a0:a1] if a1 > a0 else e[i + 1 : i + 2]
        level = (np.median(after, axis=0) - np.median(e[b0 : i + 1], axis=0)) / mad
        jump = (e[i + 1] - e[i]) / mad
        r = float(np.dot(level, jump) / np.dot(jump, jump))
        if 0.5 <= r <= 2.0:
            cand.append(i)
    cand = np.array(cand, dtype=int)
    kept: list[int] = []
    for i in cand[np.argsort(-stat[cand])]:
        if all(abs(i - j) >= min_separation for j in kept):
            kept.append(int(i))
    out[np.array(kept, dtype=int) + 1] = True
    return out


def segment(
    t_s: np.ndarray,
    error: np.ndarray,
    flags: np.ndarray | None = None,
    alpha: float = 1e-3,
) -> Segmentation:
    """Segment by the stream's RELOCALIZED flags when present, else by detected jumps."""
    t_s = np.asarray(t_s, dtype=np.float64)
    detected = detect_jumps(t_s, error, alpha)
    det_times = t_s[1:][detected[1:]]
    if flags is not None and np.any(np.asarray(flags)[1:] & RELOCALIZED_FLAG):
        reloc = (np.asarray(flags) & RELOCALIZED_FLAG).astype(bool)
        method = "flags"
    elif detected.any():
        reloc = detected.copy()
        method = "detected"
    else:
        reloc = np.zeros(t_s.size, dtype=bool)
        method = "none"
    flagged = (
        t_s[1:][(np.asarray(flags)[1:] & RELOCALIZED_FLAG).astype(bool)]
        if flags is not None
        else np.zeros(0)
    )
    reloc[0] = True
    return Segmentation(reloc, method, flagged, det_times)
