"""Import ROS bags (rosbag2 sqlite3 or MCAP, ROS 1 ``.bag``) into sessions, via ``rosbags``.

Each ``--topic TOPIC=NAME`` becomes one stream:

- ``nav_msgs/msg/Odometry``, ``geometry_msgs/msg/PoseStamped``,
  ``geometry_msgs/msg/PoseWithCovarianceStamped``, ``geometry_msgs/msg/TransformStamped``
  and ``tf2_msgs/msg/TFMessage`` (give the child frame: ``/tf[base_link]=mocap``) →
  a pose stream;
- ``sensor_msgs/msg/LaserScan`` → a lidar stream, one turn per scan.

Header stamps are the sample times. Where the bag's receive time of a message
differs from its header stamp, the receive times are kept as a second column
(``receive_ns`` in the pose group, ``turn_receive_ns`` in the lidar group).
Every value goes through the same checks as the file importers (finite numbers,
position limit, unit quaternions, time order and ``--duplicates``); an error names
``BAG:TOPIC:N``, the N-th (1-based) message of the topic. ``--reloc-topic`` marks
a relocalization of every pose-sensor stream at the stamp of each message on it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import LidarTurns, PoseBatch
from sensorbench.logs.importers import MAX_ABS_POSITION_M, file_sha256
from sensorbench.logs.rosbag_read import bag_info, open_bag
from sensorbench.logs.rosbag_specs import POSE_TYPES, SCAN_TYPE, TopicSpec
from sensorbench.logs.rosbag_streams import (
    BagStream,
    pose_of,
    pose_stream,
    scan_stream,
    stamp_ns,
)
from sensorbench.logs.schema import PoseFlag

__all__ = ["BagImport", "BagStream", "TopicSpec", "bag_info", "import_rosbag", "read_rosbag"]


@dataclass
class BagImport:
    """Every stream parsed from one bag, and the relocalization stamps."""

    streams: list[BagStream] = field(default_factory=list)
    reloc_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def read_rosbag(
    path: str | os.PathLike[str],
    topics: list[TopicSpec],
    reloc_topic: str | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> BagImport:
    """Parse the named topics of a bag (see the module docstring).

    Raises:
        ImportFormatError: a missing topic, an unsupported message type, a TF topic
            without the child frame, or a bad value (naming ``BAG:TOPIC:N``).
    """
    bag = Path(path)
    if not topics:
        raise ImportFormatError(f"{bag}: name at least one --topic TOPIC=NAME")
    names = [s.name for s in topics]
    if len(set(names)) != len(names):
        raise ImportFormatError(f"--topic: stream names must differ, got {names}")
    reader = open_bag(bag)
    try:
        types = {c.topic: c.msgtype for c in reader.connections}
        wanted = [s.topic for s in topics] + ([reloc_topic] if reloc_topic else [])
        for topic in wanted:
            if topic not in types:
                raise ImportFormatError(
                    f"{bag}: no topic {topic!r} (topics: {', '.join(sorted(types)) or 'none'})"
                )
        for s in topics:
            if types[s.topic] not in (*POSE_TYPES, SCAN_TYPE):
                raise ImportFormatError(
                    f"{bag}: topic {s.topic!r} has type {types[s.topic]!r}, which cannot be "
                    f"imported (supported: {', '.join((*POSE_TYPES, SCAN_TYPE))})"
                )
            if types[s.topic] == "tf2_msgs/msg/TFMessage" and not s.child_frame:
                raise ImportFormatError(
                    f"{bag}: topic {s.topic!r} is a TF topic: name the child frame, "
                    f"--topic '{s.topic}[CHILD_FRAME]={s.name}'"
                )
        rows: dict[str, list] = {t: [] for t in wanted}
        conns = [c for c in reader.connections if c.topic in rows]
        for conn, recv_ns, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            rows[conn.topic].append((int(recv_ns), msg))
    finally:
        reader.close()
    out = BagImport()
    for s in topics:
        msgs = rows[s.topic]
        if types[s.topic] == SCAN_TYPE:
            if not msgs:
                raise ImportFormatError(f"{bag}: topic {s.topic!r} has no messages")
            out.streams.append(scan_stream(bag, s, msgs, duplicates))
            continue
        poses = [
            (t, recv, p, q)
            for recv, msg in msgs
            for t, p, q in pose_of(msg, types[s.topic], s.child_frame)
        ]
        if not poses:
            frame = f" with child frame {s.child_frame!r}" if s.child_frame else ""
            raise ImportFormatError(f"{bag}: topic {s.topic!r} has no poses{frame}")
        out.streams.append(pose_stream(bag, s, poses, max_position_m, duplicates))
    if reloc_topic:
        out.reloc_ns = np.array(
            [
                stamp_ns(m.header.stamp) if hasattr(m, "header") else recv
                for recv, m in rows[reloc_topic]
            ],
            dtype=np.int64,
        )
        _flag_relocalizations(bag, reloc_topic, out)
    return out


def _flag_relocalizations(bag: Path, topic: str, out: BagImport) -> None:
    """Flag RELOCALIZED on each pose-sensor stream's first sample at or after each stamp."""
    targets = [
        b
        for b in out.streams
        if isinstance(b.imported.batch, PoseBatch) and b.spec.pose_kind() == "pose_sensor"
    ]
    if not targets:
        raise ImportFormatError(
            f"{bag}: --reloc-topic {topic!r} needs a pose-sensor stream to flag "
            "(a --topic whose kind is pose_sensor)"
        )
    for b in targets:
        batch = b.imported.batch
        k = np.searchsorted(batch.t_ns, out.reloc_ns, side="left")
        k = k[k < len(batch)]
        batch.flags[k] |= np.uint8(PoseFlag.RELOCALIZED)
        b.imported.attrs["ros_reloc_topic"] = topic


