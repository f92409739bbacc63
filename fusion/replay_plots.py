"""Figures of an odometry replay: the estimated path against the reference, and the error."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sensorbench.fusion.odometry_replay import Replay

MIN_SPAN_M = 0.2
"""Smallest side of the path plot (m), as the pose overlay's."""


def replay_plots(plots_dir: Path, rp: Replay) -> list[str]:
    """Path (estimate vs reference, m; degraded samples marked) and error over time
    (cm, °) of one replay.

    Returns the PNG paths written into ``plots_dir``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    xy = xy[np.all(np.isfinite(xy), axis=1)]
    if xy.size:  # square limits at least MIN_SPAN_M wide: a straight drive or a spin in
        lo, hi = xy.min(axis=0), xy.max(axis=0)  # place stays a readable picture
        centre, half = 0.5 * (lo + hi), 0.525 * max(float(np.max(hi - lo)), MIN_SPAN_M)
        ax.set_xlim(centre[0] - half, centre[0] + half)
        ax.set_ylim(centre[1] - half, centre[1] + half)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.set_aspect("equal")
    ax.legend()
    ax.set_title("path")
    fig.tight_layout()
    path = plots_dir / "replay_path.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    out.append(str(path))
    if rp.errors is not None:
        e = rp.errors
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
        a1.plot(e["t_s"], e["pos_err_m"] * 100, "C3-", lw=1)
        a1.set_ylabel("position error (cm)")
        a2.plot(e["t_s"], np.degrees(e["heading_err_rad"]), "C2-", lw=1)
        a2.set_ylabel("heading error (°)")
        a2.set_xlabel("time (s)")
        a1.set_title(f"error against {rp.reference}")
        path = plots_dir / "replay_error.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        out.append(str(path))
    return out
