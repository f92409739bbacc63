"""One model-file module: the same envelope, reader checks and error for every model kind.

``data/old_model_files/`` holds files written by sensorbench before the envelope was
shared (pose-error files then kept ``software`` and ``created_utc`` in
``[provenance]``); they must keep loading with the values they hold.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import odometry_util as ou
import pose_util
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.characterize.pose.error_model import (
    PARAMS,
    POSE_AXES,
    PoseErrorModel,
    fit_pose_error,
)
from sensorbench.cli import cli
from sensorbench.errors import FitError, FusionError, ModelFileError
from sensorbench.fusion.filter_noise import (
    AxisNoise,
    FilterNoise,
    load_noise_model,
    save_noise_model,
)
from sensorbench.fusion.odometry_drift import OdometryDrift
from sensorbench.fusion.pod_kinematics import load_pod_model, save_pod_model
from sensorbench.logs.model_file import dumps_toml, file_sha256, provenance
from sensorbench.logs.toml_schema import MAX_TEXT_BYTES
from sensorbench.sim.scenario import pose_model_overrides

OLD = Path(__file__).parent / "data" / "old_model_files"
ENVELOPE_MODEL_KEYS = {"kind", "format_version", "software", "created_utc"}


def _pose_model() -> PoseErrorModel:
    series = pose_util.campaign(3, "correct", n_sessions=2, duration_s=60.0)
    return fit_pose_error(series, sensor="cam", inputs=[{"path": "a.h5", "sha256": "00"}])


def _write_all(tmp_path: Path) -> dict[str, Path]:
    """One file of every model kind, written by today's code."""
    src = tmp_path / "in.h5"
    src.write_bytes(b"session bytes")
    prov = provenance([src], {"interval_s": 0.5})
    status = {"distance_per_tick": "ok", "rolling_angle": "ok", "lever_arm": "ok"}
    noise = FilterNoise(AxisNoise(1e-3, 4e-10), AxisNoise(2e-3, 5e-10), AxisNoise(0.05, 9e-9))
    save_noise_model(tmp_path / "noise.toml", noise, prov)
    return {
        "pods": save_pod_model(
            tmp_path / "pods.toml", ou.true_geometry(), prov, [{"status": status}] * 3
        ),
        "noise": tmp_path / "noise.toml",
        "pose_error": _pose_model().save(tmp_path / "pose_error.toml"),
    }


LOADERS: dict[str, Callable[[Path], object]] = {
    "pods": load_pod_model,
    "noise": load_noise_model,
    "pose_error": PoseErrorModel.load,
    "pose_error_for_sim": pose_model_overrides,
}


def test_every_kind_has_the_same_envelope(tmp_path: Path) -> None:
    for name, path in _write_all(tmp_path).items():
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        assert set(doc["model"]) >= ENVELOPE_MODEL_KEYS, name
        assert doc["model"]["software"].startswith("sensorbench"), name
        assert {"inputs", "fit_options"} <= set(doc["provenance"]), name
        assert all({"path", "sha256"} <= set(i) for i in doc["provenance"]["inputs"]), name
        assert "software" not in doc["provenance"] and "created_utc" not in doc["provenance"]
        assert isinstance(doc["units"], dict) and doc["units"], name
        LOADERS[name](path)


def test_noise_model_round_trips_every_field_exactly(tmp_path: Path) -> None:
    """Every field of the filter-noise model, away from its default on some axis and at
    it on another (jerk growth of q, rolling and dragging slip shares, feed-forward, the
    fit's NIS level error, a slip model), reads back equal to the last bit; without a slip
    model none comes back."""
    drift = OdometryDrift(np.arange(9.0).reshape(3, 3) * 1e-6 / 7)
    noise = FilterNoise(
        AxisNoise(1e-6 / 3, 4e-10 / 7, 2e-3 / 3, 0.9, 1.1, nis_se=0.02 / 3),
        AxisNoise(2.0, 2e-8, nis_tau=1.7 / 3 + 1),
        AxisNoise(3.0, 3e-8, 0.05, slip_scale=1.2),
        drift,
    )
    path = tmp_path / "n.toml"
    save_noise_model(path, noise, {"inputs": [], "fit_options": {"gate": 6.63}})
    back = load_noise_model(path)
    assert (back.x, back.y, back.theta) == (noise.x, noise.y, noise.theta)
    assert back.drift is not None
    np.testing.assert_array_equal(back.drift.coef, drift.coef)
    plain = FilterNoise(noise.x, noise.y, noise.theta)
    save_noise_model(path, plain, {})
    assert load_noise_model(path) == plain


