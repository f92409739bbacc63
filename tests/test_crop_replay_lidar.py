"""``replay`` and ``characterize lidar`` with --t-start/--t-end (s from the session start)."""

from __future__ import annotations

import json

import numpy as np
import odometry_util as ou
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.fusion.pod_kinematics import save_pod_model
from sensorbench.logs import Session
from sensorbench.logs.time_window import session_span_ns

T0, T1 = 6.0, 21.0


@pytest.fixture(scope="module")
def square(tmp_path_factory):
    d = tmp_path_factory.mktemp("crop_square")
    r = CliRunner().invoke(
        cli, ["simulate", "--scenario", "square", "--seed", "2", "-o", str(d / "sq.h5")]
    )
    assert r.exit_code == 0, r.output
    status = {"distance_per_tick": "ok", "rolling_angle": "ok", "lever_arm": "ok"}
    model = save_pod_model(d / "pods.toml", ou.true_geometry(), {"inputs": [], "fit_options": {}},
                           [{"status": status}] * 3)  # fmt: skip
    return d / "sq.h5", model


def _inside(t: np.ndarray, path) -> np.ndarray:
    start = session_span_ns(path)[0]
    return (t >= start + round(T0 * 1e9)) & (t < start + round(T1 * 1e9))


def _windowed_json(*args: str) -> dict:
    """The JSON a command prints over [T0, T1)."""
    r = CliRunner().invoke(cli, [*args, "--json", "--t-start", str(T0), "--t-end", str(T1)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_replay_uses_only_the_window(square) -> None:
    path, model = square
    with Session(path) as s:
        host = s.encoder("pods").read().host_ns
    doc = _windowed_json("replay", str(path), "--pods", str(model), "--reference", "truth")
    inside = host[_inside(host, path)]
    assert doc["frames"] == inside.size - 1
    # the filters' frame clock runs on the MCU clock and follows host_ns within the MCU's
    # drift times its 10 s loop (the simulated MCU is tens of ppm off: < 1 ms here)
    assert doc["duration_s"] == pytest.approx((inside[-1] - inside[0]) / 1e9, abs=1e-3)
    assert doc["duration_s"] <= T1 - T0


def test_characterize_lidar_uses_only_the_window(square) -> None:
    path, _ = square
    with Session(path) as s:
        t_first = s.lidar("ld19").read().t_first_ns
    cmd = ("characterize", "lidar", str(path), "--device", "ld19", "--timing-only")
    timing = _windowed_json(*cmd)["timing"]
    assert timing["n_turns"] == int(_inside(t_first, path).sum())
    assert timing["duration_s"] <= T1 - T0
    r = CliRunner().invoke(cli, [*cmd, "--t-start", "1e6"])
    assert r.exit_code == 2 and "holds no data" in r.output
