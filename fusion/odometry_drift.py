"""How far odometry drifts from the world: the body-axis slip model (:class:`OdometryDrift`),
the wheels' law (:class:`PodSlip`), the calibration's own error (:class:`CalibrationError`)
and their propagation through the dead-reckoning shear (docs/PODS.md § "Wheel slip").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numba
import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.chunk_invariant import pinv_cached, rows_dot
from sensorbench.logs.model_keys import AXES, COEF_KEYS


def coefficient_table(rows: np.ndarray, kind: type = float) -> dict[str, dict[str, Any]]:
    """``{error_axis: {per_m_x, per_m_y, per_rad}}`` of a (3, 3) array of the coefficients
    or of something per coefficient (their standard errors, whether identified: ``kind``)."""
    return {a: dict(zip(COEF_KEYS, map(kind, row), strict=True))
            for a, row in zip(AXES, rows, strict=True)}  # fmt: skip


@dataclass(frozen=True)
class OdometryDrift:
    """Slip variance per unit of body motion.

    Attributes:
        coef: (3, 3) non-negative; row j = body error axis (x, y in m²; θ in rad²), column
            = per |Δx| (per m), per |Δy| (per m), per |Δθ| (per rad).
        identified: (3, 3) bool, which of them the calibration drives identified (the
            others are guesses: 0, or the other per_m's value); None: not stated (a model file
            written before it said), taken as all identified.
    """

    coef: np.ndarray
    identified: np.ndarray | None = None

    def __post_init__(self) -> None:
        c = np.asarray(self.coef, dtype=float)
        if c.shape != (3, 3) or not np.all(np.isfinite(c)) or np.any(c < 0):
            raise FusionError(f"odometry drift coefficients must be finite, >= 0, 3x3: {c}")
        object.__setattr__(self, "coef", c)
        if self.identified is not None:
            object.__setattr__(self, "identified", np.asarray(self.identified, bool).reshape(3, 3))

    def unidentified(self) -> list[tuple[str, float]]:
        """``("axis.coefficient", value)`` of each coefficient not identified (SI, as
        :attr:`coef`), e.g. ``("theta.per_rad", 0.0)``."""
        ok = np.ones((3, 3), bool) if self.identified is None else self.identified
        return [(f"{a}.{k}", float(self.coef[j, i])) for j, a in enumerate(AXES)
                for i, k in enumerate(COEF_KEYS) if not ok[j, i]]  # fmt: skip

    def step_covariances(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> np.ndarray:
        """Covariance (K, 3, 3) of each step's body error (m², m², rad²), the axes
        independent (``dt`` unused)."""
        v = rows_dot(np.abs(np.nan_to_num(np.asarray(body_increments, dtype=float))), self.coef)
        return v[:, :, None] * np.eye(3)[None, :, :]

    def step_covariance_parts(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rolling, dragging) parts of :meth:`step_covariances`: all of it the first
        (``dt`` unused)."""
        whole = self.step_covariances(body_increments)
        return whole, np.zeros_like(whole)

    def as_dict(self) -> dict[str, Any]:
        """``{error_axis: {"per_m_x", "per_m_y", "per_rad"}}`` (SI: m²/m, rad²/m, ...), and
        its ``identified`` list of them when :attr:`identified` is stated."""
        table = coefficient_table(self.coef)
        if self.identified is not None:
            for row, ok in zip(table.values(), self.identified, strict=True):
                row["identified"] = [k for k, known in zip(COEF_KEYS, ok, strict=True) if known]
        return table

    @classmethod
    def from_dict(cls, d: dict[str, dict[str, Any]]) -> OdometryDrift:
        """Inverse of :meth:`as_dict` (an axis without ``identified``: all identified).

        Raises:
            FusionError: a missing axis or key.
        """
        try:
            rows = [[float(d[a][k]) for k in COEF_KEYS] for a in AXES]
            stated = [d[a].get("identified") for a in AXES]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FusionError(f"odometry drift table lacks or mangles {exc}") from exc
        known = [[k in (COEF_KEYS if s is None else s) for k in COEF_KEYS] for s in stated]
        return cls(np.array(rows), None if stated == [None] * 3 else np.array(known))


