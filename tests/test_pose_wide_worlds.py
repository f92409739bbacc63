"""The pose-error fit on worlds drawn from wide ranges (tests/wide_pose_world.py).

A session that starts in the wrong place of a map the campaign shares (a gross offset
at its first sample: a wrong relocalization at start-up) was never named: a start
counted as a usual offset, so the fit took a 1–3 m, 5–90° jump as a draw of sigma_b
(seed 5: x sigma_b 73 mm for a true 17 mm, yaw 0.093 rad for 0.0017) and validation
failed with MISFIT on every statistic without saying why. Under one frame for several
sessions a start is now a candidate like any relocalization (under a session's own frame,
which absorbs its mean, it still is not: docs/POSE_ERROR.md, "Limitations").
"""

from __future__ import annotations

import pytest
import wide_pose_world as world

from sensorbench.characterize.pose.error_model import fit_pose_error
from sensorbench.characterize.pose.sessions import prepare_campaign


def _named(seed: int, align: str):
    truth, tracks, names = world.campaign(seed, special={0: {"wrong_at_s": 0.0}}, wrong_rate=0.0)
    camp = prepare_campaign(tracks, names, align=align)
    return truth, names, fit_pose_error(camp.series)


@pytest.mark.parametrize("seed", [5, pytest.param(6, marks=pytest.mark.slow),
                                  pytest.param(7, marks=pytest.mark.slow)])
def test_a_wrong_start_in_a_shared_map_is_named(seed: int) -> None:
    """One frame for the campaign: the wrong start alone is named (at the first stamp,
    within a sensor period) and sigma_b's 95 % interval holds the truth on x and yaw
    (each a 95 % claim: the pair misses in ~10 % of seeds, these three are not such)."""
    truth, names, model = _named(seed, "campaign")
    named = model.wrong_relocalizations["named"]
    assert [w["session"] for w in named] == [names[0]], named
    assert abs(named[0]["t_s"] - truth.wrong_times_s[0][0]) < 1.0 / truth.sensor_hz
    for k, a in ((0, "x"), (5, "yaw")):
        lo, hi = model.axes[a].ci()[0]
        assert lo <= truth.params[k, 0] <= hi, (a, lo, hi, truth.params[k, 0])



def test_a_relocalization_at_every_sample_is_refused_naming_the_flags() -> None:
    """A sensor flagging a relocalization at every sample leaves no window for the rate
    cross-correlation; the refusal named its gaps and advised --max-gap, which cannot
    help. It now names the flags and asks for the offset."""
    from sensorbench.errors import FitError

    _, tracks, names = world.campaign(4, special={0: {"reloc": "every"}}, wrong_rate=0.0)
    with pytest.raises(FitError, match=r"holds a flagged relocalization.*--time-offset"):
        prepare_campaign(tracks, names, align="campaign")
