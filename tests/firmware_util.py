"""Building the pod firmware for the tests: ``make -C firmware`` once per process.

Each product is needed by some tests; a product that ``make`` skipped (its toolchain
is missing) skips them with make's reason, and fails them under ``CI`` (where
``./dev test`` installed gcc-avr, avr-libc, gcc-arm-none-eabi, simavr and
libsimavr-dev).
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sensorbench.sim.pod_trajectory import PodTrajectory

CYCLES_PER_US = 16  # the 16 MHz ATmega328P
ROOT = Path(__file__).resolve().parents[1]
FIRMWARE = ROOT / "firmware"
BUILD = FIRMWARE / "build"
PRODUCTS = {
    "avr": BUILD / "avr" / "pods-atmega328p.elf",
    "stm32f4": BUILD / "stm32f4" / "pods-stm32f4.elf",
    "host": BUILD / "host" / "libpodscore.so",
    "harness": BUILD / "sim" / "pods_harness",
}
MAKE_TIMEOUT_S = 240.0


@functools.cache
def _make() -> tuple[int, str]:
    """Run ``make -C firmware`` (all targets whose toolchain exists) once.

    xdist workers each call this: a lock on ``build/`` makes them take turns, so one
    builds and the others find everything up to date (never a half-written product).
    """
    BUILD.mkdir(parents=True, exist_ok=True)
    with open(BUILD / ".make.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            done = subprocess.run(
                ["make", "-C", os.fspath(FIRMWARE)],
                capture_output=True,
                text=True,
                timeout=MAKE_TIMEOUT_S,
            )
        except FileNotFoundError:
            return 127, "no make"
    return done.returncode, done.stdout + done.stderr


def product(target: str) -> Path:
    """The built product of ``target``, or skip (fail under CI) saying why it is absent."""
    status, output = _make()
    if status != 0:
        pytest.fail(f"make -C firmware failed:\n{output[-3000:]}")
    path = PRODUCTS[target]
    if path.exists():
        return path
    skipped = re.findall(rf"firmware: skipped ({re.escape(target)} \(.*\))", output)
    reason = f"firmware target {skipped[0] if skipped else target} not built"
    if os.environ.get("CI"):
        pytest.fail(f"CI must build every firmware target: {reason}")
    pytest.skip(reason)


def expected_counts(em: Any, boot: int, t_us: np.ndarray) -> np.ndarray:
    """What a :class:`FirmwarePodEmulator`'s counters show at its frames ``t_us`` (µs since
    boot ``boot`` started, unwrapped): int64[k, N], before their wrap to the counter width
    (the trajectory's counts at the latch minus the boot's base)."""
    b = em.boots[boot]
    traj = b.traj_us + np.asarray(t_us, dtype=np.int64)
    return counts_at(em.trajectory, traj, em.loop) - b.base


def counts_at(path: PodTrajectory, traj_us: np.ndarray, loop: bool = False) -> np.ndarray:
    """The counts the harness's pins show at trajectory times ``traj_us`` (µs, relative to
    the first row; int64[k] -> int64[k, N]) by firmware/README.md's rule ("Trajectory"):
    the edges strictly before that cycle; the first row's counts before it, the last row's
    after it; ``loop``: repetition r adds r × the span to the times and r × the net change
    to the counts."""
    q = np.asarray(traj_us, dtype=np.int64) * CYCLES_PER_US
    times = (path.t_us - path.t_us[0]) * CYCLES_PER_US
    span = int(times[-1])
    rep = np.zeros_like(q)
    if loop:
        rep = np.floor_divide(q, span)
        q = q - rep * span
    q = np.clip(q, 0, span)
    seg = np.clip(np.searchsorted(times, q, side="right") - 1, 0, times.size - 2)
    start, length = times[seg], times[seg + 1] - times[seg]
    c0, c1 = path.counts[seg], path.counts[seg + 1]
    n = np.abs(c1 - c0)
    offset = (q - start)[:, None]
    # edge j is before cycle q  <=>  (2j - 1) * length < 2 n q
    m = np.floor_divide(2 * n * offset - 1, length[:, None])
    done = np.clip(np.floor_divide(m + 1, 2), 0, n)
    net = path.counts[-1] - path.counts[0]
    return c0 + np.sign(c1 - c0) * done + rep[:, None] * net
