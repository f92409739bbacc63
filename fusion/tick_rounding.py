"""How much rounding an encoder frame's count increment carries (tick²).

The count moves by ⌊u + δ⌋ for a wheel turning δ ticks from sub-tick phase u, so with u
uniform the increment's rounding error has mean 0 and variance ``f·(1 − f)``, f the
fractional part of δ (1/6 on average, 0 for a still wheel). For δ ~ N(μ, σ²) the Fourier
series of ``f·(1 − f)`` gives its expectation in closed form:

    E[f·(1 − f)] = 1/6 − Σₙ cos(2πnμ)·exp(−2π²n²σ²)/(π²n²)
"""

from __future__ import annotations

import numpy as np

SERIES_TERMS = 40
"""Terms of the Fourier series. The tail left out is at most Σ_{n>40} 1/(π²n²) ≈ 0.0025
tick² (1.5 % of 1/6) for σ = 0, and vanishes for any σ above 0.1 tick."""


def expected_frac_variance(mu: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """E[f·(1 − f)] (tick²) for f the fractional part of δ ~ N(mu, sigma2) (ticks, tick²)."""
    mu, s2 = np.broadcast_arrays(np.asarray(mu, dtype=float), np.asarray(sigma2, dtype=float))
    # term by term, not as one (..., SERIES_TERMS) array: a long replay's (frames, pods)
    # would otherwise take SERIES_TERMS times its size at once (an hour at 200 Hz: 0.7 GB)
    # each element takes its terms down to a weight of 1e-12 (its own, so that its value
    # does not depend on the other elements of the array)
    total = np.full(mu.shape, 1.0 / 6.0)
    phase = (2 * np.pi) * mu
    decay = -2 * np.pi**2 * s2
    for n in range(1, SERIES_TERMS + 1):
        weight = np.exp(decay * n**2)
        live = weight > 1e-12
        if not np.any(live):
            break  # every later term is smaller still
        total -= np.where(live, np.cos(phase * n) * weight, 0.0) / (np.pi**2 * n**2)
    return np.clip(total, 0.0, 0.25)
