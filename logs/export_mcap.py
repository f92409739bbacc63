"""Export a session to one rosbag2 MCAP file of ROS 2 messages (CDR), topics as
docs/FORMAT.md ("Export to MCAP") lists them, stamped in wall-clock ns
(:func:`wall_clock_offset_ns`)."""

from __future__ import annotations

import heapq
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs import ros2_cdr
from sensorbench.logs.reader import Session
from sensorbench.logs.ros2_cdr import BODY_FRAME, ODOM_FRAME
from sensorbench.logs.rosbag_streams import SEQ_JOINT, YAW_JOINT, Progress
from sensorbench.logs.scan_bins import ScanGrid, bin_turn, rated_range_m, scan_limits
from sensorbench.logs.schema import NO_DEVICE_TIME, PoseFlag, TurnFlag
from sensorbench.logs.values import Batch, exportable

UNIX_TIME_FROM_NS = 10**18
"""Session times at or beyond this (2001-09-09) are already Unix time (imports of
ROS bags, TUM files with epoch stamps); below it they are the recording host's
monotonic clock (hours to months since boot)."""


def _latched_qos() -> Any:
    """rosbag2's QoS of a latched topic (transient local, reliable, keep last 1):
    ``ros2 bag play`` re-sends ``/tf_static`` to late subscribers, as tf2's static
    broadcaster does."""
    from rosbags import interfaces as q

    forever = q.QosTime(2147483647, 4294967295)
    return q.Qos(
        q.QosHistory.KEEP_LAST, 1, q.QosReliability.RELIABLE, q.QosDurability.TRANSIENT_LOCAL,
        forever, forever, q.QosLiveliness.AUTOMATIC, forever, False,
    )  # fmt: skip




@dataclass
class McapExport:
    """What :func:`export_mcap` wrote."""

    messages: dict[str, int] = field(default_factory=dict)
    """Messages per topic."""
    time_offset_ns: int = 0
    """Added to every session time for the stamps (wall clock = session + offset)."""
    points_dropped: dict[str, int] = field(default_factory=dict)
    """Per lidar: points that shared a ray bin with a nearer point."""
    bins: dict[str, int] = field(default_factory=dict)
    """Per lidar: rays per revolution."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Impossible samples left out per stream key (``skip_invalid``)."""


@dataclass(frozen=True)
class OdometryTrack:
    """The planar filters' state per frame, to be written as ``/odom`` and ``/tf``.

    Attributes:
        t_ns: (n,) session times (ns).
        pose: (n, 3) x, y (m), yaw (rad) in ``odom``.
        var: (n, 3) their variances (m², m², rad²).
        velocity: (n, 3) world-frame vx, vy (m/s), yaw rate (rad/s).
        velocity_var: (n, 3) their variances.
    """

    t_ns: np.ndarray
    pose: np.ndarray
    var: np.ndarray
    velocity: np.ndarray
    velocity_var: np.ndarray


def wall_clock_offset_ns(session: Session, first: int | None = -1) -> int:
    """ns to add to the session's times for Unix time (0 when they already are): wall = t −
    monotonic_anchor + wall_anchor. ``first``: the session's first time (None: none)."""
    first = _first_time(session) if first == -1 else first
    attrs = session.attrs
    if first is None or first >= UNIX_TIME_FROM_NS:
        return 0
    if "wall_clock_anchor_ns" not in attrs or "monotonic_anchor_ns" not in attrs:
        return 0
    return int(attrs["wall_clock_anchor_ns"]) - int(attrs["monotonic_anchor_ns"])


def _first_time(s: Session) -> int | None:
    starts = [s.lidar(n).read_index()["t_first_ns"][:1] for n in s.lidar_names()]
    starts += [s.pose(n).read(validate=False).t_ns[:1] for n in s.pose_names()]
    starts += [s.encoder(n).read(validate=False).host_ns[:1] for n in s.encoder_names()]
    firsts = np.concatenate([np.zeros(0, np.int64), *starts])
    return int(firsts.min()) if firsts.size else None


def _frame(attrs: dict[str, Any], key: str, default: str) -> str:
    """A ROS frame id from a stream attribute (the first if it lists several)."""
    value = str(attrs.get(key, "") or "").split(",")[0].strip()
    return value or default


Item = tuple[int, int, str, str, bytes]
"""(log time ns, tie-breaker, topic, message type, the message's CDR bytes)."""


