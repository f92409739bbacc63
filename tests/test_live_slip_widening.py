"""Live is replay with IMU yaw and a slipping wheel: the pod frames of the ``pods_slip``
scenario fed to the live filters (:class:`~sensorbench.live.odometry.OdometryWorker`) in
uneven chunks give ``replay --no-repair``'s pose, stated variance (widened where the
pods disagree with the IMU) and DEGRADED flags (the four channels, the pods-against-IMU
one included) to the last bit.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from pods_sim_util import true_geometry

from sensorbench.fusion.consistency import window_threshold
from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.live.odometry import OdometryModels, OdometryWorker
from sensorbench.logs import PoseFlag, Session
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session

pytestmark = pytest.mark.usefixtures("warm_kernels")  # its filters: compiled before the tests


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    sc = load_scenario("pods_slip")
    off = {n: {"enabled": False, "model": p["model"]} for n, p in sc.lidars.items()}
    # no mocap: replay then starts at the origin with zero variance, as live does
    sc = sc.with_overrides({"lidars": off, "pose_sensor": {"enabled": False},
                            "mocap": {"enabled": False}})  # fmt: skip
    return simulate_to_session(sc, 5, tmp_path_factory.mktemp("w") / "s.h5", overwrite=True)


def test_live_widens_and_flags_as_replay_does_bit_for_bit(session) -> None:
    models = OdometryModels(true_geometry(True), FilterNoise.default(), imu=True)
    with Session(session) as s:
        stream = s.encoder_or_only()
        batch, attrs = stream.read(), dict(stream.attrs)
    got: list = []
    worker = OdometryWorker(models, attrs, lambda d, v, a: got.extend(d))
    rng = np.random.default_rng(1)
    cuts = np.unique(np.r_[0, np.cumsum(rng.integers(1, 12, len(batch))), len(batch)])
    for lo, hi in itertools.pairwise(cuts):
        if lo < len(batch):
            worker.frames(dataclasses.replace(batch, **{
                f.name: getattr(batch, f.name)[lo:hi] for f in dataclasses.fields(batch)}))
    rp = replay_session(session, models.geometry, models.noise, repair=False, monitor_tau=1.0)
    r = rp.result
    n = len(got)
    assert n > 0.95 * (r.t_s.size - 1)  # all but the frames the clock holds at the end
    pose = np.array([d.pose for d in got])
    var = np.array([d.covariance for d in got])[:, [0, 3, 5]]
    np.testing.assert_array_equal(pose[:, :2], r.pose[1 : n + 1, :2])
    np.testing.assert_array_equal(var, r.var[1 : n + 1])
    degraded = np.array([d.flags & int(PoseFlag.DEGRADED) != 0 for d in got])
    np.testing.assert_array_equal(degraded, rp.degraded[1 : n + 1])
    # the slip was seen and widened: θ's σ over 1 rad after the fault, flags raised
    assert np.sqrt(r.var[n, 2]) > 1.0 and degraded.any()
    assert rp.summary()["monitor"]["pods_vs_imu"]["onsets_s"]
    # and says so: the σ the heading was widened by, the same live and in replay --json
    assert worker.widened_rad() == rp.summary()["widened_heading_sigma_rad"] > 1.0


def test_live_sizes_each_axis_monitor_by_the_fitted_nis_tau_as_replay_does(session) -> None:
    # the axes' clipped NIS is correlated (τ 1.3-2.4 on clean drives): a window of 50 holds
    # 50/τ independent updates, and live, which cannot measure τ causally, takes the noise
    # fit's; replay of a model that has one takes the same, so the flags stay live's
    taus = {"x": 1.4, "y": 2.6, "theta": 1.9}
    base = FilterNoise.default()
    noise = FilterNoise(*(dataclasses.replace(base.axis(a), nis_tau=t) for a, t in taus.items()))
    models = OdometryModels(true_geometry(True), noise, imu=True)
    with Session(session) as s:
        attrs = dict(s.encoder_or_only().attrs)
    worker = OdometryWorker(models, attrs, lambda d, v, a: None)
    level = models.monitor_level ** (1 / 4)
    for a, t in taus.items():
        want = window_threshold(models.gate, models.monitor_window, level, t)
        assert worker.monitors[a].threshold == want != window_threshold(
            models.gate, models.monitor_window, level, 1.0)
    # the pods-against-IMU channel's u² is independent frame to frame
    assert worker.monitors["pods_vs_imu"].threshold == window_threshold(
        models.gate, models.monitor_window, level, 1.0)
    rp = replay_session(session, models.geometry, noise, repair=False)
    for a, t in taus.items():
        assert rp.monitor[a].threshold == window_threshold(
            models.gate, models.monitor_window, level, t)
