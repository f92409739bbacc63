"""What ``import rosbag`` is asked for (``--topic`` and ``--tf`` specs, the message types
docs/FORMAT.md lists) and the ROS messages of one topic → one stream's samples, checked.
Every error names ``BAG:TOPIC:N`` (1-based). A pose stream's kind defaults by name: one
starting with ``mocap`` or ``estimate`` is of that kind, any other ``pose_sensor``."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs.bag_columns import Batched, Columns, value
from sensorbench.logs.batches import EncoderBatch, Event, LidarTurns, PoseBatch
from sensorbench.logs.import_times import order_times
from sensorbench.logs.importers import Imported, _check_positions, _pose_imported
from sensorbench.logs.ros2_cdr import ERROR, STALE
from sensorbench.logs.schema import NO_DEVICE_TIME, POSE_KINDS
from sensorbench.logs.tf_tree import TfTree

_COUNTER = re.compile(r"c(\d+)")
_TWO_PI = 2.0 * math.pi
TIME_BASE = "ROS header stamps (ns since the Unix epoch)"
_POSITION_COLUMNS = [(1, "position.x"), (2, "position.y"), (3, "position.z")]
Extract = Callable[[int, Any], Any]
"""``extract(receive ns, message)``: the plain values kept of one message."""
Progress = Callable[[int, int], None]
"""``progress(done, total)``: messages read so far of ``total``."""
POSE_TYPES = ("nav_msgs/msg/Odometry", "geometry_msgs/msg/PoseStamped",
              "geometry_msgs/msg/PoseWithCovarianceStamped", "geometry_msgs/msg/TransformStamped",
              "tf2_msgs/msg/TFMessage")  # fmt: skip
SCAN_TYPE = "sensor_msgs/msg/LaserScan"
COUNTS_TYPE = "sensor_msgs/msg/JointState"
TIME_REFERENCE_TYPE = "sensor_msgs/msg/TimeReference"
DIAGNOSTICS_TYPE = "diagnostic_msgs/msg/DiagnosticArray"
LOG_TYPES = ("rcl_interfaces/msg/Log", "rosgraph_msgs/msg/Log")
TF_TYPES = ("tf2_msgs/msg/TFMessage", "tf/msg/tfMessage")
TF_TOPICS = ("/tf", "/tf_static")
IMPORTABLE = (*POSE_TYPES, SCAN_TYPE, COUNTS_TYPE)
SEQ_JOINT = "seq"
"""JointState entry holding an encoder stream's frame sequence numbers (our export's)."""
YAW_JOINT = "imu_yaw"
"""JointState entry holding IMU yaw (position, rad) and yaw rate (velocity, rad/s)."""

_SPEC = re.compile(
    r"^(?P<topic>[^=\[\]]+?)(\[(?P<child>[^\]]+)\])?=(?P<name>[^:]+)(:(?P<kind>.+))?$"
)
_TF_SPEC = re.compile(r"^(?P<parent>[^:=]+):(?P<child>[^:=]+)=(?P<name>[^:]+)(:(?P<kind>.+))?$")


def _check_kind(option: str, text: str, kind: str | None) -> None:
    if kind is not None and kind not in POSE_KINDS:
        raise ImportFormatError(
            f"{option} {text!r}: kind must be one of {', '.join(POSE_KINDS)}, got {kind!r}"
        )


@dataclass(frozen=True)
class TopicSpec:
    """One ``--topic``: which topic becomes which stream."""

    topic: str
    name: str
    kind: str | None = None
    """Pose stream kind; None: by name (:func:`pose_kind`)."""
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
        _check_kind("--topic", text, m.group("kind"))
        return cls(m.group("topic"), m.group("name"), m.group("kind"), m.group("child"))


@dataclass(frozen=True)
class TfSpec:
    """One ``--tf``: the pose of frame ``child`` in frame ``parent`` becomes stream ``name``."""

    parent: str
    child: str
    name: str
    kind: str | None = None

    @classmethod
    def parse(cls, text: str) -> TfSpec:
        """``PARENT:CHILD=NAME[:KIND]``, e.g. ``map:camera_link=cam``."""
        m = _TF_SPEC.match(text.strip())
        if not m:
            raise ImportFormatError(f"--tf {text!r}: expected PARENT:CHILD=NAME[:KIND]")
        _check_kind("--tf", text, m.group("kind"))
        return cls(m.group("parent"), m.group("child"), m.group("name"), m.group("kind"))

    @property
    def topic(self) -> str:
        """How messages name this stream: ``/tf PARENT->CHILD``."""
        return f"/tf {self.parent}->{self.child}"


def pose_kind(spec: TopicSpec | TfSpec) -> str:
    """The pose stream kind ``spec`` becomes: its own, else by its name (see the module)."""
    named = (k for k in ("mocap", "estimate") if spec.name.startswith(k))
    return spec.kind or next(named, "pose_sensor")


def _attrs(topic: str, **more: Any) -> dict[str, Any]:
    """A bag stream's attributes: its format, topic and time base, then ``more``."""
    return {"source_format": "rosbag", "ros_topic": topic, "time_base": TIME_BASE, **more}


