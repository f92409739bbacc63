"""Simulated pose-error campaigns with known truth for the pose-error tests.

The correct world is the model itself (simulated with
:func:`sensorbench.characterize.pose.gm_montecarlo.simulate_errors`); the wrong worlds
break it in one way each:

- ``"random_walk"``: between relocalizations the error drifts as a random walk
  restarted at each relocalization (plus the offset and the white noise) instead of
  decaying as Gauss-Markov; its diffusion is set so the mean variance over a segment
  equals the GM variance, so RMS alone does not give it away;
- ``"one_noisy"``: one session (the last) has 3× the GM and white noise (another mount);
- ``"sigma2"``: one session (the last) has 2× the GM sigma;
- ``"heavy_tails"``: the GM steps and the white noise are Student-t(3), scaled to the
  model's variance.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from sensorbench.characterize.pose.error_model import PARAMS, PoseErrorModel
from sensorbench.characterize.pose.gm_montecarlo import simulate_errors
from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries

# (sigma_b, sigma, tau_s, sigma_v) per axis: x, y, z (m), roll, pitch, yaw (rad)
TRUTH = np.array(
    [
        [0.010, 0.030, 2.0, 0.005],
        [0.010, 0.030, 2.0, 0.005],
        [0.006, 0.015, 3.0, 0.003],
        [0.002, 0.006, 3.0, 0.001],
        [0.002, 0.006, 3.0, 0.001],
        [0.004, 0.010, 2.0, 0.002],
    ]
)


def session_design(
    rng: np.random.Generator, duration_s: float, rate_hz: float, reloc_mean_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Jittered timestamps (±20 % of the period, plus one 1-s gap) and relocalizations."""
    n = int(duration_s * rate_hz)
    dt = rng.uniform(0.8, 1.2, n) / rate_hz
    dt[n // 3] += 1.0
    t = np.cumsum(dt)
    t -= t[0]
    reloc = np.zeros(n, dtype=bool)
    tr = np.cumsum(rng.exponential(reloc_mean_s, 64))
    tr = tr[tr < t[-1] - 2.0]
    reloc[np.searchsorted(t, tr)] = True
    reloc[0] = True
    return t, reloc


def random_walk_errors(
    rng: np.random.Generator, t: np.ndarray, reloc: np.ndarray, params: np.ndarray
) -> np.ndarray:
    """(N, 6) offset + random walk restarted at each relocalization + white noise."""
    seg = np.cumsum(reloc) - 1
    starts = np.flatnonzero(reloc)
    seg_len = np.diff(np.append(t[starts], t[-1]))
    mean_len = float(np.mean(seg_len))
    # E[var] over a segment of length L is q L / 2: match sigma² on average
    q = 2.0 * params[:, 1] ** 2 / mean_len
    dt = np.diff(t, prepend=t[0])
    inc = rng.standard_normal((t.size, 6)) * np.sqrt(q * dt[:, None])
    inc[reloc] = 0.0
    walk = np.cumsum(inc, axis=0)
    walk -= walk[starts][seg]
    b = rng.standard_normal((starts.size, 6)) * params[:, 0]
    return b[seg] + walk + rng.standard_normal((t.size, 6)) * params[:, 3]


def heavy_tailed_errors(
    rng: np.random.Generator, t: np.ndarray, reloc: np.ndarray, params: np.ndarray
) -> np.ndarray:
    """(N, 6) the model's error with Student-t(3) GM steps and white noise of equal variance."""
    seg = np.cumsum(reloc) - 1
    b = rng.standard_normal((int(reloc.sum()), 6)) * params[:, 0]
    steps = rng.standard_t(3, (t.size, 6)) / np.sqrt(3.0)
    g = np.empty((t.size, 6))
    g[0] = rng.standard_normal(6) * params[:, 1]
    for k in range(1, t.size):
        phi = np.exp(-(t[k] - t[k - 1]) / params[:, 2])
        g[k] = phi * g[k - 1] + params[:, 1] * np.sqrt(1.0 - phi * phi) * steps[k]
    white = rng.standard_t(3, (t.size, 6)) / np.sqrt(3.0) * params[:, 3]
    return b[seg] + g + white


def codes(verdict: Any) -> set[str]:
    """The distinct reason codes of a verdict's model part."""
    return {r.code for r in verdict.reasons()}


def with_params(model: PoseErrorModel, params: np.ndarray, note: str) -> PoseErrorModel:
    """``model`` with its ``(6, 4)`` parameters replaced (uncertainty kept), the change
    noted in its provenance."""
    axes = {
        a: replace(model.axes[a], **dict(zip(PARAMS, map(float, params[i]), strict=True)),
                   cov_log=model.axes[a].cov_log.copy(), neg_log_likelihood=float("nan"),
                   converged=True)
        for i, a in enumerate(POSE_AXES)
    }  # fmt: skip
    return replace(model, axes=axes, provenance={**model.provenance, "modified": note})


def campaign(
    seed: int,
    world: str = "correct",
    n_sessions: int = 6,
    duration_s: float = 120.0,
    rate_hz: float = 5.0,
    reloc_mean_s: float = 20.0,
    truth: np.ndarray = TRUTH,
) -> list[ErrorSeries]:
    """A simulated campaign of ``n_sessions`` error series in the given world."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_sessions):
        t, reloc = session_design(rng, duration_s, rate_hz, reloc_mean_s)
        if world == "random_walk":
            e = random_walk_errors(rng, t, reloc, truth)
        elif world == "heavy_tails":
            e = heavy_tailed_errors(rng, t, reloc, truth)
        else:
            p = truth.copy()
            last = i == n_sessions - 1
            if world == "one_noisy" and last:
                p[:, 1] *= 3.0
                p[:, 3] *= 3.0
            elif world == "sigma2" and last:
                p[:, 1] *= 2.0
            elif world not in ("correct", "one_noisy", "sigma2"):
                raise ValueError(world)
            e = simulate_errors(p, t, reloc, 1, rng)[0]
        out.append(ErrorSeries(t, e, reloc, name=f"{world}-{seed}-{i}"))
    return out


SBC_PRIOR = np.log(
    np.array(
        [  # (low, high) of a log-uniform prior: sigma_b, sigma, tau_s, sigma_v
            [0.005, 0.02],
            [0.01, 0.03],
            [0.5, 3.0],
            [0.002, 0.006],
        ]
    )
)


def sbc_fits(
    n_sessions: int,
    seed: int,
    duration_s: float = 300.0,
    rate_hz: float = 10.0,
    reloc_mean_s: float = 20.0,
    n_rank_draws: int = 999,
) -> dict[str, np.ndarray]:
    """Simulation-based calibration of the fitter's stated uncertainty.

    For every (session, axis) a truth is drawn from :data:`SBC_PRIOR`, a session is
    simulated and every axis refitted; returns ``truth``, ``estimate``, ``se_log``
    (``(n_sessions * 6, 4)``), ``rank_u`` — the truth's rank among ``n_rank_draws``
    draws from the library's stated uncertainty (:func:`draw_params` with the fit's
    usable log covariance and sigma_b's Q-profile, as the validation draws them),
    scaled to (0, 1) — and ``covered95`` (truth inside :meth:`AxisFit.ci`).
    """
    from sensorbench.characterize.pose.error_model import fit_groups
    from sensorbench.characterize.pose.gm_montecarlo import draw_params

    rng = np.random.default_rng(seed)
    truths, series = [], []
    for i in range(n_sessions):
        t, reloc = session_design(rng, duration_s, rate_hz, reloc_mean_s)
        u = rng.uniform(size=(6, 4))
        truth = np.exp(SBC_PRIOR[:, 0] + u * (SBC_PRIOR[:, 1] - SBC_PRIOR[:, 0]))
        e = simulate_errors(truth, t, reloc, 1, rng)[0]
        series.append(ErrorSeries(t, e, reloc, name=f"sbc-{seed}-{i}"))
        truths.append(truth)
    fits = [f[a] for f in fit_groups(series, [[i] for i in range(n_sessions)]) for a in POSE_AXES]
    truth = np.concatenate(truths)
    est = np.array([f.values for f in fits])
    draws = draw_params(
        est,
        np.array([f.cov_log_usable() for f in fits]),
        n_rank_draws,
        rng,
        [f.sigma_b_quantile for f in fits],
    )
    rank = np.sum(draws < truth[None], axis=0)
    ci = np.array([f.ci() for f in fits])
    return {
        "truth": truth,
        "estimate": est,
        "se_log": np.array([f.se_log for f in fits]),
        "rank_u": (rank + 0.5) / (n_rank_draws + 1),
        "covered95": (truth >= ci[:, :, 0]) & (truth <= ci[:, :, 1]),
        "converged": np.array([f.converged for f in fits]),
    }


def reference_motion(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A smooth 3-D test trajectory: positions (N, 3) m and quaternions (N, 4) xyzw."""
    from scipy.spatial.transform import Rotation

    p = np.stack([np.sin(0.7 * t), 0.8 * np.cos(0.5 * t), 1.0 + 0.3 * np.sin(1.1 * t)], axis=1)
    rv = np.stack([0.3 * np.sin(0.9 * t), 0.2 * np.cos(0.6 * t), 0.8 * np.sin(0.4 * t)], axis=1)
    return p, Rotation.from_rotvec(rv).as_quat()


def write_session(
    path,
    series: ErrorSeries,
    sensor: str = "cam",
    sensor_clock_lag_s: float = 0.0,
    shift=None,
) -> None:
    """A session file: 100 Hz mocap of a smooth motion, and a sensor = mocap + error.

    The sensor samples at the error's timestamps, reports in the mocap frame (validate
    with ``--no-align``; ``shift``, m, moves its positions as if in another map) and
    flags RELOCALIZED at every relocalization of the series. Its stamps are
    ``sensor_clock_lag_s`` behind the mocap's (reference time = sensor time + that lag,
    the alignment's time offset).
    """
    from scipy.spatial.transform import Rotation

    from sensorbench.logs import PoseBatch, SessionWriter

    t = series.t_s
    t_ref = np.arange(t[0] - 0.5, t[-1] + 0.5, 0.01)
    p_ref, q_ref = reference_motion(t_ref)
    p, q = reference_motion(t)
    q_s = (Rotation.from_quat(q) * Rotation.from_rotvec(series.error[:, 3:])).as_quat()
    flags = series.reloc.astype(np.uint8)
    flags[0] = 0
    n, m = t.size, t_ref.size

    def ns(x: np.ndarray) -> np.ndarray:
        return np.round((x + 100.0) * 1e9).astype(np.int64)

    with SessionWriter(path, label="pose test", swmr=False) as w:
        w.add_pose("mocap", kind="mocap")
        w.add_pose(sensor, kind="pose_sensor")
        w.append_pose(
            "mocap", PoseBatch(ns(t_ref), p_ref, q_ref, np.ones(m, bool), np.zeros(m, np.uint8))
        )
        w.append_pose(
            sensor,
            PoseBatch(
                ns(t - sensor_clock_lag_s),
                p + series.error[:, :3] + (0.0 if shift is None else np.asarray(shift)),
                q_s,
                np.ones(n, bool),
                flags,
            ),
        )


MAP_ROTATION_RPY = (0.02, -0.01, 0.6)
"""The sensor's map frame against mocap's world (roll, pitch, yaw in rad) ..."""
MAP_TRANSLATION = np.array([1.5, -0.8, 0.2])
"""... and its origin in mocap's world, m."""


def track_campaign(
    seed: int,
    scale: float = 1.0,
    other_map: int | None = None,
    clock_offset_s: float = 0.0,
    **kw: Any,
) -> tuple[list, list[str]]:
    """Pose tracks ``[(sensor, mocap), ...]`` and names of a simulated campaign.

    The error series of :func:`campaign` (``kw``: its arguments; ``world`` "correct" or
    "random_walk") is
    applied to a smooth motion (:func:`reference_motion`, a different stretch of it in
    every session) in mocap's frame; the sensor reports in its own map frame
    (:data:`MAP_ROTATION_RPY`, :data:`MAP_TRANSLATION`), its positions multiplied by
    ``scale`` about the map's origin, and flags RELOCALIZED at every relocalization.
    Session ``other_map`` (an index) is in a map rotated by 0.3 rad about z and
    shifted by (0.4, −0.3, 0) m. The sensor's stamps are ``clock_offset_s`` behind
    mocap's (reference time = sensor time + offset; pass ``offset_s`` or estimate it).
    """
    from scipy.spatial.transform import Rotation

    from sensorbench.characterize.pose.align import PoseTrack

    series = campaign(seed, **kw)
    r_map = Rotation.from_euler("xyz", MAP_ROTATION_RPY)
    tracks, names = [], []
    for i, s in enumerate(series):
        phase = 37.0 * i
        t_ref = np.arange(s.t_s[0] - 0.5, s.t_s[-1] + 0.5, 0.01)
        p_ref, q_ref = reference_motion(t_ref + phase)
        p, q = reference_motion(s.t_s + phase)
        r_true = Rotation.from_quat(q) * Rotation.from_rotvec(s.error[:, 3:])
        pos = p + s.error[:, :3]
        r_m, t_m = r_map, MAP_TRANSLATION
        if other_map == i:
            shift = Rotation.from_euler("z", 0.3)
            r_m, t_m = shift * r_map, MAP_TRANSLATION + np.array([0.4, -0.3, 0.0])
        p_s = scale * r_m.inv().apply(pos - t_m)
        q_s = (r_m.inv() * r_true).as_quat()
        flags = s.reloc.astype(np.uint8)
        flags[0] = 0
        ref = PoseTrack(t_ref, p_ref, q_ref, name="mocap")
        sensor = PoseTrack(s.t_s - clock_offset_s, p_s, q_s, flags=flags, name="cam")
        tracks.append((sensor, ref))
        names.append(s.name)
    return tracks, names
