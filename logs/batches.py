"""In-memory batches of samples: what drivers append and what readers return.

All arrays are numpy with fixed dtypes (converted on construction); units are SI
and times int64 nanoseconds. Lengths are checked so a malformed batch fails where
it is built, not inside the writer thread.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.schema import LIDAR_POINT_FIELDS


def _columns(batch: object, spec: dict[str, tuple[str, tuple[str | int, ...]]]) -> None:
    """Convert each column of ``batch`` (None stays None) to its dtype in ``spec`` and check
    its shape: an axis named in ``spec`` (``turns``, ``points``, ``rows``) has one length
    in every column, -1 any length."""
    sizes: dict[str | int, int] = {}
    for name, (dtype, shape) in spec.items():
        if (value := getattr(batch, name)) is None:
            continue
        arr = np.ascontiguousarray(value, dtype=dtype)
        if arr.ndim != len(shape) or any(
            want != -1 and sizes.setdefault(want, got if isinstance(want, str) else want) != got
            for want, got in zip(shape, arr.shape, strict=False)
        ):
            want = ", ".join(str(sizes.get(w, w)) for w in shape)
            raise SessionError(f"{type(batch).__name__}.{name} must be ({want}), got {arr.shape}")
        setattr(batch, name, arr)


@dataclass
class LidarTurns:
    """Complete lidar turns: a per-turn index plus flat per-point arrays.

    Attributes:
        t_first_ns: host time of each turn's first point (ns).
        device_ns: unwrapped device time of each turn's first point (ns), or
            ``NO_DEVICE_TIME`` where the device sends none.
        speed_hz: rotation speed reported by the device (Hz), nan if none.
        count: number of points in each turn.
        flags: :class:`~sensorbench.logs.schema.TurnFlag` bits.
        angle: point bearing, rad, counter-clockwise, 0 = sensor forward, in [0, 2π).
        range: point range (m); ``inf`` = no return, ``nan`` = invalid.
        intensity: LD19 intensity 0..255 or A1 quality 0..63.
        t_ns: per-point host time (ns).
    """

    t_first_ns: np.ndarray
    device_ns: np.ndarray
    speed_hz: np.ndarray
    count: np.ndarray
    flags: np.ndarray
    angle: np.ndarray
    range: np.ndarray
    intensity: np.ndarray
    t_ns: np.ndarray

    def __post_init__(self) -> None:
        turn, point = ("turns",), ("points",)
        _columns(self, {
            "t_first_ns": ("<i8", turn), "device_ns": ("<i8", turn), "speed_hz": ("<f4", turn),
            "count": ("<i4", turn), "flags": ("<u2", turn), "angle": ("<f4", point),
            "range": ("<f4", point), "intensity": ("<u2", point), "t_ns": ("<i8", point),
        })  # fmt: skip
        p = self.angle.size
        if np.any(self.count < 0) or int(self.count.sum()) != p:
            raise SessionError(
                f"LidarTurns counts sum to {int(self.count.sum())}, but {p} points given"
            )

    @property
    def n_turns(self) -> int:
        return int(self.t_first_ns.size)

    @property
    def n_points(self) -> int:
        return int(self.angle.size)

    @property
    def offset(self) -> np.ndarray:
        """Index of each turn's first point in the flat arrays (int64)."""
        out = np.zeros(self.n_turns, dtype=np.int64)
        np.cumsum(self.count[:-1], out=out[1:])
        return out

    def turn(self, i: int) -> LidarTurns:
        """The ``i``-th turn as a one-turn batch."""
        if not -self.n_turns <= i < self.n_turns:
            raise IndexError(f"turn {i} out of range for {self.n_turns} turns")
        i %= self.n_turns
        start = int(self.offset[i])
        stop = start + int(self.count[i])
        return self.select(slice(i, i + 1), start, stop)

    def select(self, turns: slice, start: int, stop: int) -> LidarTurns:
        """A contiguous run of turns whose points are ``[start, stop)``."""
        rows = {f.name: slice(start, stop) if f.name in LIDAR_POINT_FIELDS else turns
                for f in fields(self)}  # fmt: skip
        return LidarTurns(**{name: getattr(self, name)[k] for name, k in rows.items()})

    @classmethod
    def empty(cls) -> LidarTurns:
        return cls(*([np.empty(0)] * 9))

    @classmethod
    def concat(cls, batches: list[LidarTurns]) -> LidarTurns:
        """Join batches turn after turn."""
        if not batches:
            return cls.empty()
        return cls(*(np.concatenate([getattr(b, f.name) for b in batches]) for f in fields(cls)))


