"""In-memory batches of samples: what drivers append and what readers return.

All arrays are numpy with fixed dtypes (converted on construction); units are SI
and times int64 nanoseconds. Lengths are checked so a malformed batch fails where
it is built, not inside the writer thread.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.schema import NO_DEVICE_TIME


def _as(value: object, dtype: str, name: str, ndim: int = 1) -> np.ndarray:
    arr = np.ascontiguousarray(value, dtype=dtype)
    if arr.ndim != ndim:
        raise SessionError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr


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
        self.t_first_ns = _as(self.t_first_ns, "<i8", "t_first_ns")
        self.device_ns = _as(self.device_ns, "<i8", "device_ns")
        self.speed_hz = _as(self.speed_hz, "<f4", "speed_hz")
        self.count = _as(self.count, "<i4", "count")
        self.flags = _as(self.flags, "<u2", "flags")
        self.angle = _as(self.angle, "<f4", "angle")
        self.range = _as(self.range, "<f4", "range")
        self.intensity = _as(self.intensity, "<u2", "intensity")
        self.t_ns = _as(self.t_ns, "<i8", "t_ns")
        n = self.t_first_ns.size
        for name in ("device_ns", "speed_hz", "count", "flags"):
            if getattr(self, name).size != n:
                raise SessionError(
                    f"LidarTurns.{name} has {getattr(self, name).size} turns, not {n}"
                )
        p = self.angle.size
        for name in ("range", "intensity", "t_ns"):
            if getattr(self, name).size != p:
                raise SessionError(
                    f"LidarTurns.{name} has {getattr(self, name).size} points, not {p}"
                )
        if np.any(self.count < 0) or int(self.count.sum()) != p:
            raise SessionError(
                f"LidarTurns counts sum to {int(self.count.sum())}, but {p} points given"
            )

    @property
    def n_turns(self) -> int:
        """Number of turns."""
        return int(self.t_first_ns.size)

    @property
    def n_points(self) -> int:
        """Number of points over all turns."""
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
        return LidarTurns(
            self.t_first_ns[turns],
            self.device_ns[turns],
            self.speed_hz[turns],
            self.count[turns],
            self.flags[turns],
            self.angle[start:stop],
            self.range[start:stop],
            self.intensity[start:stop],
            self.t_ns[start:stop],
        )

    @classmethod
    def empty(cls) -> LidarTurns:
        """A batch with no turns."""
        return cls(*([np.empty(0)] * 9))

    @classmethod
    def single(
        cls,
        angle: np.ndarray,
        range_m: np.ndarray,
        intensity: np.ndarray,
        t_ns: np.ndarray,
        device_ns: int = NO_DEVICE_TIME,
        speed_hz: float = float("nan"),
        flags: int = 0,
    ) -> LidarTurns:
        """One turn from its point arrays; ``t_first_ns`` is ``t_ns[0]``."""
        t_ns = np.asarray(t_ns, dtype=np.int64)
        if t_ns.size == 0:
            raise SessionError("a turn needs at least one point")
        return cls(
            [t_ns[0]],
            [device_ns],
            [speed_hz],
            [t_ns.size],
            [flags],
            angle,
            range_m,
            intensity,
            t_ns,
        )

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
        self.host_ns = _as(self.host_ns, "<i8", "host_ns")
        n = self.host_ns.size
        self.device_ns = _as(self.device_ns, "<i8", "device_ns")
        self.seq = _as(self.seq, "<i8", "seq")
        self.counts = _as(self.counts, "<i8", "counts", ndim=2)
        self.yaw = _as(self.yaw, "<f8", "yaw")
        self.yaw_rate = _as(self.yaw_rate, "<f8", "yaw_rate")
        for name in ("device_ns", "seq", "yaw", "yaw_rate"):
            if getattr(self, name).size != n:
                raise SessionError(
                    f"EncoderBatch.{name} has {getattr(self, name).size} rows, not {n}"
                )
        if self.counts.shape[0] != n:
            raise SessionError(f"EncoderBatch.counts has {self.counts.shape[0]} rows, not {n}")

    def __len__(self) -> int:
        return int(self.host_ns.size)

    @classmethod
    def from_counts(
        cls,
        host_ns: np.ndarray,
        counts: np.ndarray,
        device_ns: np.ndarray | None = None,
        seq: np.ndarray | None = None,
        yaw: np.ndarray | None = None,
        yaw_rate: np.ndarray | None = None,
    ) -> EncoderBatch:
        """Build a batch filling absent columns with their "none" values."""
        host_ns = np.asarray(host_ns, dtype=np.int64)
        n = host_ns.size
        nan = np.full(n, np.nan)
        return cls(
            host_ns,
            np.full(n, NO_DEVICE_TIME, dtype=np.int64) if device_ns is None else device_ns,
            np.arange(n, dtype=np.int64) if seq is None else seq,
            counts,
            nan if yaw is None else yaw,
            nan if yaw_rate is None else yaw_rate,
        )


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
        self.t_ns = _as(self.t_ns, "<i8", "t_ns")
        n = self.t_ns.size
        self.position = _as(self.position, "<f8", "position", ndim=2)
        self.quat_xyzw = _as(self.quat_xyzw, "<f8", "quat_xyzw", ndim=2)
        self.valid = _as(self.valid, "bool", "valid")
        self.flags = _as(self.flags, "u1", "flags")
        if self.position.shape != (n, 3):
            raise SessionError(f"PoseBatch.position must be ({n}, 3), got {self.position.shape}")
        if self.quat_xyzw.shape != (n, 4):
            raise SessionError(f"PoseBatch.quat_xyzw must be ({n}, 4), got {self.quat_xyzw.shape}")
        for name in ("valid", "flags"):
            if getattr(self, name).size != n:
                raise SessionError(f"PoseBatch.{name} has {getattr(self, name).size} rows, not {n}")
        if self.covariance is not None:
            self.covariance = _as(self.covariance, "<f8", "covariance", ndim=3)
            if self.covariance.shape != (n, 6, 6):
                raise SessionError(
                    f"PoseBatch.covariance must be ({n}, 6, 6), got {self.covariance.shape}"
                )

    def __len__(self) -> int:
        return int(self.t_ns.size)

    @classmethod
    def from_arrays(
        cls,
        t_ns: np.ndarray,
        position: np.ndarray,
        quat_xyzw: np.ndarray,
        valid: np.ndarray | None = None,
        flags: np.ndarray | None = None,
    ) -> PoseBatch:
        """Build a batch; ``valid`` defaults to all True and ``flags`` to 0."""
        n = np.asarray(t_ns).size
        return cls(
            t_ns,
            position,
            quat_xyzw,
            np.ones(n, dtype=bool) if valid is None else valid,
            np.zeros(n, dtype=np.uint8) if flags is None else flags,
        )


@dataclass(frozen=True)
class Event:
    """One row of the events table: something that happened, when and where."""

    t_ns: int
    source: str
    kind: str
    message: str
