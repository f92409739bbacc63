"""ROS bag import: bags written here with rosbags' own writers (rosbag2 sqlite3 and MCAP,
ROS 1), holding odometry, poses, TF, LaserScan and a relocalization topic; every
sample, stamp and range must come back exact, and bad requests exit 2 naming the bag
and topic without touching the session.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from rosbag_util import (
    COV,
    MOCAP,
    N_RAYS,
    N_SCANS,
    ODOM,
    ODOM_DELAY,
    ODOM_POSE_COV,
    ODOM_TWIST,
    ODOM_TWIST_COV,
    POSE,
    RELOC_RECV,
    SCAN_I,
    SCAN_R,
    SCAN_T,
    T0,
    TF,
    write_bag,
)
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_typestore
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.logs import Session
from sensorbench.logs.schema import PoseFlag

TOPICS = [
    "--topic", "/odom=odom:estimate",
    "--topic", "/odin/pose=pose_sensor",
    "--topic", "/amcl_pose=amcl",
    "--topic", "/tf[base_link]=mocap",
    "--topic", "/mocap/robot=mocap_robot",
    "--topic", "/scan=lidar_front",
]  # fmt: skip


@pytest.fixture(scope="module", params=["sqlite3", "mcap", "ros1"])
def bag(request, tmp_path_factory) -> Path:
    return write_bag(tmp_path_factory.mktemp(f"bag_{request.param}"), request.param)


def _run(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_every_sample_stamp_and_range_exact(bag: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", bag, *TOPICS, "--reloc-topic", "/odin/reloc", "--into", session)
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        kinds = {n: s.pose(n).attrs["kind"] for n in s.pose_names()}
        assert kinds == {
            "odom": "estimate",
            "pose_sensor": "pose_sensor",
            "amcl": "pose_sensor",
            "mocap": "mocap",
            "mocap_robot": "mocap",
        }
        for name, (t, p, q) in (
            ("odom", ODOM),
            ("pose_sensor", POSE),
            ("amcl", COV),
            ("mocap", TF),
            ("mocap_robot", MOCAP),
        ):
            b = s.pose(name).read()
            np.testing.assert_array_equal(b.t_ns, t)
            np.testing.assert_array_equal(b.position, p)
            # normalized on import: dividing by a norm a few ulp from 1 moves each
            # component by at most 2 ulp (2 * 2.2e-16)
            np.testing.assert_allclose(b.quat_xyzw, q, rtol=0, atol=4.5e-16)
        # relocalizations: the first pose-sensor sample at or after each marker
        want = np.zeros(len(POSE[0]), bool)
        want[np.searchsorted(POSE[0], RELOC_RECV)] = True
        got = (s.pose("pose_sensor").read().flags & PoseFlag.RELOCALIZED) > 0
        assert got.tolist() == want.tolist()
        assert (s.pose("mocap").read().flags == 0).all()
        events = [e for e in s.events() if e.kind == "relocalization"]
        assert [e.t_ns for e in events] == RELOC_RECV.tolist()
        turns = s.lidar("lidar_front").read()
    np.testing.assert_array_equal(turns.t_first_ns, SCAN_T)
    np.testing.assert_array_equal(turns.count, [N_RAYS] * N_SCANS)
    np.testing.assert_array_equal(turns.range, SCAN_R.ravel())  # inf kept as no return
    np.testing.assert_array_equal(turns.intensity, SCAN_I.ravel().astype(np.uint16))
    # ROS: CCW from x forward starting at angle_min = -pi; session: the same, in [0, 2pi)
    a = np.float32(-math.pi) + np.float32(2 * math.pi / N_RAYS) * np.arange(N_RAYS)
    want_a = np.mod(a.astype(np.float64), 2 * math.pi)
    np.testing.assert_allclose(turns.angle, np.tile(want_a, N_SCANS), rtol=0, atol=1e-6)
    assert turns.angle.min() >= 0 and turns.angle.max() < 2 * math.pi
    assert abs(turns.angle[0] - math.pi) < 1e-6  # the first ray points backwards
    dt = np.float32(0.1 / N_RAYS).astype(np.float64) * 1e9
    want_t = SCAN_T[:, None] + np.rint(dt * np.arange(N_RAYS))[None, :].astype(np.int64)
    np.testing.assert_array_equal(turns.t_ns, want_t.ravel())
    with h5py.File(session, "r") as f:  # receive times only where they differ
        np.testing.assert_array_equal(f["pose/odom/receive_ns"][:], ODOM[0] + ODOM_DELAY)
        # Odometry: pose covariance, twist and twist covariance, exact
        np.testing.assert_array_equal(f["pose/odom/covariance"][:].reshape(-1, 36), ODOM_POSE_COV)
        np.testing.assert_array_equal(f["pose/odom/twist"][:], ODOM_TWIST)
        np.testing.assert_array_equal(f["pose/odom/twist_covariance"][:].reshape(-1, 36),
                                      ODOM_TWIST_COV)  # fmt: skip
        assert "twist" not in f["pose/amcl"]
        assert "receive_ns" not in f["pose/pose_sensor"]
        assert "turn_receive_ns" not in f["lidar/lidar_front"]


def test_info_lists_topics_types_and_counts(bag: Path) -> None:
    r = _run("info", bag, "--json")
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    topics = info["topics"]
    assert topics["/odom"] == {"type": "nav_msgs/msg/Odometry", "count": len(ODOM[0])}
    assert topics["/scan"] == {"type": "sensor_msgs/msg/LaserScan", "count": N_SCANS}
    assert topics["/tf"]["count"] == len(TF[0]) and len(topics) == 7
    r = _run("info", bag)
    assert r.exit_code == 0 and "/mocap/robot" in r.output and "TransformStamped" in r.output


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ("/nope=x", "no topic '/nope'"),
        ("/odin/reloc=x", "has type 'std_msgs/msg/String', which cannot be imported"),
        ("/tf=mocap", "is a TF topic: name the child frame"),
        ("/tf[gripper]=mocap", "has no poses with child frame 'gripper'"),
        ("/odom=odom:truth", "kind must be one of"),
    ],
)
def test_bad_requests_exit_2_and_leave_the_session(bag, tmp_path, topic, message) -> None:
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", bag, "--topic", "/odin/pose=pose_sensor", "--into", session)
    assert r.exit_code == 0, r.output
    before = session.read_bytes()
    r = _run("import", "rosbag", bag, "--topic", topic, "--into", session)
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert message in r.output
    assert session.read_bytes() == before


def test_repeated_stamps_in_a_bag_follow_the_policy(tmp_path: Path) -> None:
    store = get_typestore(Stores.ROS2_HUMBLE)
    T = store.types
    path = tmp_path / "dup"
    # a smooth drive with 1 mm / 1 mrad noise, so a 0.5 m re-emission is a correction
    t = POSE[0]
    s_ = (t - t[0]) / 1e9
    rng = np.random.default_rng(8)
    p = np.column_stack([0.5 * s_, 0.2 * s_, np.zeros_like(s_)]) + rng.normal(0, 1e-3, (t.size, 3))
    q = Rotation.from_rotvec(np.column_stack([np.zeros((t.size, 2)), 0.3 * s_])).as_quat()
    q = (Rotation.from_quat(q) * Rotation.from_rotvec(rng.normal(0, 1e-3, (t.size, 3)))).as_quat()

    def msg(k: int, shift: float):
        stamp = T["builtin_interfaces/msg/Time"](sec=int(t[k] // 10**9), nanosec=int(t[k] % 10**9))
        return T["geometry_msgs/msg/PoseStamped"](
            header=T["std_msgs/msg/Header"](stamp=stamp, frame_id="w"),
            pose=T["geometry_msgs/msg/Pose"](
                position=T["geometry_msgs/msg/Point"](x=p[k, 0] + shift, y=p[k, 1], z=p[k, 2]),
                orientation=T["geometry_msgs/msg/Quaternion"](
                    x=q[k, 0], y=q[k, 1], z=q[k, 2], w=q[k, 3]
                ),
            ),
        )

    with Writer2(path, version=8) as w:
        c = w.add_connection("/pose", "geometry_msgs/msg/PoseStamped", typestore=store)
        for k in range(len(t)):
            w.write(c, int(t[k]), store.serialize_cdr(msg(k, 0.0), "geometry_msgs/msg/PoseStamped"))
            if k == 10:  # re-emitted 0.5 m away at the same stamp
                w.write(
                    c,
                    int(t[k]) + 5,
                    store.serialize_cdr(msg(k, 0.5), "geometry_msgs/msg/PoseStamped"),
                )
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", path, "--topic", "/pose=cam", "--into", session)
    assert r.exit_code == 0, r.output
    assert (
        f"dropped 1 message(s) repeating a stamp (--duplicates last): {path}:/pose:11" in r.output
    )
    with Session(session) as s:
        b = s.pose("cam").read()
    assert len(b) == len(t) and b.position[10, 0] == p[10, 0] + 0.5
    assert np.flatnonzero(b.flags & PoseFlag.RELOCALIZED).tolist() == [10]
    r = _run("import", "rosbag", path, "--topic", "/pose=cam", "--into", tmp_path / "e.h5",
             "--duplicates", "error")  # fmt: skip
    assert r.exit_code == 2 and f"{path}:/pose:12: 1 duplicate timestamp" in r.output


def test_scans_of_different_sizes_and_limits(tmp_path: Path) -> None:
    """Scans that differ in ray count, start angle and range limits: each ray placed by
    its own scan's parameters (REP 103/117), as for a single scan."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    T = store.types
    path = tmp_path / "mixed"
    rng = np.random.default_rng(12)
    scans = []
    for k, (n, a0, r_min, r_max) in enumerate([(360, -math.pi, 0.1, 12.0), (720, 0.5, 0.3, 8.0)]):
        r = rng.uniform(0.0, 14.0, n).astype(np.float32)
        r[::50] = -np.inf
        r[1::50] = np.nan
        t = T0 + k * 100_000_000
        scans.append((t, n, a0, r_min, r_max, r))
    with Writer2(path, version=8) as w:
        c = w.add_connection("/scan", "sensor_msgs/msg/LaserScan", typestore=store)
        for t, n, a0, r_min, r_max, r in scans:
            stamp = T["builtin_interfaces/msg/Time"](sec=int(t // 10**9), nanosec=int(t % 10**9))
            msg = T["sensor_msgs/msg/LaserScan"](
                header=T["std_msgs/msg/Header"](stamp=stamp, frame_id="laser"),
                angle_min=a0, angle_max=a0 + 2 * math.pi, angle_increment=2 * math.pi / n,
                time_increment=0.1 / n, scan_time=0.1, range_min=r_min, range_max=r_max,
                ranges=r, intensities=np.zeros(0, np.float32),
            )  # fmt: skip
            w.write(c, int(t), store.serialize_cdr(msg, "sensor_msgs/msg/LaserScan"))
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", path, "--topic", "/scan=lidar_front", "--into", session)
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        turns = s.lidar("lidar_front").read()
    assert turns.count.tolist() == [360, 720]
    for k, (t, n, a0, r_min, r_max, rr) in enumerate(scans):
        sl = slice(int(turns.offset[k]), int(turns.offset[k] + n))
        a = np.float32(a0) + np.float32(2 * math.pi / n) * np.arange(n)
        np.testing.assert_allclose(turns.angle[sl], np.mod(a, 2 * math.pi), rtol=0, atol=1e-5)
        want = np.where(rr > np.float32(r_max), np.inf, rr)
        want = np.where(~(rr >= np.float32(r_min)), np.nan, want)
        np.testing.assert_array_equal(turns.range[sl], want.astype(np.float32))
        assert (turns.intensity[sl] == 0).all()
        dt = np.float32(0.1 / n).astype(np.float64) * 1e9
        assert turns.t_ns[sl].tolist() == (t + np.rint(dt * np.arange(n)).astype(np.int64)).tolist()


def test_odometry_round_trips_through_export_exactly(tmp_path: Path) -> None:
    """A ROS 2 bag's Odometry → import → export --format mcap → the same messages: stamps,
    frames, position, both covariances and the twist bit for bit, the orientation to the
    2 ulp its normalization on import may move it; evo reads the same trajectory from
    both bags."""
    from evo.tools import file_interface
    from rosbags.rosbag2 import Reader

    bag = write_bag(tmp_path, "mcap")
    session, out = tmp_path / "s.h5", tmp_path / "out.mcap"
    assert _run("import", "rosbag", bag, "--topic", "/odom=odom:estimate", "--into",
                session).exit_code == 0  # fmt: skip
    r = _run("export", session, "--format", "mcap", "-o", out)
    assert r.exit_code == 0, r.output
    store = get_typestore(Stores.ROS2_HUMBLE)

    def odometry(path: Path, topic: str) -> list:
        with Reader(path) as reader:
            conns = [c for c in reader.connections if c.topic == topic]
            return [store.deserialize_cdr(raw, c.msgtype)
                    for c, _, raw in reader.messages(connections=conns)]  # fmt: skip

    before, after = odometry(bag, "/odom"), odometry(out, "/odom/odom")
    assert len(after) == len(before) == len(ODOM[0])
    for a, b in zip(after, before, strict=True):
        assert (a.header.stamp, a.header.frame_id, a.child_frame_id) == (
            b.header.stamp, b.header.frame_id, b.child_frame_id)  # fmt: skip
        assert a.pose.pose.position == b.pose.pose.position
        qa, qb = (np.array([q.x, q.y, q.z, q.w]) for q in (a.pose.pose.orientation,
                                                            b.pose.pose.orientation))  # fmt: skip
        np.testing.assert_allclose(qa, qb, rtol=0, atol=4.5e-16)
        np.testing.assert_array_equal(a.pose.covariance, b.pose.covariance)
        assert a.twist.twist == b.twist.twist
        np.testing.assert_array_equal(a.twist.covariance, b.twist.covariance)
    with Reader(bag) as rb, Reader(out) as ro:
        t0 = file_interface.read_bag_trajectory(rb, "/odom")
        t1 = file_interface.read_bag_trajectory(ro, "/odom/odom")
    np.testing.assert_array_equal(t0.timestamps, t1.timestamps)
    np.testing.assert_array_equal(t0.positions_xyz, t1.positions_xyz)
    np.testing.assert_allclose(t0.orientations_quat_wxyz, t1.orientations_quat_wxyz, atol=4.5e-16)
