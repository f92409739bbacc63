"""Damaged sessions (issue 14, items 7 and 9): a missing dataset is a clean exit-2 error
naming the file and the dataset in every command; `check` fails a closed session with a
shortened column, a turn pointing past its points or time going backwards, and counts
per-point lidar time reversals."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

COMMANDS = [
    "info {s}",
    "info {s} --json",
    "export {s} --stream mocap --format tum -o {d}/out.tum",
    "fit pods {s}",
    "fit pose-error {s} --sensor pose_sensor",
    "characterize lidar {s} --device front --timing-only",
    "merge {s} --front front --rear front -o {d}/m.h5",
    "decode ld19 {s} -o {d}/l.h5",
    "decode a1 {s} -o {d}/a.h5",
    "report {s} -o {d}/rep",
    "import mocap {tum} --format tum --into {s} --name m2",
]


def _damaged(tmp_path: Path, dataset: str) -> Path:
    path = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:
        del f[dataset]
    return path


@pytest.mark.parametrize("dataset", ["encoders/pods/yaw", "events", "lidar/front/turns"])
@pytest.mark.parametrize("line", COMMANDS)
def test_a_missing_dataset_is_a_clean_error_naming_file_and_dataset(tmp_path, dataset, line):
    path = _damaged(tmp_path, dataset)
    tum = su.write_tum(tmp_path / "m.tum", 20)
    args = line.format(s=path, d=tmp_path, tum=tum).split()
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert result.exit_code == 2, result.output
    assert str(path) in result.output and f"/{dataset}" in result.output, result.output
    assert "missing" in result.output


@pytest.mark.parametrize("dataset", ["encoders/pods/yaw", "events", "lidar/front/turns"])
def test_check_fails_on_a_missing_dataset(tmp_path, dataset) -> None:
    path = _damaged(tmp_path, dataset)
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1, result.output
    assert dataset.rsplit("/", 1)[-1] in result.output and "NOT OK" in result.output


def _check(path: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(cli, ["check", str(path), "--json"])
    return result.exit_code, json.loads(result.output)


def test_check_fails_a_closed_session_with_a_shortened_column(tmp_path) -> None:
    path = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:
        f["pose/mocap/valid"].resize(su.FRAMES - 3, axis=0)
    code, doc = _check(path)
    assert code == 1 and not doc["ok"]
    assert any("pose/mocap" in e and "valid 47" in e for e in doc["errors"]), doc["errors"]


def test_check_fails_a_turn_pointing_past_its_points(tmp_path) -> None:
    path = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:
        turns = f["lidar/front/turns"]
        last = turns[-1]
        last["count"] += 5
        turns[-1] = last
    code, doc = _check(path)
    assert code == 1
    end = su.TURNS * su.POINTS + 5
    assert any(f"turns end at point {end}" in e for e in doc["errors"]), doc["errors"]


@pytest.mark.parametrize(
    ("column", "label"),
    [
        ("encoders/pods/host_ns", "encoders/pods/host_ns"),
        ("pose/mocap/t_ns", "pose/mocap/t_ns"),
        ("raw/front/chunks", "raw/front/chunks.t_ns"),
    ],
)
def test_check_fails_when_time_goes_backwards_in_a_stream(tmp_path, column, label) -> None:
    path = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(path, "r+") as f:
        if column.endswith("chunks"):
            g = f[column.rsplit("/", 1)[0]]
            g["data"].resize(400, axis=0)
            g["chunks"].resize(2, axis=0)
            g["chunks"][1] = (su.T0 - 7_000_000, 200, 200)
        else:
            t = f[column][:]
            t[10], t[11] = t[11], t[10]
            f[column][:] = t
    code, doc = _check(path)
    assert code == 1
    step = 7e-3 if column.endswith("chunks") else 0.01
    index = 1 if column.endswith("chunks") else 11  # the first row that steps back
    want = f"/{label}[{index}]: time goes backwards 1 times (largest {step:.6f} s)"
    assert want in doc["errors"], doc["errors"]


def test_check_counts_per_point_time_reversals(tmp_path) -> None:
    turns = su.lidar_turns()
    t = turns.t_ns.copy()
    steps_back_ns = {5: 1_000_000, 17: 2_000_000, 30: 4_900_000}  # as LD19 packets overlap
    for k, back in steps_back_ns.items():
        t[k] = t[k - 1] - back
    bent = replace(turns, t_ns=t)
    path = su.write_small_session(tmp_path / "s.h5", lidar=bent)
    code, doc = _check(path)
    assert code == 0 and doc["ok"]  # a property of the device's stamps, not damage
    got = doc["point_time_reversals"]["lidar/front"]
    assert got["count"] == 3 and got["points"] == su.TURNS * su.POINTS
    assert got["max_s"] == pytest.approx(4.9e-3, abs=1e-12)
    text = CliRunner().invoke(cli, ["check", str(path)]).output
    assert "per-point time steps backwards 3 times in 48 points (largest 4.900 ms)" in text
    assert np.count_nonzero(np.diff(t) < 0) == 3


def test_check_warns_of_encoder_frames_stored_twice(tmp_path) -> None:
    """A frame stored twice (every column of row 11 a copy of row 10) is a warning naming
    the first repeat; the session stays usable (replay drops the repeat)."""
    path = su.write_small_session(tmp_path / "s.h5")
    code, doc = _check(path)
    assert code == 0 and not any("repeat" in w for w in doc["warnings"]), doc["warnings"]
    with h5py.File(path, "r+") as f:
        for column in f["encoders/pods"].values():
            if isinstance(column, h5py.Dataset) and column.shape and column.shape[0] > 11:
                column[11] = column[10]
    code, doc = _check(path)
    assert code == 0, doc["errors"]
    want = f"1 of {su.FRAMES} frames repeat the frame before them"
    assert any(want in w and "row 11" in w for w in doc["warnings"]), doc["warnings"]
