"""Importers refuse non-finite and absurd values naming file:line:column; Motive Y-up -> Z-up.

Every bad cell is placed at a known line and field, so the message must name exactly
that cell. The Motive conversion is checked against the axis mapping OptiTrack
documents for Z-up exports (x' = x, y' = -z, z' = y, written out here by hand, not
taken from the importer) on a body at identity, on rotations about each axis and on
rigidity: a point fixed on the body must land where the converted world puts it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from importers_util import read_motive
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.errors import ImportFormatError
from sensorbench.logs import Session

# ---------------------------------------------------------------- file builders


def _table(header: str, rows: list[list[str]], sep: str, cells) -> str:
    """``header`` then ``rows``; ``cells[(row, field)]`` (0-based row, 1-based field)
    overrides a cell."""
    for (r, f), text in (cells or {}).items():
        rows[r][f - 1] = text
    return "\n".join([header] + [sep.join(row) for row in rows]) + "\n"


def _tum(cells: dict[tuple[int, int], str] | None = None, n: int = 6) -> str:
    """TUM rows; ``cells`` as in ``_table``."""
    rows = [[f"{1.0 + 0.01 * k:.6f}", f"{0.1 * k}", "0.5", "0.2", "0", "0", "0", "1"]
            for k in range(n)]  # fmt: skip
    return _table("# timestamp tx ty tz qx qy qz qw", rows, " ", cells)


def _euroc(cells: dict[tuple[int, int], str] | None = None, n: int = 6) -> str:
    header = (
        "#timestamp [ns],p_RS_R_x [m],p_RS_R_y [m],p_RS_R_z [m],"
        "q_RS_w [],q_RS_x [],q_RS_y [],q_RS_z []"
    )
    rows = [[str(1_403_636_579_758_555_392 + 5_000_000 * k), f"{0.1 * k}", "0.5", "0.2",
             "1", "0", "0", "0"] for k in range(n)]  # fmt: skip
    return _table(header, rows, ",", cells)


def _pods(cells: dict[tuple[int, int], str] | None = None, n: int = 6) -> str:
    rows = [[f"{0.01 * k:.3f}", str(3 * k), str(-2 * k), str(k), "0.1"] for k in range(n)]
    return _table("t_s,c0,c1,c2,yaw_rate", rows, ",", cells)


MOTIVE_Y_TO_Z = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
"""OptiTrack's Z-up convention for its Y-up world (docs/FORMAT.md): X -> +X, Y -> +Z, Z -> -Y."""


def _motive(
    quat_xyzw: np.ndarray,
    pos: np.ndarray,
    cells: dict[tuple[int, int], str] | None = None,
    markers: np.ndarray | None = None,
) -> str:
    """A Motive 1.23 export of body ``robot``: rotation X Y Z W, position X Y Z (Y-up, m).

    ``cells[(row, field)]`` overrides a data cell (0-based frame, 1-based field: 1 is
    Frame, 2 Time, 3-6 the quaternion, 7-9 the position, 10-12 the marker).
    """
    n = len(pos)
    markers = pos if markers is None else markers
    meta = (
        "Format Version,1.23,Take Name,t,Capture Frame Rate,120.000000,Export Frame Rate,"
        f"120.000000,Capture Start Time,2024-01-01 10.00.00.000 AM,Total Frames in Take,{n},"
        f"Total Exported Frames,{n},Rotation Type,Quaternion,Length Units,Meters,"
        "Coordinate Space,Global"
    )
    lines = [
        meta,
        "",
        "Type,," + ",".join(["Rigid Body"] * 7 + ["Rigid Body Marker"] * 3),
        "Name,," + ",".join(["robot"] * 7 + ["robot:Marker1"] * 3),
        "ID,," + ",".join(["1"] * 10),
        ",," + ",".join(["Rotation"] * 4 + ["Position"] * 3 + ["Position"] * 3),
        "Frame,Time (Seconds)," + ",".join(["X", "Y", "Z", "W", "X", "Y", "Z", "X", "Y", "Z"]),
    ]
    for k in range(n):
        row = [str(k), f"{k / 120:.6f}"]
        row += [f"{v:.12f}" for v in quat_xyzw[k]] + [f"{v:.12f}" for v in pos[k]]
        row += [f"{v:.12f}" for v in markers[k]]
        for (r, f), text in (cells or {}).items():
            if r == k:
                row[f - 1] = text
        lines.append(",".join(row))
    return "\n".join(lines) + "\n"


