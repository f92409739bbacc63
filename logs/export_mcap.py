"""Export a session to one MCAP file (ROS 2 messages, CDR) for viewing in Foxglove Studio.

Topics, one per stream (``NAME`` is the stream name):

- ``/NAME/scan`` ``sensor_msgs/msg/LaserScan``, one message per lidar turn: stamp =
  the turn's first point, ray i at ``angle_min + i·angle_increment`` with
  ``angle_min`` the first point's angle and the increment the turn's mean spacing
  (LaserScan holds evenly spaced rays; a real turn's points are spaced within a
  fraction of a step of that), ``time_increment`` the mean point spacing in time,
  ranges as stored (``inf`` no return, ``nan`` invalid), ``range_min`` 0 and
  ``range_max`` the turn's largest finite range, intensities as float;
- ``/NAME/pose`` ``geometry_msgs/msg/PoseStamped`` per valid pose sample (frame
  ``world``);
- ``/NAME/counts`` ``sensor_msgs/msg/JointState`` per pod frame: names ``c0, c1, ...``,
  ``position`` = the cumulative counts (exact: counts stay below 2⁵³).

Each message's log time is its stamp (session time, ns). The file is the MCAP
storage file of a rosbag2 recording (ROS 2 Humble message definitions embedded),
so ``rosbags``, the ``mcap`` tools and Foxglove read it as it is.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.reader import Session

_TWO_PI = 2.0 * math.pi


def export_mcap(
    session: str | os.PathLike[str],
    out: str | os.PathLike[str],
    names: list[str] | None = None,
    *,
    skip_invalid: bool = False,
    skipped: dict[str, int] | None = None,
) -> dict[str, int]:
    """Write the lidar, pose and encoder streams of ``session`` (or only ``names``) to ``out``.

    A stream with impossible samples (:func:`~sensorbench.logs.values.exportable`) is
    refused, or with ``skip_invalid`` written without them, their count per stream
    put in ``skipped``.

    Returns:
        Messages written per topic.
    """
    from sensorbench.logs.values import exportable

    def checked(key: str, batch: Any) -> Any:
        batch, n = exportable(str(session), key, batch, skip_invalid=skip_invalid)
        if n and skipped is not None:
            skipped[key] = n
        return batch

    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    T = store.types
    out = Path(out)

    def header(ns: int, frame: str):
        if ns < 0:
            raise SessionError(f"{session}: time {ns} ns is before 0; MCAP log times cannot be")
        stamp = T["builtin_interfaces/msg/Time"](sec=int(ns // 10**9), nanosec=int(ns % 10**9))
        return T["std_msgs/msg/Header"](stamp=stamp, frame_id=frame)

    counts: dict[str, int] = {}
    with Session(session) as s, tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        everything = s.lidar_names() + s.pose_names() + s.encoder_names()
        chosen = everything if names is None else names
        for n in chosen:
            if n not in everything:
                raise SessionError(f"{session}: no stream {n!r} (have: {', '.join(everything)})")
        bag = Path(tmp) / "export"
        conns: dict = {}
        with Writer(bag, version=8, storage_plugin=StoragePlugin.MCAP) as w:

            def put(topic: str, msgtype: str, ns: int, msg: object) -> None:
                if topic not in conns:
                    conns[topic] = w.add_connection(topic, msgtype, typestore=store)
                w.write(conns[topic], int(ns), store.serialize_cdr(msg, msgtype))
                counts[topic] = counts.get(topic, 0) + 1

            for name in [n for n in chosen if n in s.lidar_names()]:
                turns = checked(f"lidar/{name}", s.lidar(name).read(validate=False))
                offset = turns.offset
                for k in range(turns.n_turns):
                    a, b = int(offset[k]), int(offset[k] + turns.count[k])
                    if b - a < 2:
                        continue
                    ang = np.unwrap(turns.angle[a:b].astype(np.float64))
                    rng = turns.range[a:b]
                    finite = rng[np.isfinite(rng)]
                    t_pts = turns.t_ns[a:b]
                    speed = float(turns.speed_hz[k])
                    msg = T["sensor_msgs/msg/LaserScan"](
                        header=header(int(turns.t_first_ns[k]), name),
                        angle_min=float(ang[0]),
                        angle_max=float(ang[-1]),
                        angle_increment=float((ang[-1] - ang[0]) / (b - a - 1)),
                        time_increment=float((t_pts[-1] - t_pts[0]) / (b - a - 1) / 1e9),
                        scan_time=1.0 / speed if speed > 0 else 0.0,
                        range_min=0.0,
                        range_max=float(finite.max()) if finite.size else 0.0,
                        ranges=rng.astype(np.float32),
                        intensities=turns.intensity[a:b].astype(np.float32),
                    )
                    put(f"/{name}/scan", "sensor_msgs/msg/LaserScan", turns.t_first_ns[k], msg)
            for name in [n for n in chosen if n in s.pose_names()]:
                pb = checked(f"pose/{name}", s.pose(name).read(validate=False))
                for t, p, q in zip(
                    pb.t_ns[pb.valid], pb.position[pb.valid], pb.quat_xyzw[pb.valid], strict=True
                ):
                    msg = T["geometry_msgs/msg/PoseStamped"](
                        header=header(int(t), "world"),
                        pose=T["geometry_msgs/msg/Pose"](
                            position=T["geometry_msgs/msg/Point"](x=p[0], y=p[1], z=p[2]),
                            orientation=T["geometry_msgs/msg/Quaternion"](
                                x=q[0], y=q[1], z=q[2], w=q[3]
                            ),
                        ),
                    )
                    put(f"/{name}/pose", "geometry_msgs/msg/PoseStamped", t, msg)
            for name in [n for n in chosen if n in s.encoder_names()]:
                e = checked(f"encoders/{name}", s.encoder(name).read(validate=False))
                labels = [f"c{k}" for k in range(e.counts.shape[1])]
                for t, c in zip(e.host_ns, e.counts, strict=True):
                    msg = T["sensor_msgs/msg/JointState"](
                        header=header(int(t), name),
                        name=labels,
                        position=c.astype(np.float64),
                        velocity=np.zeros(0),
                        effort=np.zeros(0),
                    )
                    put(f"/{name}/counts", "sensor_msgs/msg/JointState", t, msg)
        (mcap,) = bag.glob("*.mcap")
        shutil.move(mcap, out)
    return counts
