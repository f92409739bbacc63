"""Fit the split filters' noise per axis from replayed sessions (:func:`fit_axis`) and
check it: the NIS against its band and the gate's nominal rate, the innovations'
autocorrelation against ±1.96/√K (docs/PODS.md § "Noise fit").
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from sensorbench.characterize.pods.drift_fit import INTERVAL_S as DRIFT_INTERVAL_S
from sensorbench.characterize.pods.drift_fit import DriftFit, fit_drift
from sensorbench.characterize.pods.noise_likelihood import ZOOM_ROUNDS, zoom_search
from sensorbench.errors import FitError, SessionError
from sensorbench.fusion.axis_loop import NIS_GATE_99
from sensorbench.fusion.axis_step import AxisInput, run_axis
from sensorbench.fusion.consistency import (
    NisConsistency,
    clipped_chi2_moments,
    geyer_tau,
    nis_consistency,
    whiteness,
)
from sensorbench.fusion.filter_noise import NOISE_MODEL_UNITS, AxisNoise, FilterNoise, MotionReach
from sensorbench.fusion.frame_clock import stamp_variance
from sensorbench.fusion.odometry_drift import SlipModel, world_step_variances
from sensorbench.fusion.odometry_replay import read_odometry, replay_session
from sensorbench.fusion.pod_drive import align_interval_for, load_drive
from sensorbench.fusion.pod_kinematics import PodGeometry, integrate_path, se2_exp
from sensorbench.logs.model_keys import AXES


def axis_measurements(
    dt: np.ndarray, increments: np.ndarray, drift: SlipModel | None = None,
    pods: PodGeometry | None = None,
) -> dict[str, AxisInput]:
    """The per-axis filter measurements of one session's body increments (K, 3), with the
    per-step rolling and dragging slip variances of ``drift`` and, for the geometry
    ``pods``, the rounding's profile over the heading
    (:meth:`~sensorbench.fusion.pod_kinematics.PodGeometry.rounding_profile`)."""
    path = integrate_path(increments)
    rel = se2_exp(increments)
    heading = path[:-1, 2]
    c, s = np.cos(heading), np.sin(heading)
    none: dict[str, Any] = dict.fromkeys(AXES)
    slip = drag = none
    z = {
        "x": c * rel[:, 0] - s * rel[:, 1],
        "y": s * rel[:, 0] + c * rel[:, 1],
        "theta": increments[:, 2],
    }
    if drift is not None:
        parts = drift.step_covariance_parts(increments, dt)
        slip, drag = (world_step_variances(cov, heading) for cov in parts)
    rest = np.all(increments == 0, axis=1)
    profile = none if pods is None else pods.rounding_profile(heading)
    return {a: AxisInput(dt, z[a], slip[a], drag[a], rest, profile[a]) for a in AXES}


@dataclass
class AxisNoiseFit:
    """Fitted noise of one axis with its consistency checks.

    ``nis`` judges the calibrated NIS (mapped through the fitted Student-t law to χ²₁) of
    every update, rejected ones included, with a band over the effective number of
    updates; ``rho`` is the autocorrelation of the applied normalised innovations."""

    axis: str
    noise: AxisNoise
    nll: float
    nis: NisConsistency
    rho: np.ndarray
    rho_bound: float

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (``nis_mean``/``nis_bounds_95``: the calibrated NIS)."""
        return {
            **asdict(self.noise),
            "neg_log_likelihood": self.nll,
            "nis_mean": self.nis.mean,
            "nis_bounds_95": list(self.nis.band),
            "nis_inside_bounds": self.nis.mean_ok,
            "k": self.nis.k,
            "k_eff": self.nis.k_eff,
            "rejected": self.nis.rejected,
            "rejection_rate": self.nis.rejection_rate,
            "nominal_rejection_rate": self.nis.nominal_rate,
            "consistent": self.nis.consistent,
            "rho": [float(v) for v in self.rho],
            "rho_bound": self.rho_bound,
            "white": bool(np.all(np.abs(self.rho) <= self.rho_bound)),
            "lags_outside": int(np.count_nonzero(np.abs(self.rho) > self.rho_bound)),
        }


