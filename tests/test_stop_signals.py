"""A recording stops cleanly on SIGINT, SIGTERM and SIGHUP (what a dropped SSH session to
the robot sends): `record-raw` as a process on a pty, its output complete and in place."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import time
import tty

import pytest


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name
)
def test_record_raw_stops_cleanly_on_a_signal(tmp_path, sig) -> None:
    master, slave = pty.openpty()
    tty.setraw(slave)
    out = tmp_path / "raw.bin"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "record-raw",
         os.ttyname(slave), "--baud", "115200", "--duration", "60", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        sent, deadline = 0, time.monotonic() + 30
        while not list(tmp_path.glob(".raw.bin*")) and time.monotonic() < deadline:
            time.sleep(0.05)  # recording: its partial output exists
        for _ in range(10):
            os.write(master, b"x" * 100)
            sent += 100
            time.sleep(0.02)
        time.sleep(0.5)  # read (the recorder's poll is shorter)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, err
    assert out.read_bytes() == b"x" * sent
    assert (tmp_path / "raw.bin.chunks").exists()
    assert not list(tmp_path.glob(".*partial*"))
