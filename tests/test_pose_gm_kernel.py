"""The Monte Carlo kernel's own maths: float32 ln/sin/cos series and the normal draws.

The series are checked against numpy's float64 functions over their whole input
range; the draws through the Box–Muller structure (radius² ~ exponential with mean 2,
angle uniform, independent) and as normals (Kolmogorov–Smirnov, moments, tails).
Sample sizes and bounds are stated per test; the seed is fixed, so the verdicts are
deterministic and a broken generator fails them with overwhelming probability.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from sensorbench.characterize.pose import gm_montecarlo

EPS32 = float(np.finfo(np.float32).eps)


def _draw_pairs(lanes: int, rounds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = rng.integers(np.iinfo(np.uint64).max, size=lanes, dtype=np.uint64, endpoint=True)
    word = np.empty(lanes, np.uint64)
    uf = np.empty(lanes, np.float32)
    z1 = np.empty((rounds, lanes), np.float32)
    z2 = np.empty((rounds, lanes), np.float32)
    for i in range(rounds):
        gm_montecarlo._normal_pairs(state, word, uf, uf.view(np.int32), z1[i], z2[i])
    return z1.astype(np.float64), z2.astype(np.float64)


def test_ln_series_matches_numpy_over_the_uniforms_range():
    """Relative error within a few float32 roundings over u in [2^-33, 1)."""
    x = np.float32(2.0) ** -np.linspace(1e-6, 33, 3001, dtype=np.float32)
    m, e = np.frexp(x)
    got = np.array(
        [
            gm_montecarlo._ln_series(np.float32(2 * mi), np.float32(ei - 1))
            for mi, ei in zip(m, e, strict=True)
        ]
    )
    want = np.log(x.astype(np.float64))
    # rounding of e*ln2 (|ln x| scale) and of the series (|ln m| < 0.35): 4 ulp of each
    bound = 4 * EPS32 * (np.abs(want) + 0.35)
    assert np.all(np.abs(got - want) <= bound)


def test_sin_cos_series_match_numpy_on_a_quarter_turn():
    x = np.linspace(0, np.pi / 2, 2001, dtype=np.float32)[:-1]
    got = np.array([gm_montecarlo._sin_cos_quarter(v) for v in x])
    xd = x.astype(np.float64)
    # series truncation < 4e-9, float32 rounding of Horner steps: 4 ulp at magnitude 1
    np.testing.assert_allclose(got[:, 0], np.sin(xd), rtol=0, atol=4 * EPS32)
    np.testing.assert_allclose(got[:, 1], np.cos(xd), rtol=0, atol=4 * EPS32)


def test_pairs_have_box_muller_structure_and_are_standard_normal():
    """400 000 pairs (1000 lanes × 400 rounds).

    KS tests at 0.1 %; moments within 5 standard errors (se of the mean 1/√n, of the
    variance √(2/n), of the fourth moment √(96/n)); correlations within 5/√n.
    """
    z1, z2 = _draw_pairs(1000, 400, seed=11)
    r2 = (z1**2 + z2**2).ravel()
    theta = np.arctan2(z2, z1).ravel()
    assert stats.kstest(r2, "expon", args=(0, 2)).pvalue > 1e-3
    assert stats.kstest(theta, "uniform", args=(-np.pi, 2 * np.pi)).pvalue > 1e-3
    z = np.concatenate([z1.ravel(), z2.ravel()])
    n = z.size
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1) < 5 * np.sqrt(2 / n)
    assert abs(np.mean(z**4) - 3) < 5 * np.sqrt(96 / n)
    pairs = {
        "z1 vs z2 of a pair": (z1, z2),
        "consecutive rounds of a lane": (z1[1:], z1[:-1]),
        "neighbouring lanes": (z1[:, 1:], z1[:, :-1]),
    }
    for what, (a, b) in pairs.items():
        r = np.corrcoef(a.ravel(), b.ravel())[0, 1]
        assert abs(r) < 5 / np.sqrt(a.size), what


def test_tails_have_normal_frequencies():
    """|z| > 3 and > 4 counted over 800 000 draws: within 5 binomial standard errors."""
    z1, z2 = _draw_pairs(2000, 200, seed=12)
    z = np.abs(np.concatenate([z1.ravel(), z2.ravel()]))
    for level in (3.0, 4.0):
        p = 2 * stats.norm.sf(level)
        k = np.count_nonzero(z > level)
        assert abs(k - p * z.size) < 5 * np.sqrt(z.size * p * (1 - p)), level
    assert z.max() < 6.8  # the radius' bound from 32-bit uniforms
