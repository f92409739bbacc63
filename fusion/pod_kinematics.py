"""Dead-wheel pod kinematics: the pod matrix W, body increments, SE(2) integration.

``Δn = W·(Δx, Δy, Δθ)`` with row i of W ``(cos φ_i, sin φ_i, L_i)/c_i`` (ticks per m, m,
rad; conventions: docs/PODS.md § "Kinematics"). A pod-geometry model file (TOML, kind
``pod_geometry``) holds c, φ and L per pod with their units and provenance;
:func:`load_pod_model` checks both.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numba
import numpy as np

from sensorbench.errors import FusionError, ModelFileError
from sensorbench.fusion.chunk_invariant import pinv_cached, rows_dot
from sensorbench.fusion.odometry_drift import CalibrationError, PodSlip, world_step_variances
from sensorbench.logs.model_file import model_document, read_model, write_document
from sensorbench.logs.model_keys import AXES, POD_GEOMETRY_KEYS

POD_MODEL_KIND = "pod_geometry"
POD_MODEL_VERSION = 1
POD_MODEL_UNITS = {
    "distance_per_tick": "m",
    "rolling_angle": "rad",
    "lever_arm": "m",
    "wheel_radius": "m",
    "time_offset": "s",
}


@dataclass(frozen=True)
class PodGeometry:
    """Geometry of N pods (normally 3).

    Attributes:
        c: distance per tick (m), shape (N,).
        phi: rolling angle in the body frame (rad, CCW from body x), shape (N,).
        lever: lever arm L = x sin φ − y cos φ (m), shape (N,).
        names: pod names, in counter order.
        counts_per_rev: ticks per wheel revolution (to convert c to a radius), or None.
        row_cov: covariance (3N, 3N) of the stacked rows of :attr:`W` as fitted, or None
            (:class:`~sensorbench.fusion.odometry_drift.CalibrationError`).
        slip: the wheels' slip law (roll_var, drag_var[, turn_var] of
            :class:`~sensorbench.fusion.odometry_drift.PodSlip`), or None.
        creep: the wheels' creep (:data:`CREEP_KEYS`' values in order), or None.
        imu_rate_var: with two pods, the heading from an IMU's yaw: the yaw increments'
            random walk (rad²/s), the IMU a row (0, 0, 1) of :attr:`W` (docs/PODS.md §
            "Any wheel layout"); None: the pods give the heading.
        imu_bias_walk: with :attr:`imu_rate_var`, the gyro bias's random walk
            ((rad/s)²/s; :func:`imu_bias_variance`); None: not stated (none).
    """

    c: np.ndarray
    phi: np.ndarray
    lever: np.ndarray
    names: tuple[str, ...] = ("pod0", "pod1", "pod2")
    counts_per_rev: np.ndarray | None = field(default=None)
    row_cov: np.ndarray | None = field(default=None)
    slip: tuple[float, ...] | None = field(default=None)
    creep: tuple[float, ...] | None = field(default=None)
    imu_rate_var: float | None = field(default=None)
    imu_bias_walk: float | None = field(default=None)

    def __post_init__(self) -> None:
        for name in ("c", "phi", "lever"):
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=float))
        n = self.c.size
        if self.phi.size != n or self.lever.size != n or len(self.names) != n:
            raise FusionError("pod geometry: c, phi, lever and names must have one entry per pod")
        if not np.all(np.isfinite(self.c)) or np.any(self.c <= 0):
            raise FusionError("pod geometry: distance per tick must be finite and > 0 (m)")
        if self.counts_per_rev is not None:
            object.__setattr__(self, "counts_per_rev", np.asarray(self.counts_per_rev, dtype=float))
        if self.row_cov is not None:
            cov = np.asarray(self.row_cov, dtype=float)
            if cov.shape != (3 * n, 3 * n) or not np.all(np.isfinite(cov)):
                raise FusionError(f"pod geometry: row covariance must be finite {3 * n}x{3 * n}")
            tol = 1e-9 * float(np.abs(cov).max())  # the model file's round-off tolerance
            if np.abs(cov - cov.T).max() > tol:
                raise FusionError(
                    "pod geometry: row covariance is not symmetric (|C - Cᵀ| up to "
                    f"{np.abs(cov - cov.T).max():.3g}, more than 1e-9 of its largest entry)"
                )
            cov = 0.5 * (cov + cov.T)  # round-off only
            if np.linalg.eigvalsh(cov).min() < -tol:
                raise FusionError("pod geometry: row covariance must be positive semi-definite")
            object.__setattr__(self, "row_cov", cov)
        if self.slip is not None:
            if len(self.slip) not in (2, 3):
                raise FusionError(f"pod slip law needs 2 or 3 terms, got {len(self.slip)}")
            object.__setattr__(self, "slip", tuple(float(v) for v in self.slip))
            self.slip_model()  # validates
        if self.creep is not None:
            creep = tuple(float(v) for v in self.creep)
            ok = all(math.isfinite(v) for v in creep) and all(v >= 0 for v in creep[:4])
            if len(creep) not in (4, 6) or not ok:
                raise FusionError(
                    f"pod creep needs 4 finite terms >= 0 and optionally 2 finite "
                    f"estimates, got {self.creep}"
                )
            object.__setattr__(self, "creep", creep)
        if self.imu_rate_var is not None:
            if not (math.isfinite(self.imu_rate_var) and self.imu_rate_var >= 0):
                raise FusionError(f"IMU yaw rate variance must be >= 0, got {self.imu_rate_var}")
            if n != 2 or self.creep is not None:
                raise FusionError("an IMU heading row goes with exactly two pods and no creep")
            object.__setattr__(self, "imu_rate_var", float(self.imu_rate_var))
        if self.imu_bias_walk is not None:
            if self.imu_rate_var is None:
                raise FusionError("a gyro bias walk goes with an IMU heading row")
            if not (math.isfinite(self.imu_bias_walk) and self.imu_bias_walk >= 0):
                raise FusionError(f"gyro bias walk must be >= 0, got {self.imu_bias_walk}")
            object.__setattr__(self, "imu_bias_walk", float(self.imu_bias_walk))

    def calibration_error(self) -> CalibrationError | None:
        """The fitted geometry's uncertainty along a path, None without a covariance."""
        if self.row_cov is None:
            return None
        rows = np.zeros((3 * self.W.shape[0],) * 2)  # the IMU's row is exact
        rows[: self.row_cov.shape[0], : self.row_cov.shape[0]] = self.row_cov
        return CalibrationError(self.W, rows, self.creep)

    def slip_model(self) -> PodSlip | None:
        """The wheels' slip law bound to this geometry, None without one."""
        if self.slip is None:
            return None
        roll, drag, turn = (*self.slip, 0.0)[:3]
        return PodSlip(self.W, roll, drag, turn, self.imu_rate_var or 0.0)

    @classmethod
    def from_mounts(
        cls,
        x: Sequence[float],
        y: Sequence[float],
        phi: Sequence[float],
        c: Sequence[float],
        names: Sequence[str] | None = None,
        counts_per_rev: Sequence[float] | None = None,
    ) -> PodGeometry:
        """Geometry from pod positions (m), rolling angles (rad) and distance per tick (m)."""
        x, y, phi = (np.asarray(v, dtype=float) for v in (x, y, phi))
        lever = x * np.sin(phi) - y * np.cos(phi)
        names = tuple(names) if names is not None else tuple(f"pod{i}" for i in range(x.size))
        cpr = None if counts_per_rev is None else np.asarray(counts_per_rev, dtype=float)
        return cls(np.asarray(c, dtype=float), phi, lever, names, cpr)

    @property
    def radius(self) -> np.ndarray | None:
        """Wheel radius (m) = c·counts_per_rev/(2π), or None without counts per revolution."""
        return None if self.counts_per_rev is None else self.c * self.counts_per_rev / (2 * np.pi)

    @property
    def W(self) -> np.ndarray:
        """The (N, 3) matrix with ``Δn = W·(Δx, Δy, Δθ)`` (ticks per m, m, rad): rows
        (cos φ_i, sin φ_i, L_i)/c_i, and (0, 0, 1) below them for an IMU's heading (its
        "ticks" radians of yaw)."""
        w = np.column_stack([np.cos(self.phi), np.sin(self.phi), self.lever]) / self.c[:, None]
        return w if self.imu_rate_var is None else np.vstack([w, [0.0, 0.0, 1.0]])

    def rounding_covariance(self) -> np.ndarray:
        """Body covariance (3, 3) of the odometry pose from tick rounding alone: each
        cumulative count is the travel floored to whole ticks, one uniform error of 1/12
        tick² per pod, mapped through W⁺ (m², m·rad, rad²); an IMU's yaw does not round."""
        w_inv = pinv_cached(self.W)[:, : self.c.size]
        return w_inv @ w_inv.T / 12.0

    def rounding_floor(self) -> dict[str, float]:
        """Heading-averaged rounding variance per split-filter axis: x and y the mean of the
        body x and y variances (the world axes see the body axes rotated), θ as is."""
        cov = self.rounding_covariance()
        xy = 0.5 * float(cov[0, 0] + cov[1, 1])
        return {"x": xy, "y": xy, "theta": float(cov[2, 2])}

    def rounding_profile(self, heading: np.ndarray) -> dict[str, np.ndarray]:
        """Per step (K,), the axis's rounding variance at the heading θ_k (rad; the world x
        and y of ``R(θ)·C·R(θ)ᵀ``) over its heading average (:meth:`rounding_floor`): the
        filters' r times it is the step's r."""
        cov = self.rounding_covariance()
        floor = self.rounding_floor()
        th = np.asarray(heading, dtype=float)
        world = world_step_variances(np.broadcast_to(cov, (th.size, 3, 3)), th)
        return {a: world[a] / floor[a] for a in AXES}