class _Builder:
    """ROS 2 messages from session arrays, stamped ``t + offset``."""

    def __init__(self, offset: int, where: str, skip_invalid: bool) -> None:
        self.offset = offset
        self.where = where
        self.skip_invalid = skip_invalid
        self.skipped: dict[str, int] = {}

    def checked(self, key: str, batch: Batch) -> tuple[Batch, np.ndarray | None]:
        """``batch`` without its impossible samples (refused unless ``skip_invalid``)
        and the mask of the rows kept (None: all of them)."""
        kept, dropped = exportable(self.where, key, batch, skip_invalid=self.skip_invalid)
        if not dropped.any():
            return batch, None
        self.skipped[key] = int(dropped.sum())
        return kept, ~dropped

    def stamp(self, t_ns: int) -> int:
        """A session time's stamp (ns since 1970)."""
        if t_ns + self.offset < 0:
            raise SessionError(
                f"{self.where}: time {t_ns} ns is before 1970; a ROS stamp cannot be"
            )
        return t_ns + self.offset

    def diagnostics(self, t_ns: int, level: int, name: str, message: str, values: dict) -> bytes:
        return ros2_cdr.diagnostics(self.stamp(t_ns), [(level, name, message, name, values)])

    def time_reference(self, t_ns: int, device_ns: int, source: str) -> bytes:
        if device_ns < 0:
            raise SessionError(f"{self.where}: device time {device_ns} ns: a ROS stamp cannot be")
        stamps = np.array([self.stamp(t_ns)]), np.array([device_ns])
        return ros2_cdr.time_reference_rows(*stamps, source)[0]


def _flag_names(flags: int, kind: type[PoseFlag] | type[TurnFlag]) -> str:
    return " ".join(f.name or "" for f in kind if flags & f) or "none"


def _lidar_items(b: _Builder, s: Session, name: str, out: McapExport) -> Iterator[Item]:
    stream = s.lidar(name)
    turns, _ = b.checked(f"lidar/{name}", stream.read(validate=False))
    frame = _frame(stream.attrs, "ros_frame_id", name)
    if turns.n_turns == 0:
        return
    grid = ScanGrid.for_stream(turns.angle, turns.count)
    out.bins[name] = grid.n_bins
    out.points_dropped[name] = 0
    limits = _scan_limits(s, stream.attrs)
    for k in range(turns.n_turns):
        lo, hi = int(turns.offset[k]), int(turns.offset[k] + turns.count[k])
        if hi == lo:
            continue
        scan = bin_turn(grid, turns.angle[lo:hi], turns.range[lo:hi], turns.intensity[lo:hi],
                        turns.t_ns[lo:hi])  # fmt: skip
        t0 = scan.stamp_ns
        out.points_dropped[name] += scan.dropped
        data = scan.laser_scan(b.stamp(t0), frame, float(turns.speed_hz[k]), limits)
        yield t0, 0, f"/{name}/scan", "sensor_msgs/msg/LaserScan", data
        if turns.device_ns[k] != NO_DEVICE_TIME:  # stamped as the scan it belongs to
            data = b.time_reference(t0, int(turns.device_ns[k]), name)
            yield t0, 1, f"/{name}/time_reference", "sensor_msgs/msg/TimeReference", data
        if turns.flags[k]:
            f = int(turns.flags[k])
            msg = b.diagnostics(t0, ros2_cdr.WARN, name, _flag_names(f, TurnFlag), {"flags": f})
            yield t0, 2, f"/{name}/flags", "diagnostic_msgs/msg/DiagnosticArray", msg


def _scan_limits(s: Session, attrs: dict[str, Any]) -> tuple[float, float]:
    """A lidar stream's LaserScan range limits (m): its rated range; a merged stream's, the
    envelope of its sources' seen from the body (when the session holds them)."""
    sources = [str(n) for n in attrs.get("sources", ())]
    if sources and set(sources) <= set(s.lidar_names()):
        return scan_limits((rated_range_m(a), float(np.hypot(*a.get("mount_xy_yaw", (0, 0))[:2])))
                           for a in (s.lidar(n).attrs for n in sources))  # fmt: skip
    return scan_limits([(rated_range_m(attrs), 0.0)])


