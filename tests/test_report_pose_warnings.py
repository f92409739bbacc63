"""The report's pose section states the fit's alignment warnings, as ``fit pose-error`` does.

A sensor clock 0.8 s behind the reference, searched over the report's ±0.5 s: the rate
cross-correlation can only peak at its search limit, and ``fit pose-error`` warns of it
(tests/test_pose_offset_limit.py). The report judged the same session with nothing said
of it; its page and JSON now carry the same warnings.
"""

from __future__ import annotations

from pathlib import Path

import pose_util

from sensorbench.report.data import ReportInputs, ReportOptions, compute_pose
from sensorbench.report.html import render_pose


def test_the_report_shows_the_offset_at_its_search_limit(tmp_path: Path) -> None:
    path = tmp_path / "lagged.h5"
    series = pose_util.campaign(5, n_sessions=1, duration_s=90.0, rate_hz=30.0)[0]
    pose_util.write_session(path, series, sensor_clock_lag_s=0.8)
    opts = ReportOptions(draws=200, sensor="cam")
    section = compute_pose(ReportInputs([path], None, opts, tmp_path, lambda _m: None))
    assert section is not None
    limit = [w for w in section.warnings if "search limit" in w]
    assert len(limit) == 1 and limit[0].startswith("lagged"), section.warnings
    assert section.as_dict()["pose_error"]["warnings"] == section.warnings
    assert "peaks at its search limit" in render_pose(section)
