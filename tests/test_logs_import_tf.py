"""``import rosbag --tf PARENT:CHILD=NAME``: a pose composed along /tf and /tf_static.

The bags are written here with rosbags' own writers (ROS 2 MCAP and ROS 1): a drifting
map→odom at 10 Hz, a random odom→base_link at ~50 Hz (irregular stamps, the fastest
link), a static base_link→camera_link, and distractor frames. The truth is composed in
this file with plain 4×4 matrices from the generating functions: map→odom moves
linearly and turns at a constant rate about a fixed axis, so tf2's rule (linear +
slerp between the two nearest samples) reproduces it exactly between its samples.
Also: Odometry's frame ids and covariance are stored with the stream.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session

pytest.importorskip("rosbags")
from rosbags.rosbag1 import Writer as Writer1
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

T0 = 1_700_000_000_000_000_000
RNG = np.random.default_rng(29)
# map->odom: 10 Hz from 0.5 s to 9.5 s
ODOM_T = T0 + np.arange(500_000_000, 9_500_000_001, 100_000_000)
DRIFT_V = np.array([0.03, -0.02, 0.004])  # m/s
DRIFT_P0 = np.array([1.5, -0.7, 0.02])
DRIFT_AXIS = np.array([0.1, 0.2, 1.0]) / np.linalg.norm([0.1, 0.2, 1.0])
DRIFT_W = 0.05  # rad/s
# odom->base_link: ~50 Hz over 0..10 s (beyond map->odom on both ends)
BASE_T = T0 + np.cumsum(RNG.integers(15_000_000, 25_000_000, 500))
BASE_T = BASE_T[BASE_T < T0 + 10_000_000_000]
BASE_P = np.cumsum(RNG.normal(0, 0.01, (BASE_T.size, 3)), axis=0)
BASE_AA = np.cumsum(RNG.normal(0, 0.02, (BASE_T.size, 3)), axis=0)  # axis-angle walk
CAM_P = np.array([0.12, -0.03, 0.25])
CAM_AA = np.array([-1.2, 0.0, -1.5])  # a camera optical frame, roughly


def _matrix(axis_angle: np.ndarray) -> np.ndarray:
    """Rodrigues' formula, (k, 3) axis-angle -> (k, 3, 3)."""
    aa = np.atleast_2d(axis_angle)
    theta = np.linalg.norm(aa, axis=1)[:, None, None]
    k = aa / np.maximum(np.linalg.norm(aa, axis=1), 1e-300)[:, None]
    kx = np.zeros((aa.shape[0], 3, 3))
    kx[:, 0, 1], kx[:, 0, 2], kx[:, 1, 2] = -k[:, 2], k[:, 1], -k[:, 0]
    kx = kx - kx.transpose(0, 2, 1)
    return np.eye(3) + np.sin(theta) * kx + (1 - np.cos(theta)) * (kx @ kx)


def _quat(axis_angle: np.ndarray) -> np.ndarray:
    """(k, 3) axis-angle -> (k, 4) quaternion x y z w."""
    aa = np.atleast_2d(axis_angle)
    theta = np.linalg.norm(aa, axis=1)
    k = aa / np.maximum(theta, 1e-300)[:, None]
    return np.column_stack([k * np.sin(theta / 2)[:, None], np.cos(theta / 2)])


def _homogeneous(p: np.ndarray, aa: np.ndarray) -> np.ndarray:
    out = np.tile(np.eye(4), (np.atleast_2d(p).shape[0], 1, 1))
    out[:, :3, :3] = _matrix(aa)
    out[:, :3, 3] = p
    return out