@dataclass
class BagStream:
    """One parsed topic (or TF chain): its samples and what to store with them."""

    spec: TopicSpec | TfSpec
    imported: Imported
    receive_ns: np.ndarray | None = None
    """Bag receive time per kept sample (pose) or turn (lidar), when it differs from the stamp."""
    covariance: np.ndarray | None = None
    """(n, 6, 6) pose covariance per kept sample (Odometry, PoseWithCovarianceStamped)."""
    twist: tuple[np.ndarray, np.ndarray] | None = None
    """Odometry: (n, 6) twist and (n, 6, 6) its covariance per kept sample."""
    stamps_ns: np.ndarray | None = None
    """Header stamp per kept turn where it is not the turn's first point (a clockwise
    sensor's scan, stamped at ray 0 = its last point): what time references and flags
    of the scan are stamped with."""

    def columns(self) -> dict[str, np.ndarray]:
        """The optional datasets stored beside the samples (docs/FORMAT.md)."""
        if self.kind == "lidar":
            return {} if self.receive_ns is None else {"turn_receive_ns": self.receive_ns}
        cols = {"receive_ns": self.receive_ns, "covariance": self.covariance}
        if self.twist is not None:
            cols.update(twist=self.twist[0], twist_covariance=self.twist[1])
        return {k: v for k, v in cols.items() if v is not None}

    @property
    def kind(self) -> str:
        """``pose``, ``lidar`` or ``encoder``."""
        batch = self.imported.batch
        if isinstance(batch, LidarTurns):
            return "lidar"
        return "encoder" if isinstance(batch, EncoderBatch) else "pose"


def stamp_ns(msg: Any) -> int:
    """A ROS time (``sec``, ``nanosec``) as int ns."""
    return int(msg.sec * 1_000_000_000 + msg.nanosec)


def _finite(where: str, what: str, values: np.ndarray) -> None:
    bad = np.flatnonzero(~np.isfinite(values).all(axis=1))
    if bad.size:
        raise ImportFormatError(
            f"{where}:{int(bad[0]) + 1}: {what} {values[bad[0]].tolist()} is not finite "
            f"({bad.size} such message(s))"
        )


def _check_stamped(where: Path, stamps: np.ndarray, recv: np.ndarray) -> None:
    """Refuse a topic whose every header stamp is 0 (its publisher never stamped it: ROS's
    unset time): ``--duplicates`` would keep one of its messages and drop the rest as
    repeats of one stamp.

    Raises:
        ImportFormatError: two or more messages, every stamp 0 (the bag's receive times,
            ns, give their span when known)."""
    if stamps.size >= 2 and not stamps.any():
        span = (
            f"; the bag received them over {(int(recv.max()) - int(recv.min())) / 1e9:.3f} s"
            if recv.size else ""
        )  # fmt: skip
        raise ImportFormatError(
            f"{where}:1: the header stamps of all {stamps.size} messages are 0 (unset: the "
            f"publisher never stamped them{span}); a "
            "sample's time is its header stamp, so nothing can be imported from this topic "
            "(stamp the messages, e.g. with the receive time, and import the new bag)"
        )


