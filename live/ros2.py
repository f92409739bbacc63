"""``live --ros2``: the live odometry, scans, transforms and health as a ROS 2 node's topics.

Cyclone DDS with ROS 2's topic names (``rt/`` + the ROS name), type names
(:mod:`~sensorbench.live.ros2_msgs`) and QoS (docs/LIVE.md, "ROS 2"). Odometry and
transforms are written from the filters' thread (a keep-last writer never waits),
scans and diagnostics from ``live-ros2`` through a :class:`~sensorbench.live.threads.
DropQueue`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sensorbench.drivers.reader_base import ReaderStatus
from sensorbench.drivers.robot_config import Mount
from sensorbench.errors import LiveError
from sensorbench.live.threads import DropQueue
from sensorbench.live.udp import PREDICTED, PoseDatagram
from sensorbench.logs import LidarTurns, PoseFlag
from sensorbench.logs.ros2_cdr import (
    BODY_FRAME,
    ODOM_FRAME,
    OK,
    STALE,
    WARN,
    diagnostics,
    laser_scan,
    mounts_tf,
    planar_odometry,
)
from sensorbench.logs.scan_bins import (
    ScanGrid,
    binned_turns,
    rated_range_m,
    scan_limits,
    stream_grid,
)
from sensorbench.logs.schema import MERGED_STREAM

DIAGNOSTICS_PERIOD_S = 1.0


@dataclass(frozen=True)
class Ros2Options:
    """The ROS 2 side of ``live --ros2``.

    Attributes:
        domain: the DDS domain id (``ROS_DOMAIN_ID``), 0..232.
        odom_frame, base_frame: the odometry and body frame ids.
        scan_frame: frame of the merged ``/scan``; None: ``base_frame``.
        stale_s: silence after which a device, the filters or the merge is STALE (s).
        tf: publish ``odom`` → base frame on ``/tf`` (off when another node, e.g.
            robot_localization's EKF, publishes it).
    """

    domain: int = 0
    odom_frame: str = ODOM_FRAME
    base_frame: str = BODY_FRAME
    scan_frame: str | None = None
    stale_s: float = 1.0
    tf: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.domain <= 232:
            raise LiveError(f"--ros2-domain {self.domain}: a ROS 2 domain id is 0..232")
        for f in (self.odom_frame, self.base_frame, self.scan_frame):
            if f is not None and (not f or f.startswith("/") or not f.isprintable()
                                  or any(c.isspace() for c in f)):  # fmt: skip
                raise LiveError(f"frame id {f!r}: give a non-empty name without a leading "
                                "'/', spaces or control characters")


def _check_frames(o: Ros2Options, lidars: Iterable[str]) -> None:
    """LiveError for a lidar name that makes no ROS 2 topic name, and for frame ids that
    would make /tf a loop or put a scan in the wrong frame: the odometry frame as the
    body's, a lidar's frame (its name: its scans are in it, placed by /tf_static) for
    another, or the merged scan (measured from the body) in the odometry frame."""
    if o.odom_frame == o.base_frame:
        raise LiveError(f"--ros2-odom-frame and --ros2-base-frame are both {o.odom_frame!r}: "
                        "odom -> body would place a frame in itself")
    names = set(lidars)
    for name in names:
        if "-" in name:  # robot.toml's names are letters, digits, _ and -; ROS 2's have no -
            raise LiveError(f"lidar {name!r}: /{name}/scan is not a ROS 2 topic name (no '-' "
                            "in ROS 2 names): rename the device in robot.toml, e.g. "
                            f"{name.replace('-', '_')!r}")
    for option, frame in (("odom", o.odom_frame), ("base", o.base_frame),
                          ("scan", o.scan_frame)):  # fmt: skip
        if frame in names:
            raise LiveError(f"--ros2-{option}-frame {frame!r}: that is lidar {frame}'s own "
                            "frame (its scans are published in it); choose another name")
    if o.scan_frame == o.odom_frame:
        raise LiveError(f"--ros2-scan-frame {o.scan_frame!r} is the odometry frame: the "
                        "merged scan is measured from the body, not fixed in odom")


def _qos(kind: str) -> Any:
    """The QoS a ROS 2 subscriber of that kind asks for (rclcpp's profiles), in plain CDR."""
    from cyclonedds.core import Policy, Qos
    from cyclonedds.util import duration

    xcdr1 = Policy.DataRepresentation(use_cdrv0_representation=True)
    reliable = Policy.Reliability.Reliable(max_blocking_time=duration(milliseconds=100))
    if kind == "sensor":  # rclcpp::SensorDataQoS
        return Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5),
                   Policy.Durability.Volatile, xcdr1)  # fmt: skip
    if kind == "static":  # tf2_ros::StaticBroadcasterQoS
        return Qos(reliable, Policy.History.KeepLast(1), Policy.Durability.TransientLocal, xcdr1)
    # tf2_ros::DynamicBroadcasterQoS's 100; /odom too, at the pods' 200 Hz (a reliable
    # keep-last writer replaces what a subscriber has not acknowledged), else rclcpp's 10
    depth = 100 if kind in ("tf", "odom") else 10
    return Qos(reliable, Policy.History.KeepLast(depth), Policy.Durability.Volatile, xcdr1)