@dataclass
class EncoderBatch:
    """Encoder frames (dead-wheel pods) with optional IMU yaw.

    Attributes:
        host_ns: host receive time (ns).
        device_ns: device time on its own clock, unwrapped (ns), or ``NO_DEVICE_TIME``.
        seq: frame sequence number, unwrapped.
        counts: cumulative encoder counts, unwrapped, shape (n, N).
        yaw: IMU yaw (rad), nan if none.
        yaw_rate: IMU yaw rate (rad/s), nan if none.
    """

    host_ns: np.ndarray
    device_ns: np.ndarray
    seq: np.ndarray
    counts: np.ndarray
    yaw: np.ndarray
    yaw_rate: np.ndarray

    def __post_init__(self) -> None:
        rows = ("rows",)
        _columns(self, {
            "host_ns": ("<i8", rows), "device_ns": ("<i8", rows), "seq": ("<i8", rows),
            "counts": ("<i8", ("rows", -1)), "yaw": ("<f8", rows), "yaw_rate": ("<f8", rows),
        })  # fmt: skip

    def __len__(self) -> int:
        return int(self.host_ns.size)

    @classmethod
    def decoded(cls, *columns: np.ndarray) -> EncoderBatch:
        """A batch of a driver's own decoded frames, its columns in field order and already
        of the dtypes and shapes above (C-contiguous): not checked again. The pod reader
        builds one per read, up to 200 times a second, where the check would cost ~16 µs a
        read; data from outside goes through the constructor."""
        batch = cls.__new__(cls)
        vars(batch).update(zip(_ENCODER_FIELDS, columns, strict=True))
        return batch


_ENCODER_FIELDS = tuple(f.name for f in fields(EncoderBatch))


@dataclass
class PoseBatch:
    """Pose samples: mocap, a pose sensor or an estimate.

    Attributes:
        t_ns: sample time (ns) on the stream's time base (see the stream's attrs).
        position: (n, 3) position (m); nan where invalid.
        quat_xyzw: (n, 4) unit quaternion x, y, z, w; nan where invalid.
        valid: True where the sample holds a pose (False: occlusion, dropout).
        flags: :class:`~sensorbench.logs.schema.PoseFlag` bits.
        covariance: (n, 6, 6) pose covariance, rows and columns x, y, z (m), rotation
            about x, y, z (rad) as ROS orders them, for a stream that stores one (an
            estimate, a ROS bag's Odometry); None otherwise.
    """

    t_ns: np.ndarray
    position: np.ndarray
    quat_xyzw: np.ndarray
    valid: np.ndarray
    flags: np.ndarray
    covariance: np.ndarray | None = None

    def __post_init__(self) -> None:
        rows = ("rows",)
        _columns(self, {
            "t_ns": ("<i8", rows), "position": ("<f8", ("rows", 3)),
            "quat_xyzw": ("<f8", ("rows", 4)), "valid": ("bool", rows), "flags": ("u1", rows),
            "covariance": ("<f8", ("rows", 6, 6)),
        })  # fmt: skip

    def __len__(self) -> int:
        return int(self.t_ns.size)


@dataclass(frozen=True)
class Event:
    """One row of the events table: something that happened, when and where."""

    t_ns: int
    source: str
    kind: str
    message: str
