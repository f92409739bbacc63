"""``report`` on a session whose pose sensor has no reference stream: the page had no
pose section and no word why; it now says which session lacks which stream."""

from __future__ import annotations

import html
from pathlib import Path

from click.testing import CliRunner

from sensorbench.cli import cli


def test_a_pose_sensor_without_its_reference_is_named_on_the_page(tmp_path: Path) -> None:
    csv = tmp_path / "pose.csv"
    csv.write_text("t_s,x,y,z,qx,qy,qz,qw\n0.0,0,0,0,0,0,0,1\n0.1,1,0,0,0,0,0,1\n")
    session = tmp_path / "s.h5"
    run = CliRunner().invoke
    done = run(cli, ["import", "pose", "--format", "csv", "--into", str(session), str(csv)])
    assert done.exit_code == 0, done.output
    done = run(cli, ["report", str(session), "-o", str(tmp_path / "r")])
    assert done.exit_code == 0, done.output
    page = html.unescape((tmp_path / "r" / "report.html").read_text(encoding="utf-8"))
    assert "s.h5 holds 'pose_sensor' but no reference pose stream 'mocap'" in page, page
