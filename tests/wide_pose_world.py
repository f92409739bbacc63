"""Pose worlds drawn from wide ranges, built independently of ``tests/pose_util.py``.

Per campaign: relocalization rate 0.02–1 Hz, usual offset sd 1 mm–20 cm (and 0.1 of
that in rad), wrong-relocalization probability 0–10 % with gross offsets 0.3–3 m and
5–90°, Gauss-Markov tau 0.2–60 s and sd 1 mm–5 cm, white noise, sensor 5–100 Hz,
mocap 60–240 Hz with drop-outs, clock offset 0–200 ms (either sign), a random map frame
and mount. The truth (every wrong relocalization's sensor stamp) is returned beside
the tracks; nothing of it reaches the code under test but the tracks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from foreign.pose_world import _motion, _rotation
from scipy.spatial.transform import Rotation

from sensorbench.characterize.pose.align import PoseTrack

RELOCALIZED = 1


@dataclass
class WideTruth:
    """Drawn parameters and, per session, the wrong relocalizations' sensor stamps (s)."""

    params: np.ndarray  # (6, 4) sigma_b, sigma, tau_s, sigma_v per axis (m, rad, s)
    reloc_hz: float
    wrong_rate: float
    offset_s: float  # reference time = sensor time + offset
    sensor_hz: float
    mocap_hz: float
    wrong_times_s: list[np.ndarray] = field(default_factory=list)
    map_rotation: Rotation = field(default_factory=Rotation.identity)  # reference ← sensor map
    map_translation: np.ndarray = field(default_factory=lambda: np.zeros(3))  # m


def draw(rng: np.random.Generator) -> WideTruth:
    """Parameters from the module's ranges (log-uniform for scales)."""

    def logu(lo: float, hi: float, n: int | None = None):
        return np.exp(rng.uniform(np.log(lo), np.log(hi), n))

    p = np.empty((6, 4))
    p[:3, 0] = logu(0.001, 0.2)
    p[3:, 0] = 0.1 * p[:3, 0]
    p[:3, 1] = logu(0.001, 0.05, 3)
    p[3:, 1] = 0.1 * logu(0.001, 0.05, 3)
    p[:, 2] = logu(0.2, 60.0, 6)
    p[:3, 3] = logu(0.0005, 0.01, 3)
    p[3:, 3] = 0.1 * logu(0.0005, 0.01, 3)
    return WideTruth(
        p, float(logu(0.02, 1.0)), float(rng.uniform(0.0, 0.1)),
        float(rng.choice([-1, 1]) * rng.uniform(0.0, 0.2)), float(logu(5.0, 100.0)),
        float(rng.uniform(60.0, 240.0)),
    )


