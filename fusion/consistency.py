"""Is a filter's stated uncertainty honest? NEES and coverage against a reference, the
NIS against its clipped χ²₁ law, and the sliding-window NIS monitor's threshold
(:mod:`~sensorbench.fusion.monitor_stream`), each judged against
its exact law under a consistent filter (errors m or rad, variances m² or rad², times s;
docs/PODS.md § "Is the stated uncertainty honest?").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from sensorbench.errors import FusionError

SIGMA_LEVELS = (1.0, 2.0, 3.0)
"""Bounds of the coverage table, in stated standard deviations."""


def expected_coverage(k: float) -> float:
    """Probability that a standard normal lies within ±k."""
    return math.erf(k / math.sqrt(2.0))


def effective_samples(z: np.ndarray) -> float:
    """Effective number (1..N) of independent samples of ``z²`` for a correlated Gaussian
    series z: ``N / τ``, τ = 1 + 2 Σ_l ρ_l² over the lags where Geyer's initial positive
    sequence of z's autocorrelation ρ (about 0) is still positive."""
    x = np.asarray(z, dtype=float)
    acf = _autocorrelation(x)
    if acf is None:
        return float(max(x.size, 1))
    rho, pairs = acf
    tau = 1.0 + 2.0 * float(np.sum(rho[1 : 2 * pairs] ** 2))
    return float(min(x.size, max(1.0, x.size / tau)))


