"""Omnidirectional base trajectories within speed and acceleration limits (pose C², twist
C¹), evaluated at any times. Poses: world ``x, y`` (m) and ``yaw`` (rad, **unwrapped**);
body twist ``(vx, vy, wz)``: the body origin's velocity in the body frame (m/s), yaw rate
(rad/s)."""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from sensorbench.errors import SimError


@dataclass(frozen=True)
class Limits:
    """Base limits: speed (m/s), acceleration (m/s²), yaw rate (rad/s), yaw accel. (rad/s²)."""

    speed: float
    accel: float
    yaw_rate: float
    yaw_accel: float


@dataclass(frozen=True)
class _Scaling:
    """Rest-to-rest time scaling from 0 to ``length`` in ``T`` s, with smooth ramps of ``tr`` s.

    The acceleration rises and falls as ``A sin²(π τ / tr)`` during each ramp (continuous,
    bounded jerk), with peak ``A = 2 v / tr``; between the ramps the rate is constant
    ``v = length / (T − tr)``.
    """

    length: float
    T: float
    tr: float

    def eval(self, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position, rate and acceleration of the scaled coordinate at local times ``tau`` (s)."""
        L, T, tr = self.length, self.T, self.tr
        if T <= 0 or L == 0:
            z = np.zeros_like(tau)
            return z + (L if T <= 0 else 0.0), z, z
        vpk = L / (T - tr)
        A = 2.0 * vpk / tr
        w = 2.0 * np.pi / tr
        tau = np.clip(tau, 0.0, T)

        def ramp(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            x = np.clip(x, 0.0, tr)
            pos = 0.5 * A * (0.5 * x**2 + (np.cos(w * x) - 1.0) / w**2)
            vel = 0.5 * A * (x - np.sin(w * x) / w)
            return pos, vel, A * np.sin(0.5 * w * x) ** 2

        su, vu, au = ramp(tau)
        sd, vd, ad = ramp(T - tau)
        phase = [tau > T - tr, tau < tr]  # ramping down wins over up (a short move)
        s = np.select(phase, [L - sd, su], 0.5 * vpk * tr + vpk * (tau - tr))
        return s, np.select(phase, [vd, vu], vpk), np.select(phase, [-ad, au], 0.0)


def _scaling_for(lengths_limits: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Shortest (T, tr) moving every coordinate (length, vmax, amax) together, rest to rest,
    with the smooth ramps of :class:`_Scaling` (peak acceleration 2 v / tr)."""
    active = [(abs(L), v, a) for L, v, a in lengths_limits if abs(L) > 1e-15]
    if not active:
        return 0.0, 0.0
    T = 0.0
    for L, v, a in active:
        t_ramp = 2.0 * v / a
        T = max(T, np.sqrt(8.0 * L / a) if v * t_ramp > L else L / v + t_ramp)
    for _ in range(4000):
        tr = min(T / 2.0, *(T - L / v for L, v, _ in active))
        if tr > 0 and all(2.0 * L / ((T - tr) * tr) <= a * (1 + 1e-9) for L, _, a in active):
            return T, tr
        T *= 1.002
    raise SimError("trajectory: cannot find a time scaling within the limits")


class _Segment(ABC):
    """One piece of a trajectory, starting at ``t0`` and lasting ``T`` seconds."""

    t0: float = 0.0
    T: float

    @abstractmethod
    def world(self, tau: np.ndarray) -> tuple[np.ndarray, ...]:
        """(x, y, yaw, vx_world, vy_world, wz) at local times ``tau`` (s)."""


class _Move(_Segment):
    """Straight line in x, y with linear yaw, from pose ``a`` to ``b``, rest to rest."""

    def __init__(self, a: np.ndarray, b: np.ndarray, lim: Limits) -> None:
        self.a = np.asarray(a, float)
        self.b = np.asarray(b, float)
        d = self.b - self.a
        lin = float(np.hypot(d[0], d[1]))
        T, tr = _scaling_for([(lin, lim.speed, lim.accel), (d[2], lim.yaw_rate, lim.yaw_accel)])
        self.T = T
        self.scale = _Scaling(1.0, T, tr)

    def world(self, tau: np.ndarray) -> tuple[np.ndarray, ...]:
        s, sd, _ = self.scale.eval(tau)
        d = self.b - self.a
        return (*(self.a + s[:, None] * d).T, *(sd[:, None] * d).T)


class _Hold(_Segment):
    """Standing still at ``pose`` for ``T`` seconds."""

    def __init__(self, pose: np.ndarray, T: float) -> None:
        self.pose = np.asarray(pose, float)
        self.T = float(T)

    def world(self, tau: np.ndarray) -> tuple[np.ndarray, ...]:
        z = np.zeros_like(tau)
        return (*(z[:, None] + self.pose).T, z, z, z)


class _Figure8(_Segment):
    """Gerono lemniscate ``(a sin u, a sin u cos u)`` rotated by ``rot``, ``laps`` times.

    ``u`` follows a smooth rest-to-rest scaling chosen so the speed, acceleration and
    (with tangent heading) yaw rate stay within the limits. With ``tangent`` heading, yaw
    is the direction of travel plus ``yaw_offset``; otherwise it stays ``yaw_offset``.
    """

    def __init__(
        self, center: np.ndarray, a: float, rot: float, laps: int, tangent: bool,
        yaw_offset: float, lim: Limits,
    ) -> None:  # fmt: skip
        self.center = np.asarray(center, float)
        self.a = float(a)
        self.rot = float(rot)
        self.tangent = tangent
        self.yaw_offset = float(yaw_offset)
        u = np.linspace(0, 2 * np.pi, 4001)
        d1 = np.hypot(*self._dp(u))
        d2 = np.hypot(*self._ddp(u))
        dpsi = np.abs(self._dpsi(u)) if tangent else np.zeros_like(u)
        ddpsi = np.abs(np.gradient(self._dpsi(u), u)) if tangent else np.zeros_like(u)
        ud_max = min(
            lim.speed / d1.max(),
            np.sqrt(0.7 * lim.accel / d2.max()),
            lim.yaw_rate / max(dpsi.max(), 1e-12),
            np.sqrt(0.7 * lim.yaw_accel / max(ddpsi.max(), 1e-12)),
        )
        udd = min(0.3 * lim.accel / d1.max(), 0.3 * lim.yaw_accel / max(dpsi.max(), 1e-12))
        L = 2 * np.pi * laps
        tr = 2.0 * ud_max / udd  # smooth ramps peak at 2 u̇ / tr
        T = L / ud_max + tr
        if 2 * tr > T:
            T = np.sqrt(8.0 * L / udd)
            tr = T / 2.0
        self.T = T
        self.scale = _Scaling(L, T, tr)

    def _dp(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.a * np.cos(u), self.a * np.cos(2 * u)

    def _ddp(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return -self.a * np.sin(u), -2 * self.a * np.sin(2 * u)

    def _dpsi(self, u: np.ndarray) -> np.ndarray:
        xd, yd = self._dp(u)
        xdd, ydd = self._ddp(u)
        return (xd * ydd - yd * xdd) / (xd**2 + yd**2)

    def world(self, tau: np.ndarray) -> tuple[np.ndarray, ...]:
        u, ud, _ = self.scale.eval(tau)
        c, s = np.cos(self.rot), np.sin(self.rot)
        lx, ly = self.a * np.sin(u), self.a * np.sin(u) * np.cos(u)
        xd, yd = self._dp(u)
        vx, vy = xd * ud, yd * ud
        x, y = self.center[0] + c * lx - s * ly, self.center[1] + s * lx + c * ly
        vxw, vyw = c * vx - s * vy, s * vx + c * vy
        if self.tangent:
            yaw = self.rot + self.yaw_offset + _tangent_angle(u)
            wz = self._dpsi(u) * ud
        else:
            yaw = np.full_like(u, self.yaw_offset)
            wz = np.zeros_like(u)
        return x, y, yaw, vxw, vyw, wz


def _tangent_angle(u: np.ndarray) -> np.ndarray:
    """Continuous tangent angle (rad) of the Gerono lemniscate at any ``u``, with no
    ``unwrap``: the tangent ``(cos u, cos 2u)`` never vanishes and its angle stays in
    [−5π/4, π/4] (turning number 0), so ``atan2`` values above π/2 are folded back by 2π."""
    ang = np.arctan2(np.cos(2 * u), np.cos(u))
    return np.where(ang > np.pi / 2, ang - 2 * np.pi, ang)


class Trajectory:
    """A piecewise trajectory of the base, evaluated vectorised at any times (s).

    Before 0 the base rests at the first pose; after :attr:`duration_s` at the last.
    """

    def __init__(self, segments: list[_Segment]) -> None:
        if not segments:
            raise SimError("trajectory has no segments")
        t = 0.0
        for seg in segments:
            seg.t0 = t
            t += seg.T
        self.segments = segments
        self.starts = np.array([s.t0 for s in segments])
        self.duration_s = t

    def _eval(self, t_s: np.ndarray) -> tuple[np.ndarray, ...]:
        t = np.atleast_1d(np.asarray(t_s, dtype=float))
        idx = np.clip(np.searchsorted(self.starts, t, side="right") - 1, 0, len(self.segments) - 1)
        out = [np.empty_like(t) for _ in range(6)]
        for k in np.unique(idx):
            m = idx == k
            seg = self.segments[k]
            vals = seg.world(np.clip(t[m] - seg.t0, 0.0, seg.T))
            for o, v in zip(out, vals, strict=False):
                o[m] = v
        for o in out[3:]:  # at rest after the end
            o[t > self.duration_s] = 0.0
        return tuple(out)

    def pose(self, t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """World pose ``(x, y, yaw)`` (m, m, rad unwrapped) at times ``t_s`` (s)."""
        x, y, yaw, *_ = self._eval(t_s)
        return x, y, yaw

    def twist_body(self, t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Body-frame twist ``(vx, vy, wz)`` (m/s, m/s, rad/s) at times ``t_s`` (s)."""
        _, _, yaw, vx, vy, wz = self._eval(t_s)
        c, s = np.cos(yaw), np.sin(yaw)
        return c * vx + s * vy, -s * vx + c * vy, wz


def build_trajectory(spec: dict, start: tuple[float, float, float]) -> Trajectory:
    """Build the trajectory described by a validated ``[trajectory]`` table.

    ``start`` is the robot's initial world pose (m, m, rad). Relative kinds (forward,
    sideways, spin, square, figure8) are laid out in the start pose's frame.
    """
    lim = Limits(spec["max_speed_m_s"], spec["max_accel_m_s2"],
        np.deg2rad(spec["max_yaw_rate_deg_s"]), np.deg2rad(spec["max_yaw_accel_deg_s2"]))
    p0 = np.asarray(start, float)
    c, s = np.cos(p0[2]), np.sin(p0[2])

    def rel(dx: float, dy: float, dyaw: float = 0.0) -> np.ndarray:
        return p0 + np.array([c * dx - s * dy, s * dx + c * dy, dyaw])

    kind, reps = spec["kind"], spec["repeats"]
    segs: list[_Segment] = [_Hold(p0, spec["lead_in_s"])] if spec["lead_in_s"] > 0 else []
    poses, last = [p0], None  # poses driven through (rest to rest); last: where it ends
    if kind in ("forward", "sideways", "spin"):
        d, ang = spec["distance_m"], np.deg2rad(spec["angle_deg"])
        far = {"forward": rel(d, 0.0), "sideways": rel(0.0, d), "spin": rel(0, 0, ang)}[kind]
        step = np.array([0, 0, ang]) if kind == "spin" else far - p0
        for _ in range(reps):
            poses += [far, p0] if spec["return"] else [poses[-1] + step]
    elif kind == "square":
        side = spec["side_m"]
        for _ in range(reps):
            for dx, dy in [(side, 0.0), (side, side), (0.0, side), (0.0, 0.0)]:
                corner = rel(dx, dy)
                poses.append(np.array([corner[0], corner[1], poses[-1][2]]))
                if spec["turn_at_corners"]:
                    poses.append(poses[-1] + np.array([0.0, 0.0, np.pi / 2]))
    elif kind == "figure8":
        a = spec["size_m"] / 2.0
        tangent = spec["heading"] == "tangent"
        fig = _Figure8(p0[:2], a, p0[2], reps, tangent, 0.0 if tangent else p0[2], lim)
        first_yaw = fig.world(np.array([0.0]))[2][0]
        if tangent and abs(first_yaw - p0[2]) > 1e-12:
            segs.append(_Move(p0, np.array([p0[0], p0[1], first_yaw]), lim))
        segs.append(fig)
        last = np.array([v[0] for v in fig.world(np.array([fig.T]))[:3]])
    elif kind == "hold":
        segs.append(_Hold(p0, spec["hold_s"]))
    else:  # waypoints (the schema admits only TRAJECTORY_KINDS)
        poses += [np.array([w[0], w[1], np.deg2rad(w[2])]) for w in spec["waypoints"]] * reps
    for a, b in itertools.pairwise(poses):  # driven through, rest to rest
        segs.append(_Move(a, b, lim))
        if spec["pause_s"] > 0:
            segs.append(_Hold(b, spec["pause_s"]))
    if spec["lead_out_s"] > 0:
        segs.append(_Hold(poses[-1] if last is None else last, spec["lead_out_s"]))
    return Trajectory(segs)
