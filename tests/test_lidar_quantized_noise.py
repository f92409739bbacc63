"""Range noise of ranges that come in steps (a sensor's resolution), against exact truth.

A LaserScan import puts every turn's rays on the same bearings, and real lidars report
ranges in steps (1 mm in the LD19's protocol; the LD06 capture in the shared data moves
in ~15 mm steps at 4 m): the residuals then sit on a lattice, where 1.4826·MAD read a
lattice step or 0 (the LD06 capture exported to MCAP and imported back read
σ 0.00 mm at 1–3 m) and every return one step off counted as a false point.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from sensorbench.characterize.lidar.noise import CLIP_K, CLIP_SD_FACTOR
from sensorbench.characterize.lidar.stats import StaticOptions, characterize_turns
from sensorbench.logs import LidarTurns

N_RAYS = 450
N_TURNS = 200
PERIOD_S = 0.1
HALF_SIDE_M = 3.0


def _true_range(angle: np.ndarray) -> np.ndarray:
    """Range (m) to the walls of a square room (side 6 m) from its centre."""
    return HALF_SIDE_M / np.maximum(np.abs(np.cos(angle)), np.abs(np.sin(angle)))


def _scans(sigma_m: float, step_m: float, seed: int) -> LidarTurns:
    """Turns on fixed bearings (as a LaserScan), normal noise ``sigma_m``, ranges
    rounded to multiples of ``step_m``."""
    rng = np.random.default_rng(seed)
    angle = np.tile(np.arange(N_RAYS) * (2 * np.pi / N_RAYS), N_TURNS)
    measured = _true_range(angle) + rng.normal(0.0, sigma_m, angle.size)
    ranges = np.round(measured / step_m) * step_m
    start_ns = np.arange(N_TURNS, dtype=np.int64) * int(PERIOD_S * 1e9)
    t_ns = np.repeat(start_ns, N_RAYS) + np.tile(
        (np.arange(N_RAYS) * PERIOD_S / N_RAYS * 1e9).astype(np.int64), N_TURNS
    )
    return LidarTurns(
        start_ns, start_ns.copy(), np.full(N_TURNS, 1 / PERIOD_S, np.float32),
        np.full(N_TURNS, N_RAYS, np.int32), np.zeros(N_TURNS, np.uint16),
        angle.astype(np.float32), ranges.astype(np.float32),
        np.full(angle.size, 200, np.uint16), t_ns,
    )  # fmt: skip


def _lattice(sigma_m: float, step_m: float) -> tuple[np.ndarray, np.ndarray]:
    """Every bearing's reported ranges about their mean (m) and their probabilities:
    round((r + e) / step)·step, e ~ N(0, σ²), over ±60 steps; (bearings, 121) each."""
    r = _true_range(np.arange(N_RAYS) * (2 * np.pi / N_RAYS))
    k = np.arange(-60, 61)
    base = np.round(r / step_m)[:, None] + k[None, :]
    lo = ((base - 0.5) * step_m - r[:, None]) / sigma_m
    p = norm.cdf(lo + step_m / sigma_m) - norm.cdf(lo)
    v = base * step_m
    return v - np.sum(p * v, axis=1, keepdims=True), p / N_RAYS


def _true_sigma(sigma_m: float, step_m: float) -> float:
    """The exact σ of the reported ranges about each bearing's mean, pooled over the
    bearings (m)."""
    d, p = _lattice(sigma_m, step_m)
    return float(np.sqrt(np.sum(p * d**2)))


def _clipped_population(sigma_m: float, step_m: float) -> float:
    """What :func:`clipped_sigma` converges to on that exact distribution (m): the fixed
    point s = sqrt(E[d²; |d| ≤ k s] / P(|d| ≤ k s)) / CLIP_SD_FACTOR."""
    d, p = _lattice(sigma_m, step_m)
    s = _true_sigma(sigma_m, step_m)
    for _ in range(100):
        inside = np.abs(d) <= CLIP_K * s
        s = float(np.sqrt(np.sum(p * d**2 * inside) / np.sum(p * inside))) / CLIP_SD_FACTOR
    return s


@pytest.mark.parametrize(
    ("sigma_m", "step_m"),
    [(0.005, 0.015), (0.002, 0.001), (0.010, 0.010)],
    ids=["coarse-steps", "mm-steps", "step-as-sigma"],
)
def test_noise_of_ranges_in_steps_matches_truth(sigma_m: float, step_m: float) -> None:
    res = characterize_turns(
        _scans(sigma_m, step_m, seed=11), options=StaticOptions(bands_m=(2.0, 5.0))
    )
    band = res.noise.bands[0]
    truth = _true_sigma(sigma_m, step_m)
    expected = _clipped_population(sigma_m, step_m)
    # all 90 000 returns in one band; 3 SE of the estimate (an SD's, σ/√(2N) ≈ 0.24 %)
    # plus the sample's own draw of the per-bearing means (same order): 3·√2 SE.
    # Before: 1.4826·MAD read 0.0 mm (coarse: truth 6.5), 1.48 mm (truth 2.02) and
    # 14.8 mm (truth 10.4)
    assert abs(band["sigma_m"] - expected) <= 3 * np.sqrt(2) * band["se_m"], (band, expected)
    # the estimator's own bias on steps: a normal's truncation factor where a lattice
    # loses nothing between its steps, within 1 / 0.98658 (1.4 %) of the truth
    assert abs(expected / truth - 1) <= 1 / CLIP_SD_FACTOR - 1
    # no return lies off the wall beyond normal noise: 5 σ is 6e-7 of a normal's
    # returns (0.05 expected); the lattice-collapsed σ counted ~3 % as false points
    assert res.noise.false_points <= 2
    assert res.noise.edge_outliers == 0
