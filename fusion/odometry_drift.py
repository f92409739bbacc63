"""How far odometry drifts from the world: a per-distance slip model and its propagation.

Dead-wheel odometry does not drift with time but with motion: a wheel slips a little on
every millimetre it rolls, so the error of a body increment ``(Δx, Δy, Δθ)`` (body frame)
has a variance that grows with the motion itself (the simulator's and the literature's
slip model: σ² ∝ distance rolled). Per body axis j,

    Var(δ_j) = a_jx·|Δx| + a_jy·|Δy| + a_jθ·|Δθ|      (m² or rad², per m or per rad)

with non-negative coefficients, the three body errors independent. Quantization and the
reference's own noise do not accumulate (the counts are cumulative) and are not part of
this model; they are the filters' r and the fit's intercept.

The odometry pose error then propagates as the standard dead-reckoning linearisation:
``e_{k+1} = F_k e_k + G_k δ_k`` with ``F_k = [[1, 0, −Δy_w], [0, 1, Δx_w], [0, 0, 1]]``
(world-frame increment Δ_w) and ``G_k`` the rotation of the body frame at step k. The
heading error thus enters x and y coherently: driving L metres straight with a heading
variance growing as k·s gives a lateral variance k·L³/3, not the k·L²-free growth a
per-second drift would state. Because F_k is a shear, the recursion is linear in the
covariance and is evaluated with cumulative sums (no per-step loop):

    P_θθ,k+1 = P_θθ,k + Q_θθ,k
    P_xθ,k+1 = P_xθ,k − Δy_k·P_θθ,k                 (P_yθ likewise with +Δx_k)
    P_xx,k+1 = P_xx,k − 2Δy_k·P_xθ,k + Δy_k²·P_θθ,k + Q_xx,k

The split filters take the diagonal as the variance of their odometry-frame offset b.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.chunk_invariant import pinv_cached, rows_dot, rows_quadratic
from sensorbench.logs.model_keys import AXES


@dataclass(frozen=True)
class OdometryDrift:
    """Slip variance per unit of body motion.

    Attributes:
        coef: (3, 3) non-negative; row j = body error axis (x, y in m²; θ in rad²), column
            = per |Δx| (per m), per |Δy| (per m), per |Δθ| (per rad).
    """

    coef: np.ndarray

    def __post_init__(self) -> None:
        c = np.asarray(self.coef, dtype=float)
        if c.shape != (3, 3) or not np.all(np.isfinite(c)) or np.any(c < 0):
            raise FusionError(f"odometry drift coefficients must be finite, >= 0, 3x3: {c}")
        object.__setattr__(self, "coef", c)

    def step_variances(self, body_increments: np.ndarray) -> np.ndarray:
        """Variance (K, 3) of each step's body error (m², m², rad²)."""
        inc = np.nan_to_num(np.asarray(body_increments, dtype=float))
        return rows_dot(np.abs(inc), self.coef)

    def step_covariances(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> np.ndarray:
        """Covariance (K, 3, 3) of each step's body error: the three axes independent
        (``dt`` is not used: the law has no excitation terms)."""
        v = self.step_variances(body_increments)
        return v[:, :, None] * np.eye(3)[None, :, :]

    def axis_step_variances(
        self, body_increments: np.ndarray, heading: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Per-step slip variance (K,) of each split-filter axis: the body x/y variances
        rotated into world x and y by the heading at the start of each step (the diagonal
        of R·diag(Vx, Vy)·Rᵀ, m²), heading as is (rad²)."""
        return world_step_variances(self.step_covariances(body_increments), heading)

    def step_covariance_parts(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rolling, dragging) parts of :meth:`step_covariances`: a body-axis model does not
        tell them apart, so all of it is the first part (``dt`` is not used: the law has
        no excitation terms)."""
        whole = self.step_covariances(body_increments)
        return whole, np.zeros_like(whole)

    def as_dict(self) -> dict[str, Any]:
        """``{error_axis: {"per_m_x", "per_m_y", "per_rad"}}`` (SI: m²/m, rad²/m, ...)."""
        return {
            a: dict(zip(("per_m_x", "per_m_y", "per_rad"), map(float, row), strict=True))
            for a, row in zip(AXES, self.coef, strict=True)
        }

    @classmethod
    def from_dict(cls, d: dict[str, dict[str, float]]) -> OdometryDrift:
        """Inverse of :meth:`as_dict`.

        Raises:
            FusionError: a missing axis or key.
        """
        try:
            rows = [[float(d[a][k]) for k in ("per_m_x", "per_m_y", "per_rad")] for a in AXES]
        except (KeyError, TypeError, ValueError) as exc:
            raise FusionError(f"odometry drift table lacks or mangles {exc}") from exc
        return cls(np.array(rows))


def world_step_variances(cov: np.ndarray, heading: np.ndarray) -> dict[str, np.ndarray]:
    """Per-step variances (K,) of the split filters' axes from body-frame step
    covariances (K, 3, 3): x and y of ``R(θ)·C·R(θ)ᵀ`` (m²) with θ the heading at the start
    of each step, θ as is (rad²)."""
    c, s = np.cos(np.asarray(heading, dtype=float)), np.sin(np.asarray(heading, dtype=float))
    xx, yy, xy = cov[:, 0, 0], cov[:, 1, 1], cov[:, 0, 1]
    return {
        "x": c * c * xx - 2 * c * s * xy + s * s * yy,
        "y": s * s * xx + 2 * c * s * xy + c * c * yy,
        "theta": cov[:, 2, 2],
    }


def propagate_drift(
    body_increments: np.ndarray,
    heading: np.ndarray,
    drift: SlipModel,
    var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> np.ndarray:
    """Variance (K+1, 3) of the odometry pose error in the world (x, y m²; θ rad²) under
    the slip model ``drift`` (:func:`propagate_step_covariances` of its step covariances).

    Args:
        body_increments: (K, 3) body increments (m, m, rad); nan rows add nothing.
        heading: (K+1,) heading at each frame (rad) that rotates the increments.
        drift: the slip model (its per-step body covariances, cross terms included).
        var0: initial variances (x, y, θ), uncorrelated.
    """
    inc = np.nan_to_num(np.asarray(body_increments, dtype=float))
    return propagate_step_covariances(inc, heading, drift.step_covariances(inc), var0)


def propagate_step_covariances(
    body_increments: np.ndarray,
    heading: np.ndarray,
    q: np.ndarray,
    var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> np.ndarray:
    """Variance (K+1, 3) of the odometry pose error in the world (x, y m²; θ rad²) from
    each step's body-error covariance ``q`` (K, 3, 3), through the dead-reckoning shear
    (:meth:`PoseErrorCarry.step` from ``var0``, uncorrelated).

    Args:
        body_increments: (K, 3) body increments (m, m, rad); nan rows add nothing.
        heading: (K+1,) heading at each frame (rad) that rotates the increments.
        q: (K, 3, 3) body covariance of each step's error.
        var0: initial variances (x, y, θ), uncorrelated.
    """
    start = PoseErrorCarry.start(var0)
    return np.vstack([start.variances, start.step(body_increments, heading, q)[1]])


@dataclass(frozen=True)
class PoseErrorCarry:
    """The odometry pose error's covariance at one frame, as the recursion of this module's
    docstring carries it: the variances (x, y m²; θ rad²) and the x–θ, y–θ covariances
    (m·rad)."""

    xx: float
    yy: float
    tt: float
    xt: float
    yt: float

    @classmethod
    def start(cls, var0: tuple[float, float, float]) -> PoseErrorCarry:
        """The start: variances ``var0`` (x, y, θ), uncorrelated."""
        return cls(float(var0[0]), float(var0[1]), float(var0[2]), 0.0, 0.0)

    @property
    def variances(self) -> np.ndarray:
        """(3,) x, y, θ variances."""
        return np.array([self.xx, self.yy, self.tt])

    def step(
        self, body_increments: np.ndarray, heading: np.ndarray, q: np.ndarray
    ) -> tuple[PoseErrorCarry, np.ndarray]:
        """Carry the covariance over K steps: the carry after the last and the variances
        (K, 3) after each.

        Args:
            body_increments: (K, 3) body increments (m, m, rad); nan rows add nothing.
            heading: (K+1,) heading at each frame (rad), from this carry's frame on.
            q: (K, 3, 3) body covariance of each step's error.

        Each sum runs step after step from the carried value, so K steps in one call
        give the same numbers as the same steps over several.
        """
        inc = np.nan_to_num(np.asarray(body_increments, dtype=float))
        th = np.asarray(heading, dtype=float)[:-1]
        c, s = np.cos(th), np.sin(th)
        dxw = c * inc[:, 0] - s * inc[:, 1]
        dyw = s * inc[:, 0] + c * inc[:, 1]
        world = world_step_variances(q, th)
        # cross terms of R·Q·Rᵀ between the world axes and the heading
        qxt = c * q[:, 0, 2] - s * q[:, 1, 2]
        qyt = s * q[:, 0, 2] + c * q[:, 1, 2]
        ptt = np.cumsum(np.concatenate([[self.tt], world["theta"]]))
        pxt = np.cumsum(np.concatenate([[self.xt], -dyw * ptt[:-1] + qxt]))
        pyt = np.cumsum(np.concatenate([[self.yt], dxw * ptt[:-1] + qyt]))
        pxx = np.cumsum(
            np.concatenate([[self.xx], -2 * dyw * pxt[:-1] + dyw**2 * ptt[:-1] + world["x"]])
        )
        pyy = np.cumsum(
            np.concatenate([[self.yy], 2 * dxw * pyt[:-1] + dxw**2 * ptt[:-1] + world["y"]])
        )
        end = PoseErrorCarry(
            float(pxx[-1]), float(pyy[-1]), float(ptt[-1]), float(pxt[-1]), float(pyt[-1])
        )
        return end, np.column_stack([pxx[1:], pyy[1:], ptt[1:]])


TRAVEL_SMOOTH_S = 0.1
"""Span (s) over which counts are averaged before their distances are summed
(:func:`averaged_counts`): frame by frame a wheel that hardly moves, or is dragged
sideways, jitters by a tick, which is not rolling. Summed as |Δn| that jitter put the
simulator's σ_roll² 10 % low and "identified" a drag law on drives that never move
sideways (the slip-law fit, the pods-against-IMU check)."""


def averaged_counts(dn: np.ndarray, t_s: np.ndarray) -> np.ndarray:
    """Tick increments (K, N) averaged over :data:`TRAVEL_SMOOTH_S` of frames (times
    ``t_s`` (K+1,) s)."""
    from scipy.ndimage import uniform_filter1d

    frame = max(float(np.median(np.diff(t_s))), 1e-9)
    span = max(1, round(TRAVEL_SMOOTH_S / frame))
    return uniform_filter1d(np.asarray(dn, dtype=float), span, axis=0, mode="nearest")


def pod_distances(W: np.ndarray, body_increments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distance (K, N each, m) each pod rolls along and is dragged across its rolling
    direction over each body increment (m, m, rad; nan rows count as no motion)."""
    w = np.asarray(W, dtype=float)
    inc = np.nan_to_num(np.asarray(body_increments, dtype=float))
    c = 1.0 / np.hypot(w[:, 0], w[:, 1])
    phi = np.arctan2(w[:, 1], w[:, 0])
    rolled = np.abs(rows_dot(inc, w)) * c
    dragged = np.abs(-np.sin(phi) * inc[:, :1] + np.cos(phi) * inc[:, 1:2])
    return rolled, dragged


@dataclass(frozen=True)
class PodSlip:
    """Slip per pod, the wheels' own law: over a step of h seconds, pod i's rolled
    distance errs by a variance ``roll_var·|d_i| + drag_var·|d⊥_i|`` (m²) with d_i the
    distance it rolled and d⊥_i the distance its contact point was dragged across its
    rolling direction (m), plus ``turn_var·|d_i|·v_i·|ω|``, growing with the wheel's
    lateral acceleration v_i·|ω| (v_i = |d_i|/h its speed, m/s; ω = Δθ/h the turn rate,
    rad/s: turning while translating loads it sideways); pods independent
    (each wheel slips on its own). Through the odometry ``u = Ŵ⁺·Δn`` the body step's
    covariance is ``Ŵ⁺·diag(var_i/c_i²)·Ŵ⁺ᵀ``, correlations included (a slip of the left
    wheel moves both x and θ). The drag of a pod by rotation about a point off its rolling
    line is left out: that arm (the pod's position along its rolling direction) is not
    observable from the counts and is not in the geometry.

    Attributes:
        W: (N, 3) pod matrix (ticks per m, m, rad).
        roll_var: m² per m rolled.
        drag_var: m² per m dragged.
        turn_var: m² per m rolled per m·rad/s² of its lateral acceleration.
    """

    W: np.ndarray
    roll_var: float
    drag_var: float
    turn_var: float = 0.0

    def __post_init__(self) -> None:
        for name in ("roll_var", "drag_var", "turn_var"):
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
        """The rolling (lateral-acceleration term included) and the dragging part (K, 3, 3 each) of
        :meth:`step_covariances`: the filter noise fit scales them separately (each
        coefficient is known only to its standard error, and the drives weigh the two
        differently)."""
        roll, drag = self.pod_tick_variances(body_increments, dt)
        w_inv = pinv_cached(self.W)
        return (
            np.einsum("ji,ki,li->kjl", w_inv, roll, w_inv),
            np.einsum("ji,ki,li->kjl", w_inv, drag, w_inv),
        )

    def pod_tick_variances(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rolling (its lateral-acceleration term when ``dt`` (K,) s is given) and dragging
        slip variance (K, N each) of each pod's travel over each step, in tick²."""
        rolled, dragged = pod_distances(self.W, body_increments)
        c2 = 1.0 / np.sum(np.asarray(self.W, dtype=float)[:, :2] ** 2, axis=1)
        per_m = np.full_like(rolled, self.roll_var)
        if dt is not None and self.turn_var > 0:
            h = np.maximum(np.asarray(dt, dtype=float), 1e-9)[:, None]
            turn = np.abs(np.nan_to_num(np.asarray(body_increments, dtype=float)[:, 2:])) / h
            per_m = per_m + self.turn_var * turn * rolled / h
        return per_m * rolled / c2, self.drag_var * dragged / c2

    def axis_step_variances(
        self, body_increments: np.ndarray, heading: np.ndarray, dt: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """Per-step slip variance (K,) of each split-filter axis (m², m², rad²)."""
        return world_step_variances(self.step_covariances(body_increments, dt), heading)


class SlipModel(Protocol):
    """What the filters need of a slip model: body-frame covariances of each step and the
    split filters' per-axis share of them, whole and as (rolling, dragging) parts."""

    def step_covariances(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> np.ndarray: ...

    def step_covariance_parts(
        self, body_increments: np.ndarray, dt: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]: ...

    def axis_step_variances(
        self, body_increments: np.ndarray, heading: np.ndarray
    ) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class CalibrationError:
    """The fitted pod geometry's own uncertainty, carried along a path.

    The odometry's body increment is ``û = Ŵ⁻¹·Δn`` with the fitted matrix Ŵ; its rows
    (ticks per m, per m, per rad) differ from the true ones by δW, a constant of every
    path driven with that calibration. To first order ``û − u = −Ŵ⁻¹·δW·u``, linear in
    the stacked row errors δg (3N): each step's body error is ``B_k·δg`` with
    ``B_k = −[Ŵ⁻¹[:, i] ⊗ u_kᵀ]_i`` (3 × 3N). Through the same dead-reckoning shear as the
    slip (:func:`propagate_drift`) the world pose error is ``J_k·δg``, so its covariance is
    ``J_k·Σ·J_kᵀ`` with Σ the fit's covariance of the rows: unlike slip it does not grow
    as a random walk but with the signed motion (a scale error cancels on the way back).

    Attributes:
        W: (N, 3) fitted pod matrix (ticks per m, m, rad).
        row_cov: (3N, 3N) covariance of its stacked rows.
    """

    W: np.ndarray
    row_cov: np.ndarray

    def variance(
        self, body_increments: np.ndarray, heading: np.ndarray, chunk: int = 16384
    ) -> np.ndarray:
        """Variance (K+1, 3) of the world pose error (x, y m²; θ rad²) the calibration's
        uncertainty causes along a path, 0 at the start (:meth:`step` from
        :meth:`start`).

        Args:
            body_increments: (K, 3) odometry body increments (m, m, rad); nan rows add
                nothing.
            heading: (K+1,) heading at each frame (rad) that rotates the increments.
            chunk: frames per block (:meth:`step`).
        """
        return np.vstack(
            [np.zeros((1, 3)), self.step(self.start(), body_increments, heading, chunk)[1]]
        )

    def start(self) -> np.ndarray:
        """The sensitivities (3, 3N) of x, y, θ to the stacked row errors at the start of a
        path: none."""
        return np.zeros((3, 3 * np.asarray(self.W).shape[0]))

    def step(
        self,
        sensitivities: np.ndarray,
        body_increments: np.ndarray,
        heading: np.ndarray,
        chunk: int = 16384,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Carry the sensitivities over K steps: those after the last step and the variance
        (K, 3) of the world pose error after each.

        Args:
            sensitivities: (3, 3N) J of x, y, θ at the frame the steps start from.
            body_increments: (K, 3) odometry body increments (m, m, rad); nan rows add
                nothing.
            heading: (K+1,) heading at each frame (rad), from that frame on.
            chunk: frames per block; the sensitivities are carried from block to block, so
                an hour's replay needs a block's worth of (frames, 3N) arrays, not its own.

        Each sum runs step after step from the carried value, so neither the blocks nor
        the calls the steps are split into change a number.
        """
        sig = np.asarray(self.row_cov, dtype=float)
        n_steps = np.shape(body_increments)[0]
        out = np.zeros((n_steps, 3))
        at = np.asarray(sensitivities, dtype=float)
        for lo, j in self._blocks(at, body_increments, heading, chunk):
            out[lo : lo + j.shape[0]] = np.column_stack(
                [rows_quadratic(j[:, a], sig) for a in range(3)]
            )
            at = j[-1]
        return at, out

    def sensitivities_at(
        self,
        body_increments: np.ndarray,
        heading: np.ndarray,
        frames: np.ndarray,
        chunk: int = 16384,
    ) -> np.ndarray:
        """The sensitivities J (len(frames), 3, 3N) of x, y, θ to the stacked row errors
        at the given frame indices (0 = the start of the path, K = after the last of the
        K steps of ``body_increments``), from :meth:`start`."""
        want = np.asarray(frames, dtype=np.int64)
        out = np.zeros((want.size, 3, 3 * np.asarray(self.W).shape[0]))
        for lo, j in self._blocks(self.start(), body_increments, heading, chunk):
            sel = (want > lo) & (want <= lo + j.shape[0])
            out[sel] = j[want[sel] - lo - 1]
        return out

    def _blocks(
        self, at: np.ndarray, body_increments: np.ndarray, heading: np.ndarray, chunk: int
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(first step, J (n, 3, 3N) after each of the block's n steps) block by block."""
        inc = np.nan_to_num(np.asarray(body_increments, dtype=float))
        th = np.asarray(heading, dtype=float)[:-1]
        w_inv = pinv_cached(self.W)
        for lo in range(0, inc.shape[0], max(1, int(chunk))):
            u, h = inc[lo : lo + chunk], th[lo : lo + chunk]
            # B[k, j, 3i + m] = −W⁻¹[j, i]·u_k[m]: body error j per row error (pod i, column m)
            b = -np.einsum("ji,km->kjim", w_inv, u).reshape(u.shape[0], 3, -1)
            c, s = np.cos(h)[:, None], np.sin(h)[:, None]
            dxw = c[:, 0] * u[:, 0] - s[:, 0] * u[:, 1]
            dyw = s[:, 0] * u[:, 0] + c[:, 0] * u[:, 1]
            jt = np.cumsum(np.vstack([at[2], b[:, 2]]), axis=0)
            jx = np.cumsum(
                np.vstack([at[0], c * b[:, 0] - s * b[:, 1] - dyw[:, None] * jt[:-1]]), axis=0
            )
            jy = np.cumsum(
                np.vstack([at[1], s * b[:, 0] + c * b[:, 1] + dxw[:, None] * jt[:-1]]), axis=0
            )
            j = np.stack([jx[1:], jy[1:], jt[1:]], axis=1)
            yield lo, j
            at = j[-1]
