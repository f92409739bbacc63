"""The report of a real TUM pair: ATE and RPE as evo states them, values in mm and deg,
sessions named by their files, the Allan figure on its own row, and no warnings."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import evo_peer
from click.testing import CliRunner
from real_data import TUM_GROUNDTRUTH, TUM_RGBDSLAM, need

from sensorbench.cli import cli
from sensorbench.report.build import ReportOptions, build_report


@need(TUM_GROUNDTRUTH, TUM_RGBDSLAM)
def test_tum_report_states_evo_figures_in_mm(tmp_path: Path) -> None:
    h5 = tmp_path / "fr1_xyz.h5"
    for what, f in (("mocap", TUM_GROUNDTRUTH.path), ("pose", TUM_RGBDSLAM.path)):
        r = CliRunner().invoke(cli, ["import", what, str(f), "--format", "tum", "--into", str(h5)])
        assert r.exit_code == 0, r.output
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. numpy's "invalid value in sqrt"
        rep = build_report([h5], tmp_path / "out", options=ReportOptions(draws=200))
    (sess,) = rep.data["pose_error"]["sessions"]
    assert (
        sess["name"] == "fr1_xyz" and sess["alignment_used"] == "se3, this session's own transform"
    )
    ate = sess["trajectory_error"]["ate_translation_m"]
    theirs = evo_peer.evo_associated_ate(
        TUM_GROUNDTRUTH.path, TUM_RGBDSLAM.path, sess["time_offset"]["offset_s"]
    )
    assert abs(ate["rmse"] - theirs["rmse"]) <= 0.01 * theirs["rmse"]
    page = rep.path.read_text()
    text = re.sub(r"<[^>]+>", " ", re.sub(r'src="data:[^"]+"', "", page))
    assert f"{1000 * ate['rmse']:.2f}" in text and "ATE RMSE (mm)" in text
    pose_table = page[
        page.index("<caption>pose-error model") : page.index(
            "</table>", page.index("<caption>pose-error model")
        )
    ]
    assert not re.search(r"\de-0\d", pose_table)  # mm and deg, no 7.026e-06 m
    assert "<td>mm</td>" in pose_table and "<td>deg</td>" in pose_table
    assert "session fr1_xyz" in text and "session import" not in text
    # the Allan figure alone on its row, at the page's width: nothing beside it
    assert re.search(r"<div class='figures'><figure class='wide'><img alt=\"Allan deviation[^>]*>"
                     r"<figcaption>[^<]*</figcaption></figure></div>", page)  # fmt: skip
