"""A reference whose clock is further from the encoder's than the alignment searches
(±MAX_OFFSET_S) is refused where a coarse look out to ±2 s aligns it clearly better, not
aligned inside the search: mocap 0.6 s late was "aligned"
at +0.250 ± 0.0006 s, marked identified, and the sideways pod's distance per tick came out
28σ off."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from pods_sim_util import DRIVES, simulate

from sensorbench.characterize.pods.geometry_fit import fit_pods
from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import Drive, align_drive_checked, load_drive, refuse_outside


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("align_range")
    return [simulate(tmp, name, 40 + i) for i, name in enumerate(DRIVES)]


@pytest.mark.parametrize("late_s", [0.6, -0.4])
def test_a_reference_beyond_the_search_is_refused_naming_the_drive(sessions, late_s) -> None:
    drives = [load_drive(p) for p in sessions]
    drives[0].t_ref = drives[0].t_ref + late_s  # the forward drive's mocap clock is off
    with pytest.raises(FitError, match=r"forward: .* align best near .* outside") as e:
        fit_pods(drives)
    # the coarse grid's point nearest the offset (0.1 s apart)
    at = float(re.search(r"near ([-+.0-9]+) s", str(e.value)).group(1))
    assert at == pytest.approx(late_s, abs=0.06), str(e.value)


def test_a_reference_within_the_search_is_aligned(sessions) -> None:
    # the simulator's mocap latency is 4 ms; 0.2 s more stays inside the search
    drive = load_drive(sessions[0])
    drive.t_ref = drive.t_ref + 0.2
    offset, identified = align_drive_checked(drive, 0.5)
    assert identified and offset == pytest.approx(0.204, abs=0.003)


def test_drives_none_of_which_aligns_are_refused_as_such(sessions) -> None:
    # every mocap 3 s late: no drive's alignment cost varied 2× within the search, every
    # offset was taken as 0 s, and each pod was refused as "did not roll ... a wheel off
    # the floor or an encoder not connected" (its counter moved 330 000 ticks)
    drives = [load_drive(p) for p in sessions]
    for d in drives:
        d.t_ref = d.t_ref + 3.0
    with pytest.raises(FitError, match="no drive's pod counts follow its reference"):
        fit_pods(drives)


def _waits_then_drives(drive: Drive, wait_s: float, long_s: float) -> Drive:
    """``drive`` squeezed to ``long_s`` of file time after ``wait_s`` at rest (the
    counts, yaw and reference held at their first values)."""
    scale = long_s / (drive.t_enc[-1] - drive.t_enc[0])
    t_enc = (drive.t_enc - drive.t_enc[0]) * scale
    t_ref = (drive.t_ref - drive.t_enc[0]) * scale
    k = round(wait_s / float(np.median(np.diff(t_enc))))
    j = round(wait_s / float(np.median(np.diff(t_ref))))
    step_e, step_r = wait_s / k, wait_s / j
    return replace(
        drive,
        t_enc=np.r_[np.arange(k) * step_e, t_enc + wait_s],
        counts=np.r_[np.repeat(drive.counts[:1], k, axis=0), drive.counts],
        imu_yaw=None if (y := drive.imu_yaw) is None else np.r_[np.full(k, y[0]), y],
        t_ref=np.r_[np.arange(j) * step_r, t_ref + wait_s],
        ref=np.r_[np.repeat(drive.ref[:1], j, axis=0), drive.ref],
        max_gap_s=drive.max_gap_s * scale,
        bounce=None if drive.bounce is None else np.r_[np.zeros(k, bool), drive.bounce],
    )


@pytest.mark.parametrize("index", range(len(DRIVES)))
def test_a_short_drive_is_not_refused_for_a_look_past_its_end(sessions, index) -> None:
    # `demo --quick` records its 20 s drives at 10x real time: 2 s of file time after a
    # wait, so the look out to +2 s left only intervals of the wait on the reference,
    # cost 0 (every residual 0, the MAD cap 0), and the forward drive was refused as
    # aligning "inf x better near +1.65 s" although its clocks agree to 4 ms
    drive = _waits_then_drives(load_drive(sessions[index]), 0.5, 1.7)
    interval_s = 0.5 * 1.7 / 50
    offset, identified = align_drive_checked(drive, interval_s)
    assert identified and abs(offset) < 0.01, offset
    refuse_outside(drive, offset, interval_s)