def import_rosbag(
    path: str | os.PathLike[str],
    topics: list[TopicSpec],
    session: str | os.PathLike[str],
    reloc_topic: str | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
) -> BagImport:
    """Parse the bag's topics and add one stream each to ``session`` (created if missing).

    Relocalization messages also become ``relocalization`` events. Nothing is written
    unless every topic parses, and the session changes all at once (a copy swapped in).
    """
    import h5py

    from sensorbench.logs.atomic_output import atomic_output, atomic_update
    from sensorbench.logs.writer import SessionWriter

    bag = Path(path)
    parsed = read_rosbag(bag, topics, reloc_topic, max_position_m, duplicates)
    source = {"source_file": bag.name}
    if bag.is_file():
        source["source_sha256"] = file_sha256(bag)
    session = Path(session)
    existed = session.exists()
    extra = [b for b in parsed.streams if b.receive_ns is not None]
    # one swap for the streams and their receive times: a kill or a full disk at any
    # moment leaves an existing session exactly as it was
    with atomic_update(session) if existed else atomic_output(session) as tmp:
        if existed:
            writer = SessionWriter.add_to(tmp)
        else:
            writer = SessionWriter(tmp, label="import rosbag", swmr=False)
        with writer:
            for b in parsed.streams:
                attrs = {**b.imported.attrs, **source}
                if isinstance(b.imported.batch, LidarTurns):
                    writer.add_lidar(b.spec.name, attrs=attrs)
                    writer.append_turns(b.spec.name, b.imported.batch)
                else:
                    writer.add_pose(b.spec.name, kind=b.spec.pose_kind(), attrs=attrs)
                    writer.append_pose(b.spec.name, b.imported.batch)
            for t in parsed.reloc_ns.tolist():
                writer.event(int(t), reloc_topic or "", "relocalization", f"{reloc_topic} message")
        if extra:
            with h5py.File(tmp, "a") as f:
                for b in extra:
                    if isinstance(b.imported.batch, LidarTurns):
                        group = f[f"lidar/{b.spec.name}"]
                        group.create_dataset("turn_receive_ns", data=b.receive_ns)
                    else:
                        f[f"pose/{b.spec.name}"].create_dataset("receive_ns", data=b.receive_ns)
    return parsed