SERIES_TERMS = 40
"""Terms of :func:`expected_frac_variance`'s Fourier series (the tail ≤ 0.0025 tick²)."""


def expected_frac_variance(mu: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """E[f·(1 − f)] (tick²), the variance of a frame's count rounding, for f the fractional
    part of δ ~ N(mu, sigma2) (ticks, tick²):
    ``1/6 − Σₙ cos(2πnμ)·exp(−2π²n²σ²)/(π²n²)``."""
    mu, s2 = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(sigma2, dtype=float))
    # term by term (a (..., SERIES_TERMS) array of an hour at 200 Hz: 0.7 GB), each element
    # down to its own weight of 1e-12 (its value does not depend on the other elements)
    total = np.full(mu.shape, 1.0 / 6.0)
    phase = (2 * np.pi) * mu
    decay = -2 * np.pi**2 * s2
    for n in range(1, SERIES_TERMS + 1):
        weight = np.exp(decay * n**2)
        live = weight > 1e-12
        if not np.any(live):
            break  # every later term is smaller still
        total -= np.where(live, np.cos(phase * n) * weight, 0.0) / (np.pi**2 * n**2)
    return np.clip(total, 0.0, 0.25)


def condition_number(W: np.ndarray) -> float:
    """2-norm condition number of W with the heading column (ticks per rad) divided by the
    RMS lever arm implied by W, so every column is ticks per metre (with an IMU's heading
    row, that of the pods' translation columns); ≳ 100 means the odometry amplifies tick
    noise badly."""
    W = np.asarray(W, dtype=float)
    wheel = np.linalg.norm(W[:, :2], axis=1)
    if not np.all(wheel > 0):  # an IMU's heading row (0, 0, 1): the pods give x and y
        return float(np.linalg.cond(W[wheel > 0, :2]))
    length_scale_m = float(np.sqrt(np.mean((W[:, 2] / wheel) ** 2)))
    if not length_scale_m > 0:
        return float("inf")
    return float(np.linalg.cond(W * np.array([1.0, 1.0, 1.0 / length_scale_m])))