def test_noise_model_refuses_impossible_values_and_a_format_1_file(tmp_path: Path) -> None:
    noise = FilterNoise(
        AxisNoise(1e-6, 4e-10, q_jerk=2e-3), AxisNoise(2.0, 2e-8), AxisNoise(3.0, 3e-8)
    )
    path = tmp_path / "n.toml"
    save_noise_model(path, noise, {})
    text = path.read_text(encoding="utf-8")
    for good, bad, message in (
        ("q = 2.0", "q = 0.0", "> 0"),
        ("q = 2.0", "q = 2.0\nslip_scale = -1.0", "slip_scale"),
    ):
        (tmp_path / "bad.toml").write_text(text.replace(good, bad), encoding="utf-8")
        with pytest.raises(ModelFileError, match=message):
            load_noise_model(tmp_path / "bad.toml")
    with pytest.raises(FusionError, match="> 0"):
        AxisNoise(0.0, 1.0)
    with pytest.raises(FusionError, match="slip_scale"):
        AxisNoise(1.0, 1e-8, slip_scale=-1.0)
    # a format-1 file whose q grew with the acceleration was fitted for another filter
    old = text.replace("q_jerk", "q_acc").replace("format_version = 2", "format_version = 1")
    (tmp_path / "old.toml").write_text(old, encoding="utf-8")
    with pytest.raises(ModelFileError, match="refit"):
        load_noise_model(tmp_path / "old.toml")


@pytest.mark.parametrize(
    ("kept", "refused", "message"),
    [
        # the filters are Gaussian only: dof = inf (the Gaussian law) or no dof loads as it
        # was; a finite dof was fitted for another innovation law
        ("dof = inf", "dof = 4.0", r"axes\.y\] has dof = 4\.0"),
        # the filters always feed the observed acceleration forward: feedforward = true
        # (what fits wrote while it was a flag) or no key loads as it was
        ("feedforward = true", "feedforward = false", r"axes\.y\] has feedforward = False"),
    ],
    ids=["student_t_dof", "no_feedforward"],
)
def test_noise_model_key_of_another_filter_is_refused_naming_it(
    tmp_path: Path, kept: str, refused: str, message: str
) -> None:
    text = (OLD / "noise.toml").read_text(encoding="utf-8")
    on = text.replace("q = 0.002\n", f"q = 0.002\n{kept}\n")
    (tmp_path / "on.toml").write_text(on, encoding="utf-8")
    assert load_noise_model(tmp_path / "on.toml") == load_noise_model(OLD / "noise.toml")
    (tmp_path / "off.toml").write_text(on.replace(kept, refused), "utf-8")
    with pytest.raises(ModelFileError, match=message):
        load_noise_model(tmp_path / "off.toml")


