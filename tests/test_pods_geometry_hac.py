"""The geometry fit's covariance when neighbouring intervals are correlated
(:func:`~sensorbench.characterize.pods.geometry_fit.joint_sandwich`), against the Monte
Carlo truth of the estimator.

Regressors (a smooth motion) and residuals (the reference's Gauss-Markov error, slip that
follows the motion) are each AR(1) with φ = 0.5 from interval to interval, 3 sessions of
120 intervals. The scores' long-run variance is then (1 + φ²)/(1 − φ²) = 1.67× their
variance: a covariance that takes the intervals as independent (HC3 alone) states σ 0.77×
too small, 2σ covering 88.4 %; Newey–West over L = 4 lags (the default rule at 120
intervals) recovers 1.49 of the 1.67 (Bartlett's taper), σ 0.945×, 2σ covering 94.1 %.

Cost: 400 draws of two sandwiches, ≈ 3 s.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import lfilter

from sensorbench.characterize.pods.geometry_fit import default_hac_lags, joint_sandwich

SESSIONS, INTERVALS, PHI = 3, 120, 0.5
DRAWS = 400


def _ar1(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Unit-variance AR(1) series along axis 0, started in its stationary law."""
    e = rng.standard_normal(shape)
    e[0] /= np.sqrt(1 - PHI**2)
    return lfilter([np.sqrt(1 - PHI**2)], [1.0, -PHI], e, axis=0)


def test_hac_covariance_covers_correlated_intervals_where_hc3_does_not() -> None:
    """Pooled over 3 parameters × 400 draws (1200 checks, binomial s.e. ≈ 0.7–0.9 %):
    with the default lags 2σ covers ≥ 92 % (3 s.e. below its expected 94.1 %, and the
    issue's bar is 90 %); with none ≤ 91.2 % (3 s.e. above its expected 88.4 %)."""
    rng = np.random.default_rng(7)
    session = np.repeat(np.arange(SESSIONS), INTERVALS)
    assert default_hac_lags(session) == 4
    beta = np.array([100.0, 5.0, 20.0])
    inside = np.zeros(2)
    for _ in range(DRAWS):
        xi = np.vstack([_ar1(rng, (INTERVALS, 3)) * [0.1, 0.05, 0.3] for _ in range(SESSIONS)])
        y = xi @ beta + 0.5 * np.concatenate([_ar1(rng, (INTERVALS,)) for _ in range(SESSIONS)])
        b = np.linalg.lstsq(xi, y, rcond=None)[0]
        resid = (y - xi @ b)[None]
        for j, lags in enumerate((0, None)):
            cov = joint_sandwich(
                xi, np.zeros_like(xi), session, b[None], resid, np.ones_like(resid), 3, lags
            )
            inside[j] += np.count_nonzero(np.abs(b - beta) <= 2 * np.sqrt(np.diag(cov)[:3]))
    hc3, hac = inside / (3 * DRAWS)
    assert hac >= 0.92, (hc3, hac)
    assert hc3 <= 0.912, (hc3, hac)