def check_axis(
    series: Sequence[AxisInput], noise: AxisNoise, gate: float = NIS_GATE_99, max_lag: int = 10
) -> tuple[NisConsistency, np.ndarray, float, AxisNoise]:
    """Calibrated-NIS consistency over all sessions, innovation autocorrelation and its
    bound, and ``noise`` with the RMS over the sessions of each one's clipped-mean standard
    error (:attr:`~sensorbench.fusion.filter_noise.AxisNoise.nis_se`) and the largest of
    their clipped NIS's autocorrelation times (``nis_tau``)."""
    nis, nu_n, se2, tau = [], [], [], [1.0]
    var = clipped_chi2_moments(gate)[1]
    for s in series:
        tr = run_axis(s, noise, gate)
        has = np.isfinite(tr.nis_chi2)
        nis.append(tr.nis_chi2[has])
        if np.count_nonzero(has) >= 2:
            se2.append(var / nis_consistency(nis[-1], gate).k_eff)
            tau.append(geyer_tau(np.minimum(nis[-1], gate)))
        acc = tr.accepted & has
        nu_n.append(tr.innovation[acc] / np.sqrt(tr.s[acc]))
    rho, bound = whiteness(np.concatenate(nu_n), max_lag)
    se = math.sqrt(float(np.mean(se2))) if se2 else 0.0
    checked = replace(noise, nis_se=se, nis_tau=max(tau))
    return nis_consistency(np.concatenate(nis), gate), rho, bound, checked


CENSORED_ROUNDS = 4
"""Grid rounds of the censored search, which starts from the pilot search's grid."""
Q_JERK_RANGE_S3 = (1e-9, 1.0)
"""Search range of q_jerk (s³); its low end is a fixed q to the eye."""
SLIP_SCALE_RANGE = (1e-3, 3.0)
"""Search range of slip_scale and drag_scale."""


def fit_axis(
    axis: str, series: Sequence[AxisInput], r_min: float, gate: float = NIS_GATE_99,
    max_frames: int = 3000, stamp_var: float = 0.0,
) -> AxisNoiseFit:
    """Fit q, q_jerk, slip_scale and drag_scale (with a slip model) and r (≥ ``r_min``, the
    quantization floor) of one axis in the three stages of docs/PODS.md § "Noise fit":
    shape on the first ``max_frames`` frames of each session, level
    (:func:`_gated_scale`), balance across drives (:func:`_moment_match`); ``stamp_var``
    (s², :func:`~sensorbench.fusion.frame_clock.stamp_variance`) is scaled with the rest.
    """
    data = [s.head(max_frames) for s in series]
    has_slip = all(s.slip is not None for s in data)
    has_drag = has_slip and all(s.drag is not None and np.any(s.drag > 0) for s in data)
    lo = np.log([1e-10, Q_JERK_RANGE_S3[0], SLIP_SCALE_RANGE[0], SLIP_SCALE_RANGE[0], r_min * 1e-4])
    hi = np.log([1e6, Q_JERK_RANGE_S3[1], SLIP_SCALE_RANGE[1], SLIP_SCALE_RANGE[1], r_min * 1e6])
    if not has_slip:
        lo[2] = hi[2] = 0.0
    if not has_drag:
        lo[3] = hi[3] = 0.0
    free = [True, True, has_slip, has_drag, True]

    def noise_at(x: np.ndarray) -> AxisNoise:
        q, q_jerk, scale, drag = (float(np.exp(x[i])) for i in range(4))
        r = float(r_min + np.exp(x[4]))
        return AxisNoise(q, r, q_jerk=q_jerk, slip_scale=scale,
                         drag_scale=drag if has_drag else None, stamp_var=stamp_var)

    pilot = zoom_search(data, lo, hi, free, r_min, stamp_var=stamp_var)
    pilot_noise = noise_at(pilot.centre)
    censor = [gate * run_axis(d, pilot_noise, math.inf).s for d in data]
    # the censored optimum lies a few grid steps away: restart from the pilot's grid,
    # widened to the step of its round ZOOM_ROUNDS − CENSORED_ROUNDS
    pilot.half *= 2.0 ** (ZOOM_ROUNDS - CENSORED_ROUNDS)
    best = zoom_search(data, lo, hi, free, r_min, censor, pilot, CENSORED_ROUNDS, stamp_var)
    noise = _moment_match(series, _gated_scale(series, noise_at(best.centre), gate), gate)
    nis, rho, rho_bound, checked = check_axis(series, noise, gate)
    return AxisNoiseFit(axis, checked, best.best, nis, rho, rho_bound)


