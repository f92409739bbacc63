"""Every rplidar-roboticia 0.9.5 flaw listed in docs/A1.md: fails raw, passes ours.

Each test first shows the flaw on the unmodified library against the emulated A1
(calls that may hang run in a daemon thread with a deadline), then the same
situation through :mod:`sensorbench.drivers.a1_reader`.
"""

from __future__ import annotations

import threading
import time

import a1_util as u
import numpy as np
import pytest
import rplidar
import serial
from a1_util import decode_nodes
from timing_util import SLACK_S

from sensorbench.drivers.a1_protocol import A1Health, A1Info
from sensorbench.drivers.a1_reader import A1Lidar, A1Scanner
from sensorbench.errors import DeviceSilent, DeviceUnplugged, DriverError
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.pty import PtyPort


class RawOnPty(rplidar.RPLidar):
    """The library unchanged, except that the motor calls skip DTR (a pty has none).

    ``test_dtr_on_a_pty_*`` shows the library's own motor call failing there.
    """

    def start_motor(self) -> None:
        self.motor_running = True

    def stop_motor(self) -> None:
        self.motor_running = False


@pytest.fixture
def emu():
    with A1Emulator(speed=5.0, unit=A1Unit(serial=bytes(range(16, 32)), spinup_s=0.2)) as e:
        yield e


def leave_scanning(path: str) -> None:
    """A previous program started a scan and exited without STOP."""
    with serial.Serial(path, 115200, timeout=0.05) as s:
        s.write(b"\xa5\x20")
        u.read_exact(s, 7)
    time.sleep(0.1)


def test_dtr_on_a_pty_crashes_library_reported_once_by_driver(emu):
    lib = rplidar.RPLidar(emu.path)
    with pytest.raises(OSError) as exc:
        lib.start_motor()
    assert exc.value.errno == 25  # ENOTTY: a pty has no modem lines
    lib.disconnect()
    # ours reaches the emulator's DTR through its modem-line channel: the motor follows
    lid = A1Lidar(emu.path, read_timeout_s=0.5)
    for level, spinning in ((lid.stop_motor, False), (lid.start_motor, True)):
        level()
        assert u.wait_until(lambda s=spinning: emu.motor_on is s, 1.0)
    assert lid.has_modem_lines is True
    lid.disconnect()
    # a pty without a channel: reported once, never raised
    port = PtyPort(baud=115200)
    try:
        events = []
        lid = A1Lidar(port.path, read_timeout_s=0.5, on_event=lambda *e: events.append(e))
        lid.start_motor()
        lid.stop_motor()
        lid.start_motor()
        assert lid.has_modem_lines is False
        notes = [e for e in events if "no modem lines" in e[2]]
        assert len(notes) == 1 and notes[0][1] == "note"
        lid.disconnect()
    finally:
        port.close()


def test_silent_device_hangs_library_forever_driver_raises_within_deadline(emu):
    lib = RawOnPty(emu.path)
    it = lib.iter_measures(max_buf_meas=False)
    next(it)
    emu.stall(30.0)

    def drain():
        try:
            while True:
                next(it)
        except (TypeError, OSError, serial.SerialException):
            return  # its port closed under it (pyserial's ioctl on a None fd: TypeError)

    hung = threading.Thread(target=drain, daemon=True)
    hung.start()
    hung.join(1.5)
    assert hung.is_alive()  # busy-waiting on inWaiting() with no timeout
    # end the abandoned loop before the device talks again: left running it reads the
    # same pty as the driver below, and a byte it takes turns the driver's select-ready
    # read into "returned no data" (seen once under load)
    lib._serial.close()
    hung.join(2.0)
    assert not hung.is_alive()

    emu.stall(0.0)
    lid = A1Lidar(emu.path, read_timeout_s=0.4)
    lid.start()
    assert len(decode_nodes(lid.read_available(0.5))[0]) > 0
    emu.stall(30.0)
    t0 = time.monotonic()
    finished, result = u.run_with_deadline(lid.get_health, 3.0)
    elapsed = time.monotonic() - t0
    assert finished and isinstance(result, DeviceSilent)
    # draining what was buffered (up to one deadline), then the descriptor's deadline
    assert elapsed < 2 * 0.4 + SLACK_S
    assert "0.40 s" in str(result)
    lid.disconnect()


def test_unplug_raises_bare_oserror_in_library_driver_error_in_ours(emu):
    lib = RawOnPty(emu.path)
    it = lib.iter_measures(max_buf_meas=False)
    next(it)
    emu.unplug()
    finished, result = u.run_with_deadline(lambda: [m for m in it], 2.0)
    assert finished
    assert isinstance(result, OSError) and not isinstance(result, rplidar.RPLidarException)

    emu.replug(boot_s=0.0)
    time.sleep(0.05)
    lid = A1Lidar(emu.path, read_timeout_s=0.5)
    lid.start()
    lid.read_available(0.1)
    emu.unplug()
    # a DriverError (exit 2 in the CLI, a reconnect in the scanner), not a bare OSError
    with pytest.raises(DriverError, match=r"went away.*check the USB cable") as caught:
        for _ in range(50):
            lid.read_available(0.02)
    assert type(caught.value) is DeviceUnplugged


def test_get_info_and_health_return_strings_with_stale_bytes(emu):
    leave_scanning(emu.path)
    lib = RawOnPty(emu.path)
    time.sleep(0.05)
    assert isinstance(lib.get_info(), str)  # "Data in buffer, you can't have info !"
    with pytest.raises(ValueError):  # start() unpacks that string as (status, code)
        lib.start()
    lib.disconnect()

    lid = A1Lidar(emu.path, read_timeout_s=0.5)  # the open stops the motor (DTR)...
    lid.start_motor()  # ...and this spins it again: the forgotten scan resumes
    time.sleep(0.1)
    info = lid.get_info()
    assert info == A1Info(0x18, (1, 29), 7, bytes(range(16, 32)).hex().upper())
    assert lid.get_health() == A1Health("good", 0)
    assert lid.stale_bytes_discarded > 0
    lid.disconnect()


