"""`export --format mcap --pods P --noise N`: a plain capture (pods, no estimate stream)
gives a SLAM node /odom and /tf, the filters replayed on its pod stream as `replay`
computes them.

A simulated pod session is exported; the file is read back with the `mcap` package
and rosbags' CDR deserializer. Each /odom message is the estimate `replay` writes for
the same session (stamp, pose, covariance) with the twist in the body frame; /tf
carries the same pose, odom → base_link, once per frame.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from mcap import reader as mcap_reader
from pods_sim_util import simulate
from rosbags.typesys import Stores, get_typestore

from sensorbench.cli import cli
from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.fusion.pod_kinematics import load_pod_model
from sensorbench.logs import Session
from sensorbench.logs.export_mcap import wall_clock_offset_ns

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
PODS, NOISE = MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml"
STORE = get_typestore(Stores.ROS2_HUMBLE)


def _read(path: Path) -> dict[str, list]:
    out: dict[str, list] = {}
    with open(path, "rb") as fh:
        for schema, channel, message in mcap_reader.make_reader(fh).iter_messages():
            msg = STORE.deserialize_cdr(message.data, schema.name)
            out.setdefault(channel.topic, []).append((message.log_time, msg))
    return out


def test_a_plain_capture_exports_odom_and_tf_from_a_replay(tmp_path: Path) -> None:
    session = simulate(tmp_path, "square", 7)
    with Session(session) as s:
        assert "estimate" not in s.pose_names() and s.encoder_names()
        offset = wall_clock_offset_ns(s)
    out, replayed = tmp_path / "s.mcap", tmp_path / "replayed.h5"
    r = CliRunner().invoke(cli, ["export", str(session), "--format", "mcap", "--pods",
                                 str(PODS), "--noise", str(NOISE), "-o", str(out)])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["replay", str(session), "--pods", str(PODS), "--noise",
                                 str(NOISE), "-o", str(replayed)])  # fmt: skip
    assert r.exit_code == 0, r.output
    with Session(replayed) as s:
        est = s.pose("estimate").read()
    rp = replay_session(session, load_pod_model(PODS), load_noise_model(NOISE))
    msgs = _read(out)
    odom, tf = msgs["/odom"], msgs["/tf"]
    assert len(odom) == len(tf) == len(est) > 1000
    for i, ((log_t, m), (_, t)) in enumerate(zip(odom, tf, strict=True)):
        stamp = m.header.stamp.sec * 10**9 + m.header.stamp.nanosec
        assert log_t == stamp == est.t_ns[i] + offset
        assert (m.header.frame_id, m.child_frame_id) == ("odom", "base_link")
        p = m.pose.pose.position
        assert [p.x, p.y, p.z] == [*est.position[i, :2].tolist(), 0.0]
        np.testing.assert_array_equal(m.pose.covariance.reshape(6, 6), est.covariance[i])
        q = m.pose.pose.orientation
        yaw = 2 * math.atan2(q.z, q.w)
        est_yaw = 2 * math.atan2(est.quat_xyzw[i, 2], est.quat_xyzw[i, 3])
        assert abs(math.remainder(yaw - est_yaw, 2 * math.pi)) < 1e-12
        c, s_ = math.cos(yaw), math.sin(yaw)
        vx, vy, wz = rp.result.velocity[i]
        v = m.twist.twist
        body = [c * vx + s_ * vy, -s_ * vx + c * vy, wz]
        np.testing.assert_allclose([v.linear.x, v.linear.y, v.angular.z], body, atol=1e-12)
        tcov = m.twist.covariance.reshape(6, 6)
        assert tcov[5, 5] == rp.result.tracks["theta"].var_v[i]
        var_v = rp.result.tracks["x"].var_v[i] + rp.result.tracks["y"].var_v[i]
        assert math.isclose(np.trace(tcov[:2, :2]), var_v, rel_tol=1e-12)  # a rotation
        (tr,) = t.transforms
        assert (tr.header.frame_id, tr.child_frame_id) == ("odom", "base_link")
        assert tr.header.stamp == m.header.stamp
        assert [tr.transform.translation.x, tr.transform.translation.y] == [p.x, p.y]


def test_pods_go_with_mcap_only(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["export", str(tmp_path / "x.h5"), "--format", "tum",
                                 "--stream", "x", "--pods", str(PODS), "-o",
                                 str(tmp_path / "x.tum")])  # fmt: skip
    assert r.exit_code == 2 and "--pods" in r.output
