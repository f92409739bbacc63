"""The ROS 2 message types ``live --ros2`` publishes, as DDS types named as ROS 2 names them.

Each struct is the IDL that ``rosidl`` generates from a ROS 2 Humble ``.msg``, whose
fields are read from rosbags' type store (the definitions the MCAP export writes):
module ``pkg::msg::dds_``, struct name with a trailing ``_``, fields in the ``.msg``'s
order, ``T[N]`` a fixed array, ``T[]`` a sequence, every struct final (plain CDR, as
``rmw_cyclonedds`` and Fast DDS write). A sample is its CDR bytes
(:mod:`~sensorbench.logs.ros2_cdr`): ``ODOMETRY(data)``; the binding's generic
serializer takes milliseconds for a scan's thousands of rays.
"""

from typing import Any, cast

from cyclonedds.idl import IdlMeta, IdlStruct
from cyclonedds.idl import types as idl
from rosbags.interfaces import Nodetype
from rosbags.typesys import Stores, get_typestore

_STORE = get_typestore(Stores.ROS2_HUMBLE)
_STRUCTS: dict[str, Any] = {}


def _init(self: Any, data: bytes) -> None:
    self.data = data


def _serialize(self: Any, *_: Any, **__: Any) -> bytes:
    return self.data


def _struct(msgtype: str) -> Any:
    """The DDS struct of ``msgtype`` (``pkg/msg/Name``), its fields' structs made first."""
    if msgtype not in _STRUCTS:
        pkg, _, name = msgtype.split("/")
        typename = f"{pkg}::msg::dds_::{name}_"
        ns: Any = IdlMeta.__prepare__(f"{name}_", (IdlStruct,), typename=typename)
        ns.update(__init__=_init, serialize=_serialize)
        for field, (kind, detail) in _STORE.fielddefs[msgtype][1]:
            ns["__annotations__"][field] = _field(kind, detail)
        _STRUCTS[msgtype] = IdlMeta(f"{name}_", (IdlStruct,), ns)
    return _STRUCTS[msgtype]


def _field(kind: Nodetype, detail: Any) -> Any:
    """The IDL type of a field rosbags describes as ``(kind, detail)``: a base type, a
    message, ``T[N]`` or ``T[]``."""
    if kind == Nodetype.BASE:
        return str if detail[0] == "string" else getattr(idl, detail[0])
    if kind == Nodetype.NAME:
        return _struct(detail)
    inner = _field(*detail[0])
    if kind == Nodetype.ARRAY:
        return cast(Any, idl.array)[inner, detail[1]]
    return cast(Any, idl.sequence)[inner]


ODOMETRY, TF_MESSAGE = _struct("nav_msgs/msg/Odometry"), _struct("tf2_msgs/msg/TFMessage")
LASER_SCAN = _struct("sensor_msgs/msg/LaserScan")
DIAGNOSTIC_ARRAY = _struct("diagnostic_msgs/msg/DiagnosticArray")