def _clipped_mean(d: AxisInput, noise: AxisNoise, gate: float) -> tuple[float, int]:
    """Mean of the calibrated NIS clipped to the gate over one series, and its count."""
    v = run_axis(d, noise, gate).nis_chi2
    v = v[np.isfinite(v)]
    return float(np.mean(np.minimum(v, gate))) if v.size else math.nan, int(v.size)


SCALE_RANGE = (0.25, 4.0)
"""Range of the variance scale :func:`_gated_scale` solves for."""


def _gated_scale(data: Sequence[AxisInput], noise: AxisNoise, gate: float) -> AxisNoise:
    """``noise`` with every variance (q, q_jerk, r and the slip shares) multiplied by the
    λ at which the mean of the NIS clipped to the gate over ``data`` equals its
    clipped-χ²₁ expectation: Huber's "Proposal 2" scale (*Robust Statistics*, 1981, §6.4)
    with the gate as its clipping point."""
    from scipy.optimize import brentq

    target = clipped_chi2_moments(gate)[0]

    def scaled(lam: float) -> AxisNoise:
        drag = None if noise.drag_scale is None else noise.drag_scale * lam
        every = ("q", "r", "q_jerk", "slip_scale", "stamp_var")
        return replace(noise, drag_scale=drag, **{k: getattr(noise, k) * lam for k in every})

    def excess(log_lam: float) -> float:
        means = [_clipped_mean(d, scaled(math.exp(log_lam)), gate) for d in data]
        return float(np.average([m for m, _ in means], weights=[k for _, k in means])) - target

    lo, hi = (math.log(v) for v in SCALE_RANGE)
    if excess(lo) * excess(hi) > 0:
        return noise
    return scaled(math.exp(brentq(excess, lo, hi, xtol=1e-3)))


def _moment_match(series: Sequence[AxisInput], noise: AxisNoise, gate: float) -> AxisNoise:
    """``noise`` with slip_scale, drag_scale and q_jerk multiplied by the factors (within
    e^±2) that bring each session's clipped mean NIS nearest its expectation, in units
    of its standard error (least squares)."""
    from scipy.optimize import least_squares

    target, var = clipped_chi2_moments(gate)
    has_drag = noise.drag_scale is not None

    def at(x: np.ndarray) -> AxisNoise:
        m = np.exp(x)
        drag = noise.drag_scale * m[2] if noise.drag_scale is not None else None
        return replace(
            noise, slip_scale=noise.slip_scale * m[0], q_jerk=noise.q_jerk * m[1], drag_scale=drag
        )

    def resid(x: np.ndarray) -> np.ndarray:
        means = [_clipped_mean(d, at(x), gate) for d in series]
        return np.array([(m - target) * math.sqrt(k / var) for m, k in means])

    # the clipped mean moves in steps as innovations cross the gate: difference coarsely
    sol = least_squares(
        resid, np.zeros(3 if has_drag else 2), diff_step=0.05, bounds=(-2.0, 2.0), max_nfev=60
    )
    return at(sol.x)


@dataclass
class NoiseFit:
    """Fitted noise of the three axes."""

    axes: dict[str, AxisNoiseFit]
    labels: list[str]
    gate: float
    drift: DriftFit | None = None
    drift_note: str = ""
    reach: MotionReach | None = None

    @property
    def noise(self) -> FilterNoise:
        """The fitted noise as filter input (with the slip model when one was fitted and
        the sessions' reach)."""
        x, y, theta = (self.axes[a].noise for a in AXES)
        drift = None if self.drift is None else self.drift.drift
        return FilterNoise(x, y, theta, drift=drift, reach=self.reach)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "axes": {a: f.as_dict() for a, f in self.axes.items()},
            "sessions": self.labels,
            "gate": self.gate,
            "units": dict(NOISE_MODEL_UNITS),
            "drift": None if self.drift is None else self.drift.as_dict(),
            "drift_note": self.drift_note,
            "reach": None if self.reach is None else self.reach.values,
        }

    def model_report(self) -> dict[str, dict[str, Any]]:
        """The per-axis summary a model file's ``[report]`` keeps: :meth:`as_dict`'s axes
        without the autocorrelation and without the entries that are None (a law the fit
        did not use: TOML has no null)."""
        return {
            a: {k: v for k, v in f.as_dict().items() if k != "rho" and v is not None}
            for a, f in self.axes.items()
        }


