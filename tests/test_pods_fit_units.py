"""A reference in another length unit than m (a TUM file in mm, a mocap in inches) is refused
by the pod fit against the robot configuration's nominal distance per tick, instead of a
wheel radius of 24 m and lever arms of 160 m with σ of a few mm."""

from __future__ import annotations

import math
import re

import pytest
from pods_sim_util import DRIVES, simulate

from sensorbench.characterize.pods.geometry_fit import MAX_SCALE_RATIO, fit_pods
from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import load_drive


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("units")
    return [simulate(tmp, name, 30 + i) for i, name in enumerate(DRIVES)]


def test_the_nominal_distance_per_tick_comes_from_the_robot_configuration(sessions) -> None:
    # the simulator's configuration: 24 mm wheels, 2000 counts per revolution
    assert load_drive(sessions[0]).nominal_c == pytest.approx(2 * math.pi * 0.024 / 2000)


@pytest.mark.parametrize("unit", [1000.0, 100.0, 1 / 0.0254], ids=["mm", "cm", "inch"])
def test_a_reference_in_another_length_unit_is_refused(sessions, unit) -> None:
    drives = [load_drive(p) for p in sessions]
    for d in drives:
        d.ref[:, :2] *= unit
    with pytest.raises(FitError, match="another unit than m") as err:
        fit_pods(drives)
    # each pod's stated ratio is the unit's (the fit's c is good to 0.1 %)
    ratios = [float(r) for r in re.findall(r"m \(([0-9.]+)×\)", str(err.value))]
    assert len(ratios) == 3 and all(r == pytest.approx(unit, rel=0.01) for r in ratios), ratios


def test_a_reference_in_m_is_fitted_within_the_nominal(sessions) -> None:
    fit = fit_pods([load_drive(p) for p in sessions])
    nominal = 2 * math.pi * 0.024 / 2000
    assert fit.complete
    assert all(1 / MAX_SCALE_RATIO < c / nominal < MAX_SCALE_RATIO for c in fit.c)
