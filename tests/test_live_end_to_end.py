"""`sensorbench live` against `sensorbench emulate robot`, 20 s at real rate, as on the robot.

The emulated robot (LD19, two A1s, pod MCU) runs in one process, `live` in another
with the shipped models fitted on the emulated robot, a Foxglove server on a free port
and UDP datagrams to a socket of this test. A Foxglove protocol client
(:mod:`foxglove_client`: subprotocol, serverInfo, advertise, subscribe, binary
messageData decoded with the advertised protobuf schemas) checks every channel. The
session then holds every stream, and `replay` and `merge` of it give the live estimate
and the merged scans again, sample for sample.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import capture_util as cu
import numpy as np
import pytest
from foxglove_client import collect

from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.fusion.pod_kinematics import load_pod_model
from sensorbench.live.udp import PREDICTED, unpack
from sensorbench.logs import PoseFlag, Session
from sensorbench.logs.check import check_session

MODELS = cu.REPO / "examples" / "models"
PODS = MODELS / "pods-emulated.toml"
NOISE = MODELS / "noise-emulated.toml"
DURATION_S = 20.0
TOPICS = ("/lidar/ld19", "/lidar/lidar_front", "/lidar/lidar_rear", "/lidar/merged", "/tf",
          "/pose", "/path", "/events", "/status")  # fmt: skip


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


class _Lines:
    """A process's stream read line by line on a thread (nothing blocks the test)."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, text: str, deadline_s: float) -> str:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no {text!r} within {deadline_s} s: {''.join(self.lines)[-3000:]}")


def _receive(sock: socket.socket, out: list, stop: threading.Event) -> None:
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            out.append(unpack(sock.recv(4096)))
        except TimeoutError:
            continue