def _frames_attr(values: list[str]) -> str:
    """One frame id, or several in order of first use (a topic that changed frames)."""
    return ", ".join(dict.fromkeys(values))


def _pose_row(header: Any, recv: int, p: Any, q: Any, child: str, *more: Any) -> tuple:
    """One row of :func:`topic_extract` (``more``: covariance, twist, or nothing)."""
    return (stamp_ns(header.stamp), recv, p.x, p.y, p.z, q.x, q.y, q.z, q.w, header.frame_id,
            child, *(more or (None, None)))  # fmt: skip


def _pose_rows(c: Columns, recv: np.ndarray, at: str, p: str, q: str, child: str,
               *more: Any) -> list:  # fmt: skip
    """:func:`_pose_row` of every message of ``c``: the header at ``at``, the position at
    ``p``, the orientation at ``q`` (paths)."""
    nums = [c(f"{p}.{a}").tolist() for a in "xyz"] + [c(f"{q}.{a}").tolist() for a in "xyzw"]
    n = len(recv)
    return list(zip(c.stamp(f"{at}header.stamp").tolist(), recv.tolist(), *nums,
                    repeat(value(c.first, f"{at}header.frame_id"), n), repeat(child, n),
                    *(more or (repeat(None, n), repeat(None, n))), strict=True))  # fmt: skip


def topic_extract(msgtype: str, child: str | None) -> Extract:
    """The extract of a ``--topic`` of type ``msgtype``: :func:`scan_extract`,
    :func:`count_extract`, or for a pose type rows ``(stamp, recv, x, y, z, qx, qy, qz, qw,
    frame, child frame, covariance|None, (twist, twist covariance)|None)`` of one message:
    a list, since a TF message may carry several (or none) of the child."""
    if msgtype in (SCAN_TYPE, COUNTS_TYPE):
        return scan_extract if msgtype == SCAN_TYPE else count_extract
    if msgtype in ("nav_msgs/msg/Odometry", "geometry_msgs/msg/PoseWithCovarianceStamped"):
        odom = msgtype == "nav_msgs/msg/Odometry"

        def covariant(recv: int, m: Any) -> list:
            pose, twist = m.pose.pose, None
            if odom:
                v, w = m.twist.twist.linear, m.twist.twist.angular
                twist = ((v.x, v.y, v.z, w.x, w.y, w.z), m.twist.covariance)
            child_id = m.child_frame_id if odom else ""
            return [_pose_row(m.header, recv, pose.position, pose.orientation, child_id,
                              m.pose.covariance, twist)]  # fmt: skip

        def covariants(recv: np.ndarray, c: Columns) -> list:
            twist = repeat(None, len(recv))
            if odom:
                v = [c(f"twist.twist.{s}.{a}").tolist() for s in ("linear", "angular")
                     for a in "xyz"]  # fmt: skip
                twist = zip(zip(*v, strict=True), c("twist.covariance"), strict=True)  # type: ignore[assignment]
            child_id = c.first.child_frame_id if odom else ""
            rows = _pose_rows(c, recv, "", "pose.pose.position", "pose.pose.orientation",
                              child_id, c("pose.covariance"), twist)  # fmt: skip
            return [[r] for r in rows]

        return Batched(covariant, covariants)
    if msgtype == "geometry_msgs/msg/PoseStamped":
        return Batched(
            lambda recv, m: [_pose_row(m.header, recv, m.pose.position, m.pose.orientation, "")],
            lambda recv, c: [
                [r] for r in _pose_rows(c, recv, "", "pose.position", "pose.orientation", "")
            ],
        )
    single = msgtype == "geometry_msgs/msg/TransformStamped"

    def transforms(recv: int, m: Any) -> list:
        return [
            _pose_row(t.header, recv, t.transform.translation, t.transform.rotation,
                      t.child_frame_id)
            for t in ([m] if single else m.transforms)
            if child is None or t.child_frame_id == child
        ]

    def transforms_many(recv: np.ndarray, c: Columns) -> list:
        slots = [""] if single else [f"transforms.{k}." for k in range(len(c.first.transforms))]
        named = [(s, value(c.first, f"{s}child_frame_id")) for s in slots]
        rows = [_pose_rows(c, recv, s, f"{s}transform.translation", f"{s}transform.rotation",
                           name)
                for s, name in named if child is None or name == child]  # fmt: skip
        return [list(r) for r in zip(*rows, strict=True)] if rows else [[] for _ in recv]

    return Batched(transforms, transforms_many)


