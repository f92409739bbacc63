"""The pod fit's IMU heading is used only when it turns as the mocap heading does: an IMU
yaw of the wrong sign, in degrees or frozen is dropped for the mocap
heading (auto) or refused (``heading="imu"``), not fitted into lever arms confidently wrong."""

from __future__ import annotations

import numpy as np
import pytest
from pods_sim_util import DRIVES, simulate

from sensorbench.characterize.pods.geometry_fit import fit_pods
from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import load_drive
from sensorbench.logs import Session

MAX_Z = 5.0  # |error|/σ of a lever arm; a correct fit exceeds it once in 10⁶ per parameter


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("imu_heading")
    return [simulate(tmp, name, 20 + i) for i, name in enumerate(DRIVES)]


def _true_lever(path) -> np.ndarray:
    with Session(path) as s:
        x, y, phi = s.truth("pods/geometry")[:, :3].T
    return x * np.sin(phi) - y * np.cos(phi)


def test_an_imu_that_agrees_with_mocap_gives_the_heading(sessions) -> None:
    fit = fit_pods([load_drive(p) for p in sessions])
    assert fit.options["heading"] == "imu" and fit.options["imu_refused"] == []
    z = (fit.lever - _true_lever(sessions[0])) / fit.sigma_lever
    assert np.all(np.abs(z) < MAX_Z), z


# before the check, on these drives: a sign flip put the lever arms up to 45σ off (15 mm),
# degrees up to 6600σ (all 0 mm), a frozen IMU up to 34σ (8 mm)
@pytest.mark.parametrize("factor", [-1.0, np.degrees(1.0), 0.0], ids=["sign", "degrees", "frozen"])
def test_an_imu_yaw_that_does_not_turn_as_mocap_is_not_used(sessions, factor) -> None:
    drives = [load_drive(p) for p in sessions]
    for d in drives:
        d.imu_yaw = factor * d.imu_yaw
    fit = fit_pods(drives)
    assert fit.options["heading"] == "mocap"
    assert any(m.startswith("spin: the IMU yaw turns") for m in fit.options["imu_refused"])
    z = (fit.lever - _true_lever(sessions[0])) / fit.sigma_lever
    assert np.all(np.abs(z) < MAX_Z), z
    assert fit.slip is not None and fit.slip.timing_s is not None  # slip against mocap
    with pytest.raises(FitError, match=r"spin: the IMU yaw turns .* --heading mocap"):
        fit_pods(drives, heading="imu")
