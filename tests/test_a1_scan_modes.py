"""A1 scan modes negotiated as Slamtec's SDK does (``sl_lidar_driver.cpp``).

Three units brought up by a robot.toml that names no scan mode: an emulated A1M8 at
firmware 1.29 (GET_LIDAR_CONF: Standard, Express, Boost, typical Express), one at
firmware 1.20 (no configuration commands: Standard, with a note), and an independent
minimal emulator written here (not the project's), answering only GET_INFO,
GET_HEALTH, SCAN and STOP as a firmware 1.16 unit would.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import a1_util as u
import numpy as np
import pytest
import serial
from capture_util import status_line

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_reader import A1Scanner
from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.drivers.robot_config import parse_robot_config
from sensorbench.errors import ConfigError, DriverError
from sensorbench.logs import Session
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit


class OldA1:
    """A firmware 1.16 RPLIDAR on a pty: GET_INFO, GET_HEALTH, SCAN (360 nodes a turn at
    about 2000 nodes/s, a return every other node), STOP; every other request ignored."""

    def __init__(self, link: str) -> None:
        self.master, slave = os.openpty()
        self.path = os.ttyname(slave)
        self._slave = slave
        os.symlink(self.path, link)
        self.requests: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rx, scanning, k = b"", False, 0
        os.set_blocking(self.master, False)
        while not self._stop.is_set():
            time.sleep(0.01)
            with contextlib.suppress(BlockingIOError):
                rx += os.read(self.master, 4096)
            while len(rx) >= 2:
                if rx[0] != 0xA5:
                    rx = rx[1:]
                    continue
                cmd, rx = rx[1], rx[2:]
                if cmd & 0x80:  # a request with payload: skip it, unanswered
                    rx = rx[rx[0] + 2 :] if rx else rx
                    continue
                self.requests.append(cmd)
                if cmd == 0x25:
                    scanning = False
                elif cmd == 0x20:
                    scanning = True
                    os.write(self.master, bytes.fromhex("a55a0500004081"))
                elif scanning:
                    continue
                elif cmd == 0x50:
                    info = bytes([0x18, 16, 1, 7]) + bytes(range(16, 32))
                    os.write(self.master, bytes.fromhex("a55a1400000004") + info)
                elif cmd == 0x52:
                    os.write(self.master, bytes.fromhex("a55a0300000006") + bytes(3))
            if scanning:
                nodes = b""
                for _ in range(20):
                    dist = 4 * (1000 + k % 360) if k % 2 else 0
                    nodes += u.encode_node(k % 360 == 0, 15 if dist else 0, (k % 360) * 64, dist)
                    k += 1
                with contextlib.suppress(BlockingIOError):
                    os.write(self.master, nodes)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        os.close(self.master)
        os.close(self._slave)


CONFIG = """
[robot]
name = "modes"

