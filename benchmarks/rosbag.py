"""``import rosbag`` against rosbags reading the same topics one at a time, and
``export --format mcap`` against mcap + rosbags' CDR writing the same messages.

The bag: a ROS 1 ``.bag`` written with rosbags' own writer, 120 s of a robot recording
(30 s in quick mode) in time order as a recorder writes it: Odometry at 50 Hz, a
PoseStamped at 30 Hz, a 450-ray LaserScan at 10 Hz, JointState pod counts at 100 Hz,
``/tf`` (map→odom at 10 Hz, odom→base_link at 50 Hz) and a ``/tf_static``. Ours is
the whole import (read, check, compose the TF chain map→base_link, write the
session); the reference is rosbags reading the topics the import reads, each on its
own (``messages(connections=[c])``) and deserializing every message — the fastest
way rosbags offers, and the floor of any importer that has rosbags decode every
message (ours decodes messages of one layout as columns). Both get one untimed
run, then 5 interleaved rounds in CPU seconds of this process (the session
writer's thread included); the figure is the median of the per-round ratios
reference/ours (target ≥ 0.8: the import costs at most 25 % above reading).

The export writes the imported session back as MCAP (every stream: scans, poses,
odometry with covariance, counts, /tf, the events); the reference is the `mcap`
package's writer with rosbags serializing the very messages the export wrote (read
back once, untimed, as rosbags message objects): the serialization and the writing
alone, no session to read and no messages to build, into the same output: chunks
uncompressed as ours (the `mcap` writer's default is zstd, work the export does not do;
checked, both files' sizes printed). Both in CPU seconds, 5 interleaved rounds; the
figure is reference/ours per message (target ≥ 1).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.benchmarks import BenchResult, interleave

AREA = "rosbag"
RATES_HZ = {"/odom": 50, "/cam/pose": 30, "/scan": 10, "/pods/counts": 100, "/tf": 50}
N_RAYS = 450
TOPICS = ["/odom=odom:estimate", "/cam/pose=cam", "/scan=ld19", "/pods/counts=pods"]
CHAIN = "map:base_link=chain"


def write_bag(path: Path, seconds: int) -> int:
    """Write the benchmark bag to ``path``; returns its message count."""
    from rosbags.rosbag1 import Writer
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    store = get_typestore(Stores.ROS1_NOETIC)
    store.register(
        get_types_from_msg("geometry_msgs/TransformStamped[] transforms", "tf2_msgs/msg/TFMessage")
    )
    T = store.types
    rng = np.random.default_rng(6)
    t0 = 1_700_000_000_000_000_000

    def header(ns: int, frame: str) -> Any:
        stamp = T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)
        return T["std_msgs/msg/Header"](seq=0, stamp=stamp, frame_id=frame)

    def pose() -> Any:
        p, q = rng.normal(0, 1, 3), rng.normal(0, 1, 4)
        q /= np.linalg.norm(q)
        return T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
            orientation=T["geometry_msgs/msg/Quaternion"](x=q[0], y=q[1], z=q[2], w=q[3]),
        )

    def transform(ns: int, parent: str, child: str) -> Any:
        p = pose()
        v = T["geometry_msgs/msg/Vector3"](x=p.position.x, y=p.position.y, z=p.position.z)
        return T["geometry_msgs/msg/TransformStamped"](
            header=header(ns, parent),
            child_frame_id=child,
            transform=T["geometry_msgs/msg/Transform"](translation=v, rotation=p.orientation),
        )

    zero3 = T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=0.0)
    twist = T["geometry_msgs/msg/TwistWithCovariance"](
        twist=T["geometry_msgs/msg/Twist"](linear=zero3, angular=zero3), covariance=np.zeros(36)
    )
    cov = np.eye(6).ravel() * 1e-4
    count = np.zeros(3, np.int64)

    def message(topic: str, ns: int, k: int) -> tuple[str, Any]:
        if topic == "/odom":
            return "nav_msgs/msg/Odometry", T["nav_msgs/msg/Odometry"](
                header=header(ns, "odom"), child_frame_id="base_link",
                pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose(), covariance=cov),
                twist=twist,
            )  # fmt: skip
        if topic == "/cam/pose":
            return "geometry_msgs/msg/PoseStamped", T["geometry_msgs/msg/PoseStamped"](
                header=header(ns, "map"), pose=pose()
            )
        if topic == "/scan":
            return "sensor_msgs/msg/LaserScan", T["sensor_msgs/msg/LaserScan"](
                header=header(ns, "laser"), angle_min=0.0, angle_max=6.27,
                angle_increment=2 * np.pi / N_RAYS, time_increment=0.1 / N_RAYS, scan_time=0.1,
                range_min=0.02, range_max=12.0,
                ranges=rng.uniform(0.1, 12, N_RAYS).astype(np.float32),
                intensities=rng.uniform(0, 255, N_RAYS).astype(np.float32),
            )  # fmt: skip
        if topic == "/pods/counts":
            count[:] += rng.integers(0, 40, 3)
            return "sensor_msgs/msg/JointState", T["sensor_msgs/msg/JointState"](
                header=header(ns, ""), name=["c0", "c1", "c2"],
                position=count.astype(np.float64), velocity=np.zeros(0), effort=np.zeros(0),
            )  # fmt: skip
        links = [transform(ns, "odom", "base_link")]
        if k % 5 == 0:
            links.append(transform(ns, "map", "odom"))
        return "tf2_msgs/msg/TFMessage", T["tf2_msgs/msg/TFMessage"](transforms=links)

    stamps = sorted(
        (t0 + round(k * 1e9 / hz) + i, topic, k)
        for i, (topic, hz) in enumerate(RATES_HZ.items())
        for k in range(seconds * hz)
    )
    conns: dict[str, Any] = {}
    with Writer(path) as w:
        static = T["tf2_msgs/msg/TFMessage"](transforms=[transform(t0, "base_link", "laser")])
        c = w.add_connection("/tf_static", "tf2_msgs/msg/TFMessage", typestore=store)
        w.write(c, t0, store.serialize_ros1(static, "tf2_msgs/msg/TFMessage"))
        for ns, topic, k in stamps:
            msgtype, msg = message(topic, ns, k)
            if topic not in conns:
                conns[topic] = w.add_connection(topic, msgtype, typestore=store)
            w.write(conns[topic], ns, store.serialize_ros1(msg, msgtype))
    return len(stamps) + 1


def _rosbags_one_at_a_time(bag: Path, topics: set[str]) -> int:
    """rosbags reading and deserializing every message of ``topics``, one topic at a time."""
    from rosbags.highlevel import AnyReader

    n = 0
    with AnyReader([bag]) as reader:
        for topic in sorted(topics):
            for conn in [c for c in reader.connections if c.topic == topic]:
                for c, _, raw in reader.messages(connections=[conn]):
                    reader.deserialize(raw, c.msgtype)
                    n += 1
    return n


def _read_mcap(path: Path) -> list[tuple[str, str, int, Any]]:
    """(topic, type, log time, rosbags message) of every message of an MCAP file."""
    from mcap.reader import make_reader
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    with open(path, "rb") as fh:
        return [(c.topic, s.name, m.log_time, store.deserialize_cdr(m.data, s.name))
                for s, c, m in make_reader(fh).iter_messages() if s is not None]  # fmt: skip


def _chunk_compression(path: Path) -> set[str]:
    """The chunk compressions of an MCAP file ("none" for uncompressed chunks)."""
    from mcap.reader import make_reader

    with open(path, "rb") as fh:
        summary = make_reader(fh).get_summary()
    return {c.compression or "none" for c in summary.chunk_indexes} if summary else set()


def _mcap_rosbags(messages: list[tuple[str, str, int, Any]], out: Path) -> None:
    """The reference: rosbags' CDR and the `mcap` writer, one channel per topic, chunks
    uncompressed as the export writes them (the writer's default is zstd)."""
    from mcap.writer import CompressionType, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    channels: dict[str, int] = {}
    with open(out, "wb") as fh:
        w = Writer(fh, compression=CompressionType.NONE)
        w.start(profile="ros2", library="reference")
        for topic, msgtype, t, msg in messages:
            if topic not in channels:
                text, _ = store.generate_msgdef(msgtype, ros_version=2)
                schema = w.register_schema(msgtype, "ros2msg", text.encode())
                channels[topic] = w.register_channel(topic, "cdr", schema)
            w.add_message(channels[topic], t, bytes(store.serialize_cdr(msg, msgtype)), t)
        w.finish()


def run(quick: bool) -> list[BenchResult]:
    """Import speed as a fraction of rosbags' own one-topic-at-a-time reading speed;
    export speed per message against mcap + rosbags' CDR."""
    from sensorbench.logs.export_mcap import export_mcap
    from sensorbench.logs.import_rosbag import TfSpec, TopicSpec, import_rosbag, read_rosbag

    seconds = 30 if quick else 120
    specs = [TopicSpec.parse(t) for t in TOPICS]
    chains = [TfSpec.parse(CHAIN)]
    read = {s.topic for s in specs} | {"/tf", "/tf_static"}
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(tmp) / "bench.bag"
        messages = write_bag(bag, seconds)
        session = Path(tmp) / "s.h5"

        def ours() -> None:
            session.unlink(missing_ok=True)
            import_rosbag(bag, read_rosbag(bag, specs, tfs=chains), session)

        timing = interleave(ours, lambda: _rosbags_one_at_a_time(bag, read), rounds=5)
        size_mb = bag.stat().st_size / 1e6
        mcap, reference = Path(tmp) / "ours.mcap", Path(tmp) / "reference.mcap"

        def export() -> None:
            mcap.unlink(missing_ok=True)
            export_mcap(session, mcap)

        export()
        written = _read_mcap(mcap)
        exporting = interleave(export, lambda: _mcap_rosbags(written, reference), rounds=5)
        chunks = _chunk_compression(mcap), _chunk_compression(reference)
        if chunks[0] != chunks[1]:
            raise RuntimeError(f"rosbag benchmark: chunks compressed {chunks[0]} vs {chunks[1]}")
        sizes_mb = mcap.stat().st_size / 1e6, reference.stat().st_size / 1e6
    return [
        BenchResult.from_rounds(
            AREA,
            "MCAP export per message vs mcap + rosbags' CDR",
            exporting.rounds(lambda o, r: r / o),
            "x",
            target=1.0,
            detail=f"the imported session, {len(written)} messages; export "
            f"{exporting.ours_median_s:.2f} s, mcap + rosbags serializing the same "
            f"messages {exporting.reference_median_s:.2f} s (CPU, median rounds); "
            f"{sizes_mb[0]:.1f} vs {sizes_mb[1]:.1f} MB, chunks {'/'.join(sorted(chunks[0]))}",
        ),
        BenchResult.from_rounds(
            AREA,
            "import speed vs rosbags reading the topics one at a time",
            timing.rounds(lambda o, r: r / o),
            "x",
            target=0.8,
            detail=f"ROS 1 bag, {seconds} s, {messages} messages ({size_mb:.1f} MB), 4 topics "
            f"+ a TF chain; import {timing.ours_median_s:.2f} s, rosbags reading "
            f"{timing.reference_median_s:.2f} s (CPU, median rounds)",
        )
    ]
