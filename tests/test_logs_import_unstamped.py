"""A bag topic whose publisher never set its header stamps (all 0, ROS's unset time) is
refused by name; it was imported as one sample, the other messages dropped as repeats
of one stamp (exit 0: 1 of 100 poses, flagged RELOCALIZED)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_typestore

from sensorbench.cli import cli
from sensorbench.logs import Session

T0 = 1_700_000_000_000_000_000
N = 100
PERIOD_NS = 50_000_000


def _bag(directory: Path, topic: str, msgtype: str, stamped: bool) -> Path:
    """An MCAP rosbag2 of N ``msgtype`` messages on ``topic`` received every 50 ms,
    header stamps the receive times or all 0."""
    store = get_typestore(Stores.ROS2_HUMBLE)
    T = store.types
    path = directory / f"bag_{msgtype.rsplit('/', 1)[-1]}_{stamped}"
    with Writer2(path, version=8, storage_plugin=StoragePlugin.MCAP) as w:
        conn = w.add_connection(topic, msgtype, typestore=store)
        for k in range(N):
            recv = T0 + k * PERIOD_NS
            ns = recv if stamped else 0
            stamp = T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)
            header = T["std_msgs/msg/Header"](stamp=stamp, frame_id="map")
            if msgtype.endswith("PoseStamped"):
                q = T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)
                p = T["geometry_msgs/msg/Point"](x=0.01 * k, y=0.0, z=0.0)
                msg = T[msgtype](header=header,
                                 pose=T["geometry_msgs/msg/Pose"](position=p, orientation=q))
            elif msgtype.endswith("LaserScan"):
                msg = T[msgtype](
                    header=header, angle_min=0.0, angle_max=6.2, angle_increment=0.1,
                    time_increment=1e-4, scan_time=0.1, range_min=0.1, range_max=10.0,
                    ranges=np.full(63, 2.0, np.float32), intensities=np.zeros(0, np.float32),
                )  # fmt: skip
            else:
                msg = T[msgtype](header=header, name=["c0"], position=np.array([float(k)]),
                                 velocity=np.zeros(0), effort=np.zeros(0))  # fmt: skip
            w.write(conn, recv, store.serialize_cdr(msg, msgtype))
    return path


TYPES = ["geometry_msgs/msg/PoseStamped", "sensor_msgs/msg/LaserScan",
         "sensor_msgs/msg/JointState"]  # fmt: skip


@pytest.mark.parametrize("msgtype", TYPES)
def test_unset_stamps_are_refused_by_name(tmp_path: Path, msgtype: str) -> None:
    bag = _bag(tmp_path, "/x", msgtype, stamped=False)
    out = tmp_path / "s.h5"
    res = CliRunner().invoke(cli, ["import", "rosbag", str(bag), "--topic", "/x=cam",
                                   "--into", str(out)])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert f"{bag}:/x:1: the header stamps of all {N} messages are 0" in res.output
    assert not out.exists()  # nothing written


def test_stamped_topic_imports_every_message(tmp_path: Path) -> None:
    bag = _bag(tmp_path, "/x", "geometry_msgs/msg/PoseStamped", stamped=True)
    out = tmp_path / "s.h5"
    res = CliRunner().invoke(cli, ["import", "rosbag", str(bag), "--topic", "/x=cam",
                                   "--into", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    with Session(out) as s:
        batch = s.pose("cam").read()
    assert len(batch) == N
    assert batch.t_ns[0] == T0 and batch.t_ns[-1] == T0 + (N - 1) * PERIOD_NS
