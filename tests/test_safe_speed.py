"""``--speed`` beyond what the emulator can serve: it runs as fast as it can and says so,
with the speed it reached, instead of silently serving slower than asked. The LD19
emulator emits at most 0.25 simulated s per pump and sleeps at least 8 ms between
pumps, so it cannot exceed 0.25 / 0.008 = 31× however fast the host and the reader; the
pod emulator writes at most 512 frames per 10 ms tick."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import serial

KINDS = {"ld19": ["--startup", "0"], "pods": []}


def _emulate(tmp_path: Path, speed: str, kind: str = "ld19") -> str:
    """stderr of ``emulate KIND`` served for 2 s to a reader that drains the pty."""
    link = tmp_path / kind
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "emulate", kind,
         "--link", str(link), *KINDS[kind], "--duration", "2", "--speed", speed],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip()
        deadline = time.monotonic() + 10
        while not link.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        with serial.Serial(str(link), 230400, timeout=0.05) as ser:
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