def test_provenance_hashes_the_input_bytes(tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(b"abc")
    # SHA-256("abc"), FIPS 180-2 appendix B.1
    digest = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert file_sha256(src) == digest
    assert provenance([src], {"k": 1}) == {
        "inputs": [{"path": str(src), "sha256": digest}],
        "fit_options": {"k": 1},
    }


def test_files_written_before_the_shared_envelope_still_load() -> None:
    doc = tomllib.loads((OLD / "pose_error.toml").read_text(encoding="utf-8"))
    assert "software" in doc["provenance"] and "software" not in doc["model"]
    model = PoseErrorModel.load(OLD / "pose_error.toml")
    for i, a in enumerate(POSE_AXES):
        for j, p in enumerate(PARAMS):
            assert model.params_array()[i, j] == doc["axes"][a][p]
    assert model.provenance["software"] == doc["provenance"]["software"]
    aid = model.aid_model()
    assert aid.theta.tau_s == doc["axes"]["yaw"]["tau_s"]
    g = load_pod_model(OLD / "pods.toml")
    pods = tomllib.loads((OLD / "pods.toml").read_text(encoding="utf-8"))["pod"]
    np.testing.assert_array_equal(g.c, [p["distance_per_tick"] for p in pods])
    noise = load_noise_model(OLD / "noise.toml")
    assert noise.axis("theta") == AxisNoise(0.05, 9e-9)
    sim = pose_model_overrides(OLD / "pose_error.toml")["pose_sensor"]
    assert sim["gm_tau_s"] == [doc["axes"][a]["tau_s"] for a in POSE_AXES]


def test_a_resaved_old_pose_model_moves_its_stamp_to_the_envelope(tmp_path: Path) -> None:
    model = PoseErrorModel.load(OLD / "pose_error.toml")
    path = model.save(tmp_path / "again.toml")
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    assert doc["model"]["software"].startswith("sensorbench")
    np.testing.assert_array_equal(PoseErrorModel.load(path).params_array(), model.params_array())


BREAKS = {
    "missing": (None, "no such file"),
    "not TOML": (lambda t: t + "\n[[[", "not valid TOML"),
    "other kind": (lambda t: t.replace('kind = "', 'kind = "other_', 1), "not a .* model"),
    "newer version": (lambda t: t.replace("format_version = 1", "format_version = 9"), "newer"),
    "string version": (
        lambda t: t.replace("format_version = 1", 'format_version = "1"'),
        "not an integer",
    ),
}


@pytest.mark.parametrize("kind", sorted(LOADERS))
@pytest.mark.parametrize("defect", sorted(BREAKS))
def test_every_model_file_failure_is_one_error_type(tmp_path: Path, kind: str, defect: str) -> None:
    change, message = BREAKS[defect]
    path = OLD / f"{kind.removesuffix('_for_sim')}.toml"
    bad = tmp_path / "bad.toml"
    if change is not None:
        bad.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(ModelFileError, match=message) as info:
        LOADERS[kind](bad)
    assert isinstance(info.value, FitError) and isinstance(info.value, FusionError)
    assert str(bad) in str(info.value)


@pytest.mark.parametrize(
    ("kind", "unit_line"),
    [
        ("pods", 'lever_arm = "m"'),
        ("noise", 'r_xy = "m^2"'),
        ("pose_error", 'length = "m"'),
    ],
)
def test_other_units_are_refused(tmp_path: Path, kind: str, unit_line: str) -> None:
    text = (OLD / f"{kind}.toml").read_text(encoding="utf-8")
    assert unit_line in text
    bad = tmp_path / "u.toml"
    bad.write_text(text.replace(unit_line, unit_line.replace('"m', '"mm')), encoding="utf-8")
    with pytest.raises(ModelFileError, match=r"\[units\]"):
        LOADERS[kind](bad)


def test_the_writer_round_trips_what_toml_can_hold() -> None:
    doc = {
        "quoted key": 'a "quote", a \\ backslash,\na newline, a\ttab, é',
        "floats": [0.1, -2.5e-300, math.inf, -math.inf],
        "numpy": {"f": np.float64(0.1), "i": np.int64(-3), "b": np.bool_(True)},
        "array": np.arange(3.0),
        "inline": [{"a": 1}, {"a": 2}],
        "tables": {"inner": {"x": 1}},
        "empty": {},
    }
    back = tomllib.loads(dumps_toml(doc))
    assert back["quoted key"] == doc["quoted key"]
    assert back["floats"] == doc["floats"]
    assert back["numpy"] == {"f": 0.1, "i": -3, "b": True}
    assert back["array"] == [0.0, 1.0, 2.0]
    assert back["inline"] == [{"a": 1}, {"a": 2}] and back["tables"] == {"inner": {"x": 1}}
    assert math.isnan(tomllib.loads(dumps_toml({"n": math.nan}))["n"])
    with pytest.raises(TypeError, match="cannot write"):
        dumps_toml({"x": object()})


def test_a_file_too_large_for_a_model_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # a session passed as --pods by mistake: read whole, a 400 MiB one took 835 MiB of
    # memory before "not UTF-8"; a sparse file, so the test writes nothing
    big = tmp_path / "session.h5"
    with big.open("wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n")
        f.truncate(MAX_TEXT_BYTES + 1)
    good = su.write_small_session(tmp_path / "good.h5")
    done = CliRunner().invoke(cli, ["replay", str(good), "--pods", str(big)])
    assert done.exit_code == 2, done.output
    assert f"{big}: cannot read model file: {MAX_TEXT_BYTES + 1} bytes" in done.output
