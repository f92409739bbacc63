"""Concurrent updates of one session: a second writer waits or is refused, never lost.

``import --into`` (and everything else that adds to a session) copies the session,
modifies the copy and swaps it in. Two such updates at once used to both succeed
with one of them gone: each checked the original's identity, then both replaced it.
An advisory lock (``flock`` on a sidecar beside the session) is now held from before
the copy until the swap, so the second update starts from the first one's result.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import session_util as su

from sensorbench.errors import OutputError
from sensorbench.logs import Session
from sensorbench.logs.atomic_output import PendingUpdate
from sensorbench.logs.update_lock import UpdateLock, lock_path
from sensorbench.logs.writer import SessionWriter

HERE = Path(__file__).parent
ROUNDS = 4
SENSORBENCH = [sys.executable, "-c", "from sensorbench.cli import main; main()"]


def _add_pose(session: Path, name: str) -> None:
    with SessionWriter.add_to(session) as w:
        w.add_pose(name, "mocap")
        w.append_pose(name, su.pose_batch())


def test_two_updates_whose_commits_overlap_both_survive(tmp_path, monkeypatch) -> None:
    """The commits of two updates are made to overlap (a slow fsync in the first):
    without a lock both pass the identity check and the second replace loses the
    first stream; with it the second update copies the first one's result."""
    session = su.write_small_session(tmp_path / "s.h5")
    real_fsync = os.fsync
    first_committing = threading.Event()

    def slow_fsync(fd: int) -> None:
        if threading.current_thread().name == "first":
            first_committing.set()
            time.sleep(0.4)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    errors: list[BaseException] = []

    def run(name: str, wait_for: threading.Event | None) -> None:
        try:
            if wait_for is not None:
                assert wait_for.wait(10)
            _add_pose(session, name)
        except BaseException as exc:  # reported below
            errors.append(exc)

    first = threading.Thread(target=run, args=("first", None), name="first")
    second = threading.Thread(target=run, args=("second", first_committing), name="second")
    first.start()
    second.start()
    first.join(30)
    second.join(30)
    assert not first.is_alive() and not second.is_alive()
    assert errors == []
    with Session(session) as s:
        assert {"first", "second"} <= set(s.pose_names())
    assert not lock_path(session).exists()


def test_a_held_lock_makes_the_second_writer_refuse_after_its_deadline(tmp_path) -> None:
    session = su.write_small_session(tmp_path / "s.h5")
    before = session.read_bytes()
    with UpdateLock(session):
        t0 = time.monotonic()
        with pytest.raises(
            OutputError, match=rf"{session}.*being updated by process {os.getpid()}"
        ):
            PendingUpdate(session, wait_s=0.3)
        assert 0.3 <= time.monotonic() - t0 < 5
    assert session.read_bytes() == before
    assert not list(tmp_path.glob(".s.h5.*partial*"))


def test_a_lock_left_by_a_killed_writer_does_not_block(tmp_path) -> None:
    """flock dies with its process: a lock file left behind by SIGKILL is free."""
    session = su.write_small_session(tmp_path / "s.h5")
    code = (
        "import sys, time; from sensorbench.logs.update_lock import UpdateLock\n"
        "UpdateLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(session)], stdout=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"held\n"
        with pytest.raises(OutputError, match="being updated"):
            PendingUpdate(session, wait_s=0.1)
    finally:
        p.kill()
        p.wait(10)
    assert lock_path(session).exists()  # left behind by the kill
    _add_pose(session, "after")
    with Session(session) as s:
        assert "after" in s.pose_names()


def _import(tum: Path, session: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            *SENSORBENCH,
            "import",
            "mocap",
            str(tum),
            "--format",
            "tum",
            "--into",
            str(session),
            "--name",
            name,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_import_into_one_session_never_loses_a_stream(tmp_path) -> None:
    """Two ``import --into`` processes on one session, started together, several rounds:
    each stream whose import said it succeeded is in the session; a refusal exits 2."""
    tum = su.write_tum(tmp_path / "m.tum", 2000)
    for r in range(ROUNDS):
        session = su.write_small_session(tmp_path / f"s{r}.h5")
        procs = {name: _import(tum, session, name) for name in ("a", "b")}
        results = {name: (p.wait(120), *p.communicate()) for name, p in procs.items()}
        with Session(session) as s:
            present = set(s.pose_names())
        for name, (rc, _out, err) in results.items():
            assert "Traceback" not in err
            assert rc in (0, 2), err
            if rc == 0:
                assert name in present, f"round {r}: import {name} succeeded but is lost"
            else:
                assert "being updated" in err and str(session) in err
        assert not lock_path(session).exists()
