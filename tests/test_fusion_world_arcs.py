"""The compiled world arcs and odometry path: one row (a live frame) gives the bits of K
rows (a replay), and both are numpy's SE(2) exponential rotated by the heading
(:func:`integrate_path` for the path) to the rounding of sin and cos.

Rows cover the series branch of the arc factors (|dθ| < 1e-6, zero included), both signs,
spins past π, headings far from zero and rows with nan in any component.
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.pod_kinematics import integrate_path, se2_exp
from sensorbench.fusion.split_step import dead_reckon, world_arcs


def _rows(n: int = 20_000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = np.array([1e-9, 3e-7, 9.9e-7, 1e-6, 1e-3, 0.1, 4.0])[rng.integers(0, 7, n)]
    inc = rng.normal(size=(n, 3)) * np.array([0.01, 0.01, 1.0])
    inc[:, 2] *= scale
    inc[rng.random(n) < 0.01, 2] = 0.0
    inc[rng.random((n, 3)) < 0.003] = np.nan
    return inc, rng.uniform(-40.0, 40.0, n)


def _arc_bound(inc: np.ndarray) -> np.ndarray:
    """What an ulp of libm's against numpy's SIMD sin and cos (≤ eps each) moves an arc:
    sin θ/θ and (1 − cos θ)/θ by ≤ eps/|θ| times the step's length, the rotation by ≤ eps
    per factor, plus the rounding of the five products and sums: ≤ 8 eps of the arc."""
    eps, step = np.finfo(float).eps, np.hypot(inc[:, 0], inc[:, 1])
    arc = np.hypot(*se2_exp(inc)[:, :2].T)
    small = np.abs(inc[:, 2]) < 1e-6  # the series: no sin or cos of θ
    bound = np.where(small, 0.0, 2 * eps * step / np.where(small, 1.0, np.abs(inc[:, 2])))
    return bound + 8 * eps * np.maximum(arc, step)


def test_world_arcs_are_se2_exp_rotated_to_the_rounding_of_sin_and_cos() -> None:
    inc, heading = _rows()
    x, y = world_arcs(inc, heading)
    keep = ~np.isnan(inc).any(axis=1)
    assert np.isnan(x[~keep]).all() and np.isnan(y[~keep]).all()
    inc, heading, got = inc[keep], heading[keep], np.column_stack([x[keep], y[keep]])
    rel = se2_exp(inc)[:, :2]
    c, s = np.cos(heading), np.sin(heading)
    want = np.column_stack([c * rel[:, 0] - s * rel[:, 1], s * rel[:, 0] + c * rel[:, 1]])
    assert np.all(np.abs(got - want) <= _arc_bound(inc)[:, None])


def test_one_row_world_arcs_are_the_vectorised_ones_bit_for_bit() -> None:
    inc, heading = _rows()
    whole = np.column_stack(world_arcs(inc, heading))
    rows = np.vstack([np.column_stack(world_arcs(inc[k : k + 1], heading[k : k + 1]))
                      for k in range(inc.shape[0])])  # fmt: skip
    assert np.isnan(whole).any(axis=1).sum() > 100  # the nan rows are there, and nan stays nan
    np.testing.assert_array_equal(rows, whole)


def test_odometry_path_is_integrate_path_in_any_chunks() -> None:
    inc, _ = _rows()
    pose0 = np.array([0.3, -1.0, 2.5])
    whole = dead_reckon(inc, pose0)
    head = dead_reckon(inc[:777], pose0)
    np.testing.assert_array_equal(np.vstack([head, dead_reckon(inc[777:], head[-1])[1:]]), whole)
    inc = np.nan_to_num(inc)
    want = integrate_path(inc, pose0)
    np.testing.assert_array_equal(whole[:, 2], want[:, 2])  # sums of the same numbers
    # each step's arc within its bound, each sum rounding by at most an ulp of the position
    eps = np.finfo(float).eps
    bound = np.cumsum(np.concatenate([[0.0], _arc_bound(inc)]))
    bound = bound + eps * np.cumsum(np.abs(want[:, :2]), axis=0).max(axis=1)
    assert np.all(np.abs(whole[:, :2] - want[:, :2]) <= bound[:, None])
