"""`live` under capture's faults: an A1 unplugged, the pods stalled, SIGKILL, SIGTERM.

The scenarios are capture's (tests/test_capture_faults.py, tests/test_capture_cli.py):
the emulated robot runs in this process at real rate, the live run in a thread (the
unplug and the stall, with a UDP socket of this test) or in a subprocess (the
signals). What capture guarantees still holds, and on top: the other devices and the
filters go on while a lidar is away; the filters coast and say so while the pods are
silent; whatever the session holds, `replay` gives the same estimate again.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import capture_util as cu
import numpy as np
import pytest

from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.fusion.estimate_stream import estimate_times_ns
from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.fusion.pod_kinematics import load_pod_model
from sensorbench.live.odometry import OdometryModels
from sensorbench.live.runtime import LiveOptions, LiveRuntime, live_failures, live_summary
from sensorbench.live.udp import PREDICTED, unpack
from sensorbench.logs import PoseFlag, Session, TurnFlag
from sensorbench.sim.emulated_robot import EmulatedRobot

# the live subprocess's start-up deadlines assume compiled reader kernels and filters
pytestmark = pytest.mark.usefixtures("warm_kernels")

MODELS = cu.REPO / "examples" / "models"
PODS, NOISE = MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


def _wait_for(fn, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with contextlib.suppress(Exception):
            if fn():
                return
        time.sleep(0.1)
    raise AssertionError(f"{what} within {deadline_s} s")


def _estimating(out) -> bool:
    with Session(out) as s:
        return len(s.pose("estimate")) > 10


def _wait_for_estimates(out, thread) -> None:
    """Until the run's estimate has rows, or the run ended without: its bring-up and
    recording have their own deadlines (bring-up alone took 55 s on a loaded machine)."""
    _wait_for(lambda: _estimating(out) or not thread.is_alive(), 300, "neither estimates nor end")
    assert _estimating(out), "the run ended without estimating"


def _assert_replay_matches(out) -> np.ndarray:
    """The session's estimate is what replay computes from its pod stream (prefix when
    the run was killed); returns the estimate's flags."""
    rp = replay_session(out, load_pod_model(PODS), load_noise_model(NOISE), repair=False)
    with Session(out) as s:
        est = s.pose("estimate").read()
    n = len(est)
    t = estimate_times_ns(rp.t0_ns, rp.result.t_s)
    assert 0 < n <= t.size
    np.testing.assert_array_equal(est.t_ns, t[:n])
    assert np.abs(est.position[:, :2] - rp.result.pose[:n, :2]).max() <= 1e-9
    return est.flags


class _Udp:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.got: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                self.got.append((time.monotonic_ns(), unpack(self.sock.recv(4096))))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def _live_in_thread(robot, out, duration_s, udp: _Udp):
    models = OdometryModels.from_files(PODS, NOISE, imu=True)
    runtime = LiveRuntime(robot.config, models, LiveOptions(udp=udp.sock.getsockname()))
    thread, box = cu.run_in_thread(
        run_capture, robot.config, out, duration_s, CaptureOptions(label="fault"),
        consumer=runtime,
    )  # fmt: skip
    return runtime, thread, box


