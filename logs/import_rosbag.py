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

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import LidarTurns, PoseBatch
from sensorbench.logs.import_times import order_times
from sensorbench.logs.importers import (
    MAX_ABS_POSITION_M,
    Imported,
    _check_positions,
    _pose_imported,
    file_sha256,
    refuse_impossible,
)
from sensorbench.logs.schema import NO_DEVICE_TIME, PoseFlag

POSE_TYPES = (
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/PoseWithCovarianceStamped",
    "geometry_msgs/msg/TransformStamped",
    "tf2_msgs/msg/TFMessage",
)
SCAN_TYPE = "sensor_msgs/msg/LaserScan"
POSE_KINDS = ("mocap", "pose_sensor", "estimate")
_SPEC = re.compile(
    r"^(?P<topic>[^=\[\]]+?)(\[(?P<child>[^\]]+)\])?=(?P<name>[^:]+)(:(?P<kind>.+))?$"
)
_TWO_PI = 2.0 * math.pi


@dataclass(frozen=True)
class TopicSpec:
    """One ``--topic``: which topic becomes which stream."""

    topic: str
    name: str
    kind: str | None = None
    """Pose stream kind; None: ``mocap`` if the name starts with it, else ``pose_sensor``."""
    child_frame: str | None = None
    """For TF topics: the child frame whose transforms are the poses."""

    @classmethod
    def parse(cls, text: str) -> TopicSpec:
        """``TOPIC[CHILD]=NAME[:KIND]``, e.g. ``/odom=odom:estimate``, ``/tf[base]=mocap``."""
        m = _SPEC.match(text.strip())
        if not m:
            raise ImportFormatError(
                f"--topic {text!r}: expected TOPIC=NAME, TOPIC=NAME:KIND or TOPIC[CHILD_FRAME]=NAME"
            )
        kind = m.group("kind")
        if kind is not None and kind not in POSE_KINDS:
            raise ImportFormatError(
                f"--topic {text!r}: kind must be one of {', '.join(POSE_KINDS)}, got {kind!r}"
            )
        return cls(m.group("topic"), m.group("name"), kind, m.group("child"))

    def pose_kind(self) -> str:
        """The pose stream kind this topic becomes."""
        if self.kind:
            return self.kind
        return "mocap" if self.name.startswith("mocap") else "pose_sensor"


@dataclass
class BagStream:
    """One parsed topic: its samples and what to store with them."""

    spec: TopicSpec
    imported: Imported
    receive_ns: np.ndarray | None = None
    """Bag receive time per kept sample (pose) or turn (lidar), when it differs from the stamp."""


@dataclass
class BagImport:
    """Every stream parsed from one bag, and the relocalization stamps."""

    streams: list[BagStream] = field(default_factory=list)
    reloc_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def _open(bag: Path) -> Any:
    from rosbags.highlevel import AnyReader, AnyReaderError

    if not bag.exists():
        raise ImportFormatError(f"{bag}: no such bag")
    try:
        reader = AnyReader([bag])
        reader.open()
    except AnyReaderError as exc:
        raise ImportFormatError(f"{bag}: not a readable ROS bag ({exc})") from None
    except Exception as exc:  # rosbags on a damaged file: AssertionError, struct.error, ...
        raise ImportFormatError(f"{bag}: not a readable ROS bag ({_what(exc)})") from None
    return reader


