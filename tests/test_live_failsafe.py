"""`live` fails safe: what can be checked is checked before any device is powered, a
failure after the session opened leaves it closed and valid, and a device lost for good
ends in exit 1.

The robot is one pod MCU emulator on a real pty in this process (the pods-only
configuration of the emulated robot); `live` runs as a subprocess, as on the robot.
"Nothing powered" is seen from the emulator: the host never opened its port (the pty
never got the pods' 115200 baud) and no session file exists.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import capture_util as cu
import pods_util
import pytest

from sensorbench.logs.check import check_session
from sensorbench.sim.emulator_pods import PodEmulator
from sensorbench.sim.pty import PtyPort

# live subprocesses load the compiled kernels from the cache this fills: a cold compile
# (over a minute with a second copy of the suite beside it) is not their start-up deadline
pytestmark = pytest.mark.usefixtures("warm_kernels")

MODELS = cu.REPO / "examples" / "models"
PODS = MODELS / "pods-emulated.toml"



def _live(config: Path, out: Path, *args: str, timeout_s: float = 120.0):
    return subprocess.run(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "live",
         "--config", str(config), "-o", str(out), "--pods", str(PODS), *args],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


@pytest.fixture
def pods(tmp_path):
    s = pods_util.make_samples(n=200 * 60, step=50, drift=(0, 0, 0), seed=5)
    em = PodEmulator(s, link=str(tmp_path / "pods"), loop=True)
    em.start()
    yield em
    em.stop()


def _taken_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize(
    "case", ["udp host", "foxglove port", "pose model", "missing port", "output exists"]
)
def test_bad_set_ups_are_refused_before_any_device_is_powered(tmp_path, pods, case) -> None:
    config = cu.pods_only_config(tmp_path, pods.port.name)
    out = tmp_path / "s.h5"
    taken = _taken_port()
    args = {
        "udp host": ["--udp", "no-such-host.invalid:9999"],
        "foxglove port": ["--foxglove", f"127.0.0.1:{taken.getsockname()[1]}"],
        "pose model": ["--pose-model", str(PODS)],
        "missing port": [],
        "output exists": [],
    }[case]
    if case == "missing port":
        config = cu.pods_only_config(tmp_path, str(tmp_path / "no-such-port"))
    if case == "output exists":
        out.write_bytes(b"mine")
    done = _live(config, out, "--duration", "2", *args)
    taken.close()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "error" in done.stderr.lower()
    assert pods.port.host_baud() != 115200  # the host never opened the pods' port
    if case == "output exists":
        assert out.read_bytes() == b"mine"
    else:
        assert not out.exists()


def test_a_file_system_without_room_is_refused_before_powering(tmp_path, pods) -> None:
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(small)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here")
    try:
        config = cu.pods_only_config(tmp_path, pods.port.name)
        done = _live(config, small / "s.h5", "--duration", "2")
        assert done.returncode == 2 and "MiB free" in done.stderr, done.stderr
        assert not (small / "s.h5").exists()
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_pods_that_never_came_up_leave_a_closed_valid_session_and_exit_1(tmp_path) -> None:
    with PtyPort(link=tmp_path / "pods"):  # a port that is there, a device that says nothing
        config = cu.pods_only_config(tmp_path, str(tmp_path / "pods"))
        out = tmp_path / "s.h5"
        done = _live(config, out, "--duration", "2", "--allow-missing")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "the filters do not run" in done.stderr
    assert check_session(out).ok


def test_a_device_lost_for_good_makes_live_exit_1(tmp_path, pods) -> None:
    config = cu.pods_only_config(tmp_path, pods.port.name)
    out = tmp_path / "s.h5"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", "live",
         "--config", str(config), "-o", str(out), "--pods", str(PODS), "--duration", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_opened(pods)
        pods.port.unplug()  # for good
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert "lost and never back: pods" in err
    assert check_session(out).ok


def _wait_opened(em: PodEmulator, deadline_s: float = 60.0) -> None:
    """Wait until the host opened the port at its baud, then for the reader to run."""
    end = time.monotonic() + deadline_s
    while em.port.host_baud() != 115200:
        assert time.monotonic() < end, "live never opened the pods port"
        time.sleep(0.05)
    time.sleep(3.0)  # the bring-up's open, then the reader's


def test_check_recover_repairs_a_closed_file_with_rows_past_its_consistent_data(tmp_path) -> None:
    """What a write failing on a full disk can leave: the file marked closed, one column
    of a stream longer than the others. `check --recover` keeps the consistent rows."""
    import h5py
    import numpy as np
    import session_util as su
    from click.testing import CliRunner

    from sensorbench.cli import cli
    from sensorbench.logs import Session

    path = su.write_small_session(tmp_path / "s.h5")
    with Session(path) as s:
        before = s.encoder("pods").read()
    with h5py.File(path, "a") as f:
        seq = f["encoders/pods/seq"]
        seq.resize((seq.shape[0] + 3,))  # three rows of one column only
    assert not check_session(path).ok
    done = CliRunner().invoke(cli, ["check", "--recover", str(path)])
    assert done.exit_code == 0, done.output
    assert check_session(path).ok
    with Session(path) as s:
        after = s.encoder("pods").read()
    np.testing.assert_array_equal(after.seq, before.seq)
    np.testing.assert_array_equal(after.counts, before.counts)
