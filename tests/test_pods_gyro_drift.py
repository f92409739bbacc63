"""The gyro's wandering bias is taken out of the IMU heading before the pod fit uses it.

A straight line through a whole session leaves a wandering bias in every interval's Δθ
as an error the session shares; :func:`~sensorbench.fusion.pod_drive.gyro_drift` follows
the IMU-minus-reference heading with a local quadratic instead. These tests build the
IMU error as an integrated random walk plus a slow sinusoid (a thermal drift), not as
the quadratic the filter assumes.
"""

from __future__ import annotations

import numpy as np
from scipy.signal import savgol_coeffs

from sensorbench.fusion.pod_drive import GYRO_DRIFT_WINDOW_S, gyro_drift

RATE_HZ = 200.0
SPAN_S = 120.0
STEP = 100  # samples in a 0.5 s interval, the pod fit's default


def _increments(heading_error: np.ndarray) -> np.ndarray:
    """Interior 0.5 s increments (rad), clear of the filter's edge windows."""
    edge = int(GYRO_DRIFT_WINDOW_S * RATE_HZ)
    e = heading_error[edge:-edge]
    return e[STEP::STEP] - e[:-STEP:STEP]


def _imu_error(t: np.ndarray, walk: float, rng: np.random.Generator) -> np.ndarray:
    """Integrated gyro bias (rad): constant + random walk (rad/s/√s) + 50 s sinusoid."""
    bias = 0.002 + np.cumsum(walk * np.sqrt(1 / RATE_HZ) * rng.standard_normal(t.size))
    bias += 3e-4 * np.sin(2 * np.pi * t / 50.0)
    return np.cumsum(bias) / RATE_HZ


def test_a_wandering_bias_leaves_a_tenth_of_what_a_straight_line_leaves() -> None:
    # no reference noise: what is left is the wander the filter did not follow
    rng = np.random.default_rng(11)
    t = np.arange(int(SPAN_S * RATE_HZ)) / RATE_HZ
    ok = np.ones(t.size, dtype=bool)
    ours, line = [], []
    for _ in range(10):
        err = _imu_error(t, 1e-3, rng)
        ours.append(np.sqrt(np.mean(_increments(err - gyro_drift(t, err, ok)) ** 2)))
        straight = np.polyval(np.polyfit(t, err, 1), t)
        line.append(np.sqrt(np.mean(_increments(err - straight) ** 2)))
    assert np.median(ours) < 0.1 * np.median(line), (ours, line)


def test_reference_noise_leaks_exactly_as_the_filter_kernel_says() -> None:
    # white reference heading noise σ per sample: the 0.5 s increments of what leaks
    # through have σ·‖h − h shifted by 0.5 s‖ (h the Savitzky-Golay smoothing kernel);
    # 20 sessions × ~220 increments put the pooled rms within 10 % (≈ 4 standard errors)
    rng = np.random.default_rng(12)
    t = np.arange(int(SPAN_S * RATE_HZ)) / RATE_HZ
    ok = np.ones(t.size, dtype=bool)
    sigma = 2e-3
    half = round(0.5 * GYRO_DRIFT_WINDOW_S * RATE_HZ)
    h = savgol_coeffs(2 * half + 1, 2)
    dh = np.concatenate([h, np.zeros(STEP)]) - np.concatenate([np.zeros(STEP), h])
    expected = sigma * np.sqrt(np.sum(dh**2))
    inc = [_increments(-gyro_drift(t, sigma * rng.standard_normal(t.size), ok)) for _ in range(20)]
    measured = np.sqrt(np.mean(np.concatenate(inc) ** 2))
    assert abs(measured / expected - 1) < 0.10, (measured, expected)


def test_gaps_are_bridged_and_a_short_session_gets_a_constant_bias() -> None:
    rng = np.random.default_rng(13)
    t = np.arange(int(SPAN_S * RATE_HZ)) / RATE_HZ
    err = _imu_error(t, 1e-4, rng)
    ok = np.ones(t.size, dtype=bool)
    ok[4000:4300] = False  # a 1.5 s occlusion of the reference
    rel = np.where(ok, err, 5.0)  # what the reference says there is garbage
    left = err - gyro_drift(t, rel, ok)
    assert np.max(np.abs(np.diff(left[3900:4400]))) < 1e-4  # no step at the gap
    # across the gap the reference came back a turn off (unwrapped over a spin it missed)
    turned = np.where(np.arange(t.size) >= 4300, rel + 2 * np.pi, rel)
    np.testing.assert_allclose(gyro_drift(t, turned, ok), gyro_drift(t, rel, ok), atol=1e-12)
    short = t[: int(1.5 * GYRO_DRIFT_WINDOW_S * RATE_HZ)]
    line = 0.002 * short + 0.3
    np.testing.assert_allclose(gyro_drift(short, line, np.ones(short.size, bool)), line)
    assert not np.any(gyro_drift(t[:8], err[:8], np.ones(8, bool)))  # too few samples
