"""The README's "Characterizing a new sensor" is right: its code, taken from README.md as
it stands, adds a device kind (a line-based ASCII pose sensor) with one registration,
and that kind is configured, probed, brought up, emulated on a pty by the emulated
robot and captured through the real capture path into a session that holds exactly
the poses the emulator sent."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import sensorbench.drivers
import sensorbench.sim
from sensorbench.drivers import device_kinds
from sensorbench.drivers.capture import run_capture
from sensorbench.drivers.robot_config import load_robot_config, parse_robot_config
from sensorbench.errors import ConfigError
from sensorbench.logs import Session
from sensorbench.sim.emulated_robot import EmulatedRobot
from sensorbench.udev.probe import probe_port

README = Path(__file__).resolve().parent.parent / "README.md"
DURATION_S = 1.5
HEADER = """\
[robot]
name = "pose-bench"

[powerup]
gap_s = 0.1
timeout_s = 3.0

[emulation]
scenario = "square"
"""


def _section() -> str:
    text = README.read_text()
    start = text.index("## Characterizing a new sensor")
    return text[start : text.index("\n## ", start + 1)]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _section(), flags=re.S)


def _python_block(path: str) -> str:
    """The README's Python block whose first line names ``path``."""
    (code,) = [b for b in _blocks("python") if b.startswith(f"# {path}\n")]
    return code


def _module(monkeypatch, package: types.ModuleType, name: str, code: str) -> types.ModuleType:
    """``code`` as the module ``package.name``, as if the file existed (for this test)."""
    module = types.ModuleType(f"{package.__name__}.{name}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(package, name, module, raising=False)
    exec(compile(code, f"README.md:{module.__name__}", "exec"), module.__dict__)
    return module


@pytest.fixture
def linepose(monkeypatch):
    """The kind added exactly as the README says; the registry is restored afterwards."""
    monkeypatch.setattr(device_kinds, "_REGISTRY", dict(device_kinds._REGISTRY))
    _module(monkeypatch, sensorbench.drivers, "linepose", _python_block("drivers/linepose.py"))
    _module(
        monkeypatch, sensorbench.sim, "emulator_linepose", _python_block("sim/emulator_linepose.py")
    )
    registration = _python_block("drivers/device_kinds.py")
    assert registration.count("register(") == 1  # one registration call
    exec(compile(registration, "README.md:registration", "exec"), vars(device_kinds).copy())
    return device_kinds.get_kind("linepose")


def _config_text(run_dir: str, device_toml: str) -> str:
    return HEADER + "\n" + device_toml.replace('"/dev/pose"', f'"{run_dir}/pose"')


def test_the_readme_walk_is_complete():
    """Protocol, emulator, registration and configuration: every step has its code."""
    assert len(_blocks("python")) == 3 and len(_blocks("toml")) == 1
    assert 'kind = "linepose"' in _blocks("toml")[0]


def test_the_config_knows_the_new_kind_and_its_key(linepose, tmp_path):
    (device,) = _blocks("toml")
    config = parse_robot_config(_config_text("/tmp/run", device), "robot.toml")
    dev = config.device("pose")
    assert dev.kind == "linepose" and dev.baud == 115200 and dev.options == {"frame": "map"}
    bad = _config_text("/tmp/run", device).replace('frame = "map"', "frame = 3")
    line = next(i for i, s in enumerate(bad.splitlines(), 1) if s.startswith("frame"))
    with pytest.raises(ConfigError, match=rf"robot.toml:{line}:.*frame must be a non-empty name"):
        parse_robot_config(bad, "robot.toml")


def test_a_new_kind_is_captured_through_the_real_capture_path(linepose, tmp_path):
    (device,) = _blocks("toml")
    run = tmp_path / "run"
    config_path = tmp_path / "robot.toml"
    config_path.write_text(_config_text("{run_dir}", device))
    with EmulatedRobot(run, config_path) as robot:
        emu = robot.devices["pose"]
        assert type(emu).__name__ == "LinePoseEmulator"  # the kind's emulator= builder
        probe = probe_port(robot.link("pose"), kinds=("linepose",))
        config = load_robot_config(config_path, run_dir=run)
        result = run_capture(config, tmp_path / "s.h5", DURATION_S)
        sent = np.array(emu.sent)

    assert probe.kind == "linepose" and "valid lines at 115200 baud" in probe.detail, probe
    assert result.ok, result
    (bringup,) = result.bringup
    assert bringup.ok and bringup.kind == "linepose"
    (summary,) = result.devices
    assert summary.kind == "linepose"
    assert summary.crc_errors <= 2  # the line cut by the open, one garbled at the baud change
    with Session(tmp_path / "s.h5") as s:
        assert s.pose_names() == ["pose"]
        stream = s.pose("pose")
        attrs = dict(stream.attrs)
        poses = stream.read()
        raw = s.raw("pose")
        raw_attrs, raw_bytes = dict(raw.attrs), raw.read_bytes()
        received_ns = raw.chunk_times_ns
        events = [(e.kind, e.message) for e in s.events() if e.source == "pose"]
    assert attrs["kind"] == "pose_sensor" and attrs["model"] == "LinePose"
    assert attrs["frame"] == "map"
    assert raw_attrs["kind"] == "linepose" and raw_attrs["protocol"] == "linepose-ascii"
    assert summary.bytes == len(raw_bytes) > 0 and summary.items == len(poses.t_ns)
    kinds = [k for k, _ in events]
    assert events[0][1].startswith("bring-up ok: valid data on")
    assert kinds[1] == "start" and kinds[-1] == "stop" and "error" not in kinds

    # every stored pose is a line the emulator sent, decoded exactly, none left out
    n = len(poses.t_ns)
    got_x_mm = np.round(poses.position[:, 0] * 1000).astype(np.int64)
    first = int(np.flatnonzero(sent[:, 1] == got_x_mm[0])[0])
    # most of what was sent from the first stored line on (the rest: while the capture
    # closed), counted on the emulator's own output: a starved emulator sends fewer
    assert n >= 0.5 * (len(sent) - first) and n > 10, (n, len(sent) - first)
    expect = sent[first : first + n]
    np.testing.assert_array_equal(got_x_mm, expect[:, 1])
    np.testing.assert_allclose(poses.position[:, 1], expect[:, 2] / 1000, atol=1e-12)
    yaw = 2 * np.arctan2(poses.quat_xyzw[:, 2], poses.quat_xyzw[:, 3])
    np.testing.assert_allclose(np.rad2deg(yaw), expect[:, 3] / 1000, atol=1e-9)
    assert np.all(poses.valid) and np.all(poses.position[:, 2] == 0)
    # lines read in one chunk are spaced by the device's clock (20 ms) exactly: the last
    # carries the chunk's receive time, the ones before count back by their device times
    last = np.isin(poses.t_ns, received_ns)
    assert last[-1] and last.sum() <= received_ns.size
    chunk = np.cumsum(np.r_[0, last[:-1]])
    same = chunk[1:] == chunk[:-1]
    steps = np.diff(poses.t_ns)
    np.testing.assert_array_equal(steps[same], np.diff(expect[:, 0])[same] * 10**6)
    # lines read alone are spaced as the emulator paced them: 20 ms on an idle machine,
    # stretched on a busy one (its 20-ms waits overrun), so the typical step lies between
    # the device's 20 ms and the emulator's mean period as received (± 1 ms)
    pacing_ns = (poses.t_ns[-1] - poses.t_ns[0]) / (n - 1)
    assert 19e6 <= np.median(steps) <= pacing_ns + 1e6, (np.median(steps), pacing_ns)
