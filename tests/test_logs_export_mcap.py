"""``export --format mcap``: a session as ROS 2 messages in one MCAP file.

Read back with the ``mcap`` package's own reader (schemas, channels, log times) and
rosbags' CDR deserializer, both independent of the exporter: every lidar point lies
within 0.2° of a ray carrying its range (on the real LD06 capture too, with packets
removed), the mounts are on a latched /tf_static, an estimate is on /tf and as
Odometry with its covariance, stamps are wall-clock time from the session's anchor;
and ``import rosbag`` of the file brings back flags, events, device times and counts.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner
from real_data import LD06_EXAMPLE2, need
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.schema import NO_DEVICE_TIME, PoseFlag, TurnFlag

pytest.importorskip("rosbags")
mcap_reader = pytest.importorskip("mcap.reader")
from rosbags.typesys import Stores, get_typestore  # noqa: E402

STORE = get_typestore(Stores.ROS2_HUMBLE)
RNG = np.random.default_rng(4)
T0 = 5_000_000_000
N_TURNS = 6
MAX_RAY_ERROR_DEG = 0.2


def _sweep(n_turns: int, per_turn: int) -> LidarTurns:
    """A clockwise sensor (CCW angles fall with time), ~10 Hz, jittered spacing, lost packets."""
    angle, rng, inten, t, count, dev, flags = [], [], [], [], [], [], []
    for k in range(n_turns):
        start = RNG.uniform(0, 2 * math.pi)
        step = 1 + RNG.normal(0, 0.02, per_turn)
        step *= 2 * math.pi * (1 - 0.5 / per_turn) / step.sum()  # a turn: under one revolution
        a = np.mod(start - np.cumsum(step), 2 * math.pi)
        keep = np.ones(per_turn, bool)
        if k % 2:  # two lost 12-point packets
            for s in RNG.choice(np.arange(12, per_turn - 24, 12), 2, replace=False):
                keep[s : s + 12] = False
        n = int(keep.sum())
        r = RNG.uniform(0.1, 8.0, n).astype(np.float32)
        r[::17] = np.inf
        r[5::23] = np.nan
        tt = T0 + k * 100_000_000 + np.flatnonzero(keep) * 220_000
        angle.append(a[keep]), rng.append(r), t.append(tt)
        inten.append(RNG.integers(0, 256, n)), count.append(n)
        dev.append(NO_DEVICE_TIME if k == 0 else 70_000_000 + k * 100_000_000)
        flags.append(TurnFlag.PACKET_LOSS if k % 2 else 0)
    return LidarTurns(
        [x[0] for x in t], dev, np.full(n_turns, 10.0), count, flags, np.concatenate(angle),
        np.concatenate(rng), np.concatenate(inten), np.concatenate(t),
    )  # fmt: skip


TURNS = _sweep(N_TURNS, 450)
MOUNT = [0.2, -0.05, math.radians(30)]
N_POSE = 30
POSE_T = T0 + np.arange(N_POSE) * 33_000_000
POS = RNG.uniform(-3, 3, (N_POSE, 3))
QUAT = Rotation.random(N_POSE, random_state=RNG).as_quat()
VALID = np.ones(N_POSE, bool)
VALID[[4, 17]] = False
FLAGS = np.zeros(N_POSE, np.uint8)
FLAGS[[7, 20]] = PoseFlag.RELOCALIZED
FLAGS[[11]] = PoseFlag.PAUSED | PoseFlag.RELOCALIZED
COV = RNG.normal(0, 1e-3, (N_POSE, 6, 6))
N_POD = 50
POD_T = T0 + np.arange(N_POD) * 10_000_000
COUNTS = np.cumsum(RNG.integers(-40, 90, (N_POD, 3)), axis=0)
SEQ = np.arange(N_POD) + np.r_[np.zeros(20, int), np.full(30, 3)]  # 3 frames lost
POD_DEV = 1_000_000 + np.arange(N_POD) * 9_999_000
YAW = np.linspace(0, 1, N_POD)
YAW_RATE = np.full(N_POD, 0.5)
EVENTS = [
    (T0 + 1000, "lidar_front", "stale", "no bytes for 0.5 s"),
    (T0 + 5000, "cam", "note", "x"),
]


def _write_session(path: Path, turns: LidarTurns = TURNS) -> None:
    with SessionWriter(path, label="mcap test", swmr=False) as w:
        w.add_lidar("lidar_front", attrs={"mount_xy_yaw": MOUNT})
        w.add_pose("cam", kind="pose_sensor")
        w.add_pose("estimate", kind="estimate")
        w.add_encoder("pods", n_counts=3)
        w.append_turns("lidar_front", turns)
        pos = np.where(VALID[:, None], POS, np.nan)
        quat = np.where(VALID[:, None], QUAT, np.nan)
        w.append_pose("cam", PoseBatch(POSE_T, pos, quat, VALID, FLAGS))
        w.append_pose("estimate", su.all_valid(POSE_T, POS, QUAT))
        w.append_encoder("pods", EncoderBatch(POD_T, POD_DEV, SEQ, COUNTS, YAW, YAW_RATE))
        for e in EVENTS:
            w.event(*e)
    with h5py.File(path, "a") as f:  # as import rosbag stores an Odometry's covariance
        f["pose/estimate"].create_dataset("covariance", data=COV)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    path = tmp_path / "s.h5"
    _write_session(path)
    return path


def _export(session: Path, out: Path, *args: str):
    r = CliRunner().invoke(cli, ["export", str(session), "--format", "mcap", "-o", str(out), *args])
    assert r.exit_code == 0, r.output
    return r


def _read_mcap(path: Path) -> tuple[dict[str, list], dict[str, dict]]:
    """topic -> [(log time, message)], and topic -> channel facts, via the mcap package."""
    msgs: dict[str, list] = {}
    channels: dict[str, dict] = {}
    with open(path, "rb") as fh:
        reader = mcap_reader.make_reader(fh)
        assert reader.get_header().profile == "ros2"
        for schema, channel, message in reader.iter_messages(log_time_order=True):
            assert schema.encoding == "ros2msg" and channel.message_encoding == "cdr"
            channels[channel.topic] = {"type": schema.name, "metadata": dict(channel.metadata)}
            msg = STORE.deserialize_cdr(message.data, schema.name)
            msgs.setdefault(channel.topic, []).append((message.log_time, msg))
    return msgs, channels


def _ns(stamp) -> int:
    return stamp.sec * 10**9 + stamp.nanosec


def _offset(session: Path) -> int:
    with Session(session) as s:
        return int(s.attrs["wall_clock_anchor_ns"]) - int(s.attrs["monotonic_anchor_ns"])


def check_rays(scans: list, turns: LidarTurns, offset: int, time_tol_ns: float = math.inf) -> int:
    """Every ray within 0.2° of a point of its range, every point in such a ray or in the
    bin of a nearer point (≤ 0.4°: one bin) of the same turn; returns those not written.
    REP 103 for these clockwise sweeps: rays counter-clockwise from 0 rad in every scan
    (a consumer keeps the first scan's angles), stamps increasing, each written ray's
    point's time within ``time_tol_ns`` of ``stamp + i·time_increment`` but one scan
    (n·time_increment) off for the rays between ray 0 and the seam (the ray of the
    turn's last point)."""
    assert len(scans) == turns.n_turns
    dropped = 0
    for k, (log_t, m) in enumerate(scans):
        lo, hi = int(turns.offset[k]), int(turns.offset[k] + turns.count[k])
        assert log_t == _ns(m.header.stamp)
        assert m.angle_min == 0 and m.angle_increment > 0 and m.time_increment < 0
        assert k == 0 or log_t > scans[k - 1][0]
        n = len(m.ranges)
        seam = round(float(turns.angle[hi - 1]) % (2 * math.pi) / m.angle_increment) % n
        d = (seam + n // 2) % n - n // 2  # the seam's rays from ray 0, |d| ≤ n/2
        ray_angle = m.angle_min + m.angle_increment * np.arange(n)
        ranges = np.asarray(m.ranges)
        pa, pr = turns.angle[lo:hi].astype(np.float64), turns.range[lo:hi]
        # the angle from each point to each ray, wrapped to [-180, 180) degrees
        miss = np.degrees(np.mod(ray_angle[None, :] - pa[:, None] + math.pi, 2 * math.pi) - math.pi)
        near = np.abs(miss) <= MAX_RAY_ERROR_DEG
        same = (ranges[None, :] == pr[:, None]) | (
            np.isnan(ranges[None, :]) & np.isnan(pr[:, None])
        )
        filled = ~np.isnan(ranges)
        assert (near & same)[:, filled].any(axis=0).all()  # every ray is a point's, ≤ 0.2°
        written = (near & same).any(axis=1)
        ray_of = np.argmax(near & same, axis=1)[written]
        lap = (ray_of - seam) % n  # rays from the seam, counter-clockwise
        ray_t = (log_t - offset) + m.time_increment * 1e9 * (d + lap)
        assert np.abs(ray_t - turns.t_ns[lo:hi][written]).max() <= time_tol_ns
        if not written.all():  # a point not written shares its bin with a nearer one
            gap = np.abs(np.mod(pa[~written, None] - pa[None, written] + math.pi, 2 * math.pi)
                         - math.pi)  # fmt: skip
            assert np.degrees(gap.min(axis=1)).max() <= 2 * MAX_RAY_ERROR_DEG
        dropped += int((~written).sum())
        assert m.range_min == 0
    return dropped


def test_mcap_as_ros2_messages(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.mcap"
    r = _export(session, out)
    assert "lidar_front: 900 rays per turn" in r.output and "not written" not in r.output
    offset = _offset(session)
    assert offset > 50 * 365 * 86400 * 10**9  # stamps in this century, not 1970
    msgs, channels = _read_mcap(out)
    assert sorted(msgs) == [
        "/cam/flags", "/cam/path", "/cam/pose", "/estimate/odom", "/estimate/path",
        "/estimate/pose", "/events", "/lidar_front/flags", "/lidar_front/scan",
        "/lidar_front/time_reference", "/pods/counts", "/pods/time_reference", "/tf",
        "/tf_static",
    ]  # fmt: skip
    assert channels["/lidar_front/scan"]["type"] == "sensor_msgs/msg/LaserScan"
    assert channels["/estimate/odom"]["type"] == "nav_msgs/msg/Odometry"
    # scans: every point in the ray of its own angle, REP 103 for a clockwise sweep
    # ray times: a point is half a ray from its ray's angle; the sweep's 2 % step jitter
    # walks the angle off the linear time base by a Brownian bridge's σ = 0.02·√n/2
    # steps mid-turn: 5σ + one ray's time
    per_ray_ns = 220_000 * 450 / (2 * math.pi) * (2 * math.pi / 900)
    tol = (5 * 0.02 * math.sqrt(450) / 2 * 220_000) + per_ray_ns
    assert check_rays(msgs["/lidar_front/scan"], TURNS, offset, tol) == 0
    assert all(m.header.frame_id == "lidar_front" for _, m in msgs["/lidar_front/scan"])
    # mounts: one latched /tf_static, base_link -> the lidar
    (static,) = msgs["/tf_static"]
    (tr,) = static[1].transforms
    assert (tr.header.frame_id, tr.child_frame_id) == ("base_link", "lidar_front")
    assert [tr.transform.translation.x, tr.transform.translation.y] == MOUNT[:2]
    q = tr.transform.rotation
    assert Rotation.from_quat([q.x, q.y, q.z, q.w]).as_euler("ZYX")[0] == pytest.approx(MOUNT[2])
    assert "durability: 1" in channels["/tf_static"]["metadata"]["offered_qos_profiles"]
    # the estimate: Odometry with its covariance and a /tf odom -> base_link per sample
    odom = msgs["/estimate/odom"]
    assert [t for t, _ in odom] == (POSE_T + offset).tolist()
    for k, (_, m) in enumerate(odom):
        assert (m.header.frame_id, m.child_frame_id) == ("odom", "base_link")
        np.testing.assert_array_equal(np.asarray(m.pose.covariance).reshape(6, 6), COV[k])
        p = m.pose.pose.position
        assert [p.x, p.y, p.z] == POS[k].tolist()
    tfs = [m.transforms[0] for _, m in msgs["/tf"]]
    assert [(t.header.frame_id, t.child_frame_id) for t in tfs] == [("odom", "base_link")] * N_POSE
    # the pose sensor: valid samples only, their flags, one Path of all of them
    poses = msgs["/cam/pose"]
    assert [t for t, _ in poses] == (POSE_T[VALID] + offset).tolist()
    (path,) = msgs["/cam/path"]
    assert [_ns(p.header.stamp) for p in path[1].poses] == [t for t, _ in poses]
    flagged = {t: int(m.status[0].values[0].value) for t, m in msgs["/cam/flags"]}
    assert flagged == {int(POSE_T[k] + offset): int(FLAGS[k]) for k in np.flatnonzero(FLAGS)}
    # pods: counts exact, sequence and IMU yaw beside them, device times
    counts = msgs["/pods/counts"]
    assert list(counts[0][1].name) == ["c0", "c1", "c2", "seq", "imu_yaw"]
    np.testing.assert_array_equal(np.array([m.position[:3] for _, m in counts]), COUNTS)
    refs = msgs["/pods/time_reference"]
    assert [_ns(m.time_ref) for _, m in refs] == POD_DEV.tolist()
    assert [_ns(m.header.stamp) for _, m in refs] == (POD_T + offset).tolist()
    events = [(t - offset, m.status[0].name, m.status[0].values[0].value, m.status[0].message)
              for t, m in msgs["/events"]]  # fmt: skip
    assert events == EVENTS


def test_round_trip_keeps_flags_events_device_times_and_counts(
    session: Path, tmp_path: Path
) -> None:
    out = tmp_path / "s.mcap"
    _export(session, out)
    offset = _offset(session)
    again = tmp_path / "again.h5"
    r = CliRunner().invoke(
        cli,
        ["import", "rosbag", str(out), "--topic", "/cam/pose=cam", "--topic",
         "/lidar_front/scan=lidar_front", "--topic", "/pods/counts=pods", "--topic",
         "/estimate/odom=estimate", "--events", "/events", "--into", str(again)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    with Session(again) as s:
        cam = s.pose("cam").read()
        est = s.pose("estimate")
        turns = s.lidar("lidar_front").read()
        pods = s.encoder("pods").read()
        mount = s.lidar("lidar_front").attrs["mount_xy_yaw"]
        events = [(e.t_ns, e.source, e.kind, e.message) for e in s.events()]
        assert est.attrs["kind"] == "estimate"
        assert est.attrs["ros_child_frame_id"] == "base_link"
        est_b = est.read()
    with h5py.File(again, "r") as f:
        np.testing.assert_array_equal(f["pose/estimate/covariance"][:], COV)
    np.testing.assert_array_equal(cam.t_ns, POSE_T[VALID] + offset)
    np.testing.assert_array_equal(cam.position, POS[VALID])
    np.testing.assert_array_equal(cam.flags, FLAGS[VALID])
    np.testing.assert_array_equal(est_b.position, POS)
    # a clockwise scan comes back in sweep order on the LaserScan's linear time model:
    # ending at its stamp (ray 0's time), one sweep long
    back = turns.offset + turns.count - 1
    stamps = [t for t, _ in _read_mcap(out)[0]["/lidar_front/scan"]]
    np.testing.assert_array_equal(turns.t_ns[back], stamps)
    assert np.all(np.diff(turns.t_ns.reshape(turns.n_turns, -1), axis=1) >= 0)
    ray_ns = 220_000 * 450 / 900
    sweep = turns.t_ns[back] - turns.t_first_ns
    assert np.all(np.abs(sweep - 899 * ray_ns) <= 0.05 * 899 * ray_ns)
    np.testing.assert_array_equal(turns.device_ns, TURNS.device_ns)
    np.testing.assert_array_equal(turns.flags, TURNS.flags)
    np.testing.assert_allclose(mount, MOUNT, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pods.host_ns, POD_T + offset)
    np.testing.assert_array_equal(pods.device_ns, POD_DEV)
    np.testing.assert_array_equal(pods.counts, COUNTS)
    np.testing.assert_array_equal(pods.seq, SEQ)
    np.testing.assert_array_equal(pods.yaw, YAW)
    np.testing.assert_array_equal(pods.yaw_rate, YAW_RATE)
    assert [(t - offset, *rest) for t, *rest in events] == EVENTS
    # a second export of the re-import: its times are Unix time already, kept as they are
    _export(again, tmp_path / "again.mcap")
    msgs, _ = _read_mcap(tmp_path / "again.mcap")
    assert [t for t, _ in msgs["/cam/pose"]] == (POSE_T[VALID] + offset).tolist()


@pytest.mark.parametrize(
    "topic", ["/lidar_front/scan=lidar_front:mocap", "/pods/counts=pods:estimate"]
)
def test_a_pose_kind_on_a_scan_or_count_topic_is_refused(
    session: Path, tmp_path: Path, topic: str
) -> None:
    """A pose kind names what a pose stream measures; a LaserScan or JointState topic
    given one was imported as a lidar or encoder stream with the kind dropped."""
    out = tmp_path / "s.mcap"
    _export(session, out)
    into = tmp_path / "again.h5"
    r = CliRunner().invoke(cli, ["import", "rosbag", str(out), "--topic", topic, "--into",
                                 str(into)])  # fmt: skip
    assert r.exit_code == 2 and f"--topic {topic}" in r.output and "no pose kind" in r.output
    assert str(out) in r.output and not into.exists()


def test_one_stream_only(session: Path, tmp_path: Path) -> None:
    r = _export(session, tmp_path / "cam.mcap", "--stream", "cam")
    assert "/cam/pose 28" in r.output
    msgs, _ = _read_mcap(tmp_path / "cam.mcap")
    assert sorted(msgs) == ["/cam/flags", "/cam/path", "/cam/pose"]


def test_scans_carry_the_rated_range_limits_with_every_return_inside(tmp_path: Path) -> None:
    """range_min, range_max: the model's datasheet range (LD19 0.02–12 m, A1 0.15–12 m),
    the same in every scan; a return at exactly 12 m (the readers keep it) is below
    range_max, where laser_geometry keeps it (range < range_max); a merged stream: its
    sources' envelope from the body (A1s 0.2 m and 0.25 m off: 0–12.25 m); a stream of no
    known model: 0 to 1e4 m (MAX_RANGE_M)."""
    turns = _sweep(N_TURNS, 450)
    turns.range[turns.offset[2] + 7] = 12.0  # one turn's farthest, the others nearer
    session = tmp_path / "rated.h5"
    with SessionWriter(session, label="rated", swmr=False) as w:
        for name, model, mount in (("ld19", "LD19", [0.1, 0, 0]), ("front", "A1", [0.2, 0, 0]),
                                   ("rear", "A1", [-0.15, 0.2, 3.1]), ("other", "X", [0, 0, 0]),
                                   ("merged", "merged", [0, 0, 0])):  # fmt: skip
            sources = {"sources": ["front", "rear"]} if model == "merged" else {}
            w.add_lidar(name, attrs={"model": model, "mount_xy_yaw": mount, **sources})
            w.append_turns(name, turns)
    out = tmp_path / "rated.mcap"
    _export(session, out)
    msgs, _ = _read_mcap(out)
    above = lambda m: float(np.nextafter(np.float32(m), np.float32(np.inf)))  # noqa: E731
    expected = {"ld19": (0.02, above(12.0)), "front": (0.15, above(12.0)),
                "other": (0.0, above(1e4)), "merged": (0.0, above(12.25))}  # fmt: skip
    for name, (lo, hi) in expected.items():
        scans = [m for _, m in msgs[f"/{name}/scan"]]
        assert {(m.range_min, m.range_max) for m in scans} == {(np.float32(lo), np.float32(hi))}
        finite = np.concatenate([np.asarray(m.ranges)[np.isfinite(m.ranges)] for m in scans])
        assert finite.max() == np.float32(12.0) and (finite < scans[0].range_max).all()


@need(LD06_EXAMPLE2)
def test_real_ld06_capture_every_ray_within_0p2_degrees(tmp_path: Path) -> None:
    """The real capture decoded (CRC failures drop packets inside turns), then one 12-point
    packet removed from every third turn: every point stays within 0.2° of its ray."""
    decoded = tmp_path / "decoded.h5"
    r = CliRunner().invoke(cli, ["decode", "ld19", str(LD06_EXAMPLE2.path), "-o", str(decoded)])
    assert r.exit_code == 0, r.output
    with Session(decoded) as s:
        real = s.lidar("ld19").read()
    parts = []
    for k in range(real.n_turns):
        turn = real.turn(k)
        keep = np.ones(turn.n_points, bool)
        if k % 3 == 0:
            keep[120:132] = False
        parts.append(
            su.one_turn(turn.angle[keep], turn.range[keep], turn.intensity[keep],
                              turn.t_ns[keep], int(turn.device_ns[0]), float(turn.speed_hz[0]))
        )  # fmt: skip
    turns = LidarTurns(*(np.concatenate([getattr(p, f) for p in parts]) for f in (
        "t_first_ns", "device_ns", "speed_hz", "count", "flags", "angle", "range", "intensity",
        "t_ns")))  # fmt: skip
    session = tmp_path / "real.h5"
    with SessionWriter(session, label="real ld06", swmr=False) as w:
        w.add_lidar("ld19", attrs={"mount_xy_yaw": MOUNT})
        w.append_turns("ld19", turns)
    out = tmp_path / "real.mcap"
    r = _export(session, out)
    msgs, _ = _read_mcap(out)
    # LD06 packets end where the next one starts: such pairs 0.03° apart share a ray
    bins, reported = (int(v) for v in re.search(r"ld19: (\d+) rays per turn, (\d+) point",
                                                 r.output).groups())  # fmt: skip
    assert bins >= 900
    assert check_rays(msgs["/ld19/scan"], turns, _offset(session)) <= reported
    assert reported <= 1e-3 * turns.n_points
    assert len(msgs["/tf_static"]) == 1
