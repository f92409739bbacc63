"""`sensorbench demo --live`: the emulated robot live with the shipped models, then replayed."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import firmware_util
import numpy as np
import pytest

from sensorbench.demo.live import MODELS, run_live_demo
from sensorbench.errors import SessionError
from sensorbench.logs import Session

# live subprocesses load the compiled kernels from the cache this fills: a cold compile
# (over a minute with a second copy of the suite beside it) is not their start-up deadline
pytestmark = pytest.mark.usefixtures("warm_kernels")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


def _replay_matches(session, replayed) -> None:
    rp = subprocess.run(
        _cli("replay", str(session), "--pods", str(MODELS / "pods-emulated.toml"),
             "--noise", str(MODELS / "noise-emulated.toml"), "--no-repair", "-o", str(replayed)),
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert rp.returncode == 0, rp.stderr
    with Session(session) as a, Session(replayed) as b:
        x, y = a.pose("estimate").read(), b.pose("estimate").read()
        assert a.pose("estimate").has_covariance
    np.testing.assert_array_equal(x.t_ns, y.t_ns)
    np.testing.assert_array_equal(x.position, y.position)


def test_demo_live_runs_the_emulated_robot_and_its_session_replays(tmp_path) -> None:
    done = subprocess.run(
        _cli("demo", "--live", "--duration", "6", "--foxglove", "127.0.0.1:0", "-o",
             str(tmp_path), "--json"),
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["session"] == str(tmp_path / "live.h5")
    live = doc["live"]
    assert live["filter_steps"] > 50 and live["merged_scans"] > 10
    assert live["view"]["published"] == {}  # no viewer: the view built nothing
    with Session(tmp_path / "live.h5") as s:
        assert s.pose("estimate").has_covariance and s.lidar("merged").n_turns > 10
    _replay_matches(tmp_path / "live.h5", tmp_path / "replayed.h5")


def test_demo_live_with_the_firmware_as_the_pod_mcu(tmp_path) -> None:
    """The ATmega328P image under simavr serves the pods: its frames arrive gap-free
    without IMU fields, the filters run on them and the session replays exactly."""
    firmware_util.product("harness")
    elf = firmware_util.product("avr")
    done = subprocess.run(
        _cli("demo", "--live", "--pods-firmware", str(elf), "--duration", "6", "--foxglove",
             "127.0.0.1:0", "-o", str(tmp_path), "--json"),
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["live"]["filter_steps"] > 50
    with Session(tmp_path / "live.h5") as s:
        frames = s.encoder("pods").read()
        crc = [e for e in s.events() if e.source == "pods" and "CRC" in e.message]
    # 100 Hz frames for 6 s, each seq once, counts moving: the square drive is driving
    assert frames.seq.size > 400 and np.all(np.diff(frames.seq.astype(np.int64)) == 1)
    assert np.isnan(frames.yaw_rate).all() and not crc
    assert np.abs(frames.counts[-1] - frames.counts[0]).max() > 100
    _replay_matches(tmp_path / "live.h5", tmp_path / "replayed.h5")


def test_live_options_need_live() -> None:
    for option in (["--duration", "3"], ["--pods-firmware", __file__]):
        done = subprocess.run(_cli("demo", *option), capture_output=True, text=True,
                              timeout=60)  # fmt: skip
        assert done.returncode == 2 and f"{option[0]} applies to --live only" in done.stderr


def test_demo_live_closes_the_view_when_the_capture_fails_early(tmp_path) -> None:
    """The runtime opens (the view listening) before ``run_capture``; a capture that
    refuses at once (a zero duration) must leave no server listening on the port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SessionError, match="duration"):
        run_live_demo(tmp_path, ("127.0.0.1", port), 0.0, threading.Event())
    with socket.socket() as client, pytest.raises(ConnectionRefusedError):
        client.settimeout(5.0)
        client.connect(("127.0.0.1", port))
