"""examples/ros2-params.yaml: ROS 2 parameters that parse, every key commented, and the
topic and frame names `live --ros2` publishes by default."""

from __future__ import annotations

import re
from pathlib import Path

from ruamel.yaml import YAML

from sensorbench.live.ros2 import Ros2Options

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "ros2-params.yaml"


def _walk(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*path, k), v
            yield from _walk(v, (*path, k))


def test_every_key_is_commented() -> None:
    keys = [line for line in EXAMPLE.read_text().splitlines()
            if re.match(r"^\s*[A-Za-z_][\w]*:", line)]  # fmt: skip
    assert len(keys) > 40
    assert [k for k in keys if "#" not in k] == []


def test_names_are_live_s_defaults() -> None:
    doc = YAML(typ="safe").load(EXAMPLE.read_text())
    o = Ros2Options()
    values = {path[-1]: v for path, v in _walk(doc) if not isinstance(v, dict | list)}
    assert doc["slam_toolbox"]["ros__parameters"]["scan_topic"] == "/scan"
    frame_keys = ("odom_frame", "base_frame", "base_link_frame", "robot_base_frame")
    frames = {v for k, v in values.items() if k in frame_keys}
    assert frames == {o.odom_frame, o.base_frame}
    assert {v for k, v in values.items() if k in ("odom_topic", "odom0")} == {"/odom"}
    ekf = doc["ekf_filter_node"]["ros__parameters"]
    assert ekf["two_d_mode"] and len(ekf["odom0_config"]) == 15