[powerup]
gap_s = 0.2
timeout_s = 4.0
"""

DEVICE = """
[[devices]]
name = "{name}"
kind = "a1"
port = "{run_dir}/{name}"
mount = {{x_m = 0.0, y_m = 0.0, yaw_deg = 0}}
"""


@pytest.fixture(scope="module")
def three_units(tmp_path_factory):
    run = tmp_path_factory.mktemp("modes")
    text = CONFIG + "".join(DEVICE.format(name=n, run_dir=run) for n in ("new", "mid", "old"))
    config = parse_robot_config(text, "robot.toml", run_dir=run)
    statuses: list[str] = []
    old = OldA1(str(run / "old"))
    try:
        with (
            A1Emulator(speed=2.0, link=str(run / "new")) as new,
            A1Emulator(speed=2.0, link=str(run / "mid"), unit=A1Unit(firmware=(1, 20))) as mid,
        ):
            result = run_capture(
                config,
                run / "s.h5",
                2.0,
                CaptureOptions(speed=2.0, status_interval_s=0.2),
                on_status=lambda t, st: statuses.append(status_line(t, 2.0, st)),
            )
            requests = {"new": list(new.requests), "mid": list(mid.requests)}
    finally:
        old.close()
    requests["old"] = old.requests
    return run / "s.h5", result, statuses, requests


def test_every_generation_comes_up_without_configuration_in_the_sdks_mode(three_units):
    path, result, statuses, requests = three_units
    assert result.ok, result
    with Session(path) as s:
        attrs = {n: dict(s.lidar(n).attrs) for n in ("new", "mid", "old")}
        turns = {n: s.lidar(n).read() for n in ("new", "mid", "old")}
    # firmware 1.29: asked its modes; typical Sensitivity answers ultra capsules (0x84),
    # not decoded here: Express, said so, started with Express's id (1)
    assert attrs["new"]["scan_mode"] == "Express" and attrs["new"]["scan_mode_id"] == 1
    assert "Sensitivity (id 3, 127 us, 12 m, answer 0x84)" in attrs["new"]["scan_modes"]
    assert "Stability (id 4, 201 us" in attrs["new"]["scan_modes"]
    assert attrs["new"]["scan_mode_note"].startswith("typical mode Sensitivity (id 3")
    assert proto.CMD_GET_LIDAR_CONF in requests["new"] and 0x82 in requests["new"]
    assert 0x20 not in requests["new"]
    # firmware 1.20 and 1.16: no configuration commands asked, Standard, said so
    for name, fw in (("mid", "1.20"), ("old", "1.16")):
        assert attrs[name]["scan_mode"] == "Standard" and attrs[name]["scan_format"] == "standard"
        assert proto.CMD_GET_LIDAR_CONF not in requests[name]
        assert attrs[name]["scan_mode_note"].startswith(f"firmware {fw} has no configuration")
    assert 0x59 not in requests["old"]  # no GET_SAMPLERATE below 1.17 either
    for name in ("new", "mid", "old"):
        assert turns[name].n_turns >= 3, name
    # the independent unit's turns are what it sent: 360 nodes, a return every other one
    whole = turns["old"].count[1:-1]
    assert np.all(whole == 360), whole
    assert any(" new Express " in line and " mid Standard " in line for line in statuses)
    assert any(" old Standard " in line for line in statuses)


def test_a_named_mode_is_sent_by_its_id_and_an_unknown_one_lists_the_units_modes():
    with A1Emulator(speed=4.0) as emu:
        sc = A1Scanner(emu.path, read_timeout_s=0.5, scan_mode="standard")
        sc.open()
        sc.start()
        assert sc.mode is not None and (sc.mode.name, sc.scan_mode_used) == ("Standard", "standard")
        assert emu.requests[-1] == 0x20  # the SDK redirects a 0x81 mode to SCAN
        sc.close()
        for name, why in (("Turbo", "is not offered"), ("sensitivity", "not decoded here")):
            sc = A1Scanner(emu.path, read_timeout_s=0.5, scan_mode=name)
            sc.open()
            with pytest.raises(DriverError, match=why) as err:
                sc.start()
            assert "Express (id 1, 254 us, 12 m, answer 0x82)" in str(err.value)
            sc.close()


def test_the_express_request_carries_the_mode_id_on_firmware_with_configuration():
    assert proto.express_request(1) == bytes.fromhex("a58205010000000023")
    assert proto.express_request(0) == bytes.fromhex("a58205000000000022")  # legacy form
    # a real A1M8 at 1.29 (docs/A1.md): 5 modes, Express 65024 (254 us), typical 3
    with A1Emulator(speed=4.0) as emu, serial.Serial(emu.path, 115200, timeout=0.05) as s:
        asked = ((0x70, None, 5), (0x71, 1, 65024), (0x74, 4, 3072), (0x7C, None, 3))
        for conf, mode, want in asked:
            s.write(proto.conf_request(conf, mode))
            desc = u.read_exact(s, 7)
            value = proto.conf_value(conf, u.read_exact(s, u.descriptor_fields(desc)[0]))
            assert desc[6] == proto.TYPE_GET_LIDAR_CONF and int.from_bytes(value, "little") == want


def test_scan_mode_is_checked_where_it_is_written(tmp_path):
    text = CONFIG + DEVICE.format(name="front", run_dir=tmp_path)
    assert parse_robot_config(text, "r.toml", run_dir=tmp_path).device("front").options[
        "scan_mode"
    ] == proto.TYPICAL
    ok = parse_robot_config(text + 'scan_mode = "Express"\n', "r.toml", run_dir=tmp_path)
    assert ok.device("front").options["scan_mode"] == "Express"
    bad = text + 'scan_mode = "not a mode!"\n'
    must = r"^r\.toml:\d+: devices\[0\]\.scan_mode: must be 'typical' or"
    with pytest.raises(ConfigError, match=must) as err:
        parse_robot_config(bad, "r.toml", run_dir=tmp_path)
    line = next(i for i, s in enumerate(bad.splitlines(), 1) if s.startswith("scan_mode"))
    assert str(err.value).startswith(f"r.toml:{line}:")


def test_an_undecoded_typical_mode_falls_back_to_express_else_standard():
    with A1Emulator(speed=4.0) as emu:
        emu.scan_modes = [("Standard", 508, 0x81), ("Boost", 127, 0x84)]
        emu.typical_mode = 1
        sc = A1Scanner(emu.path, read_timeout_s=0.5, scan_mode="typical")
        sc.open()
        sc.start()
        assert sc.mode is not None and sc.mode.name == "Standard" and emu.requests[-1] == 0x20
        assert sc.mode_note.startswith("typical mode Boost (id 1")
        sc.close()
