"""``sensorbench live``: capture, plus the filters, the merge and the view as data arrive.

:class:`LiveRuntime` is the :class:`~sensorbench.drivers.capture.CaptureConsumer` that
``run_capture`` hands every decoded item after the writer took it; it declares the
session's ``estimate`` and ``merged`` streams and routes the items to the filters (on
the pod reader's thread), the merge, the view and ROS 2 without blocking a reader.
What runs where and why: docs/LIVE.md, "At wire speed" and "Robust by construction".
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.reader_base import ReaderStatus
from sensorbench.drivers.robot_config import RobotConfig
from sensorbench.errors import LiveError
from sensorbench.fusion.estimate_stream import declare_estimate
from sensorbench.fusion.scan_merge import MergeSetup, StreamingMerger
from sensorbench.live.latency import LatencyLog
from sensorbench.live.odometry import OdometryModels, OdometryWorker, live_event
from sensorbench.live.ros2 import Ros2Options, Ros2Publisher
from sensorbench.live.threads import name_os_threads
from sensorbench.live.udp import PoseDatagram, UdpPublisher
from sensorbench.logs import LidarTurns, SessionWriter
from sensorbench.logs.ros2_cdr import BODY_FRAME
from sensorbench.logs.scan_bins import rated_range_m, scan_limits
from sensorbench.logs.schema import ESTIMATE_STREAM, MERGED_STREAM

if TYPE_CHECKING:
    from sensorbench.drivers.capture import CaptureResult
    from sensorbench.live.foxglove_view import FoxgloveView

AID_STREAM = "pose_sensor"
"""The pose stream that aids the filters (as ``replay``)."""
VIEW_POSE_NS = 20_000_000
"""The view's ``/pose`` and ``/tf`` at most once per this much data time (ns)."""


@dataclass(frozen=True)
class LiveOptions:
    """What the live runtime serves besides the session.

    Attributes:
        foxglove: (host, port) of the Foxglove WebSocket server (port 0: any free one),
            or None.
        udp: (host, port) the per-step pose datagrams go to, or None.
        front, rear: the lidars the merge pairs; None: the first two A1s of the
            configuration, in its order.
        max_dt_s: the merge's pairing window (s), as ``merge --max-dt``.
        estimate_attrs: extra attributes of the estimate stream (model files...).
        ros2: publish as a ROS 2 node (:mod:`~sensorbench.live.ros2`), or None.
    """

    foxglove: tuple[str, int] | None = None
    udp: tuple[str, int] | None = None
    front: str | None = None
    rear: str | None = None
    max_dt_s: float = 0.1
    estimate_attrs: Mapping[str, Any] = field(default_factory=dict)
    ros2: Ros2Options | None = None


@dataclass(frozen=True)
class LiveStatus:
    """A snapshot of the runtime's counters (totals so far) for the status line and
    ``/status``; ``steps_per_s`` since the previous snapshot, ``unpaired`` per merge
    lidar, ``errors`` the workers' last ones, ``port`` the view's (or None)."""

    steps: int
    frames: int
    steps_per_s: float
    coasting: bool
    merged: int
    unpaired: dict[str, int]
    view_dropped: int
    udp_sent: int
    udp_dropped: int
    errors: list[str]
    port: int | None


def scan_topic_limits(config: RobotConfig, pair: tuple[str, str] | None
                      ) -> dict[str, tuple[float, float]]:  # fmt: skip
    """Each mounted lidar's LaserScan range limits (m, its kind's rated range) and, with a
    merge ``pair``, ``"merged"``'s: the pair's seen from the body (their mounts)."""
    rated = {d.name: (rated_range_m({"model": get_kind(d.kind).model}), d.mount)
             for d in config.devices if d.mount is not None}  # fmt: skip
    out = {name: scan_limits([(r, 0.0)]) for name, (r, _) in rated.items()}
    if pair is not None:
        out[MERGED_STREAM] = scan_limits((rated[n][0], math.hypot(rated[n][1].x_m, rated[n][1].y_m))
                                         for n in pair)  # fmt: skip
    return out


