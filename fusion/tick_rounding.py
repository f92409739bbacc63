"""How much rounding an encoder frame's count increment carries (tick²).

A pod's cumulative count is its travel floored to whole ticks. Between two frames the
wheel turns δ ticks (not a whole number); the count moves by ⌊u + δ⌋ with u the sub-tick
phase the frame started at, so the increment's rounding error ``δ − Δn`` has mean 0 and,
with u uniform, variance ``f·(1 − f)`` where f is the fractional part of δ (tick²).
Averaged over f that is 1/6 — the white-rounding model (1/12 at each end of the
increment) — but a wheel turning a steady 16.5 ticks per frame has 1/4 (1.5×), one turning
a whole number of ticks or standing still has none. With δ known only as a Gaussian
N(μ, σ²) (its slip, and how well the recent frames predict it), the Fourier series of
``f·(1 − f) = 1/6 − Σₙ cos(2πnδ)/(π²n²)`` gives its expectation in closed form:

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
