"""`export --format mcap` of a capture (host clock) holding an imported stream already on
Unix time (`import rosbag --into`, an epoch-stamped TUM file): each stream is stamped on
its own clock. The session's clock anchor was added to every stream, so the imported one
landed past 2038 and the export died in a struct.error traceback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from click.testing import CliRunner
from rosbags.highlevel import AnyReader
from session_util import pose_batch

from sensorbench.cli import cli
from sensorbench.logs import Session, SessionWriter

HOST_T0 = 1_000_000_000_000  # a capture's monotonic clock: 1000 s of uptime
UNIX_T0 = 1_700_000_000_000_000_000  # an imported bag's header stamps (2023-11-14)
N = 50


def _mixed(path: Path, host_t0: int = HOST_T0) -> Path:
    with SessionWriter(path, label="mixed", swmr=False) as w:
        w.add_pose("mocap", "mocap", attrs={"time_base": "host"})
        w.add_pose("cam", "pose_sensor", attrs={"time_base": "ROS header stamps"})
        w.append_pose("mocap", pose_batch(N, host_t0))
        w.append_pose("cam", pose_batch(N, UNIX_T0))
    return path


def _first_stamps(bag: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    with AnyReader([bag]) as r:
        for c, t, _ in r.messages():
            out.setdefault(c.topic, []).append(t)
    return out


def test_each_stream_is_stamped_on_its_own_clock(tmp_path: Path) -> None:
    session = _mixed(tmp_path / "mixed.h5")
    out = tmp_path / "mixed.mcap"
    res = CliRunner().invoke(cli, ["export", str(session), "--format", "mcap", "-o", str(out)])
    assert res.exit_code == 0, res.output
    with Session(session) as s:
        anchor = int(s.attrs["wall_clock_anchor_ns"]) - int(s.attrs["monotonic_anchor_ns"])
    stamps = _first_stamps(out)
    step = np.arange(N, dtype=np.int64) * 10_000_000
    # exact: the imported stream keeps its stamps, the capture's take the anchor
    assert stamps["/cam/pose"] == (UNIX_T0 + step).tolist()
    assert stamps["/mocap/pose"] == (HOST_T0 + anchor + step).tolist()


def test_a_stamp_past_2038_is_refused_by_name(tmp_path: Path) -> None:
    # a host clock 28 years up (a counter of another origin, not a monotonic clock):
    # with the anchor it passes 2038, which no ROS 2 stamp (int32 seconds) holds
    session = _mixed(tmp_path / "late.h5", host_t0=900_000_000_000_000_000)
    out = tmp_path / "late.mcap"
    res = CliRunner().invoke(cli, ["export", str(session), "--format", "mcap", "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert ": pose/mocap: time 900000000000000000 ns" in res.output
    assert "2038-01-19 or later" in res.output
    assert not out.exists()
