"""``sensorbench emulate pods --firmware`` as a process, captured by ``sensorbench capture``.

The emulator serves the real AVR image under simavr on a pty (real-time pacing, Uno
auto-reset on: every open of the port restarts the MCU after the bootloader's wait),
``capture`` records it through the real reader, and the session must hold exactly
the counts the harness drove: per boot, the trajectory's rows at each latch minus
the rows at that boot (the harness's events file says when each boot started).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import firmware_util
import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session
from sensorbench.sim.pod_trajectory import PodTrajectory

PERIOD_US = 5000

CONFIG = """
[robot]
name = "bench"

[powerup]
order = ["pods"]
timeout_s = 30.0

[[devices]]
name = "pods"
kind = "pods"
port = "{port}"
baud = 115200
protocol = "binary"
counter_bits = 16
n_pods = 3
imu = false
"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


@pytest.fixture(scope="module")
def elf():
    firmware_util.product("harness")
    return firmware_util.product("avr")


def _trajectory(path) -> PodTrajectory:
    """Rows every 5 ms (the firmware's latch grid) for 1 s: three pods, ~4-9 k counts/s."""
    t = np.arange(201, dtype=np.int64) * PERIOD_US
    rng = np.random.default_rng(5)
    counts = np.cumsum(rng.integers(-10, 45, size=(t.size, 3)), axis=0) * [1, -1, 2]
    traj = PodTrajectory(t, counts - counts[0] + [100, -200, 0])
    traj.write(path)
    return traj


def _boots(events) -> list[int]:
    """Trajectory time (µs) of every boot's start, from the harness's events file."""
    boots = []
    for line in events.read_text().splitlines():
        words = line.split()
        if words[0] == "epoch":
            boots.append(int(words[5]))
    return boots


def test_a_capture_through_the_firmware_stores_exactly_the_driven_counts(elf, tmp_path) -> None:
    traj_file, events, link = tmp_path / "traj.txt", tmp_path / "events.txt", tmp_path / "pods"
    traj = _trajectory(traj_file)
    emulate = subprocess.Popen(
        _cli("emulate", "pods", "--firmware", str(elf), "--trajectory", str(traj_file),
             "--link", str(link), "--events", str(events), "--boot-s", "0.5"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert emulate.stdout is not None
        assert emulate.stdout.readline().strip() == str(link)  # the pty's path first
        config = tmp_path / "robot.toml"
        config.write_text(CONFIG.format(port=link))
        out = tmp_path / "s.h5"
        capture = subprocess.run(
            _cli("capture", "--config", str(config), "--duration", "2.5", "-o", str(out)),
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert capture.returncode == 0, capture.stderr
    finally:
        emulate.send_signal(signal.SIGTERM)
        _, err = emulate.communicate(timeout=60)
    assert emulate.returncode == 0, err  # stops cleanly on SIGTERM
    assert not link.exists()  # and removes its link

    with Session(out) as s:
        b = s.encoder("pods").read()
    assert b.counts.shape[0] >= 300  # 2.5 s at 200 Hz, less what the start costs
    boots = _boots(events)
    # each open of the port (bring-up, then the recording) reset the MCU; the stored
    # frames are the last boots', the clock restarting at each
    t_us = b.device_ns // 1000
    segment = np.r_[0, np.cumsum(np.diff(t_us) < 0)]
    first_boot = len(boots) - 1 - segment[-1]
    assert first_boot >= 1
    np.testing.assert_array_equal(np.diff(b.seq), 1)  # not one frame lost
    for k in range(segment[-1] + 1):
        sel = segment == k
        start = boots[first_boot + k]
        assert start % PERIOD_US == 0  # restarts land on the trajectory's rows
        span_us = traj.t_us[-1] - traj.t_us[0]
        traj_us = (start + t_us[sel]) % span_us  # looped
        firmware = (
            traj.counts[traj_us // PERIOD_US] - traj.counts[start % span_us // PERIOD_US]
        )
        loops = (start + t_us[sel]) // span_us - start // span_us
        firmware = firmware + loops[:, None] * (traj.counts[-1] - traj.counts[0])
        stored = b.counts[sel]
        if k == 0:  # the first frame's 16-bit counters, read as signed
            np.testing.assert_array_equal(stored[0], (firmware[0] + 2**15) % 2**16 - 2**15)
        else:  # a restart adds the new counters to where the counts were
            np.testing.assert_array_equal(stored[0] - b.counts[~sel & (segment < k)][-1],
                                          firmware[0])  # fmt: skip
        np.testing.assert_array_equal(stored - stored[0], firmware - firmware[0])


def test_duration_ends_the_emulator_and_removes_its_link(elf, tmp_path) -> None:
    link = tmp_path / "pods"
    done = subprocess.run(
        _cli("emulate", "pods", "--firmware", str(elf), "--link", str(link), "--duration", "1.5"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(link) and not link.exists()


def test_firmware_options_are_checked_before_anything_starts(elf, tmp_path) -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["emulate", "pods", "--firmware", str(elf), "--protocol", "csv"])
    assert r.exit_code == 2 and "binary frames only" in r.output
    r = runner.invoke(cli, ["emulate", "pods", "--trajectory", str(elf)])
    assert r.exit_code == 2 and "--firmware only" in r.output
    bad = tmp_path / "t.txt"
    bad.write_text("0 0 0 0\n0 1 1 1\n")
    r = runner.invoke(cli, ["emulate", "pods", "--firmware", str(elf), "--trajectory", str(bad)])
    assert r.exit_code == 2 and "t.txt:2" in r.output
    os.mkfifo(tmp_path / "fifo")  # an append to it would wait for a reader forever
    r = runner.invoke(cli, ["emulate", "pods", "--firmware", str(elf), "--events",
                            str(tmp_path / "fifo"), "--duration", "1"])  # fmt: skip
    assert r.exit_code == 2 and "is a FIFO (named pipe)" in r.output, r.output


def test_the_harness_missing_is_a_clear_error(elf, tmp_path) -> None:
    env = {**os.environ, "SENSORBENCH_POD_HARNESS": str(tmp_path / "none")}
    done = subprocess.run(
        _cli("emulate", "pods", "--firmware", str(elf), "--duration", "1"),
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "make -C" in done.stderr


def test_a_dying_harness_ends_the_emulator_with_its_message(elf, tmp_path) -> None:
    # an image that is not an AVR ELF: the harness refuses it, the command says why
    fake = tmp_path / "fake.elf"
    fake.write_bytes(b"not an elf")
    start = time.monotonic()
    done = subprocess.run(
        _cli("emulate", "pods", "--firmware", str(fake), "--duration", "60"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "not an AVR ELF" in done.stderr
    assert time.monotonic() - start < 60  # it did not serve a dead MCU for --duration
