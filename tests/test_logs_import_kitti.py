"""``import pose|mocap --format kitti --times FILE``: KITTI odometry pose files.

The files are written here the way the KITTI devkit prints them (``%e``: 7 significant
digits), from rotations built with Rodrigues' formula; every pose must come back
within that printing's rounding, every time exactly, and every malformed file must
be refused naming the file, the line and what is wrong, with the session untouched.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session

RNG = np.random.default_rng(41)
N = 60


def _rotation(aa: np.ndarray) -> np.ndarray:
    theta = np.linalg.norm(aa)
    k = aa / theta
    kx = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(theta) * kx + (1 - np.cos(theta)) * kx @ kx


ROT = np.array([_rotation(a) for a in RNG.normal(0, 1.0, (N, 3))])
POS = np.cumsum(RNG.normal(0, 0.8, (N, 3)), axis=0)
TIMES = np.arange(N) * 0.103643  # KITTI's ~10 Hz, seconds from the sequence start


def _write(tmp_path: Path, rows: list[str] | None = None, times: list[str] | None = None):
    poses = tmp_path / "00.txt"
    if rows is None:
        mat = np.concatenate([ROT, POS[:, :, None]], axis=2).reshape(N, 12)
        rows = [" ".join(f"{v:e}" for v in r) for r in mat]
    poses.write_text("\n".join(rows) + "\n")
    t = tmp_path / "times.txt"
    t.write_text("\n".join(times if times is not None else [f"{v:e}" for v in TIMES]) + "\n")
    return poses, t


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_kitti_poses_come_back_within_printing_rounding(tmp_path: Path) -> None:
    poses, times = _write(tmp_path)
    session = tmp_path / "s.h5"
    r = _run("import", "pose", poses, "--format", "kitti", "--times", times, "--into", session)
    assert r.exit_code == 0, r.output
    assert f"imported {N} samples" in r.output
    with Session(session) as s:
        b = s.pose("pose_sensor").read()
        attrs = s.pose("pose_sensor").attrs
    # the times file's decimal text, converted exactly
    want_t = [int(Decimal(f"{v:e}") * 10**9) for v in TIMES]
    assert b.t_ns.tolist() == want_t
    # %e keeps 7 significant digits: each number within half a unit of its 7th digit
    assert (np.abs(b.position - POS) <= 0.5e-6 * np.abs(POS) + 1e-15).all()
    x, y, z, w = b.quat_xyzw.T
    got = np.stack(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    ).transpose(2, 0, 1)
    # entries printed to ±0.5e-6, then projected to the nearest rotation: within √9 × that
    assert np.abs(got - ROT).max() < 1.5e-6
    assert attrs["source_format"] == "kitti" and attrs["times_file"] == "times.txt"


@pytest.mark.parametrize(
    ("rows", "times", "message"),
    [
        (None, [f"{v:e}" for v in TIMES[:-1]], f"has {N} poses but {{times}} has {N - 1} times"),
        (["1 0 0 0 0 1 0 0 0 0 1"], ["0"], "{poses}:1: expected 12 numbers"),
        (["1 0 0 0 0 1 0 0 0 0 x 0"], ["0"], "{poses}:1:11: column 'r33': 'x' is not a number"),
        (["1 0 0 nan 0 1 0 0 0 0 1 0"], ["0"], "{poses}:1:4: column 'tx': 'nan' is not a finite"),
        (["2 0 0 0 0 1 0 0 0 0 1 0"], ["0"], "{poses}:1: the 3x3 part is not a rotation"),
        (["-1 0 0 0 0 1 0 0 0 0 1 0"], ["0"], "det -1.0000"),
        (["1 0 0 0 0 1 0 0 0 0 1 0"] * 2, ["1", "0.5"], "backwards timestamp"),
        (["1 0 0 0 0 1 0 0 0 0 1 0"], ["zero"], "{times}:1:1: column 'time': 'zero' is not"),
    ],
)
def test_bad_kitti_files_exit_2_naming_the_line(tmp_path, rows, times, message) -> None:
    poses, tfile = _write(tmp_path, rows, times)
    session = tmp_path / "s.h5"
    r = _run("import", "mocap", poses, "--format", "kitti", "--times", tfile, "--into", session)
    assert r.exit_code == 2, r.output
    assert message.format(poses=poses, times=tfile) in r.output
    assert not session.exists()


def test_times_goes_with_kitti_only(tmp_path: Path) -> None:
    poses, times = _write(tmp_path)
    session = tmp_path / "s.h5"
    r = _run("import", "pose", poses, "--format", "kitti", "--into", session)
    assert r.exit_code == 2 and "--times FILE goes with --format kitti" in r.output
    r = _run("import", "pose", poses, "--format", "tum", "--times", times, "--into", session)
    assert r.exit_code == 2 and "--times FILE goes with --format kitti" in r.output
