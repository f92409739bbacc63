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

Every value at step k depends on the :data:`MOTION_HISTORY` steps before it and on
nothing else (each window is summed on its own,
:func:`~sensorbench.fusion.chunk_invariant.trailing_sums`), so a chunk of steps prefixed
by that many steps of history gets exactly the values the whole series gets: the filters
run chunk by chunk on it.
"""

from __future__ import annotations

import numpy as np

from sensorbench.fusion.chunk_invariant import trailing_sums

FEEDFORWARD_FRAMES = 20
"""Frames per half-window of the acceleration fed forward and of the jerk (0.1 s at
200 Hz): the noise of a windowed acceleration falls as the cube of the window, and the
prediction takes it whole."""
MOTION_HISTORY = 3 * FEEDFORWARD_FRAMES + 1
"""Steps before a step that its observed acceleration, jerk and jerk noise depend on
(the jerk's three windows and the rounding at the start of the oldest)."""


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
    sz, st = trailing_sums(x, m), trailing_sums(d, m)
    k = np.arange(2 * m, d.size)
    t1, t0 = st[k], st[k - m]
    v1, v0 = sz[k] / t1, sz[k - m] / t0
    out[2 * m :] = (v1 - v0) / (0.5 * (t1 + t0))
    return out


def observed_speed_sq(
    dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES
) -> np.ndarray:
    """Squared velocity (unit²/s²) of one axis at the end of each step: the mean over the
    ``frames`` steps up to and including it; 0 for the first ``frames − 1`` steps. A frame
    stamped ε seconds off the instant its counts were sampled puts ``v·ε`` into the
    odometry position (:attr:`~sensorbench.fusion.filter_noise.AxisNoise.stamp_var`)."""
    d = np.asarray(dt, dtype=float)
    x = np.nan_to_num(np.asarray(z, dtype=float))
    m = int(frames)
    st = trailing_sums(d, m)[1:]
    v = np.divide(trailing_sums(x, m)[1:], st, out=np.zeros(d.size), where=st > 0)
    return v * v


def observed_jerk(dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES) -> np.ndarray:
    """Jerk (unit/s³) before each step: the change of :func:`observed_accel` over the last
    ``frames`` steps divided by their duration; 0 for the first 3·frames steps."""
    d = np.asarray(dt, dtype=float)
    m = int(frames)
    acc = observed_accel(d, z, m)
    out = np.zeros(d.size)
    if d.size <= 3 * m:
        return out
    k = np.arange(3 * m, d.size)
    out[3 * m :] = (acc[k] - acc[k - m]) / trailing_sums(d, m)[k]
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
    ss, st = trailing_sums(np.asarray(slip, dtype=float), m), trailing_sums(d, m)
    k = np.arange(3 * m, d.size)
    t1, t0, tm = (st[k - i * m] for i in range(3))
    tau1, tau0 = 0.5 * (t1 + t0), 0.5 * (t0 + tm)
    span = t1  # the jerk's span is the latest window
    a1 = 1.0 / (t1 * tau1 * span)
    a0 = -(1.0 / tau1 + 1.0 / tau0) / (t0 * span)
    am = 1.0 / (tm * tau0 * span)
    ends = (
        a1**2 * e[k]
        + (a0 - a1) ** 2 * e[k - m]
        + (am - a0) ** 2 * e[k - 2 * m]
        + am**2 * e[k - 3 * m]
    )
    steps = a1**2 * ss[k] + a0**2 * ss[k - m] + am**2 * ss[k - 2 * m]
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
