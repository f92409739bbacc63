"""Relocalization segmentation of a pose-error series: from flags, or detected jumps.

A relocalization starts a new offset b. When the sensor stream carries flags
(``PoseFlag.RELOCALIZED = 1`` on the first sample after a relocalization), those are
used. Otherwise jumps are detected in the error's first differences: each axis'
differences are scaled robustly (median, 1.4826·MAD; a step across a gap longer than
the median sample period is further divided by √(gap / median period), so a
pause is not a jump), and a sample is a jump when the sum of squared scaled
differences over the six axes exceeds the χ²₆ quantile at ``alpha / N`` (a
Bonferroni level over the N steps) and the level change between the medians of
``persist`` samples before and after keeps at least half the jump's amplitude (a
step, not a one-sample spike). Detections closer than ``min_separation`` samples are merged
(the largest one kept).

Both results are reported (:class:`Segmentation`) with the method that was used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import chdtri

RELOCALIZED_FLAG = 1


@dataclass
class Segmentation:
    """Relocalization starts (bool mask over samples) and how they were found."""

    reloc: np.ndarray
    method: str  # "flags", "detected" or "none"
    flagged_times_s: np.ndarray
    detected_times_s: np.ndarray

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
    persist: int = 3,
) -> np.ndarray:
    """Bool mask (N,): True at the first sample after each detected jump."""
    t_s = np.asarray(t_s, dtype=np.float64)
    d = np.diff(np.asarray(error, dtype=np.float64), axis=0)
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
    # a jump must persist (a step, not a spike): the level change between the
    # medians of ``persist`` samples before and after keeps half its amplitude
    # (a quarter of its squared scaled size)
    e = np.asarray(error, dtype=np.float64)
    n = e.shape[0]
    cand = []
    for i in np.flatnonzero(stat > thr):
        before = e[max(0, i + 1 - persist) : i + 1]
        after = e[i + 1 : min(n, i + 1 + persist)]
        level = np.median(after, axis=0) - np.median(before, axis=0)
        if np.sum(((level - med) / mad) ** 2) > 0.25 * stat[i]:
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
