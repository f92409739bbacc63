"""Pose commands given a session whose pose streams hold no valid sample (a tracker that
never locked, a sensor that never localized): ``fit pose-error``, ``validate`` and
``report`` raised IndexError from the time alignment; each is exit 2 naming the file and
the valid counts. The same session with its samples valid fits."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

MODEL = str(Path(__file__).parent / "data" / "old_model_files" / "pose_error.toml")


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    return su.still_session(tmp_path_factory.mktemp("pose"), 6.0)


@pytest.mark.parametrize("command", ["fit pose-error", "validate", "report"])
def test_pose_streams_without_a_valid_sample_are_refused(session, tmp_path, command) -> None:
    path = tmp_path / "invalid.h5"
    shutil.copy(session, path)
    with h5py.File(path, "r+") as f:
        for name in ("mocap", "pose_sensor"):
            f[f"pose/{name}/valid"][...] = False
    model = tmp_path / "pose_error.toml"  # a model file of this session's sensor
    model.write_text(Path(MODEL).read_text().replace('sensor = "cam"', 'sensor = "pose_sensor"'))
    args = {"fit pose-error": ["fit", "pose-error", str(path), "--sensor", "pose_sensor",
                               "-o", str(tmp_path / "m.toml")],
            "validate": ["validate", str(path), "--sensor", "pose_sensor", "--model", str(model)],
            "report": ["report", str(path), "-o", str(tmp_path / "r")]}[command]  # fmt: skip
    done = CliRunner().invoke(cli, args)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exc_info
    assert done.exit_code == 2, done.output
    assert f"{path}: pose streams 'pose_sensor'/'mocap' have 0/0 valid samples" in done.output


def test_the_same_session_with_its_samples_fits(session, tmp_path) -> None:
    done = CliRunner().invoke(cli, ["fit", "pose-error", str(session), "--sensor", "pose_sensor",
                                    "-o", str(tmp_path / "m.toml")])  # fmt: skip
    assert done.exit_code == 0, done.output
