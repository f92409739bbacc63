"""A reference whose clock is further from the encoder's than the alignment searches
(±MAX_OFFSET_S) is refused where a coarse look out to ±2 s aligns it clearly better, not
aligned inside the search: mocap 0.6 s late was "aligned"
at +0.250 ± 0.0006 s, marked identified, and the sideways pod's distance per tick came out
28σ off."""

from __future__ import annotations

import re

import pytest
from pods_sim_util import DRIVES, simulate

from sensorbench.characterize.pods.geometry_fit import fit_pods
from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import align_drive_checked, load_drive


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
