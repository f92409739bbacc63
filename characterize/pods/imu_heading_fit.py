"""The IMU heading's random walk for a two-pod robot (docs/PODS.md § "Any wheel layout"):
between rests the heading is the IMU's yaw less the bias its rests showed, and errs by
that bias's drift since; per second of motion, against the reference's heading over each
stretch between rests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import imu_heading_steps, imu_rest_rate_variance

MIN_MOVING_S = 5.0
"""Seconds of motion the drives need for the fit."""


def _rest_offsets(
    rest: np.ndarray, offset: np.ndarray, t: np.ndarray, period_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run of rest steps (K,) bool: the mean of the reference-minus-IMU heading
    ``offset`` (K+1,) rad over its frames (the heading held, the reference's noise
    averaged), the reference samples it holds (its duration over ``period_s``, at least 1)
    and the time (s) the run starts and ends ``(m, n, (start, end))``; runs without a
    finite offset left out."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], rest.astype(int), [0]])))
    means, counts, spans = [], [], []
    for a, b in zip(edges[0::2], edges[1::2], strict=True):
        o = offset[a + 1 : b + 1]  # the frames ending the rest steps
        if np.any(np.isfinite(o)):
            means.append(float(np.nanmean(o)))
            counts.append(max(1.0, float(t[b] - t[a]) / period_s))
            spans.append((float(t[a]), float(t[b])))
    return np.array(means), np.array(counts), np.array(spans).reshape(-1, 2)


def fit_imu_rate_variance(
    drives: Sequence[Drive], offsets: Sequence[float], ref_noise_rad: Sequence[float]
) -> tuple[float, dict[str, float]]:
    """The IMU heading's random walk (rad²/s of motion) of two-pod drives with IMU yaw:
    Σ(e² − σ_e²)/Σ τ over the motion between consecutive rests (e the change of the
    reference-minus-IMU heading from one rest to the next, each the mean over its rest,
    rad; σ_e² what the reference's white heading noise ``ref_noise_rad`` (σ per drive)
    puts into it; τ the time between the rests, s; the reference at the encoder time plus
    ``offsets`` s), at least the walk the IMU shows at rest; and a report of both.

    Raises:
        FitError: a drive without IMU yaw, or under :data:`MIN_MOVING_S` of motion
            between rests.
    """
    sq = tau = 0.0
    at_rest = []
    for d, off, noise in zip(drives, offsets, ref_noise_rad, strict=True):
        if d.imu_yaw is None:
            raise FitError(f"{d.label}: two pods need the IMU's yaw for the heading")
        dn, dt = np.diff(d.counts, axis=0), np.diff(d.t_enc)
        dtheta, rest = imu_heading_steps(dn, np.diff(d.imu_yaw), dt)
        heading = np.concatenate([[0.0], np.cumsum(dtheta)])
        ref = np.interp(d.t_enc + off, d.t_ref, d.ref[:, 2], left=np.nan, right=np.nan)
        period = float(np.median(np.diff(d.t_ref))) if d.t_ref.size > 1 else 1.0
        m, n, spans = _rest_offsets(rest, ref - heading, d.t_enc, period)
        if m.size >= 2:
            sq += float(np.sum(np.diff(m) ** 2 - noise**2 * (1 / n[1:] + 1 / n[:-1])))
            tau += float(np.sum(spans[1:, 0] - spans[:-1, 1]))
        walk = imu_rest_rate_variance(dn, np.diff(d.imu_yaw), dt)
        if walk is not None:
            at_rest.append(walk)
    if tau < MIN_MOVING_S:
        raise FitError(f"only {tau:.1f} s of motion between rests to fit the IMU heading from")
    rest_walk = float(np.median(at_rest)) if at_rest else 0.0
    moving = max(sq / tau, 0.0)
    return max(moving, rest_walk), {
        "moving_rad2_per_s": moving,
        "at_rest_rad2_per_s": rest_walk,
        "moving_s": tau,
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
