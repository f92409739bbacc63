"""Repeated and backwards timestamps in imports, on the real TUM fr1_xyz files.

The files are rewritten with some samples emitted twice at the same stamp: either
identically, or differing by one unit of the file's last printed decimal (a
re-emission's rounding), or corrected by 10 cm and 2° (what an estimator that
relocalizes re-emits, as the EuRoC V1_02 VIO estimate does). With the default
policy ``last`` each repeat replaces the original, only the corrections are
flagged RELOCALIZED, and every dropped line is reported; ``first`` keeps the file's
original samples; ``error`` refuses the file naming every repeat.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from importers_util import read_pod_csv, read_tum
from real_data import TUM_GROUNDTRUTH, TUM_RGBDSLAM, need, real_dir
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.errors import ImportFormatError
from sensorbench.logs import Session
from sensorbench.logs.import_times import MAX_LISTED, MAX_STEP_S
from sensorbench.logs.schema import PoseFlag

REAL = real_dir()
pytestmark = need(TUM_GROUNDTRUTH, TUM_RGBDSLAM)

IDENTICAL, ROUNDING, CORRECTED = "identical", "rounding", "corrected"
# row index in the file -> how its repeat differs
REPEATS = {
    40: IDENTICAL,
    200: CORRECTED,
    333: ROUNDING,
    500: CORRECTED,
    610: IDENTICAL,
    700: CORRECTED,
}
CORRECTION_M = np.array([0.10, -0.04, 0.0])  # |d| = 10.8 cm
CORRECTION_ROT = Rotation.from_euler("z", 2.0, degrees=True)


def _rows(name: str) -> tuple[list[str], np.ndarray]:
    text = (REAL / name).read_text().splitlines()
    data = [ln for ln in text if ln.strip() and not ln.startswith("#")]
    return data, np.array([[float(v) for v in ln.split()] for ln in data])


def _repeat(row: np.ndarray, how: str) -> np.ndarray:
    out = row.copy()
    if how == ROUNDING:
        out[1] += 1e-4  # the fr1_xyz files print 4 decimals
    elif how == CORRECTED:
        out[1:4] += CORRECTION_M
        out[4:8] = (CORRECTION_ROT * Rotation.from_quat(row[4:8])).as_quat()
    return out


def _with_repeats(name: str) -> tuple[str, np.ndarray, dict[int, int], dict[int, int]]:
    """The file with repeats as TUM text; the rows; line of each original and each repeat."""
    data, rows = _rows(name)
    lines = ["# timestamp tx ty tz qx qy qz qw (repeats inserted by the test)"]
    orig_line, rep_line = {}, {}
    for k, text in enumerate(data):
        lines.append(text)
        orig_line[k] = len(lines)
        if k in REPEATS:
            r = _repeat(rows[k], REPEATS[k])
            lines.append(f"{data[k].split()[0]} " + " ".join(f"{v:.9f}" for v in r[1:]))
            rep_line[k] = len(lines)
    return "\n".join(lines) + "\n", rows, orig_line, rep_line


def _euroc_text(tum_text: str) -> str:
    """The same samples as EuRoC CSV (ns stamps, quaternion w x y z)."""
    out = [
        "#timestamp [ns],p_RS_R_x [m],p_RS_R_y [m],p_RS_R_z [m],"
        "q_RS_w [],q_RS_x [],q_RS_y [],q_RS_z []"
    ]
    for ln in tum_text.splitlines()[1:]:
        c = ln.split()
        sec, _, frac = c[0].partition(".")
        ns = int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])
        out.append(",".join([str(ns), c[1], c[2], c[3], c[7], c[4], c[5], c[6]]))
    return "\n".join(out) + "\n"


def _csv_text(tum_text: str) -> str:
    """The same samples as a generic pose CSV (semicolons; columns in another order)."""
    out = ["# the test's repeats", "qw;qx;qy;qz;t_s;x;y;z"]
    for ln in tum_text.splitlines()[1:]:
        c = ln.split()
        out.append(";".join([c[7], c[4], c[5], c[6], c[0], c[1], c[2], c[3]]))
    return "\n".join(out) + "\n"


CONVERT = {"tum": lambda t: t, "euroc": _euroc_text, "csv": _csv_text}


@pytest.mark.parametrize(
    ("what", "source", "fmt"),
    [
        ("mocap", "tum_fr1_xyz_groundtruth.txt", "tum"),
        ("pose", "tum_fr1_xyz_rgbdslam.txt", "tum"),
        ("pose", "tum_fr1_xyz_rgbdslam.txt", "euroc"),
        ("mocap", "tum_fr1_xyz_groundtruth.txt", "csv"),
        ("pose", "tum_fr1_xyz_rgbdslam.txt", "csv"),
    ],
)
def test_repeated_stamps_default_last(tmp_path: Path, what: str, source: str, fmt: str) -> None:
    text, rows, orig_line, rep_line = _with_repeats(source)
    path = tmp_path / ("traj.txt" if fmt == "tum" else "data.csv")
    path.write_text(CONVERT[fmt](text))
    if fmt == "csv":  # one more line (the comment) before the data than in the TUM text
        orig_line = {k: n + 1 for k, n in orig_line.items()}
        rep_line = {k: n + 1 for k, n in rep_line.items()}
    session = tmp_path / "s.h5"
    r = CliRunner().invoke(
        cli, ["import", what, str(path), "--format", fmt, "--into", str(session)]
    )
    assert r.exit_code == 0, r.output
    dropped = sorted(orig_line[k] for k in REPEATS)
    corrected = sorted(rep_line[k] for k, how in REPEATS.items() if how == CORRECTED)
    assert f"dropped {len(REPEATS)} line(s)" in r.output
    assert ", ".join(f"{path}:{n}" for n in dropped) in r.output
    assert f"flagged RELOCALIZED {len(corrected)} pose(s)" in r.output
    assert ", ".join(f"{path}:{n}" for n in corrected) in r.output
    name = "mocap" if what == "mocap" else "pose_sensor"
    with Session(session) as s:
        b = s.pose(name).read()
        attrs = s.pose(name).attrs
    assert len(b) == len(rows)  # one sample per stamp
    assert attrs["duplicate_lines_dropped"] == len(REPEATS)
    assert attrs["duplicates_policy"] == "last"
    want = rows.copy()
    for k, how in REPEATS.items():
        want[k] = _repeat(rows[k], how)
    np.testing.assert_allclose(b.position, want[:, 1:4], rtol=0, atol=1e-12)
    flagged = np.flatnonzero(b.flags & PoseFlag.RELOCALIZED)
    assert flagged.tolist() == sorted(k for k, how in REPEATS.items() if how == CORRECTED)


def test_repeated_stamps_first_keeps_the_original(tmp_path: Path) -> None:
    text, rows, _, rep_line = _with_repeats("tum_fr1_xyz_groundtruth.txt")
    path = tmp_path / "gt.txt"
    path.write_text(text)
    imp = read_tum(path, duplicates="first")
    np.testing.assert_array_equal(imp.batch.position, rows[:, 1:4])
    assert (imp.batch.flags == 0).all()
    assert imp.dropped_lines == sorted(rep_line.values())
    assert imp.relocalized_lines == []


def test_repeated_stamps_error_names_every_line(tmp_path: Path) -> None:
    text, _, _, rep_line = _with_repeats("tum_fr1_xyz_groundtruth.txt")
    path = tmp_path / "gt.txt"
    path.write_text(text)
    session = tmp_path / "s.h5"
    args = ["mocap", str(path), "--format", "tum", "--into", str(session)]
    r = CliRunner().invoke(cli, ["import", *args, "--duplicates", "error"])
    assert r.exit_code == 2
    lines = sorted(rep_line.values())
    assert f"{path}:{lines[0]}: {len(lines)} duplicate timestamp(s), at " in r.output
    assert ", ".join(f"{path}:{n}" for n in lines) in r.output
    assert not session.exists()


def test_backwards_steps_name_every_line_up_to_the_limit(tmp_path: Path) -> None:
    data, _ = _rows("tum_fr1_xyz_groundtruth.txt")
    swapped = list(data)
    pairs = list(range(10, 10 + 4 * (MAX_LISTED + 5), 4))  # MAX_LISTED + 5 swaps
    for k in pairs:
        swapped[k], swapped[k + 1] = swapped[k + 1], swapped[k]
    path = tmp_path / "gt.txt"
    path.write_text("\n".join(swapped) + "\n")
    with pytest.raises(ImportFormatError) as err:
        read_tum(path)
    msg = str(err.value)
    back_lines = [k + 2 for k in pairs]  # the second of each swapped pair (1-based lines)
    assert msg.startswith(f"{path}:{back_lines[0]}: {len(pairs)} backwards timestamp step(s)")
    assert ", ".join(f"{path}:{n}" for n in back_lines[:MAX_LISTED]) in msg
    assert f"and {len(pairs) - MAX_LISTED} more" in msg
    assert f"{path}:{back_lines[MAX_LISTED]}" not in msg


@pytest.mark.parametrize("jump_s, refused", [(1e9, True), (MAX_STEP_S - 1.0, False)])
def test_a_stamp_that_jumps_over_a_day_is_refused(tmp_path: Path, jump_s, refused) -> None:
    """~31 years forward mid-file (a stamp in another epoch) is refused at its line; a
    pause of just under a day (the longest step one recording may have) is kept."""
    data, v = _rows("tum_fr1_xyz_groundtruth.txt")
    k = len(data) // 2
    v[k:, 0] += jump_s
    path = tmp_path / "gt.txt"
    path.write_text("\n".join(" ".join(f"{x:.4f}" for x in row) for row in v) + "\n")
    if not refused:
        assert len(read_tum(path).batch) == len(data)
        return
    with pytest.raises(ImportFormatError) as err:
        read_tum(path)
    assert str(err.value).startswith(f"{path}:{k + 1}: the timestamp jumps 11574.1 days forward")


def test_pod_csv_repeated_stamps(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("t_s,c0,c1\n0.0,0,0\n0.01,5,6\n0.01,7,8\n0.02,9,9\n")
    last = read_pod_csv(path)
    assert last.batch.counts.tolist() == [[0, 0], [7, 8], [9, 9]] and last.dropped_lines == [3]
    first = read_pod_csv(path, duplicates="first")
    assert first.batch.counts.tolist() == [[0, 0], [5, 6], [9, 9]] and first.dropped_lines == [4]
    with pytest.raises(ImportFormatError, match=r"pods.csv:4: 1 duplicate timestamp"):
        read_pod_csv(path, duplicates="error")
