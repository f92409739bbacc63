"""Two-pod sessions for the two pods + IMU heading layout: a simulated session (three
pods) with one pod's counter left out of its encoder stream, everything else as simulated
(mocap, IMU yaw, truth)."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
from pods_sim_util import simulate

KEEP = (0, 2)
"""A parallel pod and the perpendicular one: their rolling directions 90° apart."""


def drop_pod(src: Path, dst: Path, keep: tuple[int, int] = KEEP) -> Path:
    """Copy of session ``src`` at ``dst`` whose encoder stream holds only the counters
    ``keep``."""
    shutil.copyfile(src, dst)
    with h5py.File(dst, "r+") as f:
        group = f["encoders/pods"]
        counts = group["counts"][:, list(keep)]
        del group["counts"]
        group.create_dataset("counts", data=counts, chunks=(4096, len(keep)),
                             maxshape=(None, len(keep)))  # fmt: skip
        group.attrs["n_counts"] = len(keep)
    return dst


def simulate_two(tmp: Path, name: str, seed: int, imu: bool = True) -> Path:
    """Scenario ``name`` simulated at ``seed`` with the pods :data:`KEEP` only (and the IMU
    switched off when not ``imu``)."""
    src = simulate(tmp, name, seed, imu=imu)
    return drop_pod(src, tmp / f"{name}_{seed}_two{'' if imu else '_noimu'}.h5")
