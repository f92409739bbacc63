"""``split``: one long simulated recording into pieces that concatenate back to it, with
truth sliced alongside; ``validate`` on the pieces is leave-one-piece-out."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.importers import file_sha256

SCENARIO = """\
name = "long_reloc"
description = "one long recording with relocalizations, for the split tests"

[robot]
start_xy_m = [-1.5, -1.2]

[trajectory]
kind = "waypoints"
repeats = 5
pause_s = 0.5
max_speed_m_s = 0.5
max_accel_m_s2 = 0.5
waypoints = [[1.5, -1.2, 0.0], [1.5, 1.2, 90.0], [-1.5, 1.2, 180.0], [-1.5, -1.2, 270.0]]

[pose_sensor]
rate_hz = 30.0
latency_s = 0.0
gm_sigma = [0.02, 0.02, 0.01, 0.003, 0.003, 0.005]
gm_tau_s = [2.0, 2.0, 3.0, 3.0, 3.0, 2.0]
reloc_sigma = [0.05, 0.05, 0.02, 0.005, 0.005, 0.02]
white_sigma = [0.002, 0.002, 0.002, 0.0005, 0.0005, 0.0005]
reloc_times_s = [15.0, 35.0, 55.0, 75.0, 95.0, 115.0, 135.0, 150.0]
"""
PIECES = 3


def _run(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def long_session(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("split")
    (d / "long.toml").write_text(SCENARIO)
    r = _run("simulate", "--scenario", d / "long.toml", "--seed", 3, "-o", d / "long.h5")
    assert r.exit_code == 0, r.output
    return d / "long.h5"


@pytest.fixture(scope="module")
def pieces(long_session: Path) -> list[Path]:
    out = long_session.parent / "pieces"
    r = _run("split", long_session, "--pieces", PIECES, "-o", out)
    assert r.exit_code == 0, r.output
    return sorted(out.glob("*.h5"))


def _concat(paths: list[Path], read) -> dict:
    parts = []
    for p in paths:
        with Session(p) as s:
            parts.append(read(s))
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_pieces_concatenate_back_to_the_original(long_session, pieces) -> None:
    assert [p.name for p in pieces] == [f"long_piece{k}.h5" for k in range(1, PIECES + 1)]
    with Session(long_session) as s:
        lidars, poses, encoders = s.lidar_names(), s.pose_names(), s.encoder_names()
        events = s.events()
    assert lidars and poses and encoders
    readers = [
        lambda s, name=name: {
            "t": (b := s.pose(name).read()).t_ns, "p": b.position, "q": b.quat_xyzw,
            "v": b.valid, "f": b.flags,
        } for name in poses
    ] + [
        lambda s, name=name: {
            "t": (e := s.encoder(name).read()).host_ns, "d": e.device_ns, "c": e.counts,
            "y": e.yaw_rate,
        } for name in encoders
    ] + [
        lambda s, name=name: {
            "t0": (t := s.lidar(name).read()).t_first_ns, "n": t.count, "a": t.angle,
            "r": t.range, "i": t.intensity, "t": t.t_ns, "fl": t.flags,
        } for name in lidars
    ]  # fmt: skip
    for read in readers:
        got, want = _concat(pieces, read), _concat([long_session], read)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    got_events = [e for p in pieces for e in Session(p).events()]
    assert [(e.t_ns, e.kind) for e in got_events] == [(e.t_ns, e.kind) for e in events]


def test_truth_is_sliced_with_its_streams(long_session, pieces) -> None:
    with Session(long_session) as s:
        names = s.truth_names()
        whole = {n: s.truth(n) for n in names}
        n_pose = len(s.pose("pose_sensor"))
    sliced = ("pose/t_ns", "pose/x_y_yaw", "pose_sensor/error", "pose_sensor/reloc_t_ns",
              "pods/true_distance_m", "lidar/ld19/turn_index", "lidar/ld19/true_range_m",
              "lidar/ld19/turn_t_start_ns")  # fmt: skip
    assert set(sliced) <= set(names) and len(whole["pose_sensor/error"]) == n_pose
    parts = []
    for p in pieces:
        with Session(p) as s:
            assert s.truth_names() == names
            parts.append({n: s.truth(n) for n in names})
            # per-sample truth stays aligned with its piece's samples
            assert len(s.truth("pose_sensor/error")) == len(s.pose("pose_sensor"))
            assert len(s.truth("lidar/ld19/true_range_m")) == s.lidar("ld19").read().n_points
    for n in sliced:
        np.testing.assert_array_equal(np.concatenate([p[n] for p in parts]), whole[n])
    for p in parts:  # constant truth is copied whole
        np.testing.assert_array_equal(p["pods/geometry"], whole["pods/geometry"])
        np.testing.assert_array_equal(p["world/segments"], whole["world/segments"])


def test_pieces_record_their_origin(long_session, pieces) -> None:
    digest = file_sha256(long_session)
    bounds = []
    for k, p in enumerate(pieces, start=1):
        with h5py.File(p, "r") as f:
            a = f.attrs
            assert a["split_source"] == "long.h5" and a["split_source_sha256"] == digest
            assert (a["split_piece"], a["split_pieces"]) == (k, PIECES)
            bounds.append((int(a["split_t_start_ns"]), int(a["split_t_end_ns"])))
            assert a["label"] == "long_reloc"
    assert all(bounds[k][1] == bounds[k + 1][0] for k in range(PIECES - 1))
    r = _run("check", pieces[0])
    assert r.exit_code == 0 and "OK" in r.output


def test_validate_leaves_one_piece_out(pieces) -> None:
    r = _run("validate", *pieces, "--sensor", "pose_sensor", "--draws", 200, "--json")
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    assert doc["mode"] == "leave-one-session-out"
    assert len(doc["sessions"]) == PIECES


def test_every_seconds_and_bad_requests(long_session, tmp_path) -> None:
    with Session(long_session) as s:
        t = np.concatenate([s.pose(n).read().t_ns for n in s.pose_names()])
    span_s = (t.max() - t.min()) / 1e9  # mocap and pose sensor cover the whole span here
    r = _run("split", long_session, "--every", 60, "-o", tmp_path / "e")
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "e").glob("*.h5"))) == int(np.ceil(span_s / 60))
    r = _run("split", long_session, "--every", 60, "-o", tmp_path / "e")
    assert r.exit_code == 2 and "exists" in r.output
    (tmp_path / "d").mkdir()  # a dangling link where a piece goes was "appeared while written"
    (tmp_path / "d" / f"{long_session.stem}_piece1.h5").symlink_to("/nonexistent")
    r = _run("split", long_session, "--pieces", 2, "-o", tmp_path / "d")
    assert r.exit_code == 2 and "piece1.h5 exists" in r.output, r.output
    r = _run("split", long_session, "-o", tmp_path / "n")
    assert r.exit_code == 2 and "exactly one of --pieces N or --every S" in r.output
    for every in (span_s + 1, 1e300):  # longer than the session: one piece (1e300 s overflowed)
        out = tmp_path / f"long{every:g}"
        r = _run("split", long_session, "--every", every, "-o", out)
        assert r.exit_code == 0 and len(list(out.glob("*.h5"))) == 1, r.output


def test_raw_streams_are_split_by_chunk(tmp_path) -> None:
    path = tmp_path / "raw.h5"
    rng = np.random.default_rng(2)
    chunks = [bytes(rng.integers(0, 256, rng.integers(1, 40), dtype=np.uint8)) for _ in range(30)]
    with SessionWriter(path, swmr=False) as w:
        w.add_raw("ld19")
        w.add_pose("m", kind="mocap")
        for k, c in enumerate(chunks):
            w.append_raw("ld19", 1_000 + k * 100, c)
    r = _run("split", path, "--pieces", 4, "-o", tmp_path / "p")
    assert r.exit_code == 0, r.output
    got = b""
    for p in sorted((tmp_path / "p").glob("*.h5")):
        with Session(p) as s:
            got += s.raw("ld19").read_bytes()
    assert got == b"".join(chunks)
