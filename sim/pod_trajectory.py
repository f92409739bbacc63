"""Encoder counts vs time that the simavr harness drives onto the firmware's pins: rows
``t_us c0 [c1 [c2]]``, turned into quadrature edges by the rule firmware/README.md
("Trajectory") states."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from sensorbench.errors import SimError
from sensorbench.logs.toml_schema import read_text

MAX_PODS = 3  # encoder pairs on the ATmega328P's port C (A0..A5)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1  # what a row's value may be


@dataclass(frozen=True)
class PodTrajectory:
    """Rows of trajectory time ``t_us`` (int64[n], strictly increasing, µs) and the
    cumulative ``counts`` (int64[n, N], 1 ≤ N ≤ 3; ticks) at those times."""

    t_us: np.ndarray
    counts: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.t_us, dtype=np.int64)
        c = np.asarray(self.counts, dtype=np.int64)
        if c.ndim != 2 or c.shape[0] != t.size or not 1 <= c.shape[1] <= MAX_PODS:
            raise SimError(f"trajectory counts must be (n, 1..{MAX_PODS}) with n = {t.size}")
        if t.size < 2 or np.any(np.diff(t) <= 0):
            raise SimError("a trajectory needs at least two rows with increasing t_us")
        object.__setattr__(self, "t_us", t)
        object.__setattr__(self, "counts", c)

    @property
    def n_pods(self) -> int:
        """Pods (columns of counts)."""
        return int(self.counts.shape[1])

    @classmethod
    def from_samples(cls, samples: Any) -> PodTrajectory:
        """The counts of MCU samples (``Simulation.pods()``) against their MCU time
        (``mcu_time_us``, µs, made relative to the first sample)."""
        mcu = np.asarray(samples.mcu_time_us, dtype=np.int64)
        return cls(mcu - mcu[0], np.asarray(samples.counts, dtype=np.int64))

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> PodTrajectory:
        """Read the harness's text format (a regular file of at most
        :data:`~sensorbench.logs.toml_schema.MAX_TEXT_BYTES` bytes, refused before it is
        read); errors name the file and line."""
        lines = read_text(path, SimError, "trajectory").splitlines()
        rows: list[list[int]] = []
        for number, line in enumerate(lines, start=1):
            text = line.split("#", 1)[0].replace(",", " ").split()
            if not text:
                continue
            try:
                values = [int(v) for v in text]
            except ValueError:
                raise SimError(f"{path}:{number}: expected integers 't_us c0 [c1 [c2]]'") from None
            if not 2 <= len(values) <= 1 + MAX_PODS or (rows and len(values) != len(rows[0])):
                raise SimError(f"{path}:{number}: {len(values) - 1} counts; every row needs "
                    f"the same 1 to {MAX_PODS}")
            if any(not INT64_MIN <= v <= INT64_MAX for v in values):
                raise SimError(f"{path}:{number}: a value beyond 64-bit integers")
            if rows and values[0] <= rows[-1][0]:
                raise SimError(f"{path}:{number}: t_us {values[0]} does not increase")
            rows.append(values)
        if len(rows) < 2:
            raise SimError(f"{path}: a trajectory needs at least two rows")
        data = np.asarray(rows, dtype=np.int64)
        return cls(data[:, 0], data[:, 1:])

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write the harness's text format."""
        header = "t_us " + " ".join(f"c{k}" for k in range(self.n_pods))
        np.savetxt(path, np.column_stack([self.t_us, self.counts]), fmt="%d", header=header)
