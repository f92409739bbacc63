"""The split filters' estimate as a pose stream: one writer for ``replay -o`` and ``live``.

Each filtered frame becomes one pose sample (kind ``estimate``): time
``t0_ns + round(t_s · 1e9)`` (the frame's time on the frame clock), position x, y
(z = 0), the heading as a quaternion about z, the filters' variances of x, y and yaw
on the diagonal of the 6×6 ROS-ordered covariance (the three filters are independent;
z, roll and pitch are zero for a planar robot), and the flags: ``DEGRADED`` where a
consistency monitor is raised, ``COASTING`` on a frame that ends a gap of the pod
stream longer than the filters' ``stale_s``. A monitor's onsets and clears are events
of source ``estimate`` (kinds ``degraded`` / ``consistent``) at their frames' times.
``replay -o`` writes a whole replay with :func:`write_estimate_session`; ``live``
declares the stream in its session (:func:`declare_estimate`) and appends each step's
frames (:func:`estimate_batch`), so both files hold the same samples for the same
frames (docs/FORMAT.md, "Pose stream").
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from sensorbench.logs import PoseBatch, PoseFlag, SessionWriter

ESTIMATE_STREAM = "estimate"
"""The stream name of the split filters' estimate."""
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


def monitor_message(channel: str, kind: str) -> str:
    """The text of a monitor event (``kind`` ``degraded`` or ``consistent``)."""
    what = (
        "pods against IMU yaw: sliding-window disagreement "
        if channel == CROSS_CHECK
        else f"{channel} filter: sliding-window NIS "
    )
    return what + ("above" if kind == "degraded" else "back under") + " its threshold"


def declare_estimate(
    writer: SessionWriter, attrs: Mapping[str, Any], name: str = ESTIMATE_STREAM
) -> None:
    """Add the estimate stream (with its covariance) to ``writer`` before it starts."""
    writer.add_pose(
        name, kind="estimate", attrs={"units": ESTIMATE_UNITS, **attrs}, covariance=True
    )


def write_monitor_events(
    writer: SessionWriter, events: Iterable[tuple[int, str, str]], source: str = ESTIMATE_STREAM
) -> None:
    """Write monitor events ``(t_ns, channel, kind)``."""
    for t_ns, channel, kind in events:
        writer.event(int(t_ns), source, kind, monitor_message(channel, kind))


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