def _motive_default(cells: dict[tuple[int, int], str] | None = None, n: int = 6) -> str:
    quat = np.tile([0.0, 0.0, 0.0, 1.0], (n, 1))
    pos = np.column_stack([0.1 * np.arange(n), np.full(n, 0.3), np.full(n, -0.2)])
    return _motive(quat, pos, cells)


FORMATS = {
    # what, --format, builder, file name, {role: (field, column name)}
    "tum": ("mocap", "tum", _tum, "gt.txt", {"t": (1, "timestamp"), "pos": (3, "ty")}),
    "euroc": ("pose", "euroc", _euroc, "data.csv", {"t": (1, "timestamp"), "pos": (2, "px")}),
    "motive": (
        "mocap",
        "motive",
        _motive_default,
        "take.csv",
        {"t": (2, "Time (Seconds)"), "pos": (8, "Position.Y")},
    ),
    "pods": ("pods", "csv", _pods, "pods.csv", {"t": (1, "t_s"), "count": (3, "c1")}),
}
# the header lines before the first data row, per format (so row k is at line k + 1 + this)
HEADER_LINES = {"tum": 1, "euroc": 1, "motive": 7, "pods": 1}


def _import(tmp_path: Path, fmt: str, text: str, *extra: str):
    what, fmt_name, _, fname, _ = FORMATS[fmt]
    path = tmp_path / fname
    path.write_text(text)
    session = tmp_path / "s.h5"
    args = ["import", what, str(path), "--format", fmt_name, "--into", str(session), *extra]
    return CliRunner().invoke(cli, args), path, session


BAD_VALUES = {
    "t": ["nan", "inf", "-inf", "NaN", "1e300"],
    "pos": ["nan", "inf", "-Infinity", "1e300", "1e6"],
    "count": ["nan", "inf", "1e300", "99999999999999999999999"],
}


@pytest.mark.parametrize(
    ("fmt", "role", "value"),
    [
        (fmt, role, value)
        for fmt, spec in FORMATS.items()
        for role in spec[4]
        for value in BAD_VALUES[role]
        # Motive's occlusion notion: a nan rigid-body cell is an invalid sample, tested below
        if not (fmt == "motive" and role == "pos" and value.lower() == "nan")
    ],
)
def test_non_finite_or_absurd_value_exits_2_naming_the_cell(
    tmp_path: Path, fmt: str, role: str, value: str
) -> None:
    field, column = FORMATS[fmt][4][role]
    row = 3
    text = FORMATS[fmt][2]({(row, field): value})
    r, path, session = _import(tmp_path, fmt, text)
    assert r.exit_code == 2, r.output
    assert isinstance(r.exception, SystemExit), "a traceback, not a clean error"
    line = row + 1 + HEADER_LINES[fmt]
    assert f"{path}:{line}:{field}: column '{column}'" in r.output, r.output
    assert not session.exists(), "a refused import must not leave a session behind"


def test_position_limit_is_configurable(tmp_path: Path) -> None:
    text = _tum({(2, 3): "12000"})
    r, path, _ = _import(tmp_path, "tum", text)
    assert r.exit_code == 2 and f"{path}:4:3: column 'ty': 12000 m is beyond" in r.output
    assert "--max-position-m" in r.output
    r, _, session = _import(tmp_path, "tum", text, "--max-position-m", "2e4")
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        assert s.pose("mocap").read().position[2, 1] == 12000.0
    r, path, _ = _import(tmp_path, "tum", _tum({(1, 2): "-1.5"}), "--max-position-m", "1")
    assert r.exit_code == 2 and f"{path}:3:2: column 'tx': -1.5 m is beyond" in r.output


def test_pods_nan_imu_is_no_value_but_inf_is_an_error(tmp_path: Path) -> None:
    r, _, session = _import(tmp_path, "pods", _pods({(2, 5): "nan"}))
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        rate = s.encoder("pods").read().yaw_rate
    assert np.isnan(rate[2]) and np.isfinite(np.delete(rate, 2)).all()
    r, path, _ = _import(tmp_path, "pods", _pods({(2, 5): "inf"}))
    assert r.exit_code == 2 and f"{path}:4:5: column 'yaw_rate'" in r.output


def test_motive_nan_or_blank_cells_are_occlusions(tmp_path: Path) -> None:
    path = tmp_path / "take.csv"
    path.write_text(_motive_default({(1, 4): "nan", (4, 7): "", (4, 8): "", (4, 9): ""}))
    b = read_motive(path).batch
    assert b.valid.tolist() == [True, False, True, True, False, True]
    assert np.isnan(b.position[[1, 4]]).all() and np.isnan(b.quat_xyzw[[1, 4]]).all()
    assert np.isfinite(b.position[b.valid]).all()


