"""Crash test: a writer at the full robot's rate is SIGKILLed; nothing older than 1 s is lost."""

from __future__ import annotations

import json
import os
import select
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


def _first_line(proc: subprocess.Popen, deadline_s: float) -> bytes:
    """The child's first stdout line, read byte by byte (nothing is left in a buffer that
    ``communicate`` would not see); fails after ``deadline_s``."""
    fd = proc.stdout.fileno()
    line = b""
    end = time.monotonic() + deadline_s
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        assert ready, f"the writer printed nothing within {deadline_s} s"
        byte = os.read(fd, 1)
        assert byte, "the writer exited before its first append"
        line += byte
    return line


Append = tuple[str, int, int, int]
"""One announced append: stream, first sequence number, count, the child's t_ns."""


def _parse(text: bytes) -> list[Append]:
    out = []
    for line in text.decode().splitlines():
        parts = line.split()
        if len(parts) == 4:  # the last line may be cut by the kill
            out.append((parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return out


def _must_have(appended: list[Append], kill_ns: int) -> list[Append]:
    """The appends a kill at ``kill_ns`` must not lose.

    The writer flushes every 0.5 s when it gets to run. On a busy machine the child
    runs late: its appends (every STEP_S) then arrive further apart, and the writer
    thread beside them is delayed as much. What the child itself shows of that delay
    in its last 3 s is allowed on top of MAX_LOSS_S (0 on a quiet machine).
    """
    stamps = np.unique([a[3] for a in appended])
    recent = stamps[stamps > kill_ns - 3e9]
    late_ns = max(0.0, float(np.max(np.diff(recent), initial=0)) - cw.STEP_S * 1e9)
    return [a for a in appended if a[3] < kill_ns - MAX_LOSS_S * 1e9 - late_ns]


def _run_and_kill(path: Path, phase_s: float) -> tuple[int, list[Append]]:
    """Start the writer, and kill it ``MAX_LOSS_S + phase_s`` after its first append, or
    later if the machine has not let it run enough by then to test anything.

    Time is measured on the writer's own stamps (the same monotonic clock), not from the
    start of the process: on a busy machine the interpreter alone can take longer to
    start than a fixed delay allows. Its stdout is read all along (a full pipe would
    stall it). The kill waits until :func:`_must_have` holds an append even counting
    the time since the child's last announcement as one more delay of the child: what
    it announces between that check and the kill is then no further apart, so the
    test after the kill has something to check whatever the scheduler did.
    """
    proc = subprocess.Popen(
        [sys.executable, cw.__file__, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    first = _first_line(proc, deadline_s=120.0)
    appended = _parse(first)
    target_ns = appended[0][3] + int((MAX_LOSS_S + phase_s) * 1e9)
    fd = proc.stdout.fileno()
    pending = b""
    end = time.monotonic() + 120.0
    while True:
        now = time.monotonic_ns()
        if now >= target_ns and _must_have([*appended, ("now", 0, 0, now)], now):
            break
        assert time.monotonic() < end, "the writer did not run for long enough in 120 s"
        ready, _, _ = select.select([fd], [], [], min(max(target_ns - now, 0) / 1e9, 0.05))
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, "the writer exited before the kill"
            lines, _, pending = (pending + chunk).rpartition(b"\n")
            appended += _parse(lines)
    kill_ns = time.monotonic_ns()
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    return kill_ns, appended + _parse(pending + out)


@pytest.mark.parametrize("phase_s", [0.7, 1.6, 2.9])
def test_sigkill_loses_at_most_the_last_second(tmp_path: Path, phase_s: float) -> None:
    # three points in the flush cycle (0.5 s): the fractional parts .7/.6/.9 after the
    # first second of appends
    path = tmp_path / "crash.h5"
    kill_ns, appended = _run_and_kill(path, phase_s)
    assert appended, "the writer process produced nothing before the kill"
    os.utime(path, (time.time() - 10, time.time() - 10))  # recovery refuses fresh files

    result = CliRunner().invoke(cli, ["check", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["ok"] and doc["status"] == "recovered"

    must_have = _must_have(appended, kill_ns)
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