def pose_stream(
    bag: Path,
    spec: TopicSpec,
    messages: list,
    max_position_m: float,
    duplicates: str,
) -> BagStream:
    """A pose stream from the rows of :func:`topic_extract` (one list per message)."""
    where = Path(f"{bag}:{spec.topic}")
    rows = [r for message in messages for r in message]
    if not rows:
        children = sorted({r[10] for message in messages for r in message if r[10]})
        raise ImportFormatError(
            f"{bag}: topic {spec.topic!r} has no poses with child frame {spec.child_frame!r} "
            f"(child frames: {', '.join(children) or 'none'})"
        )
    t_ns = np.array([r[0] for r in rows], dtype=np.int64)
    recv = np.array([r[1] for r in rows], dtype=np.int64)
    values = np.array([r[2:9] for r in rows], dtype=np.float64).reshape(-1, 7)
    pos, quat = values[:, :3], values[:, 3:]
    index = np.arange(1, len(rows) + 1)
    _check_stamped(where, t_ns, recv)
    _finite(str(where), "position", pos)
    _finite(str(where), "orientation", quat)
    _check_positions(where, index, pos, _POSITION_COLUMNS, max_position_m)
    attrs = _attrs(spec.topic, ros_frame_id=_frames_attr([r[9] for r in rows]))
    children = [r[10] for r in rows if r[10]]
    if children:
        attrs["ros_child_frame_id"] = _frames_attr(children)
    if spec.child_frame:
        attrs["ros_child_frame"] = spec.child_frame
    kept = order_times(where, index, t_ns, duplicates).keep
    cov = None
    if rows[0][11] is not None:
        cov = np.array([r[11] for r in rows], dtype=np.float64).reshape(-1, 6, 6)[kept]
        attrs["covariance"] = "ROS pose covariance, rows/columns x y z (m) rot_x rot_y rot_z (rad)"
    twist = None
    if rows[0][12] is not None:
        twist = (
            np.array([r[12][0] for r in rows], dtype=np.float64).reshape(-1, 6)[kept],
            np.array([r[12][1] for r in rows], dtype=np.float64).reshape(-1, 6, 6)[kept],
        )
        attrs["twist"] = ("ROS twist in the child frame: vx vy vz (m/s) wx wy wz (rad/s), "
                          "twist_covariance rows/columns alike")  # fmt: skip
    imported = _pose_imported(where, index, t_ns, pos, quat, duplicates, attrs)
    differ = bool(np.any(recv[kept] != t_ns[kept]))
    return BagStream(spec, imported, recv[kept] if differ else None, cov, twist)


def tf_stream(bag: Path, spec: TfSpec, tree: TfTree, max_position_m: float) -> BagStream:
    where = Path(f"{bag}:{spec.topic}")
    chain = tree.compose(spec.parent, spec.child)
    if chain.t_ns.size == 0:
        raise ImportFormatError(
            f"{where}: no stamp of {chain.stamps_from} lies where every other link of the "
            f"chain has samples around it (links: {', '.join(str(k) for k, _ in chain.links)})"
        )
    index = np.arange(1, chain.t_ns.size + 1)
    _check_positions(where, index, chain.position, _POSITION_COLUMNS, max_position_m)
    frames = [spec.parent] + [link.parent if inv else link.child for link, inv in chain.links]
    attrs = _attrs(
        "/tf, /tf_static",
        ros_frame_id=spec.parent,
        ros_child_frame_id=spec.child,
        ros_tf_chain=" -> ".join(frames),
        ros_tf_links=", ".join(str(k) for k, _ in chain.links),
        ros_tf_stamps_from=f"{chain.stamps_from.parent}->{chain.stamps_from.child}",
        ros_tf_stamps_skipped=chain.skipped,
        ros_tf_interpolation="tf2: linear translation, slerp rotation between the two "
        "nearest samples of each link; no extrapolation",
    )
    imported = _pose_imported(
        where, index, chain.t_ns, chain.position, chain.quat_xyzw, "error", attrs
    )
    return BagStream(spec, imported)


