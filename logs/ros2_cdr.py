"""ROS 2 messages as CDR bytes, straight from numbers: the encoder ``live --ros2`` and
``export --format mcap`` share.

Plain CDR (XCDR1), little-endian, as rosbag2 writes it: the header ``00 01 00 00``, then
each field aligned to its size counted from after the header; messages follow the ROS 2
Humble ``.msg`` definitions. Times are ns since 1970; angles rad; lengths m.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from typing import cast

import numpy as np

_ENCAPSULATION = b"\x00\x01\x00\x00"
_U32 = struct.Struct("<I")
_STAMP = struct.Struct("<iI")  # builtin_interfaces/Time: sec, nanosec
OK, WARN, ERROR, STALE = 0, 1, 2, 3
"""diagnostic_msgs/DiagnosticStatus levels."""
EVENT_LEVEL = {"error": ERROR, **dict.fromkeys(("unplug", "stale", "overrun", "crc_burst",
                                                "degraded"), WARN)}  # fmt: skip
"""The level of a session event by its kind (any other: OK)."""
ODOM_FRAME, BODY_FRAME = "odom", "base_link"
"""REP 105's odometry frame and the robot's body frame (lidar mounts are relative to it)."""


@functools.lru_cache(maxsize=256)
def _string(text: str) -> bytes:
    """A string's CDR bytes from its length on (frame ids repeat: computed once)."""
    b = text.encode()
    return _U32.pack(len(b) + 1) + b + b"\0"


def mounts_tf(t_ns: int, parent: str, mounts: Sequence[tuple[str, Sequence[float]]]) -> bytes:
    """``tf2_msgs/TFMessage`` stamped ``t_ns`` placing each mounted ``(frame, (x, y, yaw))``
    (m, m, rad) in ``parent``."""
    r = CdrRows(1)
    r.u32(len(mounts))
    for child, (x, y, yaw) in mounts:
        r.header(np.array([t_ns]), parent)
        r.string(child)
        r.column([x, y, 0.0, *yaw_quat(yaw)], "<f8")
    return r.rows()[0]


def path(t_ns: int, frame: str, stamps: np.ndarray, poses: np.ndarray) -> bytes:
    """``nav_msgs/Path`` in ``frame``: one PoseStamped per stamp (ns) and (7,) pose row."""
    r = CdrRows(1)
    r.header(np.array([t_ns]), frame)
    r.u32(len(stamps))
    if len(stamps):
        r.header(stamps[:1], frame)
        r.column(poses[:1], "<f8")
    # the first pose ends 8-aligned: the others lie as lone PoseStamped messages do
    rest = pose_stamped_rows(stamps[1:], frame, poses[1:]) if len(stamps) > 1 else []
    return r.rows()[0] + b"".join(m[4:] for m in rest)


def diagnostics(t_ns: int, statuses: Sequence[tuple[int, str, str, str, dict]]) -> bytes:
    """``diagnostic_msgs/DiagnosticArray`` stamped ``t_ns`` with no frame, of statuses (level
    (:data:`OK` …), name, message, hardware_id, key-value pairs written as text)."""
    r = CdrRows(1)
    r.header(np.array([t_ns]), "")
    r.u32(len(statuses))
    for level, *texts, values in statuses:
        r.const(bytes([level]))
        for text in texts:
            r.string(text)
        r.u32(len(values))
        for key, value in values.items():
            r.string(key)
            r.string(str(value))
    return r.rows()[0]


def laser_scan(
    t_ns: int,
    frame: str,
    params: Sequence[float],
    ranges: np.ndarray,
    intensities: np.ndarray,
) -> bytes:
    """``sensor_msgs/LaserScan``; ``params``: angle_min, angle_max, angle_increment,
    time_increment, scan_time, range_min, range_max (float32 in the message)."""
    r = CdrRows(1)
    r.header(np.array([t_ns]), frame)
    r.column(params, "<f4")
    r.seq(ranges, "<f4")
    r.seq(intensities, "<f4")
    return r.rows()[0]


