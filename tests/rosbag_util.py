"""A ROS bag of known content, written with rosbags' own writers (rosbag2 sqlite3 and
MCAP, ROS 1): odometry, poses, TF, LaserScan and a relocalization topic, each sample
kept here as the truth the import tests compare with."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from rosbags.rosbag1 import Writer as Writer1
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_types_from_msg, get_typestore
from scipy.spatial.transform import Rotation

T0 = 1_700_000_000_123_456_789
RNG = np.random.default_rng(5)


def _poses(n: int, rate_hz: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = T0 + np.cumsum(RNG.integers(int(0.8e9 / rate_hz), int(1.2e9 / rate_hz), n))
    return t, RNG.uniform(-4, 4, (n, 3)), Rotation.random(n, random_state=RNG).as_quat()


ODOM = _poses(50, 20.0)
POSE = _poses(40, 15.0)
COV = _poses(30, 10.0)
TF = _poses(60, 30.0)
MOCAP = _poses(60, 30.0)
RELOC_RECV = np.sort(RNG.choice(POSE[0][3:-3], 3, replace=False)) - 1_000  # 1 µs before a pose
N_SCANS, N_RAYS = 6, 360
SCAN_T = T0 + np.arange(N_SCANS) * 100_000_000
SCAN_R = RNG.uniform(0.2, 11.0, (N_SCANS, N_RAYS)).astype(np.float32)
SCAN_R[:, ::37] = np.inf  # no return
SCAN_I = RNG.integers(0, 255, (N_SCANS, N_RAYS)).astype(np.float32)
ODOM_DELAY = 3_000_000  # the bag receives odometry 3 ms after its stamp
ODOM_TWIST = RNG.normal(0, 0.5, (len(ODOM[0]), 6))
ODOM_POSE_COV = RNG.normal(0, 1e-3, (len(ODOM[0]), 36))
ODOM_TWIST_COV = RNG.normal(0, 1e-4, (len(ODOM[0]), 36))


def _messages(store) -> list[tuple[str, str, int, object]]:
    """(topic, type, receive ns, message) for the whole bag."""
    T = store.types
    ros1 = "seq" in {f for f in T["std_msgs/msg/Header"].__dataclass_fields__}

    def header(ns: int, frame: str = "world"):
        stamp = T["builtin_interfaces/msg/Time"](sec=int(ns // 10**9), nanosec=int(ns % 10**9))
        if ros1:
            return T["std_msgs/msg/Header"](seq=0, stamp=stamp, frame_id=frame)
        return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame)

    def pose(p, q):
        return T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
            orientation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
        )

    def transform(ns, child, p, q):
        return T["geometry_msgs/msg/TransformStamped"](
            header=header(ns),
            child_frame_id=child,
            transform=T["geometry_msgs/msg/Transform"](
                translation=T["geometry_msgs/msg/Vector3"](x=p[0], y=p[1], z=p[2]),
                rotation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
            ),
        )

    cov = np.zeros(36)
    out = []
    for k, (t, p, q) in enumerate(zip(*ODOM, strict=True)):
        v = ODOM_TWIST[k]
        msg = T["nav_msgs/msg/Odometry"](
            header=header(t, "odom"),
            child_frame_id="base_link",
            pose=T["geometry_msgs/msg/PoseWithCovariance"](
                pose=pose(p, q), covariance=ODOM_POSE_COV[k]
            ),
            twist=T["geometry_msgs/msg/TwistWithCovariance"](
                twist=T["geometry_msgs/msg/Twist"](
                    linear=T["geometry_msgs/msg/Vector3"](x=v[0], y=v[1], z=v[2]),
                    angular=T["geometry_msgs/msg/Vector3"](x=v[3], y=v[4], z=v[5]),
                ),
                covariance=ODOM_TWIST_COV[k],
            ),
        )
        out.append(("/odom", "nav_msgs/msg/Odometry", int(t) + ODOM_DELAY, msg))
    for t, p, q in zip(*POSE, strict=True):
        msg = T["geometry_msgs/msg/PoseStamped"](header=header(t), pose=pose(p, q))
        out.append(("/odin/pose", "geometry_msgs/msg/PoseStamped", int(t), msg))
    for t, p, q in zip(*COV, strict=True):
        msg = T["geometry_msgs/msg/PoseWithCovarianceStamped"](
            header=header(t),
            pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose(p, q), covariance=cov),
        )
        out.append(("/amcl_pose", "geometry_msgs/msg/PoseWithCovarianceStamped", int(t), msg))
    for t, p, q in zip(*TF, strict=True):
        other = transform(t, "camera", -p, q)
        msg = T["tf2_msgs/msg/TFMessage"](transforms=[other, transform(t, "base_link", p, q)])
        out.append(("/tf", "tf2_msgs/msg/TFMessage", int(t), msg))
    for t, p, q in zip(*MOCAP, strict=True):
        msg = transform(t, "robot", p, q)
        out.append(("/mocap/robot", "geometry_msgs/msg/TransformStamped", int(t), msg))
    for k in range(N_SCANS):
        msg = T["sensor_msgs/msg/LaserScan"](
            header=header(SCAN_T[k], "laser"),
            angle_min=-math.pi,
            angle_max=math.pi - 2 * math.pi / N_RAYS,
            angle_increment=2 * math.pi / N_RAYS,
            time_increment=0.1 / N_RAYS,
            scan_time=0.1,
            range_min=0.1,
            range_max=12.0,
            ranges=SCAN_R[k],
            intensities=SCAN_I[k],
        )
        out.append(("/scan", "sensor_msgs/msg/LaserScan", int(SCAN_T[k]), msg))
    for t in RELOC_RECV:
        out.append(
            ("/odin/reloc", "std_msgs/msg/String", int(t), T["std_msgs/msg/String"](data="x"))
        )
    return sorted(out, key=lambda m: m[2])


def write_bag(directory: Path, fmt: str) -> Path:
    """A bag of every message above: ``sqlite3`` or ``mcap`` rosbag2, or ``ros1``."""
    if fmt == "ros1":
        store = get_typestore(Stores.ROS1_NOETIC)
        # the Noetic store lacks tf2_msgs; its definition is one line
        store.register(
            get_types_from_msg(
                "geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage"
            )
        )
        path = directory / "run.bag"
        writer = Writer1(path)
        serialize = store.serialize_ros1
    else:
        store = get_typestore(Stores.ROS2_HUMBLE)
        path = directory / f"run_{fmt}"
        plugin = StoragePlugin.MCAP if fmt == "mcap" else StoragePlugin.SQLITE3
        writer = Writer2(path, version=8, storage_plugin=plugin)
        serialize = store.serialize_cdr
    conns = {}
    with writer:
        for topic, msgtype, recv, msg in _messages(store):
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=store)
            writer.write(conns[topic], recv, serialize(msg, msgtype))
    return path
