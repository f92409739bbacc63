"""The live bench's children: one that hangs makes a failed run with the reason, is ended,
and the bench goes on (no traceback, the other runs' and benchmarks' results kept)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sensorbench.sim.pty import PtyPort

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ptys, /proc")

HANG = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]


def _hanging(started: list[subprocess.Popen]):
    real = subprocess.Popen

    def popen(args, **kw):  # every child hangs: it never ends and writes one line
        proc = real(HANG, **kw)
        started.append(proc)
        return proc

    return popen


def test_a_live_run_that_never_ends_is_a_failed_run_and_is_ended(
    tmp_path: Path, monkeypatch
) -> None:
    from sensorbench.benchmarks import live

    started: list[subprocess.Popen] = []
    monkeypatch.setattr(live.subprocess, "Popen", _hanging(started))
    monkeypatch.setattr(live, "START_S", 0.2)
    monkeypatch.setattr(live, "END_S", 0.5)
    with PtyPort(link=tmp_path / "feed", write_timeout_s=0.0) as pty:
        t0 = time.monotonic()
        run = live._live(tmp_path / "robot.toml", None, 0.3, tmp_path, pty)
    assert run.error is not None and "did not end 0.5 s after" in run.error
    assert started and all(p.poll() is not None for p in started)
    assert time.monotonic() - t0 < 0.3 + 0.2 + 0.5 + 10  # the feed, the wait, the ending


def test_an_emulated_robot_whose_devices_never_come_up_is_a_failed_run(
    tmp_path: Path, monkeypatch
) -> None:
    from sensorbench.benchmarks import live

    started: list[subprocess.Popen] = []
    monkeypatch.setattr(live.subprocess, "Popen", _hanging(started))
    monkeypatch.setattr(live, "START_S", 0.5)
    with PtyPort(link=tmp_path / "feed", write_timeout_s=0.0) as pty:
        run = live._robot_run(tmp_path / "robot.toml", tmp_path, pty, 0.3)
    assert run.error is not None and "devices not up within 0.5 s" in run.error
    assert len(started) == 1 and started[0].poll() is not None
