"""ROS messages of one topic → one stream's samples, checked (for ``import rosbag``).

Poses (Odometry, PoseStamped, PoseWithCovarianceStamped, TransformStamped, TF with a
child frame), LaserScan turns, JointState counts, and what companion topics add to
them: device times (TimeReference), sample flags (DiagnosticArray); diagnostics
and log messages as session events. Every error names ``BAG:TOPIC:N``, the N-th
(1-based) message of the topic.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.import_times import order_times
from sensorbench.logs.importers import Imported, _check_positions, _pose_imported
from sensorbench.logs.rosbag_specs import (
    DIAGNOSTICS_TYPE,
    SEQ_JOINT,
    YAW_JOINT,
    TfSpec,
    TopicSpec,
)
from sensorbench.logs.schema import NO_DEVICE_TIME
from sensorbench.logs.tf_tree import TfTree

_COUNTER = re.compile(r"c(\d+)")
_TWO_PI = 2.0 * math.pi
TIME_BASE = "ROS header stamps (ns since the Unix epoch)"


@dataclass
class BagStream:
    """One parsed topic (or TF chain): its samples and what to store with them."""

    spec: TopicSpec | TfSpec
    imported: Imported
    receive_ns: np.ndarray | None = None
    """Bag receive time per kept sample (pose) or turn (lidar), when it differs from the stamp."""
    covariance: np.ndarray | None = None
    """(n, 6, 6) pose covariance per kept sample (Odometry, PoseWithCovarianceStamped)."""

    @property
    def kind(self) -> str:
        """``pose``, ``lidar`` or ``encoder``."""
        batch = self.imported.batch
        if isinstance(batch, LidarTurns):
            return "lidar"
        return "encoder" if isinstance(batch, EncoderBatch) else "pose"


@dataclass
class BagEvent:
    """One event read from the bag (``--events`` or ``--reloc-topic``)."""

    t_ns: int
    source: str
    kind: str
    message: str


def stamp_ns(msg: Any) -> int:
    return int(msg.sec) * 1_000_000_000 + int(msg.nanosec)


def _finite(where: str, what: str, values: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(values).all(axis=1))
    if bad.size:
        raise ImportFormatError(
            f"{where}:{int(bad[0]) + 1}: {what} {values[bad[0]].tolist()} is not finite "
            f"({bad.size} such message(s))"
        )


def _frames_attr(values: list[str]) -> str:
    """One frame id, or several in order of first use (a topic that changed frames)."""
    return ", ".join(dict.fromkeys(values))


_POSE_PATH = {
    "nav_msgs/msg/Odometry": ("pose", "pose"),
    "geometry_msgs/msg/PoseStamped": ("pose",),
    "geometry_msgs/msg/PoseWithCovarianceStamped": ("pose", "pose"),
}


def pose_rows(msgs: list, msgtype: str, child: str | None) -> tuple[list, bool]:
    """Rows (stamp, recv, position, orientation, frame, child frame, covariance|None)."""
    rows: list = []
    if msgtype in _POSE_PATH:
        covariant = msgtype != "geometry_msgs/msg/PoseStamped"
        odom = msgtype == "nav_msgs/msg/Odometry"
        for recv, m in msgs:
            pose = m.pose.pose if covariant else m.pose
            rows.append(
                (
                    stamp_ns(m.header.stamp),
                    recv,
                    pose.position,
                    pose.orientation,
                    m.header.frame_id,
                    m.child_frame_id if odom else "",
                    m.pose.covariance if covariant else None,
                )
            )
        return rows, covariant
    for recv, m in msgs:
        transforms = [m] if msgtype == "geometry_msgs/msg/TransformStamped" else m.transforms
        for t in transforms:
            if child is None or t.child_frame_id == child:
                rows.append(
                    (
                        stamp_ns(t.header.stamp),
                        recv,
                        t.transform.translation,
                        t.transform.rotation,
                        t.header.frame_id,
                        t.child_frame_id,
                        None,
                    )
                )
    return rows, False


def pose_stream(
    bag: Path,
    spec: TopicSpec,
    rows: list,
    covariant: bool,
    max_position_m: float,
    duplicates: str,
) -> BagStream:
    where = Path(f"{bag}:{spec.topic}")
    t_ns = np.array([r[0] for r in rows], dtype=np.int64)
    recv = np.array([r[1] for r in rows], dtype=np.int64)
    pos = np.array([(r[2].x, r[2].y, r[2].z) for r in rows], dtype=np.float64).reshape(-1, 3)
    quat = np.array([(r[3].x, r[3].y, r[3].z, r[3].w) for r in rows], dtype=np.float64)
    quat = quat.reshape(-1, 4)
    index = np.arange(1, len(rows) + 1)
    _finite(str(where), "position", pos)
    _finite(str(where), "orientation", quat)
    axes = [(1, "position.x"), (2, "position.y"), (3, "position.z")]
    _check_positions(where, index, pos, axes, max_position_m)
    attrs: dict[str, Any] = {
        "source_format": "rosbag",
        "ros_topic": spec.topic,
        "time_base": TIME_BASE,
        "ros_frame_id": _frames_attr([r[4] for r in rows]),
    }
    children = [r[5] for r in rows if r[5]]
    if children:
        attrs["ros_child_frame_id"] = _frames_attr(children)
    if spec.child_frame:
        attrs["ros_child_frame"] = spec.child_frame
    kept = order_times(where, index, t_ns, duplicates).keep
    cov = None
    if covariant:
        cov = np.array([r[6] for r in rows], dtype=np.float64).reshape(-1, 6, 6)[kept]
        attrs["covariance"] = "ROS pose covariance, rows/columns x y z (m) rot_x rot_y rot_z (rad)"
    imported = _pose_imported(
        where, index, t_ns, pos, quat, np.ones(len(rows), bool), duplicates, attrs
    )
    differ = bool(np.any(recv[kept] != t_ns[kept]))
    return BagStream(spec, imported, recv[kept] if differ else None, cov)


def tf_stream(bag: Path, spec: TfSpec, tree: TfTree, max_position_m: float) -> BagStream:
    where = Path(f"{bag}:{spec.topic}")
    chain = tree.compose(spec.parent, spec.child)
    if chain.t_ns.size == 0:
        raise ImportFormatError(
            f"{where}: no stamp of {chain.stamps_from} lies where every other link of the "
            f"chain has samples around it (links: {', '.join(str(k) for k, _ in chain.links)})"
        )
    index = np.arange(1, chain.t_ns.size + 1)
    axes = [(1, "position.x"), (2, "position.y"), (3, "position.z")]
    _check_positions(where, index, chain.position, axes, max_position_m)
    frames = [spec.parent] + [link.parent if inv else link.child for link, inv in chain.links]
    attrs = {
        "source_format": "rosbag",
        "ros_topic": "/tf, /tf_static",
        "time_base": TIME_BASE,
        "ros_frame_id": spec.parent,
        "ros_child_frame_id": spec.child,
        "ros_tf_chain": " -> ".join(frames),
        "ros_tf_links": ", ".join(str(k) for k, _ in chain.links),
        "ros_tf_stamps_from": f"{chain.stamps_from.parent}->{chain.stamps_from.child}",
        "ros_tf_stamps_skipped": chain.skipped,
        "ros_tf_interpolation": "tf2: linear translation, slerp rotation between the two "
        "nearest samples of each link; no extrapolation",
    }
    valid = np.ones(chain.t_ns.size, bool)
    imported = _pose_imported(
        where, index, chain.t_ns, chain.position, chain.quat_xyzw, valid, "error", attrs
    )
    return BagStream(spec, imported)


def scan_stream(bag: Path, spec: TopicSpec, rows: list, duplicates: str) -> BagStream:
    where = Path(f"{bag}:{spec.topic}")
    stamps = np.array([stamp_ns(m.header.stamp) for _, m in rows], dtype=np.int64)
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
        "ros_frame_id": _frames_attr([m.header.frame_id for _, m in rows]),
        "units": "angle rad CCW from sensor forward in [0, 2pi), range m, time ns",
        "ros_range_min_m": float(first.range_min),
        "ros_range_max_m": float(first.range_max),
        "time_base": TIME_BASE,
    }
    differ = bool(np.any(recv[keep] != stamps[keep]))
    return BagStream(
        spec,
        Imported(turns, attrs, order.dropped_lines),
        recv[keep] if differ else None,
    )


def count_stream(bag: Path, spec: TopicSpec, rows: list, duplicates: str) -> BagStream:
    """A JointState topic of integer positions as an encoder stream."""
    where = f"{bag}:{spec.topic}"
    names = list(rows[0][1].name)
    counters = [j for j, n in enumerate(names) if _COUNTER.fullmatch(n)]
    numbered = sorted((int(names[j][1:]), j) for j in counters)
    if numbered and [k for k, _ in numbered] != list(range(len(numbered))):
        raise ImportFormatError(
            f"{where}:1: counter joints must be c0, c1, ... without gaps, got {names}"
        )
    special = (SEQ_JOINT, YAW_JOINT)
    cols = [j for _, j in numbered] or [j for j, n in enumerate(names) if n not in special]
    if not cols:
        raise ImportFormatError(f"{where}:1: no joint to read counts from (joints {names})")
    n = len(rows)
    pos = np.empty((n, len(names)))
    vel = np.full((n, len(names)), np.nan)
    stamps = np.empty(n, np.int64)
    for k, (_, m) in enumerate(rows):
        if list(m.name) != names:
            raise ImportFormatError(
                f"{where}:{k + 1}: joints {list(m.name)} differ from the first message's {names}"
            )
        stamps[k] = stamp_ns(m.header.stamp)
        pos[k] = m.position
        if len(m.velocity) == len(names):
            vel[k] = m.velocity
    counts = pos[:, cols]
    bad = ~np.isfinite(counts) | (counts != np.rint(counts)) | (np.abs(counts) >= 2.0**53)
    if bad.any():
        r, c = (int(v) for v in np.argwhere(bad)[0])
        raise ImportFormatError(
            f"{where}:{r + 1}: joint {names[cols[c]]!r} position {counts[r, c]!r} is not an "
            "integer count (a JointState imports as cumulative encoder counts)"
        )
    seq = np.arange(n, dtype=np.int64)
    if SEQ_JOINT in names:
        seq = pos[:, names.index(SEQ_JOINT)].astype(np.int64)
    yaw = rate = np.full(n, np.nan)
    if YAW_JOINT in names:
        yaw, rate = pos[:, names.index(YAW_JOINT)], vel[:, names.index(YAW_JOINT)]
    index = np.arange(1, n + 1)
    order = order_times(Path(where), index, stamps, duplicates)
    keep = order.keep
    batch = EncoderBatch(
        stamps[keep], np.full(int(keep.sum()), NO_DEVICE_TIME), seq[keep],
        counts[keep].astype(np.int64), yaw[keep], rate[keep],
    )  # fmt: skip
    attrs = {
        "source_format": "rosbag",
        "ros_topic": spec.topic,
        "time_base": TIME_BASE,
        "ros_joint_names": ", ".join(names[j] for j in cols),
    }
    return BagStream(spec, Imported(batch, attrs, order.dropped_lines))


def _stream_times(stream: BagStream) -> np.ndarray:
    batch = stream.imported.batch
    if isinstance(batch, LidarTurns):
        return batch.t_first_ns
    return batch.host_ns if isinstance(batch, EncoderBatch) else batch.t_ns


def _match(where: str, what: str, times: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    """Index into ``times`` of each stamp, which must be one of them exactly."""
    k = np.clip(np.searchsorted(times, stamps), 0, max(times.size - 1, 0))
    miss = np.flatnonzero((times.size == 0) | (times[k] != stamps))
    if miss.size:
        raise ImportFormatError(
            f"{where}:{int(miss[0]) + 1}: {what} stamp {stamps[miss[0]] / 1e9:.9f} s is no "
            f"sample's stamp of the stream ({miss.size} such message(s))"
        )
    return k


def apply_time_reference(bag: Path, topic: str, rows: list, stream: BagStream) -> None:
    stamps = np.array([stamp_ns(m.header.stamp) for _, m in rows], dtype=np.int64)
    device = np.array([stamp_ns(m.time_ref) for _, m in rows], dtype=np.int64)
    k = _match(f"{bag}:{topic}", "time reference", _stream_times(stream), stamps)
    batch = stream.imported.batch
    assert not isinstance(batch, PoseBatch)
    batch.device_ns[k] = device
    stream.imported.attrs["ros_time_reference_topic"] = topic


def _status_values(status: Any) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def apply_flags(bag: Path, topic: str, rows: list, stream: BagStream) -> None:
    stamps, flags = [], []
    for n, (_, m) in enumerate(rows, start=1):
        for status in m.status:
            value = _status_values(status).get("flags")
            if value is None or not value.isdigit():
                raise ImportFormatError(
                    f"{bag}:{topic}:{n}: a flags diagnostic needs a value 'flags' (an integer), "
                    f"got {_status_values(status)}"
                )
            stamps.append(stamp_ns(m.header.stamp))
            flags.append(int(value))
    k = _match(f"{bag}:{topic}", "flags", _stream_times(stream), np.array(stamps, np.int64))
    batch = stream.imported.batch
    assert not isinstance(batch, EncoderBatch)
    batch.flags[k] |= np.array(flags, dtype=batch.flags.dtype)
    stream.imported.attrs["ros_flags_topic"] = topic


_LOG_ERROR_LEVELS = {40, 50, 8, 16}  # ROS 2 ERROR/FATAL (40, 50), ROS 1 (8, 16)
_DIAG_KIND = {0: "note", 1: "note", 2: "error", 3: "stale"}


def events_of(bag: Path, topic: str, msgtype: str, rows: list) -> list[BagEvent]:
    """Session events from diagnostics (one per status) or log messages."""
    out = []
    for recv, m in rows:
        if hasattr(m, "header"):
            t = stamp_ns(m.header.stamp)
        else:
            t = stamp_ns(m.stamp) if hasattr(m, "stamp") else recv
        if msgtype == DIAGNOSTICS_TYPE:
            for s in m.status:
                kind = _status_values(s).get("kind") or _DIAG_KIND.get(int(s.level), "note")
                out.append(BagEvent(t, s.name or topic, kind, s.message))
        else:
            kind = "error" if int(m.level) in _LOG_ERROR_LEVELS else "note"
            out.append(BagEvent(t, m.name or topic, kind, m.msg))
    return out
