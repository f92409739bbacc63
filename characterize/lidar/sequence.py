"""How a lidar's points follow one another (no-return runs, bearing steps, turn spans),
in the device's native sense (degrees clockwise): docs/LIDAR.md, "Point sequence"."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.logs import LidarTurns, TurnFlag


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
    """:class:`SequenceStats` of ``turns`` (definitions: docs/LIDAR.md)."""
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
