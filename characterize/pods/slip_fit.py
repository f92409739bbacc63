"""Fit the wheels' slip law (:class:`~sensorbench.fusion.odometry_drift.PodSlip`) from the
pods against the IMU, without a reference path: the windows' squared pods-minus-gyro
heading ``U`` regressed on their rolled and dragged distances by gamma-weighted NNLS, the
end rounding a known offset (docs/PODS.md § "Wheel slip").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.ndimage import median_filter

from sensorbench.characterize.pods.drift_fit import MAX_TRIM_PASSES, TRIM, gamma_nnls, near_bounces
from sensorbench.errors import FitError
from sensorbench.fusion.odometry_drift import PodSlip, averaged_counts, frame_period, pod_distances
from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import SLIP_TURN_KEY, PodGeometry, expected_frac_variance

WINDOW_S = 0.25
"""Window (s): long enough that slip outweighs the two ends' rounding, short enough that
the gyro bias is constant within it."""
BIAS_WINDOWS = 40
"""Neighbouring windows each side whose median U/T is the gyro bias (fewer in a drive
shorter than 81 windows: as many as it has)."""
MIN_WINDOWS = 20
"""Windows a drive needs (5 s at the default window)."""
MIN_DRAG_M = 1.0
"""Dragged distance (m, summed over the pods the check sees) below which the drag term is
not identified (no sideways motion): it then takes the rolling term's value."""


@dataclass
class SlipFit:
    """The fitted slip law with what it rests on.

    Attributes:
        slip: the law (bound to the geometry it was fitted with).
        roll_se, drag_se: standard errors of its two variances (m² per m).
        intercept: the variance not growing with motion: against the IMU (1,) the gyro's
            noise (rad²), against mocap (3,) the reference's per body axis (m², m², rad²).
        n_windows: windows used; trimmed: windows dropped as faults.
        drag_identified: False when the drives hardly dragged a pod sideways.
        rolled_m, dragged_m: distance rolled and dragged by the pods the check sees (m).
        window_s: window length (s).
        method: how it was fitted.
        timing_s: against mocap, the residual timing error per body axis (s); None.
        turn_se: against mocap, the standard error of the law's lateral-acceleration
            term (PodSlip's units); None: not fitted (0).
        creep: against mocap, the creep coefficients κ_v (s/m), κ_t (s²/(m·rad)) as
            estimated, their standard errors, and the drives' mean wheel speed (m/s) and
            lateral acceleration (m·rad/s²); None: not fitted.
    """

    slip: PodSlip
    roll_se: float
    drag_se: float
    intercept: np.ndarray
    n_windows: int
    trimmed: int
    drag_identified: bool
    rolled_m: float
    dragged_m: float
    window_s: float
    method: str = (
        "pods' heading against the IMU's over windows; every pod given the law of those "
        "the heading sees; intercept: the gyro's noise (rad²)"
    )
    timing_s: np.ndarray | None = None
    turn_se: float | None = None
    creep: dict[str, float] | None = None

    def carried_creep(self) -> tuple[float, ...] | None:
        """The creep the filters correct and carry (:attr:`PodGeometry.creep`): each
        coefficient's variance its standard error² (the error the correction by the
        estimate leaves), the references, then the estimates."""
        if self.creep is None:
            return None
        c = self.creep
        rest = ("speed_ref_m_per_s", "turn_ref_m_rad_per_s2", "speed_s_per_m", "turn_s2_per_m_rad")
        return (c["speed_se_s_per_m"] ** 2, c["turn_se_s2_per_m_rad"] ** 2, *(c[k] for k in rest))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (SI units)."""
        return {
            "roll_m2_per_m": self.slip.roll_var,
            "drag_m2_per_m": self.slip.drag_var,
            "roll_se_m2_per_m": self.roll_se,
            "drag_se_m2_per_m": self.drag_se,
            "intercept": [float(v) for v in np.atleast_1d(self.intercept)],
            "n_windows": self.n_windows,
            "trimmed_windows": self.trimmed,
            "drag_identified": self.drag_identified,
            "rolled_m": self.rolled_m,
            "dragged_m": self.dragged_m,
            "window_s": self.window_s,
            "method": self.method,
            **({} if self.timing_s is None else {"timing_s": [float(v) for v in self.timing_s]}),
            **({} if self.turn_se is None else {  # the lateral-acceleration term, its se
                SLIP_TURN_KEY: self.slip.turn_var,
                SLIP_TURN_KEY.replace("_m2", "_se_m2", 1): self.turn_se or math.nan,
            }),
            **({} if self.creep is None else {f"creep_{k}": v for k, v in self.creep.items()}),
        }


def _windows(
    drive: Drive, w: np.ndarray, window_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per window of one drive: U (rad), and per pod (n, N) the rolled and dragged
    distances (m) and the travel (ticks), all from the counts smoothed over
    :data:`~sensorbench.fusion.odometry_drift.TRAVEL_SMOOTH_S`."""
    if drive.imu_yaw is None:
        raise FitError(f"{drive.label}: no IMU yaw; the slip fit needs the pods against an IMU")
    dn = np.diff(drive.counts, axis=0).astype(float)
    imu = np.diff(drive.imu_yaw)
    w_inv = np.linalg.pinv(w)
    g = w_inv[2]
    near = near_bounces(w, dn, imu)
    frame = frame_period(drive.t_enc)
    smooth = averaged_counts(dn, drive.t_enc)
    rolled, dragged = pod_distances(w, smooth @ w_inv.T)
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
    keep = ~per_window(near.astype(float)).astype(bool) & np.isfinite(u)
    return u[keep], per_window(rolled)[keep], per_window(dragged)[keep], per_window(smooth)[keep]


