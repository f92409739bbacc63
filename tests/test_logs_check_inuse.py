"""`check` never touches a file another process is writing (issue 14, item 3).

A silent live capture does not change its file's modification time, so the writer is
recognised by HDF5's own state (the lock of a non-SWMR writer; the superblock's SWMR
flag) and the writer record in ``/_status`` (pid, host, process start time). Recovery
never overwrites anything: the original is kept under a free name.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import FileStatus, Session
from sensorbench.logs.update_lock import writer_alive, writer_record

HERE = Path(__file__).parent
LIVE = HERE / "logs_live_writer.py"


def _start(args: list[str]) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    line = proc.stdout.readline()
    assert line.strip() == "ready", proc.communicate(timeout=10)
    return proc


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=10)


def _check(path: Path, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["check", str(path), "--json", *extra])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.output)


def _age(path: Path, seconds: float) -> None:
    """Make the file look untouched for ``seconds`` (a device that went silent)."""
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_silent_live_capture_is_in_use_and_left_alone(tmp_path) -> None:
    path = tmp_path / "live.h5"
    proc = _start([str(LIVE), str(path)])
    try:
        _age(path, 60)
        inode = path.stat().st_ino
        code, doc = _check(path)
        assert code == 1
        assert "its writer is running" in doc["in_use"] and f"pid {proc.pid}" in doc["in_use"]
        assert "recovered" not in doc and doc["status"] == "writing"
        # nothing renamed; the writer holds its lock file (no --force replaces the file)
        assert sorted(p.name for p in tmp_path.iterdir()) == [".live.h5.lock", "live.h5"]
        assert path.stat().st_ino == inode and proc.poll() is None
        text = CliRunner().invoke(cli, ["check", str(path)]).output
        assert "is in use" in text and "not touched" in text
    finally:
        _kill(proc)
    # once its writer is gone the same file is recovered, with every row it had
    code, doc = _check(path)
    assert code == 0 and doc["status"] == "recovered", doc
    assert doc["rows"]["lidar/front"] == su.TURNS
    with Session(path) as s:
        assert s.lidar("front").read().n_points == su.TURNS * su.POINTS


def test_a_non_swmr_writer_holding_the_file_is_in_use(tmp_path) -> None:
    path = su.write_small_session(tmp_path / "s.h5")
    holder = (
        "import sys, time, h5py; f = h5py.File(sys.argv[1], 'a'); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = _start(["-c", holder, str(path)])
    try:
        code, doc = _check(path)
        assert code == 1 and "open for writing" in doc["in_use"], doc
        assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]
    finally:
        _kill(proc)
    # a writer killed outside SWMR leaves HDF5's open-for-write mark: said so, exit 2
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2 and "h5clear -s" in result.output, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


def test_recovery_never_overwrites_an_existing_backup(tmp_path) -> None:
    path = tmp_path / "run.h5"
    (tmp_path / "run.orig.h5").write_bytes(b"an earlier original, kept by the user")
    proc = _start([str(LIVE), str(path)])
    _kill(proc)
    original = su.sha256(path)
    code, doc = _check(path)
    assert code == 0 and doc["recovered"]["backup"] == str(tmp_path / "run.orig-2.h5")
    assert (tmp_path / "run.orig.h5").read_bytes() == b"an earlier original, kept by the user"
    assert su.sha256(tmp_path / "run.orig-2.h5") == original
    with Session(path) as s:
        assert s.status == FileStatus.RECOVERED


def test_a_writer_on_another_host_is_recovered_only_with_force(tmp_path) -> None:
    path = tmp_path / "robot.h5"
    proc = _start([str(LIVE), str(path), "robot-7"])
    _kill(proc)  # dead, but check cannot know: the record names another machine
    code, doc = _check(path)
    assert code == 1 and "robot-7" in doc["writer_unknown"] and "recovered" not in doc
    # the killed writer's lock file stays (unlocked: it blocks nobody) until the recovery
    assert sorted(p.name for p in tmp_path.iterdir()) == [".robot.h5.lock", "robot.h5"]
    code, doc = _check(path, "--force")
    assert code == 0 and doc["status"] == "recovered"


def test_writer_record_tells_a_recycled_pid_from_the_writer() -> None:
    me = writer_record()
    assert writer_alive(me).alive is True
    assert writer_alive({**me, "writer_start_ticks": me["writer_start_ticks"] - 1}).alive is False
    assert writer_alive({**me, "writer_host": "elsewhere"}).alive is None
    assert writer_alive({**me, "writer_boot_id": "another-boot"}).alive is False
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert writer_alive({**me, "writer_pid": gone.pid}).alive is False
    assert writer_alive({}).alive is False  # files from before writer records
