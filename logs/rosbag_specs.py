"""What ``import rosbag`` is asked for: ``--topic`` specs, and the message types."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sensorbench.errors import ImportFormatError

POSE_TYPES = (
    "nav_msgs/msg/Odometry",
    "geometry_msgs/msg/PoseStamped",
    "geometry_msgs/msg/PoseWithCovarianceStamped",
    "geometry_msgs/msg/TransformStamped",
    "tf2_msgs/msg/TFMessage",
)
SCAN_TYPE = "sensor_msgs/msg/LaserScan"
POSE_KINDS = ("mocap", "pose_sensor", "estimate")
_SPEC = re.compile(
    r"^(?P<topic>[^=\[\]]+?)(\[(?P<child>[^\]]+)\])?=(?P<name>[^:]+)(:(?P<kind>.+))?$"
)


@dataclass(frozen=True)
class TopicSpec:
    """One ``--topic``: which topic becomes which stream."""

    topic: str
    name: str
    kind: str | None = None
    """Pose stream kind; None: ``mocap`` if the name starts with it, else ``pose_sensor``."""
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
        kind = m.group("kind")
        if kind is not None and kind not in POSE_KINDS:
            raise ImportFormatError(
                f"--topic {text!r}: kind must be one of {', '.join(POSE_KINDS)}, got {kind!r}"
            )
        return cls(m.group("topic"), m.group("name"), kind, m.group("child"))

    def pose_kind(self) -> str:
        """The pose stream kind this topic becomes."""
        if self.kind:
            return self.kind
        return "mocap" if self.name.startswith("mocap") else "pose_sensor"
