"""A report over recordings from different maps: one transform per session, as evo aligns.

Three recordings of the real TUM fr1_xyz pair, each reported in its own map: as
recorded, its estimate moved into a second map (rotated 90° about z, shifted by
metres), and one at 7.7 Hz in a third (tilted). By default (``--align auto``) the
report's FRAME check finds them not in one map, aligns each on its own and says so;
every session's ATE and RPE then equal evo's (tests/evo_peer.py: evo_ape --align and
evo_rpe on the pairs built there at the report's time offset) within 0.5 %. Forced into
one frame (``--align campaign``), the FRAME check fails.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import evo_peer
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image
from real_data import TUM_GROUNDTRUTH, TUM_RGBDSLAM, need
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.report.build import ReportOptions, build_report
from sensorbench.report.data import PoseSection

pytestmark = need(TUM_GROUNDTRUTH, TUM_RGBDSLAM)
TOLERANCE = 0.005
_TURN = Rotation.from_euler("z", 90, degrees=True)
_TILT = Rotation.from_euler("xz", [8, -140], degrees=True)
MAPS = {
    "fr1_as_recorded": (Rotation.identity(), np.zeros(3), None),
    "fr1_second_map": (_TURN, np.array([4.0, -3.0, 0.5]), None),
    "fr1_third_map": (_TILT, np.array([-2.0, 7.0, 1.0]), 7.7),
}


def _recording(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """The estimate in map ``name`` (and at its rate), as a TUM file and a session file."""
    rot, shift, rate_hz = MAPS[name]
    rows = evo_peer.tum_rows(TUM_RGBDSLAM.path)
    if rate_hz is not None:
        grid = np.arange(rows[0, 0], rows[-1, 0], 1.0 / rate_hz)
        rows = rows[np.unique(np.abs(rows[None, :, 0] - grid[:, None]).argmin(axis=1))]
    out = rows.copy()
    out[:, 1:4] = rot.apply(rows[:, 1:4]) + shift
    out[:, 4:8] = (rot * Rotation.from_quat(rows[:, 4:8])).as_quat()
    est = tmp_path / f"{name}.txt"
    np.savetxt(est, out, fmt="%.6f")
    h5 = tmp_path / f"{name}.h5"
    for what, f in (("mocap", TUM_GROUNDTRUTH.path), ("pose", est)):
        r = CliRunner().invoke(cli, ["import", what, str(f), "--format", "tum", "--into", str(h5)])
        assert r.exit_code == 0, r.output
    return est, h5


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("maps")
    return {name: _recording(d, name) for name in MAPS}


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOLERANCE * abs(theirs)


def test_each_map_its_own_frame_and_evo_figures(recordings, tmp_path: Path) -> None:
    rep = build_report(
        [h5 for _, h5 in recordings.values()], tmp_path / "out", options=ReportOptions(draws=200)
    )
    pose = rep.data["pose_error"]
    line = next(s for s in rep.sections if isinstance(s, PoseSection)).summary()
    assert line.startswith("pose_sensor: ") and "frames: one transform per session" in line
    assert pose["alignment"].startswith("one transform per session"), pose["alignment"]
    assert "not in the others' map" in pose["alignment"]
    assert "FRAME" not in {r["code"] for r in rep.data["pose_verdict"]["model"]["reasons"]}
    gt = evo_peer.tum_rows(TUM_GROUNDTRUTH.path)
    for sess in pose["sessions"]:
        assert sess["alignment_used"] == "se3, this session's own transform"
        est, _ = recordings[sess["name"]]
        te = sess["trajectory_error"]
        ref, e = evo_peer.pairs(gt, evo_peer.tum_rows(est), sess["time_offset"]["offset_s"])
        ate, theirs = te["ate_translation_m"], evo_peer.ape(ref, e)
        assert ate["n"] == ref.num_poses
        for k in ("rmse", "mean", "median", "max"):
            assert _close(ate[k], theirs[k]), (sess["name"], k, ate[k], theirs[k])
        t_rpe, r_rpe = evo_peer.rpe(ref, e, te["rpe_delta_frames"])
        assert _close(te["rpe_translation_m"]["rmse"], t_rpe["rmse"]), sess["name"]
        assert _close(te["rpe_rotation_deg"]["rmse"], r_rpe["rmse"]), sess["name"]
        assert ate["rmse"] < 0.05  # centimetres, not the metres between the maps
    text = rep.path.read_text()
    assert "Frame alignment: one transform per session" in text
    _summary_box_is_at_the_top(rep.path, tmp_path / "page.png")
    section = next(s for s in rep.sections if isinstance(s, PoseSection))
    overlays = [f for f in section.figures if "aligned estimate" in f.caption]
    assert len(overlays) == len(MAPS)
    for f in overlays:
        _overlay_is_a_readable_picture(f.png)


def _overlay_is_a_readable_picture(png: bytes) -> None:
    """The overlay as rendered: the path (grey and colour-mapped points) fills a square
    plot area on equal axes (not squashed to a line) and the error's colours vary."""
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    spread = img.max(axis=2) - img.min(axis=2)
    coloured = spread > 60  # viridis points; grey, black and white are not
    rows, cols = np.nonzero(coloured[:, : int(0.75 * img.shape[1])])  # left of the colour bar
    assert rows.size > 200
    assert np.ptp(rows) > 0.25 * img.shape[0] and np.ptp(cols) > 0.25 * img.shape[1]
    hues = {tuple(c // 64) for c in img[rows, cols]}
    assert len(hues) >= 3, hues  # more than one error colour along the path


SUMMARY_BORDER = (0x3A, 0x6E, 0xA5)  # report/html.py: .summary's left border


def _summary_box_is_at_the_top(page: Path, shot: Path) -> None:
    """The rendered page (headless chromium, 1200 × 1000 px): the summary box's
    coloured left border is a vertical bar in the first screen, under the title."""
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("no /usr/bin/chromium to render the page")
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000"]
    subprocess.run(
        [str(chromium), *args, f"--screenshot={shot}", page.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    bar = np.all(np.abs(img - np.array(SUMMARY_BORDER)) <= 8, axis=2)
    rows, cols = np.nonzero(bar)
    assert rows.size > 0, "no summary box on the first screen"
    assert 60 < rows.min() < 400  # under the title, at the top
    assert rows.max() - rows.min() >= 15  # a bar one text line high at least
    assert np.ptp(cols) <= 6  # 4 px wide (one column of the page)


def test_one_frame_forced_on_them_fails_the_frame_check(recordings, tmp_path: Path) -> None:
    rep = build_report(
        [h5 for _, h5 in recordings.values()],
        tmp_path / "out",
        options=ReportOptions(draws=200, align="campaign"),
    )
    reasons = rep.data["pose_verdict"]["model"]["reasons"]
    assert "FRAME" in {r["code"] for r in reasons}, reasons
    assert all(
        s["alignment_used"].startswith("se3, one transform")
        for s in rep.data["pose_error"]["sessions"]
    )
