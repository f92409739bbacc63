"""Progress on stderr: drawn when stderr is a terminal (a real pty here), never otherwise.

The command runs in a child process whose stderr is the slave side of a pseudo-terminal
and whose stdout is a pipe: the bar must appear on the terminal and stdout must hold
exactly what it holds without one.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli

pytest.importorskip("rosbags")
from test_logs_import_tf import write_tf_bag

DEADLINE_S = 60.0


def _run_with_tty_stderr(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, what the terminal on stderr showed)."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from sensorbench.cli import main; main()", *args],
            stdout=subprocess.PIPE,
            stderr=slave,
            stdin=subprocess.DEVNULL,
        )
        os.close(slave)
        slave = -1
        shown = b""
        end = time.monotonic() + DEADLINE_S
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=max(1.0, end - time.monotonic()))
        return proc.returncode, out.decode(), shown.decode(errors="replace")
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def test_import_shows_progress_on_a_terminal_only(tmp_path: Path) -> None:
    bag = write_tf_bag(tmp_path, "mcap")
    args = ["import", "rosbag", str(bag), "--tf", "map:camera_link=cam"]
    code, out, shown = _run_with_tty_stderr([*args, "--into", str(tmp_path / "a.h5")])
    assert code == 0, (out, shown)
    assert "reading tf_mcap" in shown and "100%" in shown
    assert "reading" not in out and out.startswith("imported ")
    r = CliRunner().invoke(cli, [*args, "--into", str(tmp_path / "b.h5")])  # not a terminal
    assert r.exit_code == 0 and "reading" not in r.output and "%" not in r.output
    assert r.output.replace(str(tmp_path / "b.h5"), "S") == out.replace(str(tmp_path / "a.h5"), "S")


def test_fit_draws_a_bar_on_a_terminal_and_nothing_with_json(tmp_path: Path) -> None:
    import pose_util

    (series,) = pose_util.campaign(21, "correct", n_sessions=1, duration_s=20.0)
    h5 = tmp_path / "s.h5"
    pose_util.write_session(h5, series)
    args = ["fit", "pose-error", str(h5), "--sensor", "cam", "--no-align", "--time-offset", "0"]
    code, out, shown = _run_with_tty_stderr(args)
    assert code == 0, (out, shown)
    assert "fitting the pose-error model" in shown and "100%" in shown
    assert "fitting" not in out and "sigma" in out
    code, out, shown = _run_with_tty_stderr([*args, "--json"])
    assert code == 0 and out.lstrip().startswith("{")
    assert "fitting" not in shown and "%" not in shown