def merge_pair(config: RobotConfig, front: str | None, rear: str | None) -> tuple[str, str] | None:
    """The lidars the merge pairs: as given, or the configuration's first two A1s.

    Raises:
        LiveError: a named device is not a mounted lidar of the configuration.
    """
    lidars = [d.name for d in config.devices if get_kind(d.kind).mounted and d.mount is not None]
    for name in (front, rear):
        if name is not None and name not in lidars:
            raise LiveError(
                f"--front/--rear {name!r}: not a lidar with a mount in {config.source} "
                f"(lidars: {', '.join(lidars) or 'none'})"
            )
    if front is not None and rear is not None:
        if front == rear:
            raise LiveError("--front and --rear name the same lidar")
        return front, rear
    a1s = [d.name for d in config.devices if d.kind == "a1" and d.name in lidars]
    if front is None and rear is None:
        return (a1s[0], a1s[1]) if len(a1s) >= 2 else None
    raise LiveError("give both --front and --rear, or neither (the first two A1s)")


def pods_device(config: RobotConfig) -> str | None:
    """The configuration's (first) pod MCU."""
    return next((d.name for d in config.devices if get_kind(d.kind).protocol == "pods"), None)


class MergeWorker:
    """The ``live-merge`` thread: the two lidars' turns pushed in arrival order into the
    :class:`~sensorbench.fusion.scan_merge.StreamingMerger`, the code of ``sensorbench
    merge`` chunked, so ``merged`` is what ``merge`` writes (docs/LIVE.md, "Live is replay").

    Args:
        front, rear: the two lidar stream names.
        setup: mounts, footprint and pairing window (as ``merge`` builds it).
        publish: called with each batch of merged turns; must not block.
    """

    def __init__(self, front: str, rear: str, setup: MergeSetup,
                 publish: Callable[[LidarTurns], None]) -> None:  # fmt: skip
        self.sides = {front: "front", rear: "rear"}
        self.setup = setup
        self.publish = publish
        self.merger = StreamingMerger(setup, self._alone)
        self.writer: SessionWriter | None = None
        self.merged = 0
        self.last_error: str | None = None
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def turns(self, name: str, turns: LidarTurns) -> None:
        """A lidar's new turns (any thread)."""
        if name in self.sides:
            self._inbox.put((self.sides[name], turns))

    def start(self, writer: SessionWriter) -> None:
        """Start the thread; merged turns go to ``writer``."""
        self.writer = writer
        self._thread = threading.Thread(target=self._run, name="live-merge", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Merge what is queued and every pair still pending, then stop."""
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.last_error = f"live-merge did not stop within {timeout_s:g} s"

    def _run(self) -> None:
        while True:
            item = self._inbox.get()
            try:
                self._emit(self.merger.flush() if item is None else self.merger.push(*item))
            except Exception as exc:  # report, keep running: the recording goes on
                self.last_error = f"live-merge: {exc!r}"
                live_event(self.writer, "error", f"live merge failed on a push: {exc!r}")
            if item is None:  # the stop, even after a failed flush
                return

    def _emit(self, merged: LidarTurns) -> None:
        if merged.n_turns == 0:
            return
        self.merged += merged.n_turns
        if self.writer is not None:
            self.writer.append_turns(MERGED_STREAM, merged)
        self.publish(merged)

    def unpaired(self) -> dict[str, int]:
        """Turns of each lidar in no merged scan so far."""
        return {name: self.merger.unpaired[side] for name, side in self.sides.items()}

    def alone(self) -> dict[str, int]:
        """Merged scans of each lidar alone (the other silent) so far."""
        return {name: self.merger.alone[side] for name, side in self.sides.items()}

    def _alone(self, t_ns: int, side: str | None) -> None:
        names = {v: k for k, v in self.sides.items()}
        message = ("merge: pairs again" if side is None else
                   f"merge: {names[side]} alone ({names['rear' if side == 'front' else 'front']} "
                   "silent): single-lidar scans")  # fmt: skip
        live_event(self.writer, "note", message, t_ns)


class LiveRuntime:
    """The live runtime (module docstring); pass it to ``run_capture(consumer=...)``.

    Args:
        config: the robot configuration (devices, mounts, footprint).
        models: the filters' models; None: no filters (merge and view only).
        options: view, UDP, merge and aiding options.

    Raises:
        LiveError: models without a pod device, a bad merge pair, a ROS 2 domain that
            cannot be joined.
    """

    def __init__(
        self, config: RobotConfig, models: OdometryModels | None, options: LiveOptions
    ) -> None:
        self.config = config
        self.models = models
        self.options = options
        self.pods = pods_device(config)
        if models is not None and self.pods is None:
            raise LiveError(f'{config.source}: no pod MCU ([[devices]] kind = "pods") to filter')
        self.pair = merge_pair(config, options.front, options.rear)
        self.mounts = {d.name: d.mount for d in config.devices if d.mount is not None}
        self.anchor_ns = (time.time_ns(), time.monotonic_ns())
        self.view: FoxgloveView | None = None
        self.udp: UdpPublisher | None = None
        self.ros2: Ros2Publisher | None = None
        if options.ros2 is not None:  # joined now: a DDS that cannot start records nothing
            self.ros2 = Ros2Publisher(options.ros2, self.mounts, self.anchor_ns,
                                      models is not None, self.pair is not None,
                                      limits=scan_topic_limits(config, self.pair))  # fmt: skip
            self.ros2.open()
        self.odometry: OdometryWorker | None = None
        self.merge: MergeWorker | None = None
        self._own = {ESTIMATE_STREAM, MERGED_STREAM}
        self._rate = (time.monotonic(), 0)
        self._view_pose_ns = -VIEW_POSE_NS  # data time of the last pose sent to the view
        self._lock = threading.Lock()
        self.setup_error: str | None = None  # why a worker could not be set up
        self.writer: SessionWriter | None = None
        self._warm = False  # the filters' kernels compiled (open)

    def open(self) -> None:
        """Compile the filters' kernels (:meth:`OdometryModels.warm_up`), resolve the UDP
        address and start the Foxglove server: before any device is powered (``start``
        does it if it was not done).

        Raises:
            LiveError: the UDP host does not resolve, the server cannot listen there.
        """
        if self.models is not None and not self._warm:
            self.models.warm_up()
            self._warm = True
        if self.options.udp is not None and self.udp is None:
            self.udp = UdpPublisher(*self.options.udp)
        if self.options.foxglove is not None and self.view is None:
            from sensorbench.live.foxglove_view import FoxgloveView  # foxglove only if asked
            view = FoxgloveView(*self.options.foxglove, self.mounts, self.anchor_ns)
            view.start()
            self.view = view

    def close(self) -> None:
        """Stop the view, close the UDP socket and leave the ROS 2 domain (their counters
        stay readable); safe to call on every path, more than once."""
        if self.view is not None:
            self.view.stop()
        if self.udp is not None:
            self.udp.close()
        if self.ros2 is not None:
            self.ros2.stop()

    # -- CaptureConsumer -----------------------------------------------------------------

    def declare(self, writer: SessionWriter) -> None:
        """Declare ``estimate`` and ``merged`` and set up the workers.

        Never raises (the session is open): filters that cannot run (the pods did not
        come up under ``--allow-missing``, no pose stream to aid from) are left out and
        the reason is :attr:`setup_error` (an ``error`` event, and ``live`` exits 1).
        """
        if self.models is not None and self.pods is not None:
            try:
                self._declare_filters(writer, self.models, self.pods)
            except Exception as exc:
                self.odometry = None
                self.setup_error = f"the filters do not run: {exc}"
        if self.pair is not None:
            front, rear = self.pair
            setup = MergeSetup(
                self.mounts[front],
                self.mounts[rear],
                footprint=self.config.footprint_m,
                max_dt_s=self.options.max_dt_s,
            )
            self.merge = MergeWorker(front, rear, setup, self._publish_merged)
            # those of `merge`'s output that are known before the first turn
            writer.add_lidar(MERGED_STREAM, attrs={
                "model": "merged",
                "frame": BODY_FRAME,
                "mount_xy_yaw": [0.0, 0.0, 0.0],
                "sources": [front, rear],
                "max_dt_s": setup.max_dt_s,
                "pose_source": "",
                "footprint_removed": setup.footprint is not None,
                "recorded_by": "sensorbench live",
            })  # fmt: skip

    def _declare_filters(self, writer: SessionWriter, models: OdometryModels, pods: str) -> None:
        try:
            attrs = writer.stream_attrs("encoder", pods)
        except Exception as exc:
            raise LiveError(f"no pod stream {pods!r} in the session (it did not come up)") from exc
        aid_period = self._aid_period(writer) if models.aid_model is not None else None
        self.odometry = OdometryWorker(models, attrs, self._publish_pose, aid_period)
        declare_estimate(writer, self._estimate_attrs(aid_period))

    def start(self, writer: SessionWriter) -> None:
        """Start the server, the UDP socket (unless :meth:`open` did), the ROS 2 thread
        and the workers (before the readers).

        Raises:
            LiveError: as :meth:`open`.
        """
        self.writer = writer
        if self.setup_error is not None:
            writer.event(time.monotonic_ns(), "live", "error", self.setup_error)
        self.open()
        if self.ros2 is not None:
            self.ros2.start()
        if self.odometry is not None:
            self.odometry.start(writer)
        if self.merge is not None:
            self.merge.start(writer)
        name_os_threads()

    def consume(self, kind: str, name: str, payload: Any) -> None:
        """Route one recorded item (never blocks)."""
        if name in self._own:
            return
        if kind == "encoder" and name == self.pods and self.odometry is not None:
            self.odometry.frames(payload)
        elif kind == "lidar":
            if self.merge is not None:
                self.merge.turns(name, payload)
            if self.view is not None:
                self.view.scan(name, payload)
            if self.ros2 is not None and name in self.mounts:
                self.ros2.scan(name, payload)
        elif kind == "pose" and name == AID_STREAM and self.odometry is not None:
            self.odometry.poses(payload)
        elif kind == "event" and self.view is not None:
            self.view.event(payload[0], name, payload[1], payload[2])

    def stop(self) -> None:
        """Filter and merge everything left, :meth:`close`, then write an ``error`` event
        for each publisher (UDP, ROS 2, view) that failed: its last failure (they have no
        session of their own, so at the end of the run)."""
        if self.odometry is not None:
            self.odometry.stop()
        if self.merge is not None:
            self.merge.stop()
        self.close()
        for pub in (self.udp, self.ros2, self.view):
            if pub is not None and pub.last_error:
                live_event(self.writer, "error", f"publishing failed: {pub.last_error}")

    # -- status ------------------------------------------------------------------------

    def errors(self) -> list[str]:
        """What failed: the filters' set-up, and each worker's and publisher's last error."""
        odo = self.odometry.counters if self.odometry is not None else None
        workers = (odo, self.merge, self.udp, self.ros2, self.view)
        return [e for e in (self.setup_error, *(getattr(w, "last_error", None) for w in workers))
                if e]  # fmt: skip

    def status(self) -> LiveStatus:
        """The runtime's counters now (thread-safe)."""
        odo = self.odometry.counters if self.odometry is not None else None
        steps = odo.steps if odo is not None else 0
        with self._lock:
            t0, s0 = self._rate
            now = time.monotonic()
            self._rate = (now, steps)
        return LiveStatus(
            steps=steps,
            frames=odo.frames if odo is not None else 0,
            steps_per_s=(steps - s0) / (now - t0) if now > t0 else 0.0,
            coasting=bool(odo is not None and odo.coasting),
            merged=self.merge.merged if self.merge is not None else 0,
            unpaired=self.merge.unpaired() if self.merge is not None else {},
            view_dropped=self.view.dropped if self.view is not None else 0,
            udp_sent=self.udp.sent if self.udp is not None else 0,
            udp_dropped=self.udp.dropped if self.udp is not None else 0,
            errors=self.errors(),
            port=self.view.port if self.view is not None else None,
        )

    def on_status(self, elapsed_s: float, statuses: Sequence[ReaderStatus]) -> LiveStatus:
        """Each capture status tick: publish ``/status``, name new threads; the snapshot."""
        st = self.status()
        name_os_threads()
        if self.ros2 is not None:
            self.ros2.status(statuses)
        if self.view is not None:
            devices = [
                {"name": s.name, "kind": s.kind, "connected": s.connected,
                 "items_per_s": s.items_per_s, "turns_per_s": s.turns_per_s,
                 "kB_per_s": s.bytes_per_s / 1000,
                 "since_last_data_s": s.since_last_data_s
                 if math.isfinite(s.since_last_data_s) else None,
                 "crc_errors": s.crc_errors, "drops": s.drops}
                for s in statuses
            ]  # fmt: skip
            self.view.status({"elapsed_s": elapsed_s, "devices": devices, "live": dict(vars(st))})
        return st

    # -- internals -----------------------------------------------------------------------

    def _publish_pose(self, datagrams: list[PoseDatagram],
                      velocity_vars: list[tuple[float, ...]],
                      arrivals: tuple[int, ...]) -> None:  # fmt: skip
        sent_ns = None
        if self.udp is not None:
            for datagram in datagrams:
                self.udp.send(datagram)
            sent_ns = time.monotonic_ns()
        last = datagrams[-1]
        if self.view is not None and last.stamp_ns - self._view_pose_ns >= VIEW_POSE_NS:
            self._view_pose_ns = last.stamp_ns
            self.view.pose(last, arrivals)
        if self.ros2 is not None:
            for datagram, velocity_var in zip(datagrams, velocity_vars, strict=True):
                self.ros2.pose(datagram, velocity_var)
        # the bookkeeping after every output: the ROS 2 pose does not wait behind it
        if sent_ns is not None and self.odometry is not None:
            self.odometry.counters.latencies.extend(sent_ns - a for a in arrivals)

    def _publish_merged(self, turns: LidarTurns) -> None:
        if self.view is not None:
            self.view.merged(turns)
        if self.ros2 is not None:
            self.ros2.merged(turns)

    def _aid_period(self, writer: SessionWriter) -> float:
        try:
            rate = float(writer.stream_attrs("pose", AID_STREAM).get("rate_hz", np.nan))
        except Exception as exc:
            raise LiveError(
                f"pose aiding needs a {AID_STREAM!r} stream in the session: {exc}"
            ) from exc
        if not (math.isfinite(rate) and rate > 0):
            raise LiveError(
                "pose aiding needs the pose sensor's period: its stream states no rate_hz"
            )
        return 1.0 / rate

    def _estimate_attrs(self, aid_period: float | None) -> dict[str, Any]:
        m = self.models
        assert m is not None
        return {
            "recorded_by": "sensorbench live",
            "filter": "split x/y/heading, (position, velocity) each",
            "frame": "odom: the pose at the first pod frame is the origin",
            "gate": m.gate,
            "monitor": f"x, y, theta NIS over {m.monitor_window} updates at level "
            f"{m.monitor_level}, each axis's window sized by its fitted nis_tau"
            + (", and the pods against the IMU's yaw" if m.imu else ""),
            "bounce_repair": "off (not causal; replay --no-repair matches)",
            "aid_period_s": aid_period if aid_period is not None else "",
            **self.options.estimate_attrs,
        }


def live_summary(runtime: LiveRuntime) -> dict[str, Any]:
    """What the live run did, JSON-ready: filter steps and frames, how much the IMU widened
    the heading's σ (rad), merged scans, messages published per topic and dropped,
    datagrams, frame-to-publish latencies."""
    st, odo, view, ros2 = runtime.status(), runtime.odometry, runtime.view, runtime.ros2
    counters = odo.counters if odo is not None else None
    return {
        "filter_steps": st.steps,
        "frames_filtered": st.frames,
        "predictions": counters.predictions if counters is not None else 0,
        "aiding_late": counters.aid_late if counters is not None else 0,
        "widened_heading_sigma_rad": odo.widened_rad() if odo is not None else 0.0,
        "merged_scans": st.merged,
        "unpaired_turns": st.unpaired,
        "single_lidar_scans": runtime.merge.alone() if runtime.merge is not None else {},
        "view": None if view is None
        else {"port": st.port, "published": dict(view.published), "dropped": view.dropped},
        "udp": None if runtime.udp is None
        else {"sent": st.udp_sent, "dropped": st.udp_dropped,
              "address": list(runtime.options.udp or ())},
        "ros2": None if ros2 is None
        else {"domain": ros2.options.domain, "published": dict(ros2.published),
              "dropped": ros2.dropped},
        "latency": {
            "udp": counters.latencies.summary() if counters is not None else LatencyLog().summary(),
            "view": view.latencies.summary() if view is not None else LatencyLog().summary(),
        },
        "errors": st.errors,
    }  # fmt: skip


def format_live_summary(doc: Mapping[str, Any]) -> str:
    """:func:`live_summary` as lines for the terminal."""
    unpaired = ", ".join(f"{k} {v}" for k, v in doc["unpaired_turns"].items())
    lines = [f"live: {doc['filter_steps']} filter steps over {doc['frames_filtered']} frames, "
             f"{doc['merged_scans']} merged scans" + (f", unpaired {unpaired}" if unpaired else "")
             + "".join(f", {k} alone {v}" for k, v in doc["single_lidar_scans"].items() if v)]
    for key, what in (("view", "foxglove ws port {port}"), ("udp", ""),
                      ("ros2", "ros2 domain {domain}")):  # fmt: skip
        if (d := doc[key]) is None:
            continue
        pub = ", ".join(f"{k} {v}" for k, v in sorted(d.get("published", {}).items()))
        lines.append(f"udp: {d['sent']} datagrams sent, {d['dropped']} dropped" if key == "udp"
                     else f"{what.format(**d)}: {pub or 'nothing'}; dropped {d['dropped']}")
    lines += [f"frame arrival → {where} publish: p50 {lat['p50_ms']:.2f} ms, "
              f"p99 {lat['p99_ms']:.2f} ms ({lat['n']} batches)"
              for where, lat in doc["latency"].items() if lat["n"]]  # fmt: skip
    lines += [f"LIVE ERROR: {e}" for e in doc["errors"]]
    return "\n".join(lines)


def format_live_status(st: LiveStatus) -> list[str]:
    """The live part of the status line: filter step rate (or COASTING), merged scans,
    view messages dropped, UDP datagrams dropped."""
    parts = [
        f"filters {'COASTING' if st.coasting else f'{st.steps_per_s:.0f} st/s'} "
        f"{st.frames} fr, merged {st.merged}"
    ]
    if st.port is not None:
        parts.append(f"view :{st.port} drop {st.view_dropped}")
    if st.udp_sent or st.udp_dropped:
        parts.append(f"udp {st.udp_sent} drop {st.udp_dropped}")
    if st.errors:
        parts.append(f"LIVE ERROR {st.errors[-1][:60]}")
    return parts


def live_failures(result: CaptureResult, runtime: LiveRuntime) -> tuple[int, list[str]]:
    """A live run's exit code (0, 1, or 2 for a full disk) and why it failed: the
    capture's error, devices lost and never back, :meth:`LiveRuntime.errors` (filters
    that could not run, the filters or the merge failing on their input: their output in
    the session is not whole; a publisher failing: the robot did not get it all)."""
    why = [result.error] if result.error else []
    lost = [d.name for d in result.devices if d.unplugs > d.reconnects]
    why += [f"lost and never back: {', '.join(lost)}"] if lost else []
    why += runtime.errors()
    code = result.exit_code or (1 if why else 0)
    return code, why
