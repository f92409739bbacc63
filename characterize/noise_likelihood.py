"""The split filters' likelihood for many noise parameter sets at once, and its search.

:func:`batch_nll` runs one axis filter (:func:`~sensorbench.fusion.split_filter.run_axis`:
the same prediction with the observed acceleration fed forward and q grown with the
observed jerk, the same slip random walk and Schmidt rounding correlation, the same gate
and streak recovery) vectorised over parameter sets, one numpy step per frame, and scores
each innovation under a Gaussian law with S = Var p + 2·Cov(p̃, e) + r. Innovations
beyond a fixed bound per frame may be *censored*: only that they exceeded it counts
(log P(|ν| > c)), so a wheel's bounce or a rounding jump bounds its pull on the fit
instead of inflating every variance to cover it. :func:`zoom_search` maximises the
likelihood over (ln q, ln q_jerk, ln slip_scale, ln drag_scale, ln(r − r_min)) by
zooming grids.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sensorbench.fusion.odometry_motion import jerk_noise_gains, observed_accel, observed_jerk

if TYPE_CHECKING:
    from sensorbench.characterize.noise_fit import AxisSeries

LN2 = math.log(2.0)


def batch_nll(
    series: AxisSeries,
    q: np.ndarray,
    r: np.ndarray,
    gate: float = math.inf,
    q_jerk: np.ndarray | float = 0.0,
    slip_scale: np.ndarray | float = 1.0,
    drag_scale: np.ndarray | float = 1.0,
    censor: np.ndarray | None = None,
    max_rejects: int = 8,
    var_v0: float = 1.0,
) -> np.ndarray:
    """Negative log-likelihood of one series for many (q, r, q_jerk, slip_scale,
    drag_scale) at once (arrays of one length, or scalars).

    Args:
        series: one session's measurements of the axis.
        q, r: velocity random walk (unit²/s³) and rounding level (unit²) of each set.
        gate: NIS gate of the filter run (∞: every update applied).
        q_jerk: growth of q with the squared jerk (s³).
        slip_scale, drag_scale: shares of the series' rolling and dragging slip.
        censor: (K,) squared bound (unit²) beyond which an innovation only counts as
            exceeding it; None = none.
        max_rejects, var_v0: as :func:`~sensorbench.fusion.split_filter.run_axis`.
    """
    q = np.asarray(q, dtype=float)
    r = np.asarray(r, dtype=float)
    n = q.size
    k_n = series.dt.size
    qj = np.broadcast_to(np.asarray(q_jerk, dtype=float), q.shape)
    sc = np.broadcast_to(np.asarray(slip_scale, dtype=float), q.shape)
    dc = np.broadcast_to(np.asarray(drag_scale, dtype=float), q.shape)
    zeros = np.zeros(k_n)
    slip_a = zeros if series.slip is None else series.slip
    drag_a = zeros if series.drag is None else series.drag
    prof = np.ones(k_n) if series.r_profile is None else series.r_profile
    # the jerk's noise per unit of r, of slip_scale and of drag_scale (it is linear in each)
    columns = (
        series.dt,
        series.z,
        observed_jerk(series.dt, series.z),
        observed_accel(series.dt, series.z),
        jerk_noise_gains(series.dt, prof, zeros),
        jerk_noise_gains(series.dt, zeros, slip_a),
        jerk_noise_gains(series.dt, zeros, drag_a),
        slip_a,
        drag_a,
        np.ones(k_n, bool) if series.rest is None else ~series.rest,
        prof,
        np.full(k_n, np.inf) if censor is None else np.asarray(censor, dtype=float),
        zeros if series.r_corr is None else series.r_corr,
    )
    p = np.zeros(n)
    v = np.zeros(n)
    odo = np.zeros(n)
    ppp = np.zeros(n)
    ppv = np.zeros(n)
    pvv = np.full(n, var_v0)
    cp = np.zeros(n)
    cv = np.zeros(n)
    streak = np.zeros(n, dtype=np.int64)
    odo_streak = np.zeros(n)
    z_streak = np.zeros(n)
    total = np.zeros(n)
    const = -0.5 * math.log(2 * math.pi)
    for h, zk, jk, uk, gr, gs, gd, sk, dk, score, prof_k, c2, rho in zip(
        *(c.tolist() for c in columns), strict=True
    ):
        j2 = np.maximum(jk * jk - (r * gr + sc * gs + dc * gd), 0.0)
        qh = (q + qj * j2) * h
        p_prev = p
        pvv_n = pvv + qh
        ppv_n = ppv + h * pvv_n
        ppp = ppp + 2.0 * h * ppv + h * h * pvv + qh * h * h + sc * sk + dc * dk
        ppv, pvv = ppv_n, pvv_n
        p = p + v * h + 0.5 * uk * h * h
        v = v + uk * h
        cp, cv = rho * (cp + h * cv), rho * cv
        if zk != zk:  # nan: predict only
            odo = odo + (p - p_prev)
            continue
        rk = r * prof_k
        s = ppp + 2.0 * cp + rk
        nu = odo + zk - p
        nis = nu * nu / s
        if score:  # a frame at rest tests nothing (its rounding error is not fresh)
            logpdf = const - 0.5 * np.log(s) - 0.5 * nis
            over = nu * nu > c2
            if over.any():
                from scipy.special import log_ndtr

                logpdf = np.where(over, LN2 + log_ndtr(-np.sqrt(c2 / s)), logpdf)
            total -= logpdf
        force = streak >= max_rejects
        ok = (nis <= gate) | force
        # forced: restore the streak's odometry and reset the velocity variance
        odo = np.where(force, odo_streak + z_streak, odo)
        nu = np.where(force, odo + zk - p, nu)
        pvv = np.where(force, np.maximum(pvv, var_v0), pvv)
        # the Schmidt update of update_p_correlated, elementwise
        kp = (ppp + cp) / s
        kv = (ppv + cv) / s
        upd = (
            p + kp * nu,
            v + kv * nu,
            ppp - kp * kp * s,
            ppv - kp * kv * s,
            pvv - kv * kv * s,
            cp - kp * (cp + rk),
            cv - kv * (cp + rk),
        )
        bound = np.sqrt(gate * s)
        start = ~ok & (streak == 0)
        odo_streak = np.where(start, odo, odo_streak)
        z_streak = np.where(start, 0.0, z_streak) + np.where(ok, 0.0, zk)
        odo = np.where(ok, odo + zk, p + np.where(nu > 0, bound, -bound))
        p, v, ppp, ppv, pvv, cp, cv = (
            np.where(ok, new, old)
            for new, old in zip(upd, (p, v, ppp, ppv, pvv, cp, cv), strict=True)
        )
        streak = np.where(ok, 0, streak + 1)
    return total


ZOOM_ROUNDS = 8
"""Grid rounds of :func:`zoom_search` from the whole range (each after the first halves
the step)."""


@dataclass
class Search:
    """A zooming grid search's state: the grid's centre and half-width (in the search
    parameters) and the best negative log-likelihood so far."""

    centre: np.ndarray
    half: np.ndarray
    best: float


def zoom_search(
    data: Sequence[AxisSeries],
    lo: np.ndarray,
    hi: np.ndarray,
    free: Sequence[bool],
    r_min: float,
    censor: Sequence[np.ndarray] | None = None,
    start: Search | None = None,
    rounds: int = ZOOM_ROUNDS,
) -> Search:
    """Minimise the summed :func:`batch_nll` over (ln q, ln q_jerk, ln slip_scale,
    ln drag_scale, ln(r − r_min)) within ``[lo, hi]`` (parameters not ``free`` stay at
    their centre): 5 points per free parameter over the whole range, or 3 around
    ``start``; each later round spans half a step of the previous grid either side of its
    best point."""
    cens: list[np.ndarray | None] = [None] * len(data) if censor is None else list(censor)

    def total(x: np.ndarray) -> np.ndarray:
        q, qj, sc, dc = (np.exp(x[:, i]) for i in range(4))
        r = r_min + np.exp(x[:, 4])
        out = np.zeros(x.shape[0])
        for s, c in zip(data, cens, strict=True):
            out += batch_nll(s, q, r, q_jerk=qj, slip_scale=sc, drag_scale=dc, censor=c)
        return out

    if start is None:
        st = Search((lo + hi) / 2, (hi - lo) / 2, math.inf)
        shape = [5 if f else 1 for f in free]
    else:
        st = Search(start.centre.copy(), start.half.copy(), math.inf)
        shape = [3 if f else 1 for f in free]
    for _ in range(rounds):
        axes = [
            np.linspace(st.centre[i] - st.half[i], st.centre[i] + st.half[i], n)
            if n > 1
            else np.array([st.centre[i]])
            for i, n in enumerate(shape)
        ]
        mesh = np.meshgrid(*axes, indexing="ij")
        grid = np.clip(np.column_stack([m.ravel() for m in mesh]), lo, hi)
        st.half = np.array([(ax[1] - ax[0]) / 2 if ax.size > 1 else 0.0 for ax in axes])
        vals = total(grid)
        i = int(np.nanargmin(vals))
        st.centre, st.best = grid[i], float(vals[i])
        shape = [3 if f else 1 for f in free]
    return st
