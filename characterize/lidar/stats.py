"""Characterize one lidar stream of a session: timing, returns and point sequence from every
turn, range noise and outliers from the static stretches (``FitError`` without one,
unless timing only). Units: SI (s, Hz, m), fractions in %. docs/LIDAR.md."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from sensorbench.characterize.lidar.noise import (
    DEFAULT_BANDS_M,
    LABEL_EDGE,
    LABEL_FALSE,
    LABEL_NORMAL,
    NoiseReport,
    range_noise,
)
from sensorbench.characterize.lidar.timing import TimingStats, timing_stats, turn_start_s
from sensorbench.drivers.ld19_near_filter import near_filter_turns
from sensorbench.errors import FitError, SessionError
from sensorbench.json_doc import json_ready
from sensorbench.logs import Event, LidarTurns, Session, TurnFlag
from sensorbench.logs.scan_bins import angle_bins, angular_step_rad, grouped_median, turn_index

MAX_LEVELS = 64
"""Up to this many distinct intensity values are listed one by one (A1 quality 0..63);
more (LD19 0..255) are grouped in bins of 16."""


@dataclass(frozen=True)
class ReturnStats:
    """No-return fraction and intensity histogram of one stream; ``intensity_pct``: % of the
    points with a return per intensity value (key ``"15"``) or, above :data:`MAX_LEVELS`
    distinct values, per bin of 16 (key ``"0-15"``). The share of no-returns carrying an
    intensity is :attr:`SequenceStats.no_return_with_quality_pct`."""

    n_points: int  # no returns included, invalid (nan) excluded
    no_return_pct: float  # points without a return (inf), % of points
    intensity_pct: dict[str, float]


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
    return ReturnStats(
        n_points=n,
        no_return_pct=100.0 * int(none.sum()) / n if n else float("nan"),
        intensity_pct=hist,
    )


@dataclass(frozen=True)
class SequenceStats:
    """Node-sequence statistics of one stream (definitions: docs/LIDAR.md, "Point sequence").

    Angles in degrees; ``*_pct`` in % of the points, steps, no-returns or turns they
    name (``backward_not_at_change_pct`` of the backward steps); ``nan`` where there is
    nothing to count. ``n_points`` includes invalid ``nan`` ranges (they have a bearing);
    ``n_turns`` counts complete turns (no ``PACKET_LOSS`` or ``CRC_ERRORS`` flag);
    ``resume_step_back_deg``: mean size (positive) of the backward steps where returns
    resume; ``first_point_deg``: (smallest, largest) clockwise reading of a turn's first
    point."""

    n_points: int
    no_return_run_mean: float
    no_return_run_median: float
    return_step_p1_deg: float
    return_step_p50_deg: float
    return_step_p99_deg: float
    backward_step_pct: float
    backward_not_at_change_pct: float
    resume_step_back_deg: float
    no_return_with_quality_pct: float
    turn_span_min_deg: float
    turn_span_max_deg: float
    turns_under_360_pct: float
    n_turns: int
    first_point_deg: tuple[float, float]


def sequence_stats(turns: LidarTurns) -> SequenceStats:
    """:class:`SequenceStats` of ``turns``."""
    cw = np.mod(360.0 - np.degrees(turns.angle.astype(np.float64)), 360.0)
    none = np.isinf(turns.range)
    edges = np.diff(np.concatenate(([0], none.astype(np.int8), [0])))
    runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
    step = np.mod(np.diff(cw) + 180.0, 360.0) - 180.0
    inside = np.ones(step.size, bool)
    inside[turns.offset[1:] - 1] = False  # the step from one turn's last point to the next
    step, a, b = step[inside], none[:-1][inside], none[1:][inside]
    ret_step = step[~a & ~b]
    back = step < 0
    clean = (turns.flags & (TurnFlag.PACKET_LOSS | TurnFlag.CRC_ERRORS)) == 0
    spans = []
    for i in np.flatnonzero(clean & (turns.count > 1)):
        lo = int(turns.offset[i])
        seg = np.radians(cw[lo : lo + int(turns.count[i])])
        spans.append(float(np.degrees(np.unwrap(seg)[-1] - seg[0])))
    span = np.array(spans)
    first = cw[turns.offset[turns.count > 0]]
    nan = float("nan")

    def pct(x: float) -> float:
        return float(np.percentile(ret_step, x)) if ret_step.size else nan

    return SequenceStats(
        n_points=int(cw.size),
        no_return_run_mean=float(runs.mean()) if runs.size else nan,
        no_return_run_median=float(np.median(runs)) if runs.size else nan,
        return_step_p1_deg=pct(1),
        return_step_p50_deg=pct(50),
        return_step_p99_deg=pct(99),
        backward_step_pct=100.0 * float(back.mean()) if back.size else nan,
        backward_not_at_change_pct=(
            100.0 * float(np.mean(~(a[back] & ~b[back]))) if back.any() else nan
        ),
        resume_step_back_deg=(
            -float(step[resume].mean()) if (resume := back & a & ~b).any() else nan
        ),
        no_return_with_quality_pct=(
            100.0 * float(np.mean(turns.intensity[none] > 0)) if none.any() else nan
        ),
        turn_span_min_deg=float(span.min()) if span.size else nan,
        turn_span_max_deg=float(span.max()) if span.size else nan,
        turns_under_360_pct=100.0 * float(np.mean(span < 360.0)) if span.size else nan,
        n_turns=int(span.size),
        first_point_deg=(float(first.min()), float(first.max())) if first.size else (nan, nan),
    )


MIN_COMMON_BINS = 20
QUANTILE = 0.75
STATIC_BIN_DEG = 2.0
"""Width of the bearing bins whose ranges tell a static turn (°)."""
STATIC_FACTOR = 2.5
"""A turn is static while its range change stays under this multiple of the noise floor."""


@dataclass(frozen=True)
class StaticDetection:
    """Result of :func:`detect_static`."""

    stretch: np.ndarray  # per turn, the static-stretch number (0, 1, ...) or -1 if not used
    change_m: np.ndarray  # per turn, change (m) to the turn lag_turns before (nan: few bins)
    floor_m: float  # noise floor of the change metric (m)
    threshold_m: float  # static threshold (m)
    lag_turns: int

    @property
    def n_stretches(self) -> int:
        """Number of static stretches."""
        return int(self.stretch.max()) + 1 if self.stretch.size else 0


def binned_turns(turns: LidarTurns, n_bins: int) -> np.ndarray:
    """Per-turn median of finite ranges in ``n_bins`` angle bins: (turns, bins), nan if empty."""
    tid = turn_index(turns.count)
    ok = np.isfinite(turns.range)
    keys = tid[ok] * n_bins + angle_bins(turns.angle[ok], n_bins)
    med, _ = grouped_median(keys, turns.range[ok], turns.n_turns * n_bins)
    return med.reshape(turns.n_turns, n_bins)


def _change(grid: np.ndarray, lag: int) -> np.ndarray:
    out = np.full(grid.shape[0], np.nan)
    if lag >= grid.shape[0]:
        return out
    d = np.abs(grid[lag:] - grid[:-lag])
    n = np.sum(np.isfinite(d), axis=1)
    d[~np.isfinite(d)] = np.inf
    d.sort(axis=1)
    rows = np.flatnonzero(n >= MIN_COMMON_BINS)
    out[lag + rows] = d[rows, (QUANTILE * (n[rows] - 1)).astype(np.int64)]
    return out


def detect_static(
    turns: LidarTurns, period_s: float, lag_s: float, min_static_s: float
) -> StaticDetection:
    """Label the static stretches of ``turns``: a turn whose upper-quartile per-bearing
    (:data:`STATIC_BIN_DEG`) range change to the turns ``lag_s`` (s) before and after stays
    under :data:`STATIC_FACTOR` × the lag-1 noise floor, in runs of at least
    ``min_static_s`` (s) (docs/LIDAR.md, "Static stretches")."""
    n_bins = round(360.0 / STATIC_BIN_DEG)
    grid = binned_turns(turns, n_bins)
    lag = max(1, round(lag_s / period_s))
    c1 = _change(grid, 1)
    cl = _change(grid, lag)
    floor = float(np.nanpercentile(c1, 25)) if np.any(np.isfinite(c1)) else float("nan")
    threshold = max(STATIC_FACTOR * floor, 1e-3) if np.isfinite(floor) else float("nan")
    with np.errstate(invalid="ignore"):
        back_ok = cl <= threshold
        ahead = np.full_like(cl, np.nan)
        ahead[:-lag] = cl[lag:]
        ahead_ok = ahead <= threshold
    has_back = np.isfinite(cl)
    has_ahead = np.isfinite(ahead)
    static = (has_back | has_ahead) & (back_ok | ~has_back) & (ahead_ok | ~has_ahead)
    # turns whose neighbours exist but lacked common bins are not trusted
    n = static.size
    idx = np.arange(n)
    static &= ~((idx >= lag) & ~has_back) & ~((idx < n - lag) & ~has_ahead)

    stretch = np.full(n, -1, dtype=np.int64)
    min_turns = max(2, int(np.ceil(min_static_s / period_s)))
    edges = np.flatnonzero(np.diff(np.concatenate([[0], static.astype(np.int8), [0]])))
    sid = 0
    for start, stop in zip(edges[::2], edges[1::2], strict=False):
        if stop - start >= min_turns:
            stretch[start:stop] = sid
            sid += 1
    return StaticDetection(stretch, cl, floor, threshold, lag)


@dataclass(frozen=True)
class StaticOptions:
    """Knobs of the static-stretch detector and the noise/outlier measurement."""

    lag_s: float = 1.0  # lag (s) over which motion must show
    min_static_s: float = 3.0  # shortest static stretch (s)
    bands_m: tuple[float, ...] = DEFAULT_BANDS_M  # range band edges (m)
    outlier_k: float = 5.0  # outlier threshold (σ)


@dataclass
class LidarCharacterization:
    """Everything measured about one lidar stream."""

    device: str
    model: str
    source: str
    timing: TimingStats
    detection: StaticDetection | None
    noise: NoiseReport | None
    periods_s: np.ndarray = field(repr=False)
    turns: LidarTurns = field(repr=False)
    near_filter: dict | None = None
    returns: ReturnStats | None = None
    sequence: SequenceStats | None = None

    def as_dict(self) -> dict:
        """One JSON-ready document (nan becomes None)."""
        static = None
        if self.detection is not None:
            static = {
                "stretches": self.detection.n_stretches,
                "lag_turns": self.detection.lag_turns,
                "change_floor_m": self.detection.floor_m,
                "change_threshold_m": self.detection.threshold_m,
            }
        doc = {
            "device": self.device,
            "model": self.model,
            "source": self.source,
            "timing": asdict(self.timing),
            "returns": None if self.returns is None else asdict(self.returns),
            "sequence": None if self.sequence is None else asdict(self.sequence),
            "static": static,
            "noise": None if self.noise is None else self.noise.as_dict(),
            "sdk_near_filter": self.near_filter,
        }
        return json_ready(doc)


def characterize_turns(
    turns: LidarTurns, events: Iterable[Event] = (), sources: Iterable[str] = (),
    device: str = "lidar", model: str = "", source: str = "", timing_only: bool = False,
    options: StaticOptions | None = None, clock_source: str = "", time_base: str = "",
) -> LidarCharacterization:
    """Characterize a lidar stream held in memory.

    ``clock_source`` says how the stream's device time was made (its ``device_time``
    attribute), for the timing figures' clock; ``time_base`` what its turn times are
    (its ``time_base`` attribute).

    Raises:
        FitError: too few turns, or no static stretch (unless ``timing_only``)."""
    opt = options or StaticOptions()
    timing = timing_stats(turns, events, sources, clock_source, time_base)
    t_s, _ = turn_start_s(turns)
    periods = np.diff(t_s)
    returns = return_stats(turns)
    seq = sequence_stats(turns)
    if timing_only:
        return LidarCharacterization(
            device, model, source, timing, None, None, periods, turns, None, returns, seq
        )
    det = detect_static(turns, timing.nominal_period_s, opt.lag_s, opt.min_static_s)
    if det.n_stretches == 0:
        change = det.change_m[np.isfinite(det.change_m)]
        detail = (
            f"typical per-bearing change {np.median(change) * 1e3:.0f} mm between turns "
            f"{opt.lag_s:g} s apart; a still scene stays under {det.threshold_m * 1e3:.0f} mm"
            if change.size
            else "too few bearings with returns to compare turns"
        )
        raise FitError(
            f"lidar {device!r}: no static stretch of at least {opt.min_static_s:g} s ({detail}). "
            "Range noise and outliers need the lidar and the scene standing still: record a "
            "static stretch, or ask for the timing figures alone (--timing-only)."
        )
    noise = range_noise(
        turns, det.stretch, angular_step_rad(turns), timing.nominal_period_s, bands_m=opt.bands_m,
        outlier_k=opt.outlier_k,
    )
    near = _near_filter_check(turns, noise) if model.upper() == "LD19" else None
    return LidarCharacterization(
        device, model, source, timing, det, noise, periods, turns, near, returns, seq
    )


def _near_filter_check(turns: LidarTurns, noise: NoiseReport) -> dict:
    """What the LD19 SDK's near filter would zero, against this module's labels (%)."""
    dropped = np.isnan(near_filter_turns(turns).range) & ~np.isnan(turns.range)
    lab = noise.labels

    def pct(mask: np.ndarray) -> float | None:
        return 100.0 * float(dropped[mask].mean()) if mask.any() else None

    return {
        "rejected_pct": pct(lab >= 0),
        "edge_outliers_rejected_pct": pct(lab == LABEL_EDGE),
        "false_points_rejected_pct": pct(lab == LABEL_FALSE),
        "normal_rejected_pct": pct(lab == LABEL_NORMAL),
    }


def characterize_session(
    path: str | os.PathLike[str], device: str, timing_only: bool = False,
    options: StaticOptions | None = None, window_ns: tuple[int | None, int | None] = (None, None),
) -> LidarCharacterization:
    """Characterize lidar stream ``device`` of the session file at ``path``.

    Only turns (and events) in ``window_ns`` = ``[t0, t1)`` (ns, None: open) are used.

    Raises:
        SessionError: unreadable file or no such lidar stream (the message lists them).
        FitError: see :func:`characterize_turns`."""
    with Session(path) as s:
        names = s.lidar_names()
        if device not in names:
            raise SessionError(
                f"{path}: no lidar stream {device!r}; streams: {', '.join(names) or 'none'}"
            )
        stream = s.lidar(device)
        attrs = stream.attrs
        turns = stream.read(*window_ns)
        t0, t1 = window_ns
        events = [
            e for e in s.events() if (t0 is None or e.t_ns >= t0) and (t1 is None or e.t_ns < t1)
        ]
    sources = {device, *(str(attrs[k]) for k in ("port_path", "frame") if attrs.get(k))}
    return characterize_turns(
        turns,
        events,
        sources,
        device=device,
        model=str(attrs.get("model", "")),
        source=os.fspath(path),
        timing_only=timing_only,
        options=options,
        time_base=str(attrs.get("time_base", "")),
        clock_source=str(
            attrs.get("device_time")
            or ("unwrapped LD19 millisecond timestamps" if attrs.get("model") == "LD19" else "")
        ),
    )
