"""Allan deviation of pose-error series: a cross-check of the Gauss-Markov fit.

The overlapping Allan variance is computed inside each relocalization segment (so
offsets b, constant within a segment, do not enter) after splitting at gaps longer
than 5 median sample periods and resampling each piece linearly onto a uniform grid
at the median period; pieces are pooled by summing squared differences and counts.

For the model ``g + v`` (first-order Gauss-Markov σ, τ plus white σ_v sampled at
``dt``), with x = T/τ::

    AVAR(T) = σ² (2/x) [1 - (3 - 4 e^{-x} + e^{-2x}) / (2x)] + σ_v² dt / T

whose GM part peaks at T ≈ 1.89 τ with ADEV ≈ 0.62 σ (slopes +½ below, -½ above).
Units: T in s; ADEV in the error's unit (m or rad).
"""

from __future__ import annotations

import numpy as np

from sensorbench.characterize.pose_series import AXES, ErrorSeries

GM_PEAK_T_OVER_TAU = 1.89
GM_PEAK_ADEV_OVER_SIGMA = 0.62


def _pieces(series: ErrorSeries) -> list[tuple[np.ndarray, np.ndarray]]:
    t = series.t_s
    dt = np.diff(t)
    med = float(np.median(dt))
    cut = np.zeros(series.n, dtype=bool)
    cut[0] = True
    cut[1:] = series.reloc[1:] | (dt > 5 * med)
    starts = np.flatnonzero(cut)
    ends = np.append(starts[1:], series.n)
    out = []
    for a, b in zip(starts, ends, strict=True):
        if b - a < 4:
            continue
        grid = np.arange(t[a], t[b - 1] + 0.5 * med, med)
        x = np.stack([np.interp(grid, t[a:b], series.error[a:b, i]) for i in range(6)], axis=1)
        out.append((grid, x))
    return out


def allan_deviation(
    series: list[ErrorSeries], n_taus: int = 30
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled overlapping ADEV of every axis: (T (K,) s, adev (K, 6), n_terms (K,))."""
    dt0 = float(np.median(np.concatenate([np.diff(s.t_s) for s in series])))
    pieces = [p for s in series for p in _pieces(s)]
    longest = max(p[0].size for p in pieces)
    ms = np.unique(np.round(np.logspace(0, np.log10(max(longest // 3, 1)), n_taus)).astype(int))
    num = np.zeros((ms.size, 6))
    cnt = np.zeros(ms.size)
    for _, x in pieces:
        c = np.concatenate([np.zeros((1, 6)), np.cumsum(x, axis=0)])
        n = x.shape[0]
        for k, m in enumerate(ms):
            if 2 * m >= n:
                continue
            avg = (c[m:] - c[:-m]) / m
            d = avg[m:] - avg[:-m]
            num[k] += np.sum(d * d, axis=0)
            cnt[k] += d.shape[0]
    ok = cnt > 0
    adev = np.sqrt(num[ok] / (2.0 * cnt[ok, None]))
    return ms[ok] * dt0, adev, cnt[ok]


def model_allan_deviation(
    t: np.ndarray, sigma: float, tau: float, sigma_v: float, dt: float
) -> np.ndarray:
    """Theoretical ADEV of GM(σ, τ) + white σ_v sampled every ``dt`` s, at times ``t`` s."""
    x = np.asarray(t, dtype=float) / tau
    gm = sigma**2 * (2.0 / x) * (1.0 - (3.0 - 4.0 * np.exp(-x) + np.exp(-2.0 * x)) / (2.0 * x))
    return np.sqrt(gm + sigma_v**2 * dt / np.asarray(t, dtype=float))


def allan_cross_check(series: list[ErrorSeries], params: np.ndarray) -> dict:
    """Compare the empirical ADEV with the fitted model's, per axis.

    Returns ``{"T_s": [...], axis: {...}}`` with, per axis, the empirical peak
    (T, ADEV) (the maximum), the τ and σ it implies (T/1.89,
    ADEV/0.62), the fitted τ and σ, and the range of the ratio empirical/model;
    only averaging times with at least 30 terms count.
    """
    t, adev, n_terms = allan_deviation(series)
    dt0 = float(np.median(np.concatenate([np.diff(s.t_s) for s in series])))
    out: dict = {"T_s": t.tolist(), "n_terms": n_terms.tolist()}
    for i, a in enumerate(AXES):
        _, sg, tau, sv = params[i]
        model = model_allan_deviation(t, sg, tau, sv, dt0)
        y = adev[:, i]
        good = n_terms >= 30
        pk = int(np.nanargmax(np.where(good, y, np.nan))) if good.any() else int(np.argmax(y))
        ratio = y[good] / model[good]
        out[a] = {
            "adev": y.tolist(),
            "model_adev": model.tolist(),
            "peak_T_s": float(t[pk]),
            "peak_adev": float(y[pk]),
            "tau_from_peak_s": float(t[pk] / GM_PEAK_T_OVER_TAU),
            "sigma_from_peak": float(y[pk] / GM_PEAK_ADEV_OVER_SIGMA),
            "tau_fit_s": float(tau),
            "sigma_fit": float(sg),
            "ratio_min": float(ratio.min()) if ratio.size else float("nan"),
            "ratio_max": float(ratio.max()) if ratio.size else float("nan"),
        }
    return out