def world_step_variances(cov: np.ndarray, heading: np.ndarray) -> dict[str, np.ndarray]:
    """Per-step variances (K,) of the split filters' axes from body-frame step
    covariances (K, 3, 3): x and y of ``R(θ)·C·R(θ)ᵀ`` (m²) with θ the heading at the start
    of each step, θ as is (rad²)."""
    th = np.ascontiguousarray(heading, dtype=float)
    world = _world_rows(np.ascontiguousarray(cov, dtype=float), th)
    return {"x": world[0], "y": world[1], "theta": world[2]}


@numba.njit(cache=True)
def _world(c: float, s: float, cov: np.ndarray) -> tuple[float, float]:
    """x and y of ``R(θ)·C·R(θ)ᵀ`` for C = ``cov`` (3, 3), c = cos θ, s = sin θ."""
    xx, yy, xy = cov[0, 0], cov[1, 1], cov[0, 1]
    return (c * c * xx - 2 * c * s * xy + s * s * yy, s * s * xx + 2 * c * s * xy + c * c * yy)


@numba.njit(cache=True)
def _world_rows(cov: np.ndarray, heading: np.ndarray) -> np.ndarray:
    """(3, K) :func:`world_step_variances` of (K, 3, 3) ``cov`` at ``heading`` (K,)."""
    out = np.empty((3, heading.size))
    for k in range(heading.size):
        out[0, k], out[1, k] = _world(np.cos(heading[k]), np.sin(heading[k]), cov[k])
        out[2, k] = cov[k, 2, 2]
    return out


@numba.njit(cache=True)
def _carry_pose_error(
    carry: np.ndarray, inc: np.ndarray, heading: np.ndarray, q: np.ndarray
) -> np.ndarray:
    """Carry the pose error covariance ``carry`` = (xx, yy, θθ, xθ, yθ) in place over the
    K steps of body increments ``inc`` (K, 3) (m, m, rad) with body covariances ``q``
    (K, 3, 3), rotated by ``heading`` (K+1,) rad (docs/PODS.md, the shear recursion);
    returns the variances (K, 3) after each."""
    xx, yy, tt, xt, yt = carry[0], carry[1], carry[2], carry[3], carry[4]
    out = np.empty((inc.shape[0], 3))
    for k in range(inc.shape[0]):
        u = np.nan_to_num(inc[k])
        c, s = np.cos(heading[k]), np.sin(heading[k])
        dxw = c * u[0] - s * u[1]
        dyw = s * u[0] + c * u[1]
        wx, wy = _world(c, s, q[k])
        # cross terms of R·Q·Rᵀ between the world axes and the heading
        qxt = c * q[k, 0, 2] - s * q[k, 1, 2]
        qyt = s * q[k, 0, 2] + c * q[k, 1, 2]
        xx = xx + (-2 * dyw * xt + dyw**2 * tt + wx)
        yy = yy + (2 * dxw * yt + dxw**2 * tt + wy)
        xt = xt + (-dyw * tt + qxt)
        yt = yt + (dxw * tt + qyt)
        tt = tt + q[k, 2, 2]
        out[k, 0], out[k, 1], out[k, 2] = xx, yy, tt
    carry[0], carry[1], carry[2], carry[3], carry[4] = xx, yy, tt, xt, yt
    return out


TRAVEL_SMOOTH_S = 0.1
"""Span (s) over which counts are averaged before their distances are summed
(:func:`averaged_counts`): a wheel that hardly moves, or is dragged sideways, jitters by
a tick frame by frame, which is not rolling."""


