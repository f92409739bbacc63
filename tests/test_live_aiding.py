"""Pose aiding live: the emulated robot plus the emulated network pose source, and the
estimate replay gives with the same pose-error model.

The pose source (:class:`~sensorbench.sim.pose_source.SimPoseSource`, as ``demo`` uses it)
releases the square scenario's pose-sensor samples at their simulated arrival time
(30 Hz, 30 ms latency); the live filters hold frames until the pose stream has caught up
with them, so a sample reaches the filters before its frame, as in a replay.
"""

from __future__ import annotations

import numpy as np

from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.fusion.aid_queue import PoseAidModel
from sensorbench.fusion.estimate_stream import estimate_times_ns
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.live.odometry import OdometryModels
from sensorbench.live.runtime import LiveOptions, LiveRuntime, live_summary
from sensorbench.logs import Session
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG, EmulatedRobot
from sensorbench.sim.pose_source import SimPoseSource

MODELS = DEFAULT_CONFIG.parent / "models"
# the square scenario's pose-sensor error (sim/scenarios/square.toml): offset per
# relocalization, Gauss-Markov, white; x, y in m, heading in rad
AID = PoseAidModel.from_dict({
    "x": {"sigma_b": 0.05, "sigma": 0.02, "tau_s": 5.0, "sigma_v": 0.002},
    "y": {"sigma_b": 0.05, "sigma": 0.02, "tau_s": 5.0, "sigma_v": 0.002},
    "yaw": {"sigma_b": 0.02, "sigma": 0.005, "tau_s": 8.0, "sigma_v": 0.0005},
})  # fmt: skip


def test_live_aiding_gives_the_replayed_estimate(tmp_path, warm_kernels) -> None:
    out = tmp_path / "s.h5"
    models = OdometryModels.from_files(
        MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml", imu=True
    )
    models = OdometryModels(models.geometry, models.noise, AID, imu=True)
    # compiled before the robot's clock starts: the scenario's pose samples last ~54 s
    models.warm_up()
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2, faults=False) as robot:
        streams = {"pose_sensor": ("pose_sensor", robot.sim.pose_sensor())}
        source = SimPoseSource(streams, robot.clock)
        runtime = LiveRuntime(robot.config, models, LiveOptions())
        result = run_capture(robot.config, out, 8.0, CaptureOptions(label="aided"),
                             extra_readers=[source], consumer=runtime)  # fmt: skip
    assert result.ok, result.error
    summary = live_summary(runtime)
    assert summary["errors"] == []
    rp = replay_session(out, models.geometry, models.noise, aid_model=AID, repair=False)
    with Session(out) as s:
        est = s.pose("estimate").read()
        assert s.pose("estimate").attrs["aid_period_s"] == 1 / 30.0
        late = [e for e in s.events() if e.source == "live" and "came after" in e.message]
    # every frame recorded once
    t = estimate_times_ns(rp.t0_ns, rp.result.t_s)
    np.testing.assert_array_equal(est.t_ns, t)
    # a pose sample the pose stream delivered after its frame (a starved thread on a busy
    # machine) is dropped live, applied by replay: each is counted and reported, and the
    # estimates are equal up to the first one
    assert sum(int(e.message.split()[0]) for e in late) == summary["aiding_late"]
    same = est.t_ns < min((e.t_ns for e in late), default=est.t_ns[-1] + 1)
    assert np.abs(est.position[same, :2] - rp.result.pose[same, :2]).max() <= 1e-9
    np.testing.assert_array_equal(est.covariance[same, 5, 5], rp.result.var[same, 2])
    # the fixes were applied (not just no fixes on both sides)
    accepted = sum(int(np.count_nonzero(tr.aid_accepted)) for tr in rp.result.tracks.values())
    assert accepted > 3 * 30 * 3
