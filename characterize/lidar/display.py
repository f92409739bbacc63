"""How each lidar statistic is shown, once: label, display unit, scale and format
(:class:`Stat`), shared by the datasheet, the report and the figures. Values enter in SI
units (s, Hz, m) or as stored (%, °, counts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    from sensorbench.characterize.lidar.noise import NoiseReport
    from sensorbench.characterize.lidar.stats import LidarCharacterization, SequenceStats
    from sensorbench.characterize.lidar.timing import TimingStats

V = TypeVar("V", float, np.ndarray)


@dataclass(frozen=True)
class Stat:
    """One statistic as shown: display value = stored value × ``scale`` (1e3 for s → ms)."""

    label: str  # its name ("Scan rate")
    unit: str  # the display unit ("" for a count)
    scale: float = 1.0
    fmt: str = "{:.3f}"  # format of the display value

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


def datasheet(ch: LidarCharacterization) -> str:
    """A datasheet-like text table of one lidar stream's characterization."""
    t = ch.timing
    rows = [*_timing_rows(t)]
    if ch.returns is not None:
        top = sorted(ch.returns.intensity_pct.items(), key=lambda kv: -kv[1])[:6]
        levels = ", ".join(f"{key}: {pct:.1f} %" for key, pct in top)  # the 6 most frequent
        rows += [
            ("No returns", f"{ch.returns.no_return_pct:.1f} % of points"),
            ("Intensity levels", f"{levels} (of returns)"),
        ]
    if ch.sequence is not None:
        rows += _sequence_rows(ch.sequence)
    rows += _gap_rows(t)
    if ch.noise is not None:
        rows += _noise_rows(ch.noise)
    nf = ch.near_filter
    if nf is not None:

        def share(key: str, digits: int, what: str) -> str:  # None: no point of that label
            v = nf[key]
            return f"no {what}" if v is None else f"{v:.{digits}f} % of the {what}"

        rows.append((
            "SDK near filter", f"zeroes {share('rejected_pct', 2, 'samples')}: "
            f"{share('edge_outliers_rejected_pct', 0, 'edge outliers')}, "
            f"{share('false_points_rejected_pct', 0, 'false points')}, "
            f"{share('normal_rejected_pct', 2, 'normal returns')}",
        ))
    width = max(len(r[0]) for r in rows)
    head = (
        f"{ch.model or 'lidar'} {ch.device!r} from {ch.source}: {t.n_turns} turns, "
        f"{t.duration_s:.1f} s, {t.clock} clock ({t.clock_source})"
    )
    return "\n".join([head, *(f"{k:<{width}}  {v}" for k, v in rows)])


TAIL_PERIODS = {5: 20, 1: 100}
"""Single-turn periods a percentile pair needs before it is shown (p5–p95: 20, p1–p99:
100): with fewer, the pair is the sample's extremes, not the device's tails."""


def _timing_rows(t: TimingStats) -> list[tuple[str, str]]:
    """Rate, period, jitter (tails only from enough periods: :data:`TAIL_PERIODS`), points
    per turn and angular step."""
    pp = t.period_percentiles_s
    ja = t.jitter_abs_percentiles_s
    ppt = t.points_per_turn
    n = t.n_single_periods
    speed = t.reported_speed_hz
    reported = f" (device reports {speed:.2f} Hz)" if np.isfinite(speed) else ""
    period = [f"p50 {PERIOD.with_unit(pp['p50'])}"]
    jitter = [f"|Δ| p50 {JITTER.text(ja['p50'])}"]
    for lo, need in TAIL_PERIODS.items():
        if n >= need:
            low, high = f"p{lo}", f"p{100 - lo}"
            period.append(f"{low}–{high} {PERIOD.text(pp[low])}–{PERIOD.with_unit(pp[high])}")
            jitter.append(f"{high} {JITTER.text(ja[high])}")
    few = f" ({n} single periods: too few for tails)" if n < TAIL_PERIODS[5] else ""
    return [
        (RATE.label, f"{RATE.with_unit(t.rate_hz)} ({t.clock} clock){reported}"),
        (PERIOD.label, ", ".join(period) + few),
        (JITTER.label, f"σ {JITTER.with_unit(t.jitter_std_s)}; {', '.join(jitter)} {JITTER.unit}"),
        (
            POINTS.label, f"{POINTS.text(ppt['median'])} "
            f"(p5–p95 {POINTS.text(ppt['p5'])}–{POINTS.text(ppt['p95'])}, "
            f"min {POINTS.text(ppt['min'])}, max {POINTS.text(ppt['max'])})",
        ),
        (ANGULAR_STEP.label, ANGULAR_STEP.with_unit(t.angular_step_deg)),
    ]


