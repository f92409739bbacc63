"""Dead-wheel odometry pods read by a microcontroller, with an optional IMU on the same MCU
(the model: docs/SIMULATION.md, "Sensor models")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.sim.trajectory import Trajectory


@dataclass
class PodGeometry:
    """Pod geometry (body frame): positions (3, 2) m, rolling angles (3,) rad, radii (3,) m,
    counts per revolution (3,), metres per count (3,) and lever arms (3,) m."""

    position_m: np.ndarray
    angle_rad: np.ndarray
    radius_m: np.ndarray
    counts_per_rev: np.ndarray
    m_per_count: np.ndarray
    lever_m: np.ndarray

    @classmethod
    def from_params(cls, p: dict) -> PodGeometry:
        """Geometry of a validated ``[pods]`` table."""
        pos = np.asarray(p["positions_m"], float)
        phi = np.deg2rad(np.asarray(p["rolling_angles_deg"], float))
        r = np.asarray(p["wheel_radius_m"], float)
        cpr = np.asarray(p["counts_per_rev"], float)
        lever = pos[:, 0] * np.sin(phi) - pos[:, 1] * np.cos(phi)
        return cls(pos, phi, r, cpr, 2 * np.pi * r / cpr, lever)

    def kinematic_matrix(self) -> np.ndarray:
        """W (3, 3) with Δn = W·(Δx, Δy, Δθ): rows (cos φ, sin φ, lever) / c (counts per m, rad)."""
        rows = np.column_stack([np.cos(self.angle_rad), np.sin(self.angle_rad), self.lever_m])
        return rows / self.m_per_count[:, None]

    def as_array(self) -> np.ndarray:
        """(3, 6) rows x_m, y_m, angle_rad, radius_m, counts_per_rev, m_per_count."""
        cols = (self.angle_rad, self.radius_m, self.counts_per_rev, self.m_per_count)
        return np.column_stack([self.position_m, *cols])


@dataclass
class PodSamples:
    """What the pod MCU reads, one row per frame: true time ``t_s`` (s), the MCU clock
    ``mcu_time_us`` (drift and offset, µs, unwrapped), cumulative ``counts`` (n, 3;
    unwrapped: emulators wrap them to ``counter_bits``), IMU ``yaw_rad`` (wrapped to (−π,
    π], 0 at power-on), ``yaw_rate_rad_s`` and ``true_gyro_bias_rad_s`` (nan without an
    IMU), each wheel's rolled distance (n, 3; m) noise-free and with slip, scrub and
    bounce. ``params``: the ``[pods]`` table, ``[imu]`` under ``"imu"``, and the derived
    ``m_per_count``, ``rolling_angles_rad`` and ``lever_arms_m``."""

    t_s: np.ndarray
    mcu_time_us: np.ndarray
    counts: np.ndarray
    counter_bits: int
    yaw_rad: np.ndarray
    yaw_rate_rad_s: np.ndarray
    params: dict
    true_distance_m: np.ndarray
    measured_distance_m: np.ndarray
    true_gyro_bias_rad_s: np.ndarray
    geometry: PodGeometry


def _bounce_mask(t_edges: np.ndarray, rate: float, dur: float, rng: np.random.Generator
) -> np.ndarray:
    """True for sub-steps (between consecutive ``t_edges``) inside a bounce of one pod."""
    span = t_edges[-1] - t_edges[0]
    n_ev = rng.poisson(rate * span) if rate > 0 and dur > 0 else 0
    starts = np.sort(rng.uniform(t_edges[0], t_edges[-1], n_ev))
    mid = 0.5 * (t_edges[:-1] + t_edges[1:])
    if n_ev == 0:
        return np.zeros(mid.size, dtype=bool)
    k = np.searchsorted(starts, mid, side="right") - 1
    return (k >= 0) & (mid < starts[np.maximum(k, 0)] + dur)


def simulate_pods(
    p: dict, imu: dict, traj: Trajectory, duration_s: float, rng: np.random.Generator,
    rng_imu: np.random.Generator,
) -> PodSamples:  # fmt: skip
    """Simulate the pod MCU's frames over ``duration_s`` (s) along ``traj``; ``rng`` draws
    the pods' noise, ``rng_imu`` the IMU's, so either can change without the other."""
    geo = PodGeometry.from_params(p)
    scale = 1.0 + p["mcu_clock_drift_ppm"] * 1e-6  # frames on the MCU clock, true times (s)
    period_us = 1e6 / p["rate_hz"]
    mcu_elapsed = np.arange(int(np.floor(duration_s * scale * 1e6 / period_us)) + 1) * period_us
    t = mcu_elapsed * 1e-6 / scale
    mcu_us = p["mcu_clock_offset_us"] + np.floor(mcu_elapsed).astype(np.int64)
    m = p["substeps"]
    dt_frame = np.diff(t)
    sub = (t[:-1, None] + dt_frame[:, None] * (np.arange(m) / m)[None, :]).ravel()
    tg = np.append(sub, t[-1])
    vx, vy, wz = traj.twist_body(tg)
    c, s = np.cos(geo.angle_rad), np.sin(geo.angle_rad)
    along = np.outer(vx, c) + np.outer(vy, s) + np.outer(wz, geo.lever_m)
    perp_arm = geo.position_m[:, 0] * c + geo.position_m[:, 1] * s
    perp = np.outer(vx, -s) + np.outer(vy, c) + np.outer(wz, perp_arm)
    h = np.diff(tg)[:, None]
    d_true = 0.5 * (along[1:] + along[:-1]) * h
    d_perp = 0.5 * (perp[1:] + perp[:-1]) * h
    noise = p["slip_sigma_m_per_sqrt_m"] * np.sqrt(np.abs(d_true)) * rng.standard_normal(
        d_true.shape
    ) + p["scrub_sigma_m_per_sqrt_m"] * np.sqrt(np.abs(d_perp)) * rng.standard_normal(d_true.shape)
    d_meas = d_true + noise
    for i in range(3):
        lost = _bounce_mask(tg, p["bounce_rate_hz"], p["bounce_duration_s"], rng)
        d_meas[lost, i] = 0.0
    mid = 0.5 * (tg[:-1] + tg[1:])
    windows = [(*w, 0.0) for w in p["lift_windows"]] + [tuple(w) for w in p["slip_windows"]]
    for pod, start, dur, fraction in windows:  # pod in 0, 1, 2: the scenario schema's check
        inside = (mid >= start) & (mid < start + dur)
        d_meas[inside, int(pod)] *= fraction
    zero = np.zeros((1, 3))
    cum_true = np.vstack([zero, np.cumsum(d_true, axis=0)])[::m]
    cum_meas = np.vstack([zero, np.cumsum(d_meas, axis=0)])[::m]
    counts = np.asarray(p["initial_counts"], float).astype(np.int64)[None, :] + np.floor(
        cum_meas / geo.m_per_count[None, :] + 1e-9
    ).astype(np.int64)
    yaw, rate, bias = _imu(imu, traj, t, rng_imu)
    derived = {"m_per_count": geo.m_per_count, "rolling_angles_rad": geo.angle_rad,
        "lever_arms_m": geo.lever_m}  # fmt: skip
    params = {**p, "imu": dict(imu), **{k: v.tolist() for k, v in derived.items()}}
    return PodSamples(
        t, mcu_us, counts, int(p["counter_bits"]), yaw, rate, params, cum_true, cum_meas, bias, geo
    )


def _imu(
    imu: dict, traj: Trajectory, t: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = t.size
    if not imu["enabled"]:
        nan = np.full(n, np.nan)
        return nan, nan.copy(), nan.copy()
    dt = np.diff(t, prepend=t[0])
    walk = imu["bias_walk_rad_s_sqrt_s"] * np.sqrt(dt) * rng.standard_normal(n)
    bias = imu["bias_rad_s"] + np.cumsum(walk)
    white = imu["rate_noise_rad_s"] * rng.standard_normal(n)
    _, _, wz = traj.twist_body(t)
    rate = wz + bias + white
    err = bias + white
    integ = np.concatenate([[0.0], np.cumsum(0.5 * (err[1:] + err[:-1]) * np.diff(t))])
    _, _, yaw_true = traj.pose(t)
    yaw = yaw_true - yaw_true[0] + integ + imu["yaw_noise_rad"] * rng.standard_normal(n)
    return np.angle(np.exp(1j * yaw)), rate, bias
