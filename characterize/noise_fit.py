"""Fit the split filters' noise per axis from replayed sessions.

Per axis the filter (see :mod:`sensorbench.fusion.split_filter`) measures the
odometry position y_k = p_k + e_k of a velocity random walk whose intensity grows
with the odometry's observed acceleration (q + q_acc·â², unit²/s³), the position
also taking a slip random walk (slip_scale × the slip model's per-step variance when
one is fitted). The innovations follow a Student-t law with ``dof`` degrees of freedom
(∞ = Gaussian) and scale² S = Var p + r. The fit replays the axis filter and maximises
the likelihood of its innovations over (ln q, ln q_acc, ln slip_scale, ln(r − r_min))
for each dof of :data:`DOF_GRID` — zooming grids evaluated in one vectorised pass each —
summed over sessions, with r bounded below by the tick quantization. The likelihood is
scored without the gate (see :func:`fit_axis`) and skips frames at rest.

The fitted noise is then checked: the NIS calibrated to χ²₁ through the fitted law
(:func:`~sensorbench.fusion.consistency.calibrated_nis`) of every update while moving,
its mean against the 95 % band over the effective number of updates, rejections
against twice the gate's nominal rate
(:class:`~sensorbench.fusion.consistency.NisConsistency`), and the innovation
autocorrelation ρ_1..ρ_10 against ±1.96/√K.

Measurements: heading z = Δθ of ``W⁻¹·Δn``; x and y the world-frame
displacement of the step's constant-twist arc, rotated by the dead-reckoned
heading (the heading filter's estimate differs from it only by the few frames it
rejects).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sensorbench.characterize.drift_fit import INTERVAL_S as DRIFT_INTERVAL_S
from sensorbench.characterize.drift_fit import DriftFit, fit_drift
from sensorbench.errors import FitError
from sensorbench.fusion.consistency import NisConsistency, nis_consistency, t_equivalent_gate
from sensorbench.fusion.odometry_drift import SlipModel
from sensorbench.fusion.odometry_replay import read_odometry
from sensorbench.fusion.pod_drive import load_drive
from sensorbench.fusion.pod_kinematics import PodGeometry, integrate_path, se2_exp
from sensorbench.fusion.split_filter import (
    AXES,
    NIS_GATE_99,
    AxisNoise,
    FilterNoise,
    observed_accel_sq,
    rounding_floor,
    rounding_shift,
    run_axis,
    whiteness,
)


@dataclass
class AxisSeries:
    """Measurements of one axis over one session: step durations (s), increments, and the
    slip variance each step adds to the odometry position (unit², None = no slip model)."""

    dt: np.ndarray
    z: np.ndarray
    slip: np.ndarray | None = None
    rest: np.ndarray | None = None
    r_shift: np.ndarray | None = None

    def head(self, n: int) -> AxisSeries:
        """The first ``n`` steps."""
        return AxisSeries(
            self.dt[:n],
            self.z[:n],
            None if self.slip is None else self.slip[:n],
            None if self.rest is None else self.rest[:n],
            None if self.r_shift is None else self.r_shift[:n],
        )


def axis_measurements(
    dt: np.ndarray,
    increments: np.ndarray,
    drift: SlipModel | None = None,
    W: np.ndarray | None = None,
) -> dict[str, AxisSeries]:
    """The per-axis filter measurements of one session's body increments (K, 3), with the
    per-step slip variances of ``drift`` and the heading's rounding shift of r for the pod
    matrix ``W`` when given (:func:`~sensorbench.fusion.split_filter.rounding_shift`)."""
    path = integrate_path(increments)
    rel = se2_exp(increments)
    c, s = np.cos(path[:-1, 2]), np.sin(path[:-1, 2])
    slip = (
        dict.fromkeys(AXES)
        if drift is None
        else drift.axis_step_variances(increments, path[:-1, 2])
    )
    rest = np.all(increments == 0, axis=1)
    shift = dict.fromkeys(AXES) if W is None else rounding_shift(W, path[:-1, 2])
    return {
        "x": AxisSeries(dt, c * rel[:, 0] - s * rel[:, 1], slip["x"], rest, shift["x"]),
        "y": AxisSeries(dt, s * rel[:, 0] + c * rel[:, 1], slip["y"], rest, shift["y"]),
        "theta": AxisSeries(dt, increments[:, 2], slip["theta"], rest, shift["theta"]),
    }


DOF_GRID = (3.0, 4.0, 6.0, 10.0, math.inf)
"""Student-t degrees of freedom the fit chooses from (∞: Gaussian)."""


def batch_nll(
    series: AxisSeries,
    q: np.ndarray,
    r: np.ndarray,
    dof: np.ndarray,
    gate: float,
    q_acc: np.ndarray | float = 0.0,
    slip_scale: np.ndarray | float = 1.0,
    max_rejects: int = 8,
    var_v0: float = 1.0,
) -> np.ndarray:
    """Negative log-likelihood of one series for many (q, r, dof, q_acc) at once.

    Runs the axis filter of :func:`~sensorbench.fusion.split_filter.run_axis`
    (same prediction, gate on the calibrated NIS, clipped odometry on rejection and
    streak recovery) vectorised over the
    parameter triples, one numpy step per frame. Each innovation ν is scored under the
    Student-t law with ``dof`` degrees of freedom and scale² S = Var p + r:
    ``log Γ((d+1)/2) − log Γ(d/2) − ½ log(dπS) − (d+1)/2 · log(1 + ν²/(dS))``.
    """
    from scipy.special import gammaln

    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    d = np.asarray(dof, dtype=float)
    n = q.size
    p = np.zeros(n)
    v = np.zeros(n)
    odo = np.zeros(n)
    ppp = np.zeros(n)
    ppv = np.zeros(n)
    pvv = np.full(n, var_v0)
    streak = np.zeros(n, dtype=np.int64)
    odo_streak = np.zeros(n)
    z_streak = np.zeros(n)
    total = np.zeros(n)
    gauss = ~np.isfinite(d)
    df = np.where(gauss, 1.0, d)
    const = np.where(
        gauss,
        -0.5 * math.log(2 * math.pi),
        gammaln((df + 1) / 2) - gammaln(df / 2) - 0.5 * np.log(df * np.pi),
    )
    gate_nis = np.array([t_equivalent_gate(gate, float(x)) for x in d])
    qa = np.broadcast_to(np.asarray(q_acc, dtype=float), q.shape)
    a2 = observed_accel_sq(series.dt, series.z).tolist()
    slip = (np.zeros(series.dt.size) if series.slip is None else series.slip).tolist()
    sc = np.broadcast_to(np.asarray(slip_scale, dtype=float), q.shape)
    scored = (np.ones(series.dt.size, bool) if series.rest is None else ~series.rest).tolist()
    shift = (np.zeros(series.dt.size) if series.r_shift is None else series.r_shift).tolist()
    steps = zip(series.dt.tolist(), series.z.tolist(), a2, slip, scored, shift, strict=True)
    for h, zk, a2k, sk, score, rs in steps:
        qh = (q + qa * a2k) * h
        p_prev = p
        pvv_n = pvv + qh
        ppv_n = ppv + h * pvv_n
        ppp = ppp + 2.0 * h * ppv + h * h * pvv + qh * h * h + sc * sk
        ppv, pvv = ppv_n, pvv_n
        p = p + v * h
        if zk != zk:  # nan: predict only
            odo = odo + (p - p_prev)
            continue
        rk = r + rs
        s = ppp + rk
        nu = odo + zk - p
        nis = nu * nu / s
        if score:  # a frame at rest tests nothing (its rounding error is not fresh)
            tail = np.where(gauss, 0.5 * nis, (df + 1) / 2 * np.log1p(nis / df))
            total -= const - 0.5 * np.log(s) - tail
        force = streak >= max_rejects
        ok = (nis <= gate_nis) | force
        # forced: restore the streak's odometry and reset the velocity variance
        odo = np.where(force, odo_streak + z_streak, odo)
        nu = np.where(force, odo + zk - p, nu)
        pvv = np.where(force, np.maximum(pvv, var_v0), pvv)
        s = ppp + rk
        kp = ppp / s
        kv = ppv / s
        upd_p = p + kp * nu
        upd_v = v + kv * nu
        new_pvv = pvv - kv * ppv
        new_ppv = ppv - kv * ppp
        new_ppp = ppp - kp * ppp
        bound = np.sqrt(gate_nis * (ppp + rk))
        start = ~ok & (streak == 0)
        odo_streak = np.where(start, odo, odo_streak)
        z_streak = np.where(start, 0.0, z_streak) + np.where(ok, 0.0, zk)
        odo = np.where(ok, odo + zk, p + np.where(nu > 0, bound, -bound))
        p = np.where(ok, upd_p, p)
        v = np.where(ok, upd_v, v)
        pvv = np.where(ok, new_pvv, pvv)
        ppv = np.where(ok, new_ppv, ppv)
        ppp = np.where(ok, new_ppp, ppp)
        streak = np.where(ok, 0, streak + 1)
    return total


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

    @property
    def q(self) -> float:
        """Velocity random walk at rest (unit²/s³)."""
        return self.noise.q

    @property
    def r(self) -> float:
        """Odometry-position variance (unit²)."""
        return self.noise.r

    @property
    def dof(self) -> float:
        """Student-t degrees of freedom (∞: Gaussian)."""
        return self.noise.dof

    @property
    def nis_ok(self) -> bool:
        """Mean calibrated NIS inside its band and rejections ≤ 2× the gate's nominal rate."""
        return self.nis.consistent

    @property
    def white(self) -> bool:
        """Every ρ_k inside ±1.96/√K (expect 1 in 20 lags outside by chance)."""
        return bool(np.all(np.abs(self.rho) <= self.rho_bound))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (``nis_mean``/``nis_bounds_95``: the calibrated NIS)."""
        return {
            "q": self.q,
            "r": self.r,
            "dof": self.dof,
            "q_acc": self.noise.q_acc,
            "slip_scale": self.noise.slip_scale,
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
            "white": self.white,
            "lags_outside": int(np.count_nonzero(np.abs(self.rho) > self.rho_bound)),
        }


def check_axis(
    series: Sequence[AxisSeries], noise: AxisNoise, gate: float = NIS_GATE_99, max_lag: int = 10
) -> tuple[NisConsistency, np.ndarray, float]:
    """Calibrated-NIS consistency over all sessions, innovation autocorrelation and its bound."""
    nis, sign, nu_n = [], [], []
    for s in series:
        tr = run_axis(
            s.dt, s.z, noise, gate=gate, slip_var=s.slip, rest=s.rest, r_shift=s.r_shift
        )
        has = np.isfinite(tr.nis_chi2)
        nis.append(tr.nis_chi2[has])
        sign.append(tr.innovation[has])
        acc = tr.accepted & has
        nu_n.append(tr.innovation[acc] / np.sqrt(tr.s[acc]))
    rho, bound = whiteness(np.concatenate(nu_n), max_lag)
    return nis_consistency(np.concatenate(nis), np.concatenate(sign), gate), rho, bound


ZOOM_ROUNDS = 8
"""Grid rounds of :func:`fit_axis` (each after the first halves the step)."""
Q_ACC_RANGE_S = (1e-7, 1.0)
"""Search range of q_acc (s); its low end is a fixed q to the eye."""
SLIP_SCALE_RANGE = (1e-3, 3.0)
"""Search range of slip_scale."""


def fit_axis(
    axis: str,
    series: Sequence[AxisSeries],
    r_min: float,
    gate: float = NIS_GATE_99,
    max_frames: int = 3000,
) -> AxisNoiseFit:
    """Maximum-likelihood q, q_acc, slip_scale (with a slip model), r (≥ ``r_min``, the
    quantization floor) and Student-t degrees of freedom (from :data:`DOF_GRID`) of one
    axis.

    r is parametrised as r_min + e^ρ: without the floor the likelihood is
    unbounded (perfectly quantized zero increments at rest would drive r to 0).
    The search evaluates whole grids of (ln q, ln q_acc, ln slip_scale, ρ) at once for
    every dof, zooming (7×5×5×7 over the whole range, then 3⁴ grids spanning half a step
    of the previous grid either side of its best point, :data:`ZOOM_ROUNDS` in all: a
    final step of 1/128 of the first, 2–5 % in each parameter), on the first
    ``max_frames`` frames of each session (cost). The likelihood is scored without the
    gate: rejecting 1 % of good innovations and clipping the odometry distorts the
    innovations that follow, which made a t law beat the Gaussian on Gaussian data. The
    consistency and whiteness checks use every frame and the gate.
    """
    data = [s.head(max_frames) for s in series]
    has_slip = all(s.slip is not None for s in data)
    lo = np.log([1e-10, Q_ACC_RANGE_S[0], SLIP_SCALE_RANGE[0], r_min * 1e-4])
    hi = np.log([1e6, Q_ACC_RANGE_S[1], SLIP_SCALE_RANGE[1], r_min * 1e6])
    if not has_slip:
        lo[2] = hi[2] = 0.0
    dofs = np.asarray(DOF_GRID)
    n_dof = dofs.size

    def total(x: np.ndarray, d: np.ndarray) -> np.ndarray:
        q, qa, sc, r = np.exp(x[:, 0]), np.exp(x[:, 1]), np.exp(x[:, 2]), r_min + np.exp(x[:, 3])
        return sum(batch_nll(s, q, r, d, math.inf, q_acc=qa, slip_scale=sc) for s in data)

    centre = np.tile((lo + hi) / 2, (n_dof, 1))
    half = np.tile((hi - lo) / 2, (n_dof, 1))
    shape = [7, 5, 5 if has_slip else 1, 7]
    best = np.full(n_dof, math.inf)
    for _ in range(ZOOM_ROUNDS):
        grids = []
        for j in range(n_dof):
            axes = [
                np.linspace(centre[j, i] - half[j, i], centre[j, i] + half[j, i], shape[i])
                if shape[i] > 1
                else np.array([centre[j, i]])
                for i in range(4)
            ]
            mesh = np.meshgrid(*axes, indexing="ij")
            grids.append(np.clip(np.column_stack([m.ravel() for m in mesh]), lo, hi))
            # zoom: the next grid spans half a step of this one either side of the best
            half[j] = [(ax[1] - ax[0]) / 2 if ax.size > 1 else 0.0 for ax in axes]
        vals = total(np.concatenate(grids), np.repeat(dofs, grids[0].shape[0])).reshape(n_dof, -1)
        for j in range(n_dof):
            i = int(np.nanargmin(vals[j]))
            centre[j], best[j] = grids[j][i], vals[j, i]
        shape = [3, 3, 3 if has_slip else 1, 3]
    j = int(np.argmin(best))
    q, q_acc, scale = (float(np.exp(centre[j, i])) for i in range(3))
    r = float(r_min + np.exp(centre[j, 3]))
    noise = AxisNoise(q, r, float(dofs[j]), q_acc, scale)
    nis, rho, bound = check_axis(series, noise, gate)
    return AxisNoiseFit(axis, noise, float(best[j]), nis, rho, bound)


@dataclass
class NoiseFit:
    """Fitted noise of the three axes."""

    axes: dict[str, AxisNoiseFit]
    labels: list[str]
    gate: float
    drift: DriftFit | None = None
    drift_note: str = ""

    @property
    def noise(self) -> FilterNoise:
        """The fitted noise as filter input (with the slip model when one was fitted)."""
        x, y, theta = (self.axes[a].noise for a in AXES)
        return FilterNoise(x, y, theta, drift=None if self.drift is None else self.drift.drift)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "axes": {a: f.as_dict() for a, f in self.axes.items()},
            "sessions": self.labels,
            "gate": self.gate,
            "units": {"q_xy": "m^2/s^3", "q_theta": "rad^2/s^3", "r_xy": "m^2", "r_theta": "rad^2"},
            "drift": None if self.drift is None else self.drift.as_dict(),
            "drift_note": self.drift_note,
        }


def fit_noise(
    sessions: Sequence[str | os.PathLike[str]],
    geometry: PodGeometry,
    gate: float = NIS_GATE_99,
    max_frames: int = 3000,
    align_interval_s: float = 0.5,
    drift_interval_s: float = DRIFT_INTERVAL_S,
) -> NoiseFit:
    """Fit q and r of the x, y and heading filters from replayed sessions, and, when every
    session has a reference (mocap), the odometry's slip model
    (:func:`~sensorbench.characterize.drift_fit.fit_drift`).

    ``max_frames`` bounds the frames per session the likelihood search uses;
    ``align_interval_s`` and ``drift_interval_s`` are the encoder/reference alignment
    interval and the drift fit's interval (s; a session emulated at N× real time needs
    them divided by N).

    Raises:
        FitError: no sessions, or sessions too short (< 50 frames in all).
    """
    if not sessions:
        raise FitError("no sessions to fit the filter noise from")
    drift, note = _fit_drift_if_referenced(sessions, geometry, align_interval_s, drift_interval_s)
    per_axis: dict[str, list[AxisSeries]] = {a: [] for a in AXES}
    n = 0
    for path in sessions:
        odo = read_odometry(path)
        inc = odo.increments(geometry)
        slip_model = geometry.slip_model() or (None if drift is None else drift.drift)
        for a, s in axis_measurements(np.diff(odo.t_s), inc, slip_model, geometry.W).items():
            per_axis[a].append(s)
        n += inc.shape[0]
    if n < 50:
        raise FitError(f"only {n} encoder frames in all; record longer sessions")
    floor = rounding_floor(geometry.W)
    fits = {a: fit_axis(a, per_axis[a], floor[a], gate, max_frames) for a in AXES}
    return NoiseFit(fits, [os.path.basename(str(p)) for p in sessions], gate, drift, note)


def _fit_drift_if_referenced(
    sessions: Sequence[str | os.PathLike[str]],
    geometry: PodGeometry,
    align_interval_s: float,
    interval_s: float,
) -> tuple[DriftFit | None, str]:
    """The slip model when every session has a reference path, else None and why."""
    try:
        drives = [load_drive(p) for p in sessions]
        return fit_drift(drives, geometry, interval_s, align_interval_s), ""
    except FitError as exc:
        return None, f"odometry drift not fitted ({exc}); the filters use the time-based default"
