"""What an axis's own odometry says about its motion, for the split filters' prediction.

A (position, velocity) filter whose velocity takes a random walk of fixed intensity q
follows a ramp or a turn only with a lag that no fixed q states honestly: the velocity
changes by the acceleration, not by noise. So the prediction takes the acceleration the
odometry has just shown as a known input (:func:`observed_accel` over two windows of
:data:`FEEDFORWARD_FRAMES` frames, causal) and what is left to the random walk is how
fast that acceleration changes: the observed jerk. The filters' q of a step is
``q + q_jerk·ĵ²`` with ĵ² the jerk squared minus what the odometry's own noise adds to
it (:func:`jerk_sq`): a drive at constant speed, or a robot standing still, does not
inflate its q with the noise of a third difference.

Rounding and slip enter as the filters state them (the rounding variance of the
odometry position at each frame end, the slip variance of each step), so the noise
term is linear in the filters' r and slip shares (:func:`jerk_noise_gains`), which lets
the noise fit evaluate many parameter sets at once.
"""

from __future__ import annotations

import numpy as np

FEEDFORWARD_FRAMES = 20
"""Frames per half-window of the acceleration fed forward and of the jerk (0.1 s at
200 Hz): the noise of a windowed acceleration falls as the cube of the window, and the
prediction takes it whole."""


def observed_accel(dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES) -> np.ndarray:
    """Acceleration (unit/s²) of one axis seen by the odometry before each step.

    For step k: the mean velocity over the ``frames`` steps before it minus the mean over
    the ``frames`` before those, divided by the time between the two windows' centres.
    Causal (step k's own increment is not used); 0 for the first 2·frames steps; nan
    increments count as no motion.
    """
    d = np.asarray(dt, dtype=float)
    x = np.nan_to_num(np.asarray(z, dtype=float))
    m = int(frames)
    out = np.zeros(d.size)
    if d.size <= 2 * m:
        return out
    cz = np.concatenate([[0.0], np.cumsum(x)])
    ct = np.concatenate([[0.0], np.cumsum(d)])
    k = np.arange(2 * m, d.size)
    t1, t0 = ct[k] - ct[k - m], ct[k - m] - ct[k - 2 * m]
    v1, v0 = (cz[k] - cz[k - m]) / t1, (cz[k - m] - cz[k - 2 * m]) / t0
    out[2 * m :] = (v1 - v0) / (0.5 * (t1 + t0))
    return out


def observed_jerk(dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES) -> np.ndarray:
    """Jerk (unit/s³) before each step: the change of :func:`observed_accel` over the last
    ``frames`` steps divided by their duration; 0 for the first 3·frames steps."""
    d = np.asarray(dt, dtype=float)
    m = int(frames)
    acc = observed_accel(d, z, m)
    out = np.zeros(d.size)
    if d.size <= 3 * m:
        return out
    span = np.concatenate([[0.0], np.cumsum(d)])
    k = np.arange(3 * m, d.size)
    out[3 * m :] = (acc[k] - acc[k - m]) / (span[k] - span[k - m])
    return out


def jerk_noise_gains(
    dt: np.ndarray, rounding: np.ndarray, slip: np.ndarray, frames: int = FEEDFORWARD_FRAMES
) -> np.ndarray:
    """Variance (K,) the odometry's noise adds to :func:`observed_jerk` (unit²/s⁶).

    The jerk is a fixed linear combination of three consecutive windows' sums of
    increments, ``(S₁/(t₁τ₁) − S₀/t₀·(1/τ₁ + 1/τ₀) + S₋₁/(t₋₁τ₀))/T`` (t the windows'
    durations, τ the spans between their centres, T the jerk's span); each sum carries
    the slip of its steps and the rounding of its two end frames, shared with its
    neighbours — so the four end frames enter with the weights' differences (for equal
    steps 1, −3, 3, −1 over (m·h)³). Linear in ``rounding`` and ``slip``.

    Args:
        dt: step durations (K,), s.
        rounding: (K,) the rounding variance of the odometry position at the end of each
            step (unit²).
        slip: (K,) the slip variance of each step (unit²).
        frames: frames per window (as :func:`observed_jerk`).
    """
    d = np.asarray(dt, dtype=float)
    m = int(frames)
    out = np.zeros(d.size)
    if d.size <= 3 * m:
        return out
    e = np.concatenate([[0.0], np.asarray(rounding, dtype=float)])  # e[j]: at frame j
    cs = np.concatenate([[0.0], np.cumsum(np.asarray(slip, dtype=float))])
    ct = np.concatenate([[0.0], np.cumsum(d)])
    k = np.arange(3 * m, d.size)
    t1, t0, tm = (ct[k - i * m] - ct[k - (i + 1) * m] for i in range(3))
    tau1, tau0 = 0.5 * (t1 + t0), 0.5 * (t0 + tm)
    span = ct[k] - ct[k - m]
    a1 = 1.0 / (t1 * tau1 * span)
    a0 = -(1.0 / tau1 + 1.0 / tau0) / (t0 * span)
    am = 1.0 / (tm * tau0 * span)
    ends = (
        a1**2 * e[k]
        + (a0 - a1) ** 2 * e[k - m]
        + (am - a0) ** 2 * e[k - 2 * m]
        + am**2 * e[k - 3 * m]
    )
    steps = (
        a1**2 * (cs[k] - cs[k - m])
        + a0**2 * (cs[k - m] - cs[k - 2 * m])
        + am**2 * (cs[k - 2 * m] - cs[k - 3 * m])
    )
    out[3 * m :] = ends + steps
    return out


def jerk_sq(
    dt: np.ndarray,
    z: np.ndarray,
    rounding: np.ndarray,
    slip: np.ndarray,
    frames: int = FEEDFORWARD_FRAMES,
) -> np.ndarray:
    """Squared jerk (K,) (unit²/s⁶) of the motion: :func:`observed_jerk`² minus its noise
    (:func:`jerk_noise_gains`), not below 0."""
    j = observed_jerk(dt, z, frames)
    return np.maximum(j * j - jerk_noise_gains(dt, rounding, slip, frames), 0.0)
