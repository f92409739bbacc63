"""``report --models DIR`` with a ``pose_error.toml``: the file's model is the one judged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pose_util
import pytest

from sensorbench.characterize.pose.error_model import fit_pose_error
from sensorbench.errors import ModelFileError
from sensorbench.report.data import ReportInputs, ReportOptions, compute_pose


def _sessions(tmp_path: Path) -> tuple[list[Path], list]:
    series = pose_util.campaign(3, n_sessions=3)
    paths = []
    for s in series:
        paths.append(tmp_path / f"{s.name}.h5")
        pose_util.write_session(paths[-1], s)
    return paths, series


def _inputs(paths: list[Path], models: Path) -> ReportInputs:
    opts = ReportOptions(draws=200, sensor="cam", align="none")
    return ReportInputs(paths, models, opts, models, lambda _m: None)


def test_a_model_file_with_twice_the_sigma_is_judged_and_fails(tmp_path: Path) -> None:
    """Sessions of the true world against a file with σ × 2: the rms (σ² ≫ σ_v², σ_b²
    over 600 samples, τ = 2-3 s: its log spreads by ~0.1 between draws, ln 2 away) puts
    every session far outside the file's draws, so the report must say FAILED, with the
    file's own parameters in the validation, as ``validate --model`` does. The file of
    these sessions' own fit is validated leave-one-session-out, as that fit is; a file of
    another sensor is refused."""
    paths, series = _sessions(tmp_path)
    wrong = pose_util.TRUTH.copy()
    wrong[:, 1] *= 2.0
    model = pose_util.with_params(fit_pose_error(series, sensor="cam"), wrong, "sigma x 2")
    models = tmp_path / "models"
    models.mkdir()
    model.save(models / "pose_error.toml")
    section = compute_pose(_inputs(paths, models))
    assert section is not None and section.validation is not None
    rep = section.validation.report
    assert rep.mode == "given model"
    assert all(np.allclose(c.params, wrong) for c in rep.sessions)
    assert not rep.passed and section.verdict is not None and not section.verdict.passed
    assert "given model" in section.source
    from sensorbench.characterize.pose.sessions import prepare_sessions

    camp = prepare_sessions(paths, "cam", "mocap", align="none")
    fit = fit_pose_error(camp.series, sensor="cam")
    fit.save(models / "pose_error.toml")  # this campaign's own fit: judged as a fit here is
    own = compute_pose(_inputs(paths, models))
    assert own is not None and own.validation is not None and "fit of these" in own.source
    assert own.validation.report.mode == "leave-one-session-out" and not own.given
    replace(model, sensor="other").save(models / "pose_error.toml")
    with pytest.raises(ModelFileError, match=r"'other'.*'cam'"):
        compute_pose(_inputs(paths, models))