def _gap_rows(t: TimingStats) -> list[tuple[str, str]]:
    """Host clock, skipped turns, the longest gap and USB drop-offs."""
    if np.isfinite(t.host_rate_hz):
        host = (
            f"{RATE.with_unit(t.host_rate_hz)}; "
            + ("reliable" if t.host_timing_reliable else "UNRELIABLE")
            + f": {t.host_timing_note}"
        )
    else:
        host = f"none ({t.host_timing_note})"
    return [
        ("Host clock", host),
        (SKIPPED.label, f"{t.skipped_turns} ({SKIPPED.with_unit(t.skipped_pct)})"),
        (LONGEST_GAP.label,
         f"{LONGEST_GAP.with_unit(t.longest_gap_s)} at t = {t.longest_gap_at_s:.1f} s"),
        ("USB drop-offs", f"{t.usb_unplugs} unplugs, {t.usb_reconnects} reconnects, "
         f"{t.usb_stale} stale, {t.usb_dropoff_gaps} gaps"),
    ]  # fmt: skip


def _noise_rows(n: NoiseReport) -> list[tuple[str, str]]:
    """Static data, σ per range band, outliers and missing returns."""
    d = n.as_dict()
    rows = [("Static data", f"{n.static_s:.1f} s in {n.n_stretches} stretch(es)")]
    for b in n.bands:
        if b["n_points"] == 0:
            continue
        label = f"  {BAND_SIGMA.label} {band_label(b['lo_m'], b['hi_m'])}"
        if np.isfinite(b["sigma_m"]):
            value = (
                f"{BAND_SIGMA.with_se(b['sigma_m'], b['se_m'])} "
                f"({b['n_points']} pts, {b['n_bins']} bearings)"
            )
        else:
            value = f"too few points ({b['n_points']})"
        rows.append((label, value))
    return [
        *rows,
        (
            EDGE_OUTLIERS.label,
            f"{EDGE_OUTLIERS.with_se(d['edge_outlier_pct'], d['edge_outlier_pct_se'])} "
            f"({n.edge_outliers} seen, {EDGE_OUTLIERS.with_unit(d['edge_outlier_detected_pct'])})",
        ),
        (FALSE_POINTS.label, FALSE_POINTS.with_se(d["false_point_pct"], d["false_point_pct_se"])),
        ("Transient clusters", f"{n.transient_points} points"),
        ("Missing returns", f"{d['missing_return_pct']:.3f} %"),
    ]


def _sequence_rows(q: SequenceStats) -> list[tuple[str, str]]:
    """The point-sequence rows of the table (docs/A1.md compares them with real units)."""
    runs = "none: every point returned"
    if np.isfinite(q.no_return_run_mean):
        runs = (f"mean {q.no_return_run_mean:.1f} points, median {q.no_return_run_median:.0f}; "
                f"{q.no_return_with_quality_pct:.0f} % of no-returns carry an intensity")
    back = ""  # what the backward steps are: nan (nothing to count) when there are none
    if np.isfinite(q.backward_not_at_change_pct):
        back = f" ({q.backward_not_at_change_pct:.0f} % of those not where returns resume"
        if np.isfinite(q.resume_step_back_deg):
            back += f"; there {q.resume_step_back_deg:.1f}° back on average"
        back += ")"
    return [
        ("No-return runs", runs),
        (
            "Return-to-return step",
            f"p1 {q.return_step_p1_deg:.2f}°, p50 {q.return_step_p50_deg:.2f}°, "
            f"p99 {q.return_step_p99_deg:.2f}°; {q.backward_step_pct:.1f} % of steps backward"
            + back,
        ),
        (
            "Turn span",
            f"{q.turn_span_min_deg:.1f}–{q.turn_span_max_deg:.1f}° from the first point to the "
            f"last, {q.turns_under_360_pct:.0f} % of {q.n_turns} turns under 360°",
        ),
    ]
