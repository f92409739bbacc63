"""The scalar pieces both pod filters are built from: predict, update, gate clip, reset.

A (position, velocity) axis keeps its 2×2 symmetric covariance as three scalars
(``ppp`` = Var p, ``ppv`` = Cov(p, v), ``pvv`` = Var v). The model (units of the axis:
m or rad, s):

    F = [[1, h], [0, 1]],   Q = q·h·[[h², h], [h, 1]]   (velocity random walk, q unit²/s³)
    H = [1, 0],             R = r                         (a position measurement, unit²)

:func:`predict_pv` is ``x ← F x, P ← F P Fᵀ + Q`` and :func:`update_p` the Kalman
update with a scalar position innovation, written out so no matrix is formed
(tests compare them with the matrix form); compiled (numba) so the split filters' frame
loop (:mod:`~sensorbench.fusion.axis_loop`) calls them natively. :class:`RejectStreak` is the
rejection bookkeeping the joint filter keeps (the split filters' loop keeps the same
three numbers inline): a rejected measurement is never applied, and after ``max_rejects``
consecutive rejections the model, not the data, is taken to be wrong and the odometry
the streak replaced is restored.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

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


def clip_to_gate(nu: Any, s: Any, gate: float) -> Any:
    """The innovation limited to the gate's bound ±√(gate·s) (scalar or elementwise)."""
    bound = np.sqrt(gate * s) if isinstance(s, np.ndarray) else math.sqrt(gate * s)
    return np.clip(nu, -bound, bound) if isinstance(nu, np.ndarray) else max(-bound, min(nu, bound))


class RejectStreak:
    """Consecutive rejected measurements and the odometry they replaced.

    ``anchor`` is the odometry (a float or an array) before the streak's first rejection;
    ``raw`` the sum of the raw odometry steps the streak did not apply.
    """

    def __init__(self, max_rejects: int) -> None:
        self.max_rejects = int(max_rejects)
        self.count = 0
        self.anchor: Any = 0.0
        self.raw: Any = 0.0

    @property
    def forced(self) -> bool:
        """True when the next measurement must be applied whatever its NIS."""
        return self.count >= self.max_rejects

    def reject(self, odometry: Any, raw_step: Any) -> None:
        """Record a rejected step taken from ``odometry`` with raw increment ``raw_step``."""
        if self.count == 0:
            self.anchor, self.raw = odometry, 0.0 * raw_step
        self.count += 1
        self.raw = self.raw + raw_step

    def restored(self) -> Any:
        """The odometry as if the streak's steps had been applied."""
        return self.anchor + self.raw

    def accept(self) -> None:
        """A measurement was applied: the streak ends."""
        self.count = 0
