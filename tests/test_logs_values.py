"""The one value checker (``logs/values.py``): what it refuses, what it lets through, and
``export --skip-invalid``, which leaves impossible samples out and counts them.

The refusals through every command are in ``test_bad_inputs_cli.py``; here the checker
itself is held to the format: what ``docs/FORMAT.md`` allows (nan positions of an
invalid pose, nan and inf ranges, nan IMU values, INT64_MIN device times, encoder
frames sharing a host stamp) must pass.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner
from importers_util import parse_int

from sensorbench.cli import cli
from sensorbench.logs import LidarTurns, PoseBatch, Session
from sensorbench.logs.schema import NO_DEVICE_TIME
from sensorbench.logs.text_table import parse_float
from sensorbench.logs.values import (
    MAX_ABS_STAMP_NS,
    encoder_problems,
    lidar_problems,
    pose_problems,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1.5", 1.5), ("-2", -2.0), ("+.5e-3", 5e-4), ("1e300", 1e300), (" 3 ", 3.0), ("7.", 7.0)],
)
def test_ascii_decimals_parse(text: str, value: float) -> None:
    assert parse_float(text) == value


@pytest.mark.parametrize(
    "text", ["1_0", "\uff11\uff10", "\u00a01", "1\u00a0", "\u0661", "0x10", "1e", "", "--1", "e5"]
)
def test_what_python_float_also_takes_is_not_a_number(text: str) -> None:
    assert parse_float(text) is None


def test_nan_and_inf_are_recognised_for_the_caller_to_judge() -> None:
    assert np.isnan(parse_float("nan")) and parse_float("-Infinity") == -np.inf


def test_integers_are_ascii_digits_only() -> None:
    assert parse_int("-42") == -42 and parse_int(" 7 ") == 7
    for text in ("1_000", "\uff15", "4.0", "1e3", "", "\u00a05"):
        assert parse_int(text) is None, text


def _poses(n: int = 6) -> PoseBatch:
    return su.pose_batch(n)


def test_what_the_format_allows_is_no_problem() -> None:
    p = _poses()
    p.valid[2] = False
    p.position[2] = np.nan
    p.quat_xyzw[2] = np.nan
    assert pose_problems("pose/m", p)[0] == []
    e = su.encoder_batch(np.array([5, 5, 6, 9]) * 10**6, np.zeros((4, 3)))
    assert e.device_ns[0] == NO_DEVICE_TIME and np.isnan(e.yaw).all()
    assert encoder_problems("encoders/p", e)[0] == []  # a shared stamp: one read
    t = su.lidar_turns()
    t.range[3], t.range[4] = np.nan, np.inf
    assert lidar_problems("lidar/l", t)[0] == []


def test_each_impossible_sample_is_named_at_its_first_index_and_counted() -> None:
    p = _poses(8)
    p.position[3, 1] = np.inf
    p.position[5, 0] = -1e300
    p.t_ns[6] = p.t_ns[5]
    p.t_ns[7] = MAX_ABS_STAMP_NS + 1
    problems, bad = pose_problems("pose/m", p)
    text = [str(x) for x in problems]
    assert any(s.startswith("/pose/m/position[3]:") and "(2 rows)" in s for s in text), text
    assert any(s.startswith("/pose/m/t_ns[6]: time repeats") for s in text), text
    assert any(s.startswith("/pose/m/t_ns[7]:") and "not a possible time" in s for s in text)
    assert np.flatnonzero(bad).tolist() == [3, 5, 6, 7]


def test_one_stamp_stepping_back_drops_only_what_the_order_cannot_keep() -> None:
    e = su.encoder_batch(np.array([1, 5, 2, 3, 6], np.int64) * 10**6, np.zeros((5, 3)))
    problems, bad = encoder_problems("encoders/p", e)
    assert [str(x) for x in problems] == [
        "/encoders/p/host_ns[2]: time goes backwards 2 times (largest 0.003000 s)"
    ]
    assert bad.tolist() == [False, False, True, True, False]  # the rest is in order


def test_a_bad_point_marks_its_turn() -> None:
    t = su.lidar_turns(4, 12)
    t.angle[13] = np.nan  # turn 1
    t.range[40] = -0.5  # turn 3
    problems, bad = lidar_problems("lidar/l", t)
    assert [p.dataset for p in problems] == ["lidar/l/angle", "lidar/l/range"]
    assert bad.tolist() == [False, True, False, True]


def _damaged_session(tmp_path):
    path = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:
        f["pose/mocap/position"][4, 0] = np.nan
        f["lidar/front/angle"][13] = 7.0  # turn 1 of 4
        t = f["encoders/pods/host_ns"]
        t[20] = t[19] - 1
    return path


def test_the_reader_refuses_what_check_reports(tmp_path) -> None:
    path = _damaged_session(tmp_path)
    with Session(path) as s:
        with pytest.raises(Exception, match=r"/pose/mocap/position\[4\]"):
            s.pose("mocap").read()
        assert len(s.pose("mocap").read(validate=False)) == su.FRAMES
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1
    for text in ("/pose/mocap/position[4]", "/lidar/front/angle[13]", "/encoders/pods/host_ns[20]"):
        assert text in result.output, result.output


@pytest.mark.parametrize(
    ("stream", "fmt", "rows", "skipped"),
    [
        ("mocap", "tum", su.FRAMES - 1, 1),
        ("pods", "csv", su.FRAMES - 1, 1),
        ("front", "csv", 3 * su.POINTS, 1),
    ],
)
def test_export_skip_invalid_leaves_them_out_and_says_so(
    tmp_path, stream, fmt, rows, skipped
) -> None:
    path = _damaged_session(tmp_path)
    out = tmp_path / f"out.{fmt}"
    args = ["export", str(path), "--stream", stream, "--format", fmt, "-o", str(out)]
    refused = CliRunner().invoke(cli, args)
    assert refused.exit_code == 2 and "--skip-invalid" in refused.output and not out.exists()
    done = CliRunner().invoke(cli, [*args, "--skip-invalid"])
    assert done.exit_code == 0, done.output
    assert f"wrote {rows} rows" in done.output and f"skipped {skipped} invalid" in done.output
    lines = [x for x in out.read_text().splitlines() if x and not x.startswith("#")]
    assert len(lines) - (fmt == "csv") == rows
    if stream == "pods":  # nan yaw is "no IMU"; the frame that stepped back is gone
        t = np.array([int(x.split(",")[0]) for x in lines[1:]])
        assert np.all(np.diff(t) >= 0)
    else:
        assert "nan" not in out.read_text().lower()


def test_export_mcap_skip_invalid_drops_the_damaged_turn(tmp_path) -> None:
    pytest.importorskip("rosbags")
    path = _damaged_session(tmp_path)
    out = tmp_path / "out.mcap"
    args = ["export", str(path), "--stream", "front", "--format", "mcap", "-o", str(out)]
    assert CliRunner().invoke(cli, args).exit_code == 2
    done = CliRunner().invoke(cli, [*args, "--skip-invalid"])
    assert done.exit_code == 0, done.output
    assert "/front/scan 3" in done.output and "skipped 1 invalid turns of /lidar/front" in (
        done.output
    )


def test_a_lidar_batch_keeps_its_points_with_its_turns() -> None:
    from sensorbench.logs.values import exportable

    t = su.lidar_turns(3, 5)
    t.angle[7] = np.nan
    kept, dropped = exportable("s.h5", "lidar/l", t, skip_invalid=True)
    assert dropped.tolist() == [False, True, False]
    assert isinstance(kept, LidarTurns) and kept.count.tolist() == [5, 5]
    assert np.array_equal(kept.t_ns, np.concatenate([t.t_ns[:5], t.t_ns[10:]]))
