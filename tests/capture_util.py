"""Helpers for the capture tests: emulator truth as flat point lists, block matching.

The expected values are built from the protocol tables (docs/LD19.md, docs/A1.md,
docs/PROTOCOLS.md), not from the drivers: LD19 point angles from start/end by the
float step rule, A1 angles from q6 degrees, both converted to counter-clockwise
radians; ranges from mm / q2 mm.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.drivers.capture_display import format_status_parts
from sensorbench.drivers.reader_base import ReaderStatus

REPO = Path(__file__).resolve().parent.parent
EMULATED_CONFIG = REPO / "examples" / "robot-emulated.toml"


def status_line(elapsed_s: float, duration_s: float, statuses: list[ReaderStatus]) -> str:
    """capture's status line (s, s): :func:`format_status_parts` joined as it prints them."""
    return " | ".join(format_status_parts(elapsed_s, duration_s, statuses))


def pods_only_config(tmp: Path, port: str) -> Path:
    """The emulated robot's configuration with only its pod MCU, on ``port``."""
    text = EMULATED_CONFIG.read_text()
    dev = re.search(r"\[\[devices\]\]\nname = \"pods\".*?(?=\n\[)", text, re.S)
    geometry = re.search(r"\n\[pods\].*?(?=\n\[emulation\])", text, re.S)
    assert dev is not None and geometry is not None
    path = tmp / "pods.toml"
    path.write_text(
        '[robot]\nname = "pods-only"\n'
        "footprint_m = [[-0.2, -0.2], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]]\n"
        '[powerup]\norder = ["pods"]\ngap_s = 0.1\ntimeout_s = 5.0\n'
        + dev.group(0).replace('"{run_dir}/pods"', f'"{port}"')
        + geometry.group(0)
        + "\n"
    )
    return path


def unplug_a_while(robot, name: str, before_s: float = 1.0, off_s: float = 3.0) -> tuple[int, int]:
    """After ``before_s`` of running, unplug the emulated device ``name`` of ``robot`` for
    ``off_s``; returns the host times (monotonic ns) just before the unplug and just
    after the replug."""
    time.sleep(before_s)
    t_unplug = time.monotonic_ns()
    robot[name].unplug()
    time.sleep(off_s)
    robot[name].replug()
    return t_unplug, time.monotonic_ns()


@dataclass
class Points:
    """Flat device points in stored conventions, plus where turns start."""

    native: np.ndarray  # int64 range in the device's unit (LD19 mm, A1 q2 mm); 0 = none
    intensity: np.ndarray
    angle_ccw: np.ndarray  # rad in [0, 2π)
    turn_start: np.ndarray  # bool


def damaged(offset: np.ndarray, length, sent: np.ndarray, byte_offsets) -> np.ndarray:
    """Frames ``[offset, offset + length)`` of an emulator's truth that were sent and hold
    any of ``byte_offsets`` (corrupted or dropped bytes, ``PtyPort.stats``)."""
    offs = np.sort(np.asarray(byte_offsets, dtype=np.int64))
    lo, hi = np.searchsorted(offs, offset), np.searchsorted(offs, offset + length)
    return sent & (hi > lo)


def ld19_points(truth) -> Points:
    t = truth.select(truth.offered)
    start = t.start.astype(np.float64)
    step = np.mod(t.end.astype(np.float64) - start, 36000.0) / 11.0
    cdeg = np.mod(start[:, None] + np.arange(12) * step[:, None], 36000.0).ravel()
    ccw = np.mod(-np.deg2rad(cdeg / 100.0), 2 * np.pi)
    cw = cdeg / 100.0
    wrap = np.r_[False, np.diff(cw) < -180.0]
    return Points(t.distance_mm.ravel().astype(np.int64), t.intensity.ravel(), ccw, wrap)


def a1_points(truth) -> Points:
    d = truth.delivered
    deg = truth.angle_q6[d].astype(np.float64) / 64.0
    ccw = np.mod(-np.deg2rad(deg), 2 * np.pi)
    return Points(truth.dist_q2[d].astype(np.int64), truth.quality[d], ccw, truth.start[d])


def find_block(expected: Points, got_native: np.ndarray, got_intensity: np.ndarray) -> int:
    """Offset of the session's points in the truth (first 40 points must match)."""
    k = min(40, got_native.size)
    cand = np.flatnonzero(
        (expected.native == got_native[0]) & (expected.intensity == got_intensity[0])
    )
    for c in cand:
        seg = slice(c, c + k)
        if np.array_equal(expected.native[seg], got_native[:k]) and np.array_equal(
            expected.intensity[seg], got_intensity[:k]
        ):
            return int(c)
    raise AssertionError("the session's first points are not in the emulator's truth")


def angle_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(np.angle(np.exp(1j * (a - b))))


def run_in_thread(fn, *args, **kwargs) -> tuple[threading.Thread, dict]:
    """Run ``fn`` on a thread; the result (or exception) lands in the returned dict."""
    out: dict = {}

    def body() -> None:
        try:
            out["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # surfaced by the test
            out["error"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, out


ROBOT_TOML = """\
[robot]
name = "t"
footprint_m = [[-0.2, -0.2], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]]

[powerup]
gap_s = 1.0

[[devices]]
name = "front"
kind = "a1"
port = "/dev/sensorbench/front"
mount = {x_m = 0.2, y_m = 0.0, yaw_deg = 0}

[[devices]]
name = "top"
kind = "ld19"
port = "/dev/sensorbench/top"
mount = {x_m = 0.1, y_m = 0.0, yaw_rad = 3.14159}
gap_s = 0.5

[[devices]]
name = "pods"
kind = "pods"
port = "/dev/sensorbench/pods"
protocol = "csv"
"""
"""A valid robot configuration every device kind appears in (capture config tests)."""
