"""Is the pose error stationary over its segments? The checks a Gauss-Markov fit cannot
pass by absorbing drift (verdict ``DRIFT``): τ against the median segment, per-segment
trends (unit/s) and variance growth. docs/POSE_ERROR.md ("The verdict")."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np
from scipy.stats import t as student_t

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries

TAU_SEGMENT_FRACTION = 1.0
"""τ's estimate above this fraction of the median segment length → DRIFT. A τ whose
interval merely reaches past the segments is not one: a correct model's τ a little
shorter than the segments has an upper bound beyond them in most campaigns."""

TREND_ALPHA = 0.01
"""Family-wise level of the trend test over the six axes."""

_MIN_TREND_SAMPLES = 8


def segment_lengths(series: list[ErrorSeries]) -> np.ndarray:
    """Duration (s) of every relocalization segment: from its first sample to the next start.

    The last segment of a session ends at the session's last sample."""
    return np.concatenate([np.diff(s.t_s[s.reloc], append=s.t_s[-1]) for s in series])


@dataclass
class AxisStationarity:
    """τ of one axis against the segments the data has."""

    axis: str
    tau_s: float
    tau_ci95_s: tuple[float, float]  # nan when τ is not identified
    tau_identified: bool
    median_segment_s: float
    limit_s: float  # TAU_SEGMENT_FRACTION × median segment length

    @property
    def stationary(self) -> bool:
        """False when τ's estimate is longer than the limit."""
        return bool(self.tau_s <= self.limit_s)

    def reason(self) -> str:
        """Why the axis is not stationary (empty when it is)."""
        if self.stationary:
            return ""
        if self.tau_identified:
            what = (
                f"tau {self.tau_s:.3g} s, 95 % interval [{self.tau_ci95_s[0]:.3g}, "
                f"{self.tau_ci95_s[1]:.3g}] s, is longer than"
            )
        else:
            what = f"tau {self.tau_s:.3g} s (not identified) is longer than"
        return (
            f"{what} the median relocalization segment, {self.median_segment_s:.3g} s "
            f"(limit {self.limit_s:.3g} s): within a segment the error drifts rather than "
            "decaying as Gauss-Markov"
        )

    def to_dict(self) -> dict:
        """JSON-ready: the fields but ``axis``, the limit's fraction, the verdict and why."""
        own = {f.name: getattr(self, f.name) for f in fields(self)[1:]}
        return {
            **own, "tau_ci95_s": list(self.tau_ci95_s), "fraction": TAU_SEGMENT_FRACTION,
            "stationary": self.stationary, "reason": self.reason(),
        }


def stationarity(model: PoseErrorModel, series: list[ErrorSeries]) -> dict[str, AxisStationarity]:
    """Per axis: the model's τ and its 95 % interval against the data's median segment length."""
    med = float(np.median(segment_lengths(series)))
    out = {}
    for a in POSE_AXES:
        f = model.axes[a]
        ci = f.ci()[2]
        out[a] = AxisStationarity(
            a, float(f.tau_s), (float(ci[0]), float(ci[1])), bool(f.identified[2]), med,
            TAU_SEGMENT_FRACTION * med,
        )
    return out


@dataclass
class SlopeTest:
    """A slope fitted over segments and its test: what the trend and variance-growth
    checks share. Subclasses set how many segments make it testable and the JSON keys of
    the slope and its standard error."""

    axis: str
    slope: float
    se: float
    dof: float
    p_value: float
    n_segments: int
    level: float

    MIN_SEGMENTS: ClassVar[int] = 3
    KEYS: ClassVar[tuple[str, str]] = ("slope", "se")

    @property
    def testable(self) -> bool:
        """Enough segments and a finite p-value."""
        return self.n_segments >= self.MIN_SEGMENTS and bool(np.isfinite(self.p_value))

    @property
    def failed(self) -> bool:
        """True when the slope is significant at the per-axis level."""
        return self.testable and self.p_value < self.level

    def to_dict(self) -> dict:
        """JSON-ready: slope and se under :attr:`KEYS`, the other fields but ``axis``, the
        verdict."""
        rest = {f.name: getattr(self, f.name) for f in fields(self)[3:]}
        keys = {self.KEYS[0]: self.slope, self.KEYS[1]: self.se}
        return {**keys, **rest, "testable": self.testable, "failed": self.failed}


class AxisTrend(SlopeTest):
    """Weighted mean per-segment slope of one axis (unit/s) and its two-sided test
    against 0 at the per-axis level (TREND_ALPHA / 6); testable from 3 segments."""

    KEYS = ("slope_per_s", "se_per_s")


