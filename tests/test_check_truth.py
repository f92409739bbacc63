"""A simulated session's ``/truth`` damaged where its rows must agree (docs/FORMAT.md,
"Truth"): ``check`` exits 1 naming the dataset, and what reads it (``replay --reference
truth``, the report's simulated wrong relocalizations) refuses it naming the file; the
undamaged session passes, so the checks are not simply strict."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.errors import SessionError
from sensorbench.report.data import simulated_wrong

PODS = str(Path(__file__).parent / "data" / "old_model_files" / "pods.toml")


def _replace(name: str, make: Callable[[np.ndarray], np.ndarray]) -> Callable[[h5py.File], None]:
    def damage(f: h5py.File) -> None:
        data = make(f[name][()])
        del f[name]
        if data is not None:
            f.create_dataset(name, data=data)
    return damage


def _set_row(row: int, value: float) -> Callable[[np.ndarray], np.ndarray]:
    def make(a: np.ndarray) -> np.ndarray:
        a = a.astype(float) if a.dtype.kind == "b" else a.copy()
        a[row] = value
        return a
    return make


def _swap(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a[[3, 4]] = a[[4, 3]]
    return a


POSE = {  # case: (damage, the dataset named)
    "x_y_yaw a row short": (_replace("truth/pose/x_y_yaw", lambda a: a[:-1]), "x_y_yaw"),
    "x_y_yaw nan": (_replace("truth/pose/x_y_yaw", _set_row(5, np.nan)), "x_y_yaw"),
    "times decrease": (_replace("truth/pose/t_ns", _swap), "t_ns"),
    "times float": (_replace("truth/pose/t_ns", lambda a: a * 1e-9), "t_ns"),
    "times missing": (_replace("truth/pose/t_ns", lambda a: None), "t_ns"),
}
RELOC = {
    "offset two columns": (_replace("truth/pose_sensor/reloc_offset", lambda a: a[:, :2]),
                           "reloc_offset"),
    "offset inf": (_replace("truth/pose_sensor/reloc_offset", _set_row(0, np.inf)),
                   "reloc_offset"),
    "wrong a row long": (_replace("truth/pose_sensor/reloc_wrong",
                                  lambda a: np.concatenate([a, a[:1]])), "reloc_wrong"),
    "times missing": (_replace("truth/pose_sensor/reloc_t_ns", lambda a: None), "reloc_t_ns"),
}


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Path:
    """2 s standing still, every sensor, one relocalization."""
    return su.still_session(tmp_path_factory.mktemp("truth"), 2.0,
                            "[pose_sensor]\nreloc_times_s = [1.0]\n")


def _damaged(session: Path, tmp_path: Path, damage: Callable[[h5py.File], None]) -> Path:
    path = tmp_path / "damaged.h5"
    shutil.copy(session, path)
    with h5py.File(path, "r+") as f:
        damage(f)
    return path


def test_the_undamaged_session_passes(session) -> None:
    done = CliRunner().invoke(cli, ["check", str(session)])
    assert done.exit_code == 0, done.output
    assert simulated_wrong(session, "pose_sensor") is not None


@pytest.mark.parametrize("case", POSE)
def test_damaged_pose_truth_is_named_by_check_and_refused_by_replay(session, tmp_path,
                                                                    case) -> None:
    damage, named = POSE[case]
    path = _damaged(session, tmp_path, damage)
    done = CliRunner().invoke(cli, ["check", str(path)])
    assert done.exit_code == 1, done.output
    assert f"/truth/pose/{named}" in done.output
    done = CliRunner().invoke(cli, ["replay", str(path), "--pods", PODS, "--reference", "truth"])
    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert str(path) in done.output and "/truth/pose/" in done.output


@pytest.mark.parametrize("case", RELOC)
def test_damaged_relocalization_truth_is_named_by_check_and_refused_by_the_report(
    session, tmp_path, case
) -> None:
    damage, named = RELOC[case]
    path = _damaged(session, tmp_path, damage)
    done = CliRunner().invoke(cli, ["check", str(path)])
    assert done.exit_code == 1, done.output
    assert f"/truth/pose_sensor/{named}" in done.output
    with pytest.raises(SessionError, match="/truth/pose_sensor/"):
        simulated_wrong(path, "pose_sensor")


def test_a_truth_dataset_declaring_absurd_rows_is_named_not_read(session, tmp_path) -> None:
    """2⁴⁰ rows declared in a 3 MB file: check read it to compare the rows (an 8 TiB
    MemoryError); the layout check names it and the rows check leaves it unread."""

    def damage(f: h5py.File) -> None:
        del f["truth/pose/x_y_yaw"]
        f["truth/pose"].create_dataset("x_y_yaw", shape=(2**40, 3), dtype="f8", chunks=(1024, 3))

    path = _damaged(session, tmp_path, damage)
    done = CliRunner().invoke(cli, ["check", str(path)])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exc_info
    assert done.exit_code == 1 and "/truth/pose/x_y_yaw: shape (1099511627776, 3)" in done.output
