"""Discovery, rules, probing and hotplug against a fake /sys and /dev built by umockdev.

``tests/data/udev/three_cp2102.umockdev`` (written by hand in umockdev-record's
format, which has no comments) describes three identical CP2102 bridges
(10c4:ea60, serial 0001) behind a USB 2.0 hub on root port 1 of an xHCI
controller, on hub ports 1-1.2 (ttyUSB0, front A1), 1-1.3 (ttyUSB1, rear A1) and
1-1.4 (ttyUSB2, LD19), with the ``ID_PATH`` and ``DEVLINKS`` that
``60-serial.rules`` would set, the tty ``device`` links and ``bNumInterfaces``
that pyserial's ``list_ports`` needs, plus a motherboard UART (ttyS0 on pnp) and
an 8250 placeholder port (ttyS1, no UART behind it) on the ``serial-base`` layer
of kernels >= 6.5. umockdev's
preload library must be loaded before Python starts, so the checks run in a
child pytest under ``umockdev-wrapper``: :func:`test_umockdev_suite_under_wrapper`
starts it and fails with its output if any check fails. The ``test_in_testbed_*``
functions are those checks; outside the wrapper they are skipped.

Needs (CI installs them): ``apt-get install umockdev gir1.2-umockdev-1.0
libgirepository1.0-dev libcairo2-dev pkg-config`` and ``pip install
"PyGObject<3.51"``. Without them the suite is skipped locally and fails on CI.
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from ld19_util import MANUAL_PACKET_10HZ
from serial.tools import list_ports
from timing_util import SLACK_S
from udev_monitor import HotplugMonitor, device_for_node

from sensorbench.drivers import a1_protocol
from sensorbench.udev.discovery import list_serial_devices
from sensorbench.udev.rules import generate, parse_name_spec

pytestmark = pytest.mark.umockdev

DATA = Path(__file__).parent / "data" / "udev"
DESCRIPTION = DATA / "three_cp2102.umockdev"
GOLDEN = DATA / "golden.rules"
GOLDEN_KERNELS = DATA / "golden_kernels.rules"
REPO = Path(__file__).parents[1]
INNER_ENV = "SENSORBENCH_UMOCKDEV_INNER"
IN_WRAPPER = os.environ.get(INNER_ENV) == "1"
SPECS = ["lidar_front=1-1.2", "lidar_rear=1-1.3", "ld19=1-1.4"]
USB1 = "/sys/devices/pci0000:00/0000:00:14.0/usb1"
EXPECTED = [  # node, port path, ID_PATH, as declared in the description
    ("/dev/ttyUSB0", "1-1.2", "pci-0000:00:14.0-usb-0:1.2:1.0"),
    ("/dev/ttyUSB1", "1-1.3", "pci-0000:00:14.0-usb-0:1.3:1.0"),
    ("/dev/ttyUSB2", "1-1.4", "pci-0000:00:14.0-usb-0:1.4:1.0"),
]
# The LD19 manual's packet at 10 Hz (its own 2152 °/s span is one the SDK drops)
LD19_PACKET = MANUAL_PACKET_10HZ
inner = pytest.mark.skipif(
    not IN_WRAPPER, reason="runs in the umockdev-wrapper child of test_umockdev_suite_under_wrapper"
)


def _cli():
    """The click group, imported in the checks that need it (it imports every command)."""
    from sensorbench.cli import cli

    return cli


def _missing_tools() -> str | None:
    """What is missing to run the suite, or None."""
    if shutil.which("umockdev-wrapper") is None:
        return "umockdev-wrapper not found (apt-get install umockdev)"
    probe = "import gi; gi.require_version('UMockdev', '1.0'); from gi.repository import UMockdev"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        return (
            "UMockdev introspection bindings unusable (apt-get install gir1.2-umockdev-1.0 "
            f"libgirepository1.0-dev libcairo2-dev pkg-config; pip install 'PyGObject<3.51'): "
            f"{done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}"
        )
    return None


def _inner_tests() -> list[str]:
    """The checks defined above the point of the call."""
    return sorted(name for name in globals() if name.startswith("test_in_testbed_"))


@pytest.fixture(scope="module")
def umockdev_ready() -> None:
    if IN_WRAPPER:
        pytest.skip("this is the child run")
    missing = _missing_tools()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must provide umockdev and its Python bindings: {missing}")
        pytest.skip(missing)


# -- the checks, run inside umockdev-wrapper ---------------------------------------


@pytest.fixture
def testbed():
    import gi

    gi.require_version("UMockdev", "1.0")
    from gi.repository import UMockdev

    bed = UMockdev.Testbed.new()
    bed.add_from_file(str(DESCRIPTION))
    yield bed
    del bed


def _records(port: str) -> list[str]:
    """The description's records (child first) of the device on ``port``."""
    blocks = DESCRIPTION.read_text().strip().split("\n\n")
    return [b for b in blocks if f"/{port}/" in b.splitlines()[0] + "/"]


