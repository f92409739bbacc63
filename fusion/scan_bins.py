"""Vectorised helpers for binned lidar scans: grouped medians, angle bins, angular step.

Used by the dual-scan merge and the lidar characterization. Angles are radians
in [0, 2π); ranges are metres with ``inf`` for "no return".
"""

from __future__ import annotations

import numpy as np

from sensorbench.logs import LidarTurns

TWO_PI = 2.0 * np.pi


def angle_bins(angle_rad: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index in ``[0, n_bins)`` of each angle; bin ``b`` is centred on ``b·2π/n_bins``."""
    width = TWO_PI / n_bins
    return (
        np.floor(
            np.mod(np.asarray(angle_rad, dtype=np.float64) + 0.5 * width, TWO_PI) / width
        ).astype(np.int64)
        % n_bins
    )


def grouped_median(
    keys: np.ndarray, values: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Median of ``values`` per integer key in ``[0, n_groups)``.

    ``inf`` values take part (a group of mostly ``inf`` has median ``inf``); drop
    ``nan`` before calling. Returns ``(median, count)``; empty groups give ``nan``.
    """
    keys = np.asarray(keys, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    order = _order_by_key_then_value(keys, values, n_groups)
    v = values[order]
    counts = np.bincount(keys, minlength=n_groups)[:n_groups]
    starts = np.zeros(n_groups, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    med = np.full(n_groups, np.nan)
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    with np.errstate(invalid="ignore"):
        med[has] = np.where(v[lo] == v[hi], v[lo], 0.5 * (v[lo] + v[hi]))
    return med, counts


def _order_by_key_then_value(keys: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Permutation sorting by key, then value: one float64 argsort when the pair fits.

    The combined key is ``key · W + min(value, W′)`` with ``W`` a power of two above
    every finite value (``inf`` sorts last within its group); ties within 2⁻²⁰ m are
    ordered arbitrarily, which cannot change a median by more than that.
    """
    finite = values[np.isfinite(values)]
    if finite.size and (finite.min() < 0 or n_groups == 0):
        return np.lexsort((values, keys))
    top = float(finite.max()) if finite.size else 0.0
    width = 2.0 ** np.ceil(np.log2(top + 2.0))
    if n_groups * width > 2.0**32:
        return np.lexsort((values, keys))
    combined = keys * width + np.minimum(values, width - 1.0)
    return np.argsort(combined)


def turn_index(count: np.ndarray) -> np.ndarray:
    """Turn number of every point of a flat ``LidarTurns`` (from its per-turn counts)."""
    count = np.asarray(count, dtype=np.int64)
    return np.repeat(np.arange(count.size, dtype=np.int64), count)


def angular_step_rad(turns: LidarTurns) -> float:
    """Median angular distance (rad) between consecutive points of the same turn."""
    if turns.n_points < 2:
        return float("nan")
    d = np.abs(np.diff(turns.angle.astype(np.float64)))
    d = np.minimum(d, 2 * np.pi - d)
    same_turn = np.ones(turns.n_points - 1, dtype=bool)
    ends = np.cumsum(turns.count.astype(np.int64))[:-1] - 1
    same_turn[ends[(ends >= 0) & (ends < same_turn.size)]] = False
    d = d[same_turn & (d > 0)]
    return float(np.median(d)) if d.size else float("nan")
