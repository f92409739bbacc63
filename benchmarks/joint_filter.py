"""The joint baseline: one extended Kalman filter over x, y and heading together.

This is the design the split filters replaced, kept to measure what the split
costs and saves. Same models as :mod:`sensorbench.fusion.split_filter`:

- state s = (x, y, θ, v_x, v_y, ω): world positions (m, m, rad) and the mean
  velocities over the last step; per axis the same velocity random walk (q per
  axis) and ``p_k = p_{k−1} + v_k·Δt``;
- measurement: the odometry of the step against the anchored odometry pose o
  (the joint analogue of the split filters' odometry position): the body chord
  of the step's arc, ``z_xy = SE(2)-exp(W⁻¹·Δn)_xy``, predicted as
  ``R(θ − ω·Δt)ᵀ·(p − o_xy)`` (the chord from the anchor to the position, seen
  from the heading at the start of the step), and ``z_θ = Δθ`` predicted as
  ``θ − o_θ``; noise diag(r_x, r_y, r_θ).

Unlike the split filters it carries the cross-covariance between heading and
position, so a heading correction moves x and y; the price is 6×6 matrices and
a 3×3 inverse per step. NIS gating on the 3-D innovation (χ²₃ 99 % = 11.34)
rejects and counts a whole measurement; the anchor then follows the prediction
plus the innovation with *each component* clipped to its own bound
``√(g₁·S_ii)`` (g₁ the χ²₁ quantile at the gate's probability, 6.63 for the
default), so a rejected step loses only the excess of the components that do
not fit, as in the split filters; after ``max_rejects`` consecutive rejections
the streak's odometry is restored, as in the split filters.

Why per component: an earlier version scaled the whole 3-D innovation back to
the gate (ν·√(g/NIS)). A step rejected for its chord (on simulated pods ~7 % of
steps are: count rounding is not Gaussian, sin² ramps are not a velocity random
walk) then also lost most of its heading increment, which fitted. On the
figure-8 bench session (seed 7) that dropped 32 mrad of heading odometry in all
(|·| summed over 898 rejections; clipping drops 4.9 mrad), and the position RMS
was 1.07 cm against the split filters' 0.48 cm. Over 12 seeds the ratio
joint/split scattered with a log-sd of 0.55 (0.6× to 2.6×); with clipping it is
0.99 ± 0.02 (se), log-sd 0.07. The model itself was not at fault: its Jacobian
matches finite differences and on data drawn from its own model the mean NIS is
3 within its χ² band (``tests/test_fusion_joint_filter.py``).

Without absolute aiding neither filter can beat dead reckoning by much: the
position error is the odometry's own drift (slip, scale), common to both.

Cost: :meth:`JointFilter.run`'s loop is compiled with numba (:func:`_joint_loop`), as
the split filters' is, so ``bench --only filters``'s joint/split cost compares the
algorithms.

Noise: r_x, r_y are fitted for the split filters' *world*-frame x and y; this
filter applies them to the *body*-frame chord. What it would need is the
body-frame covariance of the odometry pose error, a full 3×3: for count
rounding alone ``W⁻¹·W⁻ᵀ/12`` (W in counts per m, rad). On the simulator's pods
(seed 7) that matches the fitted r_θ to 0.01 %, but its body-x variance is half
the fitted world r_x and body y and θ correlate (ρ = 0.47: the lateral pod sees
both). Replaying 12 figure-8 seeds with that covariance instead changed the
joint/split RMS ratio by +0.4 ± 1.8 % (se): the mismatch is real but it is not
what costs accuracy, so the fitted diagonal stays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
from scipy.stats import chi2

from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.odometry_motion import jerk_sq, observed_accel
from sensorbench.fusion.pod_kinematics import integrate_path, se2_exp
from sensorbench.fusion.split_filter import frame_steps

NIS_GATE_3D_99 = 11.34


def chord_measurement(
    state: np.ndarray, anchor: np.ndarray, h: float
) -> tuple[np.ndarray, np.ndarray]:
    """Predicted odometry measurement of one step and its Jacobian.

    Args:
        state: (6,) x, y (m), θ (rad), v_x, v_y (m/s), ω (rad/s) at the end of the step.
        anchor: (3,) anchored odometry pose o at the start of the step (m, m, rad).
        h: step duration (s).

    Returns:
        The prediction (3,) ``(R(θ − ω·h)ᵀ·(p − o_xy), θ − o_θ)`` (m, m, rad) and
        its Jacobian (3, 6) with respect to the state.
    """
    phi = state[2] - state[5] * h
    c, sn = math.cos(phi), math.sin(phi)
    dx, dy = state[0] - anchor[0], state[1] - anchor[1]
    pred = np.array([c * dx + sn * dy, -sn * dx + c * dy, state[2] - anchor[2]])
    d_th = (-sn * dx + c * dy, -c * dx - sn * dy)
    jac = np.zeros((3, 6))
    jac[0, 0], jac[0, 1], jac[1, 0], jac[1, 1] = c, sn, -sn, c
    jac[0, 2], jac[1, 2] = d_th
    jac[0, 5], jac[1, 5] = -h * d_th[0], -h * d_th[1]
    jac[2, 2] = 1.0
    return pred, jac


_chord_measurement = numba.njit(cache=True)(chord_measurement)
""":func:`chord_measurement` compiled, for :func:`_joint_loop`."""


@numba.njit(cache=True)
def _joint_loop(
    dt: np.ndarray,
    inc: np.ndarray,
    chord: np.ndarray,
    q_steps: np.ndarray,
    u_steps: np.ndarray,
    r: np.ndarray,
    start: np.ndarray,
    consts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The loop of :meth:`JointFilter.run` (per step: the prediction, the 3-D gated
    update, the per-component clipping of a rejected innovation, the reject streak) on
    its prepared inputs: ``start`` = pose0 (3) and var0 (3), ``consts`` = var_v0, gate,
    component gate, max_rejects. Returns poses, velocities, covariances, NIS,
    acceptance and resets."""
    var_v0, gate, component_gate, max_rejects = consts[0], consts[1], consts[2], consts[3]
    k_n = dt.size
    s = np.zeros(6)
    s[:3] = start[:3]
    o = start[:3].copy()
    P = np.zeros((6, 6))
    P[:3, :3] = np.diag(start[3:6].copy())
    P[3:, 3:] = np.eye(3) * var_v0
    poses = np.empty((k_n + 1, 3))
    vels = np.empty((k_n + 1, 3))
    covs = np.empty((k_n + 1, 6, 6))
    nis = np.full(k_n, np.nan)
    accepted = np.ones(k_n, dtype=np.bool_)
    poses[0], vels[0], covs[0] = s[:3], s[3:], P
    eye6 = np.eye(6)
    streak, anchor, raw = 0, np.zeros(3), np.zeros(3)
    resets = 0
    F = eye6.copy()
    G = np.zeros((6, 3))
    G[3:] = np.eye(3)
    for k in range(k_n):
        h = dt[k]
        F[0, 3] = F[1, 4] = F[2, 5] = h
        G[:3] = np.eye(3) * h
        s_prev = s
        s = F @ s
        s[:3] += 0.5 * u_steps[k] * h * h
        s[3:] += u_steps[k] * h
        P = F @ P @ F.T + (G * (q_steps[k] * h)) @ G.T
        z = inc[k]
        if not np.all(np.isfinite(z)):
            o = o + (s[:3] - s_prev[:3])
            poses[k + 1], vels[k + 1], covs[k + 1] = s[:3], s[3:], P
            continue
        phi = s[2] - s[5] * h
        c, sn = math.cos(phi), math.sin(phi)
        pred, H = _chord_measurement(s, o, h)
        nu = np.array([chord[k, 0], chord[k, 1], z[2]]) - pred
        S = H @ P @ H.T + r
        S_inv = np.linalg.inv(S)
        d2 = nu @ S_inv @ nu
        nis[k] = d2
        if streak >= max_rejects:
            o = anchor + raw
            P[3:, 3:] = np.maximum(P[3:, 3:], np.eye(3) * var_v0)
            pred, H = _chord_measurement(s, o, h)
            nu = np.array([chord[k, 0], chord[k, 1], z[2]]) - pred
            S_inv = np.linalg.inv(H @ P @ H.T + r)
            d2 = 0.0
            resets += 1
        raw_step = np.array(
            [c * chord[k, 0] - sn * chord[k, 1], sn * chord[k, 0] + c * chord[k, 1], z[2]]
        )
        if d2 <= gate:
            streak = 0
            K = P @ H.T @ S_inv
            s = s + K @ nu
            IKH = eye6 - K @ H
            P = IKH @ P @ IKH.T + K @ r @ K.T
            phi = s[2] - s[5] * h
            c, sn = math.cos(phi), math.sin(phi)
            o = o + np.array(
                [c * chord[k, 0] - sn * chord[k, 1], sn * chord[k, 0] + c * chord[k, 1], z[2]]
            )
        else:
            accepted[k] = False
            if streak == 0:
                anchor, raw = o, 0.0 * raw_step
            streak += 1
            raw = raw + raw_step
            bound = np.sqrt(component_gate * np.diag(S))
            nu_c = np.minimum(np.maximum(nu, -bound), bound)
            o = np.array(
                [
                    s[0] + c * nu_c[0] - sn * nu_c[1],
                    s[1] + sn * nu_c[0] + c * nu_c[1],
                    s[2] + nu_c[2],
                ]
            )
        poses[k + 1], vels[k + 1], covs[k + 1] = s[:3], s[3:], P
    return poses, vels, covs, nis, accepted, resets