def scan_extract(recv: int, m: Any) -> tuple:
    """``(stamp, recv, frame, angle_min, angle_increment, time_increment, scan_time,
    range_min, range_max, ranges, intensities)`` of one LaserScan."""
    return (
        stamp_ns(m.header.stamp), recv, m.header.frame_id, m.angle_min, m.angle_increment,
        m.time_increment, m.scan_time, m.range_min, m.range_max, m.ranges, m.intensities,
    )  # fmt: skip


_SCAN_FIELDS = ("angle_min", "angle_increment", "time_increment", "scan_time", "range_min",
                "range_max")  # fmt: skip


def scan_stream(bag: Path, spec: TopicSpec, rows: list, duplicates: str) -> BagStream:
    """A lidar stream from the rows of :func:`scan_extract`, one turn per scan."""
    where = Path(f"{bag}:{spec.topic}")
    stamps = np.array([r[0] for r in rows], dtype=np.int64)
    recv = np.array([r[1] for r in rows], dtype=np.int64)
    index = np.arange(1, len(rows) + 1)
    _check_stamped(where, stamps, recv)
    order = order_times(where, index, stamps, duplicates)
    keep = order.keep
    kept = [rows[k] for k in np.flatnonzero(keep)]
    params, count = _scan_params(where, kept, np.flatnonzero(keep) + 1)
    r = np.concatenate([r[9] for r in kept]).astype(np.float32) if kept else np.zeros(0, "f4")
    angle, t_pt, r_min, r_max = _scan_points(params, count, stamps[keep], r.size)
    # a clockwise sensor's scan (time_increment < 0: REP 103's rays run against the
    # sweep, ray 0 swept last): its points in sweep order, the turn from its earliest ray
    back = params[:, 2] < 0
    start = np.cumsum(count) - count
    perm = np.arange(r.size)
    if back.any():
        i = perm - np.repeat(start, count)
        perm = np.where(np.repeat(back, count), np.repeat(start + count - 1, count) - i, perm)
        angle, r, t_pt = angle[perm], r[perm], t_pt[perm]
    t_first = np.where(back & (count > 0), t_pt[np.minimum(start, max(r.size - 1, 0))]
                       if r.size else 0, stamps[keep])  # fmt: skip
    # REP 103: CCW, 0 = forward, wrapped into [0, 2π). REP 117: +inf no return, -inf too
    # close, nan error; beyond range_max no return, below range_min not valid
    ranges = np.where(r > r_max, np.float32(np.inf), r)  # +inf included
    ranges[~(r >= r_min)] = np.nan  # -inf, nan and too close
    intensity = np.concatenate(
        [r[10] if len(r[10]) == len(r[9]) else np.zeros(len(r[9]), "f4") for r in kept]
    )[perm] if kept else np.zeros(0, "f4")  # fmt: skip
    speed = np.where(params[:, 3] > 0, 1.0 / np.where(params[:, 3] > 0, params[:, 3], 1.0), np.nan)
    no_time = np.full(len(kept), NO_DEVICE_TIME, np.int64)
    turns = LidarTurns(t_first, no_time, speed, count, np.zeros(len(kept)), angle, ranges,
                       np.clip(np.rint(intensity), 0, 65535), t_pt)  # fmt: skip
    first = rows[0]
    attrs = _attrs(
        spec.topic, model="ROS LaserScan", frame=first[2],
        ros_frame_id=_frames_attr([r[2] for r in rows]),
        units="angle rad CCW from sensor forward in [0, 2pi), range m, time ns",
        ros_range_min_m=float(first[7]), ros_range_max_m=float(first[8]),
    )  # fmt: skip
    receive = recv[keep] if np.any(recv[keep] != stamps[keep]) else None
    stamped = stamps[keep] if back.any() else None
    return BagStream(spec, Imported(turns, attrs, order.dropped_lines), receive, stamps_ns=stamped)


