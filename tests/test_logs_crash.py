"""Crash test: a writer at the full robot's rate is SIGKILLed; nothing older than 1 s is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import logs_crash_writer as cw
import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session

MAX_LOSS_S = 1.0


def _run_and_kill(path: Path, kill_after_s: float) -> tuple[int, list[tuple[str, int, int, int]]]:
    proc = subprocess.Popen(
        [sys.executable, cw.__file__, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(kill_after_s)
    kill_ns = time.monotonic_ns()
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL, err
    appended = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4:  # the last line may be cut by the kill
            appended.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return kill_ns, appended


@pytest.mark.parametrize("kill_after_s", [1.7, 2.6, 3.9])
def test_sigkill_loses_at_most_the_last_second(tmp_path: Path, kill_after_s: float) -> None:
    # The kill time is jittered by the seed-free scheduler anyway; three points in
    # the flush cycle (0.5 s) are covered by the fractional parts .7/.6/.9.
    path = tmp_path / "crash.h5"
    kill_ns, appended = _run_and_kill(path, kill_after_s)
    assert appended, "the writer process produced nothing before the kill"
    os.utime(path, (time.time() - 10, time.time() - 10))  # recovery refuses fresh files

    result = CliRunner().invoke(cli, ["check", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ok"] and doc["status"] == "recovered"

    must_have = [a for a in appended if a[3] < kill_ns - MAX_LOSS_S * 1e9]
    assert must_have, "kill came too early to test anything"
    with Session(path) as s:
        for name in cw.LIDARS:
            turns = s.lidar(name).read()
            want = [a for a in must_have if a[0] == name]
            n_points = sum(a[2] for a in want)
            assert turns.n_points >= n_points
            seq = np.arange(turns.n_points)
            a, r, i = cw.point_values(seq)
            assert np.array_equal(turns.angle, a) and np.array_equal(turns.range, r)
            assert np.array_equal(turns.intensity, i)
            assert turns.device_ns[: len(want)].tolist() == [a[1] for a in want]
            raw = s.raw(name).read_bytes()
            want_bytes = sum(a[2] for a in must_have if a[0] == f"raw:{name}")
            assert len(raw) >= want_bytes
            assert raw == cw.raw_payload(0, len(raw))
        pods = s.encoder("pods").read()
        want_frames = sum(a[2] for a in must_have if a[0] == "pods")
        assert len(pods) >= want_frames
        s_ = np.arange(len(pods))
        assert np.array_equal(pods.seq, s_)
        assert np.array_equal(pods.counts, np.stack([s_, 2 * s_, -s_], axis=1))
        assert s.raw("pods").read_bytes() == cw.raw_payload(0, s.raw("pods").n_bytes)
    assert (tmp_path / "crash.orig.h5").exists(), "the original file must be kept"
