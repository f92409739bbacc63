"""How each lidar statistic is shown: its label, display unit, scale and format, once.

The datasheet (:meth:`~sensorbench.characterize.lidar.stats.LidarCharacterization.table`),
the report's lidar section (:mod:`sensorbench.report.html`) and the figures
(:mod:`~sensorbench.characterize.lidar.plots`) name, scale and format a statistic
through its :class:`Stat` here: a new statistic shown in more than one of them gets
one entry. Values enter in SI units (s, Hz, m) or as stored (%, °, counts); the
report keeps its page-wide number style and takes the label, unit and scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

V = TypeVar("V", float, np.ndarray)


@dataclass(frozen=True)
class Stat:
    """One statistic as shown.

    Attributes:
        label: its name ("Scan rate").
        unit: the display unit ("" for a count).
        scale: display value = stored value × scale (1e3 for s → ms).
        fmt: format of the display value.
    """

    label: str
    unit: str
    scale: float = 1.0
    fmt: str = "{:.3f}"

    def value(self, v: V) -> V:
        """``v`` (stored unit; a number or an array) in the display unit."""
        return v * self.scale

    def text(self, v: float) -> str:
        """``v`` in the display unit, formatted, without the unit."""
        return self.fmt.format(self.value(v))

    def with_unit(self, v: float) -> str:
        """``v`` formatted with its unit ("10.014 Hz", "0.801°")."""
        sep = "" if self.unit == "°" else " "
        return f"{self.text(v)}{sep}{self.unit}" if self.unit else self.text(v)

    def with_se(self, v: float, se: float) -> str:
        """``v ± se`` formatted, the unit once at the end ("1.909 ± 0.033 %")."""
        return f"{self.text(v)} ± {self.with_unit(se)}"

    def heading(self, detail: str = "") -> str:
        """A column or row heading: label, ``detail``, then the unit in parentheses."""
        return f"{self.label}{detail} ({self.unit})" if self.unit else f"{self.label}{detail}"


RATE = Stat("Scan rate", "Hz", 1.0, "{:.3f}")
PERIOD = Stat("Turn period", "ms", 1e3, "{:.1f}")
JITTER = Stat("Period jitter", "ms", 1e3, "{:.2f}")
POINTS = Stat("Points per turn", "", 1.0, "{:.0f}")
ANGULAR_STEP = Stat("Angular step", "°", 1.0, "{:.3f}")
SKIPPED = Stat("Skipped turns", "%", 1.0, "{:.2f}")
LONGEST_GAP = Stat("Longest gap", "ms", 1e3, "{:.1f}")
BAND_SIGMA = Stat("σ", "mm", 1e3, "{:.2f}")
EDGE_OUTLIERS = Stat("Edge outliers", "%", 1.0, "{:.3f}")
FALSE_POINTS = Stat("Isolated false points", "%", 1.0, "{:.3f}")


def band_label(lo_m: float, hi_m: float) -> str:
    """A range band's name ("1–2 m"), edges in m."""
    return f"{lo_m:g}–{hi_m:g} m"
