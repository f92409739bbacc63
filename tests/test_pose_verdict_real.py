"""Wrong worlds built from real files fail with their named reason; the real file's own verdict.

TUM RGB-D ``freiburg1_xyz``: mocap ground truth (100 Hz) and an RGB-D SLAM estimate
(30 Hz, 26.6 s), read as two pose tracks. Worlds:

- the estimate's positions scaled by 0.9 about its first pose: ``SCALE``;
- a ramp of 4 mm/s added to the estimate's x (10 cm over the recording): ``DRIFT``;
- the recording cut into three 8.9-s pieces (three sessions), one of them shifted by
  (0.3, −0.2, 0) m: ``FRAME`` naming that piece, for each of the three;
- the three pieces unshifted: all in one map.

The unmodified recording's verdict (docs/POSE_ERROR.md): the model part fails with
``MISFIT`` only — no DRIFT, SCALE or FRAME: the SLAM error's standardized innovations
are heavy-tailed (kurtosis 4-10 on every axis against ~3 ± 0.5 simulated).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pose_util
import pytest
from real_data import TUM_GROUNDTRUTH, TUM_RGBDSLAM, need

from sensorbench.characterize.pose.align import PoseTrack
from sensorbench.characterize.pose.error_model import fit_pose_error
from sensorbench.characterize.pose.sessions import prepare_campaign
from sensorbench.characterize.pose.validate import validate_sessions
from sensorbench.characterize.pose.verdict import assess

GT = TUM_GROUNDTRUTH.path
EST = TUM_RGBDSLAM.path

pytestmark = need(TUM_GROUNDTRUTH, TUM_RGBDSLAM)


def _load(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a = np.loadtxt(path, comments="#")
    return a[:, 0], a[:, 1:4], a[:, 4:8]


@pytest.fixture(scope="module")
def tum():
    tg, pg, qg = _load(GT)
    te, pe, qe = _load(EST)
    return PoseTrack(tg - tg[0], pg, qg, name="mocap"), (te - tg[0], pe, qe)


def _verdict(tracks, names):
    camp = prepare_campaign(tracks, names)
    model = fit_pose_error(camp.series)
    rep = validate_sessions(camp.series, n_draws=1000, seed=0, model=model)
    return assess(camp.prepared, model, rep, camp.frames)


def test_scaled_estimate_fails_scale(tum):
    ref, (t, p, q) = tum
    v = _verdict([(PoseTrack(t, p[0] + 0.9 * (p - p[0]), q, name="slam"), ref)], ["fr1"])
    assert "SCALE" in pose_util.codes(v), v.lines()
    lo, hi = v.scale.ci95
    assert lo < 1 / 0.9 < hi  # the similarity maps the sensor onto mocap: 1/0.9


def test_ramp_fails_drift(tum):
    ref, (t, p, q) = tum
    ramp = np.outer(t - t[0], [0.004, 0.0, 0.0])
    v = _verdict([(PoseTrack(t, p + ramp, q, name="slam"), ref)], ["fr1"])
    assert "DRIFT" in pose_util.codes(v), v.lines()
    assert any(r.code == "DRIFT" and r.subject == "x" for r in v.reasons())


def _pieces(tum, shifted: int | None):
    ref, (t, p, q) = tum
    edges = np.linspace(t[0], t[-1] + 1e-6, 4)
    tracks, names = [], []
    for i in range(3):
        m = (t >= edges[i]) & (t < edges[i + 1])
        pos = p[m] + (np.array([0.3, -0.2, 0.0]) if i == shifted else 0.0)
        tracks.append((PoseTrack(t[m], pos, q[m], name="slam"), ref))
        names.append(f"piece{i}")
    return tracks, names


@pytest.mark.parametrize("shifted", [0, 1, 2])
def test_piece_in_another_frame_fails_frame_and_is_named(tum, shifted):
    v = _verdict(*_pieces(tum, shifted))
    assert v.frames.failed_sessions() == [f"piece{shifted}"], v.lines()
    assert any(r.code == "FRAME" and r.subject == f"piece{shifted}" for r in v.reasons())


def test_unshifted_pieces_are_in_one_map(tum):
    v = _verdict(*_pieces(tum, None))
    assert v.frames.testable and v.frames.failed_sessions() == [], v.lines()


def test_unmodified_recording_verdict(tum):
    ref, (t, p, q) = tum
    v = _verdict([(PoseTrack(t, p, q, name="slam"), ref)], ["fr1"])
    assert pose_util.codes(v) == {"MISFIT"}, v.lines()
    assert {f["statistic"] for f in v.validation.failures()} == {"kurtosis"}
    assert not v.scale.failed and v.scale.ci95[0] < 1.0 < v.scale.ci95[1]
    assert all(st.stationary for st in v.stationarity.values())


def test_detections_do_not_move_with_the_time_offset(tum):
    """The old detector found 11 jumps at the estimated offset and 18 at 14 ms beside it."""
    from sensorbench.characterize.pose.align import (
        align_sessions,
        estimate_time_offset,
        pose_errors,
    )
    from sensorbench.characterize.pose.reloc_segments import detect_jumps

    ref, (t, p, q) = tum
    slam = PoseTrack(t, p, q, name="slam")
    offset_s, _ = estimate_time_offset(slam, ref)
    counts = []
    for shift in (-0.014, 0.0, 0.014):
        a = align_sessions([(slam, ref)], "se3", offset_s + shift)[0]
        ts, e, _ = pose_errors(slam, ref, a)
        counts.append(int(detect_jumps(ts, e).sum()))
    assert len(set(counts)) == 1, counts
    prepared = prepare_campaign([(slam, ref)], ["fr1"]).prepared
    seg = prepared[0].segmentation
    assert 0.001 <= seg.offset_sigma_s < 0.02  # GLS, inflated for the clock drift: ~2.4 ms
    assert seg.unstable_times_s.size == 0