def fit_noise(
    sessions: Sequence[str | os.PathLike[str]], geometry: PodGeometry, gate: float = NIS_GATE_99,
    max_frames: int = 3000, align_interval_s: float | None = None,
    drift_interval_s: float = DRIFT_INTERVAL_S,
) -> NoiseFit:
    """Fit q and r of the x, y and heading filters from replayed sessions, and, when every
    session has a reference (mocap), the odometry's slip model
    (:func:`~sensorbench.characterize.pods.drift_fit.fit_drift`). ``max_frames`` bounds the
    frames per session the likelihood search uses; ``align_interval_s`` (None: the
    shortest :func:`~sensorbench.fusion.pod_drive.align_interval_for`) and
    ``drift_interval_s`` are the alignment's and the drift fit's intervals (s).

    Raises:
        FitError: no sessions, or sessions too short or too still (< 50 frames, or < 50
            frames that move a pod, in all).
    """
    if not sessions:
        raise FitError("no sessions to fit the filter noise from")
    if align_interval_s is None:
        align_interval_s = min(align_interval_for(p) for p in sessions)
    drift, note = _fit_drift_if_referenced(sessions, geometry, align_interval_s, drift_interval_s)
    per_axis: dict[str, list[AxisInput]] = {a: [] for a in AXES}
    stamps, times, increments = [], [], []
    slip_model = geometry.slip_model() or (None if drift is None else drift.drift)
    for path in sessions:
        odo = read_odometry(path)
        stamps.append(stamp_variance(odo.t_s))
        times.append(odo.t_s)
        increments.append(inc := odo.increments(geometry)[0])
        for a, s in axis_measurements(np.diff(odo.t_s), inc, slip_model, geometry).items():
            per_axis[a].append(s)
    if (n := sum(i.shape[0] for i in increments)) < 50:
        raise FitError(f"only {n} encoder frames in all; record longer sessions")
    if (moved := sum(int(np.count_nonzero(np.any(i != 0, axis=1))) for i in increments)) < 50:
        raise FitError(f"only {moved} of {n} encoder frames moved a pod: the noise fit needs "
                       "drives that move (forward, sideways, spin, square)")
    floor = geometry.rounding_floor()
    stamp = float(np.median(stamps))
    fits = {a: fit_axis(a, per_axis[a], floor[a], gate, max_frames, stamp) for a in AXES}
    labels = [os.path.basename(str(p)) for p in sessions]
    return NoiseFit(fits, labels, gate, drift, note, MotionReach.of(times, increments))


def leave_one_out(
    sessions: Sequence[str | os.PathLike[str]], geometry: PodGeometry, gate: float = NIS_GATE_99,
    align_interval_s: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Per session, that session replayed against its mocap with the noise fitted on the
    others: truth inside the stated 2σ per axis, mean NEES, overconfident axes, and where
    its motion lies outside the other drives' reach.

    Raises:
        FitError: fewer than 3 sessions (each fit needs 2), or a session without mocap.
    """
    if len(sessions) < 3:
        raise FitError("leave-one-out needs >= 3 sessions: each fit takes the other ones")
    out = {}
    for i, held in enumerate(sessions):
        rest = [p for j, p in enumerate(sessions) if j != i]
        noise = fit_noise(rest, geometry, gate=gate, align_interval_s=align_interval_s).noise
        rp = replay_session(held, geometry, noise, gate=gate, align_interval_s=align_interval_s)
        if rp.consistency is None:
            raise FitError(f"{held}: no mocap to judge the held-out replay against")
        out[os.path.basename(str(held))] = {
            "in_2sigma": {a: c.coverage[1] for a, c in rp.consistency.items()},
            "mean_nees": {a: c.mean_nees for a, c in rp.consistency.items()},
            "overconfident": [a for a, c in rp.consistency.items() if c.overconfident],
            "outside_reach": rp.info["outside_reach"],
        }
    return out


def _fit_drift_if_referenced(
    sessions: Sequence[str | os.PathLike[str]], geometry: PodGeometry, align_interval_s: float,
    interval_s: float,
) -> tuple[DriftFit | None, str]:
    """The slip model when every session has a reference path, else None and why."""
    try:
        drives = [load_drive(p) for p in sessions]
        return fit_drift(drives, geometry, interval_s, align_interval_s), ""
    except FitError as exc:
        if isinstance(exc.__cause__, SessionError):  # a damaged reference, not a missing one
            raise
        return None, f"odometry drift not fitted ({exc}); the filters use the time-based default"