def yaw_quat(yaw: float) -> tuple[float, float, float, float]:
    """The quaternion (x, y, z, w) of a rotation by ``yaw`` (rad) about z."""
    return (0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0))


def planar_odometry(
    t_ns: int,
    frames: tuple[str, str],
    pose: Sequence[float],
    pose_cov: Sequence[float],
    velocity: Sequence[float],
    velocity_var: Sequence[float],
) -> tuple[bytes, bytes]:
    """The ``nav_msgs/Odometry`` and the ``tf2_msgs/TFMessage`` (odom → base) of one planar
    filter state: ``frames`` (odom, base); ``pose`` (x, y m, yaw rad) and the upper triangle
    of its covariance: xx, xy, xyaw, yy, yyaw, yawyaw (m², m·rad, rad²); the world-frame
    ``velocity`` (m/s, m/s, rad/s) and its variances, sent as the twist (vx, vy, 0, 0, 0,
    wz) in ``base`` that Odometry carries. Covariances 6×6 row-major, the rest 0."""
    x, y, yaw = (float(v) for v in pose)
    c, s = math.cos(yaw), math.sin(yaw)
    (vx, vy, wz), (a, b, w) = (map(float, velocity), map(float, velocity_var))
    values = np.zeros(85)  # pose (7), its covariance (36), twist (6), its covariance (36)
    values[:7] = x, y, 0.0, *yaw_quat(yaw)
    p_cov, t_cov = values[7:43].reshape(6, 6), values[49:].reshape(6, 6)
    for (i, j), v in zip(((0, 0), (0, 1), (0, 5), (1, 1), (1, 5), (5, 5)), pose_cov, strict=True):
        p_cov[i, j] = p_cov[j, i] = v
    values[43:49] = c * vx + s * vy, -s * vx + c * vy, 0.0, 0.0, 0.0, wz
    t_cov[0, 0], t_cov[1, 1] = c * a * c + s * b * s, s * a * s + c * b * c
    t_cov[0, 1], t_cov[1, 0] = -c * a * s + s * b * c, -s * a * c + c * b * s
    t_cov[5, 5] = w
    t = np.array([t_ns])
    return odometry_rows(t, frames, values)[0], tf_rows(t, frames, values[:7])[0]


class CdrRows:
    """Messages of one layout (frames constant, numbers per row): an (n, size) byte table
    built column by column, one ``bytes`` per row (n = 1: the parts' bytes, joined)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.parts: list[bytes | np.ndarray] = [_ENCAPSULATION]
        self.size = 0  # bytes after the encapsulation header

    def const(self, data: bytes) -> None:
        """The same bytes in every row."""
        self.parts.append(data)
        self.size += len(data)

    def align(self, k: int) -> None:
        """Pad to a multiple of ``k``."""
        if -self.size % k:
            self.const(bytes(-self.size % k))

    def column(self, values: np.ndarray | Sequence[float], dtype: str) -> None:
        """One value per row or (n, m) values: aligned to the type's size."""
        a = np.asarray(values, dtype=dtype)
        self.align(a.dtype.itemsize)
        if self.n == 0:  # no rows: no width to take from the values
            return
        if self.n == 1:
            self.const(a.tobytes())
            return
        self.parts.append(np.ascontiguousarray(a.reshape(self.n, -1)).view(np.uint8))
        self.size += a.nbytes // self.n

    def times(self, t_ns: np.ndarray) -> None:
        """``builtin_interfaces/Time`` per row."""
        self.align(4)
        if self.n == 1:
            self.const(_STAMP.pack(*divmod(int(t_ns[0]), 1_000_000_000)))
            return
        sec, nsec = np.divmod(np.asarray(t_ns, dtype=np.int64), 1_000_000_000)
        pair = np.empty((self.n, 2), "<u4")
        pair[:, 0] = sec.astype("<i4").view("<u4")
        pair[:, 1] = nsec
        self.parts.append(pair.view(np.uint8))
        self.size += 8

    def header(self, t_ns: np.ndarray, frame: str) -> None:
        """``std_msgs/Header`` per row."""
        self.times(t_ns)
        self.string(frame)

    def string(self, text: str) -> None:
        """The same ``string`` in every row."""
        self.align(4)
        self.const(_string(text))

    def u32(self, value: int) -> None:
        """The same ``uint32`` (a sequence's length) in every row."""
        self.align(4)
        self.const(_U32.pack(value))

    def seq(self, values: np.ndarray | Sequence[float], dtype: str) -> None:
        """A sequence of one primitive type (``<f4``, ``<f8``), as long in every row."""
        a = np.asarray(values, dtype=dtype)
        a = a.reshape(self.n, -1) if self.n else a.reshape(0, 0)
        self.u32(a.shape[1])
        if a.shape[1]:
            self.column(a, dtype)

    def rows(self) -> list[bytes]:
        if self.n == 0:
            return []
        if self.n == 1:
            return [b"".join(cast(list[bytes], self.parts))]
        wide = [np.broadcast_to(np.frombuffer(p, np.uint8), (self.n, len(p)))
                if isinstance(p, bytes) else p for p in self.parts]  # fmt: skip
        return [r.tobytes() for r in np.concatenate(wide, axis=1)]


