"""The compiled world arcs: one row (a live frame) gives the bits of K rows (a replay),
and both are numpy's SE(2) exponential rotated by the heading to the rounding of sin and cos.

Rows cover the series branch of the arc factors (|dθ| < 1e-6, zero included), both signs,
spins past π, headings far from zero and rows with nan in any component.
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.pod_kinematics import se2_exp
from sensorbench.fusion.split_filter import world_arcs


def _rows(n: int = 20_000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = np.array([1e-9, 3e-7, 9.9e-7, 1e-6, 1e-3, 0.1, 4.0])[rng.integers(0, 7, n)]
    inc = rng.normal(size=(n, 3)) * np.array([0.01, 0.01, 1.0])
    inc[:, 2] *= scale
    inc[rng.random(n) < 0.01, 2] = 0.0
    inc[rng.random((n, 3)) < 0.003] = np.nan
    return inc, rng.uniform(-40.0, 40.0, n)


def test_world_arcs_are_se2_exp_rotated_to_the_rounding_of_sin_and_cos() -> None:
    inc, heading = _rows()
    x, y = world_arcs(inc, heading)
    keep = ~np.isnan(inc).any(axis=1)
    assert np.isnan(x[~keep]).all() and np.isnan(y[~keep]).all()
    inc, heading, got = inc[keep], heading[keep], np.column_stack([x[keep], y[keep]])
    rel = se2_exp(inc)[:, :2]
    c, s = np.cos(heading), np.sin(heading)
    want = np.column_stack([c * rel[:, 0] - s * rel[:, 1], s * rel[:, 0] + c * rel[:, 1]])
    # libm and numpy's SIMD sin/cos may each differ by an ulp (≤ eps): sin θ/θ and
    # (1 − cos θ)/θ then move by ≤ eps/|θ| times the step's length, the rotation by ≤ eps
    # per factor, plus the rounding of the five products and sums: ≤ 8 eps of the arc
    eps, step, arc = np.finfo(float).eps, np.hypot(inc[:, 0], inc[:, 1]), np.hypot(*rel.T)
    small = np.abs(inc[:, 2]) < 1e-6  # the series: no sin or cos of θ
    bound = np.where(small, 0.0, 2 * eps * step / np.where(small, 1.0, np.abs(inc[:, 2])))
    bound = bound + 8 * eps * np.maximum(arc, step)
    assert np.all(np.abs(got - want) <= bound[:, None])


def test_one_row_world_arcs_are_the_vectorised_ones_bit_for_bit() -> None:
    inc, heading = _rows()
    whole = np.column_stack(world_arcs(inc, heading))
    rows = np.vstack([np.column_stack(world_arcs(inc[k : k + 1], heading[k : k + 1]))
                      for k in range(inc.shape[0])])  # fmt: skip
    assert np.isnan(whole).any(axis=1).sum() > 100  # the nan rows are there, and nan stays nan
    np.testing.assert_array_equal(rows, whole)