def test_health_error_code_is_byte_swapped_by_library(emu):
    emu.set_health(1, 0x1234)
    lib = RawOnPty(emu.path)
    status, code = lib.get_health()
    lib.disconnect()
    assert status == "Warning"
    assert code == 0x3412  # wrong: the wire carries 34 12, little-endian 0x1234
    lid = A1Lidar(emu.path, read_timeout_s=0.5)
    assert lid.get_health() == A1Health("warning", 0x1234)
    lid.disconnect()


def test_descriptor_error_after_stale_bytes_library_has_no_recovery(emu):
    leave_scanning(emu.path)
    lib = RawOnPty(emu.path)
    outcomes = []
    for _ in range(5):
        lib.clean_input()
        try:
            outcomes.append(lib.get_health())
        except rplidar.RPLidarException as exc:
            outcomes.append(exc)
    lib.disconnect()
    assert not any(isinstance(o, tuple) for o in outcomes)
    assert any("descriptor" in str(o) for o in outcomes if isinstance(o, Exception))

    leave_scanning(emu.path)
    lid = A1Lidar(emu.path, read_timeout_s=0.5)
    lid.start_motor()  # the forgotten scan resumes with the motor
    time.sleep(0.1)
    assert lid.get_health() == A1Health("good", 0)  # stop, clear, retry
    assert lid.stale_bytes_discarded > 0
    lid.start()
    nodes, _, skipped = decode_nodes(lid.read_available(0.3))
    assert len(nodes) > 0 and skipped == 0
    lid.disconnect()


def test_buffer_limit_restarts_scan_and_silently_loses_data():
    """A 0.35 s consumer hiccup at real-time rate: 3500 bytes pile up (> max_buf_meas=3000)."""

    def expected_from(truth, got):
        k = np.flatnonzero((truth.angle_q6 == got[0, 0]) & (truth.dist_q2 == got[0, 1]))[0]
        return np.stack([truth.angle_q6, truth.dist_q2], axis=1)[k : k + len(got)]

    with A1Emulator(speed=1.0, unit=A1Unit(spinup_s=0.0)) as e:
        lib = RawOnPty(e.path)
        got = []
        for i, (_, _q, a, d) in enumerate(lib.iter_measures(max_buf_meas=3000)):
            got.append((round(a * 64), round(d * 4)))
            if i == 100:
                time.sleep(0.35)
            if len(got) >= 1500:
                break
        scans = e.requests.count(0x20)
        lib.disconnect()
        lib_got, truth = np.array(got), e.truth()
    assert scans == 2  # stop + start behind the caller's back
    assert not np.array_equal(lib_got, expected_from(truth, lib_got))  # silently lost

    events = []
    with A1Emulator(speed=1.0, unit=A1Unit(spinup_s=0.0)) as e:
        sc = A1Scanner(e.path, read_timeout_s=1.0, on_event=lambda *ev: events.append(ev))
        sc.open()
        sc.start()
        raw = b""
        for i in range(400):
            raw += sc.poll(0.05)[1]
            if i == 2:
                time.sleep(0.35)
            if len(raw) > 5 * 1600:
                break
        scans, overruns = e.requests.count(0x20), sc.link.overruns
        sc.close()
        truth = e.truth()
    nodes, _, skipped = decode_nodes(u.scan_bytes(raw))
    got = np.stack([nodes.angle_q6, nodes.dist_q2], axis=1).astype(np.int64)[:1500]
    assert scans == 1 and skipped == 0 and len(got) == 1500
    assert np.array_equal(got, expected_from(truth, got))  # every node, in order
    assert overruns == 1  # counted and reported instead
    assert next(ev[2] for ev in events if ev[1] == "overrun").startswith("host fell behind")


def test_express_scan_angles_are_one_node_late_in_the_library_and_right_here():
    # Per Slamtec's SDK (handler_capsules.cpp), node k of a capsule, k = 0..31, is at
    # start + k * diff / 32 - offset_k, where diff is the next capsule's start minus
    # this one's. With zero offsets the first node sits exactly at the start angle.
    start1, start2 = 10.0, 12.0
    d = list(range(1000, 1032))
    c1, c2 = u.express_capsules([start1, start2], d)
    p1 = rplidar.ExpressPacket.from_string(c1)
    p2 = rplidar.ExpressPacket.from_string(c2)
    lib = [rplidar._process_express_scan(p1, p2.start_angle, k) for k in range(1, 33)]
    spec = [start1 + k * (start2 - start1) / 32 for k in range(32)]
    lib_angles = [m[2] for m in lib]
    assert not np.allclose(lib_angles, spec, atol=1e-6)
    assert np.allclose(lib_angles, [a + (start2 - start1) / 32 for a in spec])  # one node late
    assert {m[1] for m in lib} == {None}  # and no quality

    nodes, used, skipped = u.decode_capsules(c1 + c2)
    assert (used, skipped) == (2 * 84, 0)
    np.testing.assert_array_equal(nodes.angle_q6, np.round(np.array(spec) * 64))
    np.testing.assert_array_equal(nodes.dist_q2, np.array(d) * 4)
    assert np.all(nodes.quality == 0x2F)  # the SDK's quality for a return
    ref = u.ref_express_decode([c1, c2])
    np.testing.assert_array_equal(nodes.angle_q6, ref.angle_q6)
