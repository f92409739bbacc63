"""The IMU heading's noise for a two-pod robot (docs/PODS.md § "Any wheel layout"): between
rests the heading is the IMU's yaw less the bias its rests showed, and errs by the bias
estimate's error and the bias's walk since (:func:`~sensorbench.fusion.pod_kinematics.
imu_bias_variance`): the yaw's random walk measured at rest, the bias's walk fitted by
likelihood on the reference's heading over each stretch between rests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize_scalar

from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import (
    imu_bias_variance,
    imu_heading_steps,
    imu_rest_rate_variance,
    pods_at_rest,
    rest_runs,
)

MIN_MOVING_S = 5.0
"""Seconds of motion the drives need for the fit."""
WALK_RANGE = (1e-14, 1e-4)
"""Search range of the bias walk ((rad/s)²/s): a gyro's bias walks 1e-7 to 0.01 rad/s/√s."""


def _rest_offsets(
    runs: np.ndarray, offset: np.ndarray, t: np.ndarray, period_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per rest run (:func:`~sensorbench.fusion.pod_kinematics.rest_runs`' (R, 2) steps):
    the mean of the reference-minus-IMU heading ``offset`` (K+1,) rad over its frames (the
    heading held, the reference's noise averaged), the reference samples it holds (its
    duration over ``period_s``, at least 1) and its steps ``(m, n, runs)``; runs without a
    finite offset left out."""
    a, b = runs[:, 0], runs[:, 1]
    finite = np.concatenate([[0], np.cumsum(np.isfinite(offset[1:]))])
    total = np.concatenate([[0.0], np.cumsum(np.nan_to_num(offset[1:]))])
    k = finite[b] - finite[a]  # the frames ending the rest steps
    keep = k > 0
    means = (total[b] - total[a])[keep] / k[keep]
    counts = np.maximum(1.0, (t[b] - t[a])[keep] / period_s)
    return means, counts, runs[keep]


def _stretches(d: Drive, offset_s: float, noise: float) -> tuple[np.ndarray, ...] | None:
    """Per stretch of motion between two rests of drive ``d`` (:func:`with_imu_heading`'s,
    its heading the last counter): the change e (rad) of the
    reference-minus-IMU heading; its variance per unit of the yaw's walk (rad² per
    rad²/s) and per unit of the bias walk (rad² per (rad/s)²/s)
    (:func:`~sensorbench.fusion.pod_kinematics.imu_bias_variance` plus the yaw's own
    walk, linear in both); the reference noise's share (rad²); its time moving (s); and
    the yaw's walk at rest (1,) (rad²/s, nan: too few rests). None: no IMU yaw.

    ``noise``: σ of the reference's white heading noise (rad); ``offset_s`` the
    reference's time offset (s)."""
    if d.imu_yaw is None:
        return None
    dn, dt, imu = np.diff(d.counts[:, :-1], axis=0), np.diff(d.t_enc), np.diff(d.imu_yaw)
    rest = pods_at_rest(dn, dt)
    walk = imu_rest_rate_variance(imu, dt, rest)
    heading = d.counts[:, -1]
    ref = np.interp(d.t_enc + offset_s, d.t_ref, d.ref[:, 2], left=np.nan, right=np.nan)
    period = float(np.median(np.diff(d.t_ref))) if d.t_ref.size > 1 else 1.0
    m, n, runs = _rest_offsets(rest_runs(rest), ref - heading, d.t_enc, period)
    runs = runs.reshape(-1, 2)
    moving = np.where(rest, 0.0, dt)
    ends = (runs[:-1, 1], runs[1:, 0])

    def summed(v: np.ndarray) -> np.ndarray:
        c = np.concatenate([[0.0], np.cumsum(v)])
        return c[ends[1]] - c[ends[0]]

    per_rate = summed(imu_bias_variance(rest, dt, 1.0, 0.0, fresh=True) + moving)
    per_walk = summed(imu_bias_variance(rest, dt, 0.0, 1.0, fresh=True))
    ref_var = noise**2 * (1 / n[1:] + 1 / n[:-1])
    q_w = np.array([np.nan if walk is None else walk])
    return np.diff(m), per_rate, per_walk, ref_var, summed(moving), q_w


def fit_imu_heading_noise(
    drives: Sequence[Drive], offsets: Sequence[float], ref_noise_rad: Sequence[float]
) -> tuple[float, float, dict[str, float]]:
    """The IMU heading's noise of two-pod drives with IMU yaw (:func:`with_imu_heading`'s):
    the yaw's random walk
    (rad²/s; :func:`~sensorbench.fusion.pod_kinematics.imu_rest_rate_variance`, the
    drives' median; 0 without 10 rest windows in any) and the gyro bias's walk
    ((rad/s)²/s) maximising the likelihood of the changes of the reference-minus-IMU
    heading from one rest to the next (each the mean over its rest), each N(0, its
    variance under :func:`~sensorbench.fusion.pod_kinematics.imu_bias_variance` plus what
    the reference's white heading noise ``ref_noise_rad`` (σ per drive, rad) puts into
    it; the reference at the encoder time plus ``offsets`` s); and a report.

    Raises:
        FitError: a drive without IMU yaw, or under :data:`MIN_MOVING_S` of motion
            between rests.
    """
    parts = []
    for d, off, noise in zip(drives, offsets, ref_noise_rad, strict=True):
        got = _stretches(d, off, noise)
        if got is None:
            raise FitError(f"{d.label}: two pods need the IMU's yaw for the heading")
        parts.append(got)
    e, per_rate, per_walk, ref_var, tau, q_w = (np.concatenate(p) for p in zip(*parts, strict=True))
    if tau.sum() < MIN_MOVING_S:
        raise FitError(
            f"only {tau.sum():.1f} s of motion between rests to fit the IMU heading from"
        )
    rate_var = float(np.median(q_w[np.isfinite(q_w)])) if np.isfinite(q_w).any() else 0.0
    base = rate_var * per_rate + ref_var

    def nll(log_q: float) -> float:
        v = np.maximum(base + np.exp(log_q) * per_walk, 1e-30)
        return float(np.sum(np.log(v) + e**2 / v))

    lo, hi = np.log(WALK_RANGE[0]), np.log(WALK_RANGE[1])
    best = minimize_scalar(nll, bounds=(lo, hi), method="bounded")
    walk = float(np.exp(best.x)) if nll(best.x) < nll(lo) else 0.0
    return rate_var, walk, {
        "bias_walk_rad2_per_s3": walk,
        "at_rest_rad2_per_s": rate_var,
        "moving_s": float(tau.sum()),
        "stretches": int(e.size),
    }


def with_imu_heading(drive: Drive) -> Drive:
    """``drive`` with the IMU heading (:func:`imu_heading_steps`, summed, rad) as a last
    counter: the counts of a geometry whose :attr:`W` holds the IMU's row.

    Raises:
        FitError: the drive has no IMU yaw."""
    if drive.imu_yaw is None:
        raise FitError(f"{drive.label}: two pods need the IMU's yaw for the heading")
    dn = np.diff(drive.counts, axis=0)
    dtheta = imu_heading_steps(dn, np.diff(drive.imu_yaw), np.diff(drive.t_enc))[0]
    heading = np.concatenate([[0.0], np.cumsum(dtheta)])
    return replace(drive, counts=np.column_stack([drive.counts, heading]), bounce=None)
