"""A lidar turn as a ROS LaserScan: each point in the ray bin of its own angle.

LaserScan holds evenly spaced rays: ray i at ``angle_min + i·angle_increment``, taken
at ``stamp + i·time_increment``. A real turn's points are not evenly spaced (packets
are lost, a packet's points are interpolated between its own start and end angles),
so spreading a turn over an even grid from its mean spacing puts rays up to a lost
packet's width away from their points. Here every stream gets one fixed grid of
``n_bins`` bins per revolution, fine enough that each point is within half a bin of a
bin's centre, and each point goes into the bin nearest its own angle; bins nothing
came into hold NaN (as the vendors' ROS drivers leave them). The rays run in the
direction the sensor sweeps (``angle_increment`` negative for a clockwise sensor,
whose counter-clockwise angles decrease with time), starting at the bin of the turn's
first point, so ray i's time ``stamp + i·time_increment`` follows the sweep. Two
points in one bin (only where points are closer than a bin) keep the one nearer the
bin's centre; the other is counted as dropped.

Angles rad, counter-clockwise (REP 103), times ns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_RAY_ERROR_RAD = math.radians(0.2)
"""Largest distance of a point from its ray: half a bin."""

_TWO_PI = 2.0 * math.pi


def _wrap(a: np.ndarray) -> np.ndarray:
    """Angles into [-π, π)."""
    return np.mod(np.asarray(a) + math.pi, _TWO_PI) - math.pi


@dataclass(frozen=True)
class ScanGrid:
    """The ray grid of one lidar stream: ``n_bins`` per revolution, swept ``direction``."""

    n_bins: int
    direction: int
    """+1: the sensor sweeps counter-clockwise (angles grow with time), −1 clockwise."""

    @classmethod
    def for_stream(
        cls, angle: np.ndarray, count: np.ndarray, max_error_rad: float = MAX_RAY_ERROR_RAD
    ) -> ScanGrid:
        """The grid of a stream's points (``angle`` flat, ``count`` per turn).

        Bins of at most ``2·max_error_rad``, and at least two per point of a median
        turn (so points of an evenly sweeping sensor never share one).
        """
        offsets = np.cumsum(count) - count
        steps = _wrap(np.diff(angle.astype(np.float64)))
        inside = np.ones(steps.size, bool)
        inside[offsets[1:] - 1] = False  # no step across two turns
        steps = steps[inside] if inside.any() else steps
        direction = -1 if steps.size and np.median(steps) < 0 else 1
        per_turn = int(np.median(count)) if count.size else 1
        n = max(math.ceil(_TWO_PI / (2.0 * max_error_rad)), 2 * per_turn)
        return cls(n, direction)

    @property
    def increment(self) -> np.float32:
        """``angle_increment`` (rad, float32 as the message holds it)."""
        return np.float32(self.direction * _TWO_PI / self.n_bins)


@dataclass
class BinnedScan:
    """One turn on its grid: what a LaserScan carries, and what did not fit."""

    angle_min: np.float32
    """Angle of ray 0 (rad, in [−π, π)): the bin of the turn's first point."""
    increment: np.float32
    ranges: np.ndarray
    """float32 (n_bins,); NaN where no point came."""
    intensities: np.ndarray
    """float32 (n_bins,); 0 where no point came."""
    time_increment: float
    """Seconds from one ray to the next: the turn's sweep time per bin."""
    ray_of_point: np.ndarray
    """int (points,): each point's ray, −1 for a point dropped for a nearer one."""

    @property
    def dropped(self) -> int:
        """Points that shared a bin with a point nearer its centre."""
        return int(np.count_nonzero(self.ray_of_point < 0))


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
    bin_width = _TWO_PI / n
    angle_min = np.float32(_wrap(np.rint(a[0] / bin_width) * bin_width))
    # sweep distance from ray 0 in the sensor's direction, in bins, with the message's
    # float32 angle_min and increment: the rays a reader computes
    sweep = np.mod(grid.direction * (a - np.float64(angle_min)), _TWO_PI)
    exact = sweep / abs(np.float64(inc))
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
    # the sweep time per ray, from the point swept farthest (the last, unless it came
    # round into ray 0)
    far = int(np.argmax(ray))
    time_increment = (int(t_ns[far]) - int(t_ns[0])) / 1e9 / int(ray[far]) if ray[far] else 0.0
    return BinnedScan(angle_min, inc, ranges, intensities, time_increment, ray_of_point)