@pytest.fixture(scope="module")
def live_run(tmp_path_factory, warm_kernels):
    tmp = tmp_path_factory.mktemp("live")
    run, out = tmp / "run", tmp / "session.h5"
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # the frame clock's warm-up (the first second of frames) goes out in one burst of
    # ~200 datagrams: more than the default buffer holds (docs/LIVE.md)
    udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    udp.bind(("127.0.0.1", 0))
    datagrams: list = []
    stop = threading.Event()
    receiver = threading.Thread(target=_receive, args=(udp, datagrams, stop), daemon=True)
    receiver.start()
    emu = subprocess.Popen(
        _cli("emulate", "robot", "--run-dir", str(run), "--duration", "200"),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    live = None
    try:
        emu_out = _Lines(emu.stdout)
        deadline = time.monotonic() + 60
        while len(emu_out.lines) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(emu_out.lines) == 4, emu_out.lines
        live = subprocess.Popen(
            _cli("live", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(run),
                 "--pods", str(PODS), "--noise", str(NOISE), "--foxglove", "127.0.0.1:0",
                 "--udp", f"127.0.0.1:{udp.getsockname()[1]}", "--duration", str(DURATION_S),
                 "-o", str(out), "--label", "live-e2e", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        err = _Lines(live.stderr)
        url = err.wait_for("live view: ws://", 90).split()[2]

        def enough(r) -> bool:
            return all(len(r.messages.get(t, ())) >= 3 for t in TOPICS)

        # until every topic came 3 times, or the server closes with the run's end (after
        # DURATION_S of recording; the slack covers the stop on a loaded machine)
        fox = collect(url, DURATION_S + 60, until=enough)
        stdout, _ = live.communicate(timeout=DURATION_S + 90)
    finally:
        if live is not None and live.poll() is None:
            live.kill()
        emu.terminate()
        emu.wait(20)
        stop.set()
        receiver.join(5)
        udp.close()
    return {
        "out": out,
        "tmp": tmp,
        "code": live.returncode,
        "doc": json.loads(stdout),
        "stderr": "".join(err.lines),
        "fox": fox,
        "udp": datagrams,
    }


def test_live_ran_for_the_duration_with_every_device(live_run) -> None:
    assert live_run["code"] == 0, live_run["stderr"][-3000:]
    doc = live_run["doc"]
    assert doc["ok"] and doc["stopped_by"] == "duration"
    assert DURATION_S - 0.1 < doc["recorded_s"] < DURATION_S + 2
    assert {d["name"] for d in doc["devices"]} == {"ld19", "lidar_front", "lidar_rear", "pods"}
    live = doc["live"]
    # one filter step per pod read (50 ms) while keeping up; every frame filtered
    assert live["filter_steps"] > 10 * DURATION_S
    pods = next(d for d in doc["devices"] if d["name"] == "pods")
    assert live["frames_filtered"] == pods["items"] - 1  # the first frame is the start
    assert live["merged_scans"] > 4 * DURATION_S and live["errors"] == []
    # the status line carries the live part
    assert "filters " in live_run["stderr"] and "view :" in live_run["stderr"]


def test_foxglove_client_receives_every_channel(live_run) -> None:
    fox = live_run["fox"]
    assert fox.subprotocol in ("foxglove.sdk.v1", "foxglove.websocket.v1")
    assert fox.server_info["name"] == "sensorbench live"
    schemas = {c["topic"]: c["schemaName"] for c in fox.channels.values()}
    assert schemas == {
        "/lidar/ld19": "foxglove.LaserScan",
        "/lidar/lidar_front": "foxglove.LaserScan",
        "/lidar/lidar_rear": "foxglove.LaserScan",
        "/lidar/merged": "foxglove.LaserScan",
        "/tf": "foxglove.FrameTransforms",
        "/pose": "foxglove.PoseInFrame",
        "/path": "foxglove.PosesInFrame",
        "/events": "foxglove.Log",
        "/status": "sensorbench.LiveStatus",
    }
    for topic in TOPICS:
        assert len(fox.messages.get(topic, ())) >= 3, (
            topic,
            {k: len(v) for k, v in fox.messages.items()},
        )
    for name in ("ld19", "lidar_front", "lidar_rear"):
        scan = fox.messages[f"/lidar/{name}"][-1]
        assert scan["frame_id"] == name
        ranges = [float(r) for r in scan["ranges"]]
        finite = [r for r in ranges if math.isfinite(r)]
        assert len(ranges) >= 360 and len(finite) > 100 and 0.05 < np.median(finite) < 12
    merged = fox.messages["/lidar/merged"][-1]
    assert merged["frame_id"] == "base_link" and merged["start_angle"] == 0.0
    # the transform tree: odom -> base_link (the filters) -> each lidar (its mount)
    tf = fox.messages["/tf"][-1]["transforms"]
    edges = {(t["parent_frame_id"], t["child_frame_id"]): t for t in tf}
    assert set(edges) == {("odom", "base_link"), ("base_link", "ld19"),
                          ("base_link", "lidar_front"), ("base_link", "lidar_rear")}  # fmt: skip
    rear = edges[("base_link", "lidar_rear")]
    assert rear["translation"]["x"] == pytest.approx(-0.20)
    assert abs(rear["rotation"]["z"]) == pytest.approx(1.0)  # yaw 180°
    pose = fox.messages["/pose"][-1]
    assert pose["frame_id"] == "odom"
    odom = edges[("odom", "base_link")]["translation"]
    assert math.isfinite(odom["x"]) and math.isfinite(pose["pose"]["position"]["x"])
    assert len(fox.messages["/path"][-1]["poses"]) >= 2
    status = fox.messages["/status"][-1]
    rates = {d["name"]: d for d in status["devices"]}
    assert set(rates) == {"ld19", "lidar_front", "lidar_rear", "pods"}
    assert rates["pods"]["items_per_s"] > 150 and rates["ld19"]["turns_per_s"] > 5
    assert status["live"]["steps"] > 0
    # the events since the view started, replayed to this late subscriber: the streaming
    # readers' start (the A1s started in the bring-up, before) and the capture's
    events = {(e["name"], e["message"].split(":")[0]) for e in fox.messages["/events"]}
    assert {("pods", "start"), ("ld19", "start"), ("capture", "start")} <= events


def test_the_session_holds_every_stream(live_run) -> None:
    out = live_run["out"]
    assert check_session(out).ok
    with Session(out) as s:
        assert sorted(s.lidar_names()) == ["ld19", "lidar_front", "lidar_rear", "merged"]
        assert s.encoder_names() == ["pods"]
        assert sorted(s.raw_names()) == ["ld19", "lidar_front", "lidar_rear", "pods"]
        est = s.pose("estimate")
        assert est.attrs["kind"] == "estimate" and est.has_covariance
        b = est.read()
        var = b.covariance[:, [0, 1, 5], [0, 1, 5]]
        assert len(b) > 100 and np.all(var[1:] > 0)
        assert s.lidar("merged").read().n_turns == live_run["doc"]["live"]["merged_scans"]


def test_replay_of_the_session_reproduces_the_live_estimate(live_run) -> None:
    out, tmp = live_run["out"], live_run["tmp"]
    est_file = tmp / "replayed.h5"
    done = subprocess.run(
        _cli("replay", str(out), "--pods", str(PODS), "--noise", str(NOISE), "--no-repair",
             "-o", str(est_file), "--json"),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Session(out) as s, Session(est_file) as r:
        live, replayed = s.pose("estimate").read(), r.pose("estimate").read()
    np.testing.assert_array_equal(live.t_ns, replayed.t_ns)
    assert np.abs(live.position - replayed.position).max() <= 1e-9
    yaw = [2 * np.arctan2(b.quat_xyzw[:, 2], b.quat_xyzw[:, 3]) for b in (live, replayed)]
    assert np.abs(np.angle(np.exp(1j * (yaw[0] - yaw[1])))).max() <= 1e-9
    assert np.abs(live.covariance - replayed.covariance).max() <= 1e-15
    coast = int(PoseFlag.COASTING)
    np.testing.assert_array_equal(live.flags & coast, replayed.flags & coast)
    # DEGRADED live is every channel's, the pods-against-IMU check included (causal), with
    # tau = 1 (live has no whole-series autocorrelation time)
    rp = replay_session(
        out, load_pod_model(PODS), load_noise_model(NOISE), repair=False, monitor_tau=1.0
    )
    assert "pods_vs_imu" in rp.monitor
    np.testing.assert_array_equal((live.flags & int(PoseFlag.DEGRADED)) != 0, rp.degraded)


def test_merge_of_the_session_reproduces_the_merged_scans(live_run) -> None:
    out, tmp = live_run["out"], live_run["tmp"]
    merged = tmp / "merged.h5"
    done = subprocess.run(
        _cli("merge", str(out), "--front", "lidar_front", "--rear", "lidar_rear", "-o",
             str(merged), "--json"),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the session's robot.toml is an emulated robot's ({run_dir} ports): its footprint
    # is still the one removed
    assert json.loads(done.stdout)["footprint"] is True
    with Session(out) as s, Session(merged) as m:
        live, offline = s.lidar("merged").read(), m.lidar("merged").read()
    assert live.n_turns == offline.n_turns
    for f in ("t_first_ns", "count", "flags", "angle", "range", "intensity", "t_ns"):
        np.testing.assert_array_equal(getattr(live, f), getattr(offline, f), err_msg=f)


def test_udp_datagrams_carry_each_frame_s_pose(live_run) -> None:
    got = live_run["udp"]
    live = live_run["doc"]["live"]
    doc = live["udp"]
    assert doc["dropped"] == 0 and len(got) == doc["sent"]
    assert [d.seq for d in got] == list(range(len(got)))
    # one datagram per filtered frame, plus one per prediction: the worker publishes the
    # prediction whenever no pod frame came for coast_s (0.1 s), which a busy machine
    # (the other xdist workers) can cause without the pods ever stopping
    frames = [d for d in got if not d.flags & PREDICTED]
    predicted = [d for d in got if d.flags & PREDICTED]
    assert len(frames) == live["frames_filtered"] and len(predicted) == live["predictions"]
    assert all(d.frames == 1 for d in frames) and all(d.frames == 0 for d in predicted)
    with Session(live_run["out"]) as s:
        est = s.pose("estimate").read()
    # every estimate sample but the start (the origin, no filter step) went out, in order
    np.testing.assert_array_equal([d.stamp_ns for d in frames], est.t_ns[1:])
    position = np.array([d.pose[:2] for d in frames])
    np.testing.assert_array_equal(position, est.position[1:, :2])
    cov = np.array([[d.covariance[0], d.covariance[3], d.covariance[5]] for d in frames])
    np.testing.assert_array_equal(cov, est.covariance[1:][:, [0, 1, 5], [0, 1, 5]])
    yaw = 2 * np.arctan2(est.quat_xyzw[1:, 2], est.quat_xyzw[1:, 3])
    sent = np.array([d.pose[2] for d in frames])
    assert np.abs(np.remainder(sent - yaw + np.pi, 2 * np.pi) - np.pi).max() < 1e-12
    assert np.all((-math.pi < sent) & (sent <= math.pi))
    wall = np.array([d.wall_ns for d in got])
    assert abs(wall[-1] / 1e9 - time.time()) < 600  # on the wall clock


def test_models_shipped_for_the_emulated_robot_load() -> None:
    assert load_pod_model(PODS).W.shape == (3, 3)
    assert load_noise_model(NOISE).x.q > 0
    assert Path(PODS).read_text().count("[provenance]") == 1
