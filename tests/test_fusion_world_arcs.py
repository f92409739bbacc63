"""The one-row world arc (a live frame, scalar arithmetic) gives the vectorised result's bits.

Rows cover the series branch of the arc factors (|dθ| < 1e-6, zero included), both signs,
spins past π, headings far from zero and rows with nan in any component.
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.pod_kinematics import se2_exp, se2_exp_row
from sensorbench.fusion.split_filter import world_arcs


def _rows(n: int = 20_000, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = np.array([1e-9, 3e-7, 9.9e-7, 1e-6, 1e-3, 0.1, 4.0])[rng.integers(0, 7, n)]
    inc = rng.normal(size=(n, 3)) * np.array([0.01, 0.01, 1.0])
    inc[:, 2] *= scale
    inc[rng.random(n) < 0.01, 2] = 0.0
    inc[rng.random((n, 3)) < 0.003] = np.nan
    return inc, rng.uniform(-40.0, 40.0, n)


def test_se2_exp_row_is_se2_exp_bit_for_bit() -> None:
    inc, _ = _rows()
    inc = inc[~np.isnan(inc).any(axis=1)]
    rows = np.array([se2_exp_row(*map(float, r)) for r in inc])
    np.testing.assert_array_equal(rows, se2_exp(inc))


def test_one_row_world_arcs_are_the_vectorised_ones_bit_for_bit() -> None:
    inc, heading = _rows()
    whole = np.column_stack(world_arcs(inc, heading))
    rows = np.vstack([np.column_stack(world_arcs(inc[k : k + 1], heading[k : k + 1]))
                      for k in range(inc.shape[0])])  # fmt: skip
    assert np.isnan(whole).any(axis=1).sum() > 100  # the nan rows are there, and nan stays nan
    np.testing.assert_array_equal(rows, whole)
