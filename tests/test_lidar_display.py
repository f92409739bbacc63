"""Each lidar statistic is named, scaled and formatted once (``characterize/lidar/display``).

The datasheet and the report's lidar table are rendered from one characterization
of a synthetic still scan; each shared statistic appears in both under the name and
unit of its one entry, the datasheet's value in that entry's format.
"""

from __future__ import annotations

import re

import lidar_util as U

from sensorbench.characterize.lidar import display as disp
from sensorbench.characterize.lidar.stats import StaticOptions, characterize_turns
from sensorbench.report.data import LidarSection, LidarSession, LidarStream
from sensorbench.report.html import render_lidar


def test_a_statistic_is_shown_with_its_unit() -> None:
    assert disp.JITTER.with_unit(0.00371) == "3.71 ms"
    assert disp.ANGULAR_STEP.with_unit(0.8009) == "0.801°"
    assert disp.POINTS.with_unit(448.2) == "448"
    assert disp.EDGE_OUTLIERS.with_se(1.9091, 0.0325) == "1.909 ± 0.033 %"
    assert disp.PERIOD.heading(" p50") == "Turn period p50 (ms)"
    assert disp.POINTS.heading(" (median)") == "Points per turn (median)"
    assert disp.band_label(1.0, 2.0) == "1–2 m"


def test_the_datasheet_and_the_report_share_each_statistic() -> None:
    s = U.synth_scan(U.room(), U.still(), 12.0, seed=2, sigma_m=0.005, jitter_s=0.002)
    res = characterize_turns(s.turns, options=StaticOptions(bands_m=(0.5, 8.0)))
    doc = res.as_dict()
    t, n = doc["timing"], doc["noise"]
    lines = disp.datasheet(res).splitlines()[1:]
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in lines)
    assert rows[disp.RATE.label].startswith(disp.RATE.with_unit(t["rate_hz"]))
    assert f"σ {disp.JITTER.with_unit(t['jitter_std_s'])}" in rows[disp.JITTER.label]
    assert rows[disp.LONGEST_GAP.label].startswith(disp.LONGEST_GAP.with_unit(t["longest_gap_s"]))
    assert rows[disp.ANGULAR_STEP.label] == disp.ANGULAR_STEP.with_unit(t["angular_step_deg"])
    band = n["bands"][0]
    assert rows[f"{disp.BAND_SIGMA.label} {disp.band_label(0.5, 8.0)}"].startswith(
        disp.BAND_SIGMA.with_se(band["sigma_m"], band["se_m"])
    )
    stream = LidarStream(
        "lidar", "", t, n, "", None, 1.0, 0.01, None, None, [None] * len(n["bands"]), []
    )
    page = render_lidar(LidarSection([LidarSession("still", "still.h5", [stream])]))
    for stat in (disp.RATE, disp.ANGULAR_STEP, disp.SKIPPED, disp.LONGEST_GAP):
        assert f"<td>{stat.heading()}</td>" in page
    assert f"<td>{disp.JITTER.heading(' σ')}</td>" in page
    assert f"<th>{disp.BAND_SIGMA.heading()}</th>" in page
    assert f"<td>{disp.band_label(0.5, 8.0)}</td>" in page


def test_the_share_of_no_returns_carrying_an_intensity_is_one_figure() -> None:
    """It was computed twice, in ``returns`` (``no_return_with_intensity_pct``) and in
    ``sequence`` (``no_return_with_quality_pct``). 40 turns of 100 points, every 10th a
    no-return, every 4th of those carrying an intensity: 25 %, stated once."""
    import numpy as np

    from sensorbench.logs import LidarTurns

    n, per = 40, 100
    t0 = np.arange(n, dtype=np.int64) * 100_000_000
    rng = np.full(n * per, 2.0, np.float32)
    inten = np.full(n * per, 200, np.uint16)
    rng[::10], inten[::10], inten[::40] = np.inf, 0, 180
    turns = LidarTurns(
        t0, t0.copy(), np.full(n, 10.0, np.float32), np.full(n, per, np.int32),
        np.zeros(n, np.uint16), np.tile(np.linspace(0, 2 * np.pi, per, endpoint=False), n),
        rng, inten, (t0[:, None] + np.arange(per)[None, :] * 1_000_000).ravel(),
    )  # fmt: skip
    ch = characterize_turns(turns, timing_only=True)
    doc = ch.as_dict()
    found = {f"{part}.{key}": value for part in ("returns", "sequence")
             for key, value in doc[part].items() if key.startswith("no_return_with")}  # fmt: skip
    assert found == {"sequence.no_return_with_quality_pct": 25.0}
    assert disp.datasheet(ch).count("25 % of no-returns carry an intensity") == 1