def pose_stamped_rows(t_ns: np.ndarray, frame: str, poses: np.ndarray) -> list[bytes]:
    """``geometry_msgs/PoseStamped`` per row: (n,) stamps, (n, 7) position then
    quaternion (xyzw)."""
    r = CdrRows(len(t_ns))
    r.header(t_ns, frame)
    r.column(poses, "<f8")
    return r.rows()


def odometry_rows(t_ns: np.ndarray, frames: tuple[str, str], values: np.ndarray) -> list[bytes]:
    """``nav_msgs/Odometry`` per row: (n,) stamps, ``frames`` (frame, child), (n, 85) values:
    pose (x, y, z, qx, qy, qz, qw) in frame, its covariance (36), twist (vx, vy, vz, wx, wy,
    wz) in child, its covariance (36)."""
    r = CdrRows(len(t_ns))
    r.header(t_ns, frames[0])
    r.string(frames[1])
    r.column(values, "<f8")
    return r.rows()


def tf_rows(t_ns: np.ndarray, frames: tuple[str, str], poses: np.ndarray) -> list[bytes]:
    """``tf2_msgs/TFMessage`` of one transform per row: (n,) stamps, (n, 7) translation and
    rotation, ``frames`` (parent, child)."""
    r = CdrRows(len(t_ns))
    r.u32(1)
    r.header(t_ns, frames[0])
    r.string(frames[1])
    r.column(poses, "<f8")
    return r.rows()


def joint_state_rows(
    t_ns: np.ndarray, frame: str, names: Sequence[str], position: np.ndarray,
    velocity: np.ndarray,
) -> list[bytes]:  # fmt: skip
    """``sensor_msgs/JointState`` per row: (n,) stamps, (n, m) positions and velocities
    (no effort)."""
    r = CdrRows(len(t_ns))
    r.header(t_ns, frame)
    r.u32(len(names))
    for name in names:
        r.string(name)
    for values in (position, velocity, np.zeros((len(t_ns), 0))):
        r.seq(values, "<f8")
    return r.rows()


def time_reference_rows(t_ns: np.ndarray, device_ns: np.ndarray, source: str) -> list[bytes]:
    """``sensor_msgs/TimeReference`` per row: (n,) header stamps (no frame), ``time_ref``
    (n,) device times (ns)."""
    r = CdrRows(len(t_ns))
    r.header(t_ns, "")
    r.times(device_ns)
    r.string(source)
    return r.rows()
