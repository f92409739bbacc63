"""The live view in Foxglove: the official ``foxglove-sdk`` WebSocket server, behind
:class:`~sensorbench.live.ws_gate.SubprotocolGate`, fed through a bounded
:class:`~sensorbench.live.threads.DropQueue` by one thread, ``live-view`` (its channels
and why a slow viewer stalls nothing: docs/LIVE.md).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Mapping
from typing import Any

import foxglove
import numpy as np
from foxglove import channels as fc
from foxglove import messages as fm
from foxglove.websocket import ServerListener

from sensorbench.drivers.robot_config import Mount
from sensorbench.errors import LiveError
from sensorbench.live.latency import LatencyLog
from sensorbench.live.threads import DropQueue
from sensorbench.live.udp import PoseDatagram
from sensorbench.live.ws_gate import SubprotocolGate
from sensorbench.logs import LidarTurns
from sensorbench.logs.ros2_cdr import BODY_FRAME, ERROR, EVENT_LEVEL, ODOM_FRAME, OK, WARN, yaw_quat
from sensorbench.logs.scan_bins import ScanGrid, binned_turns, stream_grid

PATH_STEP_NS = 100_000_000
PATH_POSES = 2000
EVENT_HISTORY = 100
"""Events kept for a viewer that subscribes to ``/events`` later."""
STATUS_SCHEMA = {
    "title": "sensorbench.LiveStatus",
    "type": "object",
    "properties": {
        "elapsed_s": {"type": "number"},
        "devices": {"type": "array", "items": {"type": "object"}},
        "live": {"type": "object"},
    },
}


class FoxgloveView:
    """The Foxglove WebSocket server and its channels (module docstring).

    Args:
        host, port: where to listen (port 0: any free port, see :attr:`port`).
        lidars: lidar device name → its mount in ``base_link``.
        anchor_ns: (wall-clock ns, monotonic ns) of one instant: maps data times to
            the wall clock.
        queue_size: items waiting for the view thread at most.
    """

    def __init__(self, host: str, port: int, lidars: Mapping[str, Mount],
                 anchor_ns: tuple[int, int], queue_size: int = 256) -> None:  # fmt: skip
        self.host = host
        self.requested_port = int(port)
        self.mounts = dict(lidars)
        self.anchor_ns = anchor_ns
        self.queue = DropQueue(queue_size)
        self.published: dict[str, int] = {}
        self.latencies = LatencyLog()
        self.last_error: str | None = None  # the last item it failed on: the status shows it
        self._server: Any = None
        self._gate: SubprotocolGate | None = None
        self._ctx: Any = None
        self._port: int | None = None
        self._ch: dict[str, Any] = {}
        self._grids: dict[str, ScanGrid] = {}
        self._path: list[PoseDatagram] = []
        self._events: list[tuple[str, tuple[int, str, str]]] = []
        self._last_path_ns = 0
        self._path_added = 0  # path poses since the start: the path goes out every 5th
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def dropped(self) -> int:
        """View items dropped because the view thread fell behind."""
        return self.queue.dropped

    @property
    def port(self) -> int:
        """The port the server listens (or listened) on."""
        if self._port is None:
            raise LiveError("the Foxglove server has not started")
        return self._port

    def start(self) -> None:
        """Start the server and the view thread.

        Raises:
            LiveError: the server cannot listen there (port in use, bad host).
        """
        ctx = self._ctx = foxglove.Context()  # dropping the context closes its channels
        try:  # on loopback: the gate serves it where asked, under both protocol names
            self._server = foxglove.start_server(name="sensorbench live", host="127.0.0.1",
                                                 port=0, context=ctx,
                                                 server_listener=_Listener(self.queue))  # fmt: skip
        except Exception as exc:  # the SDK raises its own error types
            raise LiveError(f"cannot start the Foxglove server: {exc}") from exc
        try:
            self._gate = SubprotocolGate(self.host, self.requested_port, int(self._server.port))
        except LiveError:
            self._server.stop()
            self._server = None
            raise
        self._port = self._gate.port
        kinds: dict[str, Any] = dict.fromkeys(
            (f"/lidar/{n}" for n in [*self.mounts, "merged"]), fc.LaserScanChannel
        )
        kinds.update({"/tf": fc.FrameTransformsChannel, "/pose": fc.PoseInFrameChannel,
                      "/path": fc.PosesInFrameChannel, "/events": fc.LogChannel})  # fmt: skip
        self._ch = {topic: kind(topic, context=ctx) for topic, kind in kinds.items()}
        self._ch["/status"] = foxglove.Channel("/status", schema=STATUS_SCHEMA, context=ctx)
        self._thread = threading.Thread(target=self._run, name="live-view", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Publish what is queued (within ``timeout_s``), stop the thread and the server."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.close()
        if self._server is not None:
            self._server.stop()
            self._server = None

    # -- producers (any thread; never block) -------------------------------------------

    def scan(self, name: str, turns: LidarTurns) -> None:
        """A lidar's new turns (none while no viewer subscribes to them, once the
        stream's grid is made: its first turn's)."""
        if name not in self._grids or self._heard(f"/lidar/{name}"):
            self.queue.put(("scan", name, turns, 0))

    def merged(self, turns: LidarTurns) -> None:
        """New merged scans (``base_link``), while a viewer subscribes to them."""
        if self._heard("/lidar/merged"):
            self.queue.put(("merged", "merged", turns, 0))

    def pose(self, sample: PoseDatagram, arrivals_ns: tuple[int, ...] = ()) -> None:
        """The filters' latest pose; ``arrivals_ns``: when its frames arrived (host ns).
        Without a viewer of ``/tf`` or ``/pose`` only the path's poses are kept (one per
        :data:`PATH_STEP_NS`: the view thread moves ``_last_path_ns`` on, never back)."""
        if (sample.stamp_ns - self._last_path_ns >= PATH_STEP_NS or self._heard("/tf")
                or self._heard("/pose")):
            self.queue.put(("pose", "", sample, arrivals_ns))

    def event(self, t_ns: int, source: str, kind: str, message: str) -> None:
        """A session event."""
        self.queue.put(("event", source, (t_ns, kind, message), 0))

    def status(self, doc: dict[str, Any]) -> None:
        """The status document (JSON), while a viewer subscribes to it."""
        if self._heard("/status"):
            self.queue.put(("status", "", doc, 0))

    def _heard(self, topic: str) -> bool:
        """A viewer subscribes to ``topic`` (a message nobody hears is not built)."""
        channel = self._ch.get(topic)
        return channel is not None and bool(channel.has_sinks())

    # -- the view thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self.queue.get(0.1)
            if item is None:
                if self._stop.is_set():
                    return
                continue
            what, name, payload, extra = item
            try:
                getattr(self, f"_{what}")(name, payload, extra)
            except Exception as exc:  # a bad item must not end the view: counted, reported
                self._count("errors")
                self.last_error = f"live-view: {what}: {exc!r}"

    def _count(self, topic: str) -> None:
        self.published[topic] = self.published.get(topic, 0) + 1

    def _stamp(self, t_ns: int) -> Any:
        wall = self.anchor_ns[0] + (int(t_ns) - self.anchor_ns[1])
        return fm.Timestamp(wall // 1_000_000_000, wall % 1_000_000_000)

    def _scan(self, name: str, turns: LidarTurns, _: Any) -> None:
        topic = f"/lidar/{name}"
        channel = self._ch.get(topic)
        if channel is None:
            return
        if not channel.has_sinks():  # only the grid, which the stream's first turn makes
            stream_grid(self._grids, name, turns)
            return
        for k, _, b in binned_turns(self._grids, name, turns):
            start = float(b.angle_min)
            msg = fm.LaserScan(
                timestamp=self._stamp(int(turns.t_first_ns[k])),
                frame_id=name,
                start_angle=start,
                end_angle=start + (b.ranges.size - 1) * float(b.increment),
                ranges=b.ranges.tolist(),
                intensities=b.intensities.tolist(),
            )
            channel.log(msg)
            self._count(topic)

    def _merged(self, _: str, turns: LidarTurns, __: Any) -> None:
        channel = self._ch["/lidar/merged"]
        for k in range(turns.n_turns if channel.has_sinks() else 0):
            lo, n = int(turns.offset[k]), int(turns.count[k])
            r = turns.range[lo : lo + n].astype(np.float64)
            msg = fm.LaserScan(
                timestamp=self._stamp(int(turns.t_first_ns[k])),
                frame_id=BODY_FRAME,
                start_angle=0.0,
                end_angle=2.0 * math.pi * (n - 1) / n,
                ranges=np.where(np.isinf(r), np.nan, r).tolist(),
                intensities=turns.intensity[lo : lo + n].astype(np.float64).tolist(),
            )
            channel.log(msg)
            self._count("/lidar/merged")

    def _pose(self, _: str, sample: PoseDatagram, arrivals: tuple[int, ...]) -> None:
        """The pose on ``/tf`` and ``/pose`` to their viewers; the path (kept whether
        heard or not) every :data:`PATH_STEP_NS`, to its viewers every 5th time."""
        stamp = self._stamp(sample.stamp_ns)
        if self._ch["/tf"].has_sinks():
            frames = [(ODOM_FRAME, BODY_FRAME, sample.pose)]
            frames += [(BODY_FRAME, name, (m.x_m, m.y_m, m.yaw_rad))
                       for name, m in self.mounts.items()]
            transforms = [
                fm.FrameTransform(timestamp=stamp, parent_frame_id=parent, child_frame_id=child,
                                  translation=t, rotation=r)
                for parent, child, xy_yaw in frames for t, r in (_planar(*xy_yaw),)
            ]
            self._ch["/tf"].log(fm.FrameTransforms(transforms=transforms))
            self._count("/tf")
        if self._ch["/pose"].has_sinks():
            position, orientation = _planar(*sample.pose)
            pose = fm.Pose(position=position, orientation=orientation)
            self._ch["/pose"].log(fm.PoseInFrame(timestamp=stamp, frame_id=ODOM_FRAME, pose=pose))
            self._count("/pose")
        now = time.monotonic_ns()
        self.latencies.extend(now - a for a in arrivals)
        if sample.stamp_ns - self._last_path_ns >= PATH_STEP_NS:
            self._path.append(sample)
            del self._path[:-PATH_POSES]
            self._last_path_ns = sample.stamp_ns
            self._path_added += 1
            if self._path_added % 5 == 1 and self._ch["/path"].has_sinks():
                poses = [fm.Pose(position=t, orientation=r)
                         for t, r in (_planar(*p.pose) for p in self._path)]  # fmt: skip
                path = fm.PosesInFrame(timestamp=stamp, frame_id=ODOM_FRAME, poses=poses)
                self._ch["/path"].log(path)
                self._count("/path")

    def _history(self, _: str, __: Any, ___: Any) -> None:
        for source, ev in list(self._events):
            self._log(source, ev)

    def _event(self, source: str, ev: tuple[int, str, str], _: Any) -> None:
        self._events.append((source, ev))
        del self._events[:-EVENT_HISTORY]
        if self._ch["/events"].has_sinks():  # a later viewer gets the history
            self._log(source, ev)

    def _log(self, source: str, ev: tuple[int, str, str]) -> None:
        t_ns, kind, message = ev
        levels = {ERROR: fm.LogLevel.Error, WARN: fm.LogLevel.Warning}
        level = levels.get(EVENT_LEVEL.get(kind, OK), fm.LogLevel.Info)
        self._ch["/events"].log(fm.Log(timestamp=self._stamp(t_ns), level=level,
                                    message=f"{kind}: {message}", name=source))  # fmt: skip
        self._count("/events")

    def _status(self, _: str, doc: dict[str, Any], __: Any) -> None:
        self._ch["/status"].log(json.loads(json.dumps(doc, default=float)))
        self._count("/status")


def _planar(x: float, y: float, yaw: float) -> tuple[Any, Any]:
    """Foxglove's Vector3 and Quaternion of a planar pose: x, y (m), yaw (rad, CCW)."""
    qx, qy, qz, qw = yaw_quat(yaw)
    return fm.Vector3(x=x, y=y, z=0.0), fm.Quaternion(x=qx, y=qy, z=qz, w=qw)


class _Listener(ServerListener):
    """The server's callbacks: a subscription to ``/events`` asks for the history."""

    def __init__(self, queue: DropQueue) -> None:
        self.queue = queue

    def on_subscribe(self, client: Any, channel: Any) -> None:
        """Called by the SDK (its thread) when a client subscribes to a channel."""
        if channel.topic == "/events":
            self.queue.put(("history", "", None, 0))
