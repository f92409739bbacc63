"""brltty detection: its process, its CP2102 udev rule and its kernel log line, on a
fake /proc, fake rule directories and fake kernel log text; `devices` and `bringup`
print the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import capture_util as cu
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers import capture
from sensorbench.drivers.capture import BringupResult
from sensorbench.udev import brltty
from sensorbench.udev.brltty import check_brltty

# the lines that matter of Ubuntu 22.04's /usr/lib/udev/rules.d/85-brltty.rules
UBUNTU_RULE = """\
# Device: 10C4:EA60
# Generic Identifier
# Vendor: Cygnal Integrated Products, Inc.
# Product: CP210x UART Bridge / myAVR mySmartUSB light
# BrailleDriver: sk
ENV{PRODUCT}=="10c4/ea60/*", ENV{BRLTTY_BRAILLE_DRIVER}="sk", GOTO="brltty_usb_run"
"""
KERNEL_LINE = "[  812.345] usbfs: interface 0 claimed by cp210x while 'brltty' sets config #1"
KERNEL_LOG = f"""\
[  812.301] usb 1-1.2: new full-speed USB device number 7 using xhci_hcd
[  812.330] usb 1-1.2: cp210x converter now attached to ttyUSB0
{KERNEL_LINE}
[  812.351] cp210x ttyUSB0: cp210x converter now disconnected from ttyUSB0
"""


def _proc(root: Path, procs: dict[str, str | None]) -> Path:
    proc = root / "proc"
    for pid, comm in procs.items():
        (proc / pid).mkdir(parents=True)
        if comm is not None:
            (proc / pid / "comm").write_text(comm + "\n")
    return proc


def _rules(root: Path) -> tuple[Path, Path]:
    etc, lib = root / "etc/udev/rules.d", root / "usr/lib/udev/rules.d"
    etc.mkdir(parents=True)
    lib.mkdir(parents=True)
    return etc, lib


def test_every_trace_is_found_and_the_message_gives_the_fix(tmp_path):
    proc = _proc(tmp_path, {"1": "systemd", "812": "brltty", "900": None, "self": "x"})
    etc, lib = _rules(tmp_path)
    (lib / "85-brltty.rules").write_text(UBUNTU_RULE)
    (lib / "60-serial.rules").write_text('ENV{PRODUCT}=="10c4/ea60/*", SYMLINK+="x"\n')
    found = check_brltty(proc, (etc, lib), KERNEL_LOG)
    assert found.found
    assert found.pids == [812]
    assert found.rules == [lib / "85-brltty.rules"]
    assert found.kernel_lines == [KERNEL_LINE]
    msg = found.message()
    for part in (
        "pid 812",
        "85-brltty.rules",
        "claimed by cp210x",
        "systemctl mask",
        "ln -s /dev/null /etc/udev/rules.d/85-brltty.rules",
        "apt remove brltty",
        "replug",
        "docs/UDEV.md",
    ):
        assert part in msg, part
    doc = found.as_dict()
    assert doc["found"] and doc["pids"] == [812] and doc["message"] == msg


def test_a_masked_or_commented_rule_is_not_active(tmp_path):
    proc = _proc(tmp_path, {"1": "systemd"})
    etc, lib = _rules(tmp_path)
    (lib / "85-brltty.rules").write_text(UBUNTU_RULE)
    os.symlink("/dev/null", etc / "85-brltty.rules")
    assert check_brltty(proc, (etc, lib), "").rules == []
    (etc / "85-brltty.rules").unlink()
    commented = "".join(
        f"# {ln}\n" if ln.startswith("ENV") else f"{ln}\n" for ln in UBUNTU_RULE.splitlines()
    )
    (etc / "85-brltty.rules").write_text(commented)  # the /etc copy wins over /usr/lib
    assert check_brltty(proc, (etc, lib), "").rules == []
    (etc / "85-brltty.rules").unlink()
    assert check_brltty(proc, (etc, lib), "").rules == [lib / "85-brltty.rules"]


def test_a_clean_machine_has_no_finding(tmp_path):
    proc = _proc(tmp_path, {"1": "systemd", "2": "brlttyx"})
    etc, lib = _rules(tmp_path)
    found = check_brltty(proc, (etc, lib), KERNEL_LOG.replace(KERNEL_LINE, ""))
    assert not found.found and found.message() == ""


@pytest.fixture
def fake_machine(tmp_path, monkeypatch):
    """The CLI's brltty check sees a fake machine where brltty took a CP2102."""
    proc = _proc(tmp_path, {"812": "brltty"})
    etc, lib = _rules(tmp_path)
    (lib / "85-brltty.rules").write_text(UBUNTU_RULE)
    monkeypatch.setattr(brltty, "PROC", proc)
    monkeypatch.setattr(brltty, "RULES_DIRS", (etc, lib))
    monkeypatch.setattr(brltty, "read_kernel_log", lambda: (KERNEL_LOG, "dmesg"))
    return tmp_path


def test_devices_probe_reports_brltty_with_the_fix(fake_machine, monkeypatch):
    import sensorbench.commands.udev as devices_cmd

    monkeypatch.setattr(devices_cmd, "list_serial_devices", lambda usb_only=True: [])
    res = CliRunner().invoke(cli, ["devices", "--probe", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["devices"] == [] and doc["brltty"]["found"]
    assert "systemctl mask" in doc["brltty"]["message"]
    res = CliRunner().invoke(cli, ["devices", "--probe"])
    assert res.exit_code == 0
    assert "warning: brltty is running (pid 812)" in res.stderr
    assert "no serial devices found" in res.stdout


def test_bringup_reports_brltty_before_the_failing_devices(fake_machine, monkeypatch, tmp_path):
    def failing(config):
        return [BringupResult("ld19", "ld19", "/dev/ld19", False, 0.1, "port does not exist")]

    monkeypatch.setattr(capture, "run_bringup", failing)
    args = ["bringup", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(tmp_path / "run")]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1
    assert "warning: brltty is running" in res.stderr and "claimed by cp210x" in res.stderr
    assert "port does not exist" in res.stdout
