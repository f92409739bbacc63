"""`live --ros2` on the emulated robot, checked by a ROS 2 subscriber written apart from it.

The emulated robot runs in this process at real rate, `live --ros2` in a subprocess, and
:mod:`ros2_peer` in another: Cyclone DDS with the ROS 2 message types transcribed from
the .msg files (nothing imported from sensorbench) and the QoS a ROS 2 consumer
subscribes with. The peer joins after `live` has published /tf_static (so it gets it
only by transient-local durability). While both run, lidar_rear is unplugged for 3 s
and the pods stall for 2.5 s. Both DDS processes use a domain id of this run and a
Cyclone configuration that keeps them on the loopback interface without multicast (its
trace says which interface each selected).

What the peer received is then compared with the session `live` recorded: /odom is the
`estimate` stream (pose, covariance, stamps: one constant wall-clock offset), the twist
is `replay`'s velocity in the body frame, /scan is the `merged` stream, each lidar's
scan is REP 103 (counter-clockwise, positive increment) with every ray one of its
turn's points, and /diagnostics says STALE within 2 s of the unplug and the stall.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import capture_util as cu
import numpy as np
import pytest

from sensorbench.drivers.robot_config import Mount
from sensorbench.errors import LiveError
from sensorbench.fusion.estimate_stream import estimate_times_ns
from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.odometry_replay import replay_session
from sensorbench.fusion.pod_kinematics import load_pod_model
from sensorbench.live.ros2 import Ros2Options, Ros2Publisher
from sensorbench.logs import LidarTurns, Session
from sensorbench.sim.emulated_robot import EmulatedRobot

MODELS = cu.REPO / "examples" / "models"
PODS, NOISE = MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml"
PEER = Path(__file__).with_name("ros2_peer.py")
LIDARS = ("lidar_front", "lidar_rear", "ld19")
MOUNTS = {"lidar_front": (0.20, 0.0, 0.0), "lidar_rear": (-0.20, 0.0, math.pi),
          "ld19": (0.10, 0.0, 0.0)}  # fmt: skip
DOMAIN = 1 + os.getpid() % 200
"""One domain per test run: nothing else on the machine talks to it."""
STALE_WITHIN_S = 2.0
CONFIG = """<CycloneDDS><Domain Id="any">
  <General><Interfaces><NetworkInterface name="lo"/></Interfaces>
    <AllowMulticast>false</AllowMulticast></General>
  <Discovery><ParticipantIndex>auto</ParticipantIndex>
    <MaxAutoParticipantIndex>20</MaxAutoParticipantIndex>
    <Peers><Peer address="127.0.0.1"/></Peers></Discovery>
  <Tracing><Verbosity>config</Verbosity>
    <OutputFile>{dir}/cdds-${{CYCLONEDDS_PID}}.log</OutputFile></Tracing>
