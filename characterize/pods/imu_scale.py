"""Does a drive's IMU yaw turn as its reference heading does? The pod fit takes Δθ from the
IMU (bias removed against mocap, :func:`~sensorbench.fusion.pod_drive.gyro_drift`), which
follows a slow disagreement as if it were bias: a yaw in degrees, of the opposite sign or
frozen, or a mocap quaternion read in the wrong order, would give lever arms confidently
wrong (docs/PODS.md § "Geometry fit").
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.odometry_replay import reference_noise
from sensorbench.fusion.pod_drive import Drive, drive_intervals

MIN_SNR = 100.0
"""Rotation energy over the reference's noise energy (per interval, 2σ² of its samples) a
drive needs to be judged: the reference's noise then shrinks the slope by at most 1 %."""
MAX_SCALE_ERROR = 0.5
"""Largest |slope − 1| of the IMU's Δψ on the reference's Δθ: a gyro's scale is off by a few
% at most, while a sign flip gives −1, degrees 57, a frozen IMU 0. Frame stamps off by a
burst (their timing error) add noise, not slope."""


def _bias_removed(y: np.ndarray, dt: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``y`` with a bias and a linear bias drift (rad/s, rad/s²) over the intervals fitted
    out: the part no gyro bias explains. Not :func:`~sensorbench.fusion.pod_drive.
    gyro_drift`, which the geometry fit removes: its 4 s local quadratic of IMU minus mocap
    follows any disagreement slower than a few seconds, a wrong scale's on slow turns
    included, and would hide what this check looks for; one bias and one drift per drive
    cannot take up the rotation."""
    B = np.column_stack([dt, dt * t])
    return y - B @ np.linalg.lstsq(B, y, rcond=None)[0]


def imu_disagreement(drive: Drive, offset_s: float, interval_s: float) -> str | None:
    """Why ``drive``'s IMU yaw does not turn as its reference heading does, or None.

    Over the drive's intervals the IMU's Δψ is regressed on the reference's Δθ, a bias and
    a bias drift fitted out of both; the slope must be within :data:`MAX_SCALE_ERROR` of 1
    (judged with :data:`MIN_SNR`). A drive whose IMU turns (MIN_SNR) with under a quarter
    of that rotation energy in the reference (half its amplitude) disagrees too.
    """
    if drive.imu_yaw is None:
        return None
    _, xi, frames = drive_intervals(drive, offset_s, interval_s)
    if xi.shape[0] < 6:
        return None
    lo, hi = frames[:, 0], frames[:, 1]
    t = drive.t_enc[lo] - drive.t_enc[0]
    dt = drive.t_enc[hi] - drive.t_enc[lo]
    imu = _bias_removed(drive.imu_yaw[hi] - drive.imu_yaw[lo], dt, t)
    ref = _bias_removed(xi[:, 2], dt, t)
    noise = max(2.0 * float(reference_noise(drive.t_ref, drive.ref)[2]), 1e-12) * ref.size
    ref_snr, imu_snr = float(ref @ ref) / noise, float(imu @ imu) / noise
    scale = float(ref @ imu) / float(ref @ ref) if ref_snr >= MIN_SNR else np.nan
    if abs(scale - 1.0) > MAX_SCALE_ERROR:
        return (
            f"{drive.label}: the IMU yaw turns {scale:.3g}× the mocap heading (expected "
            f"1 ± {MAX_SCALE_ERROR:g})"
        )
    if imu_snr >= MIN_SNR and ref_snr < imu_snr / 4.0:
        return (
            f"{drive.label}: the IMU yaw turns (rotation energy {imu_snr:.3g}× the mocap "
            f"heading's noise) where the mocap heading hardly does ({ref_snr:.3g}×)"
        )
    return None