def body_increments(W: np.ndarray, dn: np.ndarray) -> np.ndarray:
    """Body twist increments (Δx, Δy, Δθ) (m, m, rad), shape (K, 3), from ticks ``dn``
    (K, N): frame by frame through W⁻¹ (W⁺ with more than three wheels), so a frame's
    increment does not depend on the frames converted with it.

    Raises:
        FusionError: W is not (N, 3) with N >= 3 and rank 3.
    """
    return rows_dot(np.asarray(dn, dtype=float), increments_inverse(W))


def increments_inverse(W: np.ndarray) -> np.ndarray:
    """W⁻¹ (W⁺ with more than three wheels), (3, N): ticks to (Δx, Δy, Δθ) (m, m, rad).

    Raises:
        FusionError: W is not (N, 3) with N >= 3 and rank 3.
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[1] != 3 or W.shape[0] < 3:
        raise FusionError(f"W must be N×3 with N >= 3 wheels for odometry, got {W.shape}")
    return _checked_inverse(W.tobytes(), W.shape[0])


def body_increments_few(inverse: list[list[float]], dn: list[list[float]]) -> list[list[float]]:
    """:func:`body_increments` of a few frames in scalars, bit for bit: each row's products
    summed in the same order (``inverse``: :func:`increments_inverse` as lists)."""
    if len(inverse[0]) == 3:  # three pods (the usual): the sums written out, a third the cost
        (a0, a1, a2), (b0, b1, b2), (c0, c1, c2) = inverse
        return [[r0 * a0 + r1 * a1 + r2 * a2, r0 * b0 + r1 * b1 + r2 * b2,
                 r0 * c0 + r1 * c1 + r2 * c2] for r0, r1, r2 in dn]  # fmt: skip
    out = []
    for row in dn:
        inc = []
        for m in inverse:
            acc = row[0] * m[0]
            for x, w in zip(row[1:], m[1:], strict=True):
                acc = acc + x * w
            inc.append(acc)
        out.append(inc)
    return out


@lru_cache(maxsize=16)
def _checked_inverse(data: bytes, n: int) -> np.ndarray:
    """W⁻¹ of a 3×3 pod matrix (its bytes), W⁺ of an N×3 one, once per matrix (read-only).

    Raises:
        FusionError: W is (nearly) rank-deficient.
    """
    W = np.frombuffer(data, dtype=np.float64).reshape(n, 3)
    if not np.isfinite(np.linalg.cond(W)) or np.linalg.cond(W) > 1e12:
        raise FusionError("W is singular: the pods do not determine (Δx, Δy, Δθ)")
    inv = np.linalg.inv(W) if n == 3 else np.linalg.pinv(W)
    inv.setflags(write=False)
    return inv


def body_increments_two_pods_imu(
    W: np.ndarray,
    dn: np.ndarray,
    dtheta: np.ndarray,
    pods: tuple[int, int] = (0, 1),
) -> np.ndarray:
    """Body increments (K, 3) (m, m, rad) from the two ``pods``' columns of the ticks ``dn``
    (K, N) plus the IMU's heading increments ``dtheta`` (K,) rad: (Δx, Δy) from
    ``W[i, :2]·(Δx, Δy) = Δn_i − W[i, 2]·Δθ``; the pods' rolling directions must be at
    least 10° apart."""
    W = np.asarray(W, dtype=float)
    A = W[list(pods), :2]
    unit = A / np.linalg.norm(A, axis=1, keepdims=True)
    if abs(np.linalg.det(unit)) < np.sin(np.radians(10.0)):
        raise FusionError(
            f"pods {pods} are (nearly) parallel, less than 10° apart: two parallel pods plus "
            f"an IMU cannot give sideways motion; use a parallel and the perpendicular pod"
        )
    dn = np.asarray(dn, dtype=float)
    dtheta = np.asarray(dtheta, dtype=float)
    rhs = dn[:, list(pods)] - dtheta[:, None] * W[list(pods), 2][None, :]
    xy = np.linalg.solve(A, rhs.T).T
    return np.column_stack([xy, dtheta])


REST_S = 0.1
"""A frame ends a rest when no counter changed over the last this many seconds of frames:
the robot is not turning (:func:`imu_heading_steps`)."""


def rest_runs(rest: np.ndarray) -> np.ndarray:
    """Runs of True in ``rest`` (K,) bool: (R, 2) int, each run's first step and the step
    after its last."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], np.asarray(rest, dtype=int), [0]])))
    return edges.reshape(-1, 2)


