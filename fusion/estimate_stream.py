"""The split filters' estimate as a pose stream (kind ``estimate``): one writer for
``replay -o`` (:func:`write_estimate_session`) and ``live`` (:func:`declare_estimate`,
then :func:`estimate_batch` per step), so both files hold the same samples for the same
frames. One sample per filtered frame at ``t0_ns + round(t_s · 1e9)``; its layout,
covariance and flags are docs/FORMAT.md's "Pose stream"; a monitor's onsets and clears
are events of source ``estimate`` (kinds ``degraded`` / ``consistent``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from sensorbench.logs import PoseBatch, PoseFlag, SessionWriter
from sensorbench.logs.schema import ESTIMATE_STREAM

CROSS_CHECK = "pods_vs_imu"
"""Monitor key of the pods-against-IMU heading check (beside the axes x, y, theta)."""
ESTIMATE_UNITS = "position m, quaternion xyzw, covariance m² / m·rad / rad² (ROS order), time ns"


def estimate_times_ns(t0_ns: int, t_s: np.ndarray) -> np.ndarray:
    """Sample times (int64 ns) of frames at ``t_s`` (s) after ``t0_ns``."""
    return int(t0_ns) + np.round(np.asarray(t_s, dtype=float) * 1e9).astype(np.int64)


def estimate_flags(degraded: np.ndarray, coasting: np.ndarray) -> np.ndarray:
    """Per-sample :class:`~sensorbench.logs.PoseFlag` bits (uint8)."""
    flags = np.where(np.asarray(degraded, bool), int(PoseFlag.DEGRADED), 0)
    flags |= np.where(np.asarray(coasting, bool), int(PoseFlag.COASTING), 0)
    return flags.astype(np.uint8)


def estimate_batch(
    t_ns: np.ndarray, pose: np.ndarray, var: np.ndarray, flags: np.ndarray
) -> PoseBatch:
    """Pose samples of filtered frames.

    Args:
        t_ns: (n,) sample times (ns), e.g. :func:`estimate_times_ns`.
        pose: (n, 3) x, y (m), heading (rad).
        var: (n, 3) their variances (m², m², rad²).
        flags: (n,) :func:`estimate_flags`.
    """
    pose = np.asarray(pose, dtype=float)
    var = np.asarray(var, dtype=float)
    n = pose.shape[0]
    yaw = pose[:, 2]
    quat = np.column_stack([np.zeros(n), np.zeros(n), np.sin(yaw / 2), np.cos(yaw / 2)])
    cov = np.zeros((n, 6, 6))
    cov[:, 0, 0], cov[:, 1, 1], cov[:, 5, 5] = var[:, 0], var[:, 1], var[:, 2]
    position = np.column_stack([pose[:, :2], np.zeros(n)])
    return PoseBatch(t_ns, position, quat, np.ones(n, bool), flags, cov)


def declare_estimate(writer: SessionWriter, attrs: Mapping[str, Any]) -> None:
    """Add the estimate stream (with its covariance) to ``writer`` before it starts."""
    units = {"units": ESTIMATE_UNITS, **attrs}
    writer.add_pose(ESTIMATE_STREAM, kind="estimate", attrs=units, covariance=True)


def write_monitor_events(writer: SessionWriter, events: Iterable[tuple[int, str, str]]) -> None:
    """Write monitor events ``(t_ns, channel, kind)`` (``kind`` ``degraded`` or ``consistent``)."""
    for t_ns, channel, kind in events:
        what = (
            "pods against IMU yaw: sliding-window disagreement"
            if channel == CROSS_CHECK
            else f"{channel} filter: sliding-window NIS"
        )
        side = "above" if kind == "degraded" else "back under"
        writer.event(int(t_ns), ESTIMATE_STREAM, kind, f"{what} {side} its threshold")


def write_estimate_session(
    output: str | os.PathLike[str],
    batch: PoseBatch,
    events: Iterable[tuple[int, str, str]],
    attrs: Mapping[str, Any],
    overwrite: bool = False,
) -> None:
    """A new session holding only an estimate (``replay -o``), written atomically."""
    with SessionWriter(
        output, label="estimate", swmr=False, attrs=dict(attrs), overwrite=overwrite
    ) as w:
        declare_estimate(w, attrs)
        w.append_pose(ESTIMATE_STREAM, batch)
        write_monitor_events(w, events)