def frame_period(t: np.ndarray) -> float:
    """Typical encoder frame period (s) of frame times ``t`` (s, non-decreasing): the median
    step, or, where most frames share a stamp (host-stamped frames read in bursts: four
    frames of 5 ms every 20 ms), the median positive step times the share of positive
    steps; 1e-6 for fewer than two distinct times."""
    d = np.diff(np.asarray(t, dtype=float))
    if d.size == 0:
        return 1e-6
    med = float(np.median(d))
    if med > 0:
        return med
    pos = d[d > 0]
    if pos.size == 0:
        return 1e-6
    return max(float(np.median(pos)) * pos.size / d.size, 1e-6)


def averaged_counts(dn: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Tick increments (K, N) averaged over :data:`TRAVEL_SMOOTH_S` of frames (times
    ``t_s`` (K+1,) s)."""
    from scipy.ndimage import uniform_filter1d

    span = max(1, round(TRAVEL_SMOOTH_S / frame_period(t_s)))
    return uniform_filter1d(np.asarray(dn, dtype=float), span, axis=0, mode="nearest")


def pod_distances(W: np.ndarray, body_increments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distance (K, N each, m) each pod rolls along and is dragged across its rolling
    direction over each body increment (m, m, rad; nan rows count as no motion)."""
    w = np.ascontiguousarray(W, dtype=float)
    return _pod_distances(w, np.ascontiguousarray(body_increments, dtype=float))


@numba.njit(cache=True)
def _pod_distances(w: np.ndarray, inc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pod_distances`, row after row."""
    n = w.shape[0]
    c = np.empty(n)
    sin_phi, cos_phi = np.empty(n), np.empty(n)
    for i in range(n):
        # an IMU's row (0, 0, 1) neither rolls nor is dragged: c 0
        moves = w[i, 0] != 0.0 or w[i, 1] != 0.0
        c[i] = 1.0 / np.hypot(w[i, 0], w[i, 1]) if moves else 0.0
        phi = np.arctan2(w[i, 1], w[i, 0])
        sin_phi[i], cos_phi[i] = np.sin(phi), np.cos(phi)
    rolled, dragged = np.empty((inc.shape[0], n)), np.empty((inc.shape[0], n))
    for k in range(inc.shape[0]):
        u = np.nan_to_num(inc[k])
        for i in range(n):
            rolled[k, i] = abs(u[0] * w[i, 0] + u[1] * w[i, 1] + u[2] * w[i, 2]) * c[i]
            dragged[k, i] = abs(-sin_phi[i] * u[0] + cos_phi[i] * u[1]) * (c[i] > 0)
    return rolled, dragged


@numba.njit(cache=True)
def _tick_variances(
    w: np.ndarray, slip: np.ndarray, inc: np.ndarray, h: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`PodSlip.pod_tick_variances`; ``slip`` = (roll_var, drag_var, turn_var[,
    imu_var]) and ``h`` (K,) the step durations (s), empty: without the turn and IMU terms.
    An IMU's row (0, 0, 1) takes ``imu_var·h`` (rad²) as its rolling part on a step
    that moves."""
    rolled, dragged = _pod_distances(w, inc)
    roll_var, drag_var, turn_var = slip[0], slip[1], slip[2]
    imu_var = slip[3] if slip.size > 3 else 0.0
    timed = h.size == inc.shape[0]
    turning = turn_var > 0 and timed
    for i in range(w.shape[0]):
        if w[i, 0] == 0.0 and w[i, 1] == 0.0:
            for k in range(inc.shape[0]):
                # at rest the heading is held (pod_kinematics.imu_heading_steps)
                moved = inc[k, 0] != 0.0 or inc[k, 1] != 0.0 or inc[k, 2] != 0.0
                rolled[k, i] = imu_var * h[k] if timed and moved else 0.0
                dragged[k, i] = 0.0
            continue
        c2 = 1.0 / (w[i, 0] ** 2 + w[i, 1] ** 2)
        for k in range(inc.shape[0]):
            var = roll_var * rolled[k, i]
            if turning:
                hk = max(h[k], 1e-9)
                turn = abs(inc[k, 2]) / hk if np.isfinite(inc[k, 2]) else 0.0
                # per metre the contact travels (rolled and dragged) × its speed × |ω|
                var += turn_var * turn * (rolled[k, i] ** 2 + dragged[k, i] ** 2) / hk
            rolled[k, i] = var / c2
            dragged[k, i] = drag_var * dragged[k, i] / c2
    return rolled, dragged


@numba.njit(cache=True)
def _body_covariances(w_inv: np.ndarray, tick_var: np.ndarray) -> np.ndarray:
    """``W⁺·diag(tick_var[k])·W⁺ᵀ`` (K, 3, 3), each entry's terms summed pod after pod."""
    out = np.empty((tick_var.shape[0], 3, 3))
    for k in range(tick_var.shape[0]):
        for j in range(3):
            for m in range(3):
                acc = w_inv[j, 0] * tick_var[k, 0] * w_inv[m, 0]
                for i in range(1, w_inv.shape[1]):
                    acc += w_inv[j, i] * tick_var[k, i] * w_inv[m, i]
                out[k, j, m] = acc
    return out


@dataclass(frozen=True)
class PodSlip:
    """Slip per pod, the wheels' own law (docs/PODS.md § "Wheel slip"): pod i's rolled
    distance errs by ``roll_var·|d_i| + drag_var·|d⊥_i| + turn_var·s_i·v_i·|ω|`` (m²) over
    a step, pods independent; the body step's covariance is ``Ŵ⁺·diag(var_i/c_i²)·Ŵ⁺ᵀ``.

    Attributes:
        W: (N, 3) pod matrix (ticks per m, m, rad).
        roll_var: m² per m rolled.
        drag_var: m² per m dragged.
        turn_var: m² per m its contact travels per m·rad/s² of its lateral acceleration.
        imu_var: an IMU's heading row (0, 0, 1) of W: its yaw's random walk (rad²/s).
    """

    W: np.ndarray
    roll_var: float
    drag_var: float
    turn_var: float = 0.0
    imu_var: float = 0.0

    def __post_init__(self) -> None:
        for name in ("roll_var", "drag_var", "turn_var", "imu_var"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise FusionError(f"pod slip {name} must be finite and >= 0, got {v}")

    def step_covariances(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> np.ndarray:
        """Covariance (K, 3, 3) of each step's body error (m², m·rad, rad²); ``dt`` (K,)
        the steps' durations (s), None: without the lateral-acceleration term."""
        roll, drag = self.step_covariance_parts(body_increments, dt)
        return roll + drag

    def step_covariance_parts(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rolling (lateral-acceleration term included) and the dragging part (K, 3, 3
        each) of :meth:`step_covariances`, which the filter noise fit scales separately."""
        roll, drag = self.pod_tick_variances(body_increments, dt)
        w_inv = self.kernel_arrays[2]
        return _body_covariances(w_inv, roll), _body_covariances(w_inv, drag)

    def pod_tick_variances(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rolling (its lateral-acceleration term when ``dt`` (K,) s is given) and dragging
        slip variance (K, N each) of each pod's travel over each step, in tick²."""
        inc = np.ascontiguousarray(body_increments, dtype=float)
        h = _NO_STEPS if dt is None else np.asarray(dt, dtype=float)
        w, slip, _ = self.kernel_arrays
        return _tick_variances(w, slip, inc, h)

    @cached_property
    def kernel_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """W, (roll_var, drag_var, turn_var) and W⁺ as the kernels take them, built once."""
        slip = np.array([self.roll_var, self.drag_var, self.turn_var, self.imu_var], float)
        return np.ascontiguousarray(self.W, dtype=float), slip, pinv_cached(self.W)


_NO_STEPS = np.empty(0)
"""Step durations of a call without them (:meth:`PodSlip.pod_tick_variances`)."""


SlipModel = OdometryDrift | PodSlip
"""A slip model the filters take: body-frame covariances of each step, whole and as
(rolling, dragging) parts."""


@dataclass(frozen=True)
class CalibrationError:
    """The fitted pod geometry's own uncertainty, carried along a path: the world pose
    error ``J_k·[δg, κ]`` in the stacked row errors δg (3N) and the creep's κ, covariance
    ``J_k·Σ·J_kᵀ`` (docs/PODS.md § "The calibration's own uncertainty" and § "Creep").

    Attributes:
        W: (N, 3) fitted pod matrix (ticks per m, m, rad).
        row_cov: (3N, 3N) covariance of its stacked rows.
        creep: (var κ_v (s²/m²), var κ_t (s⁴/(m·rad)²), v̄ (m/s), ā (m·rad/s²) and
            optionally the estimates κ̂_v (s/m), κ̂_t (s²/(m·rad))), or None.
    """

    W: np.ndarray
    row_cov: np.ndarray
    creep: tuple[float, ...] | None = None

    @cached_property
    def cov(self) -> np.ndarray:
        """Covariance (P, P) of every uncertain parameter: the rows', then κ_v's and
        κ_t's when creep is carried (P = 3N or 3N + 2)."""
        rows = np.ascontiguousarray(self.row_cov, dtype=float)
        if self.creep is None:
            return rows
        out = np.zeros((rows.shape[0] + 2, rows.shape[0] + 2))
        out[:-2, :-2] = rows
        out[-2, -2], out[-1, -1] = self.creep[0], self.creep[1]
        return out

    def start(self) -> np.ndarray:
        """The sensitivities (3, P) of x, y, θ to the parameters of :attr:`cov` at the start
        of a path: none."""
        return np.zeros((3, self.cov.shape[0]))

    def sensitivities_at(
        self,
        body_increments: np.ndarray,
        heading: np.ndarray,
        frames: np.ndarray,
        dt: np.ndarray | None = None,
    ) -> np.ndarray:
        """The sensitivities J (len(frames), 3, P) of x, y, θ to the parameters of
        :attr:`cov` at the given frame indices (0 = the start of the path, K = after the
        last of the K steps of ``body_increments``; ``dt`` (K,) the steps' durations (s)
        for the creep terms, None: 1 s), from :meth:`start`."""
        want = np.asarray(frames, dtype=np.int64)
        at = self.start()
        out = np.zeros((want.size, *at.shape))
        inc = np.ascontiguousarray(body_increments, dtype=float)
        h = np.ones(inc.shape[0]) if dt is None else np.maximum(np.asarray(dt, dtype=float), 1e-9)
        path = (inc, np.ascontiguousarray(heading, dtype=float), h)
        w, w_inv, ref, cov = self.kernel_arrays
        var = np.empty((inc.shape[0], 3))
        _carry_sensitivities(at, path, (w, w_inv, ref), cov, want, var, out)
        return out

    @cached_property
    def kernel_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """W, W⁺, the creep references and estimates (v̄, ā, κ̂_v, κ̂_t; estimates 0 when
        not given) and :attr:`cov` as the kernels take them, built once."""
        ref = np.zeros(4)
        if self.creep is not None:
            ref[: len(self.creep) - 2] = self.creep[2:]
        return np.ascontiguousarray(self.W, dtype=float), pinv_cached(self.W), ref, self.cov


@numba.njit(cache=True)
def _carry_sensitivities(
    at: np.ndarray,
    path: tuple[np.ndarray, np.ndarray, np.ndarray],
    pods: tuple[np.ndarray, np.ndarray, np.ndarray],
    sig: np.ndarray,
    want: np.ndarray,
    var: np.ndarray,
    out: np.ndarray,
) -> None:
    """Carries the sensitivities ``at`` (3, P) in place over the steps of
    ``path`` = (increments (K, 3; nan rows as none), heading (K+1,), durations (K,) s),
    ``pods`` = (W, W⁺, creep references (v̄, ā, …)); fills ``var`` (K, 3) with ``J·Σ·Jᵀ``'s
    diagonal (each row's terms in a fixed order) and, for each frame of ``want`` (0..K),
    ``out[i]`` with the sensitivities there.

    Per step k, ``B[j, 3i + m] = −W⁺[j, i]·u_k[m]`` is the body error j per row error (pod
    i, column m) and, with P = 3N + 2, ``B[j, 3N] = −Σ_i W⁺[j, i]·Δn_i·(v_i − v̄)``,
    ``B[j, 3N + 1] = −Σ_i W⁺[j, i]·Δn_i·(v_i·|ω| − ā)`` per creep coefficient; θ's row
    sums B's, x's and y's its rotation by the heading plus the dead-reckoning shear of θ's."""
    inc, heading, h = path
    w, w_inv, ref = pods
    n_pods = w_inv.shape[1]
    n3 = at.shape[1]
    b = np.zeros((3, n3))
    for i in range(want.size):
        if want[i] == 0:
            out[i] = at
    for k in range(inc.shape[0]):
        u = np.nan_to_num(inc[k])
        c, s = np.cos(heading[k]), np.sin(heading[k])
        for j in range(3):
            for i in range(n_pods):
                for m in range(3):
                    b[j, 3 * i + m] = -(w_inv[j, i] * u[m])
        if n3 > 3 * n_pods:
            _creep_columns(b, u, h[k], w, w_inv, ref)
        dxw = c * u[0] - s * u[1]
        dyw = s * u[0] + c * u[1]
        for col in range(n3):
            jt = at[2, col]
            at[0, col] = at[0, col] + (c * b[0, col] - s * b[1, col] - dyw * jt)
            at[1, col] = at[1, col] + (s * b[0, col] + c * b[1, col] + dxw * jt)
            at[2, col] = jt + b[2, col]
        for a in range(3):
            acc = 0.0
            for i in range(n3):
                row = 0.0
                for j in range(n3):
                    row += sig[i, j] * at[a, j]
                acc += at[a, i] * row
            var[k, a] = acc
        for i in range(want.size):
            if want[i] == k + 1:
                out[i] = at


@numba.njit(cache=True)
def _creep_columns(
    b: np.ndarray, u: np.ndarray, h: float, w: np.ndarray, w_inv: np.ndarray, ref: np.ndarray
) -> None:
    """The two creep columns (the last two) of :func:`_carry_sensitivities`' B for one step
    ``u`` (m, m, rad) of ``h`` s."""
    n3 = b.shape[1]
    for j in range(3):
        b[j, n3 - 2], b[j, n3 - 1] = 0.0, 0.0
    turn = abs(u[2]) / h
    for i in range(w.shape[0]):
        dn = w[i, 0] * u[0] + w[i, 1] * u[1] + w[i, 2] * u[2]
        # the contact's speed over the floor: rolled and dragged (m/s)
        drag = -w[i, 1] * u[0] + w[i, 0] * u[1]
        speed = np.hypot(dn, drag) / (np.hypot(w[i, 0], w[i, 1]) * h)
        by_speed, by_turn = dn * (speed - ref[0]), dn * (speed * turn - ref[1])
        for j in range(3):
            b[j, n3 - 2] -= w_inv[j, i] * by_speed
            b[j, n3 - 1] -= w_inv[j, i] * by_turn


@numba.njit(cache=True)
def correct_creep(
    inc: np.ndarray, h: np.ndarray, pods: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> np.ndarray:
    """The body increments ``inc`` (K, 3) (m, m, rad) of steps of ``h`` (K,) s corrected
    by the creep estimates: ``û − B_creep(û)·κ̂`` with :func:`_creep_columns`' columns and
    ``pods`` = (W, W⁺, (v̄, ā, κ̂_v, κ̂_t)) (:attr:`CalibrationError.kernel_arrays`); nan
    components stay nan."""
    w, w_inv, ref = pods
    out = inc.copy()
    b = np.zeros((3, 2))
    for k in range(inc.shape[0]):
        _creep_columns(b, np.nan_to_num(inc[k]), h[k], w, w_inv, ref)
        for j in range(3):
            out[k, j] -= b[j, 0] * ref[2] + b[j, 1] * ref[3]
    return out