def fit_pod_slip(
    drives: Sequence[Drive], geometry: PodGeometry, window_s: float = WINDOW_S
) -> SlipFit:
    """Fit the slip law from drives that carry IMU yaw with their encoder frames (their
    reference path is not used) over windows of ``window_s`` s.

    Raises:
        FitError: a drive without IMU yaw, too short, or nothing rolled.
    """
    w = geometry.W
    g = np.linalg.pinv(w)[2]
    c = 1.0 / np.hypot(w[:, 0], w[:, 1])
    weight = g**2 / c**2
    parts = [_windows(d, w, window_s) for d in drives]
    u = np.concatenate([p[0] for p in parts])
    rolled, dragged, travel = (np.vstack([p[k] for p in parts]) for k in (1, 2, 3))
    x = np.column_stack([rolled @ weight, dragged @ weight])
    sees = np.abs(g) * c > 1e-3 * np.max(np.abs(g) * c)  # pods entering the heading
    rolled_m, dragged_m = float(rolled[:, sees].sum()), float(dragged[:, sees].sum())
    if rolled_m < 1.0:
        raise FitError(f"the pods the IMU check sees rolled only {rolled_m:.2f} m")
    drag_ok = dragged_m >= MIN_DRAG_M
    cols = [0, 1] if drag_ok else [0]
    design = np.column_stack([x[:, cols], np.ones(u.size)])
    y = u**2
    keep = np.ones(y.size, dtype=bool)
    beta, se = np.zeros(design.shape[1]), np.full(design.shape[1], np.nan)
    law = np.zeros(2)
    for n_pass in range(MAX_TRIM_PASSES):
        # the two ends' rounding of each pod's travel, blurred by the slip the law gives it
        blur = (law[0] * rolled + law[1] * dragged) / c**2
        ends = expected_frac_variance(travel, blur) @ g**2
        beta, se = gamma_nnls(design[keep], y[keep], ends[keep])
        law = np.array([beta[0], beta[1] if drag_ok else beta[0]])
        now = y <= TRIM * np.maximum(design @ beta + ends, 1e-300)
        if np.array_equal(now, keep) and n_pass > 0:  # one pass more: the blur needs a law
            break
        keep = now
    roll, roll_se = float(beta[0]), float(se[0])
    drag, drag_se = (float(beta[1]), float(se[1])) if drag_ok else (roll, float("nan"))
    return SlipFit(
        PodSlip(w, roll, drag), roll_se, drag_se, np.array([beta[-1]]), int(np.count_nonzero(keep)),
        int(np.count_nonzero(~keep)), drag_ok, rolled_m, dragged_m, window_s,
    )
