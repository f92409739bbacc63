"""Generic pose/mocap CSV import: columns by header name, flags, separators, bad input,
and a simulated campaign whose relocalization flags come in through the CSV.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pose_util
import pytest
from click.testing import CliRunner
from importers_util import read_pose_csv
from scipy.spatial.transform import Rotation

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.cli import cli
from sensorbench.errors import ImportFormatError
from sensorbench.logs import Session
from sensorbench.logs.schema import PoseFlag

RNG = np.random.default_rng(11)
N = 40
T_NS = 1_700_000_000_000_000_000 + np.cumsum(RNG.integers(8_000_000, 12_000_000, N))
POS = RNG.uniform(-5, 5, (N, 3))
QUAT = Rotation.random(N, random_state=RNG).as_quat()
RELOC = np.zeros(N, bool)
RELOC[[7, 23]] = True
PAUSED = np.zeros(N, bool)
PAUSED[30:33] = True


def _f(v: float) -> str:
    """Shortest text that reads back to the same float."""
    return repr(float(v))


def _t_s(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def _write(path: Path, sep: str, header: list[str], rows: list[list[str]]) -> Path:
    join = (lambda c: " ".join(c)) if sep == " " else sep.join
    lines = ["# a comment before the header", join(header)]
    for k, r in enumerate(rows):
        lines.append(join(r))
        if k == 5:
            lines.append("# a comment between samples")
    path.write_text("\n".join(lines) + "\n")
    return path


def _full_rows() -> list[list[str]]:
    return [
        [_f(POS[k, 1]), _t_s(int(T_NS[k])), "junk", _f(POS[k, 0]), _f(POS[k, 2])]
        + [_f(v) for v in QUAT[k]]
        + [str(int(RELOC[k])), str(int(PAUSED[k]))]
        for k in range(N)
    ]


FULL_HEADER = ["y", "t_s", "note", "x", "z", "qx", "qy", "qz", "qw", "relocalized", "paused"]


@pytest.mark.parametrize("sep", [",", ";", " "])
def test_columns_by_name_flags_and_separators(tmp_path: Path, sep: str) -> None:
    path = _write(tmp_path / "p.csv", sep, FULL_HEADER, _full_rows())
    b = read_pose_csv(path).batch
    np.testing.assert_array_equal(b.t_ns, T_NS)
    np.testing.assert_array_equal(b.position, POS)
    np.testing.assert_allclose(b.quat_xyzw, QUAT, rtol=0, atol=1e-15)
    assert ((b.flags & PoseFlag.RELOCALIZED) > 0).tolist() == RELOC.tolist()
    assert ((b.flags & PoseFlag.PAUSED) > 0).tolist() == PAUSED.tolist()


def test_planar_yaw_host_ns_and_column_map(tmp_path: Path) -> None:
    yaw = RNG.uniform(-np.pi, np.pi, N)
    rows = [[str(int(T_NS[k])), _f(POS[k, 0]), _f(POS[k, 1]), _f(yaw[k])] for k in range(N)]
    path = _write(tmp_path / "p.csv", ",", ["stamp", "east", "north", "heading"], rows)
    cols = {"host_ns": "stamp", "x": "east", "y": "north", "yaw": "heading"}
    b = read_pose_csv(path, columns=cols).batch
    np.testing.assert_array_equal(b.t_ns, T_NS)
    np.testing.assert_array_equal(b.position[:, :2], POS[:, :2])
    assert (b.position[:, 2] == 0).all() and (b.flags == 0).all()
    # a yaw about z is the quaternion (0, 0, sin(yaw/2), cos(yaw/2)), up to sign
    want = np.column_stack([np.zeros(N), np.zeros(N), np.sin(yaw / 2), np.cos(yaw / 2)])
    np.testing.assert_allclose(b.quat_xyzw * np.sign(b.quat_xyzw[:, 3:]), want, atol=1e-15)
    # the same through the CLI
    session = tmp_path / "s.h5"
    columns = "host_ns=stamp, x=east,y=north,yaw=heading"
    args = ["pose", str(path), "--format", "csv", "--into", str(session), "--columns", columns]
    r = CliRunner().invoke(cli, ["import", *args])
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        assert (
            s.pose("pose_sensor").attrs["column_map"] == "host_ns=stamp,x=east,y=north,yaw=heading"
        )
        np.testing.assert_array_equal(s.pose("pose_sensor").read().t_ns, T_NS)


def _cli(tmp_path: Path, path: Path, *extra: str):
    session = tmp_path / "s.h5"
    args = ["import", "mocap", str(path), "--format", "csv", "--into", str(session), *extra]
    r = CliRunner().invoke(cli, args)
    assert not session.exists(), "a refused import leaves no session"
    return r


@pytest.mark.parametrize("value", ["2", "yes", "-1", "0.5", ""])
def test_flag_value_other_than_0_or_1_is_refused_naming_the_cell(tmp_path, value) -> None:
    rows = _full_rows()
    rows[4][9] = value
    path = _write(tmp_path / "p.csv", ",", FULL_HEADER, rows)
    r = _cli(tmp_path, path)
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    # line: comment, header, then rows 0..4 -> line 7; 'relocalized' is field 10
    assert f"{path}:7:10: column 'relocalized': {value!r} must be 0 or 1" in r.output


def test_columns_naming_a_missing_header_or_unknown_name(tmp_path) -> None:
    path = _write(tmp_path / "p.csv", ",", FULL_HEADER, _full_rows())
    r = _cli(tmp_path, path, "--columns", "t_s=time")
    assert r.exit_code == 2
    assert f"{path}:2: --columns t_s=time: no column 'time' in the header" in r.output
    r = _cli(tmp_path, path, "--columns", "stamp=t_s")
    assert r.exit_code == 2 and "unknown column name 'stamp'" in r.output
    r = _cli(tmp_path, path, "--columns", "t_s")
    assert r.exit_code == 2 and "is not NAME=HEADER" in r.output


def test_missing_columns_are_listed(tmp_path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("time,x,qx,qy,qz,qw\n1,2,0,0,0,1\n")
    with pytest.raises(ImportFormatError) as err:
        read_pose_csv(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:1: header lacks t_s or host_ns; y; z")
    assert "--columns" in msg


def test_short_row_and_non_finite_cells(tmp_path) -> None:
    rows = _full_rows()
    rows[2] = rows[2][:-1]
    path = _write(tmp_path / "p.csv", ",", FULL_HEADER, rows)
    with pytest.raises(ImportFormatError, match=r"p.csv:5: 10 cells, header has 11"):
        read_pose_csv(path)
    rows = _full_rows()
    rows[3][3] = "inf"
    path = _write(tmp_path / "p.csv", ",", FULL_HEADER, rows)
    with pytest.raises(ImportFormatError, match=r"p.csv:6:4: column 'x': 'inf' is not a finite"):
        read_pose_csv(path)


# ------------------------------------------------------------- campaign round trip


def _campaign_csv(series, directory: Path) -> tuple[Path, Path]:
    """The sensor and the mocap of one simulated session as two CSV files."""
    t = series.t_s
    t_ref = np.arange(t[0] - 0.5, t[-1] + 0.5, 0.01)
    p_ref, q_ref = pose_util.reference_motion(t_ref)
    p, q = pose_util.reference_motion(t)
    q_s = (Rotation.from_quat(q) * Rotation.from_rotvec(series.error[:, 3:])).as_quat()
    p_s = p + series.error[:, :3]
    flags = series.reloc.astype(int)
    flags[0] = 0

    def ns(x: np.ndarray) -> np.ndarray:
        return np.round((x + 100.0) * 1e9).astype(np.int64)

    sensor = directory / f"{series.name}_sensor.csv"
    lines = ["host_ns,x,y,z,qx,qy,qz,qw,relocalized"]
    for k in range(t.size):
        cells = [str(ns(t)[k]), *(_f(v) for v in p_s[k]), *(_f(v) for v in q_s[k])]
        lines.append(",".join([*cells, str(flags[k])]))
    sensor.write_text("\n".join(lines) + "\n")
    mocap = directory / f"{series.name}_mocap.csv"
    lines = ["host_ns x y z qx qy qz qw"]
    for k in range(t_ref.size):
        lines.append(" ".join([str(ns(t_ref)[k]), *(_f(v) for v in (*p_ref[k], *q_ref[k]))]))
    mocap.write_text("\n".join(lines) + "\n")
    return sensor, mocap


def test_csv_campaign_with_relocalized_column_fits_from_the_flags(tmp_path) -> None:
    """Three 120-s sessions with jittered (±20 %) sampling and a 1-s gap, as CSV: the
    fit segments by the imported flags and recovers each axis' sigma and tau within
    4 of their stated standard errors (log scale) — the bound test_pose_cli uses on
    the same campaign written directly."""
    sessions = []
    for series in pose_util.campaign(21, "correct", n_sessions=3, duration_s=120.0):
        sensor, mocap = _campaign_csv(series, tmp_path)
        session = tmp_path / f"{series.name}.h5"
        for what, path, name in (("mocap", mocap, "mocap"), ("pose", sensor, "cam")):
            r = CliRunner().invoke(
                cli,
                ["import", what, str(path), "--format", "csv", "--into", str(session),
                 "--name", name],
            )  # fmt: skip
            assert r.exit_code == 0, r.output
        with Session(session) as s:
            got = (s.pose("cam").read().flags & PoseFlag.RELOCALIZED) > 0
        want = series.reloc.copy()
        want[0] = False
        assert got.tolist() == want.tolist()
        sessions.append(session)
    out = tmp_path / "model.toml"
    r = CliRunner().invoke(
        cli,
        ["fit", "pose-error", *map(str, sessions), "--sensor", "cam", "--no-align",
         "--time-offset", "0", "-o", str(out), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert all(s["segmentation"]["method"] == "flags" for s in doc["sessions"])
    model = PoseErrorModel.load(out)
    for i, a in enumerate(("x", "y", "z", "roll", "pitch", "yaw")):
        f = model.axes[a]
        for j, value in ((1, f.sigma), (2, f.tau_s)):
            z = (np.log(value) - np.log(pose_util.TRUTH[i, j])) / f.se_log[j]
            assert abs(z) < 4.0, (a, j, z)
