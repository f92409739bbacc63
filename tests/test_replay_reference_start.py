"""A replay against mocap that starts late (occluded, or switched on after the encoders):
the filters start from the reference's first usable pose, at its time, not from a pose
seconds later laid on the first encoder frame (docs/PODS.md § "Is the stated uncertainty
honest?")."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from pods_sim_util import simulate

from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.fusion.pod_kinematics import load_pod_model
from sensorbench.logs import Session

MODELS = Path(__file__).parents[1] / "examples" / "models"
LATE_S = 8.0


@pytest.fixture(scope="module")
def late(tmp_path_factory) -> Path:
    """A simulated figure-8 whose mocap is invalid for its first :data:`LATE_S` s."""
    tmp = tmp_path_factory.mktemp("late_mocap")
    path = simulate(tmp, "figure8", 3)
    out = tmp / "late.h5"
    shutil.copy(path, out)
    with h5py.File(out, "r+") as f:
        g = f["pose/mocap"]
        t = g["t_ns"][...]
        valid = g["valid"][...]
        valid[t < t[0] + LATE_S * 1e9] = 0
        g["valid"][...] = valid
    return out


def test_a_late_reference_starts_the_replay_where_it_has_a_pose(late) -> None:
    # Before: the first encoder frame took the reference pose interpolated there, which
    # np.interp clamped to mocap's first valid sample 8 s on; the filters started metres
    # off, stated a start variance of the mocap's noise, and the replay reported every
    # axis INCONSISTENT (mean NEES 5 000-31 000). Now the frames before the reference are
    # left out, said so, and the start is the truth there within the mocap's noise
    # (0.5 mm, 2 mrad) and the alignment's timing error (≤ 4 ms at ≤ 0.5 m/s, 1.6 rad/s):
    # within 1 cm and 10 mrad.
    geometry = load_pod_model(MODELS / "pods-emulated.toml")
    noise = load_noise_model(MODELS / "noise-emulated.toml")
    rp = replay_session(late, geometry, noise, reference="mocap")
    with Session(late) as s:
        truth = s.truth_rows("pose", "t_ns", "x_y_yaw")
    t_truth = (truth["t_ns"] - rp.t0_ns) * 1e-9
    t0 = rp.result.t_s[0]
    at = np.array([np.interp(t0, t_truth, truth["x_y_yaw"][:, k]) for k in range(3)])
    start = rp.result.pose[0]
    assert np.hypot(*(start[:2] - at[:2])) < 0.01, (start, at)
    assert abs((start[2] - at[2] + np.pi) % (2 * np.pi) - np.pi) < 0.01, (start, at)
    skipped = rp.info["skipped_before_reference_s"]
    assert LATE_S - 0.1 < skipped < LATE_S + 0.1, skipped
    # the same session scored from its first frame against truth reaches the same start
    full = replay_session(late, geometry, noise, reference="truth")
    assert full.info["skipped_before_reference_s"] == 0.0
    assert full.result.t_s[0] < t0 - LATE_S + 0.1


def test_a_robot_standing_still_has_no_time_offset(tmp_path) -> None:
    # No pod counts: the alignment cost is 0 at every offset and its minimum was the
    # search range's edge, -0.24 s reported as the encoder-to-mocap offset (the
    # simulator's mocap latency is 4 ms), and the reference then seemed to start 0.24 s
    # after the first frame. Now the offset is marked not identified and taken as 0 s.
    path = simulate(tmp_path, "hold", 1)
    geometry = load_pod_model(MODELS / "pods-emulated.toml")
    noise = load_noise_model(MODELS / "noise-emulated.toml")
    rp = replay_session(path, geometry, noise, reference="mocap")
    assert abs(rp.time_offset_s - 0.004) < 0.005, rp.time_offset_s
    assert rp.info["encoder_to_reference_offset_identified"] is False
    assert rp.info["skipped_before_reference_s"] == 0.0
