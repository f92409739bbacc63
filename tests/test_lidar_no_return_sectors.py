"""A scan with sectors of no return (a doorway, an open side: ``inf``) characterizes
without a warning on stderr (numpy's "invalid value encountered in subtract" from
inf − inf between two no-return bins, twice per run of `characterize lidar`), and its
no-return and noise figures hold against the truth."""

from __future__ import annotations

import warnings

import numpy as np

from sensorbench.characterize.lidar.stats import StaticOptions, characterize_turns
from sensorbench.logs import LidarTurns

N_RAYS, N_TURNS, SIGMA_M = 450, 150, 0.01


def _turns(seed: int = 5) -> tuple[LidarTurns, np.ndarray]:
    """A square room (side 6 m) whose +x half (|bearing| < 90°) sees nothing."""
    rng = np.random.default_rng(seed)
    a = np.tile(np.arange(N_RAYS) * (2 * np.pi / N_RAYS), N_TURNS)
    wall = 3.0 / np.maximum(np.abs(np.cos(a)), np.abs(np.sin(a)))
    open_side = np.cos(a) > 1e-9
    r = np.where(open_side, np.inf, wall + rng.normal(0.0, SIGMA_M, a.size))
    start = np.arange(N_TURNS, dtype=np.int64) * 100_000_000
    t = np.repeat(start, N_RAYS) + np.tile(np.arange(N_RAYS, dtype=np.int64) * 222_222, N_TURNS)
    turns = LidarTurns(start, start.copy(), np.full(N_TURNS, 10, np.float32),
                       np.full(N_TURNS, N_RAYS, np.int32), np.zeros(N_TURNS, np.uint16),
                       a.astype(np.float32), r.astype(np.float32),
                       np.full(a.size, 100, np.uint16), t)  # fmt: skip
    return turns, open_side


def test_no_return_sectors_characterize_quietly_and_right() -> None:
    turns, open_side = _turns()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any RuntimeWarning fails the test
        res = characterize_turns(turns, options=StaticOptions(bands_m=(2.0, 5.0)))
    # exact: every point of the open side, none elsewhere
    assert res.returns is not None
    assert res.returns.no_return_pct == 100.0 * open_side.mean()
    band = res.noise.bands[0]
    # the walls' σ within 3 SE (an SD's, σ/√(2N)) of the injected 10 mm
    assert abs(band["sigma_m"] - SIGMA_M) <= 3 * band["se_m"], band
    # a no return where the reference has none is not missing
    assert res.noise.missing_returns == 0
