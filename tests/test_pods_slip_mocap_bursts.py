"""The slip law against mocap (drives without an IMU) on frames a host stamped in bursts
(no device time, three of every four frame steps 0 s): the wheels' speeds were divided by
those 0 s steps (floored at 1 ns), the creep's reference speed came out 1.5e6 m/s and the
law's standard errors 1e-32 m²/m (the rolled term's, for a variance of 2.5e-7)."""

from __future__ import annotations

import numpy as np
import pytest
from pods_sim_util import DRIVES, simulate

from sensorbench.characterize.pods.geometry_fit import fit_pods
from sensorbench.fusion.pod_drive import load_drive

ROLL_SIGMA_M = 0.0005  # the simulator's rolled slip, m/√m


@pytest.fixture(scope="module")
def drives(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("slip_bursts")
    out = []
    for i, name in enumerate(DRIVES):
        d = load_drive(simulate(tmp, name, 50 + i))
        d.imu_yaw = None  # the slip law against mocap
        out.append(d)
    return out


def _burst_stamped(t: np.ndarray, burst: int = 4) -> np.ndarray:
    """Frame times ``t`` (s) as a host reading every ``burst`` frames stamps them: each
    run with the time of its last frame."""
    last = np.minimum((np.arange(t.size) // burst + 1) * burst - 1, t.size - 1)
    return t[last]


def test_the_slip_law_against_mocap_holds_on_frames_stamped_in_bursts(drives) -> None:
    timed = fit_pods(drives).slip
    for d in drives:
        d.t_enc = _burst_stamped(d.t_enc)
    burst = fit_pods(drives).slip
    assert timed is not None and burst is not None and burst.timing_s is not None
    for s in (timed, burst):  # the rolled term within 4 SE of the simulator's
        assert abs(s.slip.roll_var - ROLL_SIGMA_M**2) <= 4 * s.roll_se, s.as_dict()
    # the creep's reference speed is the timed drives' (0.3 m/s), not 1e6 m/s
    ref = "speed_ref_m_per_s"
    assert burst.creep[ref] == pytest.approx(timed.creep[ref], rel=0.05)
