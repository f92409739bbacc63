"""What ``import rosbag`` is asked for: ``--topic`` and ``--tf`` specs, and the message types.

Pose stream kinds default by name: a name starting with ``mocap`` or ``estimate`` is
of that kind, any other ``pose_sensor``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sensorbench.errors import ImportFormatError
from sensorbench.logs.schema import POSE_KINDS

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
BODY_FRAME = "base_link"
"""The robot's body frame: lidar mounts are read from ``/tf_static`` relative to it."""

_SPEC = re.compile(
    r"^(?P<topic>[^=\[\]]+?)(\[(?P<child>[^\]]+)\])?=(?P<name>[^:]+)(:(?P<kind>.+))?$"
)
_TF_SPEC = re.compile(r"^(?P<parent>[^:=]+):(?P<child>[^:=]+)=(?P<name>[^:]+)(:(?P<kind>.+))?$")


def _check_kind(option: str, text: str, kind: str | None) -> None:
    if kind is not None and kind not in POSE_KINDS:
        raise ImportFormatError(
            f"{option} {text!r}: kind must be one of {', '.join(POSE_KINDS)}, got {kind!r}"
        )


def _default_kind(name: str) -> str:
    """``mocap``/``estimate`` for names starting so, else ``pose_sensor``."""
    return next((k for k in ("mocap", "estimate") if name.startswith(k)), "pose_sensor")


@dataclass(frozen=True)
class TopicSpec:
    """One ``--topic``: which topic becomes which stream."""

    topic: str
    name: str
    kind: str | None = None
    """Pose stream kind; None: ``mocap``/``estimate`` if the name starts so, else
    ``pose_sensor``."""
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

    def pose_kind(self) -> str:
        """The pose stream kind this topic becomes."""
        return self.kind or _default_kind(self.name)


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

    def pose_kind(self) -> str:
        """The pose stream kind this chain becomes."""
        return self.kind or _default_kind(self.name)
