"""Export a session to one rosbag2 MCAP file of ROS 2 messages (CDR), topics as
docs/FORMAT.md ("Export to MCAP") lists them, stamped in wall-clock ns
(:func:`wall_clock_offset_ns`)."""

from __future__ import annotations

import copy
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
    """Added to every session time on the host clock for the stamps (wall clock = session +
    offset); a stream or event already on Unix time is stamped as it is."""
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
"""(log time: the stamp, ns since 1970; tie-breaker, topic, message type, the message's CDR
bytes)."""


MAX_STAMP_NS = 2**31 * 1_000_000_000
"""A ROS 2 stamp's seconds are an int32: the first time (ns since 1970, 2038-01-19) none holds."""


class _Builder:
    """ROS 2 messages from session arrays, stamped ``t + offset``: ``offset`` is the session's
    clock anchor for a stream on the host clock, 0 for one already on Unix time
    (:meth:`along`)."""

    def __init__(self, offset: int, where: str, skip_invalid: bool) -> None:
        self.offset = offset
        self.host_offset = offset
        self.where = where
        self.skip_invalid = skip_invalid
        self.skipped: dict[str, int] = {}

    def along(self, first_ns: int | None, what: str) -> _Builder:
        """This builder for a stream (or event) ``what`` whose first time is ``first_ns``
        (ns): its times are already Unix time from :data:`UNIX_TIME_FROM_NS` on (an imported
        bag or epoch-stamped file beside a capture on the host clock), else they take the
        anchor. Its errors name ``what``."""
        other = copy.copy(self)  # the skipped counts stay shared
        other.where = f"{self.where}: {what}"
        unix = first_ns is not None and first_ns >= UNIX_TIME_FROM_NS
        other.offset = 0 if unix else self.host_offset
        return other

    def stamps(self, t_ns: np.ndarray) -> np.ndarray:
        """Session times' stamps (ns since 1970), each checked as :meth:`stamp` checks it."""
        out = np.asarray(t_ns, dtype=np.int64) + self.offset
        bad = np.flatnonzero((out < 0) | (out >= MAX_STAMP_NS))
        if bad.size:
            self.stamp(int(np.asarray(t_ns)[bad[0]]))  # raises
        return out

    def checked(self, key: str, batch: Batch) -> tuple[Batch, np.ndarray | None]:
        """``batch`` without its impossible samples (refused unless ``skip_invalid``)
        and the mask of the rows kept (None: all of them)."""
        kept, dropped = exportable(self.where, key, batch, skip_invalid=self.skip_invalid)
        if not dropped.any():
            return batch, None
        self.skipped[key] = int(dropped.sum())
        return kept, ~dropped

    def stamp(self, t_ns: int) -> int:
        """A session time's stamp (ns since 1970).

        Raises:
            SessionError: a stamp before 1970 or from 2038-01-19 on (a ROS 2 stamp's
                int32 seconds)."""
        if t_ns + self.offset < 0:
            raise SessionError(
                f"{self.where}: time {t_ns} ns is before 1970; a ROS stamp cannot be"
            )
        if t_ns + self.offset >= MAX_STAMP_NS:
            shifted = f" (+ {self.offset} ns, the session's clock anchor)" if self.offset else ""
            raise SessionError(
                f"{self.where}: time {t_ns} ns{shifted} is 2038-01-19 or later; a ROS 2 "
                "stamp (int32 seconds) cannot be"
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
    b = b.along(int(turns.t_first_ns[0]), f"lidar/{name}")
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
        log = b.stamp(t0)
        data = scan.laser_scan(log, frame, float(turns.speed_hz[k]), limits)
        yield log, 0, f"/{name}/scan", "sensor_msgs/msg/LaserScan", data
        if turns.device_ns[k] != NO_DEVICE_TIME:  # stamped as the scan it belongs to
            data = b.time_reference(t0, int(turns.device_ns[k]), name)
            yield log, 1, f"/{name}/time_reference", "sensor_msgs/msg/TimeReference", data
        if turns.flags[k]:
            f = int(turns.flags[k])
            msg = b.diagnostics(t0, ros2_cdr.WARN, name, _flag_names(f, TurnFlag), {"flags": f})
            yield log, 2, f"/{name}/flags", "diagnostic_msgs/msg/DiagnosticArray", msg


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
    b = b.along(int(pb.t_ns[keep[0]]) if keep.size else None, f"pose/{name}")
    stamps = pb.t_ns + b.offset
    if keep.size:
        b.stamps(pb.t_ns[keep])  # raises for a stamp before 1970 or past 2038
    n = keep.size
    poses = ros2_cdr.pose_stamped_rows(stamps[keep], parent, rows[keep])
    if child is not None:
        odoms = ros2_cdr.odometry_rows(stamps[keep], (parent, child), np.column_stack(
            [rows[keep]] + [extra[c][keep].reshape(n, -1) if c in extra else np.zeros((n, w))
                            for c, w in zip(ODOMETRY_COLUMNS, (36, 6, 36), strict=True)]
        ))  # fmt: skip
        tfs = ros2_cdr.tf_rows(stamps[keep], (parent, child), rows[keep])
    for j, k in enumerate(keep):
        t, log = int(pb.t_ns[k]), int(stamps[k])
        yield log, 0, f"/{name}/pose", "geometry_msgs/msg/PoseStamped", poses[j]
        if pb.flags[k]:
            f = int(pb.flags[k])
            msg = b.diagnostics(t, ros2_cdr.OK, name, _flag_names(f, PoseFlag), {"flags": f})
            yield log, 1, f"/{name}/flags", "diagnostic_msgs/msg/DiagnosticArray", msg
        if child is not None:
            yield log, 2, f"/{name}/odom", "nav_msgs/msg/Odometry", odoms[j]
            yield log, 3, "/tf", "tf2_msgs/msg/TFMessage", tfs[j]
    if keep.size:
        last = int(stamps[keep[-1]])
        path = ros2_cdr.path(last, parent, stamps[keep], rows[keep])
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
    b = b.along(int(e.host_ns[0]) if len(e) else None, f"encoders/{name}")
    stamps = b.stamps(e.host_ns)
    counts = ros2_cdr.joint_state_rows(stamps, name, labels, position, velocity)
    timed = e.device_ns != NO_DEVICE_TIME
    if (e.device_ns[timed] < 0).any():
        b.time_reference(0, int(e.device_ns[timed].min()), name)  # raises
    refs = iter(ros2_cdr.time_reference_rows(stamps[timed], e.device_ns[timed], name))
    for k in range(len(e)):
        log = int(stamps[k])
        yield log, 0, f"/{name}/counts", "sensor_msgs/msg/JointState", counts[k]
        if timed[k]:
            yield log, 1, f"/{name}/time_reference", "sensor_msgs/msg/TimeReference", next(refs)


def _mount_items(b: _Builder, s: Session, names: list[str], start: int) -> Iterator[Item]:
    """One latched /tf_static: base_link -> every lidar with a mount."""
    mounts = []
    for name in names:
        attrs = s.lidar(name).attrs
        if "mount_xy_yaw" in attrs:
            xy_yaw = [float(v) for v in np.asarray(attrs["mount_xy_yaw"], dtype=np.float64)]
            mounts.append((_frame(attrs, "ros_frame_id", name), xy_yaw))
    if mounts:
        log = b.stamp(start)
        msg = ros2_cdr.mounts_tf(log, BODY_FRAME, mounts)
        yield log, -1, "/tf_static", "tf2_msgs/msg/TFMessage", msg


def _event_items(b: _Builder, s: Session) -> Iterator[Item]:
    for e in sorted(s.events(), key=lambda e: e.t_ns):
        level = ros2_cdr.EVENT_LEVEL.get(e.kind, ros2_cdr.OK)
        at = b.along(int(e.t_ns), "events")
        msg = at.diagnostics(int(e.t_ns), level, e.source, e.message, {"kind": e.kind})
        yield at.stamp(int(e.t_ns)), 5, "/events", "diagnostic_msgs/msg/DiagnosticArray", msg


def _odometry_items(b: _Builder, track: OdometryTrack) -> Iterator[Item]:
    """``/odom`` and ``/tf`` (``odom`` → ``base_link``) per frame of ``track``."""
    b = b.along(int(track.t_ns[0]) if track.t_ns.size else None, "/odom")
    for k in range(track.t_ns.size):
        log = b.stamp(int(track.t_ns[k]))
        cov = (track.var[k, 0], 0.0, 0.0, track.var[k, 1], 0.0, track.var[k, 2])
        odom, tf = ros2_cdr.planar_odometry(
            log, (ODOM_FRAME, BODY_FRAME), track.pose[k], cov, track.velocity[k],
            track.velocity_var[k],
        )  # fmt: skip
        yield log, 2, "/odom", "nav_msgs/msg/Odometry", odom
        yield log, 3, "/tf", "tf2_msgs/msg/TFMessage", tf


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
                       progress, total)  # fmt: skip
        (mcap,) = bag.glob("*.mcap")
        shutil.move(mcap, out)
    result.skipped = b.skipped
    return result


def _write_all(
    w: Any,
    store: Any,
    items: Iterator[Item],
    result: McapExport,
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
        w.write(conns[topic], t, msg)
        result.messages[topic] = result.messages.get(topic, 0) + 1
        if progress is not None and not done % 4096:
            progress(min(done, total), total)
    if progress is not None:
        progress(total, total)
