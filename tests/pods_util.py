"""Helpers for the pod tests: synthetic MCU samples, a pyserial drain, a pod geometry, the
slip models' pose error variance along a path."""

from __future__ import annotations

import math
import time
import types

import numpy as np
import serial
from sink_util import WriterSink

from sensorbench.fusion.odometry_drift import (
    CalibrationError,
    SlipModel,
    _carry_pose_error,
    _carry_sensitivities,
)
from sensorbench.fusion.pod_kinematics import PodGeometry
from sensorbench.logs import EncoderBatch


def make_samples(
    n: int = 2000,
    rate_hz: float = 200.0,
    seed: int = 0,
    counts0: tuple[int, ...] = (32_000, -32_500, 10),
    step: int = 900,
    drift: tuple[int, ...] = (150, -150, 0),
    t0_us: int = 2**32 - 1_500_000,
    imu: bool = True,
) -> types.SimpleNamespace:
    """MCU samples whose counters and clock cross their wraps within the run.

    Counters start within the signed 16-bit range (the host reads the first frame
    as signed) and step by ``drift`` + uniform [-step, step] per frame (< 2**15, so
    unwrappable), crossing the 16-bit wrap many times;
    the MCU clock starts 1.5 s before its 32-bit wrap.
    """
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate_hz
    steps = rng.integers(-step, step + 1, size=(n, len(counts0))) + np.asarray(drift)
    steps[0] = 0
    counts = np.asarray(counts0, np.int64) + np.cumsum(steps, axis=0)
    yaw_rate = rng.normal(0.0, 0.5, n) if imu else np.full(n, np.nan)
    return types.SimpleNamespace(
        t_s=t,
        mcu_time_us=t0_us + np.round(t * 1e6 * (1 + 40e-6)).astype(np.int64),
        counts=counts,
        counter_bits=16,
        yaw_rate_rad_s=yaw_rate,
        yaw_rad=np.cumsum(yaw_rate) / rate_hz,
    )


def drain(ser: serial.Serial, emulator, quiet_s: float = 0.3, deadline_s: float = 20.0) -> bytes:
    """Read everything the emulator sends until it finished and the line is quiet."""
    out = bytearray()
    end = time.monotonic() + deadline_s
    last = time.monotonic()
    while time.monotonic() < end:
        data = ser.read(65536)
        if data:
            out += data
            last = time.monotonic()
        elif emulator.finished.is_set() and time.monotonic() - last > quiet_s:
            return bytes(out)
    raise AssertionError(f"emulator did not finish within {deadline_s} s")


def open_then_start(emulator) -> serial.Serial:
    """Open the emulator's tty first (pyserial flushes input on open), then start it."""
    ser = serial.Serial(emulator.path, 115200, timeout=0.02)
    emulator.start()
    return ser


def slip_geometry() -> PodGeometry:
    """Two parallel pods ±0.18 m left/right and one sideways pod 0.15 m behind (m, rad;
    c = 6e-5 m per tick), as the slip-law tests drive it."""
    return PodGeometry.from_mounts(
        x=[0.02, 0.02, -0.15], y=[0.18, -0.17, 0.01], phi=[0.0, 0.0, math.pi / 2], c=[6e-5] * 3
    )


def propagate_drift(
    body_increments: np.ndarray,
    heading: np.ndarray,
    drift: SlipModel,
    var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> np.ndarray:
    """Variance (K+1, 3) of the odometry pose error in the world (x, y m²; θ rad²) under
    the slip model ``drift``: its step covariances through the dead-reckoning shear
    (the package's kernel from ``var0``).

    Args:
        body_increments: (K, 3) body increments (m, m, rad); nan rows add nothing.
        heading: (K+1,) heading at each frame (rad) that rotates the increments.
        drift: the slip model (its per-step body covariances, cross terms included).
        var0: initial variances (x, y, θ), uncorrelated.
    """
    inc = np.ascontiguousarray(np.nan_to_num(np.asarray(body_increments, dtype=float)))
    q = np.ascontiguousarray(drift.step_covariances(inc), dtype=float)
    carry = np.array([*var0, 0.0, 0.0], dtype=float)  # (xx, yy, θθ, xθ, yθ)
    var = _carry_pose_error(carry, inc, np.ascontiguousarray(heading, dtype=float), q)
    return np.vstack([np.asarray(var0, dtype=float), var])


def calibration_step(
    cal: CalibrationError,
    sensitivities: np.ndarray,
    body_increments: np.ndarray,
    heading: np.ndarray,
    dt: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Carry the sensitivities (3, P) of x, y, θ to ``cal``'s parameters over K steps with
    the package's kernel: those after the last step and the variance (K, 3) of the world
    pose error after each (x, y m²; θ rad²).

    Args:
        body_increments: (K, 3) odometry body increments (m, m, rad); nan rows add nothing.
        heading: (K+1,) heading at each frame (rad), from that frame on.
        dt: (K,) step durations (s) for the creep terms (None: 1 s).
    """
    at = np.array(sensitivities, dtype=float)
    inc = np.ascontiguousarray(body_increments, dtype=float)
    h = np.ones(inc.shape[0]) if dt is None else np.maximum(np.asarray(dt, dtype=float), 1e-9)
    path = (inc, np.ascontiguousarray(heading, dtype=float), h)
    w, w_inv, ref, cov = cal.kernel_arrays
    var = np.empty((inc.shape[0], 3))
    none = np.empty(0, np.int64)
    _carry_sensitivities(at, path, (w, w_inv, ref), cov, none, var, np.empty((0, *at.shape)))
    return at, var


def calibration_variance(
    cal: CalibrationError,
    body_increments: np.ndarray,
    heading: np.ndarray,
    dt: np.ndarray | None = None,
) -> np.ndarray:
    """Variance (K+1, 3) of the world pose error the calibration's uncertainty causes along
    a path, 0 at the start (:func:`calibration_step` from ``cal.start()``)."""
    first = calibration_step(cal, cal.start(), body_increments, heading, dt)[1]
    return np.vstack([np.zeros((1, 3)), first])


def FrameSink(n_pods: int = 3) -> WriterSink[EncoderBatch]:
    """A writer stand-in for a pod reader's link that keeps its frames (``n_pods``
    counters a frame)."""

    def join(parts: list[EncoderBatch]) -> EncoderBatch:
        if not parts:
            empty = np.zeros(0, np.int64)
            return EncoderBatch(empty, empty, empty, np.zeros((0, n_pods)), empty, empty)
        fields = ("host_ns", "device_ns", "seq", "counts", "yaw", "yaw_rate")
        return EncoderBatch(*(np.concatenate([getattr(b, f) for b in parts]) for f in fields))

    return WriterSink(join)
