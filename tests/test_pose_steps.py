"""The step detector: persistent steps only, stable where it matters.

σ_step is the standard deviation of the error's one-sample change without steps (the
scale the detector measures jumps in, per axis). Streams: 30 Hz, jittered, error =
Gauss-Markov (τ = 2 s) + white noise, as the campaigns of the other pose tests.
"""

from __future__ import annotations

import numpy as np
import pose_util
import pytest

from sensorbench.characterize.pose.reloc_segments import detect_jumps

RATE = 30.0
PARAMS = pose_util.TRUTH * [0, 0.1, 1, 1]  # white-dominated: GM wander small over 1.5 s


def _stream(rng: np.random.Generator, duration_s: float) -> tuple[np.ndarray, np.ndarray]:
    n = int(duration_s * RATE)
    t = np.cumsum(rng.uniform(0.8, 1.2, n) / RATE)
    e = pose_util.simulate_errors(PARAMS, t, np.zeros(n, bool), 1, rng)[0]
    return t, e


def test_startup_ramp_and_reverting_excursions_are_not_steps():
    """A VIO-like start: roll −2° → −10° → −3° over 5 s; 2–5-sample excursions of 1°."""
    hits = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        t, e = _stream(rng, 60.0)
        bump = np.interp(t - t[0], [0, 2.5, 5.0], np.radians([-2.0, -10.0, -3.0]))
        e[:, 3] += np.where(t - t[0] < 5.0, bump, np.radians(-3.0))
        for k in rng.choice(np.arange(200, t.size - 20), 12, replace=False):
            width = int(rng.integers(2, 6))
            e[k : k + width, 3:] += np.radians(1.0) * rng.choice([-1, 1], 3)
        hits += int(detect_jumps(t, e).sum())
    assert hits == 0


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_steps_of_three_sigma_step_are_found(seed):
    """Steps every ~8 s of ±3 σ_step on every axis: ≥ 95 % found within one sample."""
    rng = np.random.default_rng(seed)
    t, e = _stream(rng, 200.0)
    sigma_step = np.std(np.diff(e, axis=0), axis=0)
    at = np.arange(120, t.size - 120, 240) + rng.integers(
        -40, 40, size=np.arange(120, t.size - 120, 240).size
    )
    for k in at:
        e[k:] += 3.0 * sigma_step * rng.choice([-1, 1], 6)
    found = np.flatnonzero(detect_jumps(t, e))
    hit = np.array([np.min(np.abs(found - k)) <= 1 if found.size else False for k in at])
    extra = [f for f in found if np.min(np.abs(at - f)) > 1]
    assert hit.mean() >= 0.95, (hit.mean(), at[~hit])
    assert len(extra) <= 1, extra


def test_unstable_detections_are_those_that_move_with_the_offset():
    from sensorbench.characterize.pose.reloc_segments import unstable_detections

    base = np.array([1.0, 5.0, 9.0])
    got = unstable_detections(base, [np.array([1.01, 5.0, 9.0]), np.array([1.0, 9.02, 12.0])], 0.05)
    # 5.0 is missing from the second run, 12.0 appears only there
    assert got.tolist() == [5.0, 12.0]
    assert unstable_detections(base, [base, base], 0.05).size == 0
