"""The CDR encoder live --ros2 and the MCAP export share, against rosbags' serializer:
every message type it writes, one by one and a stream at a time, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from rosbags.typesys import Stores, get_typestore

from sensorbench.logs import ros2_cdr

STORE = get_typestore(Stores.ROS2_HUMBLE)
T = STORE.types
RNG = np.random.default_rng(3)
N = 7
STAMPS = RNG.integers(0, 2**31 * 10**9, N)
FRAMES = ("odom", "base_link_x")  # lengths that leave the next field unaligned


def _time(ns: int):
    return T["builtin_interfaces/msg/Time"](sec=int(ns // 10**9), nanosec=int(ns % 10**9))


def _header(ns: int, frame: str):
    return T["std_msgs/msg/Header"](stamp=_time(ns), frame_id=frame)


def _pose(v: np.ndarray):
    return T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=v[0], y=v[1], z=v[2]),
        orientation=T["geometry_msgs/msg/Quaternion"](x=v[3], y=v[4], z=v[5], w=v[6]),
    )


def _vec(v: np.ndarray):
    return T["geometry_msgs/msg/Vector3"](x=v[0], y=v[1], z=v[2])


def _tf(ns: int, parent: str, child: str, v: np.ndarray):
    return T["geometry_msgs/msg/TransformStamped"](
        header=_header(ns, parent), child_frame_id=child,
        transform=T["geometry_msgs/msg/Transform"](
            translation=_vec(v[:3]), rotation=_pose(v).orientation),
    )  # fmt: skip


def _cdr(msg, msgtype: str) -> bytes:
    return bytes(STORE.serialize_cdr(msg, msgtype))


def _odometry(ns: int, v: np.ndarray):
    return T["nav_msgs/msg/Odometry"](
        header=_header(ns, FRAMES[0]), child_frame_id=FRAMES[1],
        pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=_pose(v[:7]), covariance=v[7:43]),
        twist=T["geometry_msgs/msg/TwistWithCovariance"](
            twist=T["geometry_msgs/msg/Twist"](linear=_vec(v[43:46]), angular=_vec(v[46:49])),
            covariance=v[49:85]),
    )  # fmt: skip


def test_odometry_and_tf() -> None:
    values = RNG.normal(size=(N, 85))
    pairs = list(zip(STAMPS, values, strict=True))
    want = [_cdr(_odometry(int(t), v), "nav_msgs/msg/Odometry") for t, v in pairs]
    got = [ros2_cdr.odometry_rows(STAMPS[k : k + 1], FRAMES, values[k : k + 1])[0]
           for k in range(N)]  # fmt: skip
    assert got == want == ros2_cdr.odometry_rows(STAMPS, FRAMES, values)
    one = [_cdr(T["tf2_msgs/msg/TFMessage"](transforms=[_tf(int(t), *FRAMES, v[:7])]),
                "tf2_msgs/msg/TFMessage") for t, v in pairs]  # fmt: skip
    assert ros2_cdr.tf_rows(STAMPS, FRAMES, values[:, :7]) == one
    t0, base = int(STAMPS[0]), FRAMES[1]
    for n in (0, 1, N):  # lidar mounts (x, y, yaw) in the body frame, one message
        mounts = [(f"lidar{k}", tuple(v[:3])) for k, v in enumerate(values[:n])]
        msg = T["tf2_msgs/msg/TFMessage"](transforms=[
            _tf(t0, base, f, np.r_[x, y, 0.0, 0.0, 0.0, np.sin(yaw / 2), np.cos(yaw / 2)])
            for f, (x, y, yaw) in mounts])  # fmt: skip
        assert ros2_cdr.mounts_tf(t0, base, mounts) == _cdr(msg, "tf2_msgs/msg/TFMessage")


def test_one_message_is_its_row_of_the_table() -> None:
    """CdrRows(1) joins bytes, CdrRows(n) fills a table: every field kind, same bytes."""
    values = RNG.normal(size=(N, 20))

    def rows(n: int, t: np.ndarray, v: np.ndarray) -> list[bytes]:
        r = ros2_cdr.CdrRows(n)
        r.const(b"\x02")
        r.header(t, FRAMES[1])
        r.column(v[:, :3], "<f4")
        r.seq(v[:, 3:10], "<f8")
        r.times(t // 3)
        r.string("x")
        r.column(v[:, 10:], "<f8")
        return r.rows()

    table = rows(N, STAMPS, values)
    assert [rows(1, STAMPS[k : k + 1], values[k : k + 1])[0] for k in range(N)] == table


def test_poses_and_path() -> None:
    poses = RNG.normal(size=(N, 7))
    stamped = [T["geometry_msgs/msg/PoseStamped"](header=_header(int(t), "map1"), pose=_pose(p))
               for t, p in zip(STAMPS, poses, strict=True)]  # fmt: skip
    assert ros2_cdr.pose_stamped_rows(STAMPS, "map1", poses) == [
        _cdr(m, "geometry_msgs/msg/PoseStamped") for m in stamped]  # fmt: skip
    path = T["nav_msgs/msg/Path"](header=_header(int(STAMPS[-1]), "map1"), poses=stamped)
    assert ros2_cdr.path(int(STAMPS[-1]), "map1", STAMPS, poses) == _cdr(path, "nav_msgs/msg/Path")


@pytest.mark.parametrize("with_velocity", [False, True])
def test_joint_states(with_velocity: bool) -> None:
    names = ["c0", "c1", "c2", "seq", "imu_yaw"]
    pos = RNG.normal(size=(N, 5))
    vel = RNG.normal(size=(N, 5)) if with_velocity else np.zeros((N, 0))
    want = [_cdr(T["sensor_msgs/msg/JointState"](header=_header(int(t), "pods"), name=names,
                                                 position=p, velocity=v, effort=np.zeros(0)),
                 "sensor_msgs/msg/JointState")
            for t, p, v in zip(STAMPS, pos, vel, strict=True)]  # fmt: skip
    assert ros2_cdr.joint_state_rows(STAMPS, "pods", names, pos, vel) == want


def test_time_references_and_scans() -> None:
    device = RNG.integers(0, 2**31 * 10**9, N)
    want = [_cdr(T["sensor_msgs/msg/TimeReference"](header=_header(int(t), ""),
                                                    time_ref=_time(int(d)), source="ld19"),
                 "sensor_msgs/msg/TimeReference")
            for t, d in zip(STAMPS, device, strict=True)]  # fmt: skip
    got = [ros2_cdr.time_reference_rows(STAMPS[k : k + 1], device[k : k + 1], "ld19")[0]
           for k in range(N)]  # fmt: skip
    assert got == want == ros2_cdr.time_reference_rows(STAMPS, device, "ld19")
    ranges = RNG.uniform(0, 12, 901).astype(np.float32)
    ranges[::7] = np.inf
    params = (-3.1, 3.1, 0.00697, -1.1e-4, 0.1, 0.0, 12.0)
    scan = T["sensor_msgs/msg/LaserScan"](
        header=_header(int(STAMPS[0]), "lidar_front"), angle_min=params[0], angle_max=params[1],
        angle_increment=params[2], time_increment=params[3], scan_time=params[4],
        range_min=params[5], range_max=params[6], ranges=ranges, intensities=ranges * 2,
    )  # fmt: skip
    got = ros2_cdr.laser_scan(int(STAMPS[0]), "lidar_front", params, ranges, ranges * 2)
    assert got == _cdr(scan, "sensor_msgs/msg/LaserScan")


@pytest.mark.parametrize("values", [{}, {"flags": 5}, {"kind": "crc_burst", "n": "12"}])
def test_diagnostics(values: dict) -> None:
    rows = [(0, "ld19", "PACKET_LOSS", "ld19"), (2, "", "a note", "bus"), (1, "pods", "", "")]
    statuses = [
        T["diagnostic_msgs/msg/DiagnosticStatus"](
            level=level, name=name, message=message, hardware_id=hw,
            values=[T["diagnostic_msgs/msg/KeyValue"](key=k, value=str(v))
                    for k, v in values.items()],
        )
        for level, name, message, hw in rows
    ]  # fmt: skip
    for chosen in ([0], [1], [2], [0, 1, 2]):  # each status alone, then all in one array
        want = T["diagnostic_msgs/msg/DiagnosticArray"](header=_header(int(STAMPS[1]), ""),
                                                        status=[statuses[k] for k in chosen])
        got = ros2_cdr.diagnostics(int(STAMPS[1]), [(*rows[k], values) for k in chosen])
        assert got == _cdr(want, "diagnostic_msgs/msg/DiagnosticArray")
