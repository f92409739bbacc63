"""Fit the body-axis slip model (:class:`~sensorbench.fusion.odometry_drift.OdometryDrift`)
from drives recorded against a reference (mocap).

Per body axis j ``E[δ_j²] = a_jx·s_x + a_jy·s_y + a_jθ·s_θ + τ_j²·(v_j,start² + v_j,end²)
+ c_j`` over 2 s intervals (s the path length per axis, m or rad), by gamma-weighted NNLS;
only a enters the filters (docs/PODS.md § "Body-axis fallback").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import nnls

from sensorbench.characterize.pods.imu_heading_fit import with_imu_heading
from sensorbench.errors import FitError
from sensorbench.fusion.odometry_drift import OdometryDrift, coefficient_table, frame_period
from sensorbench.fusion.pod_drive import Drive, align_drive, drive_intervals
from sensorbench.fusion.pod_kinematics import PodGeometry, repair_bounces
from sensorbench.logs.model_keys import AXES

INTERVAL_S = 2.0
TRIM = 25.0
"""An interval (a window of the slip fit) whose δ² exceeds this many times its fitted
expectation is a bounce (p < 1e-6 for a Gaussian δ) and is dropped; refitted until none
changes side, at most :data:`MAX_TRIM_PASSES` times (the slip fits' too)."""
MAX_TRIM_PASSES = 6
MIN_EXCITATION = (0.5, 0.5, 1.0)
"""Summed |motion| per column (m, m, rad) below which a coefficient is not identified."""


@dataclass
class DriftFit:
    """Fitted slip model with what it rests on.

    Attributes:
        drift: the model.
        coef_se: (3, 3) standard errors of its coefficients (nan where not identified).
        intercept: per error axis, the non-accumulating variance c_j (m², m², rad²).
        timing_s: per error axis, the residual encoder/reference time misalignment τ_j
            the fit attributes to it (s).
        identified: (3, 3) which coefficients the drives excited.
        n_intervals: intervals used.
        excitation: summed |ξ| per column over the intervals (m, m, rad).
    """

    drift: OdometryDrift
    coef_se: np.ndarray
    intercept: np.ndarray
    timing_s: np.ndarray
    identified: np.ndarray
    n_intervals: int
    excitation: np.ndarray

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (SI units)."""
        return {
            "coefficients": coefficient_table(self.drift.coef),
            "standard_errors": coefficient_table(self.coef_se),  # nan (null): not identified
            "intercept": dict(zip(AXES, map(float, self.intercept), strict=True)),
            "timing_s": dict(zip(AXES, map(float, self.timing_s), strict=True)),
            "identified": coefficient_table(self.identified, bool),
            "n_intervals": self.n_intervals,
            "excitation": dict(
                zip(("m_x", "m_y", "rad"), map(float, self.excitation), strict=True)
            ),
        }


def _intervals(
    drives: Sequence[Drive], offsets: Sequence[float], w_inv: np.ndarray, interval_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per usable interval: odometry-minus-reference body difference (M, 3), signed
    reference motion (M, 3), path length Σ|body step| (M, 3; m, m, rad) and endpoint
    speeds² summed (M, 3; the timing term's regressor)."""
    parts = []
    for d, offset in zip(drives, offsets, strict=True):
        dn, xi, bounds = drive_intervals(d, offset, interval_s)
        odo = d.counts.astype(float) @ w_inv.T
        path, v, (lo, hi) = path_lengths(odo, d.t_enc), speeds(odo, d.t_enc), bounds.T
        parts.append((dn @ w_inv.T - xi, xi, path[hi] - path[lo], v[lo] ** 2 + v[hi] ** 2))
    if not parts:
        return tuple(np.empty((0, 3)) for _ in range(4))  # type: ignore[return-value]
    return tuple(np.vstack(c) for c in zip(*parts, strict=True))  # type: ignore[return-value]


SMOOTH_S = 0.1
"""Span (s) over which motion is measured for the path length: per frame, tick rounding
adds a jitter to |Δ| that sums over an interval (a robot driving straight would seem to
turn ~0.02 rad/s); over 0.1 s it averages out, and a reversal within it is rare."""


def path_lengths(odometry: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Cumulative path length (n, 3) per body axis (m, m, rad) of a cumulative odometry
    (n, 3), its speed taken over :data:`SMOOTH_S` spans (a running mean of |Δ|/B)."""
    n = odometry.shape[0]
    frame = frame_period(t_s)
    b = int(min(max(1, round(SMOOTH_S / frame)), max(1, n - 1)))
    ahead = np.abs(odometry[b:] - odometry[:-b]) / b  # mean |step| over the next b frames
    per_frame = np.vstack([ahead, np.repeat(ahead[-1:], b - 1, axis=0)])
    return np.vstack([np.zeros((1, 3)), np.cumsum(per_frame[: n - 1], axis=0)])


def speeds(odometry: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Body speeds (n, 3) (m/s, m/s, rad/s) of a cumulative odometry, centred differences
    over :data:`SMOOTH_S`."""
    n = odometry.shape[0]
    frame = frame_period(t_s)
    h = int(min(max(1, round(SMOOTH_S / (2 * frame))), max(1, (n - 1) // 2)))
    lo = np.clip(np.arange(n) - h, 0, n - 1)
    hi = np.clip(np.arange(n) + h, 0, n - 1)
    dt = np.maximum(t_s[hi] - t_s[lo], 1e-9)
    return (odometry[hi] - odometry[lo]) / dt[:, None]


def gamma_nnls(
    x: np.ndarray, y: np.ndarray, offset: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative coefficients of E[y] = offset + x·β with Var y = 2·E[y]² (y = δ², δ
    Gaussian), and their standard errors ``√diag(2·(Xᵀ diag(1/μ²) X)⁻¹)`` (two
    reweightings). ``offset`` is a known part of E[y] (default 0)."""
    off = np.zeros(y.size) if offset is None else np.asarray(offset, dtype=float)
    w = np.ones(y.size)
    beta = np.zeros(x.shape[1])
    floor = 1e-3 * max(float(np.mean(y)), 1e-300)  # an interval predicted exactly 0
    for _ in range(3):
        beta, _ = nnls(x * w[:, None], (y - off) * w)
        w = 1.0 / np.maximum(x @ beta + off, floor)
    info = (x * (w**2)[:, None]).T @ x / 2.0
    se = np.sqrt(np.clip(np.diag(np.linalg.pinv(info)), 0.0, None))
    return beta, se


def near_bounces(W: np.ndarray, dn: np.ndarray, imu_dtheta: np.ndarray) -> np.ndarray:
    """(K,) True within ±5 frames of a bounce the IMU yaw shows (:func:`~sensorbench.
    fusion.pod_kinematics.repair_bounces`; a bounce's edge frames lose too little to flag)."""
    return np.convolve(repair_bounces(W, dn, imu_dtheta)[1], np.ones(11), mode="same") > 0


def fit_drift(
    drives: Sequence[Drive], geometry: PodGeometry, interval_s: float = INTERVAL_S,
    align_interval_s: float = 0.5,
) -> DriftFit:
    """Fit the slip model from drives against their reference over intervals of
    ``interval_s`` s (not overlapping, so their errors are independent and the standard
    errors hold), aligned in time over intervals of ``align_interval_s`` s.

    Raises:
        FitError: a drive with another number of counters than ``geometry`` pods, fewer
            than 10 usable intervals, or nothing moved.
    """
    w_inv = np.linalg.pinv(geometry.W)
    for d in drives:
        if d.counts.shape[1] != geometry.c.size:
            raise FitError(f"{d.label}: {d.counts.shape[1]} counters, the pod model "
                           f"{geometry.c.size} pods")
        if d.imu_yaw is not None and d.bounce is None and geometry.imu_rate_var is None:
            # a parallel pod's bounce disagrees with the gyro: drop the intervals holding one
            d.bounce = near_bounces(geometry.W, np.diff(d.counts, axis=0), np.diff(d.imu_yaw))
    offsets = [align_drive(d, align_interval_s) for d in drives]
    if geometry.imu_rate_var is not None:  # two pods: the IMU's heading, no redundancy
        drives = [with_imu_heading(d) for d in drives]
    delta, signed, path, ends = _intervals(drives, offsets, w_inv, interval_s)
    if delta.shape[0] < 10:
        raise FitError(f"only {delta.shape[0]} intervals to fit the odometry drift from")
    excitation = path.sum(axis=0)
    excited = excitation >= np.asarray(MIN_EXCITATION)
    if not np.any(excited):
        raise FitError("the drives hardly moved: no odometry drift can be fitted")
    # the geometry's residual calibration error is linear in the signed motion: remove it
    beta_sys, *_ = np.linalg.lstsq(signed, delta, rcond=None)
    resid = delta - signed @ beta_sys
    coef = np.zeros((3, 3))
    coef_se = np.full((3, 3), np.nan)
    intercept = np.zeros(3)
    timing = np.zeros(3)
    for j in range(3):
        y = resid[:, j] ** 2
        x = np.column_stack([path, ends[:, j], np.ones(y.size)])
        cols = np.concatenate([excited, [True, True]])
        beta, se = np.zeros(5), np.full(5, np.nan)
        keep = np.ones(y.size, dtype=bool)
        for _ in range(MAX_TRIM_PASSES):
            beta[cols], se[cols] = gamma_nnls(x[keep][:, cols], y[keep])
            now = y <= TRIM * np.maximum(x @ beta, 1e-300)
            if np.array_equal(now, keep):
                break
            keep = now
        coef[j], coef_se[j] = beta[:3], se[:3]
        timing[j], intercept[j] = beta[3], beta[4]
        if excited[:2].any() and not excited[:2].all():
            coef[j, :2] = coef[j, :2].max()
    identified = np.tile(excited, (3, 1))
    return DriftFit(
        OdometryDrift(coef, identified), coef_se, intercept, np.sqrt(timing), identified,
        int(delta.shape[0]), excitation,
    )