@inner
def test_in_testbed_discovery_reports_each_adapter_by_port(testbed):
    everything = list_serial_devices()
    # USB first, sorted by port; the pnp UART after them; the 8250 placeholder ttyS1
    # (no UART behind it) and virtual ttys are left out.
    assert [(d.node, d.port_path, d.id_path) for d in everything] == [
        *EXPECTED,
        ("/dev/ttyS0", None, "pnp-00:01"),
    ]
    assert (everything[-1].subsystem_parent, everything[-1].usb_id) == ("pnp", None)
    devices = list_serial_devices(usb_only=True)
    assert [(d.node, d.port_path, d.id_path) for d in devices] == EXPECTED
    for d in devices:
        assert (d.usb_id, d.serial, d.interface, d.driver) == ("10c4:ea60", "0001", "1.0", "cp210x")
        assert d.model == "CP2102 USB to UART Bridge Controller"
        assert d.devlinks == (f"/dev/serial/by-path/{d.id_path}-port0",)
    # A udev name resolves to the adapter behind it (what bring-up reports).
    os.symlink("ttyUSB1", testbed.get_root_dir() + "/dev/lidar_rear")
    rear = device_for_node("/dev/lidar_rear")
    assert rear is not None and (rear.node, rear.port_path) == ("/dev/ttyUSB1", "1-1.3")
    # pyserial reads the same sysfs tree directly and agrees on every location.
    located = {p.device: p.location for p in list_ports.comports() if p.location}
    assert located == {node: port for node, port, _ in EXPECTED}
    # The human table shows the same.
    res = CliRunner().invoke(_cli(), ["devices"])
    assert res.exit_code == 0, res.output
    rows = [line.split()[:5] for line in res.output.splitlines()[1:4]]
    assert rows == [[node, port, "10c4:ea60", "0001", "cp210x?"] for node, port, _ in EXPECTED]


@inner
def test_in_testbed_generated_rules_match_the_golden_files(testbed, tmp_path):
    devices = list_serial_devices()
    specs = [parse_name_spec(s) for s in SPECS]
    assert generate(specs, devices, "id-path") == GOLDEN.read_text()
    assert generate(specs, devices, "kernels") == GOLDEN_KERNELS.read_text()
    out = tmp_path / "70-sensorbench.rules"
    args = ["udev", "rules", *(x for s in SPECS for x in ("--name", s)), "-o", str(out)]
    res = CliRunner().invoke(_cli(), args)
    assert res.exit_code == 0, res.output
    assert out.read_text() == GOLDEN.read_text()


@inner
def test_in_testbed_unsafe_names_are_refused(testbed, tmp_path):
    runner = CliRunner()
    for bad in ['front"=1-1.2', "front,RUN+=x=1-1.2", "../front=1-1.2", "console=1-1.2"]:
        res = runner.invoke(_cli(), ["udev", "rules", "--name", bad])
        assert res.exit_code == 2 and "error:" in res.output, (bad, res.output)
    unsafe = tmp_path / "unsafe.rules"
    unsafe.write_text(GOLDEN.read_text().replace('SYMLINK+="ld19"', 'SYMLINK+="ld19/../../etc"'))
    rules_dir = tmp_path / "rules.d"
    rules_dir.mkdir()
    res = runner.invoke(
        _cli(), ["udev", "install", str(unsafe), "--rules-dir", str(rules_dir), "--no-reload"]
    )
    assert res.exit_code == 2 and "refusing to install" in res.output
    assert list(rules_dir.iterdir()) == []


