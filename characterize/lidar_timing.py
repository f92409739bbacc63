"""Lidar timing figures: turn rate, period jitter, skipped turns, gaps, USB drop-offs.

Turn periods are the differences of consecutive turn start times, on the device
clock when every turn carries one (it does not see USB latency), else on the
host clock. The nominal period is the median of the periods that span one turn;
a period of about ``k`` nominal periods (``k = round(period / nominal)`` ≥ 2)
means ``k − 1`` turns were skipped, unless the later turn is the first after a
reconnect or an unplug, stale or reconnect event of this device falls inside the
gap: then it is a USB drop-off, counted separately. The rate is turns (seen and
skipped) per second over the intervals without a drop-off, which the device
clock's millisecond steps do not bias as they do the median period. Jitter
figures use single-turn periods only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np

from sensorbench.errors import FitError
from sensorbench.fusion.scan_bins import angular_step_rad
from sensorbench.logs import NO_DEVICE_TIME, Event, LidarTurns, TurnFlag

PERCENTILES = (1, 5, 50, 95, 99)
DROP_KINDS = ("unplug", "reconnect", "stale")


@dataclass(frozen=True)
class TimingStats:
    """Timing of one lidar stream. Times in seconds, rates in Hz, angles in degrees."""

    clock: str
    n_turns: int
    duration_s: float
    rate_hz: float
    nominal_period_s: float
    period_percentiles_s: dict[str, float]
    jitter_std_s: float
    jitter_abs_percentiles_s: dict[str, float]
    n_single_periods: int
    skipped_turns: int
    skipped_pct: float
    longest_gap_s: float
    longest_gap_at_s: float
    reported_speed_hz: float
    points_per_turn: dict[str, float]
    angular_step_deg: float
    usb_unplugs: int
    usb_reconnects: int
    usb_stale: int
    usb_dropoff_gaps: int

    def as_dict(self) -> dict:
        """JSON-ready dict."""
        return asdict(self)


def turn_start_s(turns: LidarTurns) -> tuple[np.ndarray, str]:
    """Turn start times (s, from the first turn) and the clock used (``device``/``host``)."""
    dev = turns.device_ns
    if dev.size and np.all(dev != NO_DEVICE_TIME) and np.all(np.diff(dev) > 0):
        return (dev - dev[0]).astype(np.float64) * 1e-9, "device"
    host = turns.t_first_ns
    return (host - host[0]).astype(np.float64) * 1e-9, "host"


def nominal_period(periods_s: np.ndarray) -> float:
    """Median single-turn period (s), found by discarding multi-turn gaps iteratively."""
    nominal = float(np.median(periods_s))
    for _ in range(3):
        single = periods_s[np.rint(periods_s / nominal) == 1]
        if single.size == 0:
            break
        nominal = float(np.median(single))
    return nominal


def timing_stats(
    turns: LidarTurns, events: Iterable[Event] = (), sources: Iterable[str] = ()
) -> TimingStats:
    """Compute :class:`TimingStats` of a stream.

    Args:
        turns: every turn of the stream.
        events: session events; those whose ``source`` is in ``sources`` and whose
            kind is unplug/reconnect/stale count as USB drop-offs of this lidar.
        sources: names this device appears under in the events (stream name, port).
    """
    if turns.n_turns < 3:
        raise FitError(
            f"only {turns.n_turns} lidar turns in the stream; record at least a few seconds"
        )
    t_s, clock = turn_start_s(turns)
    periods = np.diff(t_s)
    nominal = nominal_period(periods)
    k = np.rint(periods / nominal).astype(np.int64)

    wanted = set(sources)
    mine = [e for e in events if e.source in wanted and e.kind in DROP_KINDS]
    drop_ns = np.sort(np.array([e.t_ns for e in mine], dtype=np.int64))
    host = turns.t_first_ns
    dropoff = (turns.flags[1:] & TurnFlag.AFTER_RECONNECT) != 0
    if drop_ns.size:
        # an unplug, stale or reconnect event between two turns makes the gap a drop-off
        dropoff |= np.searchsorted(drop_ns, host[1:], "right") > np.searchsorted(
            drop_ns, host[:-1], "right"
        )
    counted = ~dropoff & (k >= 1)
    skipped = int(np.sum(k[counted & (k >= 2)] - 1))
    expected = int(np.sum(k[counted]))
    single = periods[(k == 1) & ~dropoff]
    if single.size < 2:
        raise FitError("fewer than two single-turn periods; the turn times are too irregular")

    pct = np.percentile(single, PERCENTILES)
    dev = np.abs(single - nominal)
    gap_i = int(np.argmax(periods))
    counts = turns.count.astype(np.float64)
    speed = turns.speed_hz[np.isfinite(turns.speed_hz)]
    return TimingStats(
        clock=clock,
        n_turns=turns.n_turns,
        duration_s=float(t_s[-1]),
        rate_hz=expected / float(np.sum(periods[counted])) if expected else 1.0 / nominal,
        nominal_period_s=nominal,
        period_percentiles_s={f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)},
        jitter_std_s=float(np.std(single, ddof=1)),
        jitter_abs_percentiles_s={
            f"p{p}": float(v)
            for p, v in zip((50, 95, 99), np.percentile(dev, (50, 95, 99)), strict=True)
        },
        n_single_periods=int(single.size),
        skipped_turns=skipped,
        skipped_pct=100.0 * skipped / expected if expected else 0.0,
        longest_gap_s=float(periods[gap_i]),
        longest_gap_at_s=float(t_s[gap_i]),
        reported_speed_hz=float(np.median(speed)) if speed.size else float("nan"),
        points_per_turn={
            "median": float(np.median(counts)),
            "p5": float(np.percentile(counts, 5)),
            "p95": float(np.percentile(counts, 95)),
            "min": float(counts.min()),
            "max": float(counts.max()),
        },
        angular_step_deg=float(np.degrees(angular_step_rad(turns))),
        usb_unplugs=sum(e.kind == "unplug" for e in mine),
        usb_reconnects=sum(e.kind == "reconnect" for e in mine),
        usb_stale=sum(e.kind == "stale" for e in mine),
        usb_dropoff_gaps=int(np.sum(dropoff)),
    )
