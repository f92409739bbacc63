"""A model file whose values are impossible is refused where it is loaded, naming the
file and the field: variances and their standard errors ≥ 0 and finite, covariance
matrices symmetric positive semi-definite, counts and radii > 0, time offsets finite.

Each case edits one value of a file the loader accepts (``data/old_model_files/`` plus
the tables a fit adds) and expects :class:`ModelFileError` from the loader, and exit 2
with the same naming from ``replay``, which before these checks ran on with them.
"""

from __future__ import annotations

import copy
import math
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.cli import cli
from sensorbench.errors import ModelFileError
from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.pod_kinematics import load_pod_model
from sensorbench.logs.model_file import dumps_toml

OLD = Path(__file__).parent / "data" / "old_model_files"


def _doc(kind: str) -> dict[str, Any]:
    doc = tomllib.loads((OLD / f"{kind}.toml").read_text(encoding="utf-8"))
    if kind == "pods":  # the tables a fit adds to the old file
        eye = [[1e-6 * (i == j) for j in range(9)] for i in range(9)]
        doc["calibration"] = {"units": "ticks per m", "row_covariance": eye}
        doc["slip"] = {"roll_m2_per_m": 1e-5, "drag_m2_per_m": 1e-4, "intercept_rad2": 1e-7}
        doc["fit"] = {"complete": True, "time_offsets_s": [0.004, 0.003, 0.005]}
    return doc


def _set(*path: Any, value: Any) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _cov(i: int, j: int, value: float) -> Callable[[dict], None]:
    return _set("calibration", "row_covariance", i, j, value=value)


POD_CASES = {
    "row_covariance negative diagonal": (_cov(0, 0, -1e-6), "calibration.row_covariance"),
    "row_covariance asymmetric": (_cov(0, 1, 5e-7), "calibration.row_covariance"),
    "row_covariance not PSD": (  # diagonal ≥ 0, yet |ρ| = 2
        lambda d: (_cov(0, 1, 2e-6)(d), _cov(1, 0, 2e-6)(d)),
        "calibration.row_covariance",
    ),
    "intercept_rad2 negative": (_set("slip", "intercept_rad2", value=-1e-7), "intercept_rad2"),
    "intercept per axis negative": (_set("slip", "intercept", value=[1e-6, -1e-6, 0.0]),
                                    "slip.intercept"),
    "turn slip nan": (_set("slip", "turn_m2_per_m_per_m_rad_s2", value=math.nan), "turn_m2"),
    "time_offsets nan": (_set("fit", "time_offsets_s", 1, value=math.nan), "time_offsets_s"),
    "counts_per_rev 0": (_set("pod", 0, "counts_per_rev", value=0.0), "pod[0].counts_per_rev"),
    "counts_per_rev inf": (_set("pod", 2, "counts_per_rev", value=math.inf), "counts_per_rev"),
    "wheel_radius negative": (_set("pod", 1, "wheel_radius", value=-0.024), "wheel_radius"),
}  # fmt: skip
NOISE_CASES = {
    "reach nan": (_set("reach", value={"speed": math.nan, "strafe": 0.3, "turn": 2.0,
                                       "speed_turn": 0.5}), "reach.speed"),
    "reach negative": (_set("reach", value={"speed": 0.5, "strafe": 0.3, "turn": -2.0,
                                            "speed_turn": 0.5}), "reach.turn"),
}  # fmt: skip
POSE_CASES = {
    "cov_log negative variance": (_set("axes", "x", "cov_log", 0, value=-0.5), "axes.x.cov_log"),
    "cov_log asymmetric": (_set("axes", "yaw", "cov_log", 1, value=0.3), "axes.yaw.cov_log"),
    "cov_log not n x n": (_set("axes", "y", "cov_log", value=[0.1, 0.0, 0.1]), "axes.y.cov_log"),
}
LOADERS = {"pods": load_pod_model, "noise": load_noise_model, "pose_error": PoseErrorModel.load}
CASES = [("pods", n, *c) for n, c in POD_CASES.items()]
CASES += [("noise", n, *c) for n, c in NOISE_CASES.items()]
CASES += [("pose_error", n, *c) for n, c in POSE_CASES.items()]


def _write(tmp_path: Path, kind: str, edit: Callable[[dict], None] | None) -> Path:
    doc = copy.deepcopy(_doc(kind))
    if edit is not None:
        edit(doc)
    path = tmp_path / f"{kind}.toml"
    path.write_text(dumps_toml(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", LOADERS)
def test_the_unedited_files_load(tmp_path, kind) -> None:
    """The base of every case loads, so each refusal below is its one edit's."""
    LOADERS[kind](_write(tmp_path, kind, None))


def test_a_covariance_asymmetric_by_round_off_loads(tmp_path) -> None:
    """A fit's inverse Hessian is symmetric only to round-off (1e-16 relative)."""
    path = _write(tmp_path, "pods", _cov(3, 4, 1e-22))
    assert load_pod_model(path).row_cov is not None


@pytest.mark.parametrize(("kind", "case", "edit", "field"), CASES, ids=[c[1] for c in CASES])
def test_an_impossible_value_is_refused_naming_file_and_field(
    tmp_path, kind, case, edit, field
) -> None:
    path = _write(tmp_path, kind, edit)
    with pytest.raises(ModelFileError) as exc:
        LOADERS[kind](path)
    assert str(path) in str(exc.value) and field in str(exc.value), str(exc.value)


@pytest.mark.parametrize("case", ["row_covariance negative diagonal", "intercept_rad2 negative",
                                  "time_offsets nan", "counts_per_rev 0"])  # fmt: skip
def test_replay_refuses_the_pods_model_with_exit_2(tmp_path, case) -> None:
    edit, field = POD_CASES[case]
    path = _write(tmp_path, "pods", edit)
    session = su.write_small_session(tmp_path / "s.h5")
    done = CliRunner().invoke(cli, ["replay", str(session), "--pods", str(path)])
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "pods.toml" in done.output and field in done.output, done.output
