"""The split filters' censored Gaussian likelihood for many noise parameter sets at once
(:func:`batch_nll`), and its search by zooming grids over (ln q, ln q_jerk, ln slip_scale,
ln drag_scale, ln(r − r_min)) (:func:`zoom_search`; docs/PODS.md § "Noise fit").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sensorbench.fusion.axis_loop import NllSeries, nll_sets
from sensorbench.fusion.odometry_motion import (
    jerk_noise_gains,
    observed_accel,
    observed_jerk,
    observed_speed_sq,
)

if TYPE_CHECKING:
    from sensorbench.fusion.axis_step import AxisInput


def batch_nll(
    series: AxisInput, q: np.ndarray, r: np.ndarray, gate: float = math.inf,
    q_jerk: np.ndarray | float = 0.0, slip_scale: np.ndarray | float = 1.0,
    drag_scale: np.ndarray | float = 1.0, censor: np.ndarray | None = None, stamp_var: float = 0.0,
) -> np.ndarray:
    """Negative log-likelihood of one series for many (q, r, q_jerk, slip_scale,
    drag_scale) at once (arrays of one length, or scalars): the compiled axis loop of
    :func:`~sensorbench.fusion.axis_step.run_axis` once per set
    (:func:`~sensorbench.fusion.axis_loop.nll_sets`).

    Args:
        series: one session's measurements of the axis.
        q, r: velocity random walk (unit²/s³) and rounding level (unit²) of each set.
        gate: NIS gate of the filter run (∞: every update applied).
        q_jerk: growth of q with the squared jerk (s³).
        slip_scale, drag_scale: shares of the series' rolling and dragging slip.
        censor: (K,) squared bound (unit²) beyond which an innovation only counts as
            exceeding it; None = none.
        stamp_var: the frame times' error variance (s²,
            :attr:`~sensorbench.fusion.filter_noise.AxisNoise.stamp_var`), the same for
            every set.
    """
    arrays = (np.asarray(a, dtype=float) for a in (q, r, q_jerk, slip_scale, drag_scale))
    params = np.column_stack(np.broadcast_arrays(*arrays))
    k_n = series.dt.size
    zeros = np.zeros(k_n)
    slip = zeros if series.slip is None else np.asarray(series.slip, dtype=float)
    drag = zeros if series.drag is None else np.asarray(series.drag, dtype=float)
    prof = np.ones(k_n) if series.r_profile is None else np.asarray(series.r_profile, float)
    stamp = stamp_var * observed_speed_sq(series.dt, series.z) if stamp_var > 0 else zeros
    # the jerk's noise per unit of r, of slip_scale and of drag_scale (it is linear in
    # each), and the stamps' whole
    per = ((prof, zeros), (zeros, slip), (zeros, drag), (stamp, zeros))
    gains = np.vstack([jerk_noise_gains(series.dt, *rounding_slip) for rounding_slip in per])
    data = NllSeries(
        dt=np.ascontiguousarray(series.dt, dtype=float),
        z=np.ascontiguousarray(series.z, dtype=float),
        u=observed_accel(series.dt, series.z), jerk=observed_jerk(series.dt, series.z),
        jerk_gains=gains, slip=np.ascontiguousarray(slip), drag=np.ascontiguousarray(drag),
        profile=np.ascontiguousarray(prof), stamp=np.ascontiguousarray(stamp, dtype=float),
        scored=np.ones(k_n, dtype=bool) if series.rest is None else ~np.asarray(series.rest, bool),
        censor=np.full(k_n, np.inf) if censor is None else np.ascontiguousarray(censor, float),
    )
    return nll_sets(data, np.ascontiguousarray(params), float(gate))


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
    data: Sequence[AxisInput], lo: np.ndarray, hi: np.ndarray, free: Sequence[bool], r_min: float,
    censor: Sequence[np.ndarray] | None = None, start: Search | None = None,
    rounds: int = ZOOM_ROUNDS, stamp_var: float = 0.0,
) -> Search:
    """Minimise the summed :func:`batch_nll` over (ln q, ln q_jerk, ln slip_scale,
    ln drag_scale, ln(r − r_min)) within ``[lo, hi]`` (parameters not ``free`` stay at
    their centre): 5 points per free parameter over the whole range, or 3 around
    ``start``; each later round spans half a step of the previous grid either side of its
    best point. ``stamp_var`` (s²) is the frame times' error variance, fixed."""
    cens: list[np.ndarray | None] = [None] * len(data) if censor is None else list(censor)

    def total(x: np.ndarray) -> np.ndarray:
        q, qj, sc, dc = (np.exp(x[:, i]) for i in range(4))
        r = r_min + np.exp(x[:, 4])
        out = np.zeros(x.shape[0])
        for s, c in zip(data, cens, strict=True):
            out += batch_nll(
                s, q, r, q_jerk=qj, slip_scale=sc, drag_scale=dc, censor=c, stamp_var=stamp_var
            )
        return out

    st = Search((lo + hi) / 2, (hi - lo) / 2, math.inf)
    if start is not None:
        st = Search(start.centre.copy(), start.half.copy(), math.inf)
    shape = [(5 if start is None else 3) if f else 1 for f in free]
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