@dataclass
class JointResult:
    """Replay of the joint filter: poses (K+1, 3), their covariances, NIS, rejections."""

    t_s: np.ndarray
    pose: np.ndarray
    velocity: np.ndarray
    cov: np.ndarray  # (K+1, 6, 6)
    nis: np.ndarray  # (K,)
    accepted: np.ndarray  # (K,)
    resets: int = 0  # updates forced after ``max_rejects`` consecutive rejections

    @property
    def rejected(self) -> int:
        """Measurements rejected by the gate."""
        return int(np.count_nonzero(~self.accepted))


class JointFilter:
    """6-state EKF over (x, y, θ, v_x, v_y, ω) with a 3-D odometry measurement."""

    def __init__(
        self, noise: FilterNoise, gate: float = NIS_GATE_3D_99, max_rejects: int = 8
    ) -> None:
        self.noise = noise
        self.gate = float(gate)
        self.max_rejects = int(max_rejects)
        # per-component bound of a rejected innovation: the χ²₁ quantile at the
        # probability of the 3-D gate (6.63 for 11.34)
        self.component_gate = float(chi2.ppf(chi2.cdf(self.gate, 3), 1))

    def _inputs(
        self, t_s: np.ndarray, body_increments: np.ndarray, pose0: tuple[float, float, float]
    ) -> tuple[np.ndarray, ...]:
        """Frame times, increments, steps, chords, per-step q and acceleration, and r."""
        t, inc, dt = frame_steps(t_s, body_increments)
        r = np.diag([self.noise.x.r, self.noise.y.r, self.noise.theta.r])
        chord = se2_exp(np.nan_to_num(inc))[:, :2]
        # per-step q and fed-forward acceleration of each world axis as the split filters
        # state them (q + q_jerk·ĵ², the dead-reckoned odometry's observed jerk and
        # acceleration of that axis; rounding at r, no slip)
        heading = integrate_path(np.nan_to_num(inc), pose0)[:-1, 2]
        cw, sw = np.cos(heading), np.sin(heading)
        world = (cw * chord[:, 0] - sw * chord[:, 1], sw * chord[:, 0] + cw * chord[:, 1])
        axes = list(
            zip((self.noise.x, self.noise.y, self.noise.theta), (*world, inc[:, 2]), strict=True)
        )
        zeros = np.zeros(dt.size)
        q_steps = np.column_stack(
            [n.q + n.q_jerk * jerk_sq(dt, w, np.full(dt.size, n.r), zeros) for n, w in axes]
        )
        u_steps = np.column_stack([observed_accel(dt, w) for _, w in axes])
        return t, inc, dt, chord, q_steps, u_steps, r

    def run(
        self,
        t_s: np.ndarray,
        body_increments: np.ndarray,
        pose0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        var_v0: float = 1.0,
    ) -> JointResult:
        """Replay K frames of body increments (m, m, rad) between K+1 frame times (s),
        from ``pose0`` with variances ``var0`` and velocity variance ``var_v0``."""
        t, inc, dt, chord, q_steps, u_steps, r = self._inputs(t_s, body_increments, pose0)
        start = np.array([*pose0, *var0], dtype=float)
        consts = np.array([var_v0, self.gate, self.component_gate, self.max_rejects], float)
        poses, vels, covs, nis, accepted, resets = _joint_loop(
            dt, inc, chord, q_steps, u_steps, r, start, consts
        )
        return JointResult(t, poses, vels, covs, nis, accepted, int(resets))