# ---------------------------------------------------------------- Motive Y-up -> Z-up


def _read_one(tmp_path: Path, quat_xyzw: np.ndarray, pos: np.ndarray, up: str = "y"):
    path = tmp_path / "take.csv"
    path.write_text(_motive(np.atleast_2d(quat_xyzw), np.atleast_2d(pos)))
    return read_motive(path, up=up).batch


def test_motive_body_at_identity_stays_identity(tmp_path: Path) -> None:
    b = _read_one(tmp_path, np.array([0.0, 0.0, 0.0, 1.0]), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(np.abs(b.quat_xyzw[0]), [0, 0, 0, 1], atol=1e-12)
    np.testing.assert_allclose(b.position[0], [1.0, -3.0, 2.0], atol=1e-12)
    # --up z keeps the file's numbers
    b = _read_one(tmp_path, np.array([0.0, 0.0, 0.0, 1.0]), np.array([1.0, 2.0, 3.0]), up="z")
    np.testing.assert_allclose(b.position[0], [1.0, 2.0, 3.0], atol=1e-12)


@pytest.mark.parametrize(
    ("motive_axis", "zup_axis"),
    [
        ((0, 1, 0), (0, 0, 1)),  # yaw about Motive's up axis is a yaw about z
        ((1, 0, 0), (1, 0, 0)),  # Motive X stays X
        ((0, 0, 1), (0, -1, 0)),  # Motive Z (toward the viewer) is -Y
    ],
)
@pytest.mark.parametrize("angle_deg", [30.0, -75.0, 160.0])
def test_motive_known_rotations(
    tmp_path: Path, motive_axis: tuple, zup_axis: tuple, angle_deg: float
) -> None:
    rotvec = np.radians(angle_deg) * np.array(motive_axis, float)
    q = Rotation.from_rotvec(rotvec).as_quat()
    b = _read_one(tmp_path, q, np.zeros(3))
    want = Rotation.from_rotvec(np.radians(angle_deg) * np.array(zup_axis, float))
    got = Rotation.from_quat(b.quat_xyzw[0])
    assert (got * want.inv()).magnitude() < 1e-9


def test_motive_conversion_keeps_the_body_rigid(tmp_path: Path) -> None:
    """A marker fixed on the body lands where the converted pose puts it (world converted)."""
    rng = np.random.default_rng(3)
    rot = Rotation.random(12, random_state=rng)
    pos = rng.uniform(-3, 3, (12, 3))
    offset = np.array([0.12, -0.05, 0.31])  # marker in the body frame (Motive body axes)
    markers = pos + rot.apply(offset)
    path = tmp_path / "take.csv"
    path.write_text(_motive(rot.as_quat(), pos, markers=markers))
    b = read_motive(path).batch
    c = MOTIVE_Y_TO_Z
    want = markers @ c.T  # the world point in Z-up coordinates
    got = b.position + Rotation.from_quat(b.quat_xyzw).apply(c @ offset)
    np.testing.assert_allclose(got, want, atol=1e-9)
    np.testing.assert_allclose(b.position, pos @ c.T, atol=1e-9)


def test_motive_error_names_cell(tmp_path: Path) -> None:
    path = tmp_path / "take.csv"
    path.write_text(_motive_default({(0, 2): "nan"}))
    with pytest.raises(ImportFormatError, match=r"take.csv:8:2: column 'Time \(Seconds\)'"):
        read_motive(path)


@pytest.mark.parametrize("fmt", ["tum", "euroc", "motive", "pods"])
def test_malformed_last_line_leaves_an_existing_session_unchanged(tmp_path: Path, fmt) -> None:
    r, _, session = _import(tmp_path, "tum", _tum())
    assert r.exit_code == 0, r.output
    before = session.read_bytes()
    what, fmt_name, build, fname, spec = FORMATS[fmt]
    field = spec["t"][0]
    text = build({(5, field): "12:30"})  # the last of six data rows
    path = tmp_path / f"other_{fname}"
    path.write_text(text)
    args = ["import", what, str(path), "--format", fmt_name, "--into", str(session),
            "--name", "second"]  # fmt: skip
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and f"{path}:{6 + HEADER_LINES[fmt]}:{field}" in r.output, r.output
    assert session.read_bytes() == before
