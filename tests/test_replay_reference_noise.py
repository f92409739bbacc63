"""The reference's own noise in the claimed-vs-actual comparison (``reference_noise``).

A reference path with known white noise (generated here: a smooth curve sampled at
120 Hz with gaps, plus Gaussian noise) must give back its σ per axis; the comparison
against it must then state that noise beside the filter's own variance.
"""

from __future__ import annotations

import math

import numpy as np

from sensorbench.fusion.odometry_replay import reference_consistency, reference_noise

SIGMA = (5e-4, 3e-4, 2e-3)


def _path(rng: np.random.Generator, n: int = 6000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.arange(n) / 120.0
    t = np.delete(t, np.arange(1000, 1040))  # an occlusion
    true = np.column_stack(
        [0.8 * np.sin(0.3 * t), 0.5 * np.cos(0.2 * t), np.unwrap(0.9 * np.sin(0.25 * t))]
    )
    noisy = true + rng.standard_normal(true.shape) * np.asarray(SIGMA)
    return t, true, noisy


def test_white_noise_of_a_reference_is_recovered_per_axis() -> None:
    t, _, noisy = _path(np.random.default_rng(3))
    got = np.sqrt(reference_noise(t, noisy))
    # MAD-based σ over ~6000 triples: relative sd ≈ 1.1/√n·√(correlation 3) ≈ 2.5 %;
    # 4 sd, plus the smooth motion's own second difference (< 1e-5 m here)
    np.testing.assert_allclose(got, SIGMA, rtol=0.1)


def test_comparison_states_the_reference_noise_beside_the_filter_variance() -> None:
    rng = np.random.default_rng(4)
    t, true, noisy = _path(rng)
    est_var = np.full((t.size, 3), 1e-12)  # a filter that claims to be exact
    est = true.copy()
    without = reference_consistency(t, est, est_var, t, noisy)
    with_noise = reference_consistency(t, est, est_var, t, noisy, reference_noise(t, noisy))
    # judged against the noisy reference alone, an exact estimate looks wildly wrong;
    # with the reference's noise stated it is inside 2σ at the nominal rate: 4 binomial sd,
    # plus 0.01 for the estimated σ's own error (2.5 % in σ moves the 2σ coverage ≈ 0.5 %)
    assert without["x"].coverage[1] < 0.01
    for a in ("x", "y", "theta"):
        assert abs(with_noise[a].coverage[1] - 0.954) < 4 * math.sqrt(0.954 * 0.046 / t.size) + 0.01
