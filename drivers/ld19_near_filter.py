"""The LD06/LD19 vendor SDK's near filter (``Tofbf::NearFilter``), reimplemented with numpy.

Source: LDROBOT's ``ldlidar_stl_sdk`` (``src/tofbf.cpp``, ``tofbf.h``, MIT licence;
the same code runs in its ROS drivers ``ldlidar_stl_ros``/``ldlidar_stl_ros2``, where
it is on by default), called by ``LiPkg::AssemblePacket`` on every assembled turn,
whose points are (angle ° clockwise, distance mm, intensity) as the device sent
them, no-returns (distance 0) included. What it does with one turn:

1. every point with distance < 5000 mm is *pending* — **no-returns too (0 < 5000)**;
   the others are kept as they are;
2. pending points are sorted by angle and cut into clusters: a new cluster starts
   where the angle steps by more than ``2 × speed / 4500`` ° (two samples at the
   turn's speed, deg/s) or the distance changes by more than 3 % of the previous
   point's distance. A no-return (0) after a return is always a cut (|0 − d| > 0.03 d),
   a return after a no-return too (|d − 0| > 0), consecutive no-returns are not
   (0 > 0 is false): each run of no-returns is a cluster of its own and **splits the
   returns around it**;
3. if the first and the last cluster meet across 0°/360° (angle gap under the limit
   and distance change under 3 % of the last point's), the last is moved in front of
   the first. When the whole turn is one cluster this merges the cluster into itself
   and erases it: the SDK then drops every pending point of the turn; reproduced here;
4. clusters of more than 15 points are kept; clusters of 1–2 points are dropped unless
   their mean intensity (integer division) is at least 220; the others are dropped
   unless their mean intensity is above 15.

The SDK zeroes the points it rejects (distance and intensity set to 0, the point kept:
``ldlidar_stl_sdk`` v3.0.3, ``ldlidar_driver/src/filter/tofbf.cpp``; its ROS 2 driver
publishes them as NaN; early versions removed them). :func:`near_filter_mask` says
which points it rejects (no-returns included); :func:`near_filter_turns` marks
rejected *returns* ``nan`` (invalid) and leaves no-returns ``inf``, so the stored evidence
still tells a filtered point from a beam that saw nothing. Because no-returns take
part, a dropout pattern decides the fate of the returns around it: on a sector where
every third beam has no return, every pair of returns between two dropouts is a
2-point cluster and is dropped (see ``tests/test_ld19_near_filter.py``). Storage
keeps raw points by default; this filter is an analysis choice (and what ROS users
of the vendor driver see).

Angles: the SDK computes them in float32 degrees with the packet's step truncated
to whole 0.01° (see docs/LD19.md); here the stored angles (float, exact step) are
turned back into clockwise degrees. The two differ by under 0.1°, which can only
matter for a gap within rounding of exactly two steps (a single point ≥ 5 m between
two near ones); on such a tie the SDK's result depends on float rounding.
"""

from __future__ import annotations

import numpy as np

from sensorbench.logs import LidarTurns

NEAR_LIMIT_MM = 5000
SAMPLES_PER_S = 4500.0
RANGE_JUMP = 0.03
INTENSITY_SINGLE = 220
INTENSITY_LOW = 15
SMALL_CLUSTER = 3  # clusters smaller than this need INTENSITY_SINGLE
LARGE_CLUSTER = 15  # clusters larger than this are always kept


def vendor_mask(angle_deg_cw: np.ndarray, distance_mm: np.ndarray, intensity: np.ndarray,
        speed_deg_s: float) -> np.ndarray:
    """Points of one turn the SDK's ``NearFilter`` drops (bool), in its own units.

    Args:
        angle_deg_cw: point angles as the SDK computes them (°, clockwise, [0, 360)).
        distance_mm: distances (mm, integers; 0 = no return).
        intensity: intensities 0..255.
        speed_deg_s: the turn's rotation speed (deg/s), as in the packets.
    """
    a_all = np.asarray(angle_deg_cw, dtype=np.float64)
    d_all = np.asarray(distance_mm, dtype=np.int64)
    i_all = np.asarray(intensity, dtype=np.int64)
    drop = np.zeros(d_all.size, dtype=bool)
    pending = np.flatnonzero(d_all < NEAR_LIMIT_MM)
    if pending.size == 0:
        return drop
    limit = speed_deg_s / SAMPLES_PER_S * 2
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


def near_filter_mask(
    angle_rad: np.ndarray, range_m: np.ndarray, intensity: np.ndarray, speed_hz: float
) -> np.ndarray:
    """Points of one stored turn the SDK's near filter drops (bool mask).

    Args:
        angle_rad: stored angles (rad, counter-clockwise, 0 = forward).
        range_m: ranges (m); ``inf`` = no return (the SDK's distance 0, which takes
            part); ``nan`` (already invalid) takes no part and is never dropped.
        intensity: intensities 0..255 (no-returns keep what the device sent).
        speed_hz: rotation speed of the turn (Hz); nan falls back to 10 Hz.
    """
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
        bad = near_filter_mask(
            turns.angle[sl], turns.range[sl], turns.intensity[sl], float(turns.speed_hz[i])
        )
        rng[sl][bad & np.isfinite(rng[sl])] = np.nan
    return LidarTurns(turns.t_first_ns, turns.device_ns, turns.speed_hz, turns.count, turns.flags,
        turns.angle, rng, turns.intensity, turns.t_ns)
