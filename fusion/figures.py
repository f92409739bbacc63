"""Figure helpers shared by the subjects' plots (matplotlib, Agg backend, PNG files)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

MIN_SPAN_M = 0.2
"""Smallest side of a path plot (m): a straight drive or a spin in place stays readable."""


def save_png(fig: plt.Figure, path: str | Path, dpi: int) -> Path:
    """Lay out, write (PNG, ``dpi`` dots per inch) and close ``fig``; returns the path."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return Path(path)


def square_limits(ax: plt.Axes, xy: np.ndarray) -> None:
    """Equal x and y limits (m) around the finite rows of ``xy`` (N, 2) with a 5 % margin,
    at least :data:`MIN_SPAN_M` wide."""
    xy = xy[np.all(np.isfinite(xy), axis=1)]
    if xy.size:
        lo, hi = xy.min(axis=0), xy.max(axis=0)
        centre, half = 0.5 * (lo + hi), 0.525 * max(float(np.max(hi - lo)), MIN_SPAN_M)
        ax.set_xlim(centre[0] - half, centre[0] + half)
        ax.set_ylim(centre[1] - half, centre[1] + half)
