"""A recording on a disk that fills stops with its file closed intact; HDF5 never meets
the full disk (it used to: `live` then died of SIGSEGV at exit after "Can't decrement id
ref count ... errno = 28", in about 1 of 2 runs).

Real processes on real file systems: a small tmpfs mounted for the test (root only; those
cases skip, saying so, elsewhere) filled by another writer while `live` or `capture` runs,
and a live session writer that runs into a full tmpfs or its process's file-size limit
(RLIMIT_FSIZE, needs no mount). A crash shows as rc -11; every case runs more than once
(the crash was intermittent).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import capture_util as cu
import numpy as np
import pods_util
import pytest

from sensorbench.logs import Session
from sensorbench.logs.check import check_session
from sensorbench.logs.schema import FileStatus
from sensorbench.sim.emulator_pods import PodEmulator

# live subprocesses load the compiled kernels from the cache this fills: a cold compile
# (over a minute with a second copy of the suite beside it) is not their start-up deadline
pytestmark = pytest.mark.usefixtures("warm_kernels")

SENSORBENCH = [sys.executable, "-c", "from sensorbench.cli import main; main()"]
PODS_MODEL = cu.REPO / "examples" / "models" / "pods-emulated.toml"


@pytest.fixture
def disk(tmp_path):
    """A 40 MiB tmpfs: room for `live`'s 32 MiB reserve at the start."""
    path = tmp_path / "disk"
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(path)],
                          capture_output=True, timeout=20)  # fmt: skip
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield path
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=20)


def _fill(directory: Path, leave: int = 0) -> None:
    """Write a file into ``directory`` until its file system has at most ``leave`` bytes free."""
    block = bytes(2**20)
    with open(directory / "filler", "wb", buffering=0) as f:
        while True:
            room = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize - leave
            if room <= 0:
                return
            try:
                f.write(block[: min(room, len(block))])
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                return


@pytest.mark.parametrize("command", ["live", "live", "live", "capture"])
def test_a_disk_filled_mid_run_stops_the_recording_with_the_file_closed_intact(
    tmp_path, disk, command
) -> None:
    samples = pods_util.make_samples(n=200 * 60, step=50, drift=(0, 0, 0), seed=5)
    em = PodEmulator(samples, link=str(tmp_path / "pods"), loop=True)
    em.start()
    out = disk / "s.h5"
    models = ["--pods", str(PODS_MODEL)] if command == "live" else []
    proc = subprocess.Popen(
        [*SENSORBENCH, command, "--config", str(cu.pods_only_config(tmp_path, em.port.name)),
         "-o", str(out), "--duration", "60", *models],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        end = time.monotonic() + 60
        while not out.exists():
            assert time.monotonic() < end and proc.poll() is None, "the recording never started"
            time.sleep(0.1)
        time.sleep(3.0)  # recording for a while
        _fill(disk)
        filled = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        em.stop()
    assert proc.returncode == 2, err  # docs/CAPTURE.md: a full disk is exit 2, file intact
    assert "Traceback" not in err and "decrement" not in err, err
    assert "disk" in err and "full" in err, err
    assert time.monotonic() - filled < 30  # stopped by the disk, not by the 60-s duration
    report = check_session(out)
    assert report.ok and report.status == FileStatus.CLOSED, report.errors
    with Session(out) as ses:
        seq = ses.encoder("pods").read().seq
    assert seq.size > 200  # > 1 s at 200 Hz, all in order
    assert np.all(np.diff(seq) > 0)


_WRITER = """
import resource, sys, time
import numpy as np
from sensorbench.errors import SessionError
from sensorbench.logs import EncoderBatch, SessionWriter
if sys.argv[2] != "0":
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.RLIM_INFINITY))
w = SessionWriter(sys.argv[1], flush_interval_s=0.05)
w.add_encoder("pods")
w.start()
n, end = 0, time.monotonic() + 60
try:
    while time.monotonic() < end:
        t = np.arange(n, n + 500)
        w.append_encoder("pods", EncoderBatch(t, t, t, np.stack([t] * 3, 1), 0 * t, 0 * t))
        n += 500
        time.sleep(0.005)
except SessionError as exc:
    print("append:", exc)
try:
    w.close()
except SessionError as exc:
    print("close:", exc)
print("appended", n)
"""


@pytest.mark.parametrize("limit", ["full tmpfs", "file-size limit"])
@pytest.mark.parametrize("run", [1, 2])
def test_a_live_writer_without_room_closes_its_file_intact(tmp_path, limit, run) -> None:
    """Nothing of a flush the disk has no room for is written: the file ends closed with
    a prefix of what was appended, the writer's error says so, the process exits 0."""
    where, fsize = tmp_path, 3 * 2**20
    if limit == "full tmpfs":
        where = tmp_path / "disk"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)],
                              capture_output=True, timeout=20)  # fmt: skip
        if done.returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root)")
        _fill(where, leave=2 * 2**20)
        fsize = 0
    out = where / "s.h5"
    try:
        done = subprocess.run([sys.executable, "-c", _WRITER, str(out), str(fsize)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr  # -11: HDF5 met the full disk
        assert "Traceback" not in done.stderr and "decrement" not in done.stderr, done.stderr
        assert "closed intact" in done.stdout, done.stdout
        appended = int(done.stdout.split("appended ")[1])
        report = check_session(out)
        assert report.ok and report.status == FileStatus.CLOSED, report.errors
        with Session(out) as ses:
            seq = ses.encoder("pods").read().seq
        assert 0 < seq.size < appended
        np.testing.assert_array_equal(seq, np.arange(seq.size))  # a prefix, nothing torn
        if fsize:
            assert out.stat().st_size <= fsize
    finally:
        if limit == "full tmpfs":
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=20)
