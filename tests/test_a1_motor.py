"""A1 motor control as on the hardware (issue #18), through emulators on ptys whose motor
follows DTR: the bring-up stops every motor before starting them one by one, capture
keeps the ports for its whole run, close and reconnect leave the motor as docs/A1.md
promises, and the power configuration is checked (the port-power backends run in
tests/test_a1_port_power.py)."""

from __future__ import annotations

import time

import a1_util as u
import pytest

from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.drivers.powerup import DeviceSpec, PowerUpSequencer
from sensorbench.drivers.robot_config import parse_robot_config
from sensorbench.sim.emulated_robot import EmulatedRobot
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.emulator_base import SimClock
from sensorbench.sim.power import PowerBus

SPEED = 10.0
INRUSH_S = 1.5  # simulated s


def _after(log: list[tuple[float, bool]], t0: float) -> list[tuple[float, bool]]:
    return [(t, on) for t, on in log if t >= t0]


def test_bringup_stops_every_motor_first_then_starts_them_one_by_one(tmp_path):
    bus = PowerBus(inrush_s=INRUSH_S, mode="error", error_code=0x8002, clock=SimClock(SPEED))
    # powered together, as at boot: both motors spin up at once and brown the bus out
    a = A1Emulator(
        name="front",
        link=str(tmp_path / "f"),
        power=bus,
        unit=A1Unit(serial=bytes(16)),
    )
    b = A1Emulator(
        name="rear",
        link=str(tmp_path / "r"),
        power=bus,
        unit=A1Unit(serial=bytes(range(16))),
    )
    assert [x.devices for x in bus.brownouts] == [("front", "rear")]
    specs = [
        DeviceSpec(n, "a1", e.link, delay_after_s=0.2, ready_timeout_s=1.5, read_timeout_s=0.5)
        for n, e in (("front", a), ("rear", b))
    ]
    with a, b:
        t_begin = bus.clock.now()
        seq = PowerUpSequencer(specs, retries=0)
        results = seq.run(keep=True)
        time.sleep(0.05)
        log_a, log_b = _after(a.motor_log, t_begin), _after(b.motor_log, t_begin)
        for scanner in seq.handles.values():  # what capture does at its end
            scanner.close()
        time.sleep(0.05)
        end_a, end_b = _after(a.motor_log, t_begin), _after(b.motor_log, t_begin)
    assert [r.ready for r in results] == [True, True], [r.why for r in results]
    # each motor: stopped when its port was opened, started once, at its turn
    assert [on for _, on in log_a] == [False, True] and [on for _, on in log_b] == [False, True]
    (stop_a, start_a), (stop_b, start_b) = [t for t, _ in log_a], [t for t, _ in log_b]
    assert max(stop_a, stop_b) < start_a < start_b  # every port held before any start
    # the rear starts after the front's first turn and the configured gap
    assert start_b - start_a >= (results[0].time_to_first_turn_s + 0.2) * SPEED * 0.95
    # from the moment the ports were opened no two motors spun up together
    starts = [(t, n) for t, n in bus.motor_starts if t >= t_begin]
    assert [n for _, n in starts] == ["front", "rear"]
    assert starts[1][0] - starts[0][0] > INRUSH_S
    assert [x for x in bus.brownouts if x.t_s >= t_begin] == []
    # the end of a capture releases the ports: the motors keep spinning, no stop/start
    assert end_a == log_a and end_b == log_b and a.motor_on and b.motor_on


def test_capture_keeps_each_a1_port_open_for_its_whole_run(tmp_path):
    with EmulatedRobot(tmp_path / "run", speed=4.0, ld19_startup_s=0.3) as robot:
        a1s = {n: robot[n] for n in ("lidar_front", "lidar_rear")}
        t0 = robot.clock.now()
        result = run_capture(robot.config, tmp_path / "s.h5", 1.5, CaptureOptions(speed=4.0))
        time.sleep(0.05)
        logs = {n: _after(e.motor_log, t0) for n, e in a1s.items()}
        opens = {n: e._lines.opens for n, e in a1s.items()}
    assert result.ok, result
    for name in a1s:
        # opened once (bring-up), handed to the reader, released at the end: the motor
        # was stopped once (the open) and started once (its turn), nothing else
        assert opens[name] == 1, (name, opens)
        assert [on for _, on in logs[name]] == [False, True], (name, logs[name])
    front_start, rear_start = logs["lidar_front"][1][0], logs["lidar_rear"][1][0]
    assert max(logs["lidar_front"][0][0], logs["lidar_rear"][0][0]) < front_start < rear_start


def test_close_releases_a_spinning_motor_and_park_holds_it(tmp_path):
    with A1Emulator(speed=SPEED) as emu:
        sc = u.started_scanner(emu.path)
        assert u.wait_until(lambda: emu.motor_on, 1.0)
        n = len(emu.motor_log)
        sc.close()  # docs: the scan stops, the port is released, the motor spins on
        time.sleep(0.05)
        assert emu.motor_on and len(emu.motor_log) == n and not emu.scanning
        sc.park()  # docs: the only way to hold it stopped is to keep the port
        assert not emu.motor_on and sc.motor_running is False
        time.sleep(0.05)
        assert not emu.motor_on
        sc.close()  # releasing a parked unit starts its motor (an inrush, reported)
        assert u.wait_until(lambda: emu.motor_on, 1.0)
        assert [on for _, on in emu.motor_log[n:]] == [False, True]


def test_reconnect_after_replug_never_stops_or_restarts_the_motor(tmp_path):
    link = str(tmp_path / "lidar")
    events = []
    with A1Emulator(speed=4.0, link=link) as emu:
        sc = u.started_scanner(link, events)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            sc.poll(0.05)
        emu.unplug()
        t_replug = emu.clock.now()
        emu.replug(boot_s=2.0)  # 0.5 s host: several reconnect attempts meet a booting unit
        deadline = time.monotonic() + 3.0
        while sc.link.reconnects == 0 and time.monotonic() < deadline:
            sc.poll(0.05)
        turns = 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            turns += sc.poll(0.05)[2].n_turns
        after = _after(emu.motor_log, t_replug)
        attempts = emu._lines.opens
        sc.close()
    assert sc.link.reconnects == 1 and turns > 0
    assert attempts >= 2  # the probe failed on the booting unit at least once
    # power-on spun it (enumeration); every attempt reopened the port with DTR at the
    # motor's state (running), so no attempt stopped it and none restarted it
    assert [on for _, on in after] == [True], after


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (('backend = "uhubctl"\n', ""), "needs a switching backend"),
        (('backend = "uhubctl"', 'backend = "relay"'), "powerup.backend: must be one of"),
        (("port = 2, settle_s = 0.5", "port = 0"), "power port must be 1..255"),
        (('hub = "1-1.4", port = 2', 'hub = "x;y", port = 2'), "not a USB hub name"),
    ],
)
def test_power_configuration_errors_name_the_line(edit, message):
    text = """[powerup]
backend = "uhubctl"

[[devices]]
name = "front"
kind = "a1"
port = "/dev/front"
mount = {x_m = 0.2, y_m = 0.0, yaw_deg = 0}
power = {hub = "1-1.4", port = 2, settle_s = 0.5}
"""
    from sensorbench.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as err:
        parse_robot_config(text.replace(*edit), "robot.toml")
    line = "backend" if "backend:" in message else "power ="
    expected = next(i for i, s in enumerate(text.replace(*edit).splitlines(), 1) if line in s)
    assert str(err.value).startswith(f"robot.toml:{expected}:")