def _autocorrelation(x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """ρ_0..ρ_{n−1} of ``x`` about 0 (by FFT) and how many pairs ρ_{2m} + ρ_{2m+1} of
    Geyer's initial positive sequence are positive; None below 4 samples or for all 0."""
    n = x.size
    den = float(x @ x)
    if n < 4 or den <= 0:
        return None
    nfft = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(x, nfft)
    rho = np.fft.irfft(f * np.conj(f), nfft)[:n] / den
    m = n // 2
    stop = np.flatnonzero(rho[0 : 2 * m : 2] + rho[1 : 2 * m + 1 : 2] <= 0)
    return rho, int(stop[0]) if stop.size else m


NEES_MIN_SAMPLES = 2.0
"""The fewest effective samples the overconfidence verdict takes (:func:`nees_limit`)."""


def nees_limit(n_eff: float, level: float = 0.95) -> float:
    """One-sided ``level`` upper limit of a mean NEES (1-D) over ``n_eff`` effective samples,
    at least :data:`NEES_MIN_SAMPLES`: above it the stated variance is too small."""
    from scipy.stats import chi2

    n = max(float(n_eff), NEES_MIN_SAMPLES)
    return float(chi2.ppf(level, n) / n)


@dataclass
class AxisConsistency:
    """Claimed against actual uncertainty of one axis over one replay.

    Attributes:
        n: reference samples compared.
        n_eff: their effective number for the NEES band (correlation accounted).
        mean_nees: mean of z² (1 for an honest filter).
        nees_band: its two-sided 95 % band.
        coverage: fraction of samples with |z| < k for k in :data:`SIGMA_LEVELS`.
        coverage_over_time: (bins, 3) the same per equal-time bin.
        bin_edges_s: (bins + 1,) edges of those bins (s, the replay's time base).
        rms_error: RMS of the actual error (m or rad).
        rms_claimed: RMS of the stated standard deviation (m or rad).
    """

    n: int
    n_eff: float
    mean_nees: float
    nees_band: tuple[float, float]
    coverage: tuple[float, float, float]
    coverage_over_time: np.ndarray
    bin_edges_s: np.ndarray
    rms_error: float
    rms_claimed: float

    @property
    def nees_consistent(self) -> bool:
        """Mean NEES inside its 95 % band."""
        return self.nees_band[0] <= self.mean_nees <= self.nees_band[1]

    @property
    def overconfident(self) -> bool:
        """Mean NEES above its one-sided 95 % limit (:func:`nees_limit`): the errors are
        larger than the stated variance says."""
        return self.mean_nees > nees_limit(self.n_eff)

    def summary(self) -> dict[str, Any]:
        """JSON-ready: every scalar, coverage per bound with its expectation."""
        return {
            "n": self.n,
            "n_eff": self.n_eff,
            "mean_nees": self.mean_nees,
            "nees_band95": list(self.nees_band),
            "nees_consistent": self.nees_consistent,
            "nees_limit95": nees_limit(self.n_eff),
            "overconfident": self.overconfident,
            "coverage": {
                f"{k:g}sigma": {"actual": c, "expected": expected_coverage(k)}
                for k, c in zip(SIGMA_LEVELS, self.coverage, strict=True)
            },
            "coverage_over_time": {
                "bin_edges_s": self.bin_edges_s.tolist(),
                **{
                    f"{k:g}sigma": self.coverage_over_time[:, i].tolist()
                    for i, k in enumerate(SIGMA_LEVELS)
                },
            },
            "rms_error": self.rms_error,
            "rms_claimed_sigma": self.rms_claimed,
        }


def axis_consistency(
    t_s: np.ndarray,
    error: np.ndarray,
    variance: np.ndarray,
    bins: int = 10,
    n_eff: float | None = None,
) -> AxisConsistency:
    """NEES and coverage of one axis from its errors and stated variances at times ``t_s``.

    Args:
        t_s: sample times (n,), s, increasing.
        error: estimate − reference (n,), m or rad.
        variance: the filter's stated variance at those times (n,), m² or rad² (> 0).
        bins: equal-time bins of the coverage-over-time table.
        n_eff: the NEES band's effective sample size when the error model gives it
            (:func:`~sensorbench.fusion.nees_samples.model_effective_samples`); None: from
            the errors' own autocorrelation (:func:`effective_samples`).

    Raises:
        FusionError: fewer than 2 samples, or a non-positive or non-finite variance.
    """
    t = np.asarray(t_s, float)
    e = np.asarray(error, float)
    v = np.asarray(variance, float)
    if e.size < 2 or e.shape != v.shape or t.shape != e.shape:
        raise FusionError(f"need >= 2 matching samples, got {t.shape}, {e.shape}, {v.shape}")
    if not np.all(np.isfinite(v) & (v > 0)):
        raise FusionError("stated variances must be finite and > 0 to judge consistency")
    z = e / np.sqrt(v)
    absz = np.abs(z)[:, None]
    inside = absz < np.asarray(SIGMA_LEVELS)[None, :]
    edges = np.linspace(t[0], t[-1], bins + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, minlength=bins).astype(float)
    over_time = (
        np.column_stack([np.bincount(idx, weights=inside[:, i], minlength=bins) for i in range(3)])
        / np.maximum(counts, 1.0)[:, None]
    )
    over_time[counts == 0] = np.nan
    if n_eff is None:
        n_eff = effective_samples(z)
    from scipy.stats import chi2

    a = (1.0 - 0.95) / 2.0  # the two tails of the 95 % band
    lo, hi = chi2.ppf([a, 1.0 - a], n_eff) / n_eff
    return AxisConsistency(
        n=int(z.size),
        n_eff=n_eff,
        mean_nees=float(np.mean(z**2)),
        nees_band=(float(lo), float(hi)),
        coverage=tuple(float(c) for c in inside.mean(axis=0)),  # type: ignore[arg-type]
        coverage_over_time=over_time,
        bin_edges_s=edges,
        rms_error=float(np.sqrt(np.mean(e**2))),
        rms_claimed=float(np.sqrt(np.mean(v))),
    )


def clipped_chi2_moments(gate: float, dof: int = 1) -> tuple[float, float]:
    """Mean and variance of ``min(X, gate)`` for X ~ χ²(dof)."""
    from scipy.stats import chi2

    f0 = chi2.cdf(gate, dof)
    tail = 1.0 - f0
    m1 = dof * chi2.cdf(gate, dof + 2) + gate * tail
    m2 = dof * (dof + 2) * chi2.cdf(gate, dof + 4) + gate**2 * tail
    return float(m1), float(m2 - m1**2)


QUANTILE_BINS = 4000
"""Bins of the clipped χ²₁ law over [0, gate] in :func:`window_mean_quantile` (the
quantile is exact to half a bin, gate/8000)."""


@lru_cache(maxsize=64)
def window_mean_quantile(gate: float, window: int, level: float) -> float:
    """The ``level`` quantile of the mean of ``window`` independent ``min(X, gate)``, X ~ χ²₁.

    The law of one term is binned on [0, gate] (:data:`QUANTILE_BINS`, mass at the gate
    kept at the gate) and convolved ``window`` times by FFT.
    """
    from scipy.stats import chi2

    step = gate / QUANTILE_BINS
    cdf = chi2.cdf(np.arange(QUANTILE_BINS + 1) * step, 1)
    # bin i's mass at its midpoint, the clipped tail's at the gate: both on a half-step grid
    pmf = np.append(np.diff(cdf), 1.0 - cdf[-1])
    values = np.append((np.arange(QUANTILE_BINS) + 0.5) * step, gate)
    grid = np.zeros(2 * QUANTILE_BINS + 1)
    grid[np.rint(values / (0.5 * step)).astype(int)] = pmf
    size = 1 << int(np.ceil(np.log2(grid.size * window)))
    total = np.fft.irfft(np.fft.rfft(grid, size) ** window, size)[: (grid.size - 1) * window + 1]
    cum = np.cumsum(np.clip(total, 0.0, None))
    k = int(np.searchsorted(cum / cum[-1], level))
    return float(k * 0.5 * step / window)


def geyer_tau(y: np.ndarray) -> float:
    """Integrated autocorrelation time τ = 1 + 2 Σ ρ_l (≥ 1) of a stationary series about its
    sample mean, truncated by Geyer's initial monotone sequence (nan values left out)."""
    x = np.asarray(y, dtype=float)
    x = x[np.isfinite(x)]
    acf = _autocorrelation(x - x.mean() if x.size else x)
    if acf is None:
        return 1.0
    rho, pairs = acf
    positive = np.minimum.accumulate(rho[0 : 2 * pairs : 2] + rho[1 : 2 * pairs + 1 : 2])
    return max(1.0, -1.0 + 2.0 * float(positive.sum()))


def window_threshold(gate: float, window: int, level: float, tau: float = 1.0) -> float:
    """The monitor's threshold: the ``level`` quantile of a window mean of ``window``
    clipped χ²₁ values correlated with integrated autocorrelation time ``tau`` (≥ 1), taken
    as the mean of ``window/tau`` independent ones (at least 2)."""
    n_eff = max(2, round(window / max(float(tau), 1.0)))
    return window_mean_quantile(float(gate), n_eff, float(level))


@dataclass
class NisConsistency:
    """Is the NIS of one axis χ²₁? (docs/PODS.md § "Noise fit")

    Attributes:
        k: updates judged (rejected ones included).
        k_eff: their effective number, ``k/τ`` with τ the clipped NIS's own integrated
            autocorrelation time (:func:`geyer_tau`).
        mean: mean of ``min(NIS, gate)``.
        expected: its value under the model.
        band: its two-sided 95 % band over ``k_eff`` (and the fit's own level error).
        rejected: updates above the gate.
        nominal_rate: P(χ²₁ > gate).
        fit_se: the fitted model's own level error in the band (0: none).
    """

    k: int
    k_eff: float
    mean: float
    expected: float
    band: tuple[float, float]
    rejected: int
    nominal_rate: float
    fit_se: float = 0.0

    @property
    def rejection_rate(self) -> float:
        """Fraction of updates rejected."""
        return self.rejected / max(self.k, 1)

    @property
    def mean_ok(self) -> bool:
        """Mean gated NIS inside its band."""
        return self.band[0] <= self.mean <= self.band[1]

    @property
    def rejections_ok(self) -> bool:
        """Rejections at most twice the gate's nominal rate."""
        return self.rejection_rate <= 2.0 * self.nominal_rate

    @property
    def consistent(self) -> bool:
        """Both checks pass."""
        return self.mean_ok and self.rejections_ok

    def summary(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "k": self.k,
            "k_eff": self.k_eff,
            "mean": self.mean,
            "statistic": "mean of min(NIS, gate)",
            "expected": self.expected,
            "band95": list(self.band),
            "fit_se": self.fit_se,
            "mean_inside_band": self.mean_ok,
            "rejected": self.rejected,
            "rejection_rate": self.rejection_rate,
            "nominal_rejection_rate": self.nominal_rate,
            "rejections_within_twice_nominal": self.rejections_ok,
            "consistent": self.consistent,
        }


def nis_consistency(nis_chi2: np.ndarray, gate: float, fit_se: float = 0.0) -> NisConsistency:
    """:class:`NisConsistency` of NIS values (nan = no update); ``gate`` the χ²₁ gate the
    filter used. ``fit_se`` is the standard error of the level the model was fitted to
    (``AxisNoise.nis_se``; 0 for the fit's own sessions or an exact model): the band is
    the prediction band of a fresh session's mean, ``±1.96·√(v/k_eff + fit_se²)``.

    Raises:
        FusionError: fewer than 2 updates.
    """
    from scipy.stats import chi2, norm

    x = np.asarray(nis_chi2, float)
    ok = np.isfinite(x)
    if np.count_nonzero(ok) < 2:
        raise FusionError("need >= 2 updates to judge the NIS")
    c = np.minimum(x[ok], gate)
    k_eff = c.size / geyer_tau(c)
    m, v = clipped_chi2_moments(gate)
    half = float(norm.ppf(0.975)) * math.sqrt(v / max(k_eff, 1.0) + fit_se**2)
    return NisConsistency(
        k=int(c.size),
        k_eff=k_eff,
        mean=float(np.mean(c)),
        expected=m,
        band=(m - half, m + half),
        rejected=int(np.count_nonzero(x[ok] > gate)),
        nominal_rate=float(chi2.sf(gate, 1)),
        fit_se=float(fit_se),
    )


CROSS_CHECK_BINS = 5
"""Travel-quantile bins of :func:`heading_cross_check`'s spread."""


def heading_cross_check(
    pods_dtheta: np.ndarray, imu_dtheta: np.ndarray, sigma_floor: float, travel: np.ndarray
) -> np.ndarray:
    """Squared standardised disagreement ``u² = ((Δθ_pods − Δθ_imu − median)/σ_k)²`` (K,),
    σ_k the robust spread (at least ``sigma_floor``, rad) of the frames in the same
    quantile bin of ``travel`` (K,, m), ``sigma_floor`` for a frame that did not travel;
    nan where either increment is missing.
    """
    resid = np.asarray(pods_dtheta, float) - np.asarray(imu_dtheta, float)
    trav = np.asarray(travel, float)
    ok = np.isfinite(resid) & np.isfinite(trav)
    out = np.full(resid.size, np.nan)
    mov = ok & (trav > 0)
    if np.count_nonzero(mov) < 10 * CROSS_CHECK_BINS:
        return out
    centred = resid - np.median(resid[ok])
    sigma = np.full(resid.size, float(sigma_floor))
    edges = np.quantile(trav[mov], np.linspace(0, 1, CROSS_CHECK_BINS + 1))
    idx = np.clip(np.searchsorted(edges, trav, side="right") - 1, 0, CROSS_CHECK_BINS - 1)
    for b in range(CROSS_CHECK_BINS):
        sel = mov & (idx == b)
        if np.any(sel):
            mad = 1.4826 * float(np.median(np.abs(centred[sel])))
            sigma[sel] = max(mad, float(sigma_floor))
    out[ok] = (centred[ok] / sigma[ok]) ** 2
    return out


def whiteness(innovations: np.ndarray, max_lag: int = 10) -> tuple[np.ndarray, float]:
    """Normalised autocorrelation ρ_1..ρ_max_lag of a series and the bound 1.96/√K."""
    x = np.asarray(innovations, dtype=float)
    x = x[np.isfinite(x)]
    acf = _autocorrelation(x - x.mean()) if x.size >= max_lag + 2 else None
    if acf is None:
        return np.full(max_lag, np.nan), float("nan")
    return acf[0][1 : max_lag + 1], 1.96 / math.sqrt(x.size)
