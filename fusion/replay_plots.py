"""Figures of an odometry replay: the estimated path against the reference, and the error."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sensorbench.fusion.figures import plt, save_png, square_limits
from sensorbench.fusion.odometry_replay import Replay


def replay_plots(plots_dir: Path, rp: Replay) -> list[str]:
    """Path (estimate vs reference, m; degraded samples marked) and error over time
    (cm, °) of one replay.

    Returns the PNG paths written into ``plots_dir``.
    """
    plots_dir.mkdir(parents=True, exist_ok=True)
    r = rp.result
    out = []
    fig, ax = plt.subplots(figsize=(6, 6))
    if rp.ref_pose is not None:
        ax.plot(rp.ref_pose[:, 0], rp.ref_pose[:, 1], "k-", lw=1, label=rp.reference)
    ax.plot(r.pose[:, 0], r.pose[:, 1], "C0-", lw=1, label="estimate (split filters)")
    bad = rp.degraded
    if bad.any():
        ax.plot(r.pose[bad, 0], r.pose[bad, 1], "r.", ms=2, label="degraded (NIS monitor raised)")
    xy = np.concatenate([r.pose[:, :2], *([] if rp.ref_pose is None else [rp.ref_pose[:, :2]])])
    square_limits(ax, xy)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_aspect("equal")
    ax.legend()
    ax.set_title("path")
    out.append(str(save_png(fig, plots_dir / "replay_path.png", 100)))
    if rp.errors is not None:
        e = rp.errors
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
        a1.plot(e["t_s"], e["pos_err_m"] * 100, "C3-", lw=1)
        a1.set_ylabel("position error (cm)")
        a2.plot(e["t_s"], np.degrees(e["heading_err_rad"]), "C2-", lw=1)
        a2.set_ylabel("heading error (°)")
        a2.set_xlabel("time (s)")
        a1.set_title(f"error against {rp.reference}")
        out.append(str(save_png(fig, plots_dir / "replay_error.png", 100)))
    return out
