"""The scalar pieces both pod filters are built from: predict and update.

A (position, velocity) axis keeps its 2×2 symmetric covariance as three scalars
(``ppp`` = Var p, ``ppv`` = Cov(p, v), ``pvv`` = Var v). The model (units of the axis:
m or rad, s):

    F = [[1, h], [0, 1]],   Q = q·h·[[h², h], [h, 1]]   (velocity random walk, q unit²/s³)
    H = [1, 0],             R = r                         (a position measurement, unit²)

:func:`predict_pv` is ``x ← F x, P ← F P Fᵀ + Q`` and :func:`update_p` the Kalman
update with a scalar position innovation, written out so no matrix is formed
(tests compare them with the matrix form); compiled (numba) so the split filters' frame
loop (:mod:`~sensorbench.fusion.axis_loop`) calls them natively.
"""

from __future__ import annotations

import numba

Cov2 = tuple[float, float, float, float, float]
"""(p, v, Var p, Cov(p, v), Var v) of one axis."""


@numba.njit(cache=True)
def predict_pv(
    p: float, v: float, ppp: float, ppv: float, pvv: float, q: float, h: float, u: float = 0.0
) -> Cov2:
    """Propagate one axis ``h`` seconds under the velocity random walk ``q``, with a known
    acceleration ``u`` (unit/s², a control input: it moves the mean, not the covariance)."""
    qh = q * h
    pvv_n = pvv + qh
    return (
        p + v * h + 0.5 * u * h * h,
        v + u * h,
        ppp + 2.0 * h * ppv + h * h * pvv + qh * h * h,
        ppv + h * pvv_n,
        pvv_n,
    )


@numba.njit(cache=True)
def update_p(p: float, v: float, ppp: float, ppv: float, pvv: float, nu: float, s: float) -> Cov2:
    """Kalman update with a position innovation ``nu`` (unit) of variance ``s`` = Var p + r
    (unit²), H = [1, 0]: the gain is ``(Var p, Cov(p, v))/s``; returns the state and its
    covariance."""
    kp = ppp / s
    kv = ppv / s
    return (
        p + kp * nu,
        v + kv * nu,
        ppp - kp * kp * s,
        ppv - kp * kv * s,
        pvv - kv * kv * s,
    )
