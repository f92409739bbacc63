"""The error model's whitening filter: the 2-state Kalman filter of one axis turns a series
into innovations ``nu_k / sqrt(S_k)``, independent N(0, 1) under the model. The gains
depend only on parameters and times: one pass whitens any number of columns."""

from __future__ import annotations

import math

import numba
import numpy as np

DIFFUSE_SCALE = 1e6
"""Prior variance of an unknown offset, in units of the error's variance at a reset
(sigma_b² + sigma² + sigma_v²): large enough that the offset is the data's, small
enough that the update keeps ten digits."""


def filter_gains(
    dt: np.ndarray, reset: np.ndarray, params: np.ndarray, diffuse: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per sample and axis: ``(phi, k_b, k_g, 1/sqrt(S))``, each ``(N, A)``.

    ``dt`` (N,) s with ``dt[0] = inf``; ``reset`` (N,) bool (``reset[0]`` true);
    ``params`` (A, 4) sigma_b, sigma, tau_s, sigma_v; ``diffuse`` (N,) bool: resets
    whose offset is unknown (a wrong relocalization: prior variance
    :data:`DIFFUSE_SCALE` times the error's, so its first innovation is ~0 and the
    offset is learnt from the data). The mean recursion of a column
    y is then: ``m_g *= phi``; at a reset ``m_b = 0``; ``nu = y - m_b - m_g``;
    ``z = nu / sqrt(S)``; ``m_b += k_b nu``; ``m_g += k_g nu``."""
    d = np.zeros(dt.size, bool) if diffuse is None else np.asarray(diffuse, dtype=bool)
    return _filter_gains(dt, np.asarray(reset, dtype=bool), d, params)


@numba.njit(cache=True)
def _filter_gains(
    dt: np.ndarray, reset: np.ndarray, diffuse: np.ndarray, params: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`filter_gains`, compiled."""
    n = dt.size
    a_n = params.shape[0]
    phi_o = np.empty((n, a_n))
    kb_o = np.empty((n, a_n))
    kg_o = np.empty((n, a_n))
    isq_o = np.empty((n, a_n))
    for a in range(a_n):
        sb2 = params[a, 0] ** 2
        s2 = params[a, 1] ** 2
        tau = params[a, 2]
        rv = params[a, 3] ** 2
        p00 = 0.0
        p01 = 0.0
        p11 = 0.0
        for k in range(n):
            phi = math.exp(-dt[k] / tau) if math.isfinite(dt[k]) else 0.0
            p01 *= phi
            p11 = phi * phi * p11 + s2 * (1.0 - phi * phi)
            if reset[k]:
                p00 = DIFFUSE_SCALE * (sb2 + s2 + rv) if diffuse[k] else sb2
                p01 = 0.0
            ca = p00 + p01
            cb = p01 + p11
            s = max(ca + cb + rv, rv)
            k0 = ca / s
            k1 = cb / s
            p00 -= k0 * ca
            p01 -= k0 * cb
            p11 -= k1 * cb
            phi_o[k, a] = phi
            kb_o[k, a] = k0
            kg_o[k, a] = k1
            isq_o[k, a] = 1.0 / math.sqrt(s)
    return phi_o, kb_o, kg_o, isq_o


@numba.njit(cache=True)
def whiten_columns(
    y: np.ndarray, reset: np.ndarray, phi: np.ndarray, kb: np.ndarray, kg: np.ndarray,
    isq: np.ndarray,
) -> np.ndarray:
    """Standardized innovations ``(N, m)`` of the columns of ``y`` ``(N, m)`` of one axis.

    ``phi``, ``kb``, ``kg``, ``isq``: ``(N,)`` gains of that axis (one column of
    :func:`filter_gains`)."""
    n, m = y.shape
    out = np.empty((n, m))
    mb = np.zeros(m)
    mg = np.zeros(m)
    for k in range(n):
        for j in range(m):
            mg[j] *= phi[k]
            if reset[k]:
                mb[j] = 0.0
            nu = y[k, j] - mb[j] - mg[j]
            out[k, j] = nu * isq[k]
            mb[j] += kb[k] * nu
            mg[j] += kg[k] * nu
    return out


def spacings(t_s: np.ndarray) -> np.ndarray:
    """``dt`` (s) of sample times, ``inf`` at the first (g starts stationary)."""
    dt = np.empty(np.asarray(t_s).size)
    dt[0] = np.inf
    dt[1:] = np.diff(t_s)
    return dt
