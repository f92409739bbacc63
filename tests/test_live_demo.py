"""`sensorbench demo --live`: the emulated robot live with the shipped models, then replayed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from sensorbench.demo.live import MODELS
from sensorbench.logs import Session


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


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
    assert live["view"]["published"]["/lidar/merged"] == live["merged_scans"]
    with Session(tmp_path / "live.h5") as s:
        assert s.pose("estimate").has_covariance and s.lidar("merged").n_turns > 10
    replayed = tmp_path / "replayed.h5"
    rp = subprocess.run(
        _cli("replay", str(tmp_path / "live.h5"), "--pods", str(MODELS / "pods-emulated.toml"),
             "--noise", str(MODELS / "noise-emulated.toml"), "--no-repair", "-o", str(replayed)),
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert rp.returncode == 0, rp.stderr
    with Session(tmp_path / "live.h5") as a, Session(replayed) as b:
        x, y = a.pose("estimate").read(), b.pose("estimate").read()
    np.testing.assert_array_equal(x.t_ns, y.t_ns)
    np.testing.assert_array_equal(x.position, y.position)


def test_live_options_need_live() -> None:
    done = subprocess.run(_cli("demo", "--duration", "3"), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 2 and "--live only" in done.stderr