</Domain></CycloneDDS>"""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "from sensorbench.cli import main; main()", *args]


def _wait_for(fn, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if fn():
                return
        except Exception:  # the session file is being created
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what} within {deadline_s} s")


def _estimating(out: Path) -> bool:
    with Session(out) as s:
        return len(s.pose("estimate")) > 10


@pytest.fixture(scope="module")
def ros2_run(tmp_path_factory, warm_kernels):
    tmp = tmp_path_factory.mktemp("ros2")
    (tmp / "cyclonedds.xml").write_text(CONFIG.format(dir=tmp))
    env = {**os.environ, "CYCLONEDDS_URI": f"file://{tmp / 'cyclonedds.xml'}"}
    out, got = tmp / "session.h5", tmp / "peer.json"
    marks: dict[str, int] = {}
    with EmulatedRobot(tmp / "run", speed=1.0, ld19_startup_s=0.2) as robot:
        live = subprocess.Popen(
            _cli("live", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(tmp / "run"),
                 "--pods", str(PODS), "--noise", str(NOISE), "--ros2", "--ros2-domain",
                 str(DOMAIN), "--duration", "25", "-o", str(out), "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        peer = None
        try:
            _wait_for(lambda: _estimating(out), 60, "no estimate")
            peer = subprocess.Popen(
                [sys.executable, str(PEER), str(DOMAIN), "120", str(got), ",".join(LIDARS)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
            )  # fmt: skip
            assert peer.stdout is not None and peer.stdout.readline().strip() == "ready"
            time.sleep(2.0)
            marks["unplug"] = time.time_ns()
            robot["lidar_rear"].unplug()
            time.sleep(3.0)
            robot["lidar_rear"].replug()
            time.sleep(2.5)
            marks["stall"] = time.time_ns()
            robot["pods"].stall(2.5)
            stdout, stderr = live.communicate(timeout=120)
            peer.communicate(timeout=30)  # closing its input stops it
        finally:
            for p in (live, peer):
                if p is not None and p.poll() is None:
                    p.kill()
    return {"tmp": tmp, "out": out, "code": live.returncode, "stdout": stdout,
            "stderr": stderr, "got": json.loads(got.read_text()), "marks": marks}  # fmt: skip


def _offset(run) -> int:
    with Session(run["out"]) as s:
        return int(s.attrs["wall_clock_anchor_ns"]) - int(s.attrs["monotonic_anchor_ns"])


def _stamp_offset(run, msgs: list[dict], times: np.ndarray) -> tuple[int, dict[int, int]]:
    """The one offset (ns) that maps every message's stamp onto a session time (within 5 ms
    of the session's own wall-clock anchor: both anchors are taken as the run starts), and
    the row of each session time."""
    stamps = np.array([m["stamp"] for m in msgs], dtype=np.int64)
    d0 = _offset(run)
    k = np.clip(np.searchsorted(times, stamps - d0), 1, times.size - 1)
    near = np.where(np.abs(times[k - 1] - (stamps - d0)) < np.abs(times[k] - (stamps - d0)),
                    times[k - 1], times[k])  # fmt: skip
    # the steps share one residual; a prediction (first, too) lies anywhere near a row
    values, counts = np.unique(stamps - d0 - near, return_counts=True)
    residual = int(values[counts.argmax()])
    assert abs(residual) < 5_000_000
    return d0 + residual, {int(t): i for i, t in enumerate(times)}


def test_live_ran_and_published_every_topic(ros2_run) -> None:
    assert ros2_run["code"] == 0, ros2_run["stderr"][-3000:]
    doc = json.loads(ros2_run["stdout"])
    published = doc["live"]["ros2"]["published"]
    assert doc["live"]["ros2"]["domain"] == DOMAIN and doc["live"]["errors"] == []
    got = ros2_run["got"]
    # DDS matches a reader only to a writer of the same topic name and type name
    # (nav_msgs::msg::dds_::Odometry_, ...) whose QoS offers what the reader asks for
    for topic, entry in got.items():
        assert entry["matched"] == 1 and entry["incompatible"] == 0, (topic, entry)
        assert entry["samples"], topic
        assert len(entry["samples"]) <= published[topic]
    assert set(got) == {"/odom", "/tf", "/tf_static", "/scan", "/diagnostics",
                        *(f"/{n}/scan" for n in LIDARS)}  # fmt: skip


def test_traffic_stays_on_loopback(ros2_run) -> None:
    logs = sorted(Path(ros2_run["tmp"]).glob("cdds-*.log"))
    assert len(logs) == 2  # live and the peer
    for log in logs:
        text = log.read_text()
        selected = [line for line in text.splitlines() if "selected interfaces:" in line]
        assert selected and all(" selected interfaces: lo (" in s for s in selected), selected
        assert "ownip: udp/127.0.0.1" in text
        assert "General/AllowMulticast/#text: false" in text


def test_odom_is_the_live_estimate_with_covariance_and_twist(ros2_run) -> None:
    odom = ros2_run["got"]["/odom"]["samples"]
    with Session(ros2_run["out"]) as s:
        est = s.pose("estimate").read()
    d, index = _stamp_offset(ros2_run, odom, est.t_ns)
    steps = [(m, index[m["stamp"] - d]) for m in odom if m["stamp"] - d in index]
    predicted = [m for m in odom if m["stamp"] - d not in index]
    assert len(steps) > 100 and predicted  # the stall's predictions
    rp = replay_session(ros2_run["out"], load_pod_model(PODS), load_noise_model(NOISE),
                        repair=False)  # fmt: skip
    np.testing.assert_array_equal(estimate_times_ns(rp.t0_ns, rp.result.t_s)[: len(est)], est.t_ns)
    for m, i in steps:
        assert (m["frame"], m["child"]) == ("odom", "base_link")
        assert m["position"] == [*est.position[i, :2].tolist(), 0.0]
        np.testing.assert_array_equal(np.reshape(m["pose_cov"], (6, 6)), est.covariance[i])
        yaw = 2 * math.atan2(m["quat"][2], m["quat"][3])
        est_yaw = 2 * math.atan2(est.quat_xyzw[i, 2], est.quat_xyzw[i, 3])
        assert abs(math.remainder(yaw - est_yaw, 2 * math.pi)) < 1e-12
        # the twist: replay's world-frame velocity turned into the body frame
        vx, vy, wz = rp.result.velocity[i]
        c, s_ = math.cos(est_yaw), math.sin(est_yaw)
        twist = np.array([c * vx + s_ * vy, -s_ * vx + c * vy, 0, 0, 0, wz])
        np.testing.assert_allclose(m["twist"], twist, rtol=1e-9, atol=1e-12)
        var_v = [rp.result.tracks[a].var_v[i] for a in ("x", "y", "theta")]
        tcov = np.reshape(m["twist_cov"], (6, 6))
        rot = np.array([[c, s_], [-s_, c]])
        np.testing.assert_allclose(tcov[:2, :2], rot @ np.diag(var_v[:2]) @ rot.T,
                                   rtol=1e-9, atol=1e-18)  # fmt: skip
        assert tcov[5, 5] == pytest.approx(var_v[2], rel=1e-9) and tcov[2:5].sum() == 0
    # while the pods are silent (the stall: the longest run of predictions, one per 0.1 s
    # for 2.5 s), predictions with their variance growing
    runs = [list(g) for k, g in itertools.groupby(odom, key=lambda m: m["stamp"] - d in index)
            if not k]  # fmt: skip
    var = [m["pose_cov"][0] for m in max(runs, key=len)]
    assert len(var) >= 10 and all(b > a for a, b in itertools.pairwise(var))


def test_tf_follows_each_filter_step_and_tf_static_the_mounts(ros2_run) -> None:
    got = ros2_run["got"]
    steps = {m["stamp"]: m for m in got["/odom"]["samples"]}
    for msg in got["/tf"]["samples"]:
        (t,) = msg["transforms"]
        assert (t["parent"], t["child"]) == ("odom", "base_link")
        o = steps[t["stamp"]]  # the same step's odometry
        assert t["t"] == o["position"] and t["q"] == o["quat"]
    assert len(got["/tf"]["samples"]) < len(got["/odom"]["samples"])  # no tf from predictions
    (static,) = got["/tf_static"]["samples"]  # latched: the peer came later
    frames = {t["child"]: t for t in static["transforms"]}
    assert set(frames) == set(LIDARS)
    for name, (x, y, yaw) in MOUNTS.items():
        t = frames[name]
        assert t["parent"] == "base_link" and t["t"] == [x, y, 0.0]
        assert 2 * math.atan2(t["q"][2], t["q"][3]) == pytest.approx(yaw)


def test_scan_is_the_merged_stream(ros2_run) -> None:
    scans = ros2_run["got"]["/scan"]["samples"]
    with Session(ros2_run["out"]) as s:
        merged = s.lidar("merged").read()
    d, index = _stamp_offset(ros2_run, scans, merged.t_first_ns)
    assert len(scans) > 20
    for m in scans:
        k = index[m["stamp"] - d]
        lo, n = int(merged.offset[k]), int(merged.count[k])
        assert m["frame"] == "base_link"
        ranges = np.array([float(r) for r in m["ranges"]], dtype=np.float32)
        np.testing.assert_array_equal(ranges, merged.range[lo : lo + n])
        assert m["angle_min"] == 0.0 and m["increment"] == pytest.approx(2 * math.pi / n, rel=1e-6)
        assert m["increment"] > 0  # REP 103: counter-clockwise


def test_each_lidar_scan_is_counter_clockwise_with_its_turn_s_points(ros2_run) -> None:
    """Rays from 0 rad in every scan (slam_toolbox keeps the first scan's angles), each
    ray a point of its turn; the stamp (ray 0's time) within a half turn of the turn's
    last point (a clockwise sensor's seam: its turns start near 0, so within 10°)."""
    got = ros2_run["got"]
    with Session(ros2_run["out"]) as s:
        turns = {n: s.lidar(n).read() for n in LIDARS}
    d = _offset(ros2_run)  # within 5 ms of the stamps' (see _stamp_offset)
    for name in LIDARS:
        scans = got[f"/{name}/scan"]["samples"]
        tr = turns[name]
        last = tr.t_ns[tr.offset + tr.count - 1]
        assert len(scans) > 10
        assert {m["angle_min"] for m in scans} == {0.0}
        for m in scans[-5:]:
            assert m["frame"] == name and m["increment"] > 0 and m["time_increment"] < 0
            k = int(np.argmin(np.abs(last - (m["stamp"] - d))))
            period_ns = len(m["ranges"]) * abs(m["time_increment"]) * 1e9
            assert abs(m["stamp"] - d - last[k]) <= period_ns * 10 / 360 + 5_000_000
            lo, hi = int(tr.offset[k]), int(tr.offset[k] + tr.count[k])
            ranges = np.array([float(r) for r in m["ranges"]])
            rays = np.flatnonzero(~np.isnan(ranges))
            ray_angle = m["angle_min"] + m["increment"] * rays
            miss = np.mod(ray_angle[:, None] - tr.angle[lo:hi][None, :] + math.pi, 2 * math.pi)
            same = ranges[rays][:, None] == tr.range[lo:hi].astype(np.float64)[None, :]
            # every ray is a point of the turn with its range, within half a bin (0.2°)
            assert (same & (np.abs(miss - math.pi) <= math.radians(0.2) + 1e-6)).any(axis=1).all()


def test_scans_carry_the_rated_range_limits_with_every_return_inside(ros2_run) -> None:
    """Every scan of a topic has the same range_min and range_max: each lidar's datasheet
    range (A1 0.15–12 m, LD19 0.02–12 m; range_max one float32 step above 12 m, so a
    return at 12 m is inside laser_geometry's range < range_max), /scan the A1s' from
    the body (mounted 0.2 m off: 0–12.2 m); every finite range below range_max."""
    above = lambda m: float(np.nextafter(np.float32(m), np.float32(np.inf)))  # noqa: E731
    expected = {"/scan": (0.0, above(12.2)), "/lidar_front/scan": (0.15, above(12.0)),
                "/lidar_rear/scan": (0.15, above(12.0)), "/ld19/scan": (0.02, above(12.0))}
    for topic, (lo, hi) in expected.items():
        scans = ros2_run["got"][topic]["samples"]
        assert len(scans) > 10
        assert {(m["range_min"], m["range_max"]) for m in scans} == {
            (float(np.float32(lo)), float(np.float32(hi)))}, topic
        ranges = np.array([float(r) for m in scans for r in m["ranges"]])
        assert (ranges[np.isfinite(ranges)] < hi).all()


def _levels(run, name: str) -> list[tuple[int, int]]:
    """(receive time, level) of ``sensorbench: name`` in each /diagnostics message."""
    out = []
    for m in run["got"]["/diagnostics"]["samples"]:
        for st in m["status"]:
            if st["name"] == f"sensorbench: {name}":
                out.append((m["recv"], st["level"]))
    return out


def _first_stale(run, name: str, after_ns: int) -> int:
    """Stamp (wall ns: when live published it) of the first STALE of ``name`` after
    ``after_ns``, as the subscriber received it."""
    for m in run["got"]["/diagnostics"]["samples"]:
        for st in m["status"]:
            if st["name"] == f"sensorbench: {name}" and st["level"] == 3 and m["stamp"] > after_ns:
                return int(m["stamp"])
    raise AssertionError(f"{name}: no STALE after the fault")


def _last_data(run, name: str, mark_ns: int) -> int:
    """Wall time (ns) of the last bytes ``name`` gave live before the fault begun at
    ``mark_ns`` (the chunk before the first 0.5 s gap from just before the mark): the
    fault's start as live saw it, whatever the harness's own delay in causing it."""
    with Session(run["out"]) as s:
        t = s.raw(name).chunk_times_ns + _offset(run)
    t = t[t >= mark_ns - 200_000_000]
    return int(t[np.flatnonzero(np.diff(t) > 500_000_000)[0]])


def test_diagnostics_say_stale_within_2_s(ros2_run) -> None:
    marks = ros2_run["marks"]
    msgs = ros2_run["got"]["/diagnostics"]["samples"]
    recv = np.array([m["recv"] for m in msgs])
    assert np.diff(recv).max() < 1.5e9  # 1 Hz, and at once on a change
    # how late this host ran live's diagnostics (its 1 s cadence, measured on this run)
    late_s = max(0.0, np.diff([m["stamp"] for m in msgs]).max() / 1e9 - 1.0)
    rear = _levels(ros2_run, "lidar_rear")
    assert [lvl for r, lvl in rear if r < marks["unplug"]][-1] < 3
    assert any(lvl < 3 for r, lvl in rear if r > marks["unplug"] + 3.5e9)  # replugged
    filters = _levels(ros2_run, "filters")
    assert [lvl for r, lvl in filters if r < marks["stall"]][-1] < 3
    assert any(lvl < 3 for r, lvl in filters if r > marks["stall"] + 3e9)  # stepping again
    for device, name, mark in (("lidar_rear", "lidar_rear", "unplug"), ("pods", "pods", "stall"),
                               ("pods", "filters", "stall")):  # fmt: skip
        last = _last_data(ros2_run, device, marks[mark])
        stamp = _first_stale(ros2_run, name, last)
        assert (stamp - last) / 1e9 <= STALE_WITHIN_S + late_s, (name, stamp - last, late_s)


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--ros2", "--ros2-base-frame", "a b"], "frame id 'a b'"),
     (["--ros2", "--ros2-odom-frame", "/odom"], "frame id '/odom'"),
     (["--ros2", "--ros2-base-frame", "base\tlink"], "frame id 'base\\tlink'"),
     (["--ros2", "--ros2-scan-frame", "scan\n"], "frame id 'scan\\n'"),
     (["--ros2", "--ros2-domain", "233"], "0<=x<=232"),
     (["--ros2", "--ros2-base-frame", "odom"], "both 'odom': odom -> body would place"),
     (["--ros2", "--ros2-odom-frame", "lidar_rear"], "'lidar_rear': that is lidar lidar_rear's"),
     (["--ros2", "--ros2-scan-frame", "ld19"], "'ld19': that is lidar ld19's own frame"),
     (["--ros2", "--ros2-scan-frame", "odom"], "'odom' is the odometry frame"),
     (["--ros2-odom-frame", "map"], "--ros2-odom-frame without --ros2: nothing is published"),
     (["--no-ros2-tf"], "--ros2-tf/--no-ros2-tf without --ros2")],
)  # fmt: skip
def test_bad_ros2_options_exit_2_before_recording(tmp_path, args, message) -> None:
    """Malformed frame ids, frames that would loop /tf (odom as the body, a lidar's own
    frame for another) or put the merged scan in odom, and --ros2-* options without --ros2
    (they changed nothing): exit 2, no file."""
    out = tmp_path / "s.h5"
    r = subprocess.run(
        _cli("live", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(tmp_path / "run"),
             *args, "-o", str(out), "--duration", "1"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("missing", ["configuration", "package"])
def test_a_dds_that_cannot_start_records_nothing(tmp_path, missing) -> None:
    """A bad CYCLONEDDS_URI, or no importable Cyclone DDS (its C library not loading):
    exit 2 with the reason, no traceback, no file."""
    out = tmp_path / "s.h5"
    env = {**os.environ, "CYCLONEDDS_URI": f"file://{tmp_path / 'missing.xml'}"}
    cmd = _cli("live", "--config", str(cu.EMULATED_CONFIG), "--run-dir", str(tmp_path / "run"),
               "--ros2", "-o", str(out), "--duration", "1")  # fmt: skip
    if missing == "package":
        env = dict(os.environ)
        cmd[2] = "import sys; sys.modules['cyclonedds'] = None; " + cmd[2]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and "cannot start ROS 2 (Cyclone DDS)" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not out.exists()


# rcl's rule for a full topic name (rmw_validate_full_topic_name): "/"-separated tokens of
# alphanumerics and "_", none empty or starting with a digit
ROS_TOPIC = re.compile(r"(/[A-Za-z_][A-Za-z0-9_]*)+")


@pytest.mark.parametrize("name", ["lidar-front", "lidar_front"])
def test_a_lidar_whose_scan_topic_ros_2_cannot_name_is_refused(name) -> None:
    """robot.toml allows "-" in a device name, ROS 2 not in a topic name: rclcpp refuses to
    subscribe to /lidar-front/scan, so it would be published where no node can read it."""
    mounts = {name: Mount(0.2, 0.0, 0.0), "lidar_rear": Mount(-0.2, 0.0, math.pi)}
    if ROS_TOPIC.fullmatch(f"/{name}/scan"):
        Ros2Publisher(Ros2Options(), mounts, (0, 0), False, True)
    else:
        with pytest.raises(LiveError, match=f"lidar {name!r}: /{name}/scan is not a ROS 2"):
            Ros2Publisher(Ros2Options(), mounts, (0, 0), False, True)


class _Written(Ros2Publisher):
    """The publisher's messages as written (topic, CDR), without a DDS domain."""

    def _write(self, topic: str, cdr: bytes) -> None:
        self.written = [*getattr(self, "written", []), (topic, cdr)]


def test_a_named_scan_frame_is_placed_on_the_body_by_tf_static() -> None:
    """The merged /scan is measured from the body's origin; published in another frame
    (--ros2-scan-frame) it needs that frame on the tf tree, or no consumer can place it."""
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    mounts = {"lidar_front": Mount(0.2, 0.0, 0.0), "lidar_rear": Mount(-0.2, 0.0, math.pi)}
    pub = _Written(Ros2Options(scan_frame="laser"), mounts, (0, 0), False, True)
    pub._static()
    ((topic, cdr),) = pub.written
    msg = store.deserialize_cdr(cdr, "tf2_msgs/msg/TFMessage")
    placed = {t.child_frame_id: t for t in msg.transforms}
    assert topic == "/tf_static" and set(placed) == {"lidar_front", "lidar_rear", "laser"}
    laser = placed["laser"]
    assert laser.header.frame_id == "base_link"
    v, q = laser.transform.translation, laser.transform.rotation
    assert (v.x, v.y, v.z, q.x, q.y, q.z, q.w) == (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)


def _turn(n: int, t0: int) -> LidarTurns:
    """One turn of ``n`` points evenly round (ranges 2 m), at host ``t0`` (ns)."""
    angle = np.linspace(0, 2 * np.pi, n, endpoint=False).astype(np.float32)
    t = t0 + np.arange(n, dtype=np.int64) * 100_000
    return LidarTurns([t0], [0], [10.0], [n], [0], angle, np.full(n, 2.0, np.float32),
                      np.full(n, 100, np.uint16), t)  # fmt: skip


def test_scans_nobody_subscribes_to_are_not_built_and_a_later_subscriber_gets_them(
    tmp_path, monkeypatch
) -> None:
    """DDS delivers a scan written before a reader matched to no one: the publisher builds
    none then, but keeps each lidar's grid (its first turn's) for the reader that comes."""
    from cyclonedds.domain import DomainParticipant
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic

    from sensorbench.live import ros2_msgs as m
    from sensorbench.live.ros2 import _qos
    from sensorbench.logs.scan_bins import ScanGrid

    (tmp_path / "cyclonedds.xml").write_text(CONFIG.format(dir=tmp_path))
    monkeypatch.setenv("CYCLONEDDS_URI", f"file://{tmp_path / 'cyclonedds.xml'}")
    domain = 1 + (os.getpid() + 101) % 200
    pub = Ros2Publisher(Ros2Options(domain=domain), {"lidar_front": Mount(0.2, 0.0, 0.0)},
                        (0, 0), False, True)  # fmt: skip
    pub.open()
    pub.start()
    first, other = _turn(400, 10**9), _turn(300, 2 * 10**9)
    try:
        pub.scan("lidar_front", first)
        for _ in range(20):
            pub.scan("lidar_front", other)
            pub.merged(other)
        _wait_for(lambda: "lidar_front" in pub._grids and not pub.queue._items, 10, "idle")
        time.sleep(0.2)  # the last item taken is done
        assert "/lidar_front/scan" not in pub.published and "/scan" not in pub.published
        assert pub._merged == 20  # the merge's health counts them all the same
        dp = DomainParticipant(domain)
        q = _qos("sensor")
        reader = DataReader(dp, Topic(dp, "rt/lidar_front/scan", m.LASER_SCAN, qos=q), qos=q)
        _wait_for(lambda: pub._heard("/lidar_front/scan"), 20, "a matched subscriber")
        pub.scan("lidar_front", other)
        _wait_for(lambda: pub.published.get("/lidar_front/scan") == 1, 10, "the scan written")
        del reader
    finally:
        pub.stop()
    assert pub._grids["lidar_front"] == ScanGrid.for_stream(first.angle, first.count)


class _Diagnosed(Ros2Publisher):
    """Each /diagnostics the publisher sends, as (name, level, message) per status."""

    def _diagnostics(self, health) -> None:
        self.sent = [*getattr(self, "sent", []), [(h.name, h.level, h.message) for h in health]]


def _status(crc: int):
    from sensorbench.drivers.reader_base import ReaderStatus

    return ReaderStatus("ld19", "ld19", "/dev/ttyUSB0", True, 4000.0, 4500.0, 10.0, crc, 0,
                        0.01, 0, None, 0, False, "")  # fmt: skip


def test_a_burst_of_crc_errors_between_diagnostics_is_published_as_warn() -> None:
    """Status ticks come every 0.5 s, /diagnostics every 1 s: faults counted per status
    tick were gone by the next tick, so a burst in the tick before a publish that fell
    between two was never WARN. The faults a diagnostics states are those since the last
    one: the burst is WARN in the next, OK in the one after."""
    from sensorbench.logs.ros2_cdr import OK, WARN

    pub = _Diagnosed(Ros2Options(stale_s=5.0), {}, (0, 0), False, False)
    t0 = time.monotonic()
    pub.status([_status(0)])
    last = pub._tick(t0, -math.inf)
    pub.status([_status(5)])  # the burst's status tick
    last = pub._tick(t0 + 0.3, last)
    pub.status([_status(5)])  # the next tick: none new
    last = pub._tick(t0 + 0.8, last)
    last = pub._tick(t0 + 1.0, last)
    pub._tick(t0 + 2.0, last)
    assert [d[0][1] for d in pub.sent] == [OK, WARN, OK], pub.sent
    assert pub.sent[1][0][2].startswith("5 CRC errors, 0 drops"), pub.sent
