"""ROS messages of one topic → one stream's samples, checked (for ``import rosbag``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.batches import LidarTurns
from sensorbench.logs.import_times import order_times
from sensorbench.logs.importers import Imported, _check_positions, _pose_imported
from sensorbench.logs.rosbag_specs import TopicSpec
from sensorbench.logs.schema import NO_DEVICE_TIME

_TWO_PI = 2.0 * math.pi


@dataclass
class BagStream:
    """One parsed topic: its samples and what to store with them."""

    spec: TopicSpec
    imported: Imported
    receive_ns: np.ndarray | None = None
    """Bag receive time per kept sample (pose) or turn (lidar), when it differs from the stamp."""


def stamp_ns(msg: Any) -> int:
    return int(msg.sec) * 1_000_000_000 + int(msg.nanosec)


def pose_of(msg: Any, msgtype: str, child: str | None) -> list[tuple[int, Any, Any]]:
    """(stamp ns, position msg, orientation msg) of every pose a message carries."""
    if msgtype == "nav_msgs/msg/Odometry":
        return [(stamp_ns(msg.header.stamp), msg.pose.pose.position, msg.pose.pose.orientation)]
    if msgtype == "geometry_msgs/msg/PoseStamped":
        return [(stamp_ns(msg.header.stamp), msg.pose.position, msg.pose.orientation)]
    if msgtype == "geometry_msgs/msg/PoseWithCovarianceStamped":
        return [(stamp_ns(msg.header.stamp), msg.pose.pose.position, msg.pose.pose.orientation)]
    transforms = [msg] if msgtype == "geometry_msgs/msg/TransformStamped" else msg.transforms
    return [
        (stamp_ns(t.header.stamp), t.transform.translation, t.transform.rotation)
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


def pose_stream(
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
