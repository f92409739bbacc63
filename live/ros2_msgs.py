"""The ROS 2 messages ``live --ros2`` publishes, as DDS types named as ROS 2 names them.

Each class is the IDL that ``rosidl`` generates from the ``.msg`` (ROS 2 Humble and
later): module ``pkg::msg::dds_``, struct name with a trailing ``_``, fields in the
``.msg``'s order, ``float64[36]`` as a fixed array, ``T[]`` as a sequence, ``byte`` as
an octet, every struct final (plain CDR, as ``rmw_cyclonedds`` and Fast DDS write).
(No ``from __future__ import annotations`` here: the binding reads the annotations
as types.)
"""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

import cyclonedds.idl.annotations as annotate
import numpy as np
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, byte, float32, float64, int32, sequence, uint32

from sensorbench.live.ros2 import OK
from sensorbench.logs import ros2_cdr

if TYPE_CHECKING:  # the binding's array[...] and sequence[...] are no types mypy knows
    Covariance: TypeAlias = Any
    F32s: TypeAlias = Any
    Transforms: TypeAlias = Any
    Values: TypeAlias = Any
    Statuses: TypeAlias = Any
else:
    Covariance = array[float64, 36]
    F32s = sequence[float32]


@dataclass
@annotate.final
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    """builtin_interfaces/Time: seconds and nanoseconds since 1970 (wall clock)."""

    sec: int32 = 0
    nanosec: uint32 = 0

    @classmethod
    def from_ns(cls, ns: int) -> "Time":
        """The stamp of ``ns`` ns since 1970."""
        return cls(int(ns // 1_000_000_000), int(ns % 1_000_000_000))

    @property
    def ns(self) -> int:
        """ns since 1970."""
        return int(self.sec) * 1_000_000_000 + int(self.nanosec)


@dataclass
@annotate.final
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
@annotate.final
class Point(IdlStruct, typename="geometry_msgs::msg::dds_::Point_"):
    """geometry_msgs/Point (m)."""

    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
@annotate.final
class Vector3(IdlStruct, typename="geometry_msgs::msg::dds_::Vector3_"):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
@annotate.final
class Quaternion(IdlStruct, typename="geometry_msgs::msg::dds_::Quaternion_"):
    """geometry_msgs/Quaternion (x, y, z, w)."""

    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0
    w: float64 = 1.0


@dataclass
@annotate.final
class Pose(IdlStruct, typename="geometry_msgs::msg::dds_::Pose_"):
    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
@annotate.final
class PoseWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::PoseWithCovariance_"):
    """geometry_msgs/PoseWithCovariance: covariance of (x, y, z, roll, pitch, yaw), row-major."""

    pose: Pose = field(default_factory=Pose)
    covariance: Covariance = field(default_factory=lambda: [0.0] * 36)


@dataclass
@annotate.final
class Twist(IdlStruct, typename="geometry_msgs::msg::dds_::Twist_"):
    """geometry_msgs/Twist (m/s, rad/s)."""

    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


@dataclass
@annotate.final
class TwistWithCovariance(IdlStruct, typename="geometry_msgs::msg::dds_::TwistWithCovariance_"):
    """geometry_msgs/TwistWithCovariance: covariance of (vx, vy, vz, wx, wy, wz), row-major."""

    twist: Twist = field(default_factory=Twist)
    covariance: Covariance = field(default_factory=lambda: [0.0] * 36)


@dataclass
@annotate.final
class Odometry(IdlStruct, typename="nav_msgs::msg::dds_::Odometry_"):
    """nav_msgs/Odometry: pose in ``header.frame_id``, twist in ``child_frame_id``."""

    header: Header = field(default_factory=Header)
    child_frame_id: str = ""
    pose: PoseWithCovariance = field(default_factory=PoseWithCovariance)
    twist: TwistWithCovariance = field(default_factory=TwistWithCovariance)

    def serialize(self, *_: Any, **__: Any) -> bytes:
        """CDR bytes (:mod:`~sensorbench.logs.ros2_cdr`: the generic serializer takes
        ~0.5 ms a message)."""
        p, t = self.pose.pose, self.twist.twist
        return ros2_cdr.odometry(
            self.header.stamp.ns,
            self.header.frame_id,
            self.child_frame_id,
            (p.position.x, p.position.y, p.position.z, p.orientation.x, p.orientation.y,
             p.orientation.z, p.orientation.w),
            self.pose.covariance,
            (t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z),
            self.twist.covariance,
        )  # fmt: skip


@dataclass
@annotate.final
class Transform(IdlStruct, typename="geometry_msgs::msg::dds_::Transform_"):
    translation: Vector3 = field(default_factory=Vector3)
    rotation: Quaternion = field(default_factory=Quaternion)


@dataclass
@annotate.final
class TransformStamped(IdlStruct, typename="geometry_msgs::msg::dds_::TransformStamped_"):
    """geometry_msgs/TransformStamped: ``child_frame_id``'s pose in ``header.frame_id``."""

    header: Header = field(default_factory=Header)
    child_frame_id: str = ""
    transform: Transform = field(default_factory=Transform)


if not TYPE_CHECKING:
    Transforms = sequence[TransformStamped]


@dataclass
@annotate.final
class TFMessage(IdlStruct, typename="tf2_msgs::msg::dds_::TFMessage_"):
    transforms: Transforms = field(default_factory=list)

    def serialize(self, *_: Any, **__: Any) -> bytes:
        """CDR bytes (:mod:`~sensorbench.logs.ros2_cdr`)."""
        return ros2_cdr.tf_message([
            (t.header.stamp.ns, t.header.frame_id, t.child_frame_id,
             np.array([t.transform.translation.x, t.transform.translation.y,
                       t.transform.translation.z, t.transform.rotation.x, t.transform.rotation.y,
                       t.transform.rotation.z, t.transform.rotation.w]))
            for t in self.transforms
        ])  # fmt: skip


@dataclass
@annotate.final
class LaserScan(IdlStruct, typename="sensor_msgs::msg::dds_::LaserScan_"):
    """sensor_msgs/LaserScan: ray i at ``angle_min + i·angle_increment`` (rad, CCW),
    measured at ``stamp + i·time_increment`` (s); ranges m (+inf: no return)."""

    header: Header = field(default_factory=Header)
    angle_min: float32 = 0.0
    angle_max: float32 = 0.0
    angle_increment: float32 = 0.0
    time_increment: float32 = 0.0
    scan_time: float32 = 0.0
    range_min: float32 = 0.0
    range_max: float32 = 0.0
    ranges: F32s = field(default_factory=list)
    intensities: F32s = field(default_factory=list)

    def serialize(self, *_: Any, **__: Any) -> bytes:
        """CDR bytes (:mod:`~sensorbench.logs.ros2_cdr`: the generic serializer takes
        milliseconds for a scan's thousands of rays)."""
        return ros2_cdr.laser_scan(
            self.header.stamp.ns,
            self.header.frame_id,
            (self.angle_min, self.angle_max, self.angle_increment, self.time_increment,
             self.scan_time, self.range_min, self.range_max),
            np.asarray(self.ranges),
            np.asarray(self.intensities),
        )  # fmt: skip


@dataclass
@annotate.final
class KeyValue(IdlStruct, typename="diagnostic_msgs::msg::dds_::KeyValue_"):
    key: str = ""
    value: str = ""


if not TYPE_CHECKING:
    Values = sequence[KeyValue]


@dataclass
@annotate.final
class DiagnosticStatus(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticStatus_"):
    """diagnostic_msgs/DiagnosticStatus (``level``: :data:`~sensorbench.live.ros2.OK` …)."""

    level: byte = OK
    name: str = ""
    message: str = ""
    hardware_id: str = ""
    values: Values = field(default_factory=list)


if not TYPE_CHECKING:
    Statuses = sequence[DiagnosticStatus]


@dataclass
@annotate.final
class DiagnosticArray(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticArray_"):
    header: Header = field(default_factory=Header)
    status: Statuses = field(default_factory=list)
