"""Both odometry filters refuse malformed frames the same way (one shared input check)."""

from __future__ import annotations

import numpy as np
import pytest

from sensorbench.benchmarks.joint_filter import JointFilter
from sensorbench.errors import FusionError
from sensorbench.fusion.filter_noise import AxisNoise, FilterNoise
from sensorbench.fusion.split_filter import SplitFilter, frame_steps

NOISE = FilterNoise(AxisNoise(1.0, 1e-6), AxisNoise(1.0, 1e-6), AxisNoise(1.0, 1e-6))
FILTERS = [SplitFilter(NOISE), JointFilter(NOISE)]


def test_frame_steps_returns_times_increments_and_steps() -> None:
    t, inc, dt = frame_steps([0.0, 0.5, 1.5], [[1, 0, 0], [0, 1, 0]])
    assert t.dtype == inc.dtype == dt.dtype == np.float64
    assert inc.shape == (2, 3)
    np.testing.assert_array_equal(dt, [0.5, 1.0])


@pytest.mark.parametrize("filt", FILTERS, ids=["split", "joint"])
@pytest.mark.parametrize(
    ("t_s", "inc", "match"),
    [
        (np.arange(3) * 0.01, np.zeros((3, 3)), "need K\\+1 times"),  # K+1 = K
        (np.arange(4) * 0.01, np.zeros((3, 2)), "need K\\+1 times"),  # not (K, 3)
        (np.array([0.0, 0.01, 0.01, 0.02]), np.zeros((3, 3)), "strictly increasing"),
        (np.array([0.0, 0.01, 0.005, 0.02]), np.zeros((3, 3)), "strictly increasing"),
        (np.array([0.0, np.nan, 0.02, 0.03]), np.zeros((3, 3)), "strictly increasing"),
    ],
)
def test_filters_reject_malformed_frames(filt, t_s, inc, match) -> None:
    with pytest.raises(FusionError, match=match):
        filt.run(t_s, inc)
