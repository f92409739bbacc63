"""Spinning 2D lidars (LD19, RPLIDAR A1) by ray casting from the mount pose at each
sample's time; the noise models are docs/SIMULATION.md's ("Sensor models")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.sim.trajectory import Trajectory
from sensorbench.sim.world import World

KIND_NORMAL = 0
KIND_EDGE = 1
KIND_FALSE = 2


@dataclass
class LidarSamples:
    """Device-native samples of one lidar (``model`` ld19 or a1) over the whole run.

    Per sample: emission time ``t_s`` (s), bearing ``angle_deg_cw`` (deg clockwise, [0,
    360)), quantized ``range_m`` (m; 0: no return), ``intensity`` (LD19 0..255, A1 quality
    0..63; 0 without a return), turn speed ``speed_deg_s`` (per packet for the LD19),
    ``turn`` index, point ``kind`` (:data:`KIND_NORMAL` or no return, :data:`KIND_EDGE`
    mixed pixel, :data:`KIND_FALSE`), noise-free ``true_range_m`` (m; inf: no hit). Per
    turn: ``turn_t_start_s``, ``turn_period_s``, ``turn_skipped``.
    """

    model: str
    t_s: np.ndarray
    angle_deg_cw: np.ndarray
    range_m: np.ndarray
    intensity: np.ndarray
    speed_deg_s: np.ndarray
    turn: np.ndarray
    kind: np.ndarray
    true_range_m: np.ndarray
    samples_per_packet: int
    turn_t_start_s: np.ndarray
    turn_period_s: np.ndarray
    turn_skipped: np.ndarray
    params: dict

    def __len__(self) -> int:
        return int(self.t_s.size)


def band_sigma(p: dict, r: np.ndarray) -> np.ndarray:
    """Range noise σ (m) of each true range ``r`` (m) from the distance bands."""
    edges = np.asarray(p["noise_band_edges_m"])
    sig = np.asarray(p["noise_band_sigma_m"])
    k = np.clip(np.searchsorted(edges, r, side="right") - 1, 0, sig.size - 1)
    return sig[k]


def simulate_lidar(
    p: dict, traj: Trajectory, world: World, duration_s: float, rng: np.random.Generator,
    body: World | None = None,
) -> LidarSamples:  # fmt: skip
    """All samples of one lidar (validated ``[lidars.<name>]`` table ``p``) over the run;
    with ``sees_robot`` also returns from ``body``, the robot's occluders (body frame)."""
    model = p["model"]
    spp = 12 if model == "ld19" else 1
    # the turns covering [0, duration_s]: the first starts a uniform fraction of a period
    # before 0 (it is seen partial)
    T = 1.0 / p["rate_hz"]
    n = int(np.ceil(duration_s / (0.25 * T))) + 8  # enough even if every period is minimal
    periods = np.maximum(T + p["period_jitter_s"] * rng.standard_normal(n), 0.25 * T)
    starts = -rng.uniform(0.0, T) + np.concatenate([[0.0], np.cumsum(periods[:-1])])
    skipped = rng.random(n) < p["skip_prob"]
    keep = starts < duration_s
    starts, periods, skipped = starts[keep], periods[keep], skipped[keep]
    t, turn, angle_cw, speed = _sample_angles(p, spp, duration_s, starts, periods, skipped)
    true_r = _true_ranges(p, traj, world, body, t, angle_cw)
    range_m, intensity, kind = _measure(p, true_r, turn, rng)
    return LidarSamples(model, t, angle_cw, range_m, intensity, speed, turn, kind, true_r, spp,
        starts, periods, skipped, dict(p))


