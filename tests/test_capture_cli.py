"""`sensorbench capture` as a process: SIGKILL mid-run, SIGTERM, and `bringup`.

The emulated robot runs in the test process at real rate; the capture runs in a
subprocess, as on the robot. Host times are CLOCK_MONOTONIC in both processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import capture_util as cu
import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers.ld19_parser import TIMESTAMP_MODULUS_MS, LD19Parser
from sensorbench.drivers.pods_parser import PodStreamParser
from sensorbench.logs import Session
from sensorbench.sim.emulated_robot import EmulatedRobot

# the capture subprocess's start-up deadline assumes compiled reader kernels
pytestmark = pytest.mark.usefixtures("warm_readers")

SENSORBENCH = [sys.executable, "-m", "sensorbench.cli"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


def _start_capture(run_dir, out, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        _cli(
            "capture",
            "--config",
            str(cu.EMULATED_CONFIG),
            "--run-dir",
            str(run_dir),
            "-o",
            str(out),
            "--label",
            "cli",
            *extra,
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_recording(proc: subprocess.Popen, out, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, proc.communicate()
        with contextlib.suppress(Exception), Session(out) as s:
            if len(s.encoder("pods")) > 0 and s.lidar("lidar_rear").n_turns > 0:
                return
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"capture did not start recording: {proc.communicate()}")


def _last_times(out) -> dict[str, int]:
    """Host time (ns) of the newest data of every stream in the file."""
    with Session(out) as s:
        last = {f"raw/{n}": int(s.raw(n).chunk_times_ns[-1]) for n in s.raw_names()}
        for n in s.lidar_names():
            turns = s.lidar(n).read()
            last[f"lidar/{n}"] = int(turns.t_ns.max())
        last["encoder/pods"] = int(s.encoder("pods").read().host_ns[-1])
    return last


def _before_last_chunk(s: Session, name: str) -> bytes:
    """The raw bytes of device ``name`` up to (not including) its last chunk."""
    return b"".join(data for _, data in list(s.raw(name).iter_chunks())[:-1])


def _a1_bound_ns(s: Session, name: str) -> int:
    """Host time (ns) the A1's newest turn must reach.

    A reader queues each chunk's bytes, then what they complete, on the writer's one
    FIFO queue, and a flush writes a prefix of that queue: a file holding a device's last
    chunk holds everything the chunk before it completed. An A1 sends no device time: its
    points are timed from the read that brought them, so the turns reach that chunk's read
    time less one turn (the turn it may leave open) and 0.01 s for a 12-point packet's lag.
    """
    period = int(np.diff(s.lidar(name).read().t_first_ns[-20:]).max())
    return int(s.raw(name).chunk_times_ns[-2]) - period - 10_000_000


def _ld19_shortfall_ms(s: Session) -> float:
    """How far (ms, device clock) the LD19's newest turn starts before the last packet the
    bytes before its last chunk complete, less two turns (the one that packet may leave
    open and the one before it): > 0 means a completed turn is missing from the file.

    Compared on the device's own clock (its 30 000-ms timestamp, modulo its wrap), so a
    late emulator or a starved reader, which shift host times, change nothing here.
    """
    turns = s.lidar("ld19").read()
    packets = LD19Parser().feed(_before_last_chunk(s, "ld19"))
    period_ms = float(np.diff(turns.device_ns[-20:]).max()) / 1e6
    lead = float(packets.timestamp_ms[-1]) - turns.device_ns[-1] / 1e6
    lead = (lead + TIMESTAMP_MODULUS_MS / 2) % TIMESTAMP_MODULUS_MS - TIMESTAMP_MODULUS_MS / 2
    return lead - 2 * period_ms


def _pods_missing_frames(s: Session) -> int:
    """Pod frames the bytes before the pods' last chunk complete that the file lacks."""
    frames = PodStreamParser().feed(_before_last_chunk(s, "pods"))
    return len(frames) - len(s.encoder("pods"))


