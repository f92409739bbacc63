"""Figures of a lidar characterization (PNG): one turn, range noise against distance,
the turn-period histogram and the classified outliers."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from sensorbench.characterize.lidar import display as disp
from sensorbench.characterize.lidar.stats import LidarCharacterization
from sensorbench.fusion.figures import save_png


def write_plots(result: LidarCharacterization, out_dir: str | Path) -> list[Path]:
    """Write the figures of ``result`` as PNG files into ``out_dir``; return their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = result.device
    paths = [
        _polar_turn(result, out / f"{stem}_turn.png"),
        _period_hist(result, out / f"{stem}_periods.png"),
    ]
    if result.noise is not None:
        paths.append(_noise_vs_range(result, out / f"{stem}_noise.png"))
        paths.append(_outliers(result, out / f"{stem}_outliers.png"))
    return paths


def _polar_turn(result: LidarCharacterization, path: Path) -> Path:
    turns = result.turns
    i = turns.n_turns // 2
    if result.detection is not None and result.detection.n_stretches:
        i = int(np.flatnonzero(result.detection.stretch == 0)[0])
    one = turns.turn(i)
    fig = plt.figure(figsize=(6, 6))
    ax = fig.add_subplot(projection="polar")
    ok = np.isfinite(one.range)
    ax.scatter(one.angle[ok], one.range[ok], s=2, c=one.intensity[ok], cmap="viridis")
    ax.set_title(f"{result.device}: turn {i}, {one.n_points} points ({ok.sum()} returns), m")
    return save_png(fig, path, 110)


def _period_hist(result: LidarCharacterization, path: Path) -> Path:
    t = result.timing
    fig, ax = plt.subplots(figsize=(7, 4))
    per = disp.PERIOD
    ax.hist(per.value(result.periods_s), bins=80, color="tab:blue")
    ax.axvline(per.value(t.nominal_period_s), color="k", ls="--", lw=1)
    ax.set(yscale="log", xlabel=per.heading().lower(), ylabel="turns")
    ax.set_title(
        f"{result.device}: {disp.RATE.with_unit(t.rate_hz)}, "
        f"σ {disp.JITTER.with_unit(t.jitter_std_s)}, "
        f"{t.skipped_turns} skipped ({disp.SKIPPED.with_unit(t.skipped_pct)})"
    )
    return save_png(fig, path, 110)


def _noise_vs_range(result: LidarCharacterization, path: Path) -> Path:
    noise = result.noise
    fig, ax = plt.subplots(figsize=(7, 4))
    p = noise.plot
    ok = np.isfinite(p["bin_sigma"]) & np.isfinite(p["bin_range"]) & (p["bin_count"] >= 10)
    sig = disp.BAND_SIGMA
    ax.scatter(
        p["bin_range"][ok], sig.value(p["bin_sigma"][ok]), s=3, alpha=0.4, label="per bearing"
    )
    b = [x for x in noise.bands if x["sigma_m"] == x["sigma_m"]]
    if b:
        mid = [0.5 * (x["lo_m"] + x["hi_m"]) for x in b]
        half = [0.5 * (x["hi_m"] - x["lo_m"]) for x in b]
        ax.errorbar(
            mid, [sig.value(x["sigma_m"]) for x in b], xerr=half,
            yerr=[2 * sig.value(x["se_m"]) for x in b], fmt="o", color="k", label="band (±2 SE)",
        )
    ax.set(xlabel="range (m)", ylabel=f"{sig.label} range ({sig.unit}, 1.4826·MAD)")
    ax.set_title(f"{result.device}: range noise, {noise.static_s:.0f} s static")
    ax.legend()
    return save_png(fig, path, 110)


def _outliers(result: LidarCharacterization, path: Path) -> Path:
    p = result.noise.plot
    fig, ax = plt.subplots(figsize=(6, 6))
    ok = np.isfinite(p["ref_range"])
    ang, rr = p["ref_angle"][ok], p["ref_range"][ok]
    ax.plot(rr * np.cos(ang), rr * np.sin(ang), ".", ms=2, color="0.6", label="reference scan")
    ax.plot(*p["edge_xy"].T, "x", ms=4, color="tab:orange", label="edge outliers")
    ax.plot(*p["false_xy"].T, "+", ms=5, color="tab:red", label="isolated false points")
    ax.plot([0], [0], "k^")
    ax.set(aspect="equal", xlabel="x, sensor frame (m)", ylabel="y, sensor frame (m)")
    ax.set_title(f"{result.device}: outliers of the first static stretch")
    ax.legend(loc="upper right", fontsize=8)
    return save_png(fig, path, 110)