def _pose_items(b: _Builder, s: Session, name: str, child: str | None) -> Iterator[Item]:
    """PoseStamped, flags and the Path; for an estimate (``child`` given) Odometry (with
    the :data:`ODOMETRY_COLUMNS` the pose group has) and /tf."""
    stream = s.pose(name)
    pb, kept = b.checked(f"pose/{name}", stream.read(validate=False))
    group = s.h5[f"pose/{name}"]
    extra = {k: group[k][:] if kept is None else group[k][:][kept]
             for k in ODOMETRY_COLUMNS if k in group}  # fmt: skip
    parent = _frame(stream.attrs, "ros_frame_id", ODOM_FRAME if child else "world")
    keep = np.flatnonzero(pb.valid)
    rows = np.column_stack([pb.position, pb.quat_xyzw])  # (n, 7): the pose fields
    stamps = pb.t_ns + b.offset
    if keep.size and (stamps[keep] < 0).any():
        b.stamp(int(pb.t_ns[keep][np.argmax(stamps[keep] < 0)]))  # raises
    n = keep.size
    poses = ros2_cdr.pose_stamped_rows(stamps[keep], parent, rows[keep])
    if child is not None:
        odoms = ros2_cdr.odometry_rows(stamps[keep], (parent, child), np.column_stack(
            [rows[keep]] + [extra[c][keep].reshape(n, -1) if c in extra else np.zeros((n, w))
                            for c, w in zip(ODOMETRY_COLUMNS, (36, 6, 36), strict=True)]
        ))  # fmt: skip
        tfs = ros2_cdr.tf_rows(stamps[keep], (parent, child), rows[keep])
    for j, k in enumerate(keep):
        t = int(pb.t_ns[k])
        yield t, 0, f"/{name}/pose", "geometry_msgs/msg/PoseStamped", poses[j]
        if pb.flags[k]:
            f = int(pb.flags[k])
            msg = b.diagnostics(t, ros2_cdr.OK, name, _flag_names(f, PoseFlag), {"flags": f})
            yield t, 1, f"/{name}/flags", "diagnostic_msgs/msg/DiagnosticArray", msg
        if child is not None:
            yield t, 2, f"/{name}/odom", "nav_msgs/msg/Odometry", odoms[j]
            yield t, 3, "/tf", "tf2_msgs/msg/TFMessage", tfs[j]
    if keep.size:
        last = int(pb.t_ns[keep[-1]])
        path = ros2_cdr.path(int(stamps[keep[-1]]), parent, stamps[keep], rows[keep])
        yield last, 4, f"/{name}/path", "nav_msgs/msg/Path", path


def _encoder_items(b: _Builder, s: Session, name: str) -> Iterator[Item]:
    e, _ = b.checked(f"encoders/{name}", s.encoder(name).read(validate=False))
    n = e.counts.shape[1]
    imu = bool(np.isfinite(e.yaw).any() or np.isfinite(e.yaw_rate).any())
    labels = [f"c{k}" for k in range(n)] + [SEQ_JOINT] + ([YAW_JOINT] if imu else [])
    cols = [e.counts.astype(np.float64), e.seq.astype(np.float64)[:, None]]
    position = np.column_stack(cols + ([e.yaw[:, None]] if imu else []))
    velocity = np.zeros((len(e), 0))
    if imu:
        velocity = np.column_stack([np.full((len(e), n + 1), np.nan), e.yaw_rate])
    stamps = e.host_ns + b.offset
    if len(e) and stamps.min() < 0:
        b.stamp(int(e.host_ns[np.argmin(stamps)]))  # raises
    counts = ros2_cdr.joint_state_rows(stamps, name, labels, position, velocity)
    timed = e.device_ns != NO_DEVICE_TIME
    if (e.device_ns[timed] < 0).any():
        b.time_reference(0, int(e.device_ns[timed].min()), name)  # raises
    refs = iter(ros2_cdr.time_reference_rows(stamps[timed], e.device_ns[timed], name))
    for k in range(len(e)):
        t = int(e.host_ns[k])
        yield t, 0, f"/{name}/counts", "sensor_msgs/msg/JointState", counts[k]
        if timed[k]:
            yield t, 1, f"/{name}/time_reference", "sensor_msgs/msg/TimeReference", next(refs)


def _mount_items(b: _Builder, s: Session, names: list[str], start: int) -> Iterator[Item]:
    """One latched /tf_static: base_link -> every lidar with a mount."""
    mounts = []
    for name in names:
        attrs = s.lidar(name).attrs
        if "mount_xy_yaw" in attrs:
            xy_yaw = [float(v) for v in np.asarray(attrs["mount_xy_yaw"], dtype=np.float64)]
            mounts.append((_frame(attrs, "ros_frame_id", name), xy_yaw))
    if mounts:
        msg = ros2_cdr.mounts_tf(b.stamp(start), BODY_FRAME, mounts)
        yield start, -1, "/tf_static", "tf2_msgs/msg/TFMessage", msg


def _event_items(b: _Builder, s: Session) -> Iterator[Item]:
    for e in sorted(s.events(), key=lambda e: e.t_ns):
        level = ros2_cdr.EVENT_LEVEL.get(e.kind, ros2_cdr.OK)
        msg = b.diagnostics(int(e.t_ns), level, e.source, e.message, {"kind": e.kind})
        yield int(e.t_ns), 5, "/events", "diagnostic_msgs/msg/DiagnosticArray", msg


