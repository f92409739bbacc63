"""The LD06, registered as nothing but a kind of the LD19 protocol: the configuration, the
emulator, the probe, the bring-up and capture all know it, and a capture from an emulated
LD06 on a pty holds exactly the points the emulator sent."""

from __future__ import annotations

import subprocess
import sys
import time

import capture_util as cu
import numpy as np
import pytest

from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.drivers.device_kinds import get_kind, kind_names
from sensorbench.drivers.robot_config import parse_robot_config
from sensorbench.logs import Session
from sensorbench.sim.emulator_base import SimClock
from sensorbench.sim.kind_emulators import EmulatorRequest
from sensorbench.udev.probe import probe_port

SPEED = 4.0
DURATION_S = 2.0
CONFIG = """
[robot]
name = "ld06-bot"

[powerup]
gap_s = 0.1
timeout_s = 8.0

[[devices]]
name = "top"
kind = "ld06"
port = "{run_dir}/top"
mount = {x_m = 0.05, y_m = 0.0, yaw_deg = 90}
"""


def _emulated_ld06(config):
    dev = config.device("top")
    kind = get_kind(dev.kind)
    request = EmulatorRequest(None, SimClock(SPEED), seed=3, ld19_startup_s=0.2)
    return kind.emulator_factory()(kind, dev, request)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    run = tmp_path_factory.mktemp("ld06")
    config = parse_robot_config(CONFIG, "ld06.toml", run_dir=run)
    emu = _emulated_ld06(config).start()
    try:
        result = run_capture(config, run / "session.h5", DURATION_S, CaptureOptions(speed=SPEED))
        time.sleep(0.1)
        truth = emu.truth()
    finally:
        emu.stop()
    return config, result, truth


def test_the_ld06_is_a_registered_kind_with_its_real_defaults() -> None:
    assert "ld06" in kind_names()
    ld06, ld19 = get_kind("ld06"), get_kind("ld19")
    assert ld06.protocol == ld19.protocol == "ld19" and ld06.model == "LD06"
    assert ld06.baud == 230400
    # 10 Hz (datasheet) at the 4545 samples/s its real captures measure (datasheet: 4500)
    assert ld06.sim_defaults["rate_hz"] == 10.0 and ld06.sim_defaults["samples_per_s"] == 4545.0
    assert (ld06.sim_defaults["range_min_m"], ld06.sim_defaults["range_max_m"]) == (0.02, 12.0)
    config = parse_robot_config(CONFIG, "ld06.toml", run_dir="/tmp/x")
    assert config.device("top").kind == "ld06" and config.device("top").baud == 230400


def test_capture_from_an_emulated_ld06_holds_every_point_it_sent(captured) -> None:
    _, result, truth = captured
    assert result.ok, result
    assert [(b.name, b.kind, b.ok) for b in result.bringup] == [("top", "ld06", True)]
    with Session(result.path) as s:
        lidar = s.lidar("top")
        assert lidar.attrs["model"] == "LD06"
        assert s.raw("top").attrs["protocol"] == "ld19" and s.raw("top").attrs["kind"] == "ld06"
        turns = lidar.read()
    expected = cu.ld19_points(truth)
    native = np.where(np.isinf(turns.range), 0, np.rint(turns.range.astype(np.float64) * 1000.0))
    native = native.astype(np.int64)
    # 10 Hz (the LD06's default scan rate) x 4 x 2 s, less the device clock's first turns
    assert turns.n_turns >= 0.7 * 10 * SPEED * DURATION_S
    off = cu.find_block(expected, native, turns.intensity)
    block = slice(off, off + turns.n_points)
    np.testing.assert_array_equal(native, expected.native[block])
    np.testing.assert_array_equal(turns.intensity, expected.intensity[block])
    assert cu.angle_diff(turns.angle.astype(np.float64), expected.angle_ccw[block]).max() < 2e-5
    np.testing.assert_array_equal(turns.offset, np.flatnonzero(expected.turn_start[block]))
    (summary,) = result.devices
    assert (summary.kind, summary.crc_errors, summary.drops) == ("ld06", 0, 0)


def test_the_probe_recognises_the_ld06_by_its_protocol(tmp_path) -> None:
    config = parse_robot_config(CONFIG, "ld06.toml", run_dir=tmp_path)
    emu = _emulated_ld06(config).start()
    try:
        time.sleep(0.2)
        found = probe_port(emu.path, listen_s=0.4)
        as_ld06 = probe_port(emu.path, kinds=("ld06",), listen_s=0.4)
    finally:
        emu.stop()
    assert found.kind == "ld19" and found.info["kinds"] == ["ld19", "ld06"], found
    assert "LD19 or LD06" in found.detail
    assert as_ld06.kind == "ld06" and as_ld06.info["packets"] >= 3


def test_emulate_ld06_serves_on_a_pty(tmp_path) -> None:
    link = tmp_path / "ld06"
    args = ["emulate", "ld06", "--duration", "1.0", "--link", str(link), "--startup", "0.1"]
    proc = subprocess.run(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("/dev/pts/")
    assert "LD06 emulator (synthetic room) at 230400 baud" in proc.stderr
    assert "packets)" in proc.stderr and " 0 packets" not in proc.stderr
