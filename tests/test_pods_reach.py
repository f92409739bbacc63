"""The noise fit's reach (:class:`~sensorbench.fusion.filter_noise.MotionReach`): which
motions the calibration drives covered, and the warning for a session beyond them."""

from __future__ import annotations

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
