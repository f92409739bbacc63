"""``fit noise -o`` with a law the fit did not use, and sessions recorded at N× real time
through ``replay`` and ``fit noise`` without ``--align-interval``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import h5py
import numpy as np
import pytest
from click.testing import CliRunner
from pods_sim_util import simulate

from sensorbench.cli import cli
from sensorbench.fusion.filter_noise import load_noise_model
from sensorbench.fusion.pod_drive import ALIGN_INTERVAL_S, align_interval_for
from sensorbench.fusion.pod_kinematics import PodGeometry, save_pod_model
from sensorbench.logs.model_file import provenance

SPEED = 20.0
"""A demo-like speed-up: the sessions' host clock runs 20× faster than the drive (at a fixed
0.5 host s the alignment finds no usable interval in this 38 s spin)."""


@pytest.fixture(scope="module")
def spin(tmp_path_factory) -> dict[str, Path]:
    """A simulated spin, a pod model of its true geometry without a slip law (so the noise
    fit has no dragging law: ``drag_scale`` None) and a copy recorded at 20× real time."""
    tmp = tmp_path_factory.mktemp("pods_align")
    path = simulate(tmp, "spin", 3)
    with h5py.File(path) as f:
        g = f["truth/pods/geometry"][...]
    phi = g[:, 2]
    geometry = PodGeometry(c=g[:, 5], phi=phi, lever=g[:, 0] * np.sin(phi) - g[:, 1] * np.cos(phi))
    pods = save_pod_model(tmp / "pods.toml", geometry, provenance([path], {}))
    return {"session": path, "pods": pods, "fast": _recorded_at(path, tmp / "fast.h5", SPEED)}


def _recorded_at(src: Path, dst: Path, speed: float) -> Path:
    """A copy of ``src`` as a capture at ``speed``× real time stores it: host times (encoder
    host_ns, mocap t_ns) run ``speed`` times faster than the MCU's device clock, and the
    encoder stream records the clock's nominal slope 1/speed."""
    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "r+") as f:
        enc = f["encoders/pods"]
        host = enc["host_ns"][...]
        t0 = int(host[0])
        enc["host_ns"][...] = t0 + np.round((host - t0) / speed).astype(np.int64)
        enc.attrs["clock_nominal_slope"] = 1.0 / speed
        mocap = f["pose/mocap/t_ns"]
        mocap[...] = t0 + np.round((mocap[...] - t0) / speed).astype(np.int64)
    return dst


def test_fit_noise_without_a_drag_law_writes_a_model_that_loads_back(spin, tmp_path) -> None:
    out = tmp_path / "noise.toml"
    res = CliRunner().invoke(
        cli, ["fit", "noise", str(spin["session"]), "--pods", str(spin["pods"]), "-o", str(out)]
    )
    # exit 1 is the NIS check's diagnosis (model still written); a crash would be exit ≠ 0/1
    assert res.exit_code in (0, 1) and res.exception is None, res.output
    noise = load_noise_model(out)
    assert all(noise.axis(a).drag_scale is None for a in ("x", "y", "theta"))
    report = tomllib.loads(out.read_text(encoding="utf-8"))["report"]
    assert set(report) == {"x", "y", "theta"} and "drag_scale" not in report["x"]


def test_align_interval_follows_the_recorded_clock_slope(spin) -> None:
    assert align_interval_for(spin["session"]) == ALIGN_INTERVAL_S
    assert align_interval_for(spin["fast"]) == pytest.approx(ALIGN_INTERVAL_S / SPEED)


def test_replay_of_a_session_recorded_at_twenty_times_real_time_aligns(spin, tmp_path) -> None:
    # at 0.5 host s (10 s of driving) the alignment has no usable interval (exit 2);
    # at 0.5 s × the recorded slope (0.025 host s) the replay finds the offset
    runner = CliRunner()
    base = ["replay", str(spin["fast"]), "--pods", str(spin["pods"]), "--json"]
    fixed = runner.invoke(cli, [*base, "--align-interval", str(ALIGN_INTERVAL_S)])
    assert fixed.exit_code == 2, fixed.output
    assert "6 usable intervals of 0.5 s: record longer or align" in fixed.output, fixed.output
    res = runner.invoke(cli, base)
    assert res.exit_code == 0, res.output
    explicit = runner.invoke(cli, [*base, "--align-interval", str(ALIGN_INTERVAL_S / SPEED)])
    assert explicit.exit_code == 0, explicit.output
    assert res.output == explicit.output
