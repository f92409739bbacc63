"""The ROS 2 message types ``live --ros2`` publishes, as DDS types named as ROS 2 names them.

Each struct is the IDL that ``rosidl`` generates from the ``.msg`` (ROS 2 Humble and
later): module ``pkg::msg::dds_``, struct name with a trailing ``_``, fields in the
``.msg``'s order, ``T[N]`` a fixed array, ``T[]`` a sequence, ``byte`` an octet, every
struct final (plain CDR, as ``rmw_cyclonedds`` and Fast DDS write). A sample is its CDR
bytes (:mod:`~sensorbench.logs.ros2_cdr`): ``ODOMETRY(data)``; the binding's generic
serializer takes milliseconds for a scan's thousands of rays.
"""

import re
from typing import Any, cast

from cyclonedds.idl import IdlMeta, IdlStruct
from cyclonedds.idl import types as idl

# Each message as its .msg file declares it; a type is declared before a message uses it.
_MSGS = """
builtin_interfaces/Time: int32 sec, uint32 nanosec
std_msgs/Header: builtin_interfaces/Time stamp, string frame_id
geometry_msgs/Point: float64 x, float64 y, float64 z
geometry_msgs/Vector3: float64 x, float64 y, float64 z
geometry_msgs/Quaternion: float64 x, float64 y, float64 z, float64 w
geometry_msgs/Pose: geometry_msgs/Point position, geometry_msgs/Quaternion orientation
geometry_msgs/PoseWithCovariance: geometry_msgs/Pose pose, float64[36] covariance
geometry_msgs/Twist: geometry_msgs/Vector3 linear, geometry_msgs/Vector3 angular
geometry_msgs/TwistWithCovariance: geometry_msgs/Twist twist, float64[36] covariance
nav_msgs/Odometry: std_msgs/Header header, string child_frame_id,
  geometry_msgs/PoseWithCovariance pose, geometry_msgs/TwistWithCovariance twist
geometry_msgs/Transform: geometry_msgs/Vector3 translation, geometry_msgs/Quaternion rotation
geometry_msgs/TransformStamped: std_msgs/Header header, string child_frame_id,
  geometry_msgs/Transform transform
tf2_msgs/TFMessage: geometry_msgs/TransformStamped[] transforms
sensor_msgs/LaserScan: std_msgs/Header header, float32 angle_min, float32 angle_max,
  float32 angle_increment, float32 time_increment, float32 scan_time, float32 range_min,
  float32 range_max, float32[] ranges, float32[] intensities
diagnostic_msgs/KeyValue: string key, string value
diagnostic_msgs/DiagnosticStatus: byte level, string name, string message,
  string hardware_id, diagnostic_msgs/KeyValue[] values
diagnostic_msgs/DiagnosticArray: std_msgs/Header header,
  diagnostic_msgs/DiagnosticStatus[] status
"""


def _init(self: Any, data: bytes) -> None:
    self.data = data


def _serialize(self: Any, *_: Any, **__: Any) -> bytes:
    return self.data


def _types() -> dict[str, Any]:
    seq, arr = cast(Any, idl.sequence), cast(Any, idl.array)  # no types mypy can index
    types: dict[str, Any] = {"string": str}
    types |= {t: getattr(idl, t) for t in ("int32", "uint32", "float32", "float64", "byte")}
    for decl in re.split(r"\n(?=\S)", _MSGS.strip()):
        name, body = decl.split(":", 1)
        pkg, msg = name.split("/")
        ns: Any = IdlMeta.__prepare__(f"{msg}_", (IdlStruct,), typename=f"{pkg}::msg::dds_::{msg}_")
        ns.update(__init__=_init, serialize=_serialize)
        for kind, field in (f.split() for f in body.split(",")):
            base, _, size = kind.partition("[")
            t = types[base]
            ns["__annotations__"][field] = (seq[t] if size == "]" else
                                            arr[t, int(size[:-1])] if size else t)  # fmt: skip
        types[name] = IdlMeta(f"{msg}_", (IdlStruct,), ns)
    return types


_T = _types()
ODOMETRY, TF_MESSAGE = _T["nav_msgs/Odometry"], _T["tf2_msgs/TFMessage"]
LASER_SCAN, DIAGNOSTIC_ARRAY = _T["sensor_msgs/LaserScan"], _T["diagnostic_msgs/DiagnosticArray"]
