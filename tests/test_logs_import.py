"""Importers on real TUM files and generated Motive/EuRoC files; every malformed case."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner
from importers_util import read_euroc, read_motive, read_pod_csv, read_tum
from real_data import TUM_GROUNDTRUTH, TUM_RGBDSLAM, need
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.errors import ImportFormatError
from sensorbench.logs import Session, SessionWriter

GT = TUM_GROUNDTRUTH.path
SLAM = TUM_RGBDSLAM.path


def _tum_rows(path: Path) -> np.ndarray:
    return np.array(
        [
            list(map(float, ln.split()))
            for ln in path.read_text().splitlines()
            if ln.strip() and not ln.startswith("#")
        ]
    )


@need(TUM_GROUNDTRUTH, TUM_RGBDSLAM)
def test_real_tum_files_import_exactly(tmp_path: Path) -> None:
    session = tmp_path / "real.h5"
    r = CliRunner().invoke(
        cli, ["import", "mocap", str(GT), "--format", "tum", "--into", str(session)]
    )
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        cli, ["import", "pose", str(SLAM), "--format", "tum", "--into", str(session)]
    )
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        assert s.pose_names() == ["mocap", "pose_sensor"]
        assert s.pose("mocap").attrs["kind"] == "mocap"
        assert s.pose("pose_sensor").attrs["kind"] == "pose_sensor"
        for name, path in (("mocap", GT), ("pose_sensor", SLAM)):
            rows = _tum_rows(path)
            b = s.pose(name).read()
            assert len(b) == len(rows)
            np.testing.assert_allclose(b.t_ns, rows[:, 0] * 1e9, rtol=0, atol=500)
            np.testing.assert_array_equal(b.position, rows[:, 1:4])
            q = rows[:, 4:8] / np.linalg.norm(rows[:, 4:8], axis=1, keepdims=True)
            np.testing.assert_allclose(b.quat_xyzw, q, rtol=0, atol=1e-15)
            assert b.valid.all()
    # and back out: the TUM export re-imports to the same poses
    out = tmp_path / "gt.txt"
    r = CliRunner().invoke(
        cli, ["export", str(session), "--stream", "mocap", "--format", "tum", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    again = read_tum(out).batch
    with Session(session) as s:
        b = s.pose("mocap").read()
        np.testing.assert_array_equal(again.t_ns, b.t_ns)
        np.testing.assert_allclose(again.position, b.position, atol=1e-9)


@pytest.mark.parametrize(
    "variant",
    [
        {"version": "1.21", "leading_label_cell": True, "blank_after_meta": False},
        {"version": "1.23"},
        {"version": "1.25", "parent_row": True, "units": "Millimeters", "scale": 0.001},
        {"version": "1.24", "units": "Centimeters", "scale": 0.01, "occluded": (3, 4, 5)},
    ],
)
def test_motive_variants_parse_by_labels(tmp_path: Path, variant: dict) -> None:
    text, pos, _ = su.motive_text(**variant)
    path = tmp_path / "take.csv"
    path.write_text(text)
    imp = read_motive(path, body="robot")
    b = imp.batch
    occluded = np.zeros(len(pos), bool)
    occluded[list(variant.get("occluded", ()))] = True
    assert b.valid.tolist() == (~occluded).tolist()
    assert np.isnan(b.position[occluded]).all() and np.isnan(b.quat_xyzw[occluded]).all()
    # Motive Y-up (x, y, z) -> Z-up (x, -z, y): the height (Motive y) becomes z
    want_pos = np.column_stack([pos[:, 0], -pos[:, 2], pos[:, 1]])
    np.testing.assert_allclose(b.position[~occluded], want_pos[~occluded], atol=1e-6)
    # the body turns by 0.3 t about Motive's up axis: a pure yaw of 0.3 t about z-up
    t = np.arange(len(pos)) / 120.0
    want = Rotation.from_euler("z", 0.3 * t[~occluded, None])
    got = Rotation.from_quat(b.quat_xyzw[~occluded])
    np.testing.assert_allclose((got * want.inv()).magnitude(), 0, atol=1e-6)
    assert imp.attrs["rigid_body"] == "robot"


def test_motive_requires_a_body_choice_when_ambiguous(tmp_path: Path) -> None:
    path = tmp_path / "take.csv"
    path.write_text(su.motive_text()[0])
    with pytest.raises(ImportFormatError, match="2 rigid bodies"):
        read_motive(path)
    with pytest.raises(ImportFormatError, match="no rigid body 'nope'"):
        read_motive(path, body="nope")


def test_motive_unknown_units_rejected(tmp_path: Path) -> None:
    path = tmp_path / "take.csv"
    path.write_text(su.motive_text(units="Furlongs")[0])
    with pytest.raises(ImportFormatError, match=r"take.csv:1: unknown Length Units 'Furlongs'"):
        read_motive(path, body="robot")


def test_motive_missing_column_rejected(tmp_path: Path) -> None:
    text = su.motive_text(extra_body=False)[0].replace(
        "Rotation,Rotation,Rotation,Rotation,", "Rotation,Rotation,Rotation,Quux,", 1
    )
    path = tmp_path / "take.csv"
    path.write_text(text)
    with pytest.raises(ImportFormatError, match=r"lacks columns Rotation\.W"):
        read_motive(path)


def test_euroc_with_header(tmp_path: Path) -> None:
    t = 1403636579758555392 + np.arange(5) * 5_000_000
    q = Rotation.from_euler("z", np.linspace(0, 1, 5)[:, None]).as_quat()  # x y z w
    lines = [
        "#timestamp [ns], p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], "
        "q_RS_y [], q_RS_z [], v_RS_R_x [m s^-1]"
    ]
    for k in range(5):
        lines.append(f"{t[k]},{k},{2 * k},{3 * k},{q[k, 3]},{q[k, 0]},{q[k, 1]},{q[k, 2]},0.1")
    path = tmp_path / "data.csv"
    path.write_text("\n".join(lines) + "\n")
    b = read_euroc(path).batch
    np.testing.assert_array_equal(b.t_ns, t)
    np.testing.assert_allclose(b.quat_xyzw, q, atol=1e-12)
    np.testing.assert_array_equal(b.position[:, 1], 2 * np.arange(5))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1.0 0 0 0 0 0 0 1\n2.0 0 0 0 0 0 1\n", r"bad.txt:2: expected 8 columns"),
        (
            "1.0 0 0 0 0 0 0 1\n2.0 0 zero 0 0 0 0 1\n",
            r"bad.txt:2:3: column 'ty': 'zero' is not a number",
        ),
        ("1.0 0 0 0 0 0 0 1\n0.5 0 0 0 0 0 0 1\n", r"bad.txt:2: 1 backwards timestamp step"),
        ("1.0 0 0 0 0 0 0 1\n2.0 0 0 0 0.5 0 0 0.5\n", r"bad.txt:2: quaternion norm 0.7071"),
        ("# only comments\n", r"bad.txt: no samples"),
    ],
)
def test_tum_malformed_cases(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(ImportFormatError, match=message):
        read_tum(path)


def test_euroc_missing_columns(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("#timestamp [ns], p_RS_R_x [m], p_RS_R_y [m]\n1,2,3\n")
    with pytest.raises(ImportFormatError, match=r"e.csv:1: EuRoC header lacks columns for pz, qw"):
        read_euroc(path)


def test_pod_csv_roundtrip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("t_s,seq,c0,c1,c2,yaw_rate\n0.0,0,1,2,3,0.1\n0.001,1,2,4,6,0.2\n")
    b = read_pod_csv(path).batch
    assert b.counts.tolist() == [[1, 2, 3], [2, 4, 6]]
    assert b.host_ns.tolist() == [0, 1_000_000]
    session = tmp_path / "s.h5"
    r = CliRunner().invoke(
        cli, ["import", "pods", str(path), "--format", "csv", "--into", str(session)]
    )
    assert r.exit_code == 0, r.output
    out = tmp_path / "out.csv"
    r = CliRunner().invoke(
        cli, ["export", str(session), "--stream", "pods", "--format", "csv", "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    again = read_pod_csv(out).batch
    assert (
        again.counts.tolist() == b.counts.tolist() and again.host_ns.tolist() == b.host_ns.tolist()
    )
    path.write_text("t_s,c0,c2\n0,1,2\n")
    with pytest.raises(ImportFormatError, match="counter columns must be c0, c1"):
        read_pod_csv(path)
    path.write_text("t_s,c0\n0,1.5\n")
    with pytest.raises(
        ImportFormatError, match=r"pods.csv:2:2: column 'c0': '1.5' is not an integer"
    ):
        read_pod_csv(path)


def test_imported_sessions_are_told_apart_by_their_file_names(tmp_path: Path) -> None:
    """A fit over several imported runs names each run in its offsets and refusals by the
    session's label: two runs labelled alike ("import pods") could not be told apart."""
    from sensorbench.fusion.pod_drive import load_drive

    pods = tmp_path / "p.csv"
    pods.write_text(
        "t_s,c0,c1,c2\n" + "".join(f"{k * 0.02:.2f},{k},{2 * k},{3 * k}\n" for k in range(20))
    )
    labels = []
    for name in ("bag1.h5", "bag2.h5"):
        for what, src in (("pods", pods), ("mocap", su.write_tum(tmp_path / "m.tum", 20))):
            args = ["import", what, str(src), "--format", "csv" if what == "pods" else "tum"]
            r = CliRunner().invoke(cli, [*args, "--into", str(tmp_path / name)])
            assert r.exit_code == 0, r.output
        labels.append(load_drive(tmp_path / name).label)
    assert labels == ["bag1", "bag2"]


