"""What an axis's own odometry says about its motion, for the split filters' prediction:
the acceleration fed forward (:func:`observed_accel`) and the debiased squared jerk its q
grows with (:func:`jerk_sq`), the noise term linear in the filters' r and slip shares
(:func:`jerk_noise_gains`) so the noise fit evaluates many parameter sets at once. Why:
docs/PODS.md § "Prediction". A step's values depend on the :data:`MOTION_HISTORY` steps
before it and nothing else (:func:`~sensorbench.fusion.chunk_invariant.window_sum`), so
the filters run chunk by chunk on it.
"""

from __future__ import annotations

import numba
import numpy as np

from sensorbench.fusion.chunk_invariant import window_sum

FEEDFORWARD_FRAMES = 20
"""Frames per half-window of the acceleration fed forward and of the jerk (0.1 s at
200 Hz): the noise of a windowed acceleration falls as the cube of the window, and the
prediction takes it whole."""
MOTION_HISTORY = 3 * FEEDFORWARD_FRAMES + 1
"""Steps before a step that its observed acceleration, jerk and jerk noise depend on
(the jerk's three windows and the rounding at the start of the oldest)."""


@numba.njit(cache=True)
def accel_at(d: np.ndarray, x: np.ndarray, k: int, m: int, buf: np.ndarray) -> float:
    """:func:`observed_accel` at step ``k`` (``x`` the increments with nan as 0; ``buf``:
    :func:`~sensorbench.fusion.chunk_invariant.window_sum`'s scratch)."""
    if k < 2 * m:
        return 0.0
    t1, t0 = window_sum(d, k, m, buf), window_sum(d, k - m, m, buf)
    v1, v0 = window_sum(x, k, m, buf) / t1, window_sum(x, k - m, m, buf) / t0
    return (v1 - v0) / (0.5 * (t1 + t0))


@numba.njit(cache=True)
def speed_sq_at(d: np.ndarray, x: np.ndarray, k: int, m: int, buf: np.ndarray) -> float:
    """:func:`observed_speed_sq` at step ``k``."""
    if k + 1 < m:
        return 0.0
    st = window_sum(d, k + 1, m, buf)
    v = window_sum(x, k + 1, m, buf) / st if st > 0 else 0.0
    return v * v


@numba.njit(cache=True)
def jerk_at(d: np.ndarray, x: np.ndarray, k: int, m: int, buf: np.ndarray) -> float:
    """:func:`observed_jerk` at step ``k``."""
    if k < 3 * m:
        return 0.0
    return (accel_at(d, x, k, m, buf) - accel_at(d, x, k - m, m, buf)) / window_sum(d, k, m, buf)


@numba.njit(cache=True)
def jerk_noise_at(
    d: np.ndarray, rounding: np.ndarray, slip: np.ndarray, k: int, m: int, buf: np.ndarray
) -> float:
    """:func:`jerk_noise_gains` at step ``k``."""
    if k < 3 * m:
        return 0.0
    t1, t0, tm = (
        window_sum(d, k, m, buf),
        window_sum(d, k - m, m, buf),
        window_sum(d, k - 2 * m, m, buf),
    )
    tau1, tau0 = 0.5 * (t1 + t0), 0.5 * (t0 + tm)
    span = t1  # the jerk's span is the latest window
    a1 = 1.0 / (t1 * tau1 * span)
    a0 = -(1.0 / tau1 + 1.0 / tau0) / (t0 * span)
    am = 1.0 / (tm * tau0 * span)
    # the rounding at frame j (the end of step j − 1; 0 at frame 0)
    e3 = rounding[k - 3 * m - 1] if k > 3 * m else 0.0
    ends = (
        a1**2 * rounding[k - 1]
        + (a0 - a1) ** 2 * rounding[k - m - 1]
        + (am - a0) ** 2 * rounding[k - 2 * m - 1]
        + am**2 * e3
    )
    steps = (
        a1**2 * window_sum(slip, k, m, buf)
        + a0**2 * window_sum(slip, k - m, m, buf)
        + am**2 * window_sum(slip, k - 2 * m, m, buf)
    )
    return ends + steps


