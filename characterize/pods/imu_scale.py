"""Does a drive's IMU yaw turn as its reference heading does? The pod fit takes Δθ from the
IMU (bias removed against mocap, :func:`~sensorbench.fusion.pod_drive.gyro_drift`), which
follows a slow disagreement as if it were bias but not the rest: a yaw in degrees, of the
opposite sign or frozen, or a mocap quaternion read in the wrong order, would
give lever arms confidently wrong (docs/PODS.md § "Geometry fit").
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.odometry_replay import reference_noise
from sensorbench.fusion.pod_drive import Drive, intervals_with_rate

MAX_RATIO = 3.0
"""Largest robust variance of (IMU Δθ − mocap Δθ) per interval over the mocap's own interval
noise (2σ² of its samples). Without disagreement it is at most 1 (interval ends interpolated
between samples: 0.59-0.72 on the simulator's drives), its relative standard error
√(2/(0.37·M)) (the MAD's efficiency), 0.28 at M = 68 intervals: 3 is over 7 of them above.
A sign flip on a spin gives 3700, a frozen IMU 940, a gyro 5 % off in scale 5.6 (below that,
the bias removal takes up most of it: 2 % moves the lever arms by 2.5σ)."""
MIN_INTERVALS = 20
"""Intervals a drive needs for the comparison."""


def imu_disagreement(drive: Drive, offset_s: float, interval_s: float) -> str | None:
    """Why ``drive``'s IMU yaw (as the fit uses it) does not turn as its reference heading
    does over the fit's intervals, or None (no IMU yaw, too few intervals, or agreement
    within :data:`MAX_RATIO` of the reference's noise)."""
    if drive.imu_yaw is None:
        return None
    imu = intervals_with_rate(drive, offset_s, interval_s, "imu")[1][:, 2]
    ref = intervals_with_rate(drive, offset_s, interval_s, "mocap")[1][:, 2]
    if ref.size < MIN_INTERVALS:
        return None
    r = imu - ref
    spread = (1.4826 * float(np.median(np.abs(r - np.median(r))))) ** 2
    noise = 2.0 * float(reference_noise(drive.t_ref, drive.ref)[2])
    ratio = spread / max(noise, 1e-18)
    if ratio <= MAX_RATIO:
        return None
    return (f"{drive.label}: the IMU's Δθ over {interval_s:g} s differs from the mocap "
            f"heading's by {ratio:.3g}× the mocap's noise variance (needs <= {MAX_RATIO:g}; "
            f"IMU turned {np.sum(np.abs(imu)):.3g} rad in all, mocap {np.sum(np.abs(ref)):.3g})")
