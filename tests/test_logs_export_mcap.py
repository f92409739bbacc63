"""``export --format mcap``: a session's scans, poses and pod counts as ROS 2 messages in one
MCAP file, read back with rosbags (and re-imported) equal to the session."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.batches import EncoderBatch, LidarTurns, PoseBatch
from sensorbench.logs.schema import NO_DEVICE_TIME

pytest.importorskip("rosbags")
from rosbags.highlevel import AnyReader

RNG = np.random.default_rng(4)
T0 = 5_000_000_000
N_TURNS, N_PTS = 5, 360
TURN_T = T0 + np.arange(N_TURNS) * 100_000_000
ANGLE = np.mod(0.3 + np.arange(N_PTS) * (2 * math.pi / N_PTS), 2 * math.pi).astype(np.float32)
RANGE = RNG.uniform(0.1, 8.0, (N_TURNS, N_PTS)).astype(np.float32)
RANGE[:, ::17] = np.inf
RANGE[:, 5::23] = np.nan
INTENSITY = RNG.integers(0, 256, (N_TURNS, N_PTS)).astype(np.uint16)
PT_T = TURN_T[:, None] + np.arange(N_PTS)[None, :] * 277_778
N_POSE = 30
POSE_T = T0 + np.arange(N_POSE) * 33_000_000
POS = RNG.uniform(-3, 3, (N_POSE, 3))
QUAT = Rotation.random(N_POSE, random_state=RNG).as_quat()
VALID = np.ones(N_POSE, bool)
VALID[[4, 17]] = False
N_POD = 50
POD_T = T0 + np.arange(N_POD) * 10_000_000
COUNTS = np.cumsum(RNG.integers(-40, 90, (N_POD, 3)), axis=0)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    path = tmp_path / "s.h5"
    with SessionWriter(path, label="mcap test", swmr=False) as w:
        w.add_lidar("lidar_front")
        w.add_pose("cam", kind="pose_sensor")
        w.add_encoder("pods", n_counts=3)
        w.append_turns(
            "lidar_front",
            LidarTurns(
                TURN_T, np.full(N_TURNS, NO_DEVICE_TIME), np.full(N_TURNS, 10.0),
                np.full(N_TURNS, N_PTS), np.zeros(N_TURNS), np.tile(ANGLE, N_TURNS),
                RANGE.ravel(), INTENSITY.ravel(), PT_T.ravel(),
            ),
        )  # fmt: skip
        pos = np.where(VALID[:, None], POS, np.nan)
        quat = np.where(VALID[:, None], QUAT, np.nan)
        w.append_pose("cam", PoseBatch.from_arrays(POSE_T, pos, quat, VALID))
        w.append_encoder(
            "pods",
            EncoderBatch(
                POD_T, np.full(N_POD, NO_DEVICE_TIME), np.arange(N_POD), COUNTS,
                np.full(N_POD, np.nan), np.full(N_POD, np.nan),
            ),
        )  # fmt: skip
    return path


def _read(mcap: Path) -> dict[str, list]:
    out: dict[str, list] = {}
    with AnyReader([mcap]) as r:
        for conn, t, raw in r.messages():
            out.setdefault(conn.topic, []).append(
                (conn.msgtype, t, r.deserialize(raw, conn.msgtype))
            )
    return out


def test_mcap_reads_back_equal(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.mcap"
    r = CliRunner().invoke(cli, ["export", str(session), "--format", "mcap", "-o", str(out)])
    assert r.exit_code == 0, r.output
    msgs = _read(out)
    assert sorted(msgs) == ["/cam/pose", "/lidar_front/scan", "/pods/counts"]
    scans = msgs["/lidar_front/scan"]
    assert [m[0] for m in scans] == ["sensor_msgs/msg/LaserScan"] * N_TURNS
    for k, (_, t, m) in enumerate(scans):
        assert t == TURN_T[k] and m.header.stamp.sec * 10**9 + m.header.stamp.nanosec == t
        np.testing.assert_array_equal(m.ranges, RANGE[k])
        np.testing.assert_array_equal(m.intensities, INTENSITY[k].astype(np.float32))
        # ray i at angle_min + i*increment, CCW: the stored angles, within float32 rounding
        a = m.angle_min + m.angle_increment * np.arange(N_PTS)
        np.testing.assert_allclose(np.mod(a, 2 * math.pi), ANGLE, rtol=0, atol=2e-6)
        assert m.time_increment == pytest.approx(277_778e-9, rel=1e-6)
        assert m.scan_time == pytest.approx(0.1)
    poses = msgs["/cam/pose"]
    assert len(poses) == VALID.sum()  # invalid samples are not written
    for (_, t, m), k in zip(poses, np.flatnonzero(VALID), strict=True):
        assert t == POSE_T[k]
        p, q = m.pose.position, m.pose.orientation
        assert [p.x, p.y, p.z] == POS[k].tolist() and [q.x, q.y, q.z, q.w] == QUAT[k].tolist()
    counts = msgs["/pods/counts"]
    assert [t for _, t, _ in counts] == POD_T.tolist()
    np.testing.assert_array_equal(np.array([m.position for *_, m in counts]), COUNTS)
    assert list(counts[0][2].name) == ["c0", "c1", "c2"]


def test_mcap_reimports_into_an_equal_session(session: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.mcap"
    r = CliRunner().invoke(
        cli, ["export", str(session), "--format", "mcap", "-o", str(out), "--stream", "cam"]
    )
    assert r.exit_code == 0 and "/cam/pose 28" in r.output, r.output
    r = CliRunner().invoke(
        cli, ["export", str(session), "--format", "mcap", "-o", str(tmp_path / "all.mcap")]
    )
    assert r.exit_code == 0
    again = tmp_path / "again.h5"
    r = CliRunner().invoke(
        cli,
        ["import", "rosbag", str(tmp_path / "all.mcap"), "--topic", "/cam/pose=cam",
         "--topic", "/lidar_front/scan=lidar_front", "--into", str(again)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    with Session(again) as s:
        b = s.pose("cam").read()
        t = s.lidar("lidar_front").read()
    np.testing.assert_array_equal(b.t_ns, POSE_T[VALID])
    np.testing.assert_array_equal(b.position, POS[VALID])
    np.testing.assert_array_equal(t.t_first_ns, TURN_T)
    np.testing.assert_array_equal(t.range, RANGE.ravel())
    np.testing.assert_array_equal(t.intensity, INTENSITY.ravel())
    np.testing.assert_allclose(t.angle, np.tile(ANGLE, N_TURNS), rtol=0, atol=2e-6)
    # point times from time_increment, a float32: off by at most its relative rounding
    # (2^-24) times the turn's span, plus 1 ns of rounding
    bound = (N_PTS - 1) * 277_778 * 2.0**-24 + 1
    assert np.abs(t.t_ns - PT_T.ravel()).max() <= bound
