"""A short drive that exercises every path of the split filters' replay.

Exact kinematics from :mod:`odometry_util` (figure-8, 100 Hz encoder frames, floored
counts, bouncing wheels), then made hard on purpose: a pod that stops counting for a
dozen frames (rejections and a forced reset), frames without counts (nan rows), a gap
longer than ``stale_s`` (coasting), a fitted geometry with a slip law and a row
covariance (slip and drag variances, calibration error, rounding profile and
correlation), noise with the acceleration fed forward and q grown with the jerk, and a
10 Hz pose sensor with per-segment offsets, relocalizations, invalid samples and one
sample a metre off (an aiding rejection).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from odometry_util import make_drive

from sensorbench.fusion.aid_queue import AidAxis, Aiding, PoseAidModel
from sensorbench.fusion.filter_noise import AxisNoise, FilterNoise
from sensorbench.fusion.pod_kinematics import PodGeometry, body_increments

GATE = 6.63
POSE0 = (0.1, -0.2, 0.3)
VAR0 = (1e-6, 2e-6, 1e-5)


@dataclass
class HardDrive:
    """Inputs of one replay: frame times (K+1,) s, body increments (K, 3), aiding, the
    pods they come from, the filters' noise, the pose sensor's error model and the IMU's
    heading increments (K,) rad (the pods disagree with it where they stop or bounce)."""

    t_s: np.ndarray
    inc: np.ndarray
    aiding: Aiding
    pods: PodGeometry
    noise: FilterNoise
    aid_model: PoseAidModel
    imu: np.ndarray


def hard_drive(seed: int = 3, duration_s: float = 6.0) -> HardDrive:
    """The drive of this module's docstring (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    drive, truth = make_drive(
        "figure8",
        seed,
        duration_s=duration_s,
        enc_hz=100.0,
        slip_sigma=0.004,
        bounce_rate=0.01,
        bounce_ticks=30,
    )
    g = truth["geometry"]
    counts = drive.counts.copy()
    t = truth["t_enc"].copy()
    # pod 0 stops counting for 14 frames: the heading sees a streak of rejections
    k0 = counts.shape[0] // 3
    counts[k0 : k0 + 14, 0] = counts[k0, 0]
    # a gap of 25 frames (0.25 s > stale_s): the frame after it is coasting
    keep = np.ones(t.size, bool)
    keep[2 * counts.shape[0] // 3 : 2 * counts.shape[0] // 3 + 25] = False
    t, counts = t[keep], counts[keep]
    dn = np.diff(counts, axis=0).astype(float)
    inc = body_increments(g.W, dn)
    inc[70:73] = np.nan
    row_cov = np.diag(np.tile([4.0, 4.0, 1.0], 3)) * np.repeat([1.0, 1.0, 2.0], 3)
    pods = PodGeometry(g.c, g.phi, g.lever, g.names, g.counts_per_rev, row_cov, (4e-7, 1.5e-6))
    axis = {
        "x": AxisNoise(2e-2, 5e-10, q_jerk=1e-4, slip_scale=0.9, drag_scale=1.2),
        "y": AxisNoise(2e-2, 5e-10, q_jerk=1e-4, slip_scale=1.1, drag_scale=0.8),
        "theta": AxisNoise(0.5, 2e-7, q_jerk=1e-4, slip_scale=1.0),
    }
    noise = FilterNoise(axis["x"], axis["y"], axis["theta"])
    ta = np.arange(0.05, t[-1] + 0.3, 0.1)
    true = np.column_stack([np.interp(ta, truth["t"], truth["path"][:, k]) for k in range(3)])
    segment = np.searchsorted([0.0, 2.0, 4.5], ta, side="right") - 1
    offsets = rng.normal(0.0, [0.01, 0.01, 0.01], (3, 3))
    odo = true + offsets[segment] + rng.normal(0.0, [0.003, 0.003, 0.003], true.shape)
    # in the world the filters start in: the drive's own frame placed at POSE0
    c, s = np.cos(POSE0[2]), np.sin(POSE0[2])
    pose = np.column_stack(
        [
            POSE0[0] + c * odo[:, 0] - s * odo[:, 1],
            POSE0[1] + s * odo[:, 0] + c * odo[:, 1],
            POSE0[2] + odo[:, 2],
        ]
    )
    pose[:, 2] = (pose[:, 2] + np.pi) % (2 * np.pi) - np.pi  # a sensor reports wrapped yaw
    valid = np.ones(ta.size, bool)
    valid[[7, 8, 30]] = False
    pose[35, 0] += 1.0
    relocalized = np.zeros(ta.size, bool)
    relocalized[np.searchsorted(ta, [2.0, 4.5])] = True
    aiding = Aiding(ta, pose, valid, relocalized)
    aid = AidAxis(0.01, 0.003, 0.5, 0.003)
    imu = np.diff(np.interp(t, truth["t"], truth["path"][:, 2])) + rng.normal(0, 1e-5, inc.shape[0])
    imu[100:103] = np.nan
    return HardDrive(t, inc, aiding, pods, noise, PoseAidModel(aid, aid, aid), imu)
