"""Pod commands given drives they cannot use: a stream with another number of counters
than the model's pods (a ValueError traceback in ``replay``, ``fit noise`` and ``export
--pods``), a robot that never moved (a ZeroDivisionError in ``fit noise``), a drive too
short to align ("do not overlap in time", although they did), drives of robots with
another number of counters each (a numpy traceback in `fit pods`). Each is exit 2 naming the
file and the cause; the same session with the model's layout replays."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

MODELS = Path(__file__).parents[1] / "examples" / "models"
PODS = str(MODELS / "pods-emulated.toml")


@pytest.fixture(scope="module")
def still(tmp_path_factory) -> Path:
    return su.still_session(tmp_path_factory.mktemp("still"), 2.0)


def _run(*args: str) -> str:
    done = CliRunner().invoke(cli, list(args))
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exc_info
    assert done.exit_code == 2, done.output
    return done.output


@pytest.mark.parametrize("counters", [4, 2])
@pytest.mark.parametrize("command", ["replay", "fit noise", "export"])
def test_a_stream_of_another_layout_than_the_model_is_refused(still, tmp_path, command,
                                                              counters) -> None:
    path = tmp_path / "other.h5"
    shutil.copy(still, path)
    with h5py.File(path, "r+") as f:
        g = f["encoders/pods"]
        c = g["counts"][()]
        del g["counts"]
        g["counts"] = np.column_stack([c, c[:, :1]]) if counters == 4 else c[:, :2]
        g.attrs["n_counts"] = counters
    args = {"replay": ["replay", str(path), "--pods", PODS, "--reference", "truth"],
            "fit noise": ["fit", "noise", str(path), "--pods", PODS, "-o", str(tmp_path / "n")],
            "export": ["export", str(path), "--format", "mcap", "--pods", PODS,
                       "-o", str(tmp_path / "e.mcap")]}[command]  # fmt: skip
    out = _run(*args)
    assert str(path) in out or path.name in out, out
    assert f"{counters} counter" in out, out


def test_the_models_layout_replays(still) -> None:
    done = CliRunner().invoke(cli, ["replay", str(still), "--pods", PODS, "--reference", "truth"])
    assert done.exit_code == 0, done.output


def test_a_robot_that_never_moved_is_refused_by_the_noise_fit(still, tmp_path) -> None:
    out = _run("fit", "noise", str(still), "--pods", PODS, "-o", str(tmp_path / "n.toml"))
    assert "only 0 of 400 encoder frames moved a pod" in out, out


def test_a_drive_too_short_to_align_says_so(still, tmp_path) -> None:
    out = _run("fit", "pods", str(still), "-o", str(tmp_path / "p.toml"))
    assert "overlap for 2.0 s" in out, out
    assert "record longer or align over shorter intervals" in out, out


def test_drives_of_robots_with_different_counters_are_refused_together(tmp_path) -> None:
    # a three-pod drive beside a four-counter one (another robot): `fit pods` aligned
    # both, stacked their intervals and died on numpy's "all the input array dimensions
    # ... must match" traceback; now exit 2 naming each session's number of counters
    from pods_sim_util import simulate

    forward = simulate(tmp_path, "forward", 1)
    path = simulate(tmp_path, "spin", 2)
    with h5py.File(path, "r+") as f:
        g = f["encoders/pods"]
        c = g["counts"][()]
        del g["counts"]
        g["counts"] = np.column_stack([c, c[:, :1]])
        g.attrs["n_counts"] = 4
    out = _run("fit", "pods", str(forward), str(path), "-o", str(tmp_path / "p.toml"))
    assert "different numbers of counters" in out and ": 3," in out and ": 4)" in out, out
