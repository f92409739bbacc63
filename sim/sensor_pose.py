"""Pose streams with known error: motion capture and a relocalizing pose sensor, each a
3D pose (m, unit quaternion x, y, z, w) stamped with its host arrival time
(models: docs/SIMULATION.md, "Sensor models")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from sensorbench.sim.trajectory import Trajectory

RELOCALIZED = 1
PAUSED = 2


@dataclass
class PoseSamples:
    """A pose stream of the whole run: host arrival times ``t_s`` (s), (n, 3) ``position``
    (m) and (n, 4) ``quat_xyzw`` (nan where not ``valid``: occlusion or outside the mocap
    volume), ``flags`` (:data:`RELOCALIZED`, :data:`PAUSED`). Pose sensor only: (n, 6)
    ``error`` x, y, z (m), roll, pitch, yaw (rad) = reported − truth (nan while paused),
    its Gauss-Markov part ``gm`` (paused samples included), and per relocalization (the
    first at the first sample) ``reloc_t_s`` (s), (S, 6) ``reloc_offset``, ``reloc_wrong``
    (a gross one)."""

    t_s: np.ndarray
    position: np.ndarray
    quat_xyzw: np.ndarray
    valid: np.ndarray
    params: dict
    flags: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    error: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))
    reloc_t_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    reloc_offset: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))
    reloc_wrong: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    gm: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))


def _quat(roll: np.ndarray, pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    return Rotation.from_euler("ZYX", np.column_stack([yaw, pitch, roll])).as_quat()


def gauss_markov(
    t_s: np.ndarray, sigma: np.ndarray, tau_s: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """First-order Gauss-Markov samples (n, A) at times ``t_s`` (s), stationary from the
    start, exact for any Δt: ``g_{k+1} = φ g_k + w``, ``φ = exp(−Δt/τ)``,
    ``Var w = σ² (1 − φ²)``."""
    sigma = np.asarray(sigma, float)
    tau = np.asarray(tau_s, float)
    n = t_s.size
    z = rng.standard_normal((n, sigma.size))
    if n == 0:
        return z
    phi = np.exp(-np.diff(t_s)[:, None] / tau[None, :])
    w = sigma[None, :] * np.sqrt(1.0 - phi**2) * z[1:]
    g = np.empty((n, sigma.size))
    g[0] = sigma * z[0]
    for k in range(n - 1):
        g[k + 1] = phi[k] * g[k] + w[k]
    return g


def simulate_mocap(
    p: dict, traj: Trajectory, in_volume: object, duration_s: float, rng: np.random.Generator
) -> PoseSamples:
    """Motion capture at ``rate_hz`` with noise, latency and occlusion gaps; samples
    occluded or outside the capture volume (``in_volume(x, y) -> bool[]``) hold nan."""
    t = np.arange(0.0, duration_s, 1.0 / p["rate_hz"])
    n = t.size
    x, y, yaw = traj.pose(t - p["latency_s"])
    n_gap = rng.poisson(p["occlusion_rate_hz"] * duration_s) if p["occlusion_mean_s"] > 0 else 0
    starts = np.sort(rng.uniform(0.0, duration_s, n_gap))
    lengths = rng.exponential(p["occlusion_mean_s"], n_gap) if n_gap else np.zeros(0)
    pos_noise = p["noise_m"] * rng.standard_normal((n, 3))
    rot_noise = p["noise_rad"] * rng.standard_normal((n, 3))
    occluded = np.zeros(n, dtype=bool)
    if n_gap:
        k = np.searchsorted(starts, t, side="right") - 1
        ends = np.maximum.accumulate(starts + lengths)
        occluded = (k >= 0) & (t < ends[np.maximum(k, 0)])
    valid = ~occluded & np.asarray(in_volume(x, y), dtype=bool)
    pos = np.column_stack([x, y, np.full(n, p["marker_height_m"])]) + pos_noise
    rot = Rotation.from_euler("z", yaw[:, None]) * Rotation.from_rotvec(rot_noise)
    quat = rot.as_quat()
    pos[~valid], quat[~valid] = np.nan, np.nan
    params = {**p, "occlusion_intervals_s": np.column_stack([starts, starts + lengths]).tolist()}
    return PoseSamples(t, pos, quat, valid, params, flags=np.zeros(n, np.uint8))


def simulate_pose_sensor(
    p: dict, traj: Trajectory, duration_s: float, rng: np.random.Generator
) -> PoseSamples:
    """The relocalizing pose sensor over ``duration_s`` (s); model: docs/SIMULATION.md."""
    t = np.arange(0.0, duration_s, 1.0 / p["rate_hz"])  # k / rate_hz + N(0, rate_jitter_s)
    t = t + p["rate_jitter_s"] * rng.standard_normal(t.size)
    t = np.sort(t[(t >= 0.0) & (t < duration_s)])
    n = t.size
    covered = np.zeros(n, dtype=bool)
    for a, b in p["covered_s"]:
        covered |= (t >= a) & (t < b)
    events = list(p["reloc_times_s"])
    if p["reloc_after_cover"]:
        events += [b for _, b in p["covered_s"]]
    first = t[0] if n else 0.0
    reloc = np.unique(np.array([first] + [e for e in events if first < e < duration_s]))
    n_s = reloc.size
    normal = np.asarray(p["reloc_sigma"])[None, :] * rng.standard_normal((n_s, 6))
    gross = np.asarray(p["wrong_reloc_sigma"])[None, :] * rng.standard_normal((n_s, 6))
    wrong = rng.random(n_s) < p["wrong_reloc_prob"]
    offset = np.where(wrong[:, None], gross, normal)
    g = gauss_markov(t, p["gm_sigma"], p["gm_tau_s"], rng)
    v = np.asarray(p["white_sigma"])[None, :] * rng.standard_normal((n, 6))
    seg = np.clip(np.searchsorted(reloc, t, side="right") - 1, 0, n_s - 1)
    err = offset[seg] + g + v
    # the sensor (at its mount_* on the body) in its map (at map_* in the world)
    x, y, yaw = traj.pose(t - p["latency_s"])
    mx, my = p["mount_xy_m"]
    sx = x + np.cos(yaw) * mx - np.sin(yaw) * my - p["map_xy_m"][0]
    sy = y + np.sin(yaw) * mx + np.cos(yaw) * my - p["map_xy_m"][1]
    a = np.deg2rad(p["map_yaw_deg"])
    x, y = np.cos(a) * sx + np.sin(a) * sy, -np.sin(a) * sx + np.cos(a) * sy
    yaw = yaw + np.deg2rad(p["mount_yaw_deg"]) - a
    pos = np.column_stack([x + err[:, 0], y + err[:, 1], p["height_m"] + err[:, 2]])
    quat = _quat(err[:, 3], err[:, 4], yaw + err[:, 5]) if n else np.zeros((0, 4))
    flags = np.zeros(n, np.uint8)
    first_idx = np.searchsorted(t, reloc, side="left")
    flags[first_idx[first_idx < n]] |= RELOCALIZED
    flags[covered] |= PAUSED
    if covered.any():
        idx = np.where(covered, -1, np.arange(n))
        held = np.maximum.accumulate(idx)
        fresh = held >= 0
        hold_from = np.where(fresh, held, 0)
        pos = np.where((covered & fresh)[:, None], pos[hold_from], pos)
        quat = np.where((covered & fresh)[:, None], quat[hold_from], quat)
        pos[covered & ~fresh], quat[covered & ~fresh] = np.nan, np.nan
        err = np.where(covered[:, None], np.nan, err)
    return PoseSamples(t, pos, quat, ~covered, dict(p), flags, err, reloc, offset, wrong, g)
