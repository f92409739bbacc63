"""Every command that reads sessions refuses one still being written (it would read a
partial snapshot) and one whose writer died (``check --recover`` first): exit 2 with a
message naming the file, before any work.

The session is a real live (SWMR) writer in another process (``logs_live_writer.py``),
then the same file once that process is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli

HERE = Path(__file__).parent
PODS_MODEL = HERE / "data" / "old_model_files" / "pods.toml"

COMMANDS = {
    "fit pods": ["fit", "pods", "{S}"],
    "fit noise": ["fit", "noise", "{S}", "--pods", str(PODS_MODEL)],
    "characterize lidar": ["characterize", "lidar", "{S}", "--device", "front"],
    "report": ["report", "{S}", "-o", "{T}/report"],
    "validate": ["validate", "{S}", "{S}", "--sensor", "front"],
    "fit pose-error": ["fit", "pose-error", "{S}", "{S}", "--sensor", "front"],
    "merge": ["merge", "{S}", "--front", "front", "--rear", "front", "-o", "{T}/m.h5"],
    "replay": ["replay", "{S}", "--pods", str(PODS_MODEL)],
    "export": ["export", "{S}", "--format", "csv", "-o", "{T}/out.csv"],
}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A session being written by a running process; killed at the end of the module."""
    tmp = tmp_path_factory.mktemp("open")
    path = tmp / "live.h5"
    paths = [str(HERE), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "logs_live_writer.py"), str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "ready", proc.communicate(timeout=10)
    yield path, proc
    if proc.poll() is None:
        proc.kill()
        proc.communicate(timeout=10)


def _run(command: str, path: Path) -> tuple[int, str]:
    args = [a.replace("{S}", str(path)).replace("{T}", str(path.parent)) for a in COMMANDS[command]]
    done = CliRunner().invoke(cli, args)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    return done.exit_code, done.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_session_being_written_is_refused(written, command) -> None:
    path, proc = written
    assert proc.poll() is None
    code, output = _run(command, path)
    assert code == 2, output
    assert f"{path} is being written" in output and f"process {proc.pid}" in output, output
    assert "Traceback" not in output
    assert sorted(p.name for p in path.parent.iterdir()) == [".live.h5.lock", "live.h5"]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_session_whose_writer_died_is_refused(written, command) -> None:
    path, proc = written
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    code, output = _run(command, path)
    assert code == 2, output
    assert f"{path} was not closed" in output and "sensorbench check" in output, output
