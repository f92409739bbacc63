"""Relocalization segmentation of a pose-error series: from ``PoseFlag.RELOCALIZED`` flags,
or persistent jumps detected in the error (:func:`detect_jumps`).
docs/POSE_ERROR.md ("Relocalization segments")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import chdtri

RELOCALIZED_FLAG = 1
JUMP_ALPHA = 0.05
"""Level of a one-sample jump over a series (Bonferroni over its N steps): loose, since the
persistence test rejects the noise it lets through (docs/POSE_ERROR.md)."""
REVERT_S = 0.5
"""Excursions that revert within this time (s) are not steps."""
WINDOW_S = 0.5
"""Duration (s) of the windows whose means give the level before and after a step."""
MIN_SEPARATION = 5  # fewest samples between two detected steps (the larger one is kept)
LEVEL_ALPHA = 0.01
"""A step's level change must exceed the χ²₆ quantile at this level, scaled by the
robust spread (median, 1.4826·MAD) of the same level change at every sample."""


@dataclass
class Segmentation:
    """Relocalization starts (bool mask over samples) and how they were found."""

    reloc: np.ndarray
    method: str  # "flags", "detected" or "none"
    flagged_times_s: np.ndarray
    detected_times_s: np.ndarray
    offset_sigma_s: float = float("nan")  # time offset's standard error used for stability
    unstable_times_s: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "method": self.method,
            "n_segments": int(self.reloc.sum()),
            "flagged_times_s": self.flagged_times_s.tolist(),
            "detected_times_s": self.detected_times_s.tolist(),
            "offset_sigma_s": self.offset_sigma_s,
            "unstable_detected_times_s": self.unstable_times_s.tolist(),
        }


def detect_jumps(t_s: np.ndarray, error: np.ndarray) -> np.ndarray:
    """Bool mask (N,): True at the first sample after each detected step (a one-sample jump
    at ``JUMP_ALPHA / N`` whose level persists across :data:`REVERT_S`/:data:`WINDOW_S`;
    near either end, where a window is empty, the level change is the jump itself).
    docs/POSE_ERROR.md."""
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
    thr = chdtri(d.shape[1], JUMP_ALPHA / d.shape[0])  # χ² quantile, upper tail alpha/N
    level = _level_changes(t_s, e)
    ok = np.all(np.isfinite(level), axis=1)
    lmed = np.median(level[ok], axis=0) if ok.any() else np.zeros(e.shape[1])
    lmad = 1.4826 * np.median(np.abs(level[ok] - lmed), axis=0) if ok.any() else mad
    lmad = np.where(lmad > 0, lmad, np.inf)
    level_thr = chdtri(e.shape[1], LEVEL_ALPHA)
    cand = []
    for i in np.flatnonzero(stat > thr):
        lv = level[i] if ok[i] else e[i + 1] - e[i]
        jump = (e[i + 1] - e[i]) / mad
        r = float(np.dot(lv / mad, jump) / np.dot(jump, jump))
        if 0.5 <= r <= 2.0 and np.sum(((lv - lmed) / lmad) ** 2) > level_thr:
            cand.append(i)
    cand = np.array(cand, dtype=int)
    kept: list[int] = []
    for i in cand[np.argsort(-stat[cand])]:
        if all(abs(i - j) >= MIN_SEPARATION for j in kept):
            kept.append(int(i))
    out[np.array(kept, dtype=int) + 1] = True
    return out


def _level_changes(t_s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``(N-1, A)``: mean over the window after each step minus the window before (nan if empty).

    Step i is between samples i and i+1; the windows are ``[t_i − REVERT_S − WINDOW_S,
    t_i − REVERT_S]`` and ``[t_{i+1} + REVERT_S, t_{i+1} + REVERT_S + WINDOW_S]``."""
    c = np.vstack([np.zeros((1, e.shape[1])), np.cumsum(e, axis=0)])
    b0 = np.searchsorted(t_s, t_s[:-1] - REVERT_S - WINDOW_S)
    b1 = np.searchsorted(t_s, t_s[:-1] - REVERT_S, side="right")
    a0 = np.searchsorted(t_s, t_s[1:] + REVERT_S)
    a1 = np.searchsorted(t_s, t_s[1:] + REVERT_S + WINDOW_S, side="right")
    nb, na = (b1 - b0)[:, None], (a1 - a0)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        before = np.where(nb > 0, (c[b1] - c[b0]) / nb, np.nan)
        after = np.where(na > 0, (c[a1] - c[a0]) / na, np.nan)
    return after - before


def segment(t_s: np.ndarray, error: np.ndarray, flags: np.ndarray | None = None) -> Segmentation:
    """Segment by the stream's RELOCALIZED flags when present, else by detected jumps."""
    t_s = np.asarray(t_s, dtype=np.float64)
    detected = detect_jumps(t_s, error)
    det_times = t_s[1:][detected[1:]]
    marked = None if flags is None else (np.asarray(flags) & RELOCALIZED_FLAG) > 0
    if marked is not None and marked[1:].any():
        reloc, method = marked.copy(), "flags"
    elif detected.any():
        reloc, method = detected.copy(), "detected"
    else:
        reloc, method = np.zeros(t_s.size, dtype=bool), "none"
    flagged = np.zeros(0) if marked is None else t_s[1:][marked[1:]]
    reloc[0] = True
    return Segmentation(reloc, method, flagged, det_times)


def unstable_detections(
    base_s: np.ndarray, shifted_s: list[np.ndarray], tolerance_s: float
) -> np.ndarray:
    """Detection times (s) that do not survive a change of the time offset.

    ``base_s``: detections at the estimated offset; ``shifted_s``: detections with the
    offset moved (e.g. by ±2σ). Returned, sorted: every base detection missing (no
    detection within ``tolerance_s``) from any shifted run, and every shifted
    detection with no base detection within ``tolerance_s``."""
    def far(x: float, times: np.ndarray) -> bool:
        return times.size == 0 or np.min(np.abs(times - x)) > tolerance_s

    out = [float(x) for x in base_s if any(far(x, sh) for sh in shifted_s)]
    out += [float(x) for sh in shifted_s for x in sh if far(x, base_s)]
    return np.unique(np.round(np.array(out), 9))
