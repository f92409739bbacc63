"""The emulated robot with the firmware image as its pod MCU (``emulate robot --pods-firmware``).

A robot whose only device is the pod MCU, driven by the square scenario's pod counts:
the reader gets exactly the counts of ``sim.pods()`` the harness drove; a config or a
scenario the firmware cannot serve is refused before anything runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import firmware_util
import numpy as np
import pytest
from pods_util import FrameSink

from sensorbench.drivers.pods_reader import PodProtocol
from sensorbench.drivers.serial_link import LinkConfig, SerialLink
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.errors import SimError
from sensorbench.sim.emulated_robot import EmulatedRobot
from sensorbench.sim.emulator_firmware import FirmwarePodEmulator

# the capture subprocess's start-up deadline assumes compiled reader kernels
pytestmark = pytest.mark.usefixtures("warm_readers")

CONFIG = """
[robot]
name = "pods-only"

[[devices]]
name = "pods"
kind = "pods"
port = "{{run_dir}}/pods"
baud = 115200
protocol = "{protocol}"
counter_bits = 16
n_pods = 3
imu = {imu}

[emulation]
scenario = "{scenario}"
seed = 1
"""


@pytest.fixture(scope="module")
def elf():
    firmware_util.product("harness")
    return firmware_util.product("avr")


def _config(tmp_path, protocol: str = "binary", scenario: str = "square", imu: bool = False):
    path = tmp_path / "robot.toml"
    path.write_text(CONFIG.format(protocol=protocol, scenario=scenario, imu=str(imu).lower()))
    return path


def test_the_robot_s_pod_mcu_is_the_firmware_driven_by_the_scenario(elf, tmp_path) -> None:
    robot = EmulatedRobot(tmp_path / "run", _config(tmp_path), speed=1.0, pods_firmware=elf)
    em = robot["pods"]
    assert isinstance(em, FirmwarePodEmulator)
    protocol, sink = PodProtocol(), FrameSink()
    config = LinkConfig(first_valid_timeout_s=None)
    reader = SerialReader(SerialLink("pods", robot.link("pods"), protocol, writer=sink,
                                     config=config))  # fmt: skip
    reader.start()  # opened before power-on: its DTR finds no running MCU to reset
    try:
        robot.start()
        deadline = time.monotonic() + 60
        while len(sink.collected().seq) < 400 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        reader.stop()
        robot.stop()
    frames = sink.collected()
    assert len(frames.seq) >= 400 and protocol.parser.stats.crc_errors == 0
    np.testing.assert_array_equal(np.diff(frames.seq), 1)
    t_us = frames.device_ns // 1000
    # no reset: the port was open before power-on
    expected = firmware_util.expected_counts(em, 0, t_us)
    np.testing.assert_array_equal(frames.counts - frames.counts[0], expected - expected[0])
    assert np.abs(np.diff(expected, axis=0)).max() > 0  # the square drive moves from 1 s
    assert not (tmp_path / "run" / "pods").exists()


@pytest.mark.parametrize(
    ("protocol", "scenario", "imu", "message"),
    [
        ("csv", "square", False, "binary frames of 3 counters"),
        ("binary", "square", True, "without IMU fields.*imu = true"),
        ("binary", "pods_faults", False, "no link faults"),
    ],
)
def test_what_the_firmware_cannot_serve_is_refused(
    elf, tmp_path, protocol, scenario, imu, message
) -> None:
    config = _config(tmp_path, protocol, scenario, imu)
    with pytest.raises(SimError, match=message):
        EmulatedRobot(tmp_path / "run", config, pods_firmware=elf)
    assert not (tmp_path / "run" / "pods").exists()


@pytest.mark.parametrize(("speed", "warned"), [("1e9", True), ("0.25", False)])
def test_the_robot_says_when_the_firmware_served_slower_than_asked(
    elf, tmp_path, speed: str, warned: bool
) -> None:
    # simavr runs the MCU a few times faster than real time at most (the harness reports
    # its simulated and wall time on exit); a quarter of real time it keeps up with, and
    # 2 s of frames at 0.25x fit in the pty's buffer with nobody reading
    run = subprocess.run(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "emulate", "robot",
         "--run-dir", str(tmp_path / "run"), "--config", str(_config(tmp_path)),
         "--pods-firmware", str(elf), "--speed", speed, "--duration", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    found = re.search(r"pods: warning: ran at ([0-9.e+]+)x, not the asked", run.stderr)
    assert bool(found) == warned, run.stderr
    if found:
        assert 0 < float(found.group(1)) < 1000
