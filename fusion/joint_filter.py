"""The joint baseline: one extended Kalman filter over x, y and heading together.

This is the design the split filters replaced, kept to measure what the split
costs and saves. Same models as :mod:`sensorbench.fusion.split_filter`:

- state s = (x, y, θ, v_x, v_y, ω): world positions (m, m, rad) and the mean world
  velocities over the last step (m/s, m/s, rad/s); per axis the same velocity
  random walk (q per axis) and ``p_k = p_{k−1} + v_k·Δt``;
- measurement: the pods' body increments over the step, ``z = W⁻¹·Δn``
  (Δx_b, Δy_b, Δθ), with ``h(s) = (R(θ_k − ωΔt/2)ᵀ·(v_x, v_y)·Δt, ω·Δt)`` (the
  chord of the step's arc seen at its mid heading) and noise diag(r_x, r_y, r_θ)
  in the body frame.

Unlike the split filters it carries the cross-covariance between heading and
position, so a heading error's effect on x and y is modelled; the price is 6×6
matrices and a 3×3 inverse per step. NIS gating on the 3-D innovation (χ²₃ 99 %
= 11.34) rejects and counts a whole measurement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sensorbench.errors import FusionError
from sensorbench.fusion.split_filter import FilterNoise

NIS_GATE_3D_99 = 11.34


@dataclass
class JointResult:
    """Replay of the joint filter: poses (K+1, 3), their covariances, NIS, rejections."""

    t_s: np.ndarray
    pose: np.ndarray
    velocity: np.ndarray
    cov: np.ndarray  # (K+1, 6, 6)
    nis: np.ndarray  # (K,)
    accepted: np.ndarray  # (K,)

    @property
    def rejected(self) -> int:
        """Measurements rejected by the gate."""
        return int(np.count_nonzero(~self.accepted))


class JointFilter:
    """6-state EKF over (x, y, θ, v_x, v_y, ω) with a 3-D body-increment measurement."""

    def __init__(self, noise: FilterNoise, gate: float = NIS_GATE_3D_99) -> None:
        self.noise = noise
        self.gate = float(gate)

    def run(
        self,
        t_s: np.ndarray,
        body_increments: np.ndarray,
        pose0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
    ) -> JointResult:
        """Replay K frames of body increments (m, m, rad) between K+1 frame times (s)."""
        t = np.asarray(t_s, dtype=float)
        inc = np.asarray(body_increments, dtype=float)
        if inc.ndim != 2 or inc.shape[1] != 3 or t.size != inc.shape[0] + 1:
            raise FusionError(
                f"need K+1 times and (K, 3) increments, got {t.shape} and {inc.shape}"
            )
        dt = np.diff(t)
        if np.any(~(dt > 0)):
            raise FusionError("frame times must be strictly increasing")
        q = np.array([self.noise.x.q, self.noise.y.q, self.noise.theta.q])
        r = np.diag([self.noise.x.r, self.noise.y.r, self.noise.theta.r])
        k_n = dt.size
        s = np.zeros(6)
        s[:3] = pose0
        P = np.zeros((6, 6))
        P[:3, :3] = np.diag(var0)
        P[3:, 3:] = np.eye(3)
        poses = np.empty((k_n + 1, 3))
        vels = np.empty((k_n + 1, 3))
        covs = np.empty((k_n + 1, 6, 6))
        nis = np.full(k_n, np.nan)
        accepted = np.ones(k_n, dtype=bool)
        poses[0], vels[0], covs[0] = s[:3], s[3:], P
        eye6 = np.eye(6)
        for k in range(k_n):
            h = dt[k]
            F = eye6.copy()
            F[0, 3] = F[1, 4] = F[2, 5] = h
            G = np.zeros((6, 3))
            G[:3] = np.eye(3) * h
            G[3:] = np.eye(3)
            Q = G @ np.diag(q * h) @ G.T
            s = F @ s
            P = F @ P @ F.T + Q
            z = inc[k]
            if not np.all(np.isfinite(z)):
                poses[k + 1], vels[k + 1], covs[k + 1] = s[:3], s[3:], P
                continue
            th_m = s[2] - 0.5 * s[5] * h
            c, sn = np.cos(th_m), np.sin(th_m)
            vx, vy = s[3], s[4]
            pred = np.array([(c * vx + sn * vy) * h, (-sn * vx + c * vy) * h, s[5] * h])
            dx_dth = (-sn * vx + c * vy) * h
            dy_dth = (-c * vx - sn * vy) * h
            H = np.zeros((3, 6))
            H[0, 2], H[1, 2] = dx_dth, dy_dth
            H[0, 5], H[1, 5] = -0.5 * h * dx_dth, -0.5 * h * dy_dth
            H[0, 3], H[0, 4] = c * h, sn * h
            H[1, 3], H[1, 4] = -sn * h, c * h
            H[2, 5] = h
            nu = z - pred
            S = H @ P @ H.T + r
            S_inv = np.linalg.inv(S)
            d2 = float(nu @ S_inv @ nu)
            nis[k] = d2
            if d2 <= self.gate:
                K = P @ H.T @ S_inv
                s = s + K @ nu
                IKH = eye6 - K @ H
                P = IKH @ P @ IKH.T + K @ r @ K.T
            else:
                accepted[k] = False
            poses[k + 1], vels[k + 1], covs[k + 1] = s[:3], s[3:], P
        return JointResult(t, poses, vels, covs, nis, accepted)