class Ros2Publisher:
    """The DDS participant and its writers (module docstring).

    Args:
        options: domain, frames, staleness.
        mounts: lidar device name → its mount in the base frame.
        anchor_ns: (wall-clock ns, monotonic ns) of one instant: data times → stamps.
        filters: the filters run (their health is published).
        merged: the merge runs (``/scan`` and its health are published).
        queue_size: scan items waiting for the ``live-ros2`` thread at most.
        limits: each scan topic's range_min and range_max (m, :func:`~sensorbench.logs.
            scan_bins.scan_limits`): lidar name → its, ``"merged"`` → ``/scan``'s; a
            name not there: 0 to ``MAX_RANGE_M``.

    Attributes:
        published: messages written per topic.
        last_error: the last write that failed, or None.
    """

    def __init__(self, options: Ros2Options, mounts: Mapping[str, Mount],
                 anchor_ns: tuple[int, int], filters: bool, merged: bool,
                 queue_size: int = 64,
                 limits: Mapping[str, tuple[float, float]] | None = None) -> None:  # fmt: skip
        _check_frames(options, mounts)
        self.options = options
        self.mounts = dict(mounts)
        self.anchor_ns = anchor_ns
        self.has_filters = filters
        self.has_merge = merged
        self.queue = DropQueue(queue_size)
        self.limits = dict(limits or {})
        self.published: dict[str, int] = {}
        self.last_error: str | None = None
        self._writers: dict[str, Any] = {}
        self._grids: dict[str, ScanGrid] = {}
        self._participant: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._statuses: tuple[float, Sequence[ReaderStatus]] = (time.monotonic(), ())
        self._reported: dict[str, tuple[int, int]] = {}  # CRC errors, drops: last diagnostics
        self._started = time.monotonic()
        self._last_step = -math.inf
        self._last_flags = 0
        self._predicting = False
        self._steps = 0
        self._last_merged = -math.inf
        self._merged = 0
        self._stale: list[str] = []

    @property
    def dropped(self) -> int:
        """Scan items dropped because the ``live-ros2`` thread fell behind."""
        return self.queue.dropped

    # -- set-up ------------------------------------------------------------------------

    def open(self) -> None:
        """Join the domain, create the writers and publish ``/tf_static`` (before the
        capture starts, so a DDS that cannot start records nothing).

        Raises:
            LiveError: Cyclone DDS cannot start (it does not import, a bad ``CYCLONEDDS_URI``,
                no interface).
        """
        try:
            from cyclonedds.domain import DomainParticipant
            from cyclonedds.pub import DataWriter
            from cyclonedds.topic import Topic

            from sensorbench.live import ros2_msgs as m

            dp = self._participant = DomainParticipant(self.options.domain)
            topics = [("/odom", m.ODOMETRY, "odom"), ("/tf", m.TF_MESSAGE, "tf"),
                      ("/tf_static", m.TF_MESSAGE, "static"),
                      ("/diagnostics", m.DIAGNOSTIC_ARRAY, "reliable")]  # fmt: skip
            if self.has_merge:
                topics.append(("/scan", m.LASER_SCAN, "sensor"))
            topics += [(f"/{name}/scan", m.LASER_SCAN, "sensor") for name in self.mounts]
            for topic, kind, qos in topics:
                q = _qos(qos)
                self._writers[topic] = DataWriter(dp, Topic(dp, "rt" + topic, kind, qos=q), qos=q)
        except Exception as exc:  # the binding raises DDSException and others
            raise LiveError(f"cannot start ROS 2 (Cyclone DDS) on domain "
                            f"{self.options.domain}: {exc}") from exc  # fmt: skip
        self._static()

    def start(self) -> None:
        """Start the ``live-ros2`` thread (scans and diagnostics)."""
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="live-ros2", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Publish the scans queued (within ``timeout_s``), stop the thread, leave the domain."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._writers.clear()
        self._participant = None  # the binding deletes the entities with the objects

    # -- producers (any thread; never block) -------------------------------------------

    def pose(self, datagram: PoseDatagram, velocity_var: Sequence[float]) -> None:
        """One filtered frame or prediction (its velocity variances m²/s², m²/s², rad²/s²):
        ``/odom``, and ``/tf`` for a frame (the calling thread writes: keep-last writers
        never wait)."""
        o = self.options
        odom, tf = planar_odometry(
            self._stamp(datagram.stamp_ns), (o.odom_frame, o.base_frame), datagram.pose,
            datagram.covariance, datagram.velocity, velocity_var,
        )  # fmt: skip
        predicted = bool(datagram.flags & PREDICTED)
        self._predicting = predicted
        if not predicted:
            self._last_step = time.monotonic()
            self._last_flags |= datagram.flags  # every flag since the last diagnostics
            self._steps += 1
        self._write("/odom", odom)
        if not predicted and o.tf:
            self._write("/tf", tf)

    def scan(self, name: str, turns: LidarTurns) -> None:
        """A lidar's new turns (none while no subscriber matches its topic, once the
        stream's grid is made: its first turn's)."""
        if name not in self._grids or self._heard(f"/{name}/scan"):
            self.queue.put((self._lidar, name, turns))

    def merged(self, turns: LidarTurns) -> None:
        """New merged scans (base frame), while a subscriber matches ``/scan``."""
        self._last_merged = time.monotonic()
        self._merged += turns.n_turns
        if self._heard("/scan"):
            self.queue.put((self._merged_scan, turns))

    def _heard(self, topic: str) -> bool:
        """A subscriber matches ``topic``'s writer: DDS delivers a sample written before
        that to no one (``/scan`` volatile), so a scan nobody hears is not built."""
        writer = self._writers.get(topic)
        try:
            return writer is not None and bool(writer.get_matched_subscriptions())
        except Exception:  # the binding raises DDSException: write, and count its failure
            return True

    def status(self, statuses: Sequence[ReaderStatus]) -> None:
        """The readers' status now (each capture status tick)."""
        self._statuses = (time.monotonic(), tuple(statuses))

    # -- the thread --------------------------------------------------------------------

    def _run(self) -> None:
        last = -math.inf
        while True:
            item = self.queue.get(0.1)
            try:
                if item is not None:  # (publish, its arguments)
                    item[0](*item[1:])
                last = self._tick(time.monotonic(), last)
            except Exception as exc:  # a bad item must not end the publisher
                self.last_error = f"live-ros2: {exc!r}"
            if item is None and self._stop.is_set():
                return

    def _tick(self, now: float, last: float) -> float:
        """``/diagnostics`` at ``now`` (monotonic s) when :data:`DIAGNOSTICS_PERIOD_S` has
        passed since ``last`` (s) or a health turned STALE or back; when they last went out
        (s). The flags and faults a diagnostics states are those since the last."""
        statuses = self.health(now)
        stale = [h.name for h in statuses if h.level == STALE]
        if now - last < DIAGNOSTICS_PERIOD_S and stale == self._stale:
            return last
        self._diagnostics(statuses)
        self._stale = stale
        self._last_flags = 0
        self._reported = {h.name: (h.values["crc_errors"], h.values["drops"])
                          for h in statuses if "crc_errors" in h.values}  # fmt: skip
        return now

    def _write(self, topic: str, cdr: bytes) -> None:
        try:
            writer = self._writers[topic]
            writer.write(writer.data_type(cdr))
            self.published[topic] = self.published.get(topic, 0) + 1
        except Exception as exc:  # counted and kept, never raised into a worker
            self.last_error = f"ROS 2 {topic}: {exc!r}"

    def _stamp(self, t_ns: int) -> int:
        """A monotonic time's stamp (ns since 1970)."""
        return self.anchor_ns[0] + (int(t_ns) - self.anchor_ns[1])

    def _static(self) -> None:
        mounts = [(name, (m.x_m, m.y_m, m.yaw_rad)) for name, m in self.mounts.items()]
        scan = self.options.scan_frame
        if self.has_merge and scan not in (None, self.options.base_frame):
            mounts.append((scan, (0.0, 0.0, 0.0)))  # /scan is measured from the body's origin
        if mounts:
            stamp = self._stamp(time.monotonic_ns())
            self._write("/tf_static", mounts_tf(stamp, self.options.base_frame, mounts))

    def _lidar(self, name: str, turns: LidarTurns) -> None:
        if not self._heard(f"/{name}/scan"):  # only the grid, which the first turn makes
            stream_grid(self._grids, name, turns)
            return
        for k, _, b in binned_turns(self._grids, name, turns):
            msg = b.laser_scan(self._stamp(b.stamp_ns), name, float(turns.speed_hz[k]),
                               self._limits(name))  # fmt: skip
            self._write(f"/{name}/scan", msg)

    def _limits(self, name: str) -> tuple[float, float]:
        return self.limits.get(name) or scan_limits([(rated_range_m({}), 0.0)])

    def _merged_scan(self, turns: LidarTurns) -> None:
        frame = self.options.scan_frame or self.options.base_frame
        for k in range(turns.n_turns):
            lo, n = int(turns.offset[k]), int(turns.count[k])
            if n < 2:
                continue
            r = turns.range[lo : lo + n]
            inc = float(turns.angle[lo + 1] - turns.angle[lo])
            # angles min, max, increment; time increment, scan time, range min, range max
            params = (float(turns.angle[lo]), float(turns.angle[lo + n - 1]), inc, 0.0, 0.0,
                      *self._limits(MERGED_STREAM))  # fmt: skip
            msg = laser_scan(self._stamp(int(turns.t_first_ns[k])), frame, params, r,
                             turns.intensity[lo : lo + n])  # fmt: skip
            self._write("/scan", msg)

    # -- health ------------------------------------------------------------------------

    def health(self, now: float) -> list[Health]:
        """Each device's, the filters' and the merge's health at ``now`` (monotonic s)."""
        stale = self.options.stale_s
        taken, statuses = self._statuses
        out = []
        for s in statuses:
            quiet = s.since_last_data_s + (now - taken)
            values = {"connected": s.connected, "items_per_s": round(s.items_per_s, 1),
                      "turns_per_s": round(s.turns_per_s, 2),
                      "kB_per_s": round(s.bytes_per_s / 1000, 2), "crc_errors": s.crc_errors,
                      "drops": s.drops, "since_last_data_s": round(quiet, 3),
                      "reconnects": s.reconnects, "port": s.port}  # fmt: skip
            crc0, drops0 = self._reported.get(s.name, (0, 0))
            crc, drops = s.crc_errors - crc0, s.drops - drops0
            if s.last_error:
                values["last_error"] = s.last_error
            if not s.connected or s.reader_down:
                level, msg = STALE, "unplugged" if not s.connected else "reader down: data lost"
            elif not quiet <= stale:
                level, msg = STALE, f"no data for {quiet:.1f} s"
            elif crc or drops:
                level, msg = WARN, f"{crc} CRC errors, {drops} drops since the last diagnostics"
            else:
                level, msg = OK, f"{s.items_per_s:.0f} /s"
            out.append(Health(s.name, level, msg, s.kind, values))
        if self.has_filters:
            out.append(self._filter_health(now))
        if self.has_merge:
            quiet = now - (self._last_merged if self._merged else self._started)
            level, msg = (STALE, f"no merged scan for {quiet:.1f} s") if quiet > stale else (OK, "")
            values = {"merged": self._merged, "since_last_merged_s": round(quiet, 3)}
            out.append(Health("merge", level, msg, "front/rear merge", values))
        return out

    def _filter_health(self, now: float) -> Health:
        quiet = now - (self._last_step if self._steps else self._started)
        flags = self._last_flags
        names = [f.name for f in (PoseFlag.DEGRADED, PoseFlag.COASTING) if flags & f]
        if self._predicting:
            names.append("COASTING")
        values = {"steps": self._steps, "since_last_step_s": round(quiet, 3),
                  "flags": " ".join(n or "" for n in names) or "none"}  # fmt: skip
        if quiet > self.options.stale_s:
            coasting = ": publishing predictions" if self._predicting else ""
            level, msg = STALE, f"no filter step for {quiet:.1f} s{coasting}"
        elif names:
            level, msg = WARN, " ".join(n or "" for n in dict.fromkeys(names))
        else:
            level, msg = OK, "stepping"
        return Health("filters", level, msg, "split filters", values)

    def _diagnostics(self, health: list[Health]) -> None:
        statuses = [(h.level, f"sensorbench: {h.name}", h.message, h.hardware_id, h.values)
                    for h in health]  # fmt: skip
        self._write("/diagnostics", diagnostics(self._stamp(time.monotonic_ns()), statuses))


@dataclass(frozen=True)
class Health:
    """One ``diagnostic_msgs/DiagnosticStatus``; ``level``: ros2_cdr's OK, WARN or STALE."""

    name: str
    level: int
    message: str
    hardware_id: str
    values: dict[str, Any]

