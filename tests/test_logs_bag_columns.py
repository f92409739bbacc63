"""Bag messages decoded as columns (``logs/bag_columns.py``) keep exactly what decoding
them one by one keeps: every extract of ``import rosbag`` on ROS 1, little- and
big-endian CDR bags, messages of one layout, of several lengths and of one length but
different strings (those decoded one by one), NaN included, compared bit for bit."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rosbags.rosbag1 import Writer as Writer1
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Writer2
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from sensorbench.cli import cli
from sensorbench.logs import rosbag_streams as rs
from sensorbench.logs.bag_columns import columns
from sensorbench.logs.import_rosbag import _deserializer, open_bag, read_topics
from sensorbench.logs.tf_tree import TfCollector

T0 = 1_700_000_000_000_000_000
TYPES = {"/odom": "nav_msgs/msg/Odometry", "/pose": "geometry_msgs/msg/PoseStamped",
         "/cov": "geometry_msgs/msg/PoseWithCovarianceStamped",
         "/mocap": "geometry_msgs/msg/TransformStamped", "/tf": "tf2_msgs/msg/TFMessage",
         "/joints": "sensor_msgs/msg/JointState"}  # fmt: skip


def _store(ros1: bool):
    store = get_typestore(Stores.ROS1_NOETIC if ros1 else Stores.ROS2_HUMBLE)
    if ros1:
        store.register(
            get_types_from_msg("geometry_msgs/TransformStamped[] transforms", TYPES["/tf"])
        )
    return store


def _messages(store, ros1: bool, rng) -> list[tuple[str, int, object]]:
    T = store.types

    def header(ns: int, frame: str):
        stamp = T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)
        extra = {"seq": int(rng.integers(0, 2**32))} if ros1 else {}
        return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame, **extra)

    def xyz(cls: str, v):
        return T[cls](x=v[0], y=v[1], z=v[2])

    def quat():
        q = rng.normal(0, 1, 4)
        return T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3])

    def pose():
        return T["geometry_msgs/msg/Pose"](
            position=xyz("geometry_msgs/msg/Point", rng.normal(0, 3, 3)), orientation=quat()
        )

    def transform(ns: int, child: str):
        return T["geometry_msgs/msg/TransformStamped"](
            header=header(ns, "odom"), child_frame_id=child,
            transform=T["geometry_msgs/msg/Transform"](
                translation=xyz("geometry_msgs/msg/Vector3", rng.normal(0, 3, 3)), rotation=quat()
            ),
        )  # fmt: skip

    def covariant(k: int):
        cov = rng.normal(0, 1, 36)
        cov[k % 36] = np.nan
        return T["geometry_msgs/msg/PoseWithCovariance"](pose=pose(), covariance=cov)

    out = []
    for k in range(40):
        ns = T0 + k * 20_000_000 + int(rng.integers(0, 1000))
        twist = T["geometry_msgs/msg/TwistWithCovariance"](
            twist=T["geometry_msgs/msg/Twist"](
                linear=xyz("geometry_msgs/msg/Vector3", rng.normal(0, 1, 3)),
                angular=xyz("geometry_msgs/msg/Vector3", rng.normal(0, 1, 3)),
            ),
            covariance=rng.normal(0, 1, 36),
        )
        frame = "map" if k % 5 == 2 else "odom"  # 8 messages of another length
        out.append(("/odom", ns, T[TYPES["/odom"]](header=header(ns, frame), child_frame_id="base",
                                                  pose=covariant(k), twist=twist)))  # fmt: skip
        # one length, a different frame in each: decoded one by one
        stamped = T[TYPES["/pose"]](header=header(ns, f"a{k:02d}"), pose=pose())
        out.append(("/pose", ns + 1, stamped))
        out.append(("/cov", ns + 2, T[TYPES["/cov"]](header=header(ns, "map"), pose=covariant(k))))
        out.append(("/mocap", ns + 3, transform(ns, "robot")))
        links = [transform(ns, c) for c in ("base_link", "camera")[: k % 3]]
        out.append(("/tf", ns + 4, T[TYPES["/tf"]](transforms=links)))
        counts = rng.integers(-(2**40), 2**40, 3).astype(np.float64)
        out.append(("/joints", ns + 5, T[TYPES["/joints"]](
            header=header(ns, ""), name=["c0", "c1", "c2"], position=counts,
            velocity=rng.normal(0, 1, 3 * (k % 2)), effort=np.zeros(0),
        )))  # fmt: skip
    return out


def _write(directory: Path, fmt: str) -> Path:
    ros1, rng = fmt == "ros1", np.random.default_rng(11)
    store = _store(ros1)
    if ros1:
        path, writer = directory / "b.bag", Writer1(directory / "b.bag")
        serialize = store.serialize_ros1
    else:
        path = directory / f"b_{fmt}"
        writer = Writer2(path, version=8, storage_plugin=StoragePlugin.MCAP)

        def serialize(msg, msgtype):
            return store.serialize_cdr(msg, msgtype, little_endian=fmt == "cdr_le")

    conns: dict[str, object] = {}
    with writer:
        for topic, ns, msg in _messages(store, ros1, rng):
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, TYPES[topic], typestore=store)
            writer.write(conns[topic], ns, serialize(msg, TYPES[topic]))
    return path


def _plain(value):
    """A row with every number as its exact bits (NaN equals NaN), arrays as float64."""
    if isinstance(value, np.ndarray):
        return ("array", np.asarray(value, np.float64).tobytes())
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, list | tuple):
        return tuple(_plain(v) for v in value)
    return value


def _extracts() -> list:
    uses = [(t, rs.topic_extract(TYPES[t], None)) for t in ("/odom", "/pose", "/cov", "/mocap")]
    tf = [("/tf", rs.topic_extract(TYPES["/tf"], "camera")),
          ("/tf", TfCollector().extract(static=False))]  # fmt: skip
    return [*uses, *tf, ("/joints", rs.count_extract)]


@pytest.mark.parametrize("fmt", ["ros1", "cdr_le", "cdr_be"])
def test_columns_keep_what_one_by_one_decoding_keeps(fmt: str, tmp_path: Path) -> None:
    bag = _write(tmp_path, fmt)
    reader = open_bag(bag)
    try:
        many = read_topics(bag, reader, _extracts())
        one = read_topics(bag, reader, [(t, fn.one) for t, fn in _extracts()])
        # both ways taken: /odom's 32 messages in "odom" share a layout, /pose's do not
        for topic, frames, expected in (("/odom", {"odom"}, True), ("/pose", None, False)):
            conn = next(c for c in reader.connections if c.topic == topic)
            decode = _deserializer(reader, conn.msgtype)
            raws = [raw for _, _, raw in reader.messages(connections=[conn])
                    if frames is None or decode(raw).header.frame_id in frames]  # fmt: skip
            assert (columns(reader, conn.msgtype, raws, decode) is not None) == expected, topic
    finally:
        reader.close()
    assert [len(rows) for rows in many] == [40] * len(many)
    assert _plain(many) == _plain(one)


def test_a_damaged_message_is_named_by_its_number(tmp_path: Path) -> None:
    store = _store(ros1=True)
    messages = [m for m in _messages(store, True, np.random.default_rng(3)) if m[0] == "/pose"]
    bag = tmp_path / "cut.bag"
    with Writer1(bag) as writer:
        conn = writer.add_connection("/pose", TYPES["/pose"], typestore=store)
        for k, (_, ns, msg) in enumerate(messages):
            raw = bytes(store.serialize_ros1(msg, TYPES["/pose"]))
            writer.write(conn, ns, raw[:20] if k == 2 else raw)
    result = CliRunner().invoke(cli, ["import", "rosbag", str(bag), "--topic", "/pose=cam",
                                      "--into", str(tmp_path / "s.h5")])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"{bag}:/pose:3: cannot read the message" in result.output, result.output
