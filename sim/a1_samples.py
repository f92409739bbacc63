"""Synthetic RPLIDAR A1 samples: a room seen from inside, and how real units depart from an
ideal sweep (:class:`A1Realism`; :data:`IDEAL_A1` switches every departure off). The
model and its figures with their sources: docs/A1.md, "What real units send".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.sim.emulator_base import check_sweep, room_ranges


@dataclass(frozen=True)
class A1Realism:
    """How a real A1's node stream departs from an ideal sweep; the defaults reproduce
    three real A1M8 captures (each effect and figure: docs/A1.md, "What real units send").

    Angles in °, ranges in m: ``quality_levels`` are ``(quality, probability)`` of a
    return (empty: ``60 - 3·range``); ``zero_offset_deg``, ``tooth_lag_deg`` and
    ``back_step_deg`` are uniform ranges; ``teeth = 0`` switches the encoder lag off and
    ``dark_sector_deg = 0`` makes no-returns independent per node; ``burst_mean_nodes``
    counts standard-scan nodes; ``*_prob`` and ``flicker`` are per-node probabilities.
    """

    quality_levels: tuple[tuple[int, float], ...] = ((15, 0.97), (10, 0.015), (6, 0.015))
    zero_offset_deg: tuple[float, float] = (1.45, 1.55)
    return_lag_deg: float = 5.3
    return_lag_base_m: float = 0.025
    jitter_deg: float = 0.1
    teeth: int = 8
    tooth_lag_deg: tuple[float, float] = (2.0, 2.6)
    dark_sector_deg: float = 50.0
    bursts_per_turn: float = 10.0
    burst_mean_nodes: float = 2.0
    flicker: float = 0.003
    back_step_prob: float = 0.006
    back_step_deg: tuple[float, float] = (1.25, 1.8)
    zero_quality_prob: float = 0.18
    range_sigma_m: float = 0.01


IDEAL_A1 = A1Realism(
    quality_levels=(), zero_offset_deg=(0.0, 0.0), return_lag_deg=0.0, return_lag_base_m=0.0,
    jitter_deg=0.0, teeth=0, dark_sector_deg=0.0, bursts_per_turn=0.0, flicker=0.0,
    back_step_prob=0.0, zero_quality_prob=0.0,
)  # fmt: skip
"""An ideal sweep: evenly spaced readings from 0°, independent no-returns of quality 0."""

REAL_SAMPLE_US = 508
"""Standard sample duration an A1M8 (firmware 1.29) answers to GET_SAMPLERATE (µs)."""
REAL_EXPRESS_US = 254
"""Express sample duration the same unit answers (µs)."""
REAL_NODES_PER_TURN = 317
"""Nodes per turn of a real A1M8 at its default motor speed (~6.2 Hz at 508 µs)."""
REAL_ZERO_FRACTION = 0.45
"""Fraction of nodes with distance 0 in a room (real captures: 35-54 %)."""


def _dark_sectors(rng: np.random.Generator, p_dark: float, mean_deg: float) -> np.ndarray:
    """Edges (°, increasing from 0) of alternating bright/dark sectors over one turn whose
    dark ones cover ``p_dark`` of it, ``mean_deg`` wide on average."""
    k = max(1, round(360.0 * p_dark / mean_deg))
    bright, dark = rng.exponential(1.0, k), rng.exponential(1.0, k)
    widths = np.empty(2 * k)
    widths[0::2] = bright * 360.0 * (1.0 - p_dark) / bright.sum()
    widths[1::2] = dark * 360.0 * p_dark / dark.sum()
    return np.cumsum(widths)


@dataclass
class RoomSamples:
    """A1 samples of a rectangular room, for scenario-free emulation: the sensor at
    ``(x, y)`` in a ``width`` × ``depth`` m room facing ``yaw_deg`` (° CCW); beams beyond
    ``max_range_m`` and a fraction ``p_no_return`` of the others return 0."""

    t_s: np.ndarray
    angle_deg_cw: np.ndarray
    range_m: np.ndarray
    intensity: np.ndarray
    turn: np.ndarray

    @classmethod
    def generate(
        cls, duration_s: float = 20.0, rate_hz: float | None = None,
        samples_per_s: float | None = None, width: float = 6.0, depth: float = 8.0,
        x: float = 2.5, y: float = 3.0, yaw_deg: float = 0.0,
        p_no_return: float = REAL_ZERO_FRACTION, max_range_m: float = 12.0, seed: int = 0,
        realism: A1Realism | None = None,
    ) -> RoomSamples:  # fmt: skip
        """Samples for ``duration_s`` s (default rates: a real A1M8's standard scan); one
        ``seed`` gives the same unit and room at any sample rate (standard and express agree).
        """
        rl = A1Realism() if realism is None else realism
        fs = 1e6 / REAL_SAMPLE_US if samples_per_s is None else float(samples_per_s)
        rate = 1e6 / REAL_SAMPLE_US / REAL_NODES_PER_TURN if rate_hz is None else float(rate_hz)
        check_sweep(duration_s, rate, fs)
        unit = np.random.default_rng([seed, 1])  # the unit and the room: rate-independent
        rng = np.random.default_rng([seed, 2, round(fs)])
        n = int(duration_s * fs)
        t = np.arange(n) / fs
        phase = t * rate
        turn = np.floor(phase).astype(np.int64)
        head = 360.0 * (phase - turn)
        reading = head - unit.uniform(*rl.zero_offset_deg) + rng.normal(0.0, rl.jitter_deg, n)
        if rl.teeth:
            tp = head * rl.teeth / 360.0 + 0.5
            tooth = np.floor(tp).astype(np.int64)
            lag = unit.uniform(*rl.tooth_lag_deg, (int(turn[-1]) + 1, rl.teeth + 1))
            reading -= lag[turn, tooth] * (tp - tooth)
        scale = fs * REAL_SAMPLE_US * 1e-6  # nodes here per standard-scan node
        in_bursts = min(0.9, rl.bursts_per_turn * rl.burst_mean_nodes / REAL_NODES_PER_TURN)
        if rl.dark_sector_deg > 0:
            p_dark = max(0.0, (p_no_return - in_bursts) / (1.0 - in_bursts))
            edges = _dark_sectors(unit, p_dark, rl.dark_sector_deg)
            sector = np.searchsorted(edges, np.mod(head + unit.uniform(0, 360), 360), "right")
            lost = (sector % 2 == 1) ^ (rng.random(n) < rl.flicker)
        else:
            lost = rng.random(n) < p_no_return
        if rl.bursts_per_turn:
            starts = np.flatnonzero(rng.random(n) < rl.bursts_per_turn * rate / fs)
            draw = rng.geometric(1 / rl.burst_mean_nodes, starts.size) * scale
            size = np.maximum(1, np.round(draw)).astype(np.int64)
            within = np.arange(size.sum()) - np.repeat(np.cumsum(size) - size, size)
            hit = np.repeat(starts, size) + within
            lost[hit[hit < n]] = True
        geom = room_ranges(np.mod(reading - yaw_deg, 360.0), width, depth, x, y)
        ret = ~lost
        if rl.return_lag_deg or rl.return_lag_base_m:
            base = np.arctan(rl.return_lag_base_m / np.maximum(geom[ret], 0.05))
            reading[ret] -= rl.return_lag_deg + np.degrees(base)
            geom[ret] = room_ranges(np.mod(reading[ret] - yaw_deg, 360.0), width, depth, x, y)
        r = geom + rng.normal(0.0, rl.range_sigma_m, n)
        lost |= r > max_range_m
        r[lost] = 0.0
        back = rng.random(n) < rl.back_step_prob
        reading[back] -= rng.uniform(*rl.back_step_deg, int(back.sum()))
        if rl.quality_levels:
            levels = np.array([q for q, _ in rl.quality_levels], dtype=np.uint8)
            prob = np.array([p for _, p in rl.quality_levels], dtype=np.float64)
            quality = levels[rng.choice(levels.size, n, p=prob / prob.sum())]
        else:
            quality = np.clip(np.round(60 - 3 * r), 1, 63).astype(np.uint8)
        quality[lost & (rng.random(n) >= rl.zero_quality_prob)] = 0
        return cls(t, np.mod(reading, 360.0), r, quality, turn)
