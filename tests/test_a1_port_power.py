"""Bring-up on any hub: per-port power where the hub switches it, the DTR stagger where it
does not (uhubctl exits 1) or only pretends to (the tty stays), and both halves of a USB
3 hub through sysfs. Two emulated A1s with identical USB IDs on ptys, a fake
``uhubctl`` on PATH that switches them as each kind of hub does (tests/fake_hub.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fake_hub import FakeHub

from sensorbench.drivers.capture import run_bringup
from sensorbench.drivers.port_power import PortPower
from sensorbench.drivers.powerup import DeviceSpec, PowerUpSequencer
from sensorbench.drivers.robot_config import parse_robot_config
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.emulator_base import SimClock

SPEED = 10.0
GAP_S = 0.3
CONFIG = """
[powerup]
order = ["front", "rear"]
gap_s = 0.3
timeout_s = 2.0
backend = "uhubctl"

[[devices]]
name = "front"
kind = "a1"
port = "{run_dir}/front"
mount = {x_m = 0.2, y_m = 0.0, yaw_deg = 0}
power = {hub = "1-1.4", port = 2, settle_s = 0.5}

[[devices]]
name = "rear"
kind = "a1"
port = "{run_dir}/rear"
mount = {x_m = -0.2, y_m = 0.0, yaw_deg = 180}
power = {hub = "1-1.4", port = 3, settle_s = 0.5}
"""


def _robot(tmp_path, kind: str, monkeypatch):
    """Two A1s on one clock behind a hub of ``kind``, and the robot configuration."""
    clock = SimClock(SPEED)
    front = A1Emulator(name="front", link=str(tmp_path / "front"), clock=clock)
    rear = A1Emulator(
        name="rear",
        link=str(tmp_path / "rear"),
        clock=clock,
        unit=A1Unit(serial=bytes(16)),
    )
    hub = FakeHub(tmp_path, {("1-1.4", 2): front, ("1-1.4", 3): rear}, kind)
    monkeypatch.setenv("PATH", hub.path_env())
    return front, rear, hub, parse_robot_config(CONFIG, "robot.toml", run_dir=tmp_path)


def _first_start_after(log, t0: float) -> float:
    return next(t for t, on in log if on and t >= t0)


def test_a_hub_with_per_port_power_staggers_them_at_enumeration(tmp_path, monkeypatch):
    front, rear, hub, config = _robot(tmp_path, "ppps", monkeypatch)
    with front, rear, hub:
        t0 = front.clock.now()
        results = run_bringup(config)
    assert [r.ok for r in results] == [True, True], results
    assert not any("warning" in r.message for r in results)
    args = [a for _, a in hub.calls]
    assert args == [
        "-l 1-1.4 -p 2 -a off",
        "-l 1-1.4 -p 3 -a off",
        "-l 1-1.4 -p 2 -a on",
        "-l 1-1.4 -p 3 -a on",
    ]
    # the rear's port is switched on only after the front came up and its gap passed
    t = [ts for ts, _ in hub.calls]
    assert t[3] - t[2] >= results[0].seconds + GAP_S
    # each unit was powered (and its motor spun up) at its own turn: the enumeration
    assert front._lines.opens >= 1 and rear._lines.opens >= 1
    assert _first_start_after(rear.motor_log, t0) > _first_start_after(front.motor_log, t0)


@pytest.mark.parametrize("kind", ["none", "keeps"])
def test_a_hub_without_per_port_power_brings_both_up_staggered_by_dtr(
    tmp_path, monkeypatch, kind
):
    """uhubctl exits 1 ("No compatible devices detected"), or the hub says off and keeps
    the port powered: neither fails a lidar. Each falls back to the DTR stagger (both
    motors held stopped, then started one by one), and the bring-up says why."""
    front, rear, hub, config = _robot(tmp_path, kind, monkeypatch)
    with front, rear, hub:
        results = run_bringup(config)
        logs = [list(front.motor_log), list(rear.motor_log)]
    assert [r.ok for r in results] == [True, True], results
    why = (
        "No compatible devices detected at location 1-1.4"
        if kind == "none"
        else "still there 0.5 s after switching it off: the hub keeps the port powered"
    )
    for r in results:
        assert "warning: port power of hub 1-1.4" in r.message and why in r.message, r.message
        assert "staggered by DTR instead" in r.message
    # switched off once each, never on: those ports were left to DTR
    assert [a for _, a in hub.calls] == ["-l 1-1.4 -p 2 -a off", "-l 1-1.4 -p 3 -a off"]
    # both motors spun at power-on, both were stopped by the parking (DTR set), then the
    # front started, and the rear only after the front's first turn and the gap
    (f_stop, f_start), (r_stop, r_start) = (
        [t for t, on in log if not on][0:1] + [t for t, on in log if on][1:2] for log in logs
    )
    assert f_stop < f_start and r_stop < r_start
    assert max(f_stop, r_stop) < f_start  # every motor held still before any starts
    assert r_start - f_start >= (results[0].seconds + GAP_S) * SPEED


def test_the_sysfs_backend_switches_both_halves_of_a_usb3_hub(tmp_path):
    """A USB 3 hub is a USB 2 and a USB 3 hub sharing each port's VBUS: the kernel links
    the two halves of a port as ``peer``; switching one alone leaves the power on."""
    p = PortPower("1-1", 2, method="sysfs")
    usb2 = p.sysfs_disable_path(tmp_path)
    usb3 = tmp_path / "bus/usb/devices/2-1/2-1:1.0/2-1-port2/disable"
    for f in (usb2, usb3):
        f.parent.mkdir(parents=True)
        f.write_text("0")
    (usb2.parent / "peer").symlink_to("../../../2-1/2-1:1.0/2-1-port2")
    assert p.sysfs_disable_paths(tmp_path) == [usb2, usb2.parent / "peer" / "disable"]
    p.switch(False, sysfs_root=tmp_path)
    assert (usb2.read_text(), usb3.read_text()) == ("1", "1")
    p.switch(True, sysfs_root=tmp_path)
    assert (usb2.read_text(), usb3.read_text()) == ("0", "0")
    # a USB 2 hub has no peer: its one file
    q = PortPower("1-1", 3, method="sysfs")
    only = q.sysfs_disable_path(tmp_path)
    only.parent.mkdir(parents=True)
    only.write_text("0")
    assert q.sysfs_disable_paths(tmp_path) == [only]


def test_a_sysfs_port_that_cannot_be_switched_falls_back_to_dtr(tmp_path):
    """No ``disable`` file (Linux < 6.0, or no such hub port): the sequencer staggers the
    two A1s by DTR and says so, instead of failing them."""
    clock = SimClock(SPEED)
    with (
        A1Emulator(name="front", clock=clock) as front,
        A1Emulator(name="rear", clock=clock, unit=A1Unit(serial=bytes(16))) as rear,
    ):
        specs = [
            DeviceSpec(
                name,
                "a1",
                emu.path,
                delay_after_s=0.2,
                ready_timeout_s=2.0,
                read_timeout_s=0.5,
                power=PortPower("1-1", port, method="sysfs", settle_s=0.3),
            )
            for name, emu, port in (("front", front, 2), ("rear", rear, 3))
        ]
        rows = PowerUpSequencer(specs, retries=0, sysfs_root=tmp_path).run()
    assert [r.ready for r in rows] == [True, True], [r.why for r in rows]
    for r in rows:
        assert "cannot write" in r.warning and "staggered by DTR instead" in r.warning


def test_a_driver_warning_is_not_printed_by_the_library() -> None:
    # without a handler of the application's, logging's last resort wrote it to stderr
    # (across the capture status line); bring-up rows and session events carry it
    code = ("import logging, sensorbench.cli; "
            "logging.getLogger('sensorbench.powerup').warning('front: staggered by DTR')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
