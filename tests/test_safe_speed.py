"""``--speed`` beyond what the emulator can serve: it runs as fast as it can and says so,
with the speed it reached, instead of silently serving slower than asked. The LD19
emulator emits at most 0.25 simulated s per pump and sleeps at least 8 ms between
pumps, so it cannot exceed 0.25 / 0.008 = 31× however fast the host and the reader; the
pod emulator writes at most 512 frames per 10 ms tick; the A1 emulator emits at most
0.25 simulated s per pump, once per 10 ms wait for requests while a host scans (25×);
the firmware harness runs simavr as fast as the host allows."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import firmware_util
import pytest
import serial

from sensorbench.drivers.serial_port import open_serial

KINDS = {"ld19": ["--startup", "0"], "pods": []}
SCAN = b"\xa5\x20"  # the A1's SCAN request


def _emulate(
    tmp_path: Path, speed: str, kind: str = "ld19", args: tuple[str, ...] = (), ask: bytes = b""
) -> str:
    """stderr of ``emulate KIND ARGS`` served for 2 s to a reader that sends ``ask``
    (DTR released: an A1's motor runs) and drains the pty."""
    link = tmp_path / kind
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "emulate", kind,
         "--link", str(link), *KINDS.get(kind, []), *args, "--duration", "2", "--speed", speed],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip()
        deadline = time.monotonic() + 10
        while not link.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        with open_serial(link, 230400, timeout_s=0.05, dtr=False) as ser:
            ser.write(ask)
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    ser.read(1 << 16)  # a reader that keeps up: the pty never blocks a send
                except serial.SerialException:  # the emulator ended and closed the pty
                    break
        _, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        return err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_a_speed_the_emulator_cannot_serve_is_reported_with_the_speed_reached(
    tmp_path: Path,
) -> None:
    err = _emulate(tmp_path, "1e9")
    found = re.search(r"ran at ([0-9.e+]+)x, not the asked 1e\+09x", err)
    assert found, err
    assert float(found.group(1)) <= 0.25 / 0.008 * 1.01  # the pump's own ceiling


def test_the_pod_emulator_says_so_too(tmp_path: Path) -> None:
    err = _emulate(tmp_path, "1e9", "pods")
    found = re.search(r"ran at ([0-9.e+]+)x, not the asked 1e\+09x", err)
    assert found, err
    assert float(found.group(1)) < 0.9e9


@pytest.mark.parametrize("kind", KINDS)
def test_a_speed_it_keeps_up_with_says_nothing_more(tmp_path: Path, kind: str) -> None:
    err = _emulate(tmp_path, "2", kind)
    assert "not the asked" not in err, err


def test_the_a1_emulator_says_so_for_the_time_a_host_scanned(tmp_path: Path) -> None:
    err = _emulate(tmp_path, "1e9", "a1", ask=SCAN)
    found = re.search(r"ran at ([0-9.e+]+)x, not the asked 1e\+09x", err)
    assert found, err
    assert 0 < float(found.group(1)) <= 0.25 / 0.01 * 1.01  # the pump's own ceiling


@pytest.mark.parametrize(("speed", "ask"), [("2", SCAN), ("1e9", b"")])
def test_the_a1_emulator_kept_up_or_never_asked_says_nothing(
    tmp_path: Path, speed: str, ask: bytes
) -> None:
    # an A1 serves only while a host scans: a unit nobody scanned served all it was asked
    err = _emulate(tmp_path, speed, "a1", ask=ask)
    assert "not the asked" not in err, err


@pytest.fixture(scope="module")
def elf() -> Path:
    firmware_util.product("harness")
    return firmware_util.product("avr")


def test_the_pod_firmware_says_so_too(tmp_path: Path, elf: Path) -> None:
    err = _emulate(tmp_path, "1e9", "pods", ("--firmware", str(elf)))
    found = re.search(r"ran at ([0-9.e+]+)x, not the asked 1e\+09x", err)
    assert found, err
    assert 0 < float(found.group(1)) < 1000  # simavr: a few times real time (2.6x here)


def test_the_pod_firmware_kept_up_with_says_nothing(tmp_path: Path, elf: Path) -> None:
    # a quarter of real time: well within simavr's reach even on a busy machine
    err = _emulate(tmp_path, "0.25", "pods", ("--firmware", str(elf)))
    assert "not the asked" not in err, err
