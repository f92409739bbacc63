"""Lidar points binned by angle, every binning the package does: a turn as a ROS LaserScan
(:class:`ScanGrid`, :func:`bin_turn`; docs/FORMAT.md) and statistics over angle bins.
Angles rad, counter-clockwise (REP 103), times ns."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from sensorbench.logs import ros2_cdr
from sensorbench.logs.batches import LidarTurns
from sensorbench.logs.values import MAX_RANGE_M

MAX_RAY_ERROR_RAD = math.radians(0.2)
"""Largest distance of a point from its ray: half a bin."""

TWO_PI = 2.0 * math.pi

RATED_RANGE_M: dict[str, tuple[float, float]] = {
    "LD19": (0.02, 12.0), "LD06": (0.02, 12.0), "A1": (0.15, 12.0)}  # fmt: skip
"""Each lidar model's rated range (m: min, max; the datasheets, docs/LD19.md and
docs/A1.md): its LaserScans' range_min and range_max. Its readers store a range
beyond the max as nan and keep one under the min as measured."""


def _wrap(a: np.ndarray) -> np.ndarray:
    """Angles into [-π, π)."""
    return np.mod(np.asarray(a) + math.pi, TWO_PI) - math.pi


@dataclass(frozen=True)
class ScanGrid:
    """The ray grid of one lidar stream: ``n_bins`` per revolution, swept ``direction``."""

    n_bins: int
    direction: int
    """+1: the sensor sweeps counter-clockwise (angles grow with time), −1 clockwise."""

    @classmethod
    def for_stream(cls, angle: np.ndarray, count: np.ndarray) -> ScanGrid:
        """The grid of a stream's points (``angle`` flat, ``count`` per turn).

        Bins of at most ``2·MAX_RAY_ERROR_RAD``, and at least two per point of a median
        turn (so points of an evenly sweeping sensor never share one).
        """
        offsets = np.cumsum(count) - count
        steps = _wrap(np.diff(angle.astype(np.float64)))
        inside = np.ones(steps.size, bool)
        inside[offsets[1:] - 1] = False  # no step across two turns
        steps = steps[inside] if inside.any() else steps
        direction = -1 if steps.size and np.median(steps) < 0 else 1
        per_turn = int(np.median(count)) if count.size else 1
        n = max(math.ceil(TWO_PI / (2.0 * MAX_RAY_ERROR_RAD)), 2 * per_turn)
        return cls(n, direction)

    @property
    def increment(self) -> np.float32:
        """``angle_increment`` (rad, positive, float32 as the message holds it)."""
        return np.float32(TWO_PI / self.n_bins)


@dataclass
class BinnedScan:
    """One turn on its grid: what a LaserScan carries, and what did not fit."""

    angle_min: np.float32
    """Angle of ray 0 (rad): 0, the sensor's forward, in every turn of every stream."""
    stamp_ns: int
    """Ray 0's time (ns) on the turn's time line: the time of the turn's first point (its
    last for a clockwise sensor: the seam) moved by its ray's distance from ray 0, at most
    half a turn either way. Ray i's time is ``stamp + i·time_increment``, but one scan
    (n·time_increment) off for the rays between ray 0 and the seam (a few for the A1 and
    the LD19, whose turns start near 0)."""
    increment: np.float32
    ranges: np.ndarray
    """float32 (n_bins,); NaN where no point came."""
    intensities: np.ndarray
    """float32 (n_bins,); 0 where no point came."""
    time_increment: float
    """Seconds from one ray to the next: the turn's sweep time per bin (negative for a
    clockwise sensor)."""
    ray_of_point: np.ndarray
    """int (points,): each point's ray, −1 for a point dropped for a nearer one."""

    @property
    def dropped(self) -> int:
        """Points that shared a bin with a point nearer its centre."""
        return int(np.count_nonzero(self.ray_of_point < 0))

    def laser_scan(self, stamp_ns: int, frame: str, speed_hz: float,
                   limits: tuple[float, float]) -> bytes:  # fmt: skip
        """The ``sensor_msgs/LaserScan`` (CDR) of the turn: scan_time 1/``speed_hz`` (Hz), or
        the sweep's time when that is not positive; range_min, range_max: ``limits`` (m,
        :func:`scan_limits`)."""
        n = self.ranges.size
        scan_time = 1.0 / speed_hz if math.isfinite(speed_hz) and speed_hz > 0 else 0.0
        params = (float(self.angle_min), float(self.angle_min + (n - 1) * self.increment),
                  float(self.increment), self.time_increment,
                  scan_time or abs(self.time_increment) * n, *limits)  # fmt: skip
        return ros2_cdr.laser_scan(stamp_ns, frame, params, self.ranges, self.intensities)


