"""The LD06/LD19 vendor SDK's near filter (``Tofbf::NearFilter``), reimplemented with
numpy (source and rules: docs/LD19.md, Near filter).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sensorbench.logs import LidarTurns

NEAR_LIMIT_MM = 5000
SDK_SAMPLES_PER_S = 4500.0  # the SDK's kScanFrequency (tofbf.h), reproduced: not the device's
RANGE_JUMP = 0.03
INTENSITY_SINGLE = 220
INTENSITY_LOW = 15
SMALL_CLUSTER = 3  # clusters smaller than this need INTENSITY_SINGLE
LARGE_CLUSTER = 15  # clusters larger than this are always kept


def vendor_mask(angle_deg_cw: np.ndarray, distance_mm: np.ndarray, intensity: np.ndarray,
        speed_deg_s: float) -> np.ndarray:
    """Points of one turn the SDK's ``NearFilter`` drops (bool), in its own units: angles
    as it computes them (°, clockwise, [0, 360)), distances (mm; 0 = no return), the
    turn's speed as in the packets (deg/s)."""
    a_all = np.asarray(angle_deg_cw, dtype=np.float64)
    d_all = np.asarray(distance_mm, dtype=np.int64)
    i_all = np.asarray(intensity, dtype=np.int64)
    drop = np.zeros(d_all.size, dtype=bool)
    pending = np.flatnonzero(d_all < NEAR_LIMIT_MM)
    if pending.size == 0:
        return drop
    limit = speed_deg_s / SDK_SAMPLES_PER_S * 2
    idx = pending[np.argsort(a_all[pending], kind="stable")]
    a, d = a_all[idx], d_all[idx]
    cut = (np.abs(np.diff(a)) > limit) | (np.abs(np.diff(d)) > d[:-1] * RANGE_JUMP)
    group = np.concatenate(([0], np.cumsum(cut)))
    n_groups = int(group[-1]) + 1
    if abs(a[0] + 360.0 - a[-1]) < limit and abs(d[0] - d[-1]) < d[-1] * RANGE_JUMP:
        if n_groups == 1:  # the only cluster merged into itself, then erased
            drop[idx] = True
            return drop
        group[group == n_groups - 1] = 0
    size = np.bincount(group, minlength=n_groups)
    total = np.bincount(group, weights=i_all[idx], minlength=n_groups)
    small_dim = (size < SMALL_CLUSTER) & (total // np.maximum(size, 1) < INTENSITY_SINGLE)
    dim = total / np.maximum(size, 1) <= INTENSITY_LOW
    bad = (size <= LARGE_CLUSTER) & (small_dim | dim)
    drop[idx] = bad[group]
    return drop


def near_filter_mask(angle_rad: np.ndarray, range_m: np.ndarray, intensity: np.ndarray,
        speed_hz: float) -> np.ndarray:
    """Points of one stored turn (rad CCW, m, Hz) the SDK's near filter drops (bool mask):
    ``inf`` (no return, the SDK's distance 0) takes part, ``nan`` (already invalid) takes
    no part and is never dropped; a nan speed falls back to 10 Hz."""
    rng = np.asarray(range_m, dtype=np.float64)
    drop = np.zeros(rng.size, dtype=bool)
    use = np.flatnonzero(~np.isnan(rng))
    if use.size == 0:
        return drop
    r = rng[use]
    dist_mm = np.where(np.isinf(r), 0, np.minimum(np.round(r * 1000.0), 65535)).astype(np.int64)
    ccw_deg = np.degrees(np.asarray(angle_rad, dtype=np.float64)[use])
    cw_deg = np.mod(360.0 - ccw_deg, 360.0)
    speed = speed_hz if np.isfinite(speed_hz) and speed_hz > 0 else 10.0
    drop[use] = vendor_mask(cw_deg, dist_mm, np.asarray(intensity)[use], speed * 360.0)
    return drop


def near_filter_turns(turns: LidarTurns) -> LidarTurns:
    """A copy of ``turns`` with the returns the SDK near filter drops set to ``nan``."""
    rng = turns.range.copy()
    for i, start in enumerate(turns.offset.tolist()):
        sl = slice(start, start + int(turns.count[i]))
        bad = near_filter_mask(turns.angle[sl], turns.range[sl], turns.intensity[sl],
            float(turns.speed_hz[i]))
        rng[sl][bad & np.isfinite(rng[sl])] = np.nan
    return dataclasses.replace(turns, range=rng)
