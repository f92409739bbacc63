"""Find the stretches of a lidar stream where the scene and the sensor stood still
(method and limits: docs/LIDAR.md, "Static stretches").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.logs import LidarTurns
from sensorbench.logs.scan_bins import angle_bins, grouped_median, turn_index

MIN_COMMON_BINS = 20
QUANTILE = 0.75


@dataclass(frozen=True)
class StaticDetection:
    """Result of :func:`detect_static`.

    Attributes:
        stretch: per turn, the static-stretch number (0, 1, ...) or -1 if not used.
        change_m: per turn, change (m) to the turn ``lag_turns`` before (nan: too few bins).
        floor_m: noise floor of the change metric (m).
        threshold_m: static threshold (m).
        lag_turns: the lag ``L`` in turns.
    """

    stretch: np.ndarray
    change_m: np.ndarray
    floor_m: float
    threshold_m: float
    lag_turns: int

    @property
    def n_stretches(self) -> int:
        """Number of static stretches."""
        return int(self.stretch.max()) + 1 if self.stretch.size else 0


def binned_turns(turns: LidarTurns, n_bins: int) -> np.ndarray:
    """Per-turn median of finite ranges in ``n_bins`` angle bins: (turns, bins), nan if empty."""
    tid = turn_index(turns.count)
    ok = np.isfinite(turns.range)
    keys = tid[ok] * n_bins + angle_bins(turns.angle[ok], n_bins)
    med, _ = grouped_median(keys, turns.range[ok], turns.n_turns * n_bins)
    return med.reshape(turns.n_turns, n_bins)


def _change(grid: np.ndarray, lag: int) -> np.ndarray:
    out = np.full(grid.shape[0], np.nan)
    if lag >= grid.shape[0]:
        return out
    d = np.abs(grid[lag:] - grid[:-lag])
    n = np.sum(np.isfinite(d), axis=1)
    d[~np.isfinite(d)] = np.inf
    d.sort(axis=1)
    rows = np.flatnonzero(n >= MIN_COMMON_BINS)
    out[lag + rows] = d[rows, (QUANTILE * (n[rows] - 1)).astype(np.int64)]
    return out


def detect_static(
    turns: LidarTurns, period_s: float, lag_s: float = 1.0, bin_deg: float = 2.0,
    factor: float = 2.5, min_static_s: float = 3.0,
) -> StaticDetection:
    """Label the static stretches of ``turns``: a turn whose upper-quartile per-bearing
    (``bin_deg`` bins) range change to the turns ``lag_s`` (s) before and after stays under
    ``factor`` × the lag-1 noise floor, in runs of at least ``min_static_s`` (s).
    """
    n_bins = max(8, round(360.0 / bin_deg))
    grid = binned_turns(turns, n_bins)
    lag = max(1, round(lag_s / period_s))
    c1 = _change(grid, 1)
    cl = _change(grid, lag)
    floor = float(np.nanpercentile(c1, 25)) if np.any(np.isfinite(c1)) else float("nan")
    threshold = max(factor * floor, 1e-3) if np.isfinite(floor) else float("nan")
    with np.errstate(invalid="ignore"):
        back_ok = cl <= threshold
        ahead = np.full_like(cl, np.nan)
        ahead[:-lag] = cl[lag:]
        ahead_ok = ahead <= threshold
    has_back = np.isfinite(cl)
    has_ahead = np.isfinite(ahead)
    static = (has_back | has_ahead) & (back_ok | ~has_back) & (ahead_ok | ~has_ahead)
    # turns whose neighbours exist but lacked common bins are not trusted
    n = static.size
    idx = np.arange(n)
    static &= ~((idx >= lag) & ~has_back) & ~((idx < n - lag) & ~has_ahead)

    stretch = np.full(n, -1, dtype=np.int64)
    min_turns = max(2, int(np.ceil(min_static_s / period_s)))
    edges = np.flatnonzero(np.diff(np.concatenate([[0], static.astype(np.int8), [0]])))
    sid = 0
    for start, stop in zip(edges[::2], edges[1::2], strict=False):
        if stop - start >= min_turns:
            stretch[start:stop] = sid
            sid += 1
    return StaticDetection(stretch, cl, floor, threshold, lag)