def _drift(t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = ((t_ns - ODOM_T[0]) / 1e9)[:, None]
    return DRIFT_P0 + DRIFT_V * s, DRIFT_AXIS * DRIFT_W * s


def truth_map_camera() -> tuple[np.ndarray, np.ndarray]:
    """Stamps and 4×4 poses of camera_link in map where tf2 can compose them."""
    stamps = BASE_T
    inside = (stamps >= ODOM_T[0]) & (stamps <= ODOM_T[-1])
    t = stamps[inside]
    drift = _homogeneous(*_drift(t))
    base = _homogeneous(BASE_P[inside], BASE_AA[inside])
    cam = _homogeneous(CAM_P, CAM_AA)[0]
    return t, drift @ base @ cam


def write_tf_bag(directory: Path, fmt: str) -> Path:
    """map->odom, odom->base_link on /tf; base_link->camera_link, ->laser on /tf_static;
    /odom Odometry with a covariance."""
    ros1 = fmt == "ros1"
    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
    if ros1:
        store.register(
            get_types_from_msg(
                "geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage"
            )
        )
    T = store.types
    slash = "/" if ros1 else ""  # ROS 1 bags often carry frame ids with a leading slash

    def header(ns: int, frame: str):
        stamp = T["builtin_interfaces/msg/Time"](sec=int(ns // 10**9), nanosec=int(ns % 10**9))
        if ros1:
            return T["std_msgs/msg/Header"](seq=0, stamp=stamp, frame_id=slash + frame)
        return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame)

    def tr(ns, parent, child, p, q):
        return T["geometry_msgs/msg/TransformStamped"](
            header=header(int(ns), parent),
            child_frame_id=slash + child,
            transform=T["geometry_msgs/msg/Transform"](
                translation=T["geometry_msgs/msg/Vector3"](x=p[0], y=p[1], z=p[2]),
                rotation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
            ),
        )

    def tfm(transforms):
        return T["tf2_msgs/msg/TFMessage"](transforms=transforms)

    out = []
    dp, da = _drift(ODOM_T)
    dq = _quat(da)
    for k, t in enumerate(ODOM_T):
        out.append(("/tf", int(t) + 2_000_000, tfm([tr(t, "map", "odom", dp[k], dq[k])])))
    bq = _quat(BASE_AA)
    wheel = _quat(np.array([[0.0, 0.4, 0.0]]))[0]
    for k, t in enumerate(BASE_T):
        # the same message also moves a wheel: a link off the chain
        msg = tfm(
            [
                tr(t, "base_link", "wheel", [0, 0.2, 0], wheel),
                tr(t, "odom", "base_link", BASE_P[k], bq[k]),
            ]
        )
        out.append(("/tf", int(t) + 1_000_000, msg))
    cam_q = _quat(CAM_AA)[0]
    static = tfm(
        [tr(T0, "base_link", "camera_link", CAM_P, cam_q),
         tr(T0, "base_link", "laser", [0.2, 0.0, 0.1], [0.0, 0.0, 1.0, 0.0])]
    )  # fmt: skip
    out.append(("/tf_static", T0, static))
    cov = np.arange(36, dtype=np.float64) * 1e-4
    odom_t = BASE_T[::5]
    for k, t in zip(range(0, BASE_T.size, 5), odom_t, strict=True):
        pose = T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=BASE_P[k, 0], y=BASE_P[k, 1], z=BASE_P[k, 2]),
            orientation=T["geometry_msgs/msg/Quaternion"](
                x=bq[k, 0], y=bq[k, 1], z=bq[k, 2], w=bq[k, 3]
            ),
        )
        twist = T["geometry_msgs/msg/TwistWithCovariance"](
            twist=T["geometry_msgs/msg/Twist"](
                linear=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
                angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0),
            ),
            covariance=np.zeros(36),
        )
        msg = T["nav_msgs/msg/Odometry"](
            header=header(int(t), "odom"),
            child_frame_id="base_link",
            pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=cov + k),
            twist=twist,
        )
        out.append(("/odom", int(t) + 3_000_000, msg))
    types = {
        "/tf": "tf2_msgs/msg/TFMessage",
        "/tf_static": "tf2_msgs/msg/TFMessage",
        "/odom": "nav_msgs/msg/Odometry",
    }
    if ros1:
        path = directory / "tf.bag"
        writer = Writer1(path)
        serialize = store.serialize_ros1
    else:
        path = directory / "tf_mcap"
        writer = Writer2(path, version=8, storage_plugin=StoragePlugin.MCAP)
        serialize = store.serialize_cdr
    conns: dict = {}
    with writer:
        for topic, recv, msg in sorted(out, key=lambda m: m[1]):
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, types[topic], typestore=store)
            writer.write(conns[topic], recv, serialize(msg, types[topic]))
    return path


@pytest.fixture(scope="module", params=["mcap", "ros1"])
def bag(request, tmp_path_factory) -> Path:
    return write_tf_bag(tmp_path_factory.mktemp(f"tf_{request.param}"), request.param)


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _pose_matrices(position: np.ndarray, quat: np.ndarray) -> np.ndarray:
    """4×4 from position and quaternion x y z w, written out (no scipy)."""
    x, y, z, w = quat.T
    out = np.tile(np.eye(4), (position.shape[0], 1, 1))
    out[:, 0, :3] = np.column_stack(
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)]
    )
    out[:, 1, :3] = np.column_stack(
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)]
    )
    out[:, 2, :3] = np.column_stack(
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]
    )
    out[:, :3, 3] = position
    return out