def test_an_unplugged_a1_leaves_the_filters_and_the_other_devices_going(tmp_path) -> None:
    out, udp = tmp_path / "s.h5", _Udp()
    try:
        with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2) as robot:
            runtime, thread, box = _live_in_thread(robot, out, 8.0, udp)
            _wait_for_estimates(out, thread)
            t_unplug, t_replug = cu.unplug_a_while(robot, "lidar_rear")
            thread.join(60)
    finally:
        udp.close()
    assert "error" not in box, box.get("error")
    result = box["result"]
    assert result.ok and result.stopped_by == "duration"
    summary = {d.name: d for d in result.devices}
    assert summary["lidar_rear"].unplugs == 1 and summary["lidar_rear"].reconnects == 1
    with Session(out) as s:
        kinds = [e.kind for e in s.events() if e.source == "lidar_rear"]
        assert "unplug" in kinds and "reconnect" in kinds
        est = s.pose("estimate").read()
        merged = s.lidar("merged").read()
        notes = [e.message for e in s.events() if e.source == "live"]
    # the filters did not notice: an estimate every 5 ms frame through the unplug
    during = (est.t_ns > t_unplug) & (est.t_ns < t_replug)
    assert np.count_nonzero(during) > 0.8 * 200 * 3.0
    assert np.diff(est.t_ns[during]).max() < 0.02e9
    # the merge carries lidar_front alone through the unplug (it had a 3 s hole), flagged
    # and said, and merges pairs again after the replug
    t, alone = merged.t_first_ns, (merged.flags & int(TurnFlag.SINGLE_LIDAR)) != 0
    inside = (t > t_unplug) & (t < t_replug)
    assert np.diff(t[inside]).max() < 0.5e9 and np.count_nonzero(alone & inside) > 10
    assert np.count_nonzero(~alone & (t > t_replug)) >= 3
    assert "merge: lidar_front alone (lidar_rear silent): single-lidar scans" in notes
    assert "merge: pairs again" in notes
    live = live_summary(runtime)
    assert live["single_lidar_scans"]["lidar_front"] == np.count_nonzero(alone) > 10
    assert live["errors"] == []
    # UDP went on at the step rate
    stamps = np.array([d.stamp_ns for _, d in udp.got])
    assert np.count_nonzero((stamps > t_unplug) & (stamps < t_replug)) > 30
    flags = _assert_replay_matches(out)
    assert not np.any(flags & int(PoseFlag.COASTING))


def test_stalled_pods_make_the_filters_coast_and_say_so(tmp_path) -> None:
    out, udp = tmp_path / "s.h5", _Udp()
    try:
        with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2) as robot:
            runtime, thread, box = _live_in_thread(robot, out, 7.0, udp)
            _wait_for_estimates(out, thread)
            time.sleep(1.0)
            t_stall = time.monotonic_ns()
            robot["pods"].stall(1.5)
            thread.join(60)
    finally:
        udp.close()
    assert "error" not in box, box.get("error")
    assert box["result"].ok
    predicted = [(t, d) for t, d in udp.got if d.flags & PREDICTED]
    # The stall runs from the last frame received before t_stall to the first one received
    # 1.5 s after it (nothing sent during the stall arrives). Frames sent before the stall
    # and published late (a reader behind on a busy machine) may arrive inside it and split
    # its predictions into runs; a busy machine may also leave the worker without frames for
    # > coast_s (0.1 s) outside the stall, and those gaps get predictions too, as they should.
    # Each run between two frames holds at most one prediction per coast_s of its span, and
    # the stall's runs together at least one per 2 coast_s once a run is coast_s old.
    got = udp.got
    frame_at = [i for i, (_, d) in enumerate(got) if not d.flags & PREDICTED]
    i0 = max(i for i in frame_at if got[i][0] < t_stall)
    i1 = min((i for i in frame_at if got[i][0] >= t_stall + 1.5e9), default=None)
    assert i1 is not None, "the run ended before the pods spoke again"
    bounds = [i for i in frame_at if i0 <= i <= i1]
    runs = [(got[a + 1 : b], (got[b][0] - got[a][0]) / 1e9) for a, b in itertools.pairwise(bounds)]
    runs = [(run, span_s) for run, span_s in runs if run]
    assert runs, "no prediction during the stall"
    for run, span_s in runs:
        assert len(run) <= span_s / 0.1, (len(run), span_s)
    least = sum(max(0.0, span_s - 0.1) / 0.2 for _, span_s in runs) - len(runs)
    assert sum(len(run) for run, _ in runs) >= least, runs
    for run, _ in runs:
        var = [d.covariance[0] for _, d in run]
        assert all(b > a for a, b in itertools.pairwise(var))
    assert all(d.frames == 0 for _, d in predicted)
    with Session(out) as s:
        notes = [e.message for e in s.events() if e.source == "live"]
        stale = [e for e in s.events() if e.source == "pods" and e.kind == "stale"]
        t_ns = s.pose("estimate").read().t_ns
    assert any("publishing the prediction" in m for m in notes)
    assert any("pod frames again" in m for m in notes) and stale
    # COASTING marks each frame that ends a gap of the frames' own times longer than the
    # filters' stale_s (0.1 s), in the live estimate and in replay alike: the stall's end
    # among them. (Not one per prediction run: on a busy machine a reader behind also
    # leaves the worker without frames, with no gap in their times, and it predicts.)
    coasting = (_assert_replay_matches(out) & int(PoseFlag.COASTING)).astype(bool)
    gaps_s = np.diff(t_ns) / 1e9
    np.testing.assert_array_equal(coasting[1:], gaps_s > 0.1)
    assert gaps_s.max() >= 1.0 and coasting[1:][np.argmax(gaps_s)]  # the 1.5-s stall
    assert live_summary(runtime)["predictions"] == len(predicted)


