"""The A1 emulator, read through pyserial on its pty, against the protocol tables."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import a1_util as u
import numpy as np
import pytest
import serial
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import SimError
from sensorbench.sim.a1_samples import REAL_NODES_PER_TURN, RoomSamples
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.power import PowerBus
from sensorbench.sim.pty import Faults

SPEED = 10.0
SENSORBENCH = str(Path(sys.executable).with_name("sensorbench"))
SERIAL_A = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")


@pytest.fixture
def emu():
    with A1Emulator(speed=SPEED, unit=A1Unit(serial=SERIAL_A, spinup_s=0.5)) as e:
        yield e


@pytest.fixture
def host(emu):
    """The host's port, opened as the driver opens it, with DTR cleared: the motor keeps
    spinning as it has since power-on."""
    with open_serial(emu.path, 115200, timeout_s=0.05, dtr=False) as s:
        yield s


def test_get_info_matches_the_table(emu, host):
    host.write(b"\xa5\x50")
    raw = u.read_exact(host, 27)
    assert raw[:7] == bytes.fromhex("a55a1400000004")
    assert u.descriptor_fields(raw[:7]) == (20, 0, 0x04)
    payload = raw[7:]
    assert payload[0] == 0x18  # model A1M8
    assert (payload[2], payload[1]) == (1, 29)  # firmware major, minor
    assert payload[3] == 7
    assert payload[4:] == SERIAL_A


def test_each_unit_has_its_own_serial():
    other = bytes(range(100, 116))
    with (
        A1Emulator(speed=SPEED, unit=A1Unit(serial=other)) as e,
        serial.Serial(e.path, 115200, timeout=0.05) as s,
    ):
        s.write(b"\xa5\x50")
        assert u.read_exact(s, 27)[11:] == other
    with pytest.raises(SimError):
        A1Emulator(unit=A1Unit(serial=b"short"))


@pytest.mark.parametrize(("status", "code"), [(0, 0), (1, 0x0102), (2, 0x8004)])
def test_get_health_states_little_endian_code(emu, host, status, code):
    emu.set_health(status, code)
    host.write(b"\xa5\x52")
    raw = u.read_exact(host, 10)
    assert u.descriptor_fields(raw[:7]) == (3, 0, 0x06)
    assert raw[7] == status
    assert raw[8] | raw[9] << 8 == code  # little-endian on the wire


def test_idle_until_scan_then_nodes_match_truth_and_samples(emu, host):
    assert emu.motor_on  # DTR cleared: the motor spins...
    assert u.read_for(host, 0.1) == b""  # ...but nothing is sent before a scan request
    host.write(b"\xa5\x20")
    desc = u.read_exact(host, 7)
    assert desc == bytes.fromhex("a55a0500004081")
    assert u.descriptor_fields(desc) == (5, 1, 0x81)  # 5-byte nodes, multi-response
    data = u.read_for(host, 0.5)
    host.write(b"\xa5\x25")
    time.sleep(0.05)
    data += u.read_for(host, 0.1)
    data = data[: len(data) // 5 * 5]
    nodes = u.ref_decode_nodes(data)
    truth = emu.truth()
    n = len(nodes.start)
    assert n > 500  # 0.5 s at 10x, ~1970 samples/s, minus the 0.05 s spin-up
    assert np.array_equal(nodes.start, truth.start[:n])
    assert np.array_equal(nodes.quality, truth.quality[:n])
    assert np.array_equal(nodes.angle_q6, truth.angle_q6[:n])
    assert np.array_equal(nodes.dist_q2, truth.dist_q2[:n])
    # and the truth is the quantized samples: q6 angle, q2 mm, quality 0 for no return
    samples = RoomSamples.generate()
    k = np.searchsorted(samples.t_s, truth.t_s[0] - 1e-9)
    sl = slice(k, k + n)
    assert np.array_equal(nodes.angle_q6, np.round(samples.angle_deg_cw[sl] * 64) % 23040)
    assert np.array_equal(nodes.dist_q2, np.round(samples.range_m[sl] * 4000))
    assert np.array_equal(nodes.quality, samples.intensity[sl])  # some no-returns carry one
    starts = np.flatnonzero(nodes.start)
    assert starts.size >= 2
    # a turn is REAL_NODES_PER_TURN nodes (a real A1M8 at its default speed), +-1
    # where the turn boundary falls between two samples
    assert np.all(np.abs(np.diff(starts) - REAL_NODES_PER_TURN) <= 1)
    # the start flag sits on a node reading 351-359 deg, as on real units
    assert np.all((nodes.angle_q6[starts] >= 351 * 64) & (nodes.angle_q6[starts] <= 359 * 64))
    assert u.read_for(host, 0.1) == b""  # STOP silences it...
    assert emu.motor_on  # ...but the motor follows DTR, not STOP
    host.dtr = True
    assert u.wait_until(lambda: not emu.motor_on, 1.0)


def test_motor_follows_dtr_and_a_released_port(emu):
    assert emu.motor_on and emu.motor_log[0][1] is True  # power-on: nobody holds the port
    with open_serial(emu.path, 115200, timeout_s=0.05) as s:  # an open asserts DTR
        assert s.modem_lines == "channel"
        assert u.wait_until(lambda: not emu.motor_on, 1.0)
        s.write(b"\xa5\x20")
        assert u.read_exact(s, 7) == bytes.fromhex("a55a0500004081")
        assert u.read_for(s, 0.2) == b""  # scanning, but the head does not turn
        s.dtr = False
        assert u.wait_until(lambda: emu.motor_on, 1.0)
        assert len(u.read_for(s, 0.2)) > 100  # nodes once it turns
        s.dtr = True
        assert u.wait_until(lambda: not emu.motor_on, 1.0)
    assert u.wait_until(lambda: emu.motor_on, 1.0)  # closing the port releases DTR
    assert [on for _, on in emu.motor_log] == [True, False, True, False, True]
    with serial.Serial(emu.path, 115200, timeout=0.05) as plain:  # no channel: no DTR
        time.sleep(0.05)
        assert emu.motor_on and plain.is_open


def test_force_scan_and_spinup_delay(emu, host):
    host.dtr = True
    assert u.wait_until(lambda: not emu.motor_on, 1.0)
    t0 = time.monotonic()
    host.dtr = False
    host.write(b"\xa5\x21")
    assert u.read_exact(host, 7) == bytes.fromhex("a55a0500004081")
    first = u.read_exact(host, 5)
    waited = time.monotonic() - t0
    assert waited >= 0.5 / SPEED * 0.9  # no node before the motor spun up
    assert first[1] & 1 == 1


def test_pwm_ignored_and_commands_ignored_while_scanning(emu, host):
    host.write(b"\xa5\xf0\x02\x94\x02" + bytes([0xA5 ^ 0xF0 ^ 0x02 ^ 0x94 ^ 0x02]))
    assert u.read_for(host, 0.1) == b""
    assert emu.motor_on and len(emu.motor_log) == 1  # PWM does not touch the motor
    assert emu.requests == [0xF0]
    host.write(b"\xa5\x20")
    u.read_exact(host, 7)
    host.write(b"\xa5\x50")  # not answered while scanning: only nodes follow
    data = u.read_for(host, 0.2)
    assert len(data) > 100
    assert bytes.fromhex("a55a1400000004") not in data


def test_reset_is_silent_then_prints_a_banner(emu, host):
    host.write(b"\xa5\x20")
    u.read_exact(host, 7)
    host.write(b"\xa5\x40")
    time.sleep(0.02)
    host.reset_input_buffer()
    t0 = time.monotonic()
    text = b""
    while b"Model" not in text and time.monotonic() - t0 < 2:
        text += host.read(64)
    assert time.monotonic() - t0 >= 0.5 / SPEED * 0.5
    assert text.startswith(b"RP LIDAR System.\r\n")
    assert b"Firmware Ver 1.29" in text
    assert not emu.scanning
    host.write(b"\xa5\x52")
    raw = u.read_exact(host, 10)
    assert u.descriptor_fields(raw[:7]) == (3, 0, 6)


def test_slow_start_answers_nothing_then_answers():
    with (
        A1Emulator(speed=SPEED, faults=Faults(slow_start_s=0.3)) as e,
        serial.Serial(e.path, 115200, timeout=0.05) as s,
    ):
        s.write(b"\xa5\x50")
        assert u.read_for(s, 0.15) == b""
        time.sleep(0.2)
        s.write(b"\xa5\x50")
        assert u.descriptor_fields(u.read_exact(s, 27)[:7]) == (20, 0, 4)


def test_unplug_and_replug_keep_the_link(tmp_path):
    link = tmp_path / "lidar_front"
    with A1Emulator(speed=SPEED, link=str(link)) as e:
        e.unplug()
        assert not link.exists()
        e.replug(boot_s=2.0)  # 0.2 s real: the host opens the port before the banner
        assert link.exists()  # a new pty (the kernel may reuse its number)
        assert (e.port.stats.unplugs, e.port.stats.replugs) == (1, 1)
        with serial.Serial(str(link), 115200, timeout=0.05) as s:
            text = u.read_for(s, 0.4)
            assert b"RP LIDAR System." in text  # a power-on boots and prints the banner
            s.write(b"\xa5\x50")
            assert u.descriptor_fields(u.read_exact(s, 27)[:7]) == (20, 0, 4)


def _scan(ser: serial.Serial) -> None:
    ser.write(b"\xa5\x20")
    assert u.read_exact(ser, 7) == bytes.fromhex("a55a0500004081")


def _health(ser: serial.Serial) -> tuple[int, int]:
    ser.reset_input_buffer()
    ser.write(b"\xa5\x52")
    raw = u.read_exact(ser, 10)
    return raw[7], raw[8] | raw[9] << 8


# "together" is within the inrush window: 10 simulated s, 1 s of wall time at SPEED, so
# a busy host that takes a while to open the second port still opens it together
TOGETHER_S = 10.0


def test_two_a1s_enumerated_together_brown_out_before_any_software_runs():
    bus = PowerBus(inrush_s=TOGETHER_S, mode="error", error_code=0x8002, clock=None)
    bus.clock.speed = SPEED
    with (
        A1Emulator(name="front", power=bus, unit=A1Unit(serial=SERIAL_A)) as a,
        A1Emulator(name="rear", power=bus, unit=A1Unit(serial=bytes(16))) as b,
        open_serial(a.path, 115200, timeout_s=0.05) as sa,
        open_serial(b.path, 115200, timeout_s=0.05) as sb,
    ):
        assert [x.devices for x in bus.brownouts] == [("front", "rear")]  # at power-on
        assert [n for _, n in bus.motor_starts] == ["front", "rear"]
        assert _health(sa) == (2, 0x8002)
        assert _health(sb) == (2, 0x8002)


def test_releasing_two_ports_together_browns_out():
    bus = PowerBus(inrush_s=TOGETHER_S, mode="error", error_code=0x8002, clock=None)
    bus.clock.speed = SPEED
    with A1Emulator(name="front", power=bus, unit=A1Unit(serial=SERIAL_A)) as a:
        time.sleep(1.02 * TOGETHER_S / SPEED)  # enumerated one after the other
        with A1Emulator(name="rear", power=bus, unit=A1Unit(serial=bytes(16))) as b:
            sa = open_serial(a.path, 115200, timeout_s=0.05)
            sb = open_serial(b.path, 115200, timeout_s=0.05)
            assert u.wait_until(lambda: not a.motor_on and not b.motor_on, 1.0)
            time.sleep(1.02 * TOGETHER_S / SPEED)
            assert bus.brownouts == []
            sa.close()  # both ports released at once: both motors spin up together
            sb.close()
            assert u.wait_until(lambda: len(bus.brownouts) == 1, 1.0)
            assert bus.brownouts[0].devices == ("front", "rear")


def test_no_brownout_when_staggered():
    bus = PowerBus(inrush_s=1.0, mode="silent")
    bus.clock.speed = SPEED
    with A1Emulator(name="front", power=bus) as a:
        time.sleep(1.2 / SPEED)
        with (
            A1Emulator(name="rear", power=bus) as b,
            open_serial(a.path, 115200, timeout_s=0.05) as sa,
            open_serial(b.path, 115200, timeout_s=0.05) as sb,
        ):
            _scan(sa)
            _scan(sb)
            assert u.wait_until(lambda: not a.motor_on and not b.motor_on, 1.0)
            sa.dtr = False
            time.sleep(1.2 / SPEED)
            sb.dtr = False
            assert u.wait_until(lambda: a.motor_on and b.motor_on, 1.0)
            time.sleep(0.05)
            assert bus.brownouts == []
            assert a.scanning and b.scanning
            assert len(u.read_for(sb, 0.1)) > 0


COLD_START_S = 15.0
"""How long a just-started ``emulate a1`` process may take to answer its first request (s):
it may still be starting its serving thread on a loaded machine (2 s failed once under a
busy suite)."""


def _serve(args: list[str], link: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [SENSORBENCH, "emulate", "a1", "--link", str(link), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not link.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "emulate a1 did not create its link in 30 s"
        time.sleep(0.05)
    return proc


def test_emulate_command_serves_the_given_serial_and_scenario_faults(tmp_path):
    link = tmp_path / "a1"
    proc = _serve(["--serial", "ff" * 16, "--duration", "20"], link)
    try:
        with serial.Serial(str(link), 115200, timeout=0.05) as s:
            s.write(b"\xa5\x50")
            assert u.read_exact(s, 27, COLD_START_S)[11:] == b"\xff" * 16
        assert proc.stdout.readline().strip() == str(link)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
    assert not link.exists()  # removed on exit

    link = tmp_path / "rear"
    proc = _serve(["--scenario", "a1_brownout", "--device", "lidar_rear", "--duration", "20"], link)
    try:
        with serial.Serial(str(link), 115200, timeout=0.05) as s:
            s.write(b"\xa5\x52")
            raw = u.read_exact(s, 10, COLD_START_S)
        assert raw[7:] == bytes([1, 0x02, 0x01])  # the scenario's warning, code 0x0102
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0


def test_emulate_command_rejects_bad_input():
    for args, msg in ((["--serial", "xyz"], "32 hex digits"), (["--serial", "00"], "16 bytes")):
        res = CliRunner().invoke(cli, ["emulate", "a1", "--duration", "1", *args])
        assert res.exit_code == 2 and msg in res.output, res.output
