"""The replay's NEES verdict against a Monte Carlo of the split filters' own error process.

Realisations are drawn here, not through the model's formulas, and run through the
filters themselves: a geometry error δW drawn from the fit's row covariance (counts made
by ``W − δW``), every pod's rolled distance slipping per step by the wheels' law, counts
floored to whole ticks from a random sub-tick phase, a start error; the
:class:`SplitFilter` runs with the fitted geometry (its slip law, its row covariance)
and its stated variance is judged against the truth by
:func:`~sensorbench.fusion.odometry_replay.reference_consistency`, the N_eff of its band
from the model (:func:`~sensorbench.fusion.nees_samples.model_effective_samples`).

Cost: 150 replays of 30 s at 50 Hz, ≈ 40 s on one core (slow).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from sensorbench.fusion.consistency import nees_limit
from sensorbench.fusion.filter_noise import AxisNoise, FilterNoise
from sensorbench.fusion.nees_samples import SharedErrors
from sensorbench.fusion.odometry_replay import reference_consistency
from sensorbench.fusion.pod_kinematics import PodGeometry, body_increments, integrate_path
from sensorbench.fusion.split_filter import SplitFilter
from sensorbench.logs.model_keys import AXES

ROLL, DRAG = 4e-8, 1.5e-7
VAR0 = (1e-8, 2e-8, 1e-6)
DRAWS = 150


def _replays(draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean NEES (draws, 3) of the filters against truth and the model's N_eff (draws, 3)."""
    mounts = PodGeometry.from_mounts(
        x=[0.01, 0.0, -0.12], y=[0.16, -0.16, 0.0], phi=[0.0, 0.0, math.pi / 2], c=[2e-5] * 3
    )
    w = mounts.W
    block = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 1.0]])
    sig = np.kron(np.diag((1e-4 * np.abs(w).max(axis=1)) ** 2), block)
    pods = PodGeometry(
        mounts.c, mounts.phi, mounts.lever, mounts.names, row_cov=sig, slip=(ROLL, DRAG)
    )
    floor = pods.rounding_floor()
    noise = FilterNoise(
        *(AxisNoise(q=q, r=2 * floor[a]) for a, q in zip(AXES, (1e-3, 1e-3, 1e-2), strict=True))
    )
    t = np.arange(1501) / 50.0
    tt = t[:-1]
    u = (
        np.column_stack(
            [0.3 * np.sin(tt / 4) + 0.1, 0.1 * np.cos(tt / 3), 0.5 * np.sin(tt / 5) + 0.2]
        )
        / 50.0
    )
    truth = integrate_path(u)
    roll = np.abs(u @ w.T) * mounts.c
    perp = np.abs(-np.sin(mounts.phi) * u[:, :1] + np.cos(mounts.phi) * u[:, 1:2])
    sd_ticks = np.sqrt(ROLL * roll + DRAG * perp) / mounts.c
    chol = np.linalg.cholesky(sig)
    rng = np.random.default_rng(seed)
    filt = SplitFilter(noise)
    ref = np.arange(0, t.size, 5)
    nees = np.empty((draws, 3))
    n_eff = np.empty((draws, 3))
    for k in range(draws):
        d_w = (chol @ rng.standard_normal(sig.shape[0])).reshape(w.shape)
        travel = u @ (w - d_w).T + sd_ticks * rng.standard_normal(sd_ticks.shape)
        phase = rng.uniform(size=(1, 3))
        counts = np.floor(np.vstack([phase, phase + np.cumsum(travel, axis=0)]))
        inc = body_increments(w, np.diff(counts, axis=0))
        start = tuple(np.sqrt(VAR0) * rng.standard_normal(3))
        res = filt.run(t, inc, pose0=start, var0=VAR0, pods=pods)
        law = pods.slip_model()
        assert law is not None
        shared = SharedErrors(
            inc, res.pose[:, 2], VAR0, law.step_covariances(inc), None, pods.calibration_error()
        )
        cons = reference_consistency(t, res.pose, res.var, t[ref], truth[ref], shared=shared)
        nees[k] = [cons[a].mean_nees for a in AXES]
        n_eff[k] = [cons[a].n_eff for a in AXES]
    return nees, n_eff


@pytest.mark.slow
def test_nees_verdict_on_the_filters_own_error_process() -> None:
    """On its own model the filters are honest (mean NEES 1 within 3 s.e.), the model's
    N_eff is the Monte Carlo's ``2/Var(mean NEES)`` within 3 of its relative standard
    errors (√((2 + 12/ν)/n) for a mean of ν shared squares: 22–30 % here), and the
    one-sided verdict's false alarms stay within 3 binomial s.e. of its worst nominal
    rate (8.3 % below 2 effective samples). The same replays with a stated variance
    3× too small (an overconfident filter) are flagged whenever their mean NEES is 3 or
    more, and as often as the model says within 3 binomial s.e. (≈ 37 % at ν = 2: with 2
    shared factors, 3× χ²₂/2 exceeds the limit only that often — the most any check on
    one drive can do)."""
    nees, n_eff = _replays(DRAWS, 5)
    se = nees.std(axis=0, ddof=1) / math.sqrt(DRAWS)
    assert np.all(np.abs(nees.mean(axis=0) - 1.0) < 3 * se), (nees.mean(axis=0), se)
    truth = 2.0 / nees.var(axis=0, ddof=1)
    model = np.median(n_eff, axis=0)
    rel_se = np.sqrt((2 + 12 / truth) / DRAWS)
    assert np.all(np.abs(np.log(model / truth)) < 3 * rel_se), (model, truth)
    limit = np.vectorize(nees_limit)(n_eff)
    false_alarm = float(np.mean(nees > limit))
    worst = float(chi2.sf(3.0, 1))
    assert false_alarm < worst + 3 * math.sqrt(worst * (1 - worst) / nees.size), false_alarm
    over = 3.0 * nees
    flagged = over > limit
    assert np.all(flagged[over >= 3.0])
    expected = chi2.sf(model * np.array([nees_limit(v) for v in model]) / 3.0, model)
    got = flagged.mean(axis=0)
    assert np.all(np.abs(got - expected) < 3 * np.sqrt(expected * (1 - expected) / DRAWS)), (
        got,
        expected,
    )


def test_nees_limit_flags_three_and_follows_chi2() -> None:
    """At ≥ 2 effective samples the limit is χ²(ν)'s 95 % point over ν; below, that of 2
    (3.00), so a mean NEES of 3 is always over it."""
    assert nees_limit(2.0) == pytest.approx(chi2.ppf(0.95, 2) / 2, rel=1e-12)
    assert nees_limit(10.0) == pytest.approx(chi2.ppf(0.95, 10) / 10, rel=1e-12)
    assert nees_limit(1.1) == nees_limit(2.0) < 3.0
    assert all(nees_limit(v) < 3.0 for v in (1.0, 2.0, 3.0, 50.0))
