"""Every TOML sensorbench reads refuses unknown keys (naming key and file) and accepts a BOM.

robot.toml (every table), scenario files and the model files (pod geometry, filter
noise, pose error, also as simulator overrides). A UTF-8 byte-order mark, which
Windows editors put at the start of a file, is accepted everywhere.
"""

from __future__ import annotations

import re

import numpy as np
import odometry_util as ou
import pytest
from click.testing import CliRunner

from sensorbench.characterize.pose.error_model import AxisFit, PoseErrorModel
from sensorbench.characterize.pose.series import POSE_AXES
from sensorbench.cli import cli
from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.errors import ConfigError, FitError, FusionError, ModelFileError, SimError
from sensorbench.fusion.filter_noise import (
    AxisNoise,
    FilterNoise,
    load_noise_model,
    save_noise_model,
)
from sensorbench.fusion.pod_kinematics import load_pod_model, save_pod_model
from sensorbench.sim.scenario import SCENARIO_DIR, load_scenario, pose_model_overrides

BOM = "\ufeff"

ROBOT = """\
[robot]
name = "t"
footprint_m = [[-0.2, -0.2], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]]

[powerup]
gap_s = 1.0
timeout_s = 5.0

[[devices]]
name = "pods"
kind = "pods"
port = "/dev/sensorbench/pods"
n_pods = 3

[pods]
wheel_radius_m = 0.024
counts_per_rev = 2000
wheels = [
  {x_m = 0.0, y_m = 0.16, angle_deg = 0.0},
  {x_m = 0.0, y_m = -0.16, angle_deg = 0.0},
  {x_m = -0.12, y_m = 0.0, angle_deg = 90.0},
]

[emulation]
scenario = "square"
seed = 1
"""


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("table", "anchor", "typo"),
    [
        ("powerup", "timeout_s = 5.0", "timout_s = 5.0"),
        ("robot", 'name = "t"', 'nmae = "t"'),
        ("pods", "counts_per_rev = 2000", "count_per_rev = 2000"),
        ("emulation", "seed = 1", "sede = 1"),
    ],
)
def test_unknown_key_in_any_robot_table_is_refused(tmp_path, table, anchor, typo) -> None:
    text = ROBOT.replace(anchor, typo)
    path = tmp_path / "robot.toml"
    path.write_text(text)
    key = typo.split(" =")[0]
    with pytest.raises(ConfigError) as err:
        load_robot_config(path)
    line = _line_of(text, typo)
    assert str(err.value).startswith(f"{path}:{line}: {table}.{key}: unknown key")
    # the capture command exits 2 with the same message, before touching any device
    r = CliRunner().invoke(cli, ["capture", "--config", str(path), "-o", str(tmp_path / "s.h5")])
    assert r.exit_code == 2 and f"{table}.{key}: unknown key" in r.output


def test_robot_config_with_a_bom_is_read(tmp_path) -> None:
    path = tmp_path / "robot.toml"
    path.write_text(BOM + ROBOT, encoding="utf-8")
    cfg = load_robot_config(path)
    assert cfg.name == "t" and cfg.device("pods").timeout_s == 5.0
    assert cfg.extra["emulation"] == {"scenario": "square", "seed": 1}
    assert not cfg.text.startswith(BOM)


def test_scenario_file_with_a_bom_is_read_and_unknown_keys_refused(tmp_path) -> None:
    text = (SCENARIO_DIR / "square.toml").read_text(encoding="utf-8")
    path = tmp_path / "mine.toml"
    path.write_text(BOM + text, encoding="utf-8")
    assert load_scenario(path).params == load_scenario("square").params
    path.write_text(BOM + text.replace("[robot]\n", "[robot]\nfootprnt_m = 1\n"), encoding="utf-8")
    with pytest.raises(SimError, match=r"mine\.toml.*robot\.footprnt_m.*unknown key"):
        load_scenario(path)


# ------------------------------------------------------------------ model files


def _pod_model(tmp_path):
    status = {"distance_per_tick": "ok", "rolling_angle": "ok", "lever_arm": "ok"}
    prov = {"inputs": [], "fit_options": {}}
    return save_pod_model(
        tmp_path / "pods.toml", ou.true_geometry(), prov, [{"status": status}] * 3
    )


def _noise_model(tmp_path):
    path = tmp_path / "noise.toml"
    noise = FilterNoise(AxisNoise(1e-3, 4e-10), AxisNoise(2e-3, 5e-10), AxisNoise(0.05, 9e-9))
    save_noise_model(path, noise, {"inputs": [], "fit_options": {}})
    return path


def _pose_model(tmp_path):
    axes = {a: AxisFit(a, 0.01, 0.02, 2.0, 0.005, np.eye(4) * 0.01, 100, 3) for a in POSE_AXES}
    return PoseErrorModel(axes, "cam", "mocap", "mocap world").save(tmp_path / "pose.toml")


MODELS = {
    # builder, loader, error type, (line to find, line with a typo)
    "pods": (_pod_model, load_pod_model, FusionError, ("[[pod]]\n", "[[pod]]\nlever_arms = 1\n")),
    "noise": (_noise_model, load_noise_model, FusionError, ("q = ", "qq = ")),
    "pose": (_pose_model, PoseErrorModel.load, FitError, ("tau_s = ", "tau = ")),
    "pose-as-sim": (_pose_model, pose_model_overrides, ModelFileError, ("tau_s = ", "tau = ")),
}


@pytest.mark.parametrize("kind", MODELS)
def test_model_files_refuse_unknown_keys_and_accept_a_bom(tmp_path, kind) -> None:
    build, load, error, (good, typo) = MODELS[kind]
    path = build(tmp_path)
    text = path.read_text(encoding="utf-8")
    path.write_text(BOM + text, encoding="utf-8")
    load(path)  # a BOM is fine
    assert good in text
    path.write_text(text.replace(good, typo, 1), encoding="utf-8")
    with pytest.raises(error) as err:
        load(path)
    assert str(path) in str(err.value)
    key = typo.split(" =")[0].split("\n")[-1]
    assert f"{key}: unknown key" in str(err.value)
    path.write_text(text + "\n[extras]\nnote = 1\n", encoding="utf-8")
    with pytest.raises(error, match="extras: unknown key"):
        load(path)


def test_pod_model_with_two_pods_of_one_name_is_refused(tmp_path) -> None:
    path = _pod_model(tmp_path)
    text = path.read_text(encoding="utf-8")
    names = re.findall(r'^name = "(\w+)"', text, re.M)
    assert len(names) == 3
    path.write_text(text.replace(f'name = "{names[1]}"', f'name = "{names[0]}"'), "utf-8")
    with pytest.raises(FusionError, match=rf"two \[\[pod\]\] tables are named '{names[0]}'") as err:
        load_pod_model(path)
    assert str(path) in str(err.value)