def _sample_angles(
    p: dict, spp: int, duration_s: float, starts: np.ndarray, periods: np.ndarray,
    skipped: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """Every sample's time (s), turn, clockwise angle (deg) and turn speed (deg/s) on the
    turn schedule; packets of ``spp`` samples in skipped turns are left out."""
    fs = p["samples_per_s"]
    n_pk = int(np.floor(duration_s * fs / spp))
    t = (np.arange(n_pk * spp) / fs).reshape(n_pk, spp)
    k_first = np.searchsorted(starts, t[:, 0], side="right") - 1
    k_last = np.searchsorted(starts, t[:, -1], side="right") - 1
    ph_first = k_first + (t[:, 0] - starts[k_first]) / periods[k_first]
    ph_last = k_last + (t[:, -1] - starts[k_last]) / periods[k_last]
    frac = np.arange(spp) / max(spp - 1, 1)  # evenly spread over each packet
    phase = ph_first[:, None] + (ph_last - ph_first)[:, None] * frac[None, :]
    turn = np.floor(phase).astype(np.int64)
    keep_pk = ~(skipped[np.clip(turn, 0, starts.size - 1)].any(axis=1))
    t, phase, turn = t[keep_pk].ravel(), phase[keep_pk].ravel(), turn[keep_pk].ravel()
    speed = np.repeat(360.0 / periods[k_first[keep_pk]], spp)
    angle_cw = (phase - turn) * 360.0
    angle_cw[angle_cw >= 360.0] = 0.0
    return t, turn, angle_cw, speed


def _true_ranges(
    p: dict, traj: Trajectory, world: World, body: World | None, t: np.ndarray, angle: np.ndarray
) -> np.ndarray:
    """True range (m, inf: nothing) at each sample's time and clockwise angle (deg): the
    world seen from the mount, and the robot's own occluders if the lidar sees them."""
    x, y, yaw = traj.pose(t)
    mx, my = p["mount_xy_m"]
    c, s = np.cos(yaw), np.sin(yaw)
    origin = np.column_stack([x + c * mx - s * my, y + s * mx + c * my])
    bearing = yaw + np.deg2rad(p["mount_yaw_deg"]) - np.deg2rad(angle)
    true_r = world.raycast(origin, bearing)
    if body is not None and p["sees_robot"] and (len(body.segments) or len(body.circles)):
        own = np.deg2rad(p["mount_yaw_deg"]) - np.deg2rad(angle)
        true_r = np.minimum(true_r, body.raycast(np.asarray(p["mount_xy_m"], float), own))
    return true_r


def _measure(
    p: dict, true_r: np.ndarray, turn: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Measured range (m, 0: no return), intensity and point kind of each sample: range
    noise, mixed edge points, false points, resolution and the range limits."""
    n = true_r.size
    z_noise, u_edge, u_mix = rng.standard_normal(n), rng.random(n), rng.random(n)
    u_false, u_false_r, z_int = rng.random(n), rng.random(n), rng.standard_normal(n)

    finite = np.isfinite(true_r)
    meas = np.where(finite, true_r + band_sigma(p, np.where(finite, true_r, 0.0)) * z_noise, np.inf)
    kind = np.zeros(n, np.uint8)

    same_turn = turn[1:] == turn[:-1]  # neighbours within one turn
    prev_r = np.r_[np.nan, np.where(same_turn, true_r[:-1], np.nan)]
    next_r = np.r_[np.where(same_turn, true_r[1:], np.nan), np.nan]
    with np.errstate(invalid="ignore"):
        jp = np.where(np.isfinite(prev_r) & finite, np.abs(prev_r - true_r), 0.0)
        jn = np.where(np.isfinite(next_r) & finite, np.abs(next_r - true_r), 0.0)
    use_next = jn > jp
    jump = np.maximum(jp, jn)
    nb = np.where(use_next, next_r, prev_r)
    edge = (jump > p["edge_min_jump_m"]) & (u_edge < p["edge_outlier_prob"])
    meas = np.where(edge, true_r + u_mix * (nb - true_r), meas)
    kind[edge] = KIND_EDGE

    false = u_false < p["false_point_prob"]
    lo, top = p["range_min_m"], p["range_max_m"]
    hi = np.where(finite, np.minimum(true_r, top), top)
    meas = np.where(false, lo + u_false_r * np.maximum(hi - lo, 0), meas)
    kind[false] = KIND_FALSE

    res = p["range_resolution_m"]
    if res > 0:
        meas = np.where(np.isfinite(meas), np.round(meas / res) * res, meas)
    ret = np.isfinite(meas) & (meas >= p["range_min_m"]) & (meas <= p["range_max_m"])
    range_m = np.where(ret, meas, 0.0)

    level = p["intensity_at_1m"] - p["intensity_falloff_per_m"] * (range_m - 1.0)
    level = np.where(kind == KIND_EDGE, level * (0.3 + 0.5 * u_mix), level)
    level = np.where(kind == KIND_FALSE, 0.1 * p["intensity_at_1m"], level)
    inten = np.clip(np.round(level + p["intensity_noise"] * z_int), 1, p["intensity_max"])
    intensity = np.where(ret, inten, 0).astype(np.uint8)
    return range_m, intensity, kind