@inner
def test_in_testbed_hotplug_remove_and_replug_reach_the_monitor(testbed):
    rear_tty = f"{USB1}/1-1/1-1.3/1-1.3:1.0/ttyUSB1/tty/ttyUSB1"
    seen = []
    tiny = HotplugMonitor(max_queue=1).start()  # keeps only the newest event
    with HotplugMonitor(callback=seen.append) as monitor:
        # Unplug the rear adapter: udev announces the tty's removal, then sysfs loses it.
        testbed.uevent(rear_tty, "remove")
        for record in _records("1-1.3"):
            testbed.remove_device("/sys" + record.splitlines()[0][3:])
        rear_id = "pci-0000:00:14.0-usb-0:1.3:1.0"
        gone = monitor.wait_for(lambda e: e.action == "remove", 3.0)
        assert gone is not None
        assert (gone.node, gone.port_path, gone.id_path) == ("/dev/ttyUSB1", "1-1.3", rear_id)
        assert [d.port_path for d in list_serial_devices(usb_only=True)] == ["1-1.2", "1-1.4"]
        # Replug in the same port: the kernel hands out a new node (ttyUSB3), the
        # port path and ID_PATH stay, so the udev name keeps pointing at it.
        replug = "\n\n".join(_records("1-1.3"))
        for old, new in [("ttyUSB1", "ttyUSB3"), ("MINOR=1", "MINOR=3"), ("188:1", "188:3"),
                         ("001/004", "001/007"), ("DEVNUM=004", "DEVNUM=007"),
                         ("devnum=4", "devnum=7")]:  # fmt: skip
            replug = replug.replace(old, new)
        testbed.add_from_string(replug)  # emits the "add" uevents
        back = monitor.wait_for(lambda e: e.action == "add", 3.0)
        assert back is not None
        assert (back.node, back.port_path, back.id_path) == ("/dev/ttyUSB3", "1-1.3", rear_id)
        assert back.t_ns > gone.t_ns
        devices = list_serial_devices(usb_only=True)
        assert [(d.node, d.port_path) for d in devices][1] == ("/dev/ttyUSB3", "1-1.3")
        specs = [parse_name_spec(s) for s in SPECS]
        assert generate(specs, devices) == GOLDEN.read_text()
        assert monitor.error is None and monitor.callback_error is None
        assert seen == [gone, back]
        assert tiny.wait_for(lambda e: e.action == "add", 3.0) is not None
        assert tiny.dropped == 1  # the remove was pushed out by the add
    t0 = time.monotonic()
    assert tiny.stop() and not tiny.running
    assert time.monotonic() - t0 < SLACK_S  # stop returns within about one poll interval
    assert not monitor.running


class _DeviceSide(threading.Thread):
    """The device end of a mocked tty: streams bytes, answers A1 GET_INFO, or stays silent."""

    def __init__(self, fd: int, role: str) -> None:
        super().__init__(daemon=True)
        self.fd, self.role = fd, role
        self.stop_event = threading.Event()
        os.set_blocking(fd, False)

    def run(self) -> None:
        rx = b""
        while not self.stop_event.wait(0.02):
            if self.role == "ld19":
                self._write(LD19_PACKET * 8)  # 8 packets per 20 ms, about the real 375/s
            readable, _, _ = select.select([self.fd], [], [], 0)
            if readable:
                try:
                    rx += os.read(self.fd, 4096)
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EIO):
                        raise
            if self.role == "a1" and b"\xa5\x50" in rx:
                rx = b""
                info = bytes([0x18, 29, 1, 7]) + bytes(range(16))
                self._write(a1_protocol.INFO_DESCRIPTOR + info)

    def _write(self, data: bytes) -> None:
        try:
            os.write(self.fd, data)
        except OSError as exc:  # nobody reading: the pty buffer is full
            if exc.errno not in (errno.EAGAIN, errno.EIO):
                raise


@inner
def test_in_testbed_devices_probe_tells_the_identical_adapters_apart(testbed):
    sides = [
        _DeviceSide(testbed.get_dev_fd("/dev/ttyUSB0"), "a1"),
        _DeviceSide(testbed.get_dev_fd("/dev/ttyUSB1"), "silent"),
        _DeviceSide(testbed.get_dev_fd("/dev/ttyUSB2"), "ld19"),
    ]
    for side in sides:
        side.start()
    try:
        res = CliRunner().invoke(_cli(), ["devices", "--probe", "--listen", "0.15", "--json"])
    finally:
        for side in sides:
            side.stop_event.set()
            side.join(1.0)
    assert res.exit_code == 0, res.output
    found = {d["port_path"]: (d["node"], d["kind"]) for d in json.loads(res.output)["devices"]}
    assert found == {
        "1-1.2": ("/dev/ttyUSB0", "a1"),
        "1-1.3": ("/dev/ttyUSB1", "unknown"),
        "1-1.4": ("/dev/ttyUSB2", "ld19"),
    }


# -- the runner: one umockdev-wrapper child per check ------------------------------


@pytest.mark.parametrize("check", _inner_tests())
def test_umockdev_suite_under_wrapper(umockdev_ready, check):
    """Run one ``test_in_testbed_*`` check in its own umockdev-wrapper child.

    One child per check: umockdev's preload keeps per-process state, and a
    netlink monitor opened after another testbed had been used in the same
    process was seen to receive nothing, so each check gets a fresh process.
    """
    cmd = [
        "umockdev-wrapper",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"{Path(__file__).relative_to(REPO)}::{check}",
    ]
    done = subprocess.run(
        cmd,
        cwd=REPO,
        env={**os.environ, INNER_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    assert done.returncode == 0, output
    assert re.search(r"\b1 passed\b", summary) and "skipped" not in summary, output
