"""``fit pose-error``/``validate``: one time origin (the session start) and --t-start/--t-end.

The session's pods stream starts 3 s before its mocap, which starts 0.5 s before the
pose sensor: every time reported must count from the pods' first frame (the session
start), the first of any stream, and a crop window is measured from it too.
"""

from __future__ import annotations

import json

import numpy as np
import pose_util
import pytest
from click.testing import CliRunner

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.cli import cli
from sensorbench.logs import SessionWriter
from sensorbench.logs.batches import EncoderBatch
from sensorbench.logs.schema import NO_DEVICE_TIME

EARLY_S = 3.0
COMMON = ["--sensor", "cam", "--no-align", "--time-offset", "0"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    path = tmp_path_factory.mktemp("crop") / "s.h5"
    series = pose_util.campaign(8, n_sessions=1, duration_s=120.0, rate_hz=10.0)[0]
    pose_util.write_session(path, series)
    # an encoder stream that starts EARLY_S before the mocap (which starts 0.5 s before
    # the sensor): the session start
    t_mocap0 = round((series.t_s[0] - 0.5 + 100.0) * 1e9)
    host = t_mocap0 - round(EARLY_S * 1e9) + np.arange(100) * 10_000_000
    with SessionWriter.add_to(path) as w:
        w.add_encoder("pods", n_counts=3)
        w.append_encoder(
            "pods",
            EncoderBatch(host, np.full(100, NO_DEVICE_TIME), np.arange(100),
                         np.zeros((100, 3), np.int64), np.full(100, np.nan), np.full(100, np.nan)),
        )  # fmt: skip
    start_s = (host[0] / 1e9) - 100.0  # the series' clock
    flags_s = series.t_s[series.reloc][1:]  # the flagged samples (the first is never flagged)
    return path, flags_s - start_s, series.t_s - start_s


def _fit(path, tmp_path, *extra):
    out = tmp_path / "m.toml"
    r = CliRunner().invoke(
        cli, ["fit", "pose-error", str(path), *COMMON, "--json", "-o", str(out), *extra]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), PoseErrorModel.load(out)


def test_times_count_from_the_session_start(session, tmp_path) -> None:
    path, flags_from_start, _ = session
    doc, model = _fit(path, tmp_path)
    (s,) = doc["sessions"]
    assert s["time_origin"].startswith("s from the session start")
    np.testing.assert_allclose(s["segmentation"]["flagged_times_s"], flags_from_start, atol=1e-6)
    prov = model.provenance
    assert prov["time_origin"] == s["time_origin"]
    np.testing.assert_allclose(
        prov["segmentation"]["s"]["flagged_times_s"], flags_from_start, atol=1e-6
    )


def test_crop_window_from_the_session_start(session, tmp_path) -> None:
    path, flags_from_start, t_from_start = session
    t0, t1 = 20.0, 110.0  # holds two of the four flagged relocalizations
    doc, _ = _fit(path, tmp_path, "--t-start", str(t0), "--t-end", str(t1))
    (s,) = doc["sessions"]
    inside = (t_from_start >= t0) & (t_from_start < t1)
    assert s["n_samples"] == int(inside.sum())
    want = flags_from_start[(flags_from_start >= t0) & (flags_from_start < t1)]
    assert want.size == 2
    np.testing.assert_allclose(s["segmentation"]["flagged_times_s"], want, atol=1e-6)
    r = CliRunner().invoke(
        cli, ["validate", str(path), *COMMON, "--draws", "200", "--model", str(tmp_path / "m.toml"),
              "--t-start", str(t0), "--t-end", str(t1), "--json"],
    )  # fmt: skip
    assert r.exit_code in (0, 1), r.output
    assert json.loads(r.stdout)["prepared"][0]["n_samples"] == int(inside.sum())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--t-start", "50", "--t-end", "40"], "must be after --t-start"),
        (["--t-start", "5000"], "holds no data; the session runs"),
        (["--t-end", "nan"], "must be finite"),
    ],
)
def test_bad_windows_exit_2(session, args, message) -> None:
    path = session[0]
    r = CliRunner().invoke(cli, ["fit", "pose-error", str(path), *COMMON, *args])
    assert r.exit_code == 2 and message in r.output, r.output
