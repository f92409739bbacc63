"""An independent ROS 2 subscriber: Cyclone DDS with types written here from the .msg files.

Run as ``python ros2_peer.py DOMAIN SECONDS OUT.json [LIDAR,...]``: joins DOMAIN (the
caller sets ``CYCLONEDDS_URI``) until SECONDS have passed or its standard input closes,
subscribes to the topics ``live --ros2`` publishes with the QoS a ROS 2 consumer
uses (rclcpp's SensorDataQoS for scans, reliable for /odom, /diagnostics and /tf,
transient-local reliable for /tf_static, as tf2's static listener), and writes
everything it received as JSON: per topic the writers matched (DDS matches a reader
only to writers of its topic name and type name with compatible QoS), QoS
incompatibilities, and each sample with its receive time. Nothing here comes from
sensorbench: the structs are transcribed from ROS 2 Humble's message definitions
(builtin_interfaces/Time, std_msgs/Header, geometry_msgs/..., nav_msgs/Odometry,
tf2_msgs/TFMessage, sensor_msgs/LaserScan, diagnostic_msgs/...), named as rosidl
names them for DDS.
"""

import json
import math
import re
import sys
import threading
import time

from cyclonedds.core import Listener, Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import make_idl_struct
from cyclonedds.idl.types import array, byte, float32, float64, int32, sequence, uint32
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

# Each message as its .msg file declares it: `T[]` an unbounded sequence, `T[N]` a fixed
# array; a type must be declared before a message uses it.
MSGS = """
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


def _types(table: str) -> dict:
    """Final (non-extensible) IDL structs named as rosidl names them for DDS."""
    types: dict = {"int32": int32, "uint32": uint32, "float32": float32,
                   "float64": float64, "byte": byte, "string": str}  # fmt: skip
    for decl in re.split(r"\n(?=\S)", table.strip()):
        name, body = decl.split(":", 1)
        fields = {}
        for field in body.split(","):
            kind, fname = field.split()
            base, _, size = kind.partition("[")
            t = types[base]
            fields[fname] = (sequence[t] if size == "]" else
                             array[t, int(size[:-1])] if size else t)  # fmt: skip
        pkg, msg = name.split("/")
        types[name] = make_idl_struct(f"{msg}_", f"{pkg}::msg::dds_::{msg}_", fields)
    return types


T = _types(MSGS)
Odometry_, TFMessage_ = T["nav_msgs/Odometry"], T["tf2_msgs/TFMessage"]
LaserScan_, DiagnosticArray_ = T["sensor_msgs/LaserScan"], T["diagnostic_msgs/DiagnosticArray"]


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _f(v: float) -> float | str:
    return v if math.isfinite(v) else repr(v)


def _odom(m) -> dict:
    p, t = m.pose.pose, m.twist.twist
    return {
        "stamp": _ns(m.header.stamp), "frame": m.header.frame_id, "child": m.child_frame_id,
        "position": [p.position.x, p.position.y, p.position.z],
        "quat": [p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w],
        "pose_cov": list(m.pose.covariance),
        "twist": [t.linear.x, t.linear.y, t.linear.z, t.angular.x, t.angular.y, t.angular.z],
        "twist_cov": list(m.twist.covariance),
    }  # fmt: skip


def _tf(m) -> dict:
    return {"transforms": [
        {"stamp": _ns(t.header.stamp), "parent": t.header.frame_id, "child": t.child_frame_id,
         "t": [t.transform.translation.x, t.transform.translation.y, t.transform.translation.z],
         "q": [t.transform.rotation.x, t.transform.rotation.y, t.transform.rotation.z,
               t.transform.rotation.w]}
        for t in m.transforms]}  # fmt: skip


def _scan(m) -> dict:
    return {
        "stamp": _ns(m.header.stamp), "frame": m.header.frame_id,
        "angle_min": m.angle_min, "angle_max": m.angle_max, "increment": m.angle_increment,
        "time_increment": m.time_increment, "scan_time": m.scan_time,
        "range_min": m.range_min, "range_max": m.range_max,
        "ranges": [_f(r) for r in m.ranges], "intensities": list(m.intensities),
    }  # fmt: skip


def _diag(m) -> dict:
    return {"stamp": _ns(m.header.stamp), "status": [
        {"level": s.level, "name": s.name, "message": s.message, "hardware_id": s.hardware_id,
         "values": {kv.key: kv.value for kv in s.values}} for s in m.status]}  # fmt: skip


def main() -> None:
    domain, seconds, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    lidars = sys.argv[4].split(",") if len(sys.argv) > 4 else []
    reliable = Policy.Reliability.Reliable(duration(milliseconds=100))
    sensor = Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5),
                 Policy.Durability.Volatile)  # rclcpp::SensorDataQoS
    default = Qos(reliable, Policy.History.KeepLast(10), Policy.Durability.Volatile)
    # /odom at the pods' 200 Hz: a deep reader history, so this peer's own pace loses
    # nothing it then checks (Nav2's depth 10 keeps the newest; the QoS still match)
    odom_qos = Qos(reliable, Policy.History.KeepLast(2000), Policy.Durability.Volatile)
    tf_qos = Qos(reliable, Policy.History.KeepLast(2000), Policy.Durability.Volatile)
    static = Qos(reliable, Policy.History.KeepLast(1), Policy.Durability.TransientLocal)
    wanted = [("/odom", Odometry_, odom_qos, _odom), ("/tf", TFMessage_, tf_qos, _tf),
              ("/tf_static", TFMessage_, static, _tf), ("/scan", LaserScan_, sensor, _scan),
              ("/diagnostics", DiagnosticArray_, default, _diag)]  # fmt: skip
    wanted += [(f"/{n}/scan", LaserScan_, sensor, _scan) for n in lidars]
    dp = DomainParticipant(domain)
    got: dict[str, dict] = {}
    readers = []
    for topic, kind, qos, conv in wanted:
        entry = got[topic] = {"matched": 0, "incompatible": 0, "samples": []}

        def on_match(_reader, status, entry=entry) -> None:
            entry["matched"] = max(entry["matched"], status.current_count)

        def on_incompatible(_reader, status, entry=entry) -> None:
            entry["incompatible"] = status.total_count

        listener = Listener(on_subscription_matched=on_match,
                            on_requested_incompatible_qos=on_incompatible)  # fmt: skip
        readers.append((topic, kind, DataReader(dp, Topic(dp, "rt" + topic, kind), qos=qos,
                                                listener=listener), conv))  # fmt: skip
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not closed.is_set():
        for topic, kind, reader, conv in readers:
            for m in reader.take(N=1000):
                if isinstance(m, kind):  # not a writer's disposal
                    got[topic]["samples"].append({"recv": time.time_ns(), **conv(m)})
        time.sleep(0.02)
    for topic, kind, reader, conv in readers:  # what came while stopping
        got[topic]["samples"] += [{"recv": time.time_ns(), **conv(m)}
                                  for m in reader.take(N=1000) if isinstance(m, kind)]  # fmt: skip
    with open(out, "w") as fh:
        json.dump(got, fh)


if __name__ == "__main__":
    main()