def test_a_udp_destination_that_refuses_every_datagram_is_an_event_and_exit_1(tmp_path) -> None:
    """Every sendto failing (port 0: EINVAL) left the status line's "LIVE ERROR" the only
    trace: no event in the session and exit 0, though the robot got no pose."""
    out = tmp_path / "s.h5"
    models = OdometryModels.from_files(PODS, NOISE, imu=True)
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2, faults=False) as robot:
        runtime = LiveRuntime(robot.config, models, LiveOptions(udp=("127.0.0.1", 0)))
        result = run_capture(robot.config, out, 3.0, CaptureOptions(label="udp"),
                             consumer=runtime)  # fmt: skip
    assert result.ok, result.error
    assert runtime.udp is not None and runtime.udp.sent == 0 and runtime.udp.dropped > 100
    code, why = live_failures(result, runtime)
    assert code == 1 and why == [f"UDP pose to ('127.0.0.1', 0): [Errno {errno.EINVAL}] "
                                 f"{os.strerror(errno.EINVAL)}"]  # fmt: skip
    with Session(out) as s:
        errors = [e.message for e in s.events() if e.source == "live" and e.kind == "error"]
    assert errors == [f"publishing failed: {why[0]}"]


def _start_live(run_dir, out, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        _cli("live", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(run_dir),
             "--pods", str(PODS), "--noise", str(NOISE), "-o", str(out), *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_sigkill_leaves_a_recoverable_session_whose_estimate_replays(tmp_path) -> None:
    out = tmp_path / "s.h5"
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2):
        proc = _start_live(tmp_path / "run", out, "--duration", "60")
        try:
            _wait_for(lambda: _estimating(out), 40, "no estimate")
            time.sleep(2.0)
            killed_ns = time.monotonic_ns()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == -signal.SIGKILL
    time.sleep(2.1)  # check's age guard
    done = subprocess.run(_cli("check", str(out), "--json"), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] and doc["status"] == "recovered"
    with Session(out) as s:
        est = s.pose("estimate").read()
        assert est.covariance is not None and len(est) > 200
        assert (killed_ns - est.t_ns[-1]) / 1e9 <= 1.5  # flushed every 0.5 s
        assert s.lidar("merged").n_turns > 3
    _assert_replay_matches(out)


@pytest.mark.slow
def test_sigterm_stops_cleanly_with_the_live_summary(tmp_path) -> None:
    out = tmp_path / "s.h5"
    with EmulatedRobot(tmp_path / "run", speed=1.0, ld19_startup_s=0.2):
        proc = _start_live(tmp_path / "run", out)
        try:
            _wait_for(lambda: _estimating(out), 40, "no estimate")
            time.sleep(1.0)
            proc.send_signal(signal.SIGTERM)
            stdout, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, stderr
    assert "stopped by stop" in stdout and "filter steps" in stdout
    with Session(out) as s:
        assert s.status.name == "CLOSED"
        n_frames = len(s.encoder("pods"))
        assert len(s.pose("estimate")) == n_frames  # every frame filtered, at the stop too
    _assert_replay_matches(out)
