"""How much fresh rounding each encoder frame carries: the share of a tick² per pod.

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

The filters state rounding as a white error of the odometry *position* (their r), so a
frame's share is half of that expectation, ``E[f(1 − f)]/2`` tick², against the white
model's 1/12: :func:`rounding_share` gives the ratio (1 = white) per pod and frame.

μ is extrapolated from the pod's own counts over the frames before (two windows of
``frames`` frames, a straight line through their means): causal, so a live filter can use
it. σ² is the step's slip in ticks² plus what that extrapolation does not know: the
rounding of the windows' ends (itself a fractional-part variance: none for a wheel that
stood still). A frame's share depends on the :data:`SHARE_HISTORY` frames before it and on
nothing else, so a chunk of frames prefixed by that many gets what the whole series gets.
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.chunk_invariant import trailing_sums

SHARE_FRAMES = 10
"""Frames per window of the extrapolation of each pod's travel."""
SHARE_HISTORY = 2 * SHARE_FRAMES
"""Frames before a frame that its share depends on (the extrapolation's two windows)."""
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


def rounding_share(
    ticks: np.ndarray, slip_ticks2: np.ndarray | None = None, frames: int = SHARE_FRAMES
) -> np.ndarray:
    """Per frame and pod (K, N), the fresh rounding of the odometry position as a share of
    the white model's 1/12 tick² (1 = white; 0 = no fresh rounding; up to 1.5).

    Args:
        ticks: (K, N) count increments of each pod over each frame (ticks).
        slip_ticks2: (K, N) the slip model's variance of each pod's travel over each frame
            (tick²); None = no slip.
        frames: frames per extrapolation window.

    The first 2·``frames`` frames, with no history, take the white share.
    """
    dn = np.nan_to_num(np.asarray(ticks, dtype=float))
    k_n = dn.shape[0]
    m = int(frames)
    share = np.ones_like(dn)
    if k_n <= 2 * m:
        return share
    slip = np.zeros_like(dn) if slip_ticks2 is None else np.asarray(slip_ticks2, dtype=float)
    c, cs = trailing_sums(dn, m), trailing_sums(slip, m)
    k = np.arange(2 * m, k_n)
    travel1, travel0 = c[k], c[k - m]
    # a straight line through the two windows' mean travel per frame, at frame k
    w1, w0 = 1 + (m + 1) / (2 * m), (m + 1) / (2 * m)
    mu = (w1 * travel1 - w0 * travel0) / m
    # each window's count differs from its travel by the rounding of its two ends, whose
    # difference is itself the fractional-part variance of the window's travel (a wheel
    # that stood still has none)
    var1 = expected_frac_variance(travel1, cs[k])
    var0 = expected_frac_variance(travel0, cs[k - m])
    sigma2 = slip[k] + (w1**2 * var1 + w0**2 * var0) / m**2
    share[2 * m :] = 6.0 * expected_frac_variance(mu, sigma2)
    return share