def _segments(s: ErrorSeries) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per segment of ``s``: its first sample's index, its sample count and the time
    from its first to its last sample (s)."""
    starts = np.flatnonzero(s.reloc)
    n = np.diff(starts, append=s.n).astype(float)
    return starts, n, np.maximum.reduceat(s.t_s, starts) - np.minimum.reduceat(s.t_s, starts)


def trend_test(series: list[ErrorSeries]) -> dict[str, AxisTrend]:
    """Per axis: is the error's slope within relocalization segments consistently non-zero?
    (Each segment's slope (unit/s) when it has ≥ 8 samples, weighted by length³.)"""
    slope_list, length_list = [], []
    for s in series:
        starts, n, span = _segments(s)
        dt = s.t_s - (np.add.reduceat(s.t_s, starts) / n)[s.segment_id]
        sxx = np.add.reduceat(dt * dt, starts)
        sxy = np.add.reduceat(dt[:, None] * s.error, starts, axis=0)
        ok = (n >= _MIN_TREND_SAMPLES) & (sxx > 0)
        slope_list.append(sxy[ok] / sxx[ok, None])
        length_list.append(span[ok])
    slopes, lengths = np.concatenate(slope_list), np.concatenate(length_list)
    k = lengths.size
    level = TREND_ALPHA / len(POSE_AXES)
    w = lengths**3
    out = {}
    for i, a in enumerate(POSE_AXES):
        if k < 3 or w.sum() <= 0:
            out[a] = AxisTrend(a, float("nan"), float("nan"), 0.0, float("nan"), k, level)
            continue
        b = slopes[:, i]
        mean = float(np.sum(w * b) / w.sum())
        k_eff = float(w.sum() ** 2 / np.sum(w * w))
        var = float(np.sum(w * w * (b - mean) ** 2) / w.sum() ** 2 * k / (k - 1))
        dof = max(k_eff - 1.0, 1.0)
        if var > 0:
            se = np.sqrt(var)
            p = float(2.0 * student_t.sf(abs(mean) / se, dof))
        else:
            se, p = 0.0, float("nan")
        out[a] = AxisTrend(a, mean, float(se), dof, p, k, level)
    return out


class AxisVarianceGrowth(SlopeTest):
    """Slope of (observed / model-expected segment variance) against ln(segment length),
    with a one-sided p-value (slope > 0: the variance grows faster than the model allows);
    testable from 5 segments."""

    MIN_SEGMENTS = 5
    KEYS = ("slope_per_ln_s", "se")


def variance_growth(
    series: list[ErrorSeries], model: PoseErrorModel
) -> dict[str, AxisVarianceGrowth]:
    """Per axis: does the segment variance outgrow the model's with segment length?"""
    var, lengths = [], []
    for s in series:
        starts, n, span = _segments(s)
        mean = np.add.reduceat(s.error, starts, axis=0) / n[:, None]
        dev2 = np.add.reduceat((s.error - mean[s.segment_id]) ** 2, starts, axis=0)
        ok = (n >= _MIN_TREND_SAMPLES) & (span > 0)
        var.append(dev2[ok] / (n[ok, None] - 1.0))
        lengths.append(span[ok])
    v, length = np.concatenate(var), np.concatenate(lengths)
    k = length.size
    level = TREND_ALPHA / len(POSE_AXES)
    nan = float("nan")
    if k < 5:
        return {a: AxisVarianceGrowth(a, nan, nan, 0.0, nan, k, level) for a in POSE_AXES}
    params = model.params_array()  # the model's variance about the segment's mean:
    x = np.maximum(length[:, None] / params[None, :, 2], 1e-9)
    avg = 2.0 * (x - 1.0 + np.exp(-x)) / (x * x)
    ratio = v / (params[None, :, 1] ** 2 * (1.0 - avg) + params[None, :, 3] ** 2)
    w = length / length.sum()
    x = np.log(length)
    xc = x - np.sum(w * x)
    sxx = float(np.sum(w * xc * xc))
    k_eff = float(1.0 / np.sum(w * w))
    dof = max(k_eff - 2.0, 1.0)
    out = {}
    for i, a in enumerate(POSE_AXES):
        r = ratio[:, i]
        if sxx <= 0 or not np.all(np.isfinite(r)):
            out[a] = AxisVarianceGrowth(a, nan, nan, 0.0, nan, k, level)
            continue
        b = float(np.sum(w * xc * r) / sxx)
        resid = r - np.sum(w * r) - b * xc
        var_b = float(np.sum((w * xc) ** 2 * resid**2) / sxx**2 * k / max(k - 2, 1))
        se = float(np.sqrt(var_b))
        p = float(student_t.sf(b / se, dof)) if se > 0 else float("nan")
        out[a] = AxisVarianceGrowth(a, b, se, dof, p, k, level)
    return out