def _gm(rng: np.random.Generator, t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """(N, 6) exact Gauss-Markov (stationary start) plus white noise at times t."""
    g = np.empty((t.size, 6))
    g[0] = p[:, 1] * rng.standard_normal(6)
    phi = np.exp(-np.diff(t)[:, None] / p[:, 2])
    w = rng.standard_normal((t.size - 1, 6)) * p[:, 1] * np.sqrt(1.0 - phi**2)
    for k in range(1, t.size):
        g[k] = phi[k - 1] * g[k - 1] + w[k - 1]
    return g + p[:, 3] * rng.standard_normal((t.size, 6))


def _gross(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 6) gross offsets: 0.3–3 m horizontally, 5–90° in yaw, random signs."""
    out = np.zeros((n, 6))
    r = rng.uniform(0.3, 3.0, n)
    a = rng.uniform(-np.pi, np.pi, n)
    out[:, 0], out[:, 1] = r * np.cos(a), r * np.sin(a)
    out[:, 5] = np.deg2rad(rng.uniform(5.0, 90.0, n)) * rng.choice([-1.0, 1.0], n)
    return out


def session(
    rng: np.random.Generator, truth: WideTruth, duration_s: float, r_map: Rotation,
    t_map: np.ndarray, mount: Rotation, reloc: str = "random", wrong_at_s: float | None = None,
) -> tuple[PoseTrack, PoseTrack]:
    """One session's (sensor, mocap) tracks; appends its wrong stamps to ``truth``.

    ``reloc``: "random" (Poisson at ``truth.reloc_hz``), "none" or "every" (each sample
    flagged); ``wrong_at_s``: a wrong relocalization forced at that time (s)."""
    pos, ang = _motion(rng, -1.0, duration_s + 1.0)
    spacing = np.exp(rng.normal(0.0, 0.2, int(3 * duration_s * truth.sensor_hz) + 10))
    t = 0.05 + np.cumsum(spacing / truth.sensor_hz)
    t = t[t < duration_s]
    flags = np.zeros(t.size, bool)
    if reloc == "every":
        flags[1:] = True
    elif reloc == "random":
        events = np.cumsum(rng.exponential(1.0 / truth.reloc_hz, int(duration_s * 3 + 10)))
        idx = np.searchsorted(t, events[events < t[-1]])
        flags[idx[(idx > 0) & (idx < t.size)]] = True
    wrong = flags & (rng.random(t.size) < truth.wrong_rate)
    if wrong_at_s is not None:
        k = int(np.searchsorted(t, wrong_at_s))
        flags[k] = wrong[k] = True
    starts = np.flatnonzero(np.r_[True, flags[1:]])
    seg = np.cumsum(np.r_[True, flags[1:]]) - 1
    b = rng.standard_normal((starts.size, 6)) * truth.params[:, 0]
    w_seg = wrong[starts]
    b[w_seg] += _gross(rng, int(w_seg.sum()))
    err = b[seg] + _gm(rng, t, truth.params)
    truth.wrong_times_s.append(t[wrong] - truth.offset_s)
    p_true = pos(t) + err[:, :3]
    r_true = _rotation(ang, t) * Rotation.from_rotvec(err[:, 3:])
    sensor = PoseTrack(
        t - truth.offset_s, r_map.inv().apply(p_true - t_map),
        (r_map.inv() * r_true * mount).as_quat(), flags=flags.astype(np.uint8) * RELOCALIZED,
    )
    tm = np.arange(-0.5, duration_s + 0.5, 1.0 / truth.mocap_hz)
    keep = np.ones(tm.size, bool)
    for k in np.flatnonzero(rng.random(tm.size) < 0.003):
        keep[k : k + rng.integers(2, 12)] = False
    tm = tm[keep]
    r_ref = _rotation(ang, tm) * Rotation.from_rotvec(rng.standard_normal((tm.size, 3)) * 2e-4)
    mocap = PoseTrack(tm, pos(tm) + rng.standard_normal((tm.size, 3)) * 2e-4, r_ref.as_quat())
    return sensor, mocap


def campaign(
    seed: int, n_sessions: int = 4, duration_s: float = 60.0,
    special: dict[int, dict] | None = None, wrong_rate: float | None = None,
) -> tuple[WideTruth, list[tuple[PoseTrack, PoseTrack]], list[str]]:
    """A campaign of ``n_sessions`` in one map; ``special`` maps a session index to
    :func:`session` keyword arguments (``reloc``, ``wrong_at_s``); ``wrong_rate``
    replaces the drawn wrong-relocalization probability."""
    rng = np.random.default_rng([seed, 0x1D7])
    truth = draw(rng)
    if wrong_rate is not None:
        truth.wrong_rate = wrong_rate
    r_map = Rotation.from_euler("ZYX", [rng.uniform(-np.pi, np.pi), *rng.uniform(-0.2, 0.2, 2)])
    mount = Rotation.from_rotvec(rng.uniform(-0.1, 0.1, 3))
    t_map = rng.uniform(-3.0, 3.0, 3)
    truth.map_rotation, truth.map_translation = r_map, t_map
    special = special or {}
    tracks = [
        session(rng, truth, duration_s, r_map, t_map, mount, **special.get(i, {}))
        for i in range(n_sessions)
    ]
    return truth, tracks, [f"w{seed}_{i}" for i in range(n_sessions)]