def pods_at_rest(dn: np.ndarray, dt: np.ndarray) -> np.ndarray:
    """Whether each step (K,) is at rest: no counter of ``dn`` (K, N) ticks changed over the
    last :data:`REST_S` of steps ``dt`` (K,) s."""
    dt = np.asarray(dt, dtype=float)
    span = max(1, round(REST_S / max(float(np.median(dt)) if dt.size else 1.0, 1e-9)))
    moved = np.concatenate([np.zeros(span), np.cumsum(np.any(np.asarray(dn) != 0, axis=1))])
    return (moved[span:] - moved[:-span]) == 0


def imu_heading_steps(
    dn: np.ndarray, imu_dtheta: np.ndarray, dt: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Heading increments (K,) rad from an IMU's yaw increments ``imu_dtheta`` (K,) for
    two pods' ticks ``dn`` (K, 2) over steps of ``dt`` (K,) s, causally: 0 at rest (no
    counter changed over the last :data:`REST_S`), elsewhere the IMU's less its bias, the
    mean yaw rate over the rests before (rad/s; 0 before the first); nan where the IMU's
    increment is (a rotation not measured is not none: the filters predict that step).
    Also returns whether each step is at rest (K,) bool."""
    dt = np.asarray(dt, dtype=float)
    imu = np.asarray(imu_dtheta, dtype=float)
    rest = pods_at_rest(dn, dt)
    # the bias from the rests before the step (exclusive): the same numbers in any chunks
    seen = rest & np.isfinite(imu)
    yaw_at_rest = np.concatenate([[0.0], np.cumsum(np.where(seen, imu, 0.0))])[:-1]
    time_at_rest = np.concatenate([[0.0], np.cumsum(np.where(seen, dt, 0.0))])[:-1]
    bias = np.divide(yaw_at_rest, time_at_rest, out=np.zeros_like(dt), where=time_at_rest > 0)
    return np.where(rest, 0.0, imu - bias * dt), rest


def bridged_yaw_steps(t: np.ndarray, yaw: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The IMU's yaw increments ``steps`` (K,) rad over frames at ``t`` (K+1,) s with yaw
    ``yaw`` (K+1,) rad (wrapped; nan: missing), a step with a missing end taken from the
    yaw interpolated in time across the gap (the yaw is an integral: a lost sample loses
    where in the gap the rotation happened, not the rotation, while it turns under π
    there); nan before the first and after the last yaw."""
    steps = np.asarray(steps, dtype=float)
    ok = np.isfinite(yaw)
    if np.all(np.isfinite(steps)) or np.count_nonzero(ok) < 2:
        return steps
    filled = np.interp(t, t[ok], np.unwrap(yaw[ok]), left=np.nan, right=np.nan)
    return np.where(np.isfinite(steps), steps, np.diff(filled))