def bin_turn(
    grid: ScanGrid,
    angle: np.ndarray,
    range_m: np.ndarray,
    intensity: np.ndarray,
    t_ns: np.ndarray,
) -> BinnedScan:
    """One turn's points (angle rad CCW, range m, intensity, time ns) on ``grid``."""
    n = grid.n_bins
    inc = grid.increment
    a = angle.astype(np.float64)
    k0 = 0 if grid.direction > 0 else a.size - 1  # the sweep's first point in ray order
    angle_min = np.float32(0.0)
    # counter-clockwise distance from ray 0, in bins, with the message's float32
    # increment: the rays a reader computes
    exact = np.mod(a, TWO_PI) / np.float64(inc)
    ray = np.rint(exact).astype(np.int64) % n
    miss = np.abs(_wrap((exact - np.rint(exact)) * abs(np.float64(inc))))
    # one point per ray: the nearest to the ray's angle wins
    order = np.lexsort((miss, ray))
    first = np.r_[True, ray[order][1:] != ray[order][:-1]]
    keep = order[first]
    ray_of_point = np.full(a.size, -1, np.int64)
    ray_of_point[keep] = ray[keep]
    ranges = np.full(n, np.nan, np.float32)
    ranges[ray[keep]] = range_m[keep]
    intensities = np.zeros(n, np.float32)
    intensities[ray[keep]] = intensity[keep]
    # the time per ray, from the seam (the k0 point's ray) to the ray farthest
    # counter-clockwise from it (the turn's other end, unless it came round into the seam)
    seam = int(ray[k0])
    lap = (ray - seam) % n
    far = int(np.argmax(lap))
    t0 = int(t_ns[k0])
    time_increment = (int(t_ns[far]) - t0) / 1e9 / int(lap[far]) if lap[far] else 0.0
    stamp = t0 - round(((seam + n // 2) % n - n // 2) * time_increment * 1e9)
    return BinnedScan(angle_min, stamp, inc, ranges, intensities, time_increment, ray_of_point)


def stream_grid(grids: dict[str, ScanGrid], name: str, turns: LidarTurns) -> ScanGrid | None:
    """The grid of stream ``name``, kept in ``grids``: made from the stream's first turn
    with two points or more (of ``turns`` if none was made before); None until one."""
    grid = grids.get(name)
    if grid is None:
        full = np.flatnonzero(turns.count >= 2)
        if full.size:
            k = int(full[0])
            lo = int(turns.offset[k])
            grid = grids[name] = ScanGrid.for_stream(turns.angle[lo : lo + int(turns.count[k])],
                                                     turns.count[k : k + 1])  # fmt: skip
    return grid


def binned_turns(
    grids: dict[str, ScanGrid], name: str, turns: LidarTurns
) -> Iterator[tuple[int, slice, BinnedScan]]:
    """Each turn of ``turns`` (of stream ``name``) with two points or more, on the
    stream's grid (:func:`stream_grid`): its index, its points' slice and its
    :class:`BinnedScan`. The live view and ROS 2 publish these."""
    grid = stream_grid(grids, name, turns)
    if grid is None:
        return
    offset = turns.offset
    for k in range(turns.n_turns):
        lo, hi = int(offset[k]), int(offset[k] + turns.count[k])
        if hi - lo < 2:
            continue
        pts = slice(lo, hi)
        yield k, pts, bin_turn(grid, turns.angle[pts], turns.range[pts], turns.intensity[pts],
                               turns.t_ns[pts])  # fmt: skip


def rated_range_m(attrs: Mapping) -> tuple[float, float]:
    """The rated (min, max) range (m) of a lidar stream with these attributes: its
    ``model``'s (:data:`RATED_RANGE_M`), an imported LaserScan's own (its first scan's
    ``ros_range_min_m``, ``ros_range_max_m``), else 0 to :data:`MAX_RANGE_M`."""
    if "ros_range_max_m" in attrs:
        return float(attrs["ros_range_min_m"]), float(attrs["ros_range_max_m"])
    return RATED_RANGE_M.get(str(attrs.get("model", "")), (0.0, MAX_RANGE_M))


def scan_limits(lidars: Iterable[tuple[tuple[float, float], float]]) -> tuple[float, float]:
    """A LaserScan's constant range_min and range_max (m) for the returns of lidars given
    as (rated (min, max) m, distance of the lidar from the scan's origin m): the envelope
    of those ranges widened by the distances, range_max raised by one float32 step so a
    return at exactly a rated max stays inside laser_geometry's ``range < range_max``."""
    rated = list(lidars)
    lo = min(max(0.0, r[0] - d) for r, d in rated)
    hi = max(r[1] + d for r, d in rated)
    return lo, float(np.nextafter(np.float32(hi), np.float32(math.inf)))


def angle_bins(angle_rad: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin index in ``[0, n_bins)`` of each angle; bin ``b`` is centred on ``b·2π/n_bins``."""
    width = TWO_PI / n_bins
    shifted = np.mod(np.asarray(angle_rad, dtype=np.float64) + 0.5 * width, TWO_PI)
    return np.floor(shifted / width).astype(np.int64) % n_bins


def grouped_median(
    keys: np.ndarray, values: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """Median of ``values`` per integer key in ``[0, n_groups)``.

    ``inf`` values take part (a group of mostly ``inf`` has median ``inf``); drop
    ``nan`` before calling. Returns ``(median, count)``; empty groups give ``nan``.
    """
    keys = np.asarray(keys, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    v = values[np.lexsort((values, keys))]
    counts = np.bincount(keys, minlength=n_groups)[:n_groups]
    starts = np.zeros(n_groups, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    med = np.full(n_groups, np.nan)
    has = counts > 0
    lo = starts[has] + (counts[has] - 1) // 2
    hi = starts[has] + counts[has] // 2
    with np.errstate(invalid="ignore"):
        med[has] = np.where(v[lo] == v[hi], v[lo], 0.5 * (v[lo] + v[hi]))
    return med, counts


def turn_index(count: np.ndarray) -> np.ndarray:
    """Turn number of every point of a flat ``LidarTurns`` (from its per-turn counts)."""
    count = np.asarray(count, dtype=np.int64)
    return np.repeat(np.arange(count.size, dtype=np.int64), count)


def angular_step_rad(turns: LidarTurns) -> float:
    """Median angular distance (rad) between consecutive points of the same turn."""
    if turns.n_points < 2:
        return float("nan")
    d = np.abs(np.diff(turns.angle.astype(np.float64)))
    d = np.minimum(d, 2 * np.pi - d)
    same_turn = np.ones(turns.n_points - 1, dtype=bool)
    ends = np.cumsum(turns.count.astype(np.int64))[:-1] - 1
    same_turn[ends[(ends >= 0) & (ends < same_turn.size)]] = False
    d = d[same_turn & (d > 0)]
    return float(np.median(d)) if d.size else float("nan")
