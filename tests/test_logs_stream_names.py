"""Stream names are unique across kinds (issue 14, item 8): an import may not shadow
another kind's stream or take a reserved name, and `export --stream events` always
exports the event table."""

from __future__ import annotations

import csv

import h5py
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.errors import SessionError
from sensorbench.logs import Session, SessionWriter


def _import(what: str, src, session, name: str, fmt: str = "tum"):
    args = ["import", what, str(src), "--format", fmt, "--into", str(session), "--name", name]
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("pods", "encoder stream"),  # the session's encoder stream
        ("front", "lidar stream"),  # the session's lidar (and its raw bytes)
        ("events", "reserved"),
        ("truth", "reserved"),
        ("ld19", "reserved for lidar streams"),
        ("mocap", "pose stream"),  # same kind, same name: declared twice
    ],
)
def test_an_import_may_not_take_another_streams_or_a_reserved_name(tmp_path, name, why):
    session = su.write_small_session(tmp_path / "s.h5")
    tum = su.write_tum(tmp_path / "m.tum", 30)
    before = su.sha256(session)
    result = _import("mocap", tum, session, name)
    assert result.exit_code == 2, result.output
    assert repr(name) in result.output and why in result.output, result.output
    assert su.sha256(session) == before


def test_a_pods_import_may_not_take_a_pose_name(tmp_path) -> None:
    session = su.write_small_session(tmp_path / "s.h5")
    pods = tmp_path / "pods.csv"
    pods.write_text("t_s,c0,c1,c2\n" + "".join(f"{i / 100},{i},{i},{i}\n" for i in range(20)))
    result = _import("pods", pods, session, "pose_sensor", fmt="csv")
    assert result.exit_code == 2 and "reserved for pose streams" in result.output
    assert _import("pods", pods, session, "pods2", fmt="csv").exit_code == 0


def test_the_writer_refuses_a_name_shared_across_kinds(tmp_path) -> None:
    with SessionWriter(tmp_path / "s.h5", swmr=False) as w:
        w.add_lidar("front")
        w.add_raw("front")  # a device's raw bytes beside its decoded stream: allowed
        with pytest.raises(SessionError, match="unique across kinds"):
            w.add_pose("front", "mocap")
        with pytest.raises(SessionError, match="unique across kinds"):
            w.add_encoder("front", 3)
        w.add_pose("tracker", "pose_sensor")  # a serial pose sensor and its raw bytes
        w.add_raw("tracker")


def test_export_events_is_the_event_table_even_in_an_old_file_with_a_stream_so_named(tmp_path):
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:  # as files written before names were checked
        f.move("pose/mocap", "pose/events")
    out = tmp_path / "events.csv"
    result = CliRunner().invoke(
        cli, ["export", str(session), "--stream", "events", "--format", "csv", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(out.open()))
    assert rows == [["t_ns", "source", "kind", "message"], [str(su.T0), "front", "note", "hello"]]


def test_export_refuses_a_name_two_kinds_share_in_an_old_file(tmp_path) -> None:
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:
        f.move("pose/mocap", "pose/pods")
    out = tmp_path / "x.csv"
    result = CliRunner().invoke(
        cli, ["export", str(session), "--stream", "pods", "--format", "csv", "-o", str(out)]
    )
    assert result.exit_code == 2 and "pose and encoder streams are both called 'pods'" in (
        result.output
    )
    assert not out.exists()
    with Session(session) as s:
        assert s.pose_names() == ["pods"]


def _gap_turns():
    """300 LD19-like turns at 10 Hz (450 points, 2 m) with turns 100-109 missing: a
    1.1 s gap after turn 99 (ns times)."""
    import numpy as np

    from sensorbench.logs import LidarTurns

    keep = np.r_[0:100, 110:300]
    start = keep.astype(np.int64) * 100_000_000
    n, p = keep.size, 450
    angle = np.tile(np.arange(p) * (2 * np.pi / p), n).astype(np.float32)
    t = np.repeat(start, p) + np.tile(np.arange(p, dtype=np.int64) * 222_222, n)
    return LidarTurns(start, start.copy(), np.full(n, 10, np.float32), np.full(n, p, np.int32),
                      np.zeros(n, np.uint16), angle, np.full(n * p, 2.0, np.float32),
                      np.full(n * p, 100, np.uint16), t)  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["lidar_front_left_bumper_mount_v2", "lidar_front_left_bumper_mount_v2x",
     "lidar_front_left_bumper_mount_é2"],
    ids=["32-bytes", "33-bytes", "33-bytes-utf8"],
)  # fmt: skip
def test_a_device_name_fits_its_events_source(tmp_path, name) -> None:
    """The events table holds a source of 32 bytes: a longer lidar name's stale event
    was stored cut, so `characterize lidar` did not see it as the device's and counted
    its 1.1 s gap as 10 skipped turns instead of one USB drop-off."""
    from sensorbench.characterize.lidar.stats import characterize_session

    path = tmp_path / "s.h5"
    writer = SessionWriter(path, swmr=False)
    if len(name.encode()) > 32:
        with pytest.raises(SessionError, match=r"is 33 bytes \(UTF-8\): at most 32"):
            writer.add_lidar(name, attrs={"model": "LD19"})
        writer.abort()
        assert not path.exists()
        return
    assert len(name.encode()) == 32
    with writer:
        writer.add_lidar(name, attrs={"model": "LD19"})
        writer.append_turns(name, _gap_turns())
        writer.event(9_900_000_000 + 600_000_000, name, "stale", "no bytes for 0.50 s")
    timing = characterize_session(path, name, timing_only=True).timing
    assert (timing.usb_stale, timing.usb_dropoff_gaps, timing.skipped_turns) == (1, 1, 0)
