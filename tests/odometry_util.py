"""Exact-kinematics generators for the odometry tests (no simulator needed).

A body-twist profile (vx, vy, wz as functions of time) is integrated on a 1 kHz
grid with the SE(2) exponential; each pod's contact point travels ``row·ξ`` per
step (times a white rolling-noise factor), and the encoder reports
``floor(distance / c)`` ticks. Mocap samples the true pose with white noise.
Everything is known, so fits can be checked against truth.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import chi2

from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import PodGeometry, integrate_path

# Default pods: two parallel (left/right, about ±0.15 m), one perpendicular at the back.
TRUE_X = np.array([0.02, -0.01, -0.12])
TRUE_Y = np.array([0.15, -0.152, 0.005])
TRUE_PHI = np.array([0.004, -0.003, np.pi / 2 + 0.006])
CPR = np.array([2000.0, 2000.0, 2000.0])
TRUE_R = np.array([0.0240, 0.0241, 0.0239])
TRUE_C = 2 * np.pi * TRUE_R / CPR


def true_geometry() -> PodGeometry:
    return PodGeometry.from_mounts(TRUE_X, TRUE_Y, TRUE_PHI, TRUE_C, ("left", "right", "perp"), CPR)


def _trapezoid(t: np.ndarray, t0: float, dur: float, peak: float, ramp: float = 0.4) -> np.ndarray:
    tau = t - t0
    up = np.clip(tau / ramp, 0, 1)
    down = np.clip((dur - tau) / ramp, 0, 1)
    return peak * np.minimum(up, down) * ((tau >= 0) & (tau <= dur))


def twist_profile(kind: str, t: np.ndarray) -> np.ndarray:
    """Body twist (vx, vy, wz) (m/s, m/s, rad/s) of a fixed drive at times t (s)."""
    v = np.zeros((t.size, 3))
    if kind == "forward":
        for k in range(4):
            v[:, 0] += _trapezoid(t, 0.5 + 5 * k, 4.0, 0.5 * (-1) ** k)
    elif kind == "sideways":
        for k in range(4):
            v[:, 1] += _trapezoid(t, 0.5 + 5 * k, 4.0, 0.4 * (-1) ** k)
    elif kind == "spin":
        for k in range(4):
            v[:, 2] += _trapezoid(t, 0.5 + 5 * k, 4.0, 2.0 * (-1) ** k)
    elif kind == "square":
        for k in range(8):
            t0 = 0.5 + 2.5 * k
            v[:, 0] += _trapezoid(t, t0, 2.0, 0.5)
            v[:, 2] += _trapezoid(t, t0 + 1.0, 1.0, np.pi / 2 / 0.6, ramp=0.2)
    elif kind == "figure8":
        w = 2 * np.pi / 10.0
        env = np.clip(t / 1.0, 0, 1) * np.clip((t.max() - t) / 1.0, 0, 1)
        v[:, 0] = 0.5 * env
        v[:, 2] = 1.2 * np.sin(w * t) * env
        v[:, 1] = 0.1 * np.cos(0.5 * w * t) * env
    elif kind == "wander":
        # a real robot's run: driving with a few short turns of changing rate that add
        # up to 4.5 rad turned, no spin in place
        v[:, 0] = _trapezoid(t, 0.3, t.max() - 0.6, 0.3, ramp=1.0)
        turns = ((2.0, 2.0, 0.93), (6.5, 1.5, -1.14), (11.0, 2.5, 0.62), (16.0, 1.2, -1.03))
        for t0, dur, peak in turns:
            v[:, 2] += _trapezoid(t, t0, dur, peak, ramp=0.5)
    else:
        raise ValueError(kind)
    return v


def make_drive(
    kind: str,
    seed: int,
    geometry: PodGeometry | None = None,
    duration_s: float = 21.0,
    enc_hz: float = 100.0,
    mocap_hz: float = 120.0,
    mocap_sigma_m: float = 0.0005,
    mocap_sigma_rad: float = 0.002,
    offset_s: float = 0.013,
    slip_sigma: float = 0.002,
    bounce_rate: float = 0.0,
    bounce_ticks: int = 40,
) -> tuple[Drive, dict]:
    """A fixed drive with exact kinematics; returns the Drive and its truth.

    ``slip_sigma`` is the relative rolling noise of one 1 ms step; ``bounce_rate``
    is the probability per encoder frame that one pod gains ``±bounce_ticks``
    extra ticks (a wheel bounce) that stay in the cumulative count. The encoder
    time stamps lag the true time by ``offset_s`` (the fit should find −offset_s).
    """
    rng = np.random.default_rng(seed)
    g = geometry or true_geometry()
    dt = 0.001
    t = np.arange(0.0, duration_s, dt)
    twist = twist_profile(kind, t)
    inc = twist[:-1] * dt
    path = integrate_path(inc)
    dist = inc @ (g.W * g.c[:, None]).T
    dist = dist * (1.0 + slip_sigma * rng.standard_normal(dist.shape))
    travel = np.vstack([np.zeros((1, g.c.size)), np.cumsum(dist, axis=0)])
    ticks_exact = travel / g.c
    stride = round(1.0 / (enc_hz * dt))
    idx = np.arange(0, t.size, stride)
    counts = np.floor(ticks_exact[idx]).astype(np.int64)
    if bounce_rate > 0:
        hit = rng.random(idx.size) < bounce_rate
        pod = rng.integers(0, g.c.size, idx.size)
        extra = np.zeros_like(counts)
        extra[hit, pod[hit]] = rng.choice([-bounce_ticks, bounce_ticks], hit.sum())
        counts = counts + np.cumsum(extra, axis=0)
    t_enc = t[idx]
    t_ref = np.arange(0.0, duration_s - dt, 1.0 / mocap_hz)
    ref = np.column_stack([np.interp(t_ref, t, path[:, k]) for k in range(3)])
    ref[:, :2] += mocap_sigma_m * rng.standard_normal((t_ref.size, 2))
    ref[:, 2] += mocap_sigma_rad * rng.standard_normal(t_ref.size)
    drive = Drive(
        label=kind,
        t_enc=t_enc + offset_s,
        counts=counts,
        imu_yaw=np.interp(t_enc, t, path[:, 2]),
        t_ref=t_ref,
        ref=ref,
        max_gap_s=2.5 / mocap_hz,
        counts_per_rev=g.counts_per_rev,
        names=g.names,
    )
    truth = {"t": t, "path": path, "t_enc": t_enc, "geometry": g}
    return drive, truth


def nis_bounds(k: int, dof: int = 1, level: float = 0.95) -> tuple[float, float]:
    """Two-sided ``level`` bounds of the average NIS over k independent dof-D
    innovations: the exact χ²(k·dof)/k quantiles."""
    lo, hi = chi2.ppf([(1 - level) / 2, 1 - (1 - level) / 2], k * dof) / k
    return float(lo), float(hi)
