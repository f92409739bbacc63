"""Fit the wheels' slip law (:class:`~sensorbench.fusion.odometry_drift.PodSlip`) from the
pods against the IMU, without a reference path.

Three pods measure three degrees of freedom: the odometry alone has no redundancy, and a
motion-capture reference is too noisy to see slip directly (0.5 mm of noise at each end
of an interval against 0.35 mm of slip per metre). An IMU's yaw adds the one redundant
equation: the heading increment the pods give, ``g·Δn`` with ``g`` the heading row of
``Ŵ⁺``, against the gyro's. Over a window of a quarter second the difference

    U = Σ (g·Δn − Δθ_imu) − b·T

(gyro bias b removed by a running median over ±:data:`BIAS_WINDOWS` windows) carries the
slip of every pod that enters the heading (for a differential layout the two parallel
wheels) and little else: the tick rounding of the window's two ends and the gyro's white
noise, both independent of the distance rolled. With each pod's rolled distance D_i and
dragged distance P_i over the window (m), the slip law gives

    E[U²] = σ_roll²·Σ_i g_i²·D_i/c_i² + σ_drag²·Σ_i g_i²·P_i/c_i² + c

fitted by non-negative least squares weighted as a gamma GLM
(:func:`~sensorbench.characterize.drift_fit.gamma_nnls`; U Gaussian ⇒ Var U² = 2·E[U²]²)
over non-overlapping windows. Windows holding a bounce the gyro sees (±5 frames) are
dropped, and windows whose U² exceeds :data:`TRIM` times its fit, until none changes side.

The law is taken to be the same for every pod (identical wheels and pods): the pods that
do not enter the heading (a pod rolling sideways through the centre) are not seen by this
check and are given the law of those that are. This is an assumption of the fit, stated
in its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.ndimage import median_filter

from sensorbench.characterize.drift_fit import gamma_nnls
from sensorbench.errors import FitError
from sensorbench.fusion.odometry_drift import PodSlip
from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import PodGeometry, repair_bounces

WINDOW_S = 0.25
"""Window (s): long enough that slip outweighs the two ends' rounding, short enough that
the gyro bias is constant within it."""
BIAS_WINDOWS = 40
"""Neighbouring windows each side whose median U/T is the gyro bias (fewer in a drive
shorter than 81 windows: as many as it has)."""
MIN_WINDOWS = 20
"""Windows a drive needs (5 s at the default window)."""
TRIM = 25.0
"""A window whose U² exceeds this many times its fitted expectation is a fault (p < 1e-6
for a Gaussian U) and is dropped; refitted until none changes side."""
MAX_TRIM_PASSES = 6
MIN_DRAG_M = 1.0
"""Dragged distance (m, summed over the pods the check sees) below which the drag term is
not identified (no sideways motion): it then takes the rolling term's value."""


