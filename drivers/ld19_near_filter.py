"""The LD19/LD06 official SDK's "near filter", reimplemented with numpy.

What the vendor SDK (``Tofbf::NearFilter``) does with one turn:

1. points under 5 m are clustered: sorted by angle, a new cluster starts where the
   angular gap exceeds two sample steps (``speed / 4500 samples/s * 2`` deg) or the
   range jumps by more than 3 % of the previous point's range; the first and last
   clusters merge across 0°/360° when they meet;
2. clusters of more than 15 points are kept; clusters of 1–2 points are rejected
   unless their mean intensity is at least 220; the remaining clusters are rejected
   when their mean intensity is 15 or less.

The SDK turns rejected points into "no return" (distance 0). Here they become
``nan`` (invalid), so the stored evidence still distinguishes a filtered point from
a beam that saw nothing. Points with no return (``inf``) are not clustered (the SDK
clusters its zero distances too, which only ever groups no-returns together).
Storage keeps raw points by default; this filter is an analysis choice.
"""

from __future__ import annotations

import numpy as np

from sensorbench.logs import LidarTurns

NEAR_LIMIT_M = 5.0
SAMPLES_PER_S = 4500.0
RANGE_JUMP = 0.03
INTENSITY_SINGLE = 220
INTENSITY_LOW = 15
SMALL_CLUSTER = 3  # clusters smaller than this need INTENSITY_SINGLE
LARGE_CLUSTER = 15  # clusters larger than this are always kept


def near_filter_mask(
    angle_rad: np.ndarray, range_m: np.ndarray, intensity: np.ndarray, speed_hz: float
) -> np.ndarray:
    """Points of one turn the SDK near filter would reject (bool mask).

    Args:
        angle_rad: point angles (rad, either direction; only gaps matter).
        range_m: ranges (m); non-finite ranges are never rejected.
        intensity: intensities 0..255.
        speed_hz: rotation speed of the turn (Hz); nan falls back to 10 Hz.
    """
    angle_deg = np.degrees(np.asarray(angle_rad, dtype=np.float64))
    rng = np.asarray(range_m, dtype=np.float64)
    inten = np.asarray(intensity, dtype=np.float64)
    reject = np.zeros(rng.size, dtype=bool)
    near = np.flatnonzero(np.isfinite(rng) & (rng < NEAR_LIMIT_M))
    if near.size == 0:
        return reject
    speed_deg_s = (speed_hz if np.isfinite(speed_hz) and speed_hz > 0 else 10.0) * 360.0
    gap_limit = speed_deg_s / SAMPLES_PER_S * 2
    idx = near[np.argsort(angle_deg[near], kind="stable")]
    a, r = angle_deg[idx], rng[idx]
    brk = (np.abs(np.diff(a)) > gap_limit) | (np.abs(np.diff(r)) > r[:-1] * RANGE_JUMP)
    group = np.concatenate(([0], np.cumsum(brk)))
    n_groups = int(group[-1]) + 1
    if (
        n_groups > 1
        and abs(a[0] + 360.0 - a[-1]) < gap_limit
        and abs(r[0] - r[-1]) < r[-1] * RANGE_JUMP
    ):
        group[group == n_groups - 1] = 0
    size = np.bincount(group, minlength=n_groups)
    mean_int = np.bincount(group, weights=inten[idx], minlength=n_groups) / np.maximum(size, 1)
    bad = (size <= LARGE_CLUSTER) & (
        ((size < SMALL_CLUSTER) & (mean_int < INTENSITY_SINGLE)) | (mean_int <= INTENSITY_LOW)
    )
    reject[idx] = bad[group]
    return reject


def near_filter_turns(turns: LidarTurns) -> LidarTurns:
    """A copy of ``turns`` with the points the SDK near filter rejects set to ``nan``."""
    rng = turns.range.copy()
    for i, start in enumerate(turns.offset.tolist()):
        sl = slice(start, start + int(turns.count[i]))
        bad = near_filter_mask(
            turns.angle[sl], turns.range[sl], turns.intensity[sl], float(turns.speed_hz[i])
        )
        rng[sl][bad] = np.nan
    return LidarTurns(
        turns.t_first_ns,
        turns.device_ns,
        turns.speed_hz,
        turns.count,
        turns.flags,
        turns.angle,
        rng,
        turns.intensity,
        turns.t_ns,
    )