def _rotation_error_rad(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    rel = np.transpose(a[:, :3, :3], (0, 2, 1)) @ b[:, :3, :3]
    return np.arccos(np.clip((np.trace(rel, axis1=1, axis2=2) - 1) / 2, -1, 1))


def test_chain_equals_the_composed_truth(bag: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", bag, "--tf", "map:camera_link=cam", "--tf",
             "camera_link:map=map_in_cam:mocap", "--into", session)  # fmt: skip
    assert r.exit_code == 0, r.output
    t, truth = truth_map_camera()
    skipped = BASE_T.size - t.size
    assert skipped > 0 and f"({skipped} outside another link's samples skipped)" in r.output
    assert "chain map -> odom -> base_link -> camera_link" in r.output
    with Session(session) as s:
        b = s.pose("cam").read()
        attrs = s.pose("cam").attrs
        inv = s.pose("map_in_cam").read()
        assert s.pose("map_in_cam").attrs["kind"] == "mocap"
    np.testing.assert_array_equal(b.t_ns, t)  # the stamps of the fastest link, odom->base_link
    got = _pose_matrices(b.position, b.quat_xyzw)
    # exact but for float rounding: tf2's interpolation reproduces the drift's motion
    assert np.abs(got[:, :3, 3] - truth[:, :3, 3]).max() < 1e-9
    assert _rotation_error_rad(got, truth).max() < 1e-7
    inv_truth = np.linalg.inv(truth)
    got_inv = _pose_matrices(inv.position, inv.quat_xyzw)
    assert np.abs(got_inv[:, :3, 3] - inv_truth[:, :3, 3]).max() < 1e-9
    assert attrs["ros_frame_id"] == "map" and attrs["ros_child_frame_id"] == "camera_link"
    assert attrs["ros_tf_stamps_from"] == "odom->base_link"
    assert attrs["ros_tf_stamps_skipped"] == skipped


def test_missing_frame_lists_the_bags_frames(bag: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", bag, "--tf", "map:gripper=cam", "--into", session)
    assert r.exit_code == 2, r.output
    assert "no frame 'gripper'" in r.output
    assert "frames: base_link, camera_link, laser, map, odom, wheel" in r.output
    assert not session.exists()
    r = _run("import", "rosbag", bag, "--tf", "base_link:laser=x", "--into", session)
    assert r.exit_code == 2 and "every link of base_link -> laser is static" in r.output


def test_odometry_frames_and_covariance_are_stored(bag: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", bag, "--topic", "/odom=odom:estimate", "--into", session)
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        attrs = s.pose("odom").attrs
        b = s.pose("odom").read()
    assert attrs["ros_frame_id"].lstrip("/") == "odom"
    assert attrs["ros_child_frame_id"] == "base_link"
    np.testing.assert_array_equal(b.t_ns, BASE_T[::5])
    with h5py.File(session, "r") as f:
        cov = f["pose/odom/covariance"][:]
    k = np.arange(0, BASE_T.size, 5)
    want = (np.arange(36) * 1e-4)[None, :] + k[:, None]
    np.testing.assert_array_equal(cov.reshape(-1, 36), want)


def test_lidar_mount_comes_from_tf_static(tmp_path: Path) -> None:
    """A LaserScan's frame fixed to base_link in /tf_static gives the stream's mount."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    T = store.types
    path = tmp_path / "scan"
    stamp = T["builtin_interfaces/msg/Time"](sec=1, nanosec=0)
    static = T["tf2_msgs/msg/TFMessage"](
        transforms=[
            T["geometry_msgs/msg/TransformStamped"](
                header=T["std_msgs/msg/Header"](stamp=stamp, frame_id="base_link"),
                child_frame_id="laser",
                transform=T["geometry_msgs/msg/Transform"](
                    translation=T["geometry_msgs/msg/Vector3"](x=0.2, y=-0.05, z=0.1),
                    rotation=T["geometry_msgs/msg/Quaternion"](
                        x=0.0, y=0.0, z=np.sin(0.3), w=np.cos(0.3)
                    ),
                ),
            )
        ]
    )
    scan = T["sensor_msgs/msg/LaserScan"](
        header=T["std_msgs/msg/Header"](stamp=stamp, frame_id="laser"),
        angle_min=0.0, angle_max=1.0, angle_increment=0.5, time_increment=0.0, scan_time=0.1,
        range_min=0.1, range_max=10.0, ranges=np.ones(3, np.float32),
        intensities=np.zeros(3, np.float32),
    )  # fmt: skip
    with Writer2(path, version=8) as w:
        c = w.add_connection("/tf_static", "tf2_msgs/msg/TFMessage", typestore=store)
        w.write(c, 10**9, store.serialize_cdr(static, "tf2_msgs/msg/TFMessage"))
        c = w.add_connection("/scan", "sensor_msgs/msg/LaserScan", typestore=store)
        w.write(c, 10**9, store.serialize_cdr(scan, "sensor_msgs/msg/LaserScan"))
    session = tmp_path / "s.h5"
    r = _run("import", "rosbag", path, "--topic", "/scan=lidar_front", "--into", session)
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        mount = s.lidar("lidar_front").attrs["mount_xy_yaw"]
    np.testing.assert_allclose(mount, [0.2, -0.05, 0.6], rtol=0, atol=1e-12)
