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

import numpy as np
import pytest
import wide_pose_world as world

from sensorbench.characterize.pose.error_model import fit_pose_error
from sensorbench.characterize.pose.sessions import prepare_campaign


def _named(seed: int, align: str):
    truth, tracks, names = world.campaign(seed, special={0: {"wrong_at_s": 0.0}}, wrong_rate=0.0)
    camp = prepare_campaign(tracks, names, align=align)
    return truth, names, camp, fit_pose_error(camp.series)


@pytest.mark.parametrize("seed", [5, pytest.param(6, marks=pytest.mark.slow),
                                  pytest.param(7, marks=pytest.mark.slow)])
def test_a_wrong_start_in_a_shared_map_is_named(seed: int) -> None:
    """One frame for the campaign: the wrong start alone is named (at the first stamp,
    within two sensor periods: a mocap drop-out moves it to the next sample kept), or,
    when its session has so few relocalizations that its mean is off the map, the FRAME
    check leaves that session out (seed 7); either way sigma_b's 95 % interval holds the
    truth on x and yaw (each a 95 % claim: these three seeds are no such miss)."""
    truth, names, camp, model = _named(seed, "campaign")
    named = model.wrong_relocalizations["named"]
    if camp.frames is not None and names[0] in camp.frames.excluded:
        assert named == [], named
    else:
        assert [w["session"] for w in named] == [names[0]], named
        assert abs(named[0]["t_s"] - truth.wrong_times_s[0][0]) < 2.0 / truth.sensor_hz
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


WIDE_SEEDS = range(10, 35)


@pytest.mark.slow
def test_wrong_relocalizations_named_over_wide_worlds() -> None:
    """25 campaigns (4 × 40 s, ``--align auto``) drawn over the whole ranges: a name
    matches a true wrong relocalization of its session within 1.5 sensor periods.
    Naming is at 5 % family-wise per campaign, so campaigns with a false name are
    Binomial(25, ≤ 0.05): ≤ 4 (P(> 4) = 0.7 %). A gross jump (≥ 0.3 m or ≥ 5°) may sit
    within a 20-cm usual spread, so ≥ 90 % of the true ones named, not all (measured
    38 of 38, no false name)."""
    hits = trues = false_campaigns = 0
    for seed in WIDE_SEEDS:
        truth, tracks, names = world.campaign(seed, duration_s=40.0)
        model = fit_pose_error(prepare_campaign(tracks, names, align="auto").series)
        named = [(w["session"], w["t_s"]) for w in model.wrong_relocalizations["named"]]
        true = [(n, t) for n, ts in zip(names, truth.wrong_times_s, strict=True) for t in ts]
        tol = 1.5 / truth.sensor_hz

        def near(a: tuple[str, float], among: list[tuple[str, float]], tol: float = tol) -> bool:
            return any(a[0] == b[0] and abs(a[1] - b[1]) < tol for b in among)

        hits += sum(near(t, named) for t in true)
        trues += len(true)
        false_campaigns += any(not near(n, true) for n in named)
    assert false_campaigns <= 4
    assert hits >= 0.9 * trues and trues >= 20, (hits, trues)


def test_a_wrong_start_is_named_under_a_given_model() -> None:
    """``validate --model`` named a session's wrong relocalizations one session at a time,
    and a session alone shares its frame with none, so its start was exempt: seed 5's
    wrong start (1.7 m, 81°) counted as a usual offset and its session failed. The start
    is named now (within two sensor periods, as the fit names it) and the session judged
    without it; the others name nothing (the campaign has no other wrong one)."""
    from sensorbench.characterize.pose.validate import validate_sessions

    truth, names, camp, model = _named(5, "campaign")
    report = validate_sessions(camp.series, n_draws=200, model=model)
    named = {c.name: c.wrong_t_s for c in report.sessions}
    assert len(named[names[0]]) == 1, named
    assert abs(named[names[0]][0] - truth.wrong_times_s[0][0]) < 2.0 / truth.sensor_hz
    assert all(not named[n] for n in names[1:]), named
    assert report.to_dict()["sessions"][0]["wrong_relocalizations_t_s"] == list(named[names[0]])


@pytest.mark.parametrize("wrong_start", [True, False])
def test_a_wrong_start_does_not_pull_the_campaign_frame(wrong_start: bool) -> None:
    """A wrong start hid under its session's own frame, so the campaign GLS took its
    1.7-m, 81° offset (seed 5) as a usual one, weighted by a model fitted under the own
    frames that the start had inflated (sigma_b x 72 mm for 17, yaw 0.09 rad for 0.0017):
    the frame was pulled by 5–6 mm in x and y. Against the GLS under the true model, the
    start left out (the efficient estimate's covariance C), the fitted frame's error
    (ε, t) is N(0, ≈C) when right: χ²₆ within its 99 % point (measured 20.7 before, 7.0
    now; 4.2 without the wrong start), and under its stated covariance too (9.8; 7.5)."""
    from scipy.spatial.transform import Rotation
    from scipy.stats import chi2

    from sensorbench.characterize.pose.gls_align import Frame, refine

    special = {0: {"wrong_at_s": 0.0}} if wrong_start else {}
    truth, tracks, names = world.campaign(5, special=special, wrong_rate=0.0)
    fit = prepare_campaign(tracks, names, align="campaign").fit
    assert fit is not None
    best = refine(
        tracks, [truth.offset_s] * len(tracks),
        Frame(truth.map_rotation.as_matrix(), truth.map_translation, fit.frame.body_rotation,
              "se3"),
        [s.t_s[1:][s.flags[1:] > 0] for s, _ in tracks],
        truth.params, wrong=[w[:1] for w in truth.wrong_times_s],
    )  # fmt: skip
    eps = (truth.map_rotation * Rotation.from_matrix(fit.frame.rotation).inv()).as_rotvec()
    turned = Rotation.from_rotvec(eps).apply(fit.frame.translation - fit.centre) + fit.centre
    err = np.r_[eps, truth.map_translation - turned]
    limit = chi2.isf(0.01, 6)
    for c in (best.cov, fit.cov):
        cov = c[-9:-3, -9:-3]  # columns: offsets, then ε, t, β
        assert err @ np.linalg.solve(cov, err) <= limit, (err, np.sqrt(np.diag(cov)))