@numba.njit(cache=True)
def _series(
    kind: int, d: np.ndarray, x: np.ndarray, r: np.ndarray, s: np.ndarray, m: int
) -> np.ndarray:
    """One of the motion series at every step: acceleration, speed², jerk, jerk noise."""
    out, buf = np.empty(d.size), np.empty(m)
    for k in range(d.size):
        if kind == 0:
            out[k] = accel_at(d, x, k, m, buf)
        elif kind == 1:
            out[k] = speed_sq_at(d, x, k, m, buf)
        elif kind == 2:
            out[k] = jerk_at(d, x, k, m, buf)
        else:
            out[k] = jerk_noise_at(d, r, s, k, m, buf)
    return out


def _run(
    kind: int, dt: np.ndarray, z: np.ndarray, r: np.ndarray, s: np.ndarray, frames: int
) -> np.ndarray:
    d = np.ascontiguousarray(dt, dtype=float)
    x = np.nan_to_num(np.ascontiguousarray(z, dtype=float))
    as_f = [np.ascontiguousarray(v, dtype=float) for v in (r, s)]
    return _series(kind, d, x, as_f[0], as_f[1], int(frames))


def observed_accel(dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES) -> np.ndarray:
    """Acceleration (unit/s²) of one axis seen by the odometry before each step.

    For step k: the mean velocity over the ``frames`` steps before it minus the mean over
    the ``frames`` before those, divided by the time between the two windows' centres.
    Causal (step k's own increment is not used); 0 for the first 2·frames steps; nan
    increments count as no motion.
    """
    return _run(0, dt, z, dt, dt, frames)


def observed_speed_sq(
    dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES
) -> np.ndarray:
    """Squared velocity (unit²/s²) of one axis at the end of each step: the mean over the
    ``frames`` steps up to and including it; 0 for the first ``frames − 1`` steps. A frame
    stamped ε seconds off the instant its counts were sampled puts ``v·ε`` into the
    odometry position (:attr:`~sensorbench.fusion.filter_noise.AxisNoise.stamp_var`)."""
    return _run(1, dt, z, dt, dt, frames)


def observed_jerk(dt: np.ndarray, z: np.ndarray, frames: int = FEEDFORWARD_FRAMES) -> np.ndarray:
    """Jerk (unit/s³) before each step: the change of :func:`observed_accel` over the last
    ``frames`` steps divided by their duration; 0 for the first 3·frames steps."""
    return _run(2, dt, z, dt, dt, frames)


def jerk_noise_gains(
    dt: np.ndarray, rounding: np.ndarray, slip: np.ndarray, frames: int = FEEDFORWARD_FRAMES
) -> np.ndarray:
    """Variance (K,) the odometry's noise adds to :func:`observed_jerk` (unit²/s⁶): the
    slip of each window's steps and the rounding of the four end frames the jerk's three
    window sums share, weighted by the jerk's linear combination; linear in ``rounding``
    and ``slip``.

    Args:
        dt: step durations (K,), s.
        rounding: (K,) the rounding variance of the odometry position at the end of each
            step (unit²).
        slip: (K,) the slip variance of each step (unit²).
        frames: frames per window (as :func:`observed_jerk`).
    """
    return _run(3, dt, dt, rounding, slip, frames)


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


@numba.njit(cache=True)
def motion_inputs(
    dt: np.ndarray,
    z: np.ndarray,
    rounding: np.ndarray,
    slip: np.ndarray,
    start: int,
    noise: tuple[float, float, float],
) -> tuple[np.ndarray, np.ndarray]:
    """The per-step prediction inputs of steps ``start`` … K−1 of one axis's series
    (arrays (K,): the steps before ``start`` are its history): the acceleration fed forward
    (unit/s²) and q (unit²/s³), with ``noise`` = (q, q_jerk, stamp_var). Adds the stamp
    term ``stamp_var·v̂²`` to ``rounding`` in place first (the jerk's noise takes it)."""
    q, q_jerk, stamp_var = noise
    m = FEEDFORWARD_FRAMES
    x = np.nan_to_num(z)
    n = dt.size - start
    u, qk, buf = np.empty(n), np.empty(n), np.empty(m)
    for k in range(start, dt.size):
        if stamp_var > 0:
            rounding[k] = rounding[k] + stamp_var * speed_sq_at(dt, x, k, m, buf)
        j2 = 0.0
        if q_jerk > 0:
            j = jerk_at(dt, x, k, m, buf)
            j2 = max(j * j - jerk_noise_at(dt, rounding, slip, k, m, buf), 0.0)
        u[k - start] = accel_at(dt, x, k, m, buf)
        qk[k - start] = q + q_jerk * j2
    return u, qk