def _scan_params(where: Path, kept: list, lines: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kept scans' six parameters (angle_min, angle_increment, time_increment,
    scan_time, range_min, range_max; rad, s, m) and ray counts; ImportFormatError naming
    the scan (``lines``: each kept scan's number) with a non-finite parameter or with
    several rays at one bearing."""
    params = np.array([r[3:9] for r in kept], dtype=np.float64).reshape(-1, 6)
    bad = np.argwhere(~np.isfinite(params))
    if bad.size:
        k, j = (int(v) for v in bad[0])
        raise ImportFormatError(
            f"{where}:{lines[k]}: {_SCAN_FIELDS[j]} {params[k, j]} is not finite"
        )
    count = np.array([len(r[9]) for r in kept], dtype=np.int64)
    flat = np.flatnonzero((params[:, 1] == 0) & (count > 1))
    if flat.size:
        k = int(flat[0])
        raise ImportFormatError(
            f"{where}:{lines[k]}: angle_increment is 0: all {count[k]} rays at one bearing"
        )
    return params, count


def _scan_points(
    params: np.ndarray, count: np.ndarray, stamps: np.ndarray, n: int
) -> tuple[np.ndarray, ...]:
    """Each of the ``n`` rays' angle (rad, [0, 2π)) and time (ns) in ray order, and its
    scan's range_min and range_max (m), from the scans' parameters, ray counts and stamps."""
    # per point: its index in its scan, and its scan's parameters but scan_time
    i = np.arange(n) - np.repeat(np.cumsum(count) - count, count)
    a_min, a_inc, t_inc, r_min, r_max = (np.repeat(params[:, j], count) for j in (0, 1, 2, 4, 5))
    t_pt = np.repeat(stamps, count) + np.rint(t_inc * 1e9 * i).astype(np.int64)
    return np.mod(a_min + a_inc * i, _TWO_PI), t_pt, r_min, r_max


def _count_one(recv: int, m: Any) -> tuple:
    return stamp_ns(m.header.stamp), m.name, m.position, m.velocity


def _count_many(recv: np.ndarray, c: Columns) -> list:
    names = repeat(c.first.name, len(recv))
    stamps = c.stamp("header.stamp").tolist()
    return list(zip(stamps, names, c("position"), c("velocity"), strict=True))


count_extract = Batched(_count_one, _count_many)
"""``(stamp, joint names, positions, velocities)`` of one JointState."""


def count_stream(bag: Path, spec: TopicSpec, rows: list, duplicates: str) -> BagStream:
    """An encoder stream from the rows of :func:`count_extract` (integer positions)."""
    where = f"{bag}:{spec.topic}"
    names = list(rows[0][1])
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
    other = next((k for k, r in enumerate(rows) if list(r[1]) != names), None)
    if other is not None:
        raise ImportFormatError(
            f"{where}:{other + 1}: joints {list(rows[other][1])} differ from the first "
            f"message's {names}"
        )
    n = len(rows)
    stamps = np.array([r[0] for r in rows], dtype=np.int64)
    pos = np.array([r[2] for r in rows], dtype=np.float64).reshape(n, len(names))
    vel = np.full((n, len(names)), np.nan)
    with_velocity = [k for k, r in enumerate(rows) if len(r[3]) == len(names)]
    if with_velocity:
        vel[with_velocity] = np.array([rows[k][3] for k in with_velocity], dtype=np.float64)
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
    _check_stamped(Path(where), stamps, np.zeros(0, np.int64))
    order = order_times(Path(where), index, stamps, duplicates)
    keep = order.keep
    batch = EncoderBatch(
        stamps[keep], np.full(int(keep.sum()), NO_DEVICE_TIME), seq[keep],
        counts[keep].astype(np.int64), yaw[keep], rate[keep],
    )  # fmt: skip
    attrs = _attrs(spec.topic, ros_joint_names=", ".join(names[j] for j in cols))
    return BagStream(spec, Imported(batch, attrs, order.dropped_lines))


def _stream_times(stream: BagStream) -> np.ndarray:
    batch = stream.imported.batch
    if isinstance(batch, LidarTurns):
        return batch.t_first_ns if stream.stamps_ns is None else stream.stamps_ns
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


def time_reference_extract(recv: int, m: Any) -> tuple[int, int]:
    """``(stamp, device time)`` of one TimeReference (ns)."""
    return stamp_ns(m.header.stamp), stamp_ns(m.time_ref)


def apply_time_reference(bag: Path, topic: str, rows: list, stream: BagStream) -> None:
    """Device times of :func:`time_reference_extract` rows into the stream's samples."""
    stamps = np.array([r[0] for r in rows], dtype=np.int64)
    k = _match(f"{bag}:{topic}", "time reference", _stream_times(stream), stamps)
    batch = stream.imported.batch
    assert not isinstance(batch, PoseBatch)
    batch.device_ns[k] = np.array([r[1] for r in rows], dtype=np.int64)
    stream.imported.attrs["ros_time_reference_topic"] = topic


def _status_values(status: Any) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def flags_extract(recv: int, m: Any) -> tuple[int, list[dict[str, str]]]:
    """``(stamp, [values of each status])`` of one DiagnosticArray."""
    return stamp_ns(m.header.stamp), [_status_values(s) for s in m.status]


def apply_flags(bag: Path, topic: str, rows: list, stream: BagStream) -> None:
    """Flag bits of :func:`flags_extract` rows OR-ed into the stream's samples."""
    stamps, flags = [], []
    for n, (t, statuses) in enumerate(rows, start=1):
        for values in statuses:
            value = values.get("flags")
            if value is None or not value.isdigit():
                raise ImportFormatError(
                    f"{bag}:{topic}:{n}: a flags diagnostic needs a value 'flags' (an integer), "
                    f"got {values}"
                )
            stamps.append(t)
            flags.append(int(value))
    k = _match(f"{bag}:{topic}", "flags", _stream_times(stream), np.array(stamps, np.int64))
    batch = stream.imported.batch
    assert not isinstance(batch, EncoderBatch)
    batch.flags[k] |= np.array(flags, dtype=batch.flags.dtype)
    stream.imported.attrs["ros_flags_topic"] = topic


_LOG_ERROR_LEVELS = {40, 50, 8, 16}  # ROS 2 ERROR/FATAL (40, 50), ROS 1 (8, 16)
_DIAG_KIND = {ERROR: "error", STALE: "stale"}


def message_time(recv: int, m: Any) -> int:
    """Header stamp, else a ``stamp`` field, else the receive time (ns): an event's time,
    and the extract of a relocalization topic."""
    if hasattr(m, "header"):
        return stamp_ns(m.header.stamp)
    return stamp_ns(m.stamp) if hasattr(m, "stamp") else recv


def events_extract(topic: str, msgtype: str) -> Extract:
    """Session events of one message: diagnostics (one per status) or a log message."""

    def extract(recv: int, m: Any) -> list[Event]:
        t = message_time(recv, m)
        if msgtype == DIAGNOSTICS_TYPE:
            return [
                Event(
                    t,
                    s.name or topic,
                    _status_values(s).get("kind") or _DIAG_KIND.get(int(s.level), "note"),
                    s.message,
                )
                for s in m.status
            ]
        kind = "error" if int(m.level) in _LOG_ERROR_LEVELS else "note"
        return [Event(t, m.name or topic, kind, m.msg)]

    return extract
