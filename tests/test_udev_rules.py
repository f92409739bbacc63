"""Rule generation, validation and installation: pure tests that need no udev.

The devices are built by hand with the facts the umockdev description in
``tests/data/udev/three_cp2102.umockdev`` declares (three CP2102s, 10c4:ea60,
serial 0001, on hub ports 1-1.2, 1-1.3, 1-1.4); the umockdev suite checks that
discovery really produces these from sysfs.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from udev_monitor import device_for_node

from sensorbench.cli import cli
from sensorbench.errors import UdevError
from sensorbench.sim.pty import PtyPort
from sensorbench.udev import install as install_mod
from sensorbench.udev.discovery import SerialDevice, port_path_from_sys_path
from sensorbench.udev.install import NeedsRootError, install_rules, validate_filename
from sensorbench.udev.rules import (
    NameSpec,
    build_rules,
    check_rules_text,
    generate,
    parse_name_spec,
    parse_port_path,
    validate_id_path,
    validate_name,
)

DATA = Path(__file__).parent / "data" / "udev"
GOLDEN = DATA / "golden.rules"
GOLDEN_KERNELS = DATA / "golden_kernels.rules"
EXAMPLE = Path(__file__).parents[1] / "udev" / "70-sensorbench.example.rules"
SPECS = ["lidar_front=1-1.2", "lidar_rear=1-1.3", "ld19=1-1.4"]


def cp2102(port: str, node: str) -> SerialDevice:
    hub_port = port.rsplit(".", 1)[1]
    id_path = f"pci-0000:00:14.0-usb-0:1.{hub_port}:1.0"
    return SerialDevice(
        node=node,
        sys_path=f"/sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/{port}/{port}:1.0/x/tty/x",
        subsystem_parent="usb-serial",
        id_path=id_path,
        port_path=port,
        interface="1.0",
        vid=0x10C4,
        pid=0xEA60,
        serial="0001",
        vendor="Silicon Labs",
        model="CP2102 USB to UART Bridge Controller",
        driver="cp210x",
        devlinks=(f"/dev/serial/by-path/{id_path}-port0",),
    )


DEVICES = [
    cp2102("1-1.2", "/dev/ttyUSB0"),
    cp2102("1-1.3", "/dev/ttyUSB1"),
    cp2102("1-1.4", "/dev/ttyUSB2"),
]


def specs(texts=SPECS) -> list[NameSpec]:
    return [parse_name_spec(t) for t in texts]


# -- names, port paths, ID_PATHs ---------------------------------------------------


@pytest.mark.parametrize("name", ["lidar_front", "ld19", "a1-rear", "pods", "x"])
def test_valid_names_are_accepted(name):
    assert validate_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "Front",  # upper case
        "1front",  # starts with a digit
        "front lidar",  # space
        'a"b',  # quote would end the rule's string
        "a,b",  # comma would start a new key
        "../etc/passwd",  # path traversal
        "serial/front",  # a directory
        "front\n",  # newline would start a new rule
        "lidar$(reboot)",
        "",
        "x" * 33,  # too long
    ],
)
def test_unsafe_names_are_refused(name):
    with pytest.raises(UdevError, match="name"):
        validate_name(name)


@pytest.mark.parametrize(
    "name",
    ["null", "console", "tty", "ttyusb0", "ttyacm", "sda", "sdb1", "video0", "serial", "input"],
)
def test_reserved_names_are_refused(name):
    with pytest.raises(UdevError, match="reserved"):
        validate_name(name)


@pytest.mark.parametrize("name", ["sdcard", "steering", "custom", "cardinal", "video_front"])
def test_names_that_only_start_like_a_node_family_are_fine(name):
    assert validate_name(name) == name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1-1.2", ("1-1.2", None)),
        ("1-1.2:1.0", ("1-1.2", "1.0")),
        ("3-4", ("3-4", None)),
        ("1-1.2.3.4.5.6.7", ("1-1.2.3.4.5.6.7", None)),
        ("1-01.2", ("1-1.2", None)),  # normalised
    ],
)
def test_port_paths_parse(text, expected):
    assert parse_port_path(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1-1.2.3.4.5.6.7.8",
        "0-1",
        "1-0.2",
        "1-1.2:1",
        "usb1",
        "1-1.2;",
        "1-1.2 ",
        "/dev/ttyUSB0",
        "1-1.256",
        "1-1.2:1.0:1.0",
        "*",
        "1-1.?",
        "1-1.2\n",
    ],
)
def test_bad_port_paths_are_refused(text):
    with pytest.raises(UdevError, match="port path"):
        parse_port_path(text)


def test_id_path_validation():
    good = "pci-0000:00:14.0-usb-0:1.2:1.0"
    assert validate_id_path(good) == good
    assert validate_id_path("platform-fd500000.pcie-pci-0000:01:00.0-usb-0:1.3:1.0")
    for bad in [
        'pci-0000:00:14.0-usb-0:1.2:1.0"',
        "pci-0000:00:14.0-usb-0:1.*:1.0",
        "pci-0000:00:14.0",
        'pci-0000:00:14.0-usb-0:1.2:1.0, RUN+="/bin/x"',
    ]:
        with pytest.raises(UdevError, match="ID_PATH"):
            validate_id_path(bad)


def test_name_spec_needs_name_equals_location():
    with pytest.raises(UdevError, match="NAME=PORTPATH"):
        parse_name_spec("front")
    with pytest.raises(UdevError, match="port path"):
        parse_name_spec("front=1-1.2;reboot")


def test_port_path_from_sys_path_survives_removed_devices():
    sys_path = "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1.3/1-1.3:1.0/ttyUSB1/tty/ttyUSB1"
    assert port_path_from_sys_path(sys_path) == ("1-1.3", "1.0")
    assert port_path_from_sys_path("/sys/devices/pci0000:00/0000:00:14.0/usb1/1-4") == ("1-4", None)
    assert port_path_from_sys_path("/sys/devices/pnp0/00:00/00:00:0/00:00:0.0/tty/ttyS0") == (
        None,
        None,
    )


def test_device_for_node_of_a_pty_or_missing_path(tmp_path):
    port = PtyPort(link=str(tmp_path / "lidar_front"))
    try:
        assert device_for_node(port.path) is None  # a pty is no hardware tty
        assert device_for_node(str(tmp_path / "lidar_front")) is None
    finally:
        port.close()
    with pytest.raises(UdevError, match="does not exist"):
        device_for_node(str(tmp_path / "nothing"))


# -- generation ----------------------------------------------------------------


def test_generated_rules_match_the_reviewed_golden_files():
    assert generate(specs(), DEVICES, "id-path") == GOLDEN.read_text()
    assert generate(specs(), DEVICES, "kernels") == GOLDEN_KERNELS.read_text()


def test_shipped_example_is_the_golden_file():
    assert EXAMPLE.read_text() == GOLDEN.read_text()


def test_every_rule_sets_group_mode_and_modemmanager_ignore():
    for by in ("id-path", "kernels"):
        for rule in build_rules(specs(), DEVICES, by):
            text = rule.text()
            assert 'GROUP="dialout"' in text and 'MODE="0660"' in text
            assert 'ENV{ID_MM_DEVICE_IGNORE}="1"' in text
            assert "uaccess" not in text and "0666" not in text


def test_kernels_rule_matches_vendor_on_the_usb_device_not_the_interface():
    rule = build_rules(specs(["front=1-1.2"]), DEVICES, "kernels")[0]
    assert 'KERNELS=="1-1.2", ATTRS{idVendor}=="10c4", ATTRS{idProduct}=="ea60"' in rule.text()
    # Naming one interface: only KERNELS of the interface, no ATTRS of its parent.
    rule = build_rules(specs(["front=1-1.2:1.0"]), DEVICES, "kernels")[0]
    assert 'KERNELS=="1-1.2:1.0"' in rule.text()
    assert "ATTRS" not in rule.text()


def test_id_path_rules_need_the_device_or_its_id_path():
    with pytest.raises(UdevError, match=r"no serial device is plugged into 1-1\.7"):
        build_rules(specs(["front=1-1.7"]), DEVICES, "id-path")
    rule = build_rules(specs(["front=pci-0000:00:14.0-usb-0:1.7:1.0"]), [], "id-path")[0]
    assert 'ENV{ID_PATH}=="pci-0000:00:14.0-usb-0:1.7:1.0"' in rule.text()
    # kernels rules work for absent devices (without vendor/product).
    rule = build_rules(specs(["front=1-1.7"]), [], "kernels")[0]
    assert rule.text().startswith('SUBSYSTEM=="tty", KERNELS=="1-1.7", SYMLINK+="front"')


def test_duplicates_are_refused():
    with pytest.raises(UdevError, match="given twice"):
        build_rules(specs(["front=1-1.2", "front=1-1.3"]), DEVICES)
    with pytest.raises(UdevError, match="same device"):
        build_rules(specs(["front=1-1.2", "rear=1-1.2"]), DEVICES)
    with pytest.raises(UdevError, match="same device"):
        build_rules(specs(["front=1-1.2", "rear=pci-0000:00:14.0-usb-0:1.2:1.0"]), DEVICES)


@pytest.mark.parametrize("devices", [DEVICES, []], ids=["present", "absent"])
def test_by_kernels_a_port_and_its_interface_are_the_same_device(devices):
    """By ID_PATH two names for one device were refused, by kernels they were written:
    ``KERNELS=="1-1.2"`` matches the tty under ``1-1.2:1.0`` too, so both names landed on
    one device."""
    for pair in (["front=1-1.2", "rear=1-1.2:1.0"], ["front=1-1.2:1.0", "rear=1-1.2"],
            ["front=1-1.2:1.0", "rear=1-1.2:1.0"]):
        with pytest.raises(UdevError, match=r"rear and front name the same device \(1-1\.2"):
            build_rules(specs(pair), devices, "kernels")
    # two interfaces of one adapter are two devices
    rules = build_rules(specs(["front=1-1.2:1.0", "rear=1-1.2:1.1"]), [], "kernels")
    assert [r.interface for r in rules] == ["1.0", "1.1"]
    assert "rear: 1-1.2:1.1 (device not present" in generate(
        specs(["rear=1-1.2:1.1"]), [], "kernels")


def test_multi_interface_adapter_must_name_the_interface():
    dual = [cp2102("1-1.2", "/dev/ttyUSB0"), cp2102("1-1.2", "/dev/ttyUSB1")]
    dual[1] = SerialDevice(
        **{**dual[1].__dict__, "interface": "1.1", "id_path": "pci-0000:00:14.0-usb-0:1.2:1.1"}
    )
    with pytest.raises(UdevError, match="2 serial interfaces"):
        build_rules(specs(["front=1-1.2"]), dual)
    rule = build_rules(specs(["front=1-1.2:1.1"]), dual)[0]
    assert rule.id_path == "pci-0000:00:14.0-usb-0:1.2:1.1"


def test_device_strings_cannot_inject_into_the_rules_file():
    evil = SerialDevice(
        **{
            **DEVICES[0].__dict__,
            "model": 'CP2102"\nSUBSYSTEM=="tty", RUN+="/bin/sh -c reboot"',
            "serial": "0001\n#",
        }
    )
    text = generate(specs(["front=1-1.2"]), [evil, *DEVICES[1:]])
    rule_lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert rule_lines == [build_rules(specs(["front=1-1.2"]), DEVICES)[0].text()]
    assert '"' not in "".join(ln for ln in text.splitlines() if ln.startswith("# front"))
    assert check_rules_text(text) == ["front"]


# -- checking a file before install ----------------------------------------------


def test_check_accepts_the_golden_files():
    assert check_rules_text(GOLDEN.read_text()) == ["lidar_front", "lidar_rear", "ld19"]
    assert check_rules_text(GOLDEN_KERNELS.read_text()) == ["lidar_front", "lidar_rear", "ld19"]


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('SYMLINK+="lidar_rear"', 'SYMLINK+="../null"', "invalid device name"),
        ('SYMLINK+="lidar_rear"', 'SYMLINK+="console"', "reserved"),
        ('SYMLINK+="lidar_rear"', 'SYMLINK+="lidar_front"', "used twice"),
        ('MODE="0660", ENV{ID_MM', 'MODE="0666", ENV{ID_MM', "MODE"),
        ('GROUP="dialout", ', 'TAG+="uaccess", ', "GROUP"),
        (
            'ENV{ID_MM_DEVICE_IGNORE}="1"',
            'ENV{ID_MM_DEVICE_IGNORE}="1", RUN+="/bin/rm -rf /"',
            "not allowed",
        ),
        (
            'SUBSYSTEM=="tty", ENV{ID_PATH}=="pci-0000:00:14.0-usb-0:1.2:1.0"',
            'SUBSYSTEM=="tty", ENV{ID_PATH}=="pci-*"',
            "ID_PATH",
        ),
        ('SUBSYSTEM=="tty", ENV', 'SUBSYSTEM=="block", ENV', "SUBSYSTEM"),
        ('SYMLINK+="ld19"', 'SYMLINK+="ld19', "quote"),
    ],
)
def test_check_refuses_tampered_files(old, new, match):
    text = GOLDEN.read_text()
    assert old in text
    with pytest.raises(UdevError, match=match):
        check_rules_text(text.replace(old, new, 1))


def test_check_refuses_the_same_parent_trap():
    text = GOLDEN_KERNELS.read_text().replace('KERNELS=="1-1.2"', 'KERNELS=="1-1.2:1.0"')
    with pytest.raises(UdevError, match="same parent"):
        check_rules_text(text)


FRONT_ID_PATH = 'ENV{ID_PATH}=="pci-0000:00:14.0-usb-0:1.2:1.0"'


@pytest.mark.parametrize(
    ("golden", "old", "new", "match"),
    [
        # no port: the rule matched every tty (ttyS0 too), /dev/lidar_front the last one
        (GOLDEN, FRONT_ID_PATH + ", ", "", "names no USB port"),
        # the IDs alone: all three identical CP2102s, the name on whichever came last
        (GOLDEN_KERNELS, 'KERNELS=="1-1.2", ', "", "names no USB port"),
        (GOLDEN, FRONT_ID_PATH, FRONT_ID_PATH + ', KERNELS=="1-1.3"', "both"),
        # a key twice with two values never matches
        (GOLDEN, FRONT_ID_PATH, FRONT_ID_PATH + ", " + FRONT_ID_PATH.replace("1.2:", "1.3:"),
            r"more than one ENV\{ID_PATH\}"),
        (GOLDEN_KERNELS, 'ATTRS{idVendor}=="10c4"',
            'ATTRS{idVendor}=="10c4", ATTRS{idVendor}=="0403"', "more than one ATTRS"),
        # the kernel writes no leading zeros: these never match
        (GOLDEN_KERNELS, 'KERNELS=="1-1.2"', 'KERNELS=="01-1.2"', r'never matches.*"1-1\.2"'),
        (GOLDEN_KERNELS, 'KERNELS=="1-1.2"', 'KERNELS=="1-1.02"', r'never matches.*"1-1\.2"'),
        (GOLDEN, FRONT_ID_PATH, FRONT_ID_PATH.replace("0:1.2:", "0:01.2:"), "invalid ID_PATH"),
    ],
)
def test_check_refuses_rules_that_match_every_device_or_none(golden, old, new, match):
    """These passed the check (and were installed): a rule without a port names whichever
    tty or identical adapter appeared last; one whose key never matches names nothing."""
    text = golden.read_text()
    assert old in text
    with pytest.raises(UdevError, match=match):
        check_rules_text(text.replace(old, new, 1))


def test_id_paths_are_written_as_path_id_writes_them():
    for good in ["pci-0000:00:14.0-usb-0:1.10.2:1.0", "pci-0000:00:14.0-usbv2-0:1.2:1.0",
            "platform-3f980000.usb-usb-0:1.1.3:1.0"]:
        assert validate_id_path(good) == good
    for bad in ["pci-0000:00:14.0-usb-0:1.2:01.0", "pci-0000:00:14.0-usb-1:1.2:1.0"]:
        with pytest.raises(UdevError, match="ID_PATH"):
            parse_name_spec(f"front={bad}")


def test_check_refuses_an_empty_file():
    with pytest.raises(UdevError, match="no rule"):
        check_rules_text("# nothing\n\n")


# -- install ---------------------------------------------------------------------


class FakeRunner:
    """Records the commands it is asked to run; answers with the given exit codes."""

    def __init__(self, codes=(0, 0)):
        self.calls: list[tuple[tuple[str, ...], float]] = []
        self.codes = list(codes)

    def __call__(self, argv, timeout_s):
        self.calls.append((tuple(argv), timeout_s))
        return self.codes[len(self.calls) - 1], "udevadm said no" if self.codes[-1] else ""


def test_install_writes_file_reloads_and_triggers(tmp_path):
    runner = FakeRunner()
    result = install_rules(GOLDEN, rules_dir=tmp_path, runner=runner, is_root=True, timeout_s=7)
    target = tmp_path / "70-sensorbench.rules"
    assert result.path == target and not result.replaced
    assert target.read_text() == GOLDEN.read_text()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o644
    assert result.names == ["lidar_front", "lidar_rear", "ld19"]
    assert [c[0] for c in runner.calls] == [
        ("udevadm", "control", "--reload-rules"),
        ("udevadm", "trigger", "--action=add", "--subsystem-match=tty", "--settle"),
    ]
    assert all(timeout == 7 for _, timeout in runner.calls)
    assert [p.name for p in tmp_path.iterdir()] == ["70-sensorbench.rules"]  # no temp left
    assert install_rules(GOLDEN, rules_dir=tmp_path, runner=FakeRunner(), is_root=True).replaced


def test_install_never_replaces_other_rules_without_force(tmp_path):
    """A rules file of that name with other contents (a hand-edited one, another robot's)
    was silently replaced; it is refused now, root or not, and kept byte for byte."""
    target = tmp_path / "70-sensorbench.rules"
    theirs = 'SUBSYSTEM=="tty", KERNELS=="1-1.5", SYMLINK+="gps"\n'
    target.write_text(theirs)
    for root in (True, False):
        runner = FakeRunner()
        with pytest.raises(UdevError, match=r"already exists with other contents.*--force"):
            install_rules(GOLDEN, rules_dir=tmp_path, runner=runner, is_root=root)
        assert target.read_text() == theirs and runner.calls == []
    masked = tmp_path / "masked"
    masked.mkdir()
    (masked / "70-sensorbench.rules").symlink_to("/dev/null")  # a mask: not ours either
    with pytest.raises(UdevError, match="already exists"):
        install_rules(GOLDEN, rules_dir=masked, runner=FakeRunner(), is_root=True)
    assert (masked / "70-sensorbench.rules").is_symlink()
    res = CliRunner().invoke(cli, ["udev", "install", str(GOLDEN), "--rules-dir", str(tmp_path),
        "--no-reload"])
    assert res.exit_code == 2 and "--force" in res.output, res.output
    assert target.read_text() == theirs
    res = CliRunner().invoke(cli, ["udev", "install", str(GOLDEN), "--rules-dir", str(tmp_path),
        "--no-reload", "--force"])
    assert res.exit_code == 0 and "replaced" in res.output, res.output
    assert target.read_text() == GOLDEN.read_text()
    # the same contents again need no --force
    assert install_rules(GOLDEN, rules_dir=tmp_path, runner=FakeRunner(), is_root=True).replaced


def test_install_without_root_changes_nothing_and_gives_the_command(tmp_path):
    runner = FakeRunner()
    with pytest.raises(NeedsRootError) as info:
        install_rules(GOLDEN, rules_dir=tmp_path, runner=runner, is_root=False)
    assert list(tmp_path.iterdir()) == [] and runner.calls == []
    command = info.value.command
    assert command == (
        f"sudo install -m 0644 {GOLDEN.resolve()} {tmp_path / '70-sensorbench.rules'} && "
        "sudo udevadm control --reload-rules && "
        "sudo udevadm trigger --action=add --subsystem-match=tty --settle"
    )
    assert command in str(info.value)


def test_install_refuses_unsafe_file_before_anything_else(tmp_path):
    bad = tmp_path / "bad.rules"
    bad.write_text(GOLDEN.read_text().replace('SYMLINK+="ld19"', 'SYMLINK+="ld19;rm"'))
    target_dir = tmp_path / "rules.d"
    target_dir.mkdir()
    runner = FakeRunner()
    with pytest.raises(UdevError, match="refusing to install"):
        install_rules(bad, rules_dir=target_dir, runner=runner, is_root=True)
    assert list(target_dir.iterdir()) == [] and runner.calls == []


def test_install_reports_a_failing_udevadm(tmp_path):
    runner = FakeRunner(codes=(0, 1))
    with pytest.raises(UdevError, match=r"installed .* but `udevadm trigger.*failed \(exit 1"):
        install_rules(GOLDEN, rules_dir=tmp_path, runner=runner, is_root=True)
    assert (tmp_path / "70-sensorbench.rules").exists()


def test_install_missing_dir_and_bad_filename(tmp_path):
    with pytest.raises(UdevError, match="does not exist"):
        install_rules(GOLDEN, rules_dir=tmp_path / "nope", runner=FakeRunner(), is_root=True)
    for name in [
        "50-sensorbench.rules",
        "60-sensorbench.rules",
        "sensorbench.rules",
        "70-../x.rules",
        "70-x.conf",
    ]:
        with pytest.raises(UdevError, match=r"sort after 60-serial\.rules"):
            validate_filename(name)
    assert validate_filename("61-lidars.rules") == "61-lidars.rules"


def test_subprocess_runner_has_a_deadline_and_reports_missing_programs():
    code, output = install_mod.subprocess_runner(["sleep", "5"], 0.2)
    assert code == 124 and "timed out" in output
    code, output = install_mod.subprocess_runner(["/nonexistent/udevadm"], 1.0)
    assert code == 127


# -- CLI -------------------------------------------------------------------------


def test_cli_rules_from_id_paths_and_refusals(tmp_path):
    runner = CliRunner()
    out = tmp_path / "r.rules"
    res = runner.invoke(
        cli,
        ["udev", "rules", "--name", "front=pci-0000:00:14.0-usb-0:1.2:1.0", "-o", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert check_rules_text(out.read_text()) == ["front"]
    for bad in ["Front=1-1.2", "null=1-1.2", "front=1-1.2;x", 'a"b=1-1.2']:
        res = runner.invoke(cli, ["udev", "rules", "--name", bad])
        assert res.exit_code == 2 and "error:" in res.output, (bad, res.output)


def test_cli_install_into_a_directory_and_refusal_without_root(tmp_path, monkeypatch):
    runner = CliRunner()
    rules_dir = tmp_path / "rules.d"
    rules_dir.mkdir()
    res = runner.invoke(
        cli, ["udev", "install", str(GOLDEN), "--rules-dir", str(rules_dir), "--no-reload"]
    )
    assert res.exit_code == 0, res.output
    assert (rules_dir / "70-sensorbench.rules").read_text() == GOLDEN.read_text()
    monkeypatch.setattr(install_mod.os, "geteuid", lambda: 1000)
    other = tmp_path / "other.d"
    other.mkdir()
    res = runner.invoke(cli, ["udev", "install", str(GOLDEN), "--rules-dir", str(other)])
    assert res.exit_code == 2
    assert "needs root" in res.output and "sudo udevadm control --reload-rules" in res.output
    assert list(other.iterdir()) == []
