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


def test_a_model_file_of_other_sessions_is_judged_without_a_refit(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """The report refits its sessions only to tell whether the file is their own fit; a file
    whose provenance records inputs of other sample counts (other sessions of the same
    world, 100 s instead of 120 s) cannot be, so it is judged as it is (given-model mode)
    without that fit, which cost 0.61 s of the section's 9.0 s (4 x 300 s at 10 Hz, 1000
    draws) and was thrown away. The file of these sessions' own fit (inputs recorded,
    counts equal) is still refitted and validated leave-one-session-out."""
    from sensorbench.characterize.pose import error_model
    from sensorbench.characterize.pose.sessions import fit_prepared, prepare_sessions

    paths, _ = _sessions(tmp_path)
    others = pose_util.campaign(9, n_sessions=3, duration_s=100.0)
    recorded = [{"path": f"{s.name}.h5", "sha256": "0" * 64, "n_samples": s.n} for s in others]
    models = tmp_path / "models"
    models.mkdir()
    fit_pose_error(others, sensor="cam", inputs=recorded).save(models / "pose_error.toml")
    fits = []
    real_fit = error_model.fit_pose_error
    monkeypatch.setattr(error_model, "fit_pose_error",
                        lambda *a, **k: fits.append(1) or real_fit(*a, **k))
    section = compute_pose(_inputs(paths, models))
    assert section is not None and section.validation is not None and section.given
    assert section.validation.report.mode == "given model" and fits == []
    camp = prepare_sessions(paths, "cam", "mocap", align="none")
    fit_prepared(camp.prepared, "cam", "mocap").save(models / "pose_error.toml")
    own = compute_pose(_inputs(paths, models))
    assert own is not None and own.validation is not None and not own.given
    assert own.validation.report.mode == "leave-one-session-out" and fits == [1]
