"""ATE, RPE and time offset against evo on the real TUM pair, at 30 Hz and at 7.7 Hz.

The estimate is the TUM fr1_xyz RGB-D SLAM trajectory (~30 Hz); its 7.7 Hz version
keeps the samples nearest a 7.7 Hz grid (a sensor as slow as S-PTAM's). Each must
align (time offset from angular rates, SE(3) frames), and its ATE and RPE must equal
evo's (tests/evo_peer.py: evo's APE and RPE on pairs built there with the same
offset, and evo's own association of the raw files) within 1 %.
"""

from __future__ import annotations

from pathlib import Path

import evo_peer
import numpy as np
import pytest
from click.testing import CliRunner
from real_data import TUM_GROUNDTRUTH, TUM_RGBDSLAM, need

from sensorbench.characterize.pose.sessions import load_tracks, prepare_campaign
from sensorbench.cli import cli

pytestmark = need(TUM_GROUNDTRUTH, TUM_RGBDSLAM)
TOLERANCE = 0.01


def _subsample(path: Path, rate_hz: float, out: Path) -> Path:
    """The samples of a TUM file nearest a ``rate_hz`` grid, written as they are."""
    lines = [t for t in path.read_text().splitlines() if t.strip() and not t.startswith("#")]
    t = np.array([float(line.split()[0]) for line in lines])
    grid = np.arange(t[0], t[-1], 1.0 / rate_hz)
    keep = np.unique(np.abs(t[None, :] - grid[:, None]).argmin(axis=1))
    out.write_text("\n".join(lines[k] for k in keep) + "\n")
    return out


def _session(tmp_path: Path, est: Path) -> Path:
    h5 = tmp_path / f"{est.stem}.h5"
    for what, f in (("mocap", TUM_GROUNDTRUTH.path), ("pose", est)):
        r = CliRunner().invoke(cli, ["import", what, str(f), "--format", "tum", "--into", str(h5)])
        assert r.exit_code == 0, r.output
    return h5


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOLERANCE * abs(theirs)


@pytest.mark.parametrize("rate_hz", [None, 7.7])
def test_ate_rpe_agree_with_evo(tmp_path: Path, rate_hz: float | None) -> None:
    est = TUM_RGBDSLAM.path
    if rate_hz is not None:
        est = _subsample(est, rate_hz, tmp_path / "rgbdslam_7p7hz.txt")
        spacing = np.median(np.diff(evo_peer.tum_rows(est)[:, 0]))
        assert 0.12 < spacing < 0.14  # 7.7 Hz: beyond the old 0.1-s gap limit
    h5 = _session(tmp_path, est)
    camp = prepare_campaign([load_tracks(h5, "pose_sensor", "mocap")], [h5.stem], [str(h5)])
    (ps,) = camp.prepared
    offset = ps.alignment.offset_s
    assert abs(offset) < 0.03  # frames stamped on arrival, mocap on its own clock (~ -11 ms)
    te = ps.trajectory
    ref, e = evo_peer.pairs(evo_peer.tum_rows(TUM_GROUNDTRUTH.path), evo_peer.tum_rows(est), offset)
    assert te.ate_m.n == ref.num_poses
    theirs = evo_peer.ape(ref, e)
    for k in ("rmse", "mean", "median", "max"):
        assert _close(getattr(te.ate_m, k), theirs[k]), (k, getattr(te.ate_m, k), theirs[k])
    own = evo_peer.evo_associated_ate(TUM_GROUNDTRUTH.path, est, offset)
    assert _close(te.ate_m.rmse, own["rmse"]), (te.ate_m.rmse, own["rmse"])
    # RPE over about 1 s, in the sensor's own body frame as evo takes it
    t_rpe, r_rpe = evo_peer.rpe(ref, e, te.rpe_delta_frames)
    assert _close(te.rpe_m.rmse, t_rpe["rmse"]) and _close(te.rpe_m.max, t_rpe["max"])
    assert _close(te.rpe_deg.rmse, r_rpe["rmse"]) and _close(te.rpe_deg.median, r_rpe["median"])
    assert abs(te.rpe_delta_s - 1.0) < 0.5 * te.rpe_delta_s / te.rpe_delta_frames + 0.1


def test_a_gap_limit_below_the_spacing_names_the_cause(tmp_path: Path) -> None:
    est = _subsample(TUM_RGBDSLAM.path, 7.7, tmp_path / "rgbdslam_7p7hz.txt")
    h5 = _session(tmp_path, est)
    r = CliRunner().invoke(
        cli, ["fit", "pose-error", str(h5), "--sensor", "pose_sensor", "--max-gap", "0.1"]
    )
    assert r.exit_code == 2, r.output
    assert "median spacing 0.13" in r.output and "(> 0.100 s)" in r.output
    assert "widen --max-gap" in r.output
    assert "never rotate" not in r.output
