"""Figures of the pose-error fit and validation (PNG): error in the model's pointwise
bands, rank histogram, Allan deviation, evo-style trajectory overlay."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy.special import ndtri

from sensorbench.characterize.pose.gm_montecarlo import STAT_NAMES
from sensorbench.characterize.pose.series import AXIS_UNITS, DISPLAY_UNITS, POSE_AXES, ErrorSeries
from sensorbench.characterize.pose.validate import SIDAK_BAND, ValidationReport
from sensorbench.fusion.figures import save_png, square_limits


def _scale(axis: str) -> tuple[float, str]:
    k, unit, _ = DISPLAY_UNITS[AXIS_UNITS[axis]]
    return k, unit


def plot_error_bands(series: ErrorSeries, params: np.ndarray, path: str | Path) -> Path:
    """Error over time with the model's pointwise bands (its stationary normal marginal,
    sd √(σ_b² + σ² + σ_v²) per axis); returns the PNG path."""
    sd = np.sqrt(np.sum(np.asarray(params)[:, [0, 1, 3]] ** 2, axis=1))
    z = ndtri([SIDAK_BAND[0], 0.025, 0.975, SIDAK_BAND[1]])
    t = series.t_s  # s from the session start, as in the JSON and the model file
    fig, axs = plt.subplots(6, 1, figsize=(10, 12), sharex=True)
    for i, (ax, a) in enumerate(zip(axs, POSE_AXES, strict=True)):
        k, unit = _scale(a)
        q = k * sd[i] * z
        ax.fill_between(t, q[0], q[3], color="C0", alpha=0.15, lw=0)
        ax.fill_between(t, q[1], q[2], color="C0", alpha=0.3, lw=0)
        ax.plot(t, k * series.error[:, i], color="k", lw=0.8)
        for tr in series.reloc_times_s():
            ax.axvline(tr, color="C3", lw=0.6, alpha=0.6)
        ax.set_ylabel(f"{a} [{unit}]")
    axs[-1].set_xlabel("time from the session start [s]")
    axs[0].set_title(
        f"{series.name}: error (black) in model bands 95 % / 99.14 % (blue), relocalizations (red)"
    )
    return save_png(fig, path, 90)


def plot_rank_histogram(report: ValidationReport, path: str | Path, bins: int = 10) -> Path:
    """Rank (upper-tail p) histograms per statistic; returns the PNG path."""
    hist = report.rank_histogram(bins)
    fig, axs = plt.subplots(1, len(STAT_NAMES), figsize=(3 * len(STAT_NAMES), 3), sharey=True)
    edges = np.linspace(0, 1, bins + 1)
    for ax, st in zip(axs, STAT_NAMES, strict=True):
        counts = np.array(hist[st])
        ax.bar(edges[:-1], counts, width=1.0 / bins, align="edge", edgecolor="k")
        if counts.sum():
            ax.axhline(counts.sum() / bins, color="C3", lw=1)
        ax.set(title=st, xlabel="upper-tail p")
    axs[0].set_ylabel("sessions × axes")
    fig.suptitle("upper-tail p of the real statistic among the draws (flat = calibrated)")
    return save_png(fig, path, 90)


def plot_allan(check: dict, path: str | Path) -> Path:
    """Empirical vs model Allan deviation per axis (from allan_cross_check)."""
    t = np.array(check["T_s"])
    fig, axs = plt.subplots(2, 3, figsize=(12, 6))
    for ax, a in zip(axs.ravel(), POSE_AXES, strict=True):
        k, unit = _scale(a)
        c = check[a]
        ax.loglog(t, k * np.array(c["adev"]), "o-", ms=3, label="data")
        if "adev_ci95" in c:
            lo, hi = (k * np.array(v, dtype=float) for v in c["adev_ci95"])
            ax.fill_between(t, lo, hi, color="C0", alpha=0.2, lw=0, label="data 95 % (edf)")
        if c.get("peak_found"):
            ax.plot([c["peak_T_s"]], [k * c["peak_adev"]], "v", color="C3", label="interior peak")
        ax.loglog(t, k * np.array(c["model_adev"]), "-", label="fitted model")
        ax.axvline(1.89 * c["tau_fit_s"], color="C3", lw=0.8, ls="--", label="1.89 τ")
        ax.set(title=a, xlabel="averaging time T [s]", ylabel=f"ADEV [{unit}]")
    axs[0, 0].legend(fontsize=8)
    return save_png(fig, path, 90)


def plot_trajectory_overlay(
    name: str, reference_xy: np.ndarray, error_xy: np.ndarray, path: str | Path
) -> Path:
    """evo-style overlay: the reference path (grey) and the aligned estimate coloured by
    its horizontal error |e_xy| (mm), equal axes at least
    :data:`sensorbench.fusion.figures.MIN_SPAN_M` wide.

    ``reference_xy`` and ``error_xy`` are ``(N, 2)`` in the reference frame (m); the
    estimate is their sum. Returns the PNG path."""
    est = reference_xy + error_xy
    err_mm = 1000.0 * np.hypot(error_xy[:, 0], error_xy[:, 1])
    fig, ax = plt.subplots(figsize=(6.5, 5.5))
    ax.plot(reference_xy[:, 0], reference_xy[:, 1], color="0.6", lw=1.2, label="reference")
    pts = ax.scatter(est[:, 0], est[:, 1], c=err_mm, s=4, cmap="viridis", label="aligned estimate")
    fig.colorbar(pts, ax=ax, label="|error| x-y [mm]")
    square_limits(ax, np.concatenate([reference_xy, est]))
    ax.set(aspect="equal", xlabel="x [m]", ylabel="y [m]")
    ax.set_title(f"{name}: reference and aligned estimate")
    ax.legend(loc="upper right", fontsize=8)
    return save_png(fig, path, 90)