def _what(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _decoded(bag: Path, reader: Any, connections: list) -> Any:
    """(connection, receive ns, message, its 1-based index in its topic) of every message,
    decoded; a damaged record or message raises naming the bag, topic and index."""
    seen: dict[str, int] = {}
    records = reader.messages(connections=connections)
    while True:
        try:
            conn, recv_ns, raw = next(records)
        except StopIteration:
            return
        except Exception as exc:  # a corrupt record: rosbags raises whatever it meets
            after = ", ".join(f"{t} {n}" for t, n in seen.items()) or "none"
            raise ImportFormatError(
                f"{bag}: the bag is damaged after these messages ({after}): {_what(exc)}"
            ) from None
        seen[conn.topic] = seen.get(conn.topic, 0) + 1
        try:
            msg = reader.deserialize(raw, conn.msgtype)
        except Exception as exc:
            raise ImportFormatError(
                f"{bag}:{conn.topic}:{seen[conn.topic]}: the message cannot be decoded as "
                f"{conn.msgtype}; the bag is damaged ({_what(exc)})"
            ) from None
        yield conn, recv_ns, msg


def _stamp(msg: Any) -> int:
    return int(msg.sec) * 1_000_000_000 + int(msg.nanosec)


def bag_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Topics (type, message count), time span (s) and format of a bag.

    Every message is read and decoded, so a damaged bag is reported here as the import
    would report it.

    Raises:
        ImportFormatError: not a bag, or a damaged record or message (named).
    """
    bag = Path(path)
    reader = _open(bag)
    try:
        for _ in _decoded(bag, reader, list(reader.connections)):
            pass
        topics = {
            name: {"type": info.msgtype, "count": int(info.msgcount)}
            for name, info in sorted(reader.topics.items())
        }
        return {
            "path": str(bag),
            "format": "rosbag2" if reader.is2 else "rosbag1",
            "messages": int(reader.message_count),
            "start_ns": int(reader.start_time) if reader.message_count else None,
            "duration_s": reader.duration / 1e9 if reader.message_count else 0.0,
            "topics": topics,
        }
    finally:
        reader.close()


def _pose_of(msg: Any, msgtype: str, child: str | None) -> list[tuple[int, Any, Any]]:
    """(stamp ns, position msg, orientation msg) of every pose a message carries."""
    if msgtype == "nav_msgs/msg/Odometry":
        return [(_stamp(msg.header.stamp), msg.pose.pose.position, msg.pose.pose.orientation)]
    if msgtype == "geometry_msgs/msg/PoseStamped":
        return [(_stamp(msg.header.stamp), msg.pose.position, msg.pose.orientation)]
    if msgtype == "geometry_msgs/msg/PoseWithCovarianceStamped":
        return [(_stamp(msg.header.stamp), msg.pose.pose.position, msg.pose.pose.orientation)]
    transforms = [msg] if msgtype == "geometry_msgs/msg/TransformStamped" else msg.transforms
    return [
        (_stamp(t.header.stamp), t.transform.translation, t.transform.rotation)
        for t in transforms
        if child is None or t.child_frame_id == child
    ]


def _finite(where: str, what: str, values: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(values).all(axis=1))
    if bad.size:
        raise ImportFormatError(
            f"{where}:{int(bad[0]) + 1}: {what} {values[bad[0]].tolist()} is not finite "
            f"({bad.size} such message(s))"
        )


def _poses(
    bag: Path, spec: TopicSpec, rows: list, max_position_m: float, duplicates: str
) -> BagStream:
    where = Path(f"{bag}:{spec.topic}")
    t_ns = np.array([r[0] for r in rows], dtype=np.int64)
    recv = np.array([r[1] for r in rows], dtype=np.int64)
    pos = np.array([[r[2].x, r[2].y, r[2].z] for r in rows], dtype=np.float64).reshape(-1, 3)
    quat = np.array([[r[3].x, r[3].y, r[3].z, r[3].w] for r in rows], dtype=np.float64)
    quat = quat.reshape(-1, 4)
    index = np.arange(1, len(rows) + 1)
    _finite(str(where), "position", pos)
    _finite(str(where), "orientation", quat)
    axes = [(1, "position.x"), (2, "position.y"), (3, "position.z")]
    _check_positions(where, index, pos, axes, max_position_m)
    attrs = {
        "source_format": "rosbag",
        "ros_topic": spec.topic,
        "time_base": "ROS header stamps (ns since the Unix epoch)",
    }
    if spec.child_frame:
        attrs["ros_child_frame"] = spec.child_frame
    imported = _pose_imported(
        where, index, t_ns, pos, quat, np.ones(len(rows), bool), duplicates, attrs
    )
    kept = order_times(where, index, t_ns, duplicates).keep
    differ = bool(np.any(recv[kept] != t_ns[kept]))
    return BagStream(spec, imported, recv[kept] if differ else None)


def _scans(bag: Path, spec: TopicSpec, rows: list, duplicates: str) -> BagStream:
    where = Path(f"{bag}:{spec.topic}")
    stamps = np.array([_stamp(m.header.stamp) for _, m in rows], dtype=np.int64)
    recv = np.array([r for r, _ in rows], dtype=np.int64)
    index = np.arange(1, len(rows) + 1)
    order = order_times(where, index, stamps, duplicates)
    angle, rng, inten, t_pt, count, speed = [], [], [], [], [], []
    for k in np.flatnonzero(order.keep):
        m = rows[k][1]
        n = len(m.ranges)
        for name in ("angle_min", "angle_increment", "time_increment", "range_min", "range_max"):
            if not math.isfinite(getattr(m, name)):
                raise ImportFormatError(f"{where}:{k + 1}: {name} {getattr(m, name)} is not finite")
        if n > 1 and m.angle_increment == 0:
            raise ImportFormatError(
                f"{where}:{k + 1}: angle_increment is 0: all {n} rays at one bearing"
            )
        r = np.asarray(m.ranges, dtype=np.float64)
        # REP 117: +inf no return, -inf too close, nan error; outside [min, max] not valid
        out = np.where(np.isposinf(r) | (r > m.range_max), np.inf, r)
        out = np.where(np.isneginf(r) | np.isnan(r) | (r < m.range_min), np.nan, out)
        a = m.angle_min + m.angle_increment * np.arange(n)
        angle.append(np.mod(a, _TWO_PI))  # REP 103: CCW, 0 = forward; wrapped to [0, 2π)
        rng.append(out)
        if len(m.intensities) == n:
            inten.append(np.clip(np.rint(np.asarray(m.intensities, float)), 0, 65535))
        else:
            inten.append(np.zeros(n))
        t_pt.append(stamps[k] + np.rint(m.time_increment * 1e9 * np.arange(n)).astype(np.int64))
        count.append(n)
        speed.append(1.0 / m.scan_time if m.scan_time > 0 else math.nan)
    keep = order.keep
    turns = LidarTurns(
        stamps[keep],
        np.full(int(keep.sum()), NO_DEVICE_TIME, np.int64),
        np.array(speed),
        np.array(count),
        np.zeros(int(keep.sum())),
        np.concatenate(angle) if angle else np.zeros(0),
        np.concatenate(rng) if rng else np.zeros(0),
        np.concatenate(inten) if inten else np.zeros(0),
        np.concatenate(t_pt) if t_pt else np.zeros(0, np.int64),
    )
    first = rows[0][1]
    attrs = {
        "source_format": "rosbag",
        "ros_topic": spec.topic,
        "model": "ROS LaserScan",
        "frame": first.header.frame_id,
        "units": "angle rad CCW from sensor forward in [0, 2pi), range m, time ns",
        "ros_range_min_m": float(first.range_min),
        "ros_range_max_m": float(first.range_max),
        "time_base": "ROS header stamps (ns since the Unix epoch)",
    }
    differ = bool(np.any(recv[keep] != stamps[keep]))
    return BagStream(
        spec,
        Imported(turns, attrs, order.dropped_lines),
        recv[keep] if differ else None,
    )


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
    reader = _open(bag)
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
        for conn, recv_ns, msg in _decoded(bag, reader, conns):
            rows[conn.topic].append((int(recv_ns), msg))
    finally:
        reader.close()
    out = BagImport()
    for s in topics:
        msgs = rows[s.topic]
        if types[s.topic] == SCAN_TYPE:
            if not msgs:
                raise ImportFormatError(f"{bag}: topic {s.topic!r} has no messages")
            out.streams.append(_scans(bag, s, msgs, duplicates))
            continue
        poses = [
            (t, recv, p, q)
            for recv, msg in msgs
            for t, p, q in _pose_of(msg, types[s.topic], s.child_frame)
        ]
        if not poses:
            frame = f" with child frame {s.child_frame!r}" if s.child_frame else ""
            raise ImportFormatError(f"{bag}: topic {s.topic!r} has no poses{frame}")
        out.streams.append(_poses(bag, s, poses, max_position_m, duplicates))
    if reloc_topic:
        out.reloc_ns = np.array(
            [
                _stamp(m.header.stamp) if hasattr(m, "header") else recv
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
    from sensorbench.logs.atomic_output import atomic_output, atomic_update
    from sensorbench.logs.h5_output import guarded_h5
    from sensorbench.logs.writer import SessionWriter

    bag = Path(path)
    parsed = read_rosbag(bag, topics, reloc_topic, max_position_m, duplicates)
    for b in parsed.streams:
        refuse_impossible(Path(f"{bag}:{b.spec.topic}"), b.spec.name, b.imported.batch)
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
            with guarded_h5(tmp, "r+", shown=session) as f:
                for b in extra:
                    if isinstance(b.imported.batch, LidarTurns):
                        group = f[f"lidar/{b.spec.name}"]
                        group.create_dataset("turn_receive_ns", data=b.receive_ns)
                    else:
                        f[f"pose/{b.spec.name}"].create_dataset("receive_ns", data=b.receive_ns)
    return parsed