def _odometry_items(b: _Builder, track: OdometryTrack) -> Iterator[Item]:
    """``/odom`` and ``/tf`` (``odom`` → ``base_link``) per frame of ``track``."""
    for k in range(track.t_ns.size):
        t = int(track.t_ns[k])
        cov = (track.var[k, 0], 0.0, 0.0, track.var[k, 1], 0.0, track.var[k, 2])
        odom, tf = ros2_cdr.planar_odometry(
            b.stamp(t), (ODOM_FRAME, BODY_FRAME), track.pose[k], cov, track.velocity[k],
            track.velocity_var[k],
        )  # fmt: skip
        yield t, 2, "/odom", "nav_msgs/msg/Odometry", odom
        yield t, 3, "/tf", "tf2_msgs/msg/TFMessage", tf


def _estimate_children(s: Session, names: list[str], taken: bool) -> dict[str, str]:
    """The child frame of each estimate stream: its own, or base_link (one per stream;
    ``taken``: base_link is the replayed odometry's)."""
    out: dict[str, str] = {"": BODY_FRAME} if taken else {}
    for n in names:
        if s.pose(n).attrs.get("kind") != "estimate":
            continue
        own = _frame(s.pose(n).attrs, "ros_child_frame_id", "")
        out[n] = own or (BODY_FRAME if BODY_FRAME not in out.values() else f"{n}_{BODY_FRAME}")
    out.pop("", None)
    return out


ODOMETRY_COLUMNS = ("covariance", "twist", "twist_covariance")
"""Pose-group datasets an Odometry carries besides the pose (``import rosbag`` keeps
them; ``live`` writes ``covariance``)."""


def export_mcap(
    session: str | os.PathLike[str],
    out: str | os.PathLike[str],
    names: list[str] | None = None,
    progress: Progress | None = None,
    *,
    skip_invalid: bool = False,
    odometry: OdometryTrack | None = None,
) -> McapExport:
    """Write the streams of ``session`` (or only ``names``), its mounts and events, and
    ``odometry`` as ``/odom`` and ``/tf``, to ``out``; ``progress(written, to write)``.
    ``skip_invalid`` leaves impossible samples out (:attr:`McapExport.skipped`).

    Raises:
        SessionError: a stream the session lacks, a stamp before 1970, or impossible
            samples without ``skip_invalid``.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    out = Path(out)
    result = McapExport()
    with Session(session) as s, tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        everything = s.lidar_names() + s.pose_names() + s.encoder_names()
        chosen = everything if names is None else names
        for n in chosen:
            if n not in everything:
                raise SessionError(f"{session}: no stream {n!r} (have: {', '.join(everything)})")
        first = _first_time(s)
        offset = wall_clock_offset_ns(s, first)
        result.time_offset_ns = offset
        b = _Builder(offset, str(session), skip_invalid)
        lidars = [n for n in chosen if n in s.lidar_names()]
        poses = [n for n in chosen if n in s.pose_names()]
        encoders = [n for n in chosen if n in s.encoder_names()]
        children = _estimate_children(s, poses, odometry is not None)
        start = first or 0
        sources: list[Iterator[Item]] = [_mount_items(b, s, lidars, start)]
        sources += [_lidar_items(b, s, n, result) for n in lidars]
        sources += [_pose_items(b, s, n, children.get(n)) for n in poses]
        sources += [_encoder_items(b, s, n) for n in encoders]
        streams: list[Any] = [*map(s.lidar, lidars), *map(s.pose, poses), *map(s.encoder, encoders)]
        total = max(1, sum(map(len, streams)))  # messages, about: for progress only
        if names is None:
            sources.append(_event_items(b, s))
            total += len(s.events())
        if odometry is not None:
            sources.append(_odometry_items(b, odometry))
            total += 2 * odometry.t_ns.size
        bag = Path(tmp) / "export"
        with Writer(bag, version=8, storage_plugin=StoragePlugin.MCAP) as w:
            w.set_custom_data("sensorbench_session", Path(session).name)
            w.set_custom_data("sensorbench_time_offset_ns", str(offset))
            _write_all(w, store, heapq.merge(*sources, key=lambda i: (i[0], i[1])), result,
                       offset, progress, total)  # fmt: skip
        (mcap,) = bag.glob("*.mcap")
        shutil.move(mcap, out)
    result.skipped = b.skipped
    return result


def _write_all(
    w: Any,
    store: Any,
    items: Iterator[Item],
    result: McapExport,
    offset: int,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> None:
    conns: dict[str, Any] = {}
    for done, (t, _, topic, msgtype, msg) in enumerate(items, start=1):
        if topic not in conns:
            qos = [_latched_qos()] if topic == "/tf_static" else []
            conns[topic] = w.add_connection(
                topic, msgtype, typestore=store, offered_qos_profiles=qos
            )
        w.write(conns[topic], t + offset, msg)
        result.messages[topic] = result.messages.get(topic, 0) + 1
        if progress is not None and not done % 4096:
            progress(min(done, total), total)
    if progress is not None:
        progress(total, total)