@dataclass
class SlipFit:
    """The fitted slip law with what it rests on.

    Attributes:
        slip: the law (bound to the geometry it was fitted with).
        roll_se, drag_se: standard errors of its two variances (m² per m).
        intercept: variance of U not growing with motion (rad²): rounding and gyro noise.
        n_windows: windows used; trimmed: windows dropped as faults.
        drag_identified: False when the drives hardly dragged a pod sideways.
        rolled_m, dragged_m: distance rolled and dragged by the pods the check sees (m).
        window_s: window length (s).
    """

    slip: PodSlip
    roll_se: float
    drag_se: float
    intercept: float
    n_windows: int
    trimmed: int
    drag_identified: bool
    rolled_m: float
    dragged_m: float
    window_s: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (SI units)."""
        return {
            "roll_m2_per_m": self.slip.roll_var,
            "drag_m2_per_m": self.slip.drag_var,
            "roll_se_m2_per_m": self.roll_se,
            "drag_se_m2_per_m": self.drag_se,
            "intercept_rad2": self.intercept,
            "n_windows": self.n_windows,
            "trimmed_windows": self.trimmed,
            "drag_identified": self.drag_identified,
            "rolled_m": self.rolled_m,
            "dragged_m": self.dragged_m,
            "window_s": self.window_s,
            "method": "pods' heading against the IMU's over windows; every pod given the "
            "law of those the heading sees",
        }


def _windows(
    drive: Drive, w: np.ndarray, window_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window of one drive: U (rad), the roll and drag regressors (rad² per unit
    variance) and the rolled and dragged distances of the pods the heading sees (m)."""
    if drive.imu_yaw is None:
        raise FitError(f"{drive.label}: no IMU yaw; the slip fit needs the pods against an IMU")
    dn = np.diff(drive.counts, axis=0).astype(float)
    imu = np.diff(drive.imu_yaw)
    w_inv = np.linalg.pinv(w)
    g = w_inv[2]
    c = 1.0 / np.hypot(w[:, 0], w[:, 1])
    phi = np.arctan2(w[:, 1], w[:, 0])
    _, bounced, _ = repair_bounces(w, dn, imu)
    near = np.convolve(bounced.astype(float), np.ones(11), mode="same") > 0
    inc = dn @ w_inv.T
    rolled = np.abs(dn) * c
    dragged = np.abs(-np.sin(phi) * inc[:, :1] + np.cos(phi) * inc[:, 1:2])
    frame = float(np.median(np.diff(drive.t_enc)))
    m = max(1, round(window_s / max(frame, 1e-9)))
    n_win = dn.shape[0] // m
    if n_win < MIN_WINDOWS:
        raise FitError(f"{drive.label}: {n_win} windows of {window_s} s; record longer")
    half = min(BIAS_WINDOWS, (n_win - 1) // 2)
    cut = n_win * m

    def per_window(x: np.ndarray) -> np.ndarray:
        return x[:cut].reshape(n_win, m, *x.shape[1:]).sum(axis=1)

    resid = per_window(dn @ g - imu)
    span = per_window(np.diff(drive.t_enc))
    rate = resid / span
    bias = median_filter(rate, size=2 * half + 1, mode="nearest")
    u = resid - bias * span
    weight = g**2 / c**2
    roll = per_window(rolled) @ weight
    drag = per_window(dragged) @ weight
    sees = np.abs(g) * c > 1e-3 * np.max(np.abs(g) * c)  # pods entering the heading
    keep = ~per_window(near.astype(float)).astype(bool) & np.isfinite(u)
    dist = np.column_stack(
        [per_window(rolled)[:, sees].sum(axis=1), per_window(dragged)[:, sees].sum(axis=1)]
    )
    return u[keep], roll[keep], drag[keep], dist[keep]


def fit_pod_slip(
    drives: Sequence[Drive], geometry: PodGeometry, window_s: float = WINDOW_S
) -> SlipFit:
    """Fit the slip law from drives that carry IMU yaw with their encoder frames.

    Args:
        drives: sessions from :func:`~sensorbench.fusion.pod_drive.load_drive` (the
            reference path is not used).
        geometry: the fitted pod geometry.
        window_s: window length (s).

    Raises:
        FitError: a drive without IMU yaw, too short, or nothing rolled.
    """
    w = geometry.W
    parts = [_windows(d, w, window_s) for d in drives]
    u = np.concatenate([p[0] for p in parts])
    x = np.column_stack(
        [np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])]
    )
    dist = np.vstack([p[3] for p in parts])
    rolled_m, dragged_m = (float(v) for v in dist.sum(axis=0))
    if rolled_m < 1.0:
        raise FitError(f"the pods the IMU check sees rolled only {rolled_m:.2f} m")
    drag_ok = dragged_m >= MIN_DRAG_M
    cols = [0, 1] if drag_ok else [0]
    design = np.column_stack([x[:, cols], np.ones(u.size)])
    y = u**2
    keep = np.ones(y.size, dtype=bool)
    beta, se = np.zeros(design.shape[1]), np.full(design.shape[1], np.nan)
    for _ in range(MAX_TRIM_PASSES):
        beta, se = gamma_nnls(design[keep], y[keep])
        now = y <= TRIM * np.maximum(design @ beta, 1e-300)
        if np.array_equal(now, keep):
            break
        keep = now
    roll, roll_se = float(beta[0]), float(se[0])
    drag, drag_se = (float(beta[1]), float(se[1])) if drag_ok else (roll, float("nan"))
    return SlipFit(
        PodSlip(w, roll, drag),
        roll_se,
        drag_se,
        float(beta[-1]),
        int(np.count_nonzero(keep)),
        int(np.count_nonzero(~keep)),
        drag_ok,
        rolled_m,
        dragged_m,
        window_s,
    )