def test_import_cli_reports_file_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("1.0 0 0 0 0 0 0 1\n0.5 0 0 0 0 0 0 1\n")
    r = CliRunner().invoke(
        cli, ["import", "mocap", str(path), "--format", "tum", "--into", str(tmp_path / "s.h5")]
    )
    assert r.exit_code == 2
    assert "bad.txt:2: 1 backwards timestamp step" in r.output
    assert not (tmp_path / "s.h5").exists(), "a failed import must not leave a half-made session"


@pytest.mark.parametrize("case", ["text", "truncated", "foreign", "newer", "missing"])
def test_bad_session_files_exit_2_with_a_clear_message(tmp_path: Path, case: str) -> None:
    path = tmp_path / "s.h5"
    if case == "text":
        path.write_text("hello")
        message = "not an HDF5 file"
    elif case == "truncated":
        with SessionWriter(path) as w:
            w.add_lidar("l")
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        message = "truncated or corrupt"
    elif case == "foreign":
        with h5py.File(path, "w") as f:
            f["x"] = 1
        message = "not a sensorbench session"
    elif case == "newer":
        with SessionWriter(path) as w:
            w.add_lidar("l")
        with h5py.File(path, "a") as f:
            f.attrs["schema_version"] = 99
        message = "schema version 99 is newer"
    else:
        message = "no such file"
    for cmd in (["info", str(path)], ["check", str(path)]):
        r = CliRunner().invoke(cli, cmd)
        assert r.exit_code == 2, (cmd, r.output)
        assert message in r.output
