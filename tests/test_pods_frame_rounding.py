"""The pods-against-IMU check's rounding variance (fusion/split_step.py
``_frame_rounding``) against the rounding of steady motion, with and without slip.

A pod travelling 3 + f ticks a frame changes its count by 3 or 4: its error has variance
f(1 − f), the same on every frame at that speed, not the phase average 1/6 tick² of two
independent ends; the travel's slip spreads f. The stated u² must hold at every speed: its
mean, pods independent, at most 1, and 1 at the worst fraction, ½ (not wider than that).
"""

from __future__ import annotations

import numpy as np
import pytest
from pods_sim_util import true_geometry

from sensorbench.fusion.pod_kinematics import body_increments
from sensorbench.fusion.split_step import _disagreement, _frame_rounding

WINDOWS, FRAMES = 2000, 50


def _mean_u2(fraction: float, slip: float, rng: np.random.Generator) -> tuple[float, float]:
    """Mean u² (and its standard error over windows) of straight steady motion, every pod
    at 3 + ``fraction`` ticks a frame plus N(0, ``slip``) tick² from its own uniform phase,
    the IMU exact."""
    geo = true_geometry(law=True)
    w_theta = np.linalg.pinv(geo.W)[2]
    travel = 3.0 + fraction + np.sqrt(slip) * rng.standard_normal((WINDOWS, FRAMES, 3))
    ends = np.cumsum(travel, axis=1) + rng.uniform(size=(WINDOWS, 1, 3))
    counts = np.floor(np.concatenate([ends[:, :1] - travel[:, :1], ends], axis=1))
    dtheta = body_increments(geo.W, np.diff(counts, axis=1).reshape(-1, 3))[:, 2]
    truth = np.full(dtheta.size, (3.0 + fraction) * w_theta.sum())
    rounding = _frame_rounding(geo.W, w_theta, np.full((dtheta.size, 3), slip))
    still = np.zeros(dtheta.size, bool)
    u2 = _disagreement(np.full(dtheta.size, slip * w_theta @ w_theta), dtheta, truth, still,
                       (rounding, 1.0), 0.0, np.empty(0))[0]  # fmt: skip
    means = u2.reshape(WINDOWS, FRAMES).mean(axis=1)
    return float(means.mean()), float(means.std(ddof=1) / np.sqrt(WINDOWS))


@pytest.mark.parametrize("slip", [0.0, 0.02, 0.1])
def test_steady_rounding_is_inside_the_stated_variance(slip: float) -> None:
    rng = np.random.default_rng(35)
    got = {f: _mean_u2(f, slip, rng) for f in (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95)}
    for f, (mean, se) in got.items():
        assert mean < 1 + 4 * se, (f, mean, se)
    mean, se = got[0.5]
    assert abs(mean - 1) < 4 * se, (mean, se)  # the most, reached


def test_an_imu_row_does_not_round() -> None:
    w = true_geometry(law=True).W.copy()
    w[0] = (0.0, 0.0, 1.0)  # the right and the perpendicular pod, and the IMU's yaw
    w_theta = np.linalg.pinv(w)[2]
    assert w_theta[0] == pytest.approx(1.0)  # the heading is the IMU's alone
    # were the IMU rounded as a pod: 1/4 rad² of it
    assert _frame_rounding(w, w_theta, np.zeros((1, 3)))[0] < 1e-12
