"""Lidar timing figures: turn rate, period jitter, skipped turns, gaps, USB drop-offs
(periods in s, on the device clock when every turn has one). docs/LIDAR.md."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from sensorbench.errors import FitError
from sensorbench.logs import NO_DEVICE_TIME, Event, LidarTurns, TurnFlag
from sensorbench.logs.scan_bins import angular_step_rad

PERCENTILES = (1, 5, 50, 95, 99)
_SOURCES = {
    "host": "host receive time",
    "nominal": "nominal sample rate (invented times)",
    "stamps": "header stamps",
}
DROP_KINDS = ("unplug", "reconnect", "stale")


@dataclass(frozen=True)
class TimingStats:
    """Timing of one lidar stream. Times in seconds, rates in Hz, angles in degrees."""

    clock: str
    clock_source: str
    host_rate_hz: float
    host_timing_reliable: bool
    host_timing_note: str
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


def turn_start_s(turns: LidarTurns) -> tuple[np.ndarray, str]:
    """Turn start times (s, from the first turn) and the clock used (``device``/``host``)."""
    dev = turns.device_ns
    if dev.size and np.all(dev != NO_DEVICE_TIME) and np.all(np.diff(dev) > 0):
        return (dev - dev[0]).astype(np.float64) * 1e-9, "device"
    host = turns.t_first_ns
    return (host - host[0]).astype(np.float64) * 1e-9, "host"


def _rate(periods: np.ndarray, nominal: float, counted: np.ndarray) -> float:
    """Turns (seen and skipped) per second over the ``counted`` periods (Hz)."""
    k = np.rint(periods / nominal).astype(np.int64)
    expected = int(np.sum(k[counted & (k >= 1)]))
    span = float(np.sum(periods[counted & (k >= 1)]))
    return expected / span if expected and span > 0 else 1.0 / nominal


def host_reliability(
    turns: LidarTurns, t_s: np.ndarray, clock: str, nominal_s: float, dropoff: np.ndarray,
    overruns: int,
) -> tuple[float, bool, str]:
    """``(host_rate_hz, reliable, note)`` of the host receive times against the turn times
    ``t_s`` (s) that :func:`turn_start_s` gave on ``clock`` (docs/LIDAR.md)."""
    host_s = (turns.t_first_ns - turns.t_first_ns[0]).astype(np.float64) * 1e-9
    hp = np.diff(host_s)
    ok = ~dropoff
    reasons = []
    if overruns:
        reasons.append(f"{overruns} host backlog (overrun) event(s)")
    if clock == "device":
        dp = np.diff(t_s)
        single = ok & (np.rint(dp / nominal_s) == 1) & (hp > 0)
        slope = float(np.median(hp[single] / dp[single])) if single.any() else 1.0
        host_nominal = slope * nominal_s
        seg = np.concatenate([[0], np.cumsum(dropoff)])  # segments between drop-offs
        lag = host_s - slope * t_s
        earliest = np.minimum.reduceat(lag, np.flatnonzero(np.diff(seg, prepend=-1)))
        worst = float(np.max(lag - earliest[seg]))  # the latest turn against its segment's
        if worst > 0.5 * host_nominal:
            reasons.append(
                f"turns received up to {worst * 1e3:.0f} ms ({worst / host_nominal:.1f} turns) "
                "later than the device clock places them"
            )
        host_rate = _rate(hp, host_nominal, ok) if host_nominal > 0 else float("nan")
    else:
        host_nominal = nominal_s
        bunched = float(np.mean(hp[ok] < 0.5 * host_nominal)) if ok.any() else 0.0
        if bunched >= 0.01:
            reasons.append(
                f"{100 * bunched:.1f} % of the turns arrived under half a period after the "
                "previous one (delivered in bursts)"
            )
        host_rate = _rate(hp, host_nominal, ok)
    if reasons:
        note = "host clock unreliable: the host fell behind (" + "; ".join(reasons) + ")"
        if clock == "device":
            note += "; the figures use the device clock"
        return host_rate, False, note
    if clock == "device":
        return host_rate, True, "host clock kept up with the device clock"
    return host_rate, True, "no device clock to check against; no sign of the host falling behind"


def timing_stats(
    turns: LidarTurns, events: Iterable[Event] = (), sources: Iterable[str] = (),
    clock_source: str = "", time_base: str = "",
) -> TimingStats:
    """Compute :class:`TimingStats` of a stream.

    ``events``: session events; those whose ``source`` is in ``sources`` (the device's
    stream name, port) and whose kind is unplug/reconnect/stale count as USB drop-offs,
    ``overrun`` marks the host clock unreliable. ``clock_source``: how the device time
    was made (its ``device_time`` attribute); ``time_base``: what the turn times are (its
    ``time_base`` attribute; empty: host receive times)."""
    if turns.n_turns < 3:
        raise FitError(
            f"only {turns.n_turns} lidar turns in the stream; record at least a few seconds"
        )
    t_s, clock = turn_start_s(turns)
    kind = time_base.lower()  # what the stream's non-device times are
    base = (
        "nominal" if kind.startswith("nominal")  # a nominal sample rate: invented
        else "stamps" if "header stamp" in kind  # an imported log's header stamps
        else "device" if kind.startswith("device")  # a bare capture's device time
        else "host"  # receive times (also when it says nothing)
    )
    if clock == "host" and base in ("nominal", "stamps"):
        clock = base
    periods = np.diff(t_s)
    nominal = float(np.median(periods))
    for _ in range(3):  # the median single-turn period: multi-turn gaps dropped iteratively
        single = periods[np.rint(periods / nominal) == 1]
        if single.size == 0:
            break
        nominal = float(np.median(single))
    k = np.rint(periods / nominal).astype(np.int64)

    mine, overruns, dropoff = _usb_events(turns, events, sources)
    counted = ~dropoff & (k >= 1)
    skipped = int(np.sum(k[counted & (k >= 2)] - 1))
    expected = int(np.sum(k[counted]))
    single = periods[(k == 1) & ~dropoff]
    if single.size < 2:
        raise FitError("fewer than two single-turn periods; the turn times are too irregular")

    dev = np.abs(single - nominal)
    gap_i = int(np.argmax(periods))
    counts = turns.count.astype(np.float64)
    speed = turns.speed_hz[np.isfinite(turns.speed_hz)]
    if base == "host":
        host_rate, host_ok, host_note = host_reliability(
            turns, t_s, clock, nominal, dropoff, overruns
        )
    else:  # there are no host receive times to judge
        host_rate, host_ok = float("nan"), False
        host_note = f"no host receive times: the stream's times are {time_base}"
    return TimingStats(
        clock=clock,
        clock_source=(clock_source or "device time") if clock == "device" else _SOURCES[clock],
        host_rate_hz=host_rate,
        host_timing_reliable=host_ok,
        host_timing_note=host_note,
        n_turns=turns.n_turns,
        duration_s=float(t_s[-1]),
        rate_hz=expected / float(np.sum(periods[counted])) if expected else 1.0 / nominal,
        nominal_period_s=nominal,
        period_percentiles_s=_percentiles(single, PERCENTILES),
        jitter_std_s=float(np.std(single, ddof=1)),
        jitter_abs_percentiles_s=_percentiles(dev, (50, 95, 99)),
        n_single_periods=int(single.size),
        skipped_turns=skipped,
        skipped_pct=100.0 * skipped / expected if expected else 0.0,
        longest_gap_s=float(periods[gap_i]),
        longest_gap_at_s=float(t_s[gap_i]),
        reported_speed_hz=float(np.median(speed)) if speed.size else float("nan"),
        points_per_turn={
            "median": float(np.median(counts)),
            **_percentiles(counts, (5, 95)),
            "min": float(counts.min()),
            "max": float(counts.max()),
        },
        angular_step_deg=float(np.degrees(angular_step_rad(turns))),
        usb_unplugs=sum(e.kind == "unplug" for e in mine),
        usb_reconnects=sum(e.kind == "reconnect" for e in mine),
        usb_stale=sum(e.kind == "stale" for e in mine),
        usb_dropoff_gaps=int(np.sum(dropoff)),
    )


def _percentiles(x: np.ndarray, ps: Sequence[float]) -> dict[str, float]:
    """``{"p50": ...}``: the ``ps`` percentiles of ``x``."""
    return {f"p{p}": float(v) for p, v in zip(ps, np.percentile(x, ps), strict=True)}


def _usb_events(
    turns: LidarTurns, events: Iterable[Event], sources: Iterable[str]
) -> tuple[list[Event], int, np.ndarray]:
    """This lidar's drop-off events (unplug, stale, reconnect), its overrun count, and per
    gap between consecutive turns whether it is a USB drop-off (the later turn came after a
    reconnect, or a drop-off event falls in it)."""
    wanted = set(sources)
    events = list(events)
    mine = [e for e in events if e.source in wanted and e.kind in DROP_KINDS]
    overruns = sum(e.source in wanted and e.kind == "overrun" for e in events)
    drop_ns = np.sort(np.array([e.t_ns for e in mine], dtype=np.int64))
    host = turns.t_first_ns
    dropoff = (turns.flags[1:] & TurnFlag.AFTER_RECONNECT) != 0
    if drop_ns.size:
        dropoff |= np.searchsorted(drop_ns, host[1:], "right") > np.searchsorted(
            drop_ns, host[:-1], "right"
        )
    return mine, overruns, dropoff
