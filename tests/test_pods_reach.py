"""The noise fit's reach (:class:`~sensorbench.fusion.filter_noise.MotionReach`): which
motions the calibration drives covered, and the warning for a session beyond them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import odometry_util as ou
import pytest

from sensorbench.errors import ModelFileError
from sensorbench.fusion.filter_noise import (
    AxisNoise,
    FilterNoise,
    MotionReach,
    load_noise_model,
    save_noise_model,
)

HZ = 100.0


def _drive(kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Frame times (K+1,) and body increments (K, 3) of a fixed drive at 100 Hz."""
    t = np.arange(0.0, 21.0, 1.0 / HZ)
    return t, ou.twist_profile(kind, t)[:-1] / HZ


def test_a_slalom_is_outside_drives_that_never_turned_while_translating() -> None:
    """Forward, sideways and spin drives cover driving (0.5 m/s), strafing (0.4 m/s) and
    turning (2 rad/s) apart, never together: the figure-8 (0.51 m/s while turning up to
    1.2 rad/s: 0.61 m·rad/s² at its peak) is outside them on turning while translating,
    and on nothing else; the forward drive again is inside; a drive set with the figure-8
    covers it."""
    calib = [_drive(k) for k in ("forward", "sideways", "spin")]
    reach = MotionReach.of(*zip(*calib, strict=True))
    assert reach.values["speed"] == pytest.approx(0.5, rel=0.02)
    assert reach.values["turn"] == pytest.approx(2.0, rel=0.02)
    assert reach.values["speed_turn"] < 0.01
    why = reach.outside(MotionReach.of(*zip(_drive("figure8"), strict=True)))
    assert len(why) == 1 and why[0].startswith("turning while translating at 0.6"), why
    assert "beyond the calibration drives'" in why[0]
    assert reach.outside(MotionReach.of(*zip(_drive("forward"), strict=True))) == []
    wider = MotionReach.of(*zip(*calib, _drive("figure8"), strict=True))
    assert wider.outside(MotionReach.of(*zip(_drive("figure8"), strict=True))) == []


def test_reach_is_written_to_the_model_file_and_read_back(tmp_path) -> None:
    reach = MotionReach({"speed": 0.5, "strafe": 0.4, "turn": 2.0, "speed_turn": 0.003})
    noise = FilterNoise(AxisNoise(1.0, 1e-8), AxisNoise(1.0, 1e-8), AxisNoise(10.0, 1e-6))
    path = tmp_path / "noise.toml"
    save_noise_model(path, FilterNoise(noise.x, noise.y, noise.theta, reach=reach), {})
    assert load_noise_model(path).reach == reach
    text = path.read_text().replace("speed_turn = 0.003", "speed_turn = 'fast'")
    path.write_text(text)
    with pytest.raises(ModelFileError, match="reach"):
        load_noise_model(path)


def test_a_drift_coefficient_the_drives_did_not_identify_is_marked_and_replay_and_live_warn(
    tmp_path, capsys
) -> None:
    """Drives that never turn identify no variance per radian turned: the model file
    stored it as 0.0 unmarked, and replay and live ran without that term, overconfident,
    without a word. The file now lists what was identified, and replay, live and export's
    replayed odometry name what was not."""
    from click.testing import CliRunner
    from pods_sim_util import simulate

    from sensorbench.characterize.pods.drift_fit import fit_drift
    from sensorbench.cli import cli
    from sensorbench.commands.live import load_models
    from sensorbench.drivers.robot_config import load_robot_config
    from sensorbench.fusion.pod_drive import load_drive
    from sensorbench.fusion.pod_kinematics import PodGeometry, save_pod_model
    from sensorbench.sim.simulation import Simulation

    drives = [simulate(tmp_path, name, 40 + i) for i, name in enumerate(("forward", "sideways"))]
    sim = Simulation("forward", 40).pods().geometry
    geometry = PodGeometry.from_mounts(*sim.position_m.T, sim.angle_rad, sim.m_per_count)
    fit = fit_drift([load_drive(d) for d in drives], geometry)
    assert fit.identified[:, :2].all() and not fit.identified[:, 2].any()
    assert np.all(fit.drift.coef[:, 2] == 0.0)
    noise, pods = tmp_path / "noise.toml", tmp_path / "pods.toml"
    d = FilterNoise.default()
    save_noise_model(noise, FilterNoise(d.x, d.y, d.theta, drift=fit.drift), {})
    save_pod_model(pods, geometry, {})
    args = ["replay", str(drives[0]), "--pods", str(pods), "--noise", str(noise)]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, done.output
    warned = [line for line in done.output.splitlines() if "not identified" in line]
    assert [w.split("drift ")[1].split(":")[0] for w in warned] == [
        "x.per_rad", "y.per_rad", "theta.per_rad"]  # fmt: skip
    np.testing.assert_array_equal(load_noise_model(noise).drift.identified, fit.identified)
    robot = load_robot_config(Path(__file__).parents[1] / "examples" / "robot.toml")
    capsys.readouterr()
    load_models(robot, pods, noise)  # what `live` loads
    live = [f"warning: {w.removeprefix('WARNING, ')}" for w in warned]
    assert capsys.readouterr().err.splitlines() == live
    args = ["export", str(drives[0]), "--format", "mcap", "-o", str(tmp_path / "o.mcap"),
            "--pods", str(pods), "--noise", str(noise)]  # fmt: skip
    done = CliRunner().invoke(cli, args)  # the filters' odometry replayed into the MCAP
    assert done.exit_code == 0, done.output
    assert [line for line in done.output.splitlines() if line.startswith("warning:")] == live
    # a file written before the marker: taken as identified, no warning
    noise.write_text("".join(line for line in noise.read_text().splitlines(keepends=True)
                             if not line.startswith("identified =")))  # fmt: skip
    old = load_noise_model(noise)
    assert old.drift.identified is None and old.drift_warnings(geometry) == []