def imu_bias_variance(
    rest: np.ndarray, dt: np.ndarray, rate_var: float, bias_walk: float, fresh: bool = False
) -> np.ndarray:
    """Growth (K,) rad² of the variance of :func:`imu_heading_steps`' heading error over each
    step beyond the yaw's own random walk (``rate_var·dt``): moving, the heading integrates
    the bias estimate's error β (rad/s), which the gyro bias's walk ``bias_walk``
    ((rad/s)²/s) moves; at rest the heading is held and β is that of the mean rate over the
    ``rest`` (K,) steps so far (each step's rate noise ``rate_var/dt``). The heading error's
    covariance with β is carried, so the stretches between rests, which share the bias
    estimate, add up exactly (entries may be negative); 0 at rest. ``fresh``: each stretch's
    own growth, its heading error counted from its start. ``dt`` (K,) s; ``rate_var``
    rad²/s. Before the first rest the bias is taken as known (β 0)."""
    rest = np.ascontiguousarray(rest, dtype=np.bool_)
    dt = np.ascontiguousarray(dt, dtype=float)
    return _bias_growth(rest, dt, float(rate_var), float(bias_walk), fresh)


@numba.njit(cache=True)
def _bias_growth(
    rest: np.ndarray, dt: np.ndarray, rate_var: float, walk: float, fresh: bool
) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`imu_bias_variance`, step after step: the covariance of (heading error e, bias
    estimate error β)."""
    out = np.zeros(dt.size)
    pee = peb = pbb = total = 0.0
    for k in range(dt.size):
        h = dt[k]
        if rest[k]:
            total += h
            g = h / total  # the running mean's weight of this step
            pbb = (1.0 - g) ** 2 * (pbb + walk * h) + g * g * rate_var / h
            peb = 0.0 if fresh else (1.0 - g) * peb
            pee = 0.0 if fresh else pee
        else:
            # e' = e − β·h + ∫W, β' = β − W(h), W the bias's walk over the step
            grown = pee - 2.0 * h * peb + h * h * pbb + walk * h**3 / 3.0
            peb = peb - h * pbb - walk * h * h / 2.0
            pbb += walk * h
            out[k] = grown - pee
            pee = grown
    return out


def imu_rest_rate_variance(
    imu_dtheta: np.ndarray, dt: np.ndarray, rest: np.ndarray
) -> float | None:
    """The IMU yaw's random walk (rad²/s) at rest, from its yaw over :data:`REST_S` windows
    of the ``rest`` (K,) steps (:func:`imu_heading_steps`') less the rests' mean rate;
    ``imu_dtheta`` (K,) rad, ``dt`` (K,) s; None with fewer than 10 such windows."""
    dt = np.asarray(dt, dtype=float)
    imu = np.asarray(imu_dtheta, dtype=float)
    span = max(1, round(REST_S / max(float(np.median(dt)), 1e-9)))
    runs = rest_runs(np.asarray(rest, dtype=bool) & np.isfinite(imu))
    # windows of ``span`` consecutive rest steps from each run's start
    n_win = (runs[:, 1] - runs[:, 0]) // span
    starts = np.repeat(runs[:, 0], n_win) + span * (
        np.arange(int(n_win.sum())) - np.repeat(np.cumsum(n_win) - n_win, n_win)
    )
    if starts.size < 10:
        return None
    yaw_sum = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(imu), imu, 0.0))])
    t_sum = np.concatenate([[0.0], np.cumsum(dt)])
    y = yaw_sum[starts + span] - yaw_sum[starts]
    t = t_sum[starts + span] - t_sum[starts]
    rate = y.sum() / t.sum()
    return float(np.mean((y - rate * t) ** 2 / t))


def repair_bounces(
    W: np.ndarray, dn: np.ndarray, imu_dtheta: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rebuild frames where a pod lost contact (a bounce) from the other pods and the IMU
    (docs/PODS.md § "Bounce repair"), flagged beyond 8 robust spreads.

    Returns:
        ``(increments (K, 3), repaired (K,) bool, culprit (K,) int, −1 where none)``.
    """
    W = np.asarray(W, dtype=float)
    dn = np.asarray(dn, dtype=float)
    inc = body_increments(W, dn)
    imu = np.asarray(imu_dtheta, dtype=float)
    k_n = inc.shape[0]
    culprit = np.full(k_n, -1)
    resid = inc[:, 2] - imu
    ok = np.isfinite(resid)
    if np.count_nonzero(ok) < 10:
        return inc, np.zeros(k_n, dtype=bool), culprit
    centred = resid - np.median(resid[ok])
    mad = 1.4826 * float(np.median(np.abs(centred[ok])))
    w_inv = np.linalg.pinv(W)
    sigma_q = float(np.sqrt((w_inv @ w_inv.T)[2, 2] / 6.0))
    flag = ok & (np.abs(centred) > 8.0 * max(mad, sigma_q))
    if not np.any(flag):
        return inc, flag, culprit
    idx = np.flatnonzero(flag)
    best = np.full(idx.size, -np.inf)
    repaired = inc[idx].copy()
    for i in range(W.shape[0]):
        rest = [j for j in range(W.shape[0]) if j != i]
        try:
            if len(rest) == 2:
                alt = body_increments_two_pods_imu(W, dn[idx], imu[idx], pods=(rest[0], rest[1]))
            else:
                alt = body_increments(W[rest], dn[idx][:, rest])
        except FusionError:
            continue
        predicted = alt @ W[i]
        deficit = np.abs(predicted) - np.abs(dn[idx, i])
        better = deficit > best
        best = np.where(better, deficit, best)
        repaired[better] = alt[better]
        culprit[idx[better]] = i
    inc[idx] = repaired
    return inc, flag, culprit


def _arc_factors(dtheta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sin(θ)/θ and (1 − cos θ)/θ, with series near 0."""
    small = np.abs(dtheta) < 1e-6
    safe = np.where(small, 1.0, dtheta)
    s = np.where(small, 1.0 - dtheta**2 / 6.0, np.sin(safe) / safe)
    c = np.where(small, dtheta / 2.0 - dtheta**3 / 24.0, (1.0 - np.cos(safe)) / safe)
    return s, c


def se2_exp(increments: np.ndarray) -> np.ndarray:
    """Relative poses (dx, dy, dθ) reached by constant body twists ``increments`` (K, 3)."""
    inc = np.asarray(increments, dtype=float)
    s, c = _arc_factors(inc[:, 2])
    dx = s * inc[:, 0] - c * inc[:, 1]
    dy = c * inc[:, 0] + s * inc[:, 1]
    return np.column_stack([dx, dy, inc[:, 2]])


def se2_log(relative: np.ndarray) -> np.ndarray:
    """Inverse of :func:`se2_exp`: the constant twist that reaches each relative pose."""
    rel = np.asarray(relative, dtype=float)
    s, c = _arc_factors(rel[:, 2])
    det = s * s + c * c
    tx = (s * rel[:, 0] + c * rel[:, 1]) / det
    ty = (-c * rel[:, 0] + s * rel[:, 1]) / det
    return np.column_stack([tx, ty, rel[:, 2]])


def relative_poses(poses: np.ndarray) -> np.ndarray:
    """Pose k+1 expressed in the body frame of pose k, for a path (K+1, 3) → (K, 3)."""
    p = np.asarray(poses, dtype=float)
    d = np.diff(p[:, :2], axis=0)
    th = p[:-1, 2]
    ct, st = np.cos(th), np.sin(th)
    return np.column_stack(
        [ct * d[:, 0] + st * d[:, 1], -st * d[:, 0] + ct * d[:, 1], np.diff(p[:, 2])]
    )


def integrate_path(increments: np.ndarray, pose0: Sequence[float] = (0.0, 0.0, 0.0)) -> np.ndarray:
    """World path (K+1, 3) of (x, y, θ) (m, m, rad, θ unwrapped) from body increments (K, 3),
    each a constant-twist arc (the SE(2) exponential)."""
    inc = np.asarray(increments, dtype=float)
    rel = se2_exp(inc)
    # summed step after step from the start pose: a path continued from its last pose
    # gives the numbers of the whole path
    theta = np.cumsum(np.concatenate([[float(pose0[2])], inc[:, 2]]))
    ct, st = np.cos(theta[:-1]), np.sin(theta[:-1])
    wx = ct * rel[:, 0] - st * rel[:, 1]
    wy = st * rel[:, 0] + ct * rel[:, 1]
    x = np.cumsum(np.concatenate([[float(pose0[0])], wx]))
    y = np.cumsum(np.concatenate([[float(pose0[1])], wy]))
    return np.column_stack([x, y, theta])


IMU_KEY = "yaw_rate_var_rad2_per_s"
"""The IMU heading row's random walk in a model file's ``[imu]`` (two pods)."""
IMU_WALK_KEY = "bias_walk_rad2_per_s3"
"""The gyro bias's random walk in a model file's ``[imu]`` (:attr:`PodGeometry.imu_bias_walk`)."""
SLIP_TURN_KEY = "turn_m2_per_m_per_m_rad_s2"
"""The slip law's lateral-acceleration term in a model file's ``[slip]`` (0 when absent)."""
CREEP_KEYS = (
    "creep_speed_var_s2_per_m2",
    "creep_turn_var_s4_per_m2_rad2",
    "creep_speed_ref_m_per_s",
    "creep_turn_ref_m_rad_per_s2",
    "creep_speed_s_per_m",
    "creep_turn_s2_per_m_rad",
)
"""The creep terms in a model file's ``[slip]`` (:attr:`PodGeometry.creep`; none when absent;
without the last two, the estimates, the odometry is not corrected)."""


def save_pod_model(
    path: str | os.PathLike[str],
    geometry: PodGeometry,
    prov: Mapping[str, Any],
    extra: Sequence[Mapping[str, Any]] | None = None,
    summary: Mapping[str, Any] | None = None,
    slip_report: Mapping[str, Any] | None = None,
) -> Path:
    """Write a pod-geometry model file (kind ``pod_geometry``): a ``[[pod]]`` table per pod
    (``extra[i]`` merged into pod i); ``slip_report`` is stored beside the slip law (how it
    was fitted)."""
    body: dict[str, Any] = {}
    if summary:
        body["fit"] = dict(summary)
    g, radius = geometry, geometry.radius
    body["pod"] = []
    for i, name in enumerate(g.names):
        t: dict[str, Any] = {
            "name": name,
            "distance_per_tick": float(g.c[i]),
            "rolling_angle": float(g.phi[i]),
            "lever_arm": float(g.lever[i]),
        }
        if radius is not None and g.counts_per_rev is not None:
            t["counts_per_rev"] = float(g.counts_per_rev[i])
            t["wheel_radius"] = float(radius[i])
        body["pod"].append({**t, **(extra[i] if extra is not None else {})})
    if geometry.slip is not None:
        body["slip"] = {
            "roll_m2_per_m": geometry.slip[0],
            "drag_m2_per_m": geometry.slip[1],
            **dict(zip([SLIP_TURN_KEY], geometry.slip[2:], strict=False)),
            **dict(zip(CREEP_KEYS, geometry.creep or (), strict=False)),
            **(dict(slip_report) if slip_report else {}),
        }
    if geometry.imu_rate_var is not None:
        body["imu"] = {IMU_KEY: geometry.imu_rate_var}
        if geometry.imu_bias_walk is not None:
            body["imu"][IMU_WALK_KEY] = geometry.imu_bias_walk
    if geometry.row_cov is not None:
        body["calibration"] = {
            "units": "stacked W rows (ticks per m, ticks per m, ticks per rad) per pod",
            "row_covariance": [[float(v) for v in row] for row in geometry.row_cov],
        }
    return write_document(
        path, model_document(POD_MODEL_KIND, POD_MODEL_VERSION, POD_MODEL_UNITS, prov, body)
    )


def load_pod_model(path: str | os.PathLike[str]) -> PodGeometry:
    """Read a pod-geometry model file, checking kind, version, units and completeness.

    Raises:
        ModelFileError: wrong kind/version/units, or a pod whose distance per tick,
            angle or lever arm was not identified by the fit (its ``status``
            table says why).
    """
    doc = read_model(
        path, POD_MODEL_KIND, POD_MODEL_VERSION, POD_MODEL_UNITS, keys=POD_GEOMETRY_KEYS
    )
    pods = doc.get("pod", [])
    imu = doc.get("imu", {}).get(IMU_KEY)
    if len(pods) < 3 and not (len(pods) == 2 and imu is not None):
        raise ModelFileError(
            f"{path}: odometry needs >= 3 [[pod]] tables, or 2 and an [imu] table for the "
            f"heading (its {IMU_KEY}: fit pods on sessions with IMU yaw), found {len(pods)}"
            + ("" if len(pods) != 2 else " and no [imu] table")
        )
    for p in pods:
        status = p.get("status", {})
        bad = {k: v for k, v in status.items() if v != "ok"}
        if bad:
            why = "; ".join(f"{k}: {v}" for k, v in bad.items())
            raise ModelFileError(
                f"{path}: pod {p.get('name')!r} is incomplete ({why}); refit with drives "
                f"that excite it before using it for odometry"
            )
        for key in ("distance_per_tick", "rolling_angle", "lever_arm"):
            if not isinstance(p.get(key), (int, float)) or not np.isfinite(p[key]):
                raise ModelFileError(f"{path}: pod {p.get('name')!r} has no finite {key}")
    cpr = [p.get("counts_per_rev") for p in pods]
    cov = doc.get("calibration", {}).get("row_covariance")
    slip = doc.get("slip")
    try:
        row_cov = None if cov is None else np.asarray(cov, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: [calibration] row_covariance: {exc}") from exc
    law: tuple[Any, ...] | None = None
    creep: tuple[Any, ...] | None = None
    try:
        if slip is not None:
            law = (slip["roll_m2_per_m"], slip["drag_m2_per_m"], slip.get(SLIP_TURN_KEY, 0.0))
        if slip is not None and CREEP_KEYS[0] in slip:
            # the first four are required, the estimates optional
            creep = tuple(slip[k] for i, k in enumerate(CREEP_KEYS) if i < 4 or k in slip)
    except (TypeError, KeyError) as exc:
        raise ModelFileError(f"{path}: [slip] table lacks {exc}") from exc
    try:
        return PodGeometry(
            c=[p["distance_per_tick"] for p in pods],
            phi=[p["rolling_angle"] for p in pods],
            lever=[p["lever_arm"] for p in pods],
            names=tuple(str(p.get("name", f"pod{i}")) for i, p in enumerate(pods)),
            counts_per_rev=None if any(v is None for v in cpr) else cpr,
            row_cov=row_cov,
            slip=law,
            creep=creep,
            imu_rate_var=imu,
            imu_bias_walk=doc.get("imu", {}).get(IMU_WALK_KEY),
        )
    except (TypeError, ValueError, FusionError) as exc:
        raise ModelFileError(f"{path}: {exc}") from exc