def test_sigkill_mid_run_leaves_a_file_check_opens_with_at_most_1_s_missing(tmp_path) -> None:
    out = tmp_path / "s.h5"
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2):
        proc = _start_capture(tmp_path / "run", out, "--duration", "60")
        _wait_recording(proc, out)
        time.sleep(1.5)
        killed_ns = time.monotonic_ns()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    last = _last_times(out)  # opens (SWMR-consistent prefix) without recovery
    assert set(last) == {
        "raw/ld19",
        "raw/lidar_front",
        "raw/lidar_rear",
        "raw/pods",
        "lidar/ld19",
        "lidar/lidar_front",
        "lidar/lidar_rear",
        "encoder/pods",
    }
    missing_s = {k: (killed_ns - t) / 1e9 for k, t in last.items()}
    # the writer's promise, on what it was handed: each device's bytes up to the last
    # flush, due 0.5 s after the previous one took its queue (docs/FORMAT.md): <= 1 s
    assert max(v for k, v in missing_s.items() if k.startswith("raw/")) <= 1.0, missing_s
    # a decoded stream holds all its device's bytes but the last chunk completed
    with Session(out) as s:
        for name in ("lidar_front", "lidar_rear"):
            short_s = (_a1_bound_ns(s, name) - last[f"lidar/{name}"]) / 1e9
            assert short_s <= 0, (name, short_s, missing_s)
        short_ms, missing_frames = _ld19_shortfall_ms(s), _pods_missing_frames(s)
    assert short_ms <= 0, (short_ms, missing_s)
    assert missing_frames <= 0, (missing_frames, missing_s)
    time.sleep(max(0.0, 2.1 - (time.monotonic_ns() - killed_ns) / 1e9))  # check's age guard
    done = subprocess.run(
        _cli("check", str(out), "--json"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["status"] == "recovered" and "recovered" in doc
    assert doc["rows"]["encoders/pods"] > 200  # 1.5 s at 200 Hz, most of it kept
    after = _last_times(out)
    assert all(after[k] == last[k] for k in last)  # recovery kept every consistent row


@pytest.mark.slow
def test_sigterm_stops_cleanly_with_a_summary(tmp_path) -> None:
    out = tmp_path / "s.h5"
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2):
        proc = _start_capture(tmp_path / "run", out, "--note", "sigterm test")
        _wait_recording(proc, out)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr
    assert "stopped by stop" in stdout
    for name in ("lidar_front", "lidar_rear", "ld19", "pods"):
        assert name in stdout
    assert "bring-up lidar_front: ok" in stderr
    # not a tty: status lines every 5 s at most; the first comes at once
    assert stderr.count(" | pods ") >= 1
    with Session(out) as s:
        assert s.status.name == "CLOSED" and s.attrs["note"] == "sigterm test"
        kinds = [(e.source, e.kind) for e in s.events()]
        assert ("capture", "stop") in kinds and ("capture", "start") in kinds
        assert np.all(np.diff(s.encoder("pods").read().seq) == 1)


@pytest.mark.slow
def test_bringup_command_table_and_exit_code(tmp_path) -> None:
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2) as robot:
        args = ["bringup", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(tmp_path / "run")]
        done = subprocess.run(_cli(*args, "--json"), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        assert [r["name"] for r in rows] == ["lidar_front", "lidar_rear", "ld19", "pods"]
        assert all(r["ok"] for r in rows)
        robot["ld19"].unplug()
        done = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    line = next(x for x in done.stdout.splitlines() if x.startswith("ld19"))
    assert "FAILED" in line
    assert all("ok" in x for x in done.stdout.splitlines()[1:] if not x.startswith("ld19"))


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["binary", "csv"])
def test_emulate_pods_prints_its_path_and_serves(tmp_path, protocol: str) -> None:
    import serial

    from sensorbench.drivers.pods_parser import PodStreamParser

    link = tmp_path / "pods"
    proc = subprocess.Popen(
        _cli(
            "emulate",
            "pods",
            "--protocol",
            protocol,
            "--link",
            str(link),
            "--speed",
            "5",
            "--duration",
            "10",
        ),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == str(link)
        p, n, deadline = PodStreamParser(3, 16, protocol), 0, time.monotonic() + 10.0
        with serial.Serial(str(link), 115200, timeout=0.5) as ser:
            while n <= 50 and time.monotonic() < deadline:  # a starved emulator comes late
                n += len(p.feed(ser.read(4096)))
        assert n > 50 and p.stats.crc_errors <= 1  # the first may be cut
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    assert proc.returncode == 0
    assert not os.path.exists(link)


@pytest.mark.parametrize("device", ["ld19", "a1", "pods", "robot"])
@pytest.mark.parametrize(
    "bad", [["--speed", "0"], ["--speed", "0.001"], ["--duration", "-1"], ["--seed", "-3"]]
)
def test_emulate_refuses_out_of_range_options_before_starting(
    tmp_path, device: str, bad: list[str]
) -> None:
    """Every emulator takes the same --speed/--duration/--seed ranges, checked by click."""
    extra = ["--run-dir", str(tmp_path / "run")] if device == "robot" else []
    res = CliRunner().invoke(cli, ["emulate", device, *extra, *bad])
    assert res.exit_code == 2, res.output
    assert f"Invalid value for '{bad[0]}'" in res.output
    assert not (tmp_path / "run").exists()  # nothing was started
