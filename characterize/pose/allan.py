"""Allan deviation of pose-error series against the Gauss-Markov model's (a cross-check of
the fit): overlapping ADEV within gap-free pieces of each segment; T in s, ADEV in the
error's unit. docs/POSE_ERROR.md ("The fit")."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2

from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries

GM_PEAK_T_OVER_TAU = 1.89
GM_PEAK_ADEV_OVER_SIGMA = 0.62


def _phases(series: ErrorSeries, dt0: float) -> list[np.ndarray]:
    """The pieces of ``series`` between relocalizations and gaps (> 5 of its median
    periods), each resampled onto a uniform grid every ``dt0`` s (the campaign's median
    period, so that every session's averaging factor m is at T = m·dt0) and summed along
    time: (6, n + 1) per piece, a leading 0 then the running sums of each axis (the
    "phase" whose second differences give the Allan variance)."""
    t = series.t_s
    dt = np.diff(t)
    med = float(np.median(dt))
    starts = np.flatnonzero(np.r_[True, series.reloc[1:] | (dt > 5 * med)])
    ends = np.append(starts[1:], series.n)
    out = []
    for a, b in zip(starts, ends, strict=True):
        if b - a < 4:
            continue
        grid = np.arange(t[a], t[b - 1] + 0.5 * dt0, dt0)
        c = np.zeros((6, grid.size + 1))
        for i in range(6):
            np.cumsum(np.interp(grid, t[a:b], series.error[a:b, i]), out=c[i, 1:])
        out.append(c)
    return out


def allan_deviation(
    series: list[ErrorSeries], n_taus: int = 30
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pooled overlapping ADEV of every axis: (T (K,) s, adev (K, 6), n_terms (K,),
    equivalent degrees of freedom (K,)); K = 0 without a gap-free piece of 4 samples."""
    dt0 = float(np.median(np.concatenate([np.diff(s.t_s) for s in series])))
    phases = [c for s in series for c in _phases(s, dt0)]
    if not phases:  # no gap-free piece of 4 samples or more (a sensor that delivers in bursts)
        none = np.empty(0)
        return none, np.empty((0, 6)), none, none
    longest = max(c.shape[1] - 1 for c in phases)
    ms = np.unique(np.round(np.logspace(0, np.log10(max(longest // 3, 1)), n_taus)).astype(int))
    num = np.zeros((ms.size, 6))
    cnt = np.zeros(ms.size)
    edf = np.zeros(ms.size)
    for c in phases:
        # one second difference per averaging factor and axis, an axis at a time (each
        # difference stays in cache), with one temporary
        n = c.shape[1] - 1
        use = [(k, int(m)) for k, m in enumerate(ms) if 2 * m < n]
        for i in range(6):
            ci = c[i]
            for k, m in use:
                d = ci[2 * m :] - ci[m:-m]
                d -= ci[m:-m]
                d += ci[: -2 * m]
                num[k, i] += np.einsum("i,i->", d, d) / (m * m)
        for k, m in use:
            cnt[k] += n - 2 * m + 1
            edf[k] += max(n // m - 1, 0)
    ok = cnt > 0
    adev = np.sqrt(num[ok] / (2.0 * cnt[ok, None]))
    return ms[ok] * dt0, adev, cnt[ok], np.maximum(edf[ok], 1.0)


def model_allan_deviation(
    t: np.ndarray, sigma: float, tau: float, sigma_v: float, dt: float
) -> np.ndarray:
    """Theoretical ADEV of GM(σ, τ) + white σ_v sampled every ``dt`` s, at times ``t`` s.

    For T ≪ τ the bracket ``1 − (3 − 4e^{−x} + e^{−2x})/(2x)`` is a difference of
    nearly equal numbers (it falls as x²/3: at x = 10⁻⁸ the direct form loses every
    digit and can go negative). Below x = 0.1 its Taylor series is summed instead,
    Σₙ₌₃ ((−1)ⁿ⁺¹ 2ⁿ + 4(−1)ⁿ) xⁿ⁻¹ / (2·n!), to n = 14, where its next term is below
    10⁻¹³ of it; above, the direct form keeps 13 digits."""
    t = np.asarray(t, dtype=float)
    x = t / tau
    small = x < _SERIES_BELOW
    bracket = np.empty_like(x)
    xs, xl = x[small], x[~small]
    bracket[small] = sum(c * xs ** (n - 1) for n, c in _SERIES)
    bracket[~small] = 1.0 - (3.0 - 4.0 * np.exp(-xl) + np.exp(-2.0 * xl)) / (2.0 * xl)
    gm = sigma**2 * (2.0 / x) * bracket
    return np.sqrt(gm + sigma_v**2 * dt / t)


_SERIES_BELOW = 0.1
_SERIES = [
    (n, -((-2.0) ** n - 4.0 * (-1.0) ** n) / (2.0 * math.factorial(n))) for n in range(3, 15)
]
"""(n, coefficient of xⁿ⁻¹) of the bracket's Taylor series: x²/3 − x³/4 + 7x⁴/60 − ..."""


def allan_cross_check(series: list[ErrorSeries], params: np.ndarray) -> dict:
    """The empirical ADEV against the fitted model's: ``{"T_s", "n_terms", "edf", axis: {...}}``,
    per axis the curve, ``adev_ci95``, the interior peak (``peak_found``) with the τ and σ
    it implies, the fitted τ and σ and the ratio's range (docs/POSE_ERROR.md, "The fit")."""
    t, adev, n_terms, edf = allan_deviation(series)
    dt0 = float(np.median(np.concatenate([np.diff(s.t_s) for s in series])))
    e = edf[:, None]  # the 95 % bounds: AVAR·edf/χ²_edf at 0.975 and 0.025
    ci = [adev * np.sqrt(e / chi2.ppf(0.5 + s * 0.95 / 2, e)) for s in (1, -1)]
    out: dict = {"T_s": t.tolist(), "n_terms": n_terms.tolist(), "edf": edf.tolist()}
    nan = float("nan")
    for i, a in enumerate(POSE_AXES):
        _, sg, tau, sv = params[i]
        model = model_allan_deviation(t, sg, tau, sv, dt0)
        y = adev[:, i]
        good = n_terms >= 30
        idx = np.flatnonzero(good & np.isfinite(y))
        k = int(idx[np.argmax(y[idx])]) if idx.size >= 3 else -1
        pk = None if k < 0 or k in (idx[0], idx[-1]) else k  # a maximum inside them only
        ratio = y[good] / model[good]
        out[a] = {
            "adev": y.tolist(),
            "adev_ci95": [ci[0][:, i].tolist(), ci[1][:, i].tolist()],
            "model_adev": model.tolist(),
            "peak_found": pk is not None,
            "peak_T_s": nan if pk is None else float(t[pk]),
            "peak_adev": nan if pk is None else float(y[pk]),
            "tau_from_peak_s": nan if pk is None else float(t[pk] / GM_PEAK_T_OVER_TAU),
            "sigma_from_peak": nan if pk is None else float(y[pk] / GM_PEAK_ADEV_OVER_SIGMA),
            "tau_fit_s": float(tau),
            "sigma_fit": float(sg),
            "ratio_min": float(ratio.min()) if ratio.size else float("nan"),
            "ratio_max": float(ratio.max()) if ratio.size else float("nan"),
        }
    return out
