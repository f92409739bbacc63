"""What a lidar's points carry: no-return fraction and intensity (A1 quality) levels.

Needs no static scene (what real units send: docs/A1.md, docs/LD19.md). Fractions are of
all points (no returns) or of the points with a return (intensity levels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.logs import LidarTurns

MAX_LEVELS = 64
"""Up to this many distinct intensity values are listed one by one (A1 quality 0..63);
more (LD19 0..255) are grouped in bins of 16."""


@dataclass(frozen=True)
class ReturnStats:
    """No-return fraction and intensity histogram of one stream.

    Attributes:
        n_points: points (no returns included, invalid ``nan`` excluded).
        no_return_pct: points without a return (``inf``), % of points.
        no_return_with_intensity_pct: no-return points whose intensity is not 0, %
            of the no-returns (nan when there are none).
        intensity_pct: % of the points with a return per intensity value (key
            ``"15"``) or, above :data:`MAX_LEVELS` distinct values, per bin of 16
            (key ``"0-15"``).
    """

    n_points: int
    no_return_pct: float
    no_return_with_intensity_pct: float
    intensity_pct: dict[str, float]

    def top_levels(self, k: int = 6) -> str:
        """The ``k`` most frequent intensity levels, e.g. ``"15: 97.0 %, 6: 1.5 %"``."""
        top = sorted(self.intensity_pct.items(), key=lambda kv: -kv[1])[:k]
        return ", ".join(f"{key}: {pct:.1f} %" for key, pct in top)


def return_stats(turns: LidarTurns) -> ReturnStats:
    """:class:`ReturnStats` of every point of ``turns``."""
    rng = turns.range.astype(np.float64)
    valid = ~np.isnan(rng)
    none = valid & np.isinf(rng)
    ret = valid & np.isfinite(rng)
    inten = turns.intensity.astype(np.int64)
    n = int(valid.sum())
    values, counts = np.unique(inten[ret], return_counts=True)
    n_ret = int(ret.sum())
    if values.size <= MAX_LEVELS:
        hist = {str(int(v)): 100.0 * int(c) / n_ret for v, c in zip(values, counts, strict=True)}
    else:
        b = np.bincount(inten[ret] // 16)
        hist = {f"{16 * i}-{16 * i + 15}": 100.0 * int(c) / n_ret for i, c in enumerate(b) if c}
    n_none = int(none.sum())
    return ReturnStats(
        n_points=n,
        no_return_pct=100.0 * n_none / n if n else float("nan"),
        no_return_with_intensity_pct=(
            100.0 * float(np.count_nonzero(inten[none])) / n_none if n_none else float("nan")
        ),
        intensity_pct=hist,
    )
