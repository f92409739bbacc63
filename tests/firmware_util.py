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

from sensorbench.sim.pod_trajectory import CYCLES_PER_US

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
    return em.trajectory.counts_at(traj, em.loop, CYCLES_PER_US) - b.base
