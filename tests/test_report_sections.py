"""The report as computed sections (dataclasses) rendered to HTML, and its extension point."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sensorbench.report import build as report_mod
from sensorbench.report.build import SECTIONS, build_report
from sensorbench.report.data import (
    LidarSection,
    PoseSection,
    ProvenanceSection,
    ReportInputs,
)
from sensorbench.report.html import render_page
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session


@pytest.fixture(scope="module")
def static_session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    sc = load_scenario("lidar_static").with_overrides({"trajectory": {"hold_s": 8.0}})
    return simulate_to_session(sc, 1, tmp_path_factory.mktemp("s") / "static.h5")


def test_the_page_is_rendered_from_the_computed_sections_alone(
    static_session: Path, tmp_path: Path
) -> None:
    rep = build_report([static_session], tmp_path / "r")
    kinds = [type(s) for s in rep.sections]
    # no models: no pods section; one session: the pose model without validation
    assert kinds == [LidarSection, type(None), PoseSection, ProvenanceSection]
    assert rep.sections[2].validation is None
    assert rep.data["sessions"] == [str(static_session)]
    lidar = rep.sections[0]
    assert {st.name for st in lidar.sessions[0].streams} == {"ld19", "lidar_front", "lidar_rear"}
    assert all(f.png.startswith(b"\x89PNG") for st in lidar.sessions[0].streams for f in st.figures)
    # the figures' files are gone with the report's temporary directory: rendering
    # again from the dataclasses gives the written page byte for byte
    body = "".join(
        render(s)
        for s, (_, render) in zip(rep.sections, SECTIONS, strict=True)
        if s is not None
    )
    lines = [s.summary() for s in rep.sections if isinstance(s, PoseSection)]
    assert render_page(body, 1, lines) == rep.path.read_text(encoding="utf-8")


@dataclass
class _Checklist:
    items: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"checklist": self.items}


def test_a_section_is_one_compute_and_one_render_function(
    static_session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def compute(inputs: ReportInputs) -> _Checklist:
        return _Checklist([p.name for p in inputs.sessions])

    def render(section: _Checklist) -> str:
        return "<h2>Checklist</h2>" + "".join(f"<p>{i}</p>" for i in section.items)

    monkeypatch.setattr(report_mod, "SECTIONS", (*SECTIONS[:1], (compute, render)))
    rep = build_report([static_session], tmp_path / "r")
    page = rep.path.read_text(encoding="utf-8")
    assert rep.data["checklist"] == ["static.h5"]
    assert "<a href='#section-2'>Checklist</a>" in page
    assert "<h2 id='section-2'>Checklist</h2><p>static.h5</p>" in page
    assert "provenance" not in rep.data  # only the listed sections run


def test_the_honesty_table_marks_what_is_out_of_band() -> None:
    """A mean NEES or NIS outside its 95 % band is marked (class ``fail``, "out"); one
    inside is shown plainly."""
    from sensorbench.report.html import _in_band

    assert "class='fail'" in _in_band(1.62, [0.71, 1.35]) and "(out)" in _in_band(0.5, [0.7, 1.3])
    inside = _in_band(1.02, [0.71, 1.35])
    assert "fail" not in inside and inside == "1.02 [0.71, 1.35]"


def test_provenance_metadata_is_one_readable_row_per_key() -> None:
    """Nested device metadata as dotted keys with readable numbers, none cut off."""
    from sensorbench.report.html import _flat

    meta = {"model": "A1", "geometry": {"mount_xy_m": [0.1, -0.25], "yaw_rad": 3.14159265358}}
    meta |= {f"k{i}": "x" * 50 for i in range(20)}  # longer than any cell used to allow
    rows = dict(_flat(meta))
    assert rows["geometry.mount_xy_m"] == "0.1, -0.25" and rows["geometry.yaw_rad"] == "3.14159"
    assert rows["model"] == "A1" and len(rows) == 23 and rows["k19"] == "x" * 50


def test_pauses_are_counted_and_stated_in_the_summary(tmp_path: Path) -> None:
    """Two PAUSED runs (0.5 s and one at the stream's end) are counted with their
    length, and the pose summary line says the sensor pauses when covered."""
    import numpy as np

    from sensorbench.logs import PoseBatch, Session, SessionWriter
    from sensorbench.logs.schema import PoseFlag
    from sensorbench.report.data import PoseSection, pauses

    t = np.arange(0, 300) * 10_000_000  # 100 Hz, 3 s
    flags = np.zeros(t.size, np.uint8)
    flags[100:150] = PoseFlag.PAUSED  # 1.00-1.50 s, the next sample at 1.50 s
    flags[290:] = PoseFlag.PAUSED  # 2.90 s to the last sample, 2.99 s
    pos, quat = np.zeros((t.size, 3)), np.tile([0.0, 0.0, 0.0, 1.0], (t.size, 1))
    with SessionWriter(tmp_path / "p.h5", label="pauses", swmr=False) as w:
        w.add_pose("cam", kind="pose_sensor")
        w.append_pose("cam", PoseBatch(t, pos, quat, flags == 0, flags))
    with Session(tmp_path / "p.h5") as s:
        n, seconds = pauses(s, "cam")
    assert n == 2 and abs(seconds - 0.59) < 1e-9
    section = PoseSection("cam", "mocap", "", [], None, [], pauses=(n, seconds))
    assert "pauses when covered (2 pauses, 0.59 s in all)" in section.summary()
    assert "pauses" not in PoseSection("cam", "mocap", "", [], None, []).summary()


def test_a_host_clock_that_fell_behind_says_what_it_means_for_the_figures() -> None:
    from sensorbench.report.data import LidarSession, LidarStream
    from sensorbench.report.html import render_lidar

    timing = {
        "clock": "host",
        "clock_source": "arrival",
        "host_timing_reliable": False,
        "host_timing_note": "host clock unreliable: the host fell behind (bursts)",
        "rate_hz": 10.0,
        "host_rate_hz": 10.0,
        "period_percentiles_s": {"p50": 0.1},
        "points_per_turn": {"median": 450},
        "skipped_pct": 1.0,
    }
    stream = LidarStream("ld19", "", timing, None, "", None, 10.0, 0.01, None, None, [], [])
    import html

    page = html.unescape(render_lidar(LidarSection([LidarSession("s", "s.h5", [stream])])))
    assert "10 ± 0.01 (!)" in page and "1 (!)" in page
    assert "UNRELIABLE: host clock unreliable: the host fell behind (bursts): the figures " in page
    assert "show the host's delays" in page and "not the device's" in page


def test_a_wide_figure_is_shown_at_the_page_width(tmp_path: Path) -> None:
    """Headless chromium (1200 px window): a 1080-px figure (the Allan plot's six panels)
    spans the page's 1100-px column instead of the 520 px the others share."""
    import io
    import shutil
    import subprocess

    import numpy as np
    from PIL import Image

    from sensorbench.report.data import Figure
    from sensorbench.report.html import img, render_page

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("no chromium to render the page")
    colour = (200, 30, 160)
    pngs = []
    for width in (1080, 500):
        buf = io.BytesIO()
        Image.new("RGB", (width, 200), colour).save(buf, format="PNG")
        pngs.append(Figure(buf.getvalue(), f"{width} px"))
    page, shot = tmp_path / "p.html", tmp_path / "p.png"
    page.write_text(render_page("<h2>Figures</h2>" + "".join(img(f) for f in pngs), 1))
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,1000"]
    subprocess.run(
        [chromium, *args, f"--screenshot={shot}", page.as_uri()],
        check=True,
        capture_output=True,
        timeout=120,
    )
    shown = np.all(np.abs(np.asarray(Image.open(shot).convert("RGB")).astype(int) - colour) <= 8, 2)
    edges = np.diff(shown.astype(int), axis=1, prepend=0, append=0)
    widths = {
        int(e) - int(b)
        for row in edges
        for b, e in zip(np.flatnonzero(row == 1), np.flatnonzero(row == -1), strict=True)
    }
    assert min(widths) == 500 and max(widths) > 900, widths  # each figure's own span
