"""Time offset and frame estimated with the model: on the project's own world (pose_util).

Campaigns of 4 sessions × 120 s at ~5 Hz (tests/pose_util.py ``track_campaign``: the
model's error on a smooth 3-D motion, the sensor in a rotated and shifted map frame,
its stamps ``clock_offset_s`` behind mocap's), aligned with one transform for the
campaign and the offset estimated (``prepare_campaign``). Checked against the truth:
the offset and its stated standard error, and the 95 % intervals and SBC ranks of
the parameters fitted on errors whose offset and frame were estimated. The same
checks on the foreign world: tests/test_pose_foreign.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pose_util
import pytest
from scipy.stats import kstest
from shared_run_util import POOLED_TIMEOUT_S, computed_once, run_dir

from sensorbench.characterize.pose.error_model import PARAMS, fit_pose_error
from sensorbench.characterize.pose.gm_montecarlo import draw_params
from sensorbench.characterize.pose.sessions import prepare_campaign

N_CAMPAIGNS = 200
CHUNK = 20
RANK_DRAWS = 999


def _clock_offset(seed: int) -> float:
    return float(np.random.default_rng([seed, 7]).uniform(-0.25, 0.25))


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Path:
    """Where the campaigns' results are kept for every xdist worker of the run (each is
    computed once, by the first test that asks: tests/shared_run_util.py)."""
    return run_dir(tmp_path_factory, "pose_nuisance")


def _campaign(seed: int, shared: Path) -> dict:
    return computed_once(shared, f"c{seed}", lambda: _compute_campaign(seed))


def _compute_campaign(seed: int) -> dict:
    offset = _clock_offset(seed)
    tracks, names = pose_util.track_campaign(seed, n_sessions=4, clock_offset_s=offset)
    prep = prepare_campaign(tracks, names)
    model = fit_pose_error(prep.series)
    draws = draw_params(
        model.params_array(),
        model.cov_log_array(),
        RANK_DRAWS,
        np.random.default_rng(seed),
        model.sigma_b_quantiles(),
    )
    ci = np.array([model.axes[a].ci() for a in model.axes])
    truth = pose_util.TRUTH
    return {
        "offset_error_s": prep.time_offset.offset_s - offset,
        "offset_se_s": prep.time_offset.se_s,
        "pooled": prep.time_offset.pooled,
        "sigma_b": model.params_array()[:, 0],
        "rank_u": (np.sum(draws < truth[None], axis=0) + 0.5) / (RANK_DRAWS + 1),
        "covered": (truth >= ci[:, :, 0]) & (truth <= ci[:, :, 1]),
    }


def test_offset_at_5_hz_is_found_with_its_standard_error(shared: Path) -> None:
    r = _campaign(0, shared)
    assert r["pooled"]
    assert 0 < r["offset_se_s"] < 0.001
    assert abs(r["offset_error_s"]) < 4 * r["offset_se_s"], r


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(N_CAMPAIGNS // CHUNK))
def test_campaign_chunk(shared: Path, chunk: int) -> None:
    """Fit one chunk of campaigns (the tests below pool them): every pooled offset within 5 se."""
    for seed in range(chunk * CHUNK, (chunk + 1) * CHUNK):
        r = _campaign(seed, shared)
        if r["pooled"]:  # else no campaign offset (nan): the sessions keep their own
            assert abs(r["offset_error_s"]) < 5 * r["offset_se_s"], (seed, r)


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
def test_offset_standard_error_is_right(shared: Path) -> None:
    """200 campaigns: sd of the offset's error ≤ 15 ms; standardized errors (estimate −
    truth)/stated se with sd within 0.1 of 1 (2 standard errors, 1/√(2n)) and mean within
    3/√n of 0. A campaign whose sessions' offsets disagree (χ² p < 0.01, 1 % of right
    ones) keeps no pooled offset and is left out."""
    r = [x for x in (_campaign(s, shared) for s in range(N_CAMPAIGNS)) if x["pooled"]]
    assert len(r) >= 0.97 * N_CAMPAIGNS
    err = np.array([x["offset_error_s"] for x in r])
    z = err / np.array([x["offset_se_s"] for x in r])
    assert err.std() <= 0.015
    assert abs(z.std() - 1.0) < 0.1, z.std()
    assert abs(z.mean()) < 3.0 / math.sqrt(z.size), z.mean()


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
def test_intervals_and_ranks_with_offset_and_frame_estimated(shared: Path) -> None:
    """1200 fits (200 campaigns × 6 axes) per parameter: 95 % intervals cover 90-98 % (-4
    and +2.4 binomial se about 95 %), ranks of the truth uniform (KS p > 0.01)."""
    r = [_campaign(s, shared) for s in range(N_CAMPAIGNS)]
    covered = np.concatenate([x["covered"] for x in r])
    ranks = np.concatenate([x["rank_u"] for x in r])
    for j, p in enumerate(PARAMS):
        assert 0.90 <= covered[:, j].mean() <= 0.98, (p, covered[:, j].mean())
        assert kstest(ranks[:, j], "uniform").pvalue > 0.01, (p, kstest(ranks[:, j], "uniform"))


@pytest.mark.slow
@pytest.mark.timeout(POOLED_TIMEOUT_S)
@pytest.mark.xfail(
    strict=True,
    reason="σ̂_b²/σ_b² averages 0.954 ± 0.014 over 1200 fits (σ̂_b 0.94× the truth on "
    "average, median 0.95×), 3.3 standard errors low; its 95 % intervals cover 95.1 %. The "
    "same error series fitted unaligned give 0.989 ± 0.014: the offset-and-frame fit absorbs "
    "3.5 ± 0.3 % of σ_b² (paired) beyond the one dof per absorbed mean the Q-profile restores",
)
def test_sigma_b_squared_is_unbiased(shared: Path) -> None:
    """1200 σ_b fits: the mean of σ̂_b²/σ_b² within 3 of its standard errors of 1."""
    r = [_campaign(s, shared) for s in range(N_CAMPAIGNS)]
    ratio = (np.array([x["sigma_b"] for x in r]) / pose_util.TRUTH[:, 0]) ** 2
    se = ratio.std() / math.sqrt(ratio.size)
    assert abs(ratio.mean() - 1.0) < 3.0 * se, (ratio.mean(), se)
