"""``import rosbag --tf PARENT:CHILD=NAME``: a pose composed along /tf and /tf_static.

The bags (``tf_bag_util``) are written with rosbags' own writers (ROS 2 MCAP and ROS 1):
a drifting map→odom, a random odom→base_link, a static base_link→camera_link and
distractor frames; the truth is composed from the generating functions with plain 4×4
matrices.
Also: Odometry's frame ids and covariance are stored with the stream.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_typestore
from tf_bag_util import BASE_T, truth_map_camera, write_tf_bag

from sensorbench.cli import cli
from sensorbench.logs import Session


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
