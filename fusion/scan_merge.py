"""Merge two lidar scans (front and rear) into one 360° scan in the robot frame
(docs/LIDAR.md): one :class:`~sensorbench.logs.LidarTurns` turn per pair of mutually
nearest turns, and one per turn of a lidar alone (the other has no turn within
:meth:`MergeSetup.alone_ns`, flagged ``SINGLE_LIDAR``), every point stamped with the pair's
stamp (a lone turn's centre), angles in the body frame (rad CCW, [0, 2π)), ``device_ns =
NO_DEVICE_TIME``, ``speed_hz = nan``, the turns' flags ORed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sensorbench.drivers.robot_config import Mount
from sensorbench.errors import FusionError
from sensorbench.fusion.pod_drive import yaw_from_quat
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, PoseBatch, TurnFlag
from sensorbench.logs.scan_bins import TWO_PI, angular_step_rad

PoseAt = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
"""Robot pose at int64 ns times: ``(x m, y m, yaw rad)`` arrays in a fixed frame."""

MAX_GAP_STEPS = 2.5
JUMP_ABS_M = 0.05
JUMP_REL = 0.03
MAX_SLOPE = np.tan(np.radians(85.0))
CHUNK_PAIRS = 256  # pairs merged per vectorised batch (keeps the arrays in cache)
STEP_TURNS = 10
"""Turns with points, from a stream's start, over which its angular step is measured."""
MAX_LAG_S = 5.0
"""How long (s of one lidar's data past its :data:`STEP_TURNS`-th turn with points) the
merge waits for the other's before measuring the grid without it (a lidar up late or
never): :func:`grid_turns`."""
ALONE_AFTER_S = 0.3
"""A turn goes out alone when the other lidar has no turn within this (s, or 3 × max_dt
if more) of it: an A1 (5.5 Hz) alive has a turn within 0.18 s of any time even after a
skipped turn, so only a partner silent for about 3 of its turns leaves one alone."""


_NO_TURNS = LidarTurns.empty()
for _a in vars(_NO_TURNS).values():
    _a.flags.writeable = False  # what most pushes return: built once, shared


def first_turns(turns: LidarTurns, n: int = STEP_TURNS) -> LidarTurns:
    """The turns up to and including the ``n``-th that holds points (all if fewer)."""
    full = np.flatnonzero(turns.count > 0)
    if full.size <= n:
        return turns
    last = int(full[n - 1])
    return turns.select(slice(0, last + 1), 0, int(turns.offset[last] + turns.count[last]))


def _tenth_centre(turns: LidarTurns) -> int:
    """Centre (ns) of the :data:`STEP_TURNS`-th turn with points (int64 max if fewer)."""
    full = np.flatnonzero(turns.count > 0)
    if full.size < STEP_TURNS:
        return int(np.iinfo(np.int64).max)
    return int(turn_centres_ns(turns)[full[STEP_TURNS - 1]])


def grid_turns(
    front: LidarTurns, rear: LidarTurns, final: bool = True
) -> tuple[LidarTurns, LidarTurns] | None:
    """The turns the grid is measured on: each stream's :func:`first_turns`, but a stream
    whose :data:`STEP_TURNS`-th turn with points centres after the other's data reached
    :data:`MAX_LAG_S` past its own is left out (empty). None when that cannot be told
    yet (a streaming merge waits), unless ``final`` (decide on what there is)."""
    streams = (front, rear)
    tenth = [_tenth_centre(t) for t in streams]
    out = [first_turns(t) for t in streams]
    big = int(np.iinfo(np.int64).max)
    for k in (0, 1):
        if tenth[1 - k] == big:
            continue
        tc = turn_centres_ns(streams[1 - k])
        j = int(np.searchsorted(tc, tenth[1 - k] + round(MAX_LAG_S * 1e9)))
        if j < tc.size and tc[j] < tenth[k]:
            out[k] = LidarTurns.empty()
            return out[0], out[1]
    return (out[0], out[1]) if final or big not in tenth else None


@dataclass
class MergeResult:
    """One merged turn per pair or lone turn, the input turns of each (``front_index``,
    ``rear_index``; -1: the side that was not there), the turns in no merged turn
    (``unpaired_*``), the lone turns (``alone_*``), the merged turns the pose source does
    not cover (``outside_pose``) and the grid step (rad)."""

    turns: LidarTurns
    front_index: np.ndarray
    rear_index: np.ndarray
    unpaired_front: int
    unpaired_rear: int
    outside_pose: int
    step_rad: float
    alone_front: int = 0
    alone_rear: int = 0


def _mid_ns(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Midpoint of int64 ns times, without overflow."""
    return a // 2 + b // 2 + (a % 2 + b % 2) // 2


def turn_centres_ns(turns: LidarTurns) -> np.ndarray:
    """Centre time (ns) of each turn: midway between its first and last point (a turn
    without points: its ``t_first_ns``)."""
    out = turns.t_first_ns.copy()
    has = turns.count > 0
    first = turns.offset[has]
    out[has] = _mid_ns(turns.t_ns[first], turns.t_ns[first + turns.count[has] - 1])
    return out


def pair_nonempty(
    front: LidarTurns, rear: LidarTurns, max_dt_s: float,
    centres: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_turns` over the turns that hold points; indices into the full streams.
    ``centres``: both streams' :func:`turn_centres_ns` (ns) when already at hand."""
    tc_f, tc_r = centres or (turn_centres_ns(front), turn_centres_ns(rear))
    nf, nr = np.flatnonzero(front.count > 0), np.flatnonzero(rear.count > 0)
    ia, ib = pair_turns(tc_f[nf], tc_r[nr], round(max_dt_s * 1e9))
    return nf[ia], nr[ib]


def pair_turns(
    ta_ns: np.ndarray, tb_ns: np.ndarray, max_dt_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mutually nearest pairs of two sorted time arrays at most ``max_dt_ns`` apart."""
    ta = np.asarray(ta_ns, dtype=np.int64)
    tb = np.asarray(tb_ns, dtype=np.int64)
    if ta.size == 0 or tb.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def nearest(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        if dst.size == 1:
            return np.zeros(src.size, dtype=np.int64)
        j = np.minimum(np.maximum(np.searchsorted(dst, src), 1), dst.size - 1)
        return np.where(np.abs(src - dst[j - 1]) <= np.abs(dst[j] - src), j - 1, j)

    a_to_b = nearest(ta, tb)
    b_to_a = nearest(tb, ta)
    ia = np.arange(ta.size)
    ok = (b_to_a[a_to_b] == ia) & (np.abs(tb[a_to_b] - ta) <= max_dt_ns)
    return ia[ok], a_to_b[ok]


def alone_turns(
    own: LidarTurns, other: LidarTurns, paired: np.ndarray, centres: tuple[np.ndarray, np.ndarray],
    alone_ns: int,
) -> np.ndarray:
    """Indices of ``own``'s turns with points, not in ``paired``, that no turn with points of
    ``other`` centres within ``alone_ns`` (ns) of; ``centres``: both streams' (ns)."""
    cand = own.count > 0
    cand[paired] = False
    oc = centres[1][other.count > 0]
    if oc.size:
        tc = centres[0]
        j = np.minimum(np.maximum(np.searchsorted(oc, tc), 1), max(oc.size - 1, 1))
        near = np.minimum(np.abs(tc - oc[j - 1]), np.abs(oc[np.minimum(j, oc.size - 1)] - tc))
        cand &= near > alone_ns
    return np.flatnonzero(cand)


def _with_alone(
    i_f: np.ndarray, i_r: np.ndarray, a_f: np.ndarray, a_r: np.ndarray,
    centres: tuple[np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Pairs and lone turns (the absent side -1) in the order of their stamps."""
    none_f, none_r = np.full(a_r.size, -1), np.full(a_f.size, -1)
    f = np.concatenate((i_f, a_f, none_f)).astype(np.int64)
    r = np.concatenate((i_r, none_r, a_r)).astype(np.int64)
    stamp = np.concatenate((_mid_ns(centres[0][i_f], centres[1][i_r]), centres[0][a_f],
                            centres[1][a_r]))  # fmt: skip
    order = np.argsort(stamp, kind="stable")
    return f[order], r[order]


def pose_interpolator(batch: PoseBatch, max_gap_s: float = 0.25) -> PoseAt:
    """A :data:`PoseAt` from a pose stream's valid samples: linear in x, y and unwrapped
    yaw; ``nan`` outside the stream or inside a gap of more than ``max_gap_s``.

    Raises:
        FusionError: fewer than two valid samples.
    """
    ok = batch.valid & np.all(np.isfinite(batch.position), axis=1)
    ok &= np.all(np.isfinite(batch.quat_xyzw), axis=1)
    if ok.sum() < 2:
        raise FusionError("the pose stream has fewer than two valid samples to interpolate")
    t = batch.t_ns[ok]
    order = np.argsort(t, kind="stable")
    t = t[order]
    xy = batch.position[ok][order, :2]
    yaw = np.unwrap(yaw_from_quat(batch.quat_xyzw[ok][order]))
    t0 = t[0]
    tf = (t - t0).astype(np.float64)
    max_gap_ns = max_gap_s * 1e9

    def pose_at(t_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        q = (np.asarray(t_ns, dtype=np.int64) - t0).astype(np.float64)
        j = np.clip(np.searchsorted(tf, q), 1, tf.size - 1)
        in_gap = (tf[j] - tf[j - 1]) > max_gap_ns
        x, y, a = (
            np.where(in_gap, np.nan, np.interp(q, tf, col, left=np.nan, right=np.nan))
            for col in (xy[:, 0], xy[:, 1], yaw)
        )
        return x, y, a

    return pose_at


def points_in_polygon(x: np.ndarray, y: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """Even-odd test: which points (m) lie inside the closed polygon (V, 2). Only the
    points within the polygon's span of y are tested: beyond it no edge crosses."""
    poly = np.asarray(polygon, dtype=float)
    y0, x0 = poly[:, 1:], poly[:, :1]  # (V, 1) columns against the points' row
    y1, x1 = np.concatenate((y0[1:], y0[:1])), np.concatenate((x0[1:], x0[:1]))  # np.roll: 10×
    inside = np.zeros(np.shape(x), dtype=bool)
    band = np.flatnonzero((y >= y0.min()) & (y < y0.max()))
    bx, by = np.asarray(x)[band], np.asarray(y)[band]
    crosses = (y0 > by) != (y1 > by)
    with np.errstate(divide="ignore", invalid="ignore"):
        xc = x0 + (by - y0) * (x1 - x0) / (y1 - y0)
    inside[band] = np.bitwise_xor.reduce(crosses & (bx < xc), axis=0)
    return inside


def _pair_points(turns: LidarTurns, turn_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat point indices of the given turns and the pair number of each point."""
    counts = turns.count.astype(np.int64)[turn_idx]
    starts = turns.offset[turn_idx]
    pair = np.repeat(np.arange(turn_idx.size), counts)
    within = np.arange(pair.size) - np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + within, pair


def _to_body(
    turns: LidarTurns,
    pts: np.ndarray,
    pair: np.ndarray,
    mount: Mount,
    pose_at: PoseAt | None,
    ref_pose: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Body-frame (x, y) at the pair stamp of finite returns, their flat indices and pairs."""
    r = turns.range[pts].astype(np.float64)
    keep = np.isfinite(r) & (r > 0)
    pts, pair, r = pts[keep], pair[keep], r[keep]
    a = turns.angle[pts].astype(np.float64) + mount.yaw_rad
    x = mount.x_m + r * np.cos(a)
    y = mount.y_m + r * np.sin(a)
    if pose_at is not None and ref_pose is not None:
        px, py, pyaw = pose_at(turns.t_ns[pts])
        kx, ky, kyaw = (v[pair] for v in ref_pose)
        # odometry frame: p + R(pyaw)·b ; back into the stamp's body frame: R(-kyaw)(w - k)
        c, s = np.cos(pyaw), np.sin(pyaw)
        wx, wy = px + c * x - s * y - kx, py + s * x + c * y - ky
        c, s = np.cos(kyaw), np.sin(kyaw)
        x, y = c * wx + s * wy, -s * wx + c * wy
    return x, y, pts, pair


def _same_surface(key: np.ndarray, r: np.ndarray, pair: np.ndarray, own_step: float) -> np.ndarray:
    """Per consecutive pair of sorted points (k, k+1): do they lie on one surface? Their
    ranges within ``tol = max(0.05 m, 3 %)``, or either predicted within ``tol`` by the
    line through the two points beyond it, unless steeper than 85° incidence."""
    n = r.size
    k = np.arange(n)
    nxt = np.minimum(k + 1, n - 1)
    prv = np.maximum(k - 1, 0)
    nxt2 = np.minimum(k + 2, n - 1)
    ok_l = (pair[prv] == pair) & (k > 0) & (key - key[prv] <= MAX_GAP_STEPS * own_step)
    ok_r = (pair[nxt2] == pair) & (k + 2 < n) & (key[nxt2] - key[nxt] <= MAX_GAP_STEPS * own_step)
    tol = np.maximum(JUMP_ABS_M, JUMP_REL * np.minimum(r, r[nxt]))
    step = np.abs(r[nxt] - r)
    with np.errstate(invalid="ignore"):
        line = (ok_l & (np.abs(r[nxt] - (2 * r - r[prv])) <= tol)) | (
            ok_r & (np.abs(r - (2 * r[nxt] - r[nxt2])) <= tol)
        )
        not_grazing = step <= MAX_SLOPE * 0.5 * (r + r[nxt]) * np.maximum(key[nxt] - key, 0)
    return (step <= tol) | (line & not_grazing)


def _resample(
    ang: np.ndarray,
    rng: np.ndarray,
    inten: np.ndarray,
    pair: np.ndarray,
    n_pairs: int,
    n_bins: int,
    own_step: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One scan onto the grid: (n_pairs, n_bins) ranges (inf = nothing) and intensities."""
    width = TWO_PI / n_bins
    if ang.size == 0:
        return np.full((n_pairs, n_bins), np.inf), np.zeros((n_pairs, n_bins), dtype=np.uint16)
    span = 2.0 * TWO_PI  # pairs sit 4π apart on one sorted axis, with wrap copies
    key = pair * span + ang
    order = np.argsort(key, kind="stable")
    key, rng, inten, pair = key[order], rng[order], inten[order], pair[order]
    first = np.flatnonzero(np.concatenate(([True], pair[1:] != pair[:-1])))
    last = np.concatenate((first[1:], [pair.size])) - 1
    key = np.concatenate([key[last] - TWO_PI, key, key[first] + TWO_PI])
    ext = np.concatenate([last, np.arange(pair.size), first])
    order = np.argsort(key, kind="stable")
    key, ext = key[order], ext[order]
    r_e, i_e, p_e = rng[ext], inten[ext], pair[ext]

    grid_pair = np.repeat(np.arange(n_pairs), n_bins)
    g = grid_pair * span + np.tile(np.arange(n_bins) * width, n_pairs)
    j = np.minimum(np.maximum(np.searchsorted(key, g, side="right"), 1), key.size - 1)
    lo, hi = j - 1, j
    same = (p_e[lo] == grid_pair) & (p_e[hi] == grid_pair)
    gap = key[hi] - key[lo]
    r_lo, r_hi = r_e[lo], r_e[hi]
    adjacent = same & (gap <= MAX_GAP_STEPS * own_step)
    continuous = adjacent & _same_surface(key, r_e, p_e, own_step)[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(gap > 0, (g - key[lo]) / gap, 0.0)
    interp = r_lo + f * (r_hi - r_lo)
    d_lo = np.where(p_e[lo] == grid_pair, g - key[lo], np.inf)
    d_hi = np.where(p_e[hi] == grid_pair, key[hi] - g, np.inf)
    near_lo = d_lo <= d_hi
    d_near = np.where(near_lo, d_lo, d_hi)
    r_near = np.where(near_lo, r_lo, r_hi)
    i_near = np.where(near_lo, i_e[lo], i_e[hi])
    res = np.where(continuous, interp, np.where(adjacent | (d_near <= 0.5 * width), r_near, np.inf))
    inten_out = np.where(np.isfinite(res), i_near, 0).astype(np.uint16)
    return res.reshape(n_pairs, n_bins), inten_out.reshape(n_pairs, n_bins)


@dataclass(frozen=True)
class MergeSetup:
    """What a merge needs besides the scans.

    Attributes:
        front_mount, rear_mount: each lidar's pose in the body frame.
        footprint: body-frame polygon (V, 2) in m; returns inside it are dropped.
        pose_at: robot pose at any ns time, for motion compensation (None: robot still).
        max_dt_s: largest centre-time difference (s) of a pair.
    """

    front_mount: Mount
    rear_mount: Mount
    footprint: np.ndarray | None = None
    pose_at: PoseAt | None = None
    max_dt_s: float = 0.1

    def __post_init__(self) -> None:
        if not self.max_dt_s > 0:
            raise FusionError(f"max_dt_s must be > 0 s, got {self.max_dt_s}")
        if self.footprint is not None:
            fp = np.asarray(self.footprint, dtype=float)
            if fp.ndim != 2 or fp.shape[1] != 2 or fp.shape[0] < 3:
                raise FusionError(
                    "the footprint must be a polygon of at least 3 [x, y] corners (m)"
                )
            object.__setattr__(self, "footprint", fp)

    def alone_ns(self) -> int:
        """How far (ns) the other lidar's nearest turn must be for a turn to go out alone:
        :data:`ALONE_AFTER_S`, or ``3 × max_dt_s`` if more (so a pair's turns are decided
        together in a :class:`StreamingMerger`)."""
        return round(max(ALONE_AFTER_S, 3 * self.max_dt_s) * 1e9)

    def steps(self, front: LidarTurns, rear: LidarTurns) -> tuple[float, float, float]:
        """The grid step, then the front and rear lidars' own angular steps (rad), measured on
        each stream's first :data:`STEP_TURNS` turns with points: the grid's is the finer of
        the two; an own step that cannot be told is the grid's."""
        f, r = angular_step_rad(first_turns(front)), angular_step_rad(first_turns(rear))
        measured = [s for s in (f, r) if np.isfinite(s)]
        if not measured:
            raise FusionError("cannot tell the angular step: both streams have < 2 points per turn")
        grid = min(measured)
        return grid, (f if np.isfinite(f) else grid), (r if np.isfinite(r) else grid)


def _at(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``values[idx]``, 0 where ``idx`` is -1 (a side absent)."""
    if values.size == 0:
        return np.zeros(idx.size, dtype=values.dtype)
    return np.where(idx >= 0, values[np.maximum(idx, 0)], 0).astype(values.dtype)


def merge_pairs(
    front: LidarTurns,
    rear: LidarTurns,
    i_f: np.ndarray,
    i_r: np.ndarray,
    setup: MergeSetup,
    steps: tuple[float, float, float],
) -> tuple[LidarTurns, np.ndarray]:
    """Merge the given pairs of turns (-1 on one side: the other's turn alone) with
    ``steps`` (:meth:`MergeSetup.steps`, rad); returns the merged turns and a per-pair kept
    mask (False: the pose source does not cover a turn's first point, last point or the
    stamp)."""
    n_bins = max(8, round(TWO_PI / steps[0]))
    tc_f, tc_r = _at(turn_centres_ns(front), i_f), _at(turn_centres_ns(rear), i_r)
    stamp = np.where(i_r < 0, tc_f, np.where(i_f < 0, tc_r, _mid_ns(tc_f, tc_r)))
    kept = np.ones(stamp.size, dtype=bool)
    ref_pose = None
    pose_at = setup.pose_at
    if pose_at is not None and stamp.size:
        kept &= np.all(np.isfinite(np.column_stack(pose_at(stamp))), axis=1)
        for turns, idx in ((front, i_f), (rear, i_r)):
            have = idx >= 0
            first = turns.offset[idx[have]]
            last = first + np.maximum(turns.count.astype(np.int64)[idx[have]], 1) - 1
            for t in (turns.t_ns[first], turns.t_ns[last]):
                kept[have] &= np.isfinite(pose_at(t)[0])
        i_f, i_r, stamp = i_f[kept], i_r[kept], stamp[kept]
        ref_pose = pose_at(stamp)
    n_pairs = stamp.size
    merged_r = np.full((n_pairs, n_bins), np.inf)
    merged_i = np.zeros((n_pairs, n_bins), dtype=np.uint16)
    sides = (
        (front, i_f, setup.front_mount, steps[1]),
        (rear, i_r, setup.rear_mount, steps[2]),
    )
    for turns, idx, mount, own in sides:
        have = np.flatnonzero(idx >= 0)
        pts, pair = _pair_points(turns, idx[have])
        x, y, pts, pair = _to_body(turns, pts, have[pair], mount, pose_at, ref_pose)
        if setup.footprint is not None and x.size:
            out = ~points_in_polygon(x, y, setup.footprint)
            x, y, pts, pair = x[out], y[out], pts[out], pair[out]
        bearing = np.mod(np.arctan2(y, x), TWO_PI)
        r, i = _resample(bearing, np.hypot(x, y), turns.intensity[pts], pair, n_pairs, n_bins, own)
        nearer = r < merged_r
        merged_r = np.where(nearer, r, merged_r)
        merged_i = np.where(nearer, i, merged_i)
    width = TWO_PI / n_bins
    alone = np.where((i_f < 0) | (i_r < 0), int(TurnFlag.SINGLE_LIDAR), 0)
    out = LidarTurns(
        t_first_ns=stamp,
        device_ns=np.full(n_pairs, NO_DEVICE_TIME, dtype=np.int64),
        speed_hz=np.full(n_pairs, np.nan),
        count=np.full(n_pairs, n_bins),
        flags=(_at(front.flags, i_f) | _at(rear.flags, i_r) | alone).astype(np.uint16),
        angle=np.tile(np.arange(n_bins) * width, n_pairs),
        range=merged_r.ravel(),
        intensity=merged_i.ravel(),
        t_ns=np.repeat(stamp, n_bins),
    )
    return out, kept


def merge_scans(front: LidarTurns, rear: LidarTurns, setup: MergeSetup) -> MergeResult:
    """Pair and merge two whole streams into 360° scans in the body frame, each turn
    without a partner within :meth:`MergeSetup.alone_ns` alone (module docstring).

    Raises:
        FusionError: no angular step can be measured.
    """
    grid = grid_turns(front, rear)
    assert grid is not None  # final: always decided
    steps = setup.steps(*grid)
    centres = (turn_centres_ns(front), turn_centres_ns(rear))
    p_f, p_r = pair_nonempty(front, rear, setup.max_dt_s, centres)
    a_f = alone_turns(front, rear, p_f, centres, setup.alone_ns())
    a_r = alone_turns(rear, front, p_r, centres[::-1], setup.alone_ns())
    i_f, i_r = _with_alone(p_f, p_r, a_f, a_r, centres)
    parts = [
        merge_pairs(front, rear, i_f[k : k + CHUNK_PAIRS], i_r[k : k + CHUNK_PAIRS], setup, steps)
        for k in range(0, max(i_f.size, 1), CHUNK_PAIRS)
    ]
    merged = LidarTurns.concat([p[0] for p in parts])
    kept = np.concatenate([p[1] for p in parts])
    unpaired = front.n_turns - p_f.size - a_f.size, rear.n_turns - p_r.size - a_r.size
    step = TWO_PI / max(8, round(TWO_PI / steps[0]))
    return MergeResult(merged, i_f[kept], i_r[kept], *unpaired, int(np.sum(~kept)), step,
                       a_f.size, a_r.size)  # fmt: skip


class StreamingMerger:
    """Incremental merge for capture: push turns as they arrive, get merged turns back,
    equal to :func:`merge_scans` over the whole streams as long as each turn arrives before
    the other lidar's data ran ``alone_ns + 2 × max_dt_s`` past it (later ones are counted
    unpaired). A pair comes out about ``2 × max_dt_s`` plus one turn after its later turn,
    a lone turn ``alone_ns + 2 × max_dt_s`` after it, nothing before the grid is known
    (:func:`grid_turns`). Not thread-safe: call from one thread.

    Args:
        setup: mounts, footprint, pose, pairing window.
        on_alone: called with (stamp ns, ``"front"``/``"rear"``) at the first lone turn
            of a lidar and (stamp ns, None) at the first pair after lone turns.
    """

    def __init__(
        self, setup: MergeSetup, on_alone: Callable[[int, str | None], None] | None = None
    ) -> None:
        self.setup = setup
        self.on_alone = on_alone
        self._buf = {"front": LidarTurns.empty(), "rear": LidarTurns.empty()}
        self._done = (np.iinfo(np.int64).min, np.iinfo(np.int64).min)  # pairs', lone turns'
        self._steps: tuple[float, float, float] | None = None
        self._alone_side: str | None = None
        self._counted = {"front": np.empty(0, np.int64), "rear": np.empty(0, np.int64)}
        self.unpaired = {"front": 0, "rear": 0}
        self.alone = {"front": 0, "rear": 0}

    def push(self, which: str, turns: LidarTurns) -> LidarTurns:
        """Add ``turns`` of ``"front"`` or ``"rear"``; return the merged turns now final
        (maybe none). Turns centred at or before what was decided are counted unpaired."""
        if which not in self._buf:
            raise FusionError(f"push 'front' or 'rear' turns, not {which!r}")
        late = int(np.searchsorted(turn_centres_ns(turns), self._done[1], side="right"))
        if late:
            self.unpaired[which] += late
            start = int(turns.offset[late]) if late < turns.n_turns else turns.n_points
            turns = turns.select(slice(late, turns.n_turns), start, turns.n_points)
        self._buf[which] = LidarTurns.concat([self._buf[which], turns])
        sides = (self._buf["front"], self._buf["rear"])
        centres = (turn_centres_ns(sides[0]), turn_centres_ns(sides[1]))
        ends = [int(tc[-1]) for tc in centres if tc.size]
        if not ends:
            return _NO_TURNS
        if self._steps is None:
            grid = grid_turns(*sides, final=False)
            if grid is None:
                return _NO_TURNS
            self._steps = self.setup.steps(*grid)
        two_dt, alone = 2 * round(self.setup.max_dt_s * 1e9), self.setup.alone_ns()
        stale = max(ends) - alone - two_dt  # the other lidar is silent or late
        low = min(ends) if len(ends) == 2 else stale
        return self._emit((max(low - two_dt, stale), max(low - alone, stale)), centres)

    def flush(self) -> LidarTurns:
        """Merge everything still pending (at the end of a capture)."""
        if not (self._buf["front"].n_turns or self._buf["rear"].n_turns):
            return _NO_TURNS
        if self._steps is None:
            grid = grid_turns(self._buf["front"], self._buf["rear"])
            assert grid is not None  # final: always decided
            self._steps = self.setup.steps(*grid)
        big = int(np.iinfo(np.int64).max)
        return self._emit((big, big))

    def _emit(
        self, horizons: tuple[int, int], centres: tuple[np.ndarray, np.ndarray] | None = None
    ) -> LidarTurns:
        """The pairs whose later turn is at or before ``horizons[0]`` (ns) and the lone
        turns at or before ``horizons[1]`` merged, the turns decided unpaired counted, the
        rest kept; ``centres``: the buffers' turn centres (ns) when :meth:`push` has them."""
        assert self._steps is not None
        front, rear = self._buf["front"], self._buf["rear"]
        tc = centres or (turn_centres_ns(front), turn_centres_ns(rear))
        p_f, p_r = pair_nonempty(front, rear, self.setup.max_dt_s, tc)
        # a partner that came after its turn was decided (a late lidar) pairs no more
        stale = np.isin(tc[0][p_f], self._counted["front"])
        stale |= np.isin(tc[1][p_r], self._counted["rear"])
        p_f, p_r = p_f[~stale], p_r[~stale]
        latest = np.maximum(tc[0][p_f], tc[1][p_r])
        new = (latest <= horizons[0]) & (latest > self._done[0])
        lone = []
        for name, own, other, k, used in (
            ("front", front, rear, 0, p_f), ("rear", rear, front, 1, p_r)
        ):
            decided = (tc[k] <= horizons[1]) & (tc[k] > self._done[1])
            a = alone_turns(own, other, used, (tc[k], tc[1 - k]), self.setup.alone_ns())
            a = a[decided[a]]
            decided[used] = False
            self.unpaired[name] += int(decided.sum()) - a.size
            self.alone[name] += a.size
            self._counted[name] = np.concatenate((self._counted[name], tc[k][decided]))
            lone.append(a)
        i_f, i_r = _with_alone(p_f[new], p_r[new], lone[0], lone[1], tc)
        merged = _NO_TURNS  # most pushes decide no pair: no merge to pay for
        if i_f.size:
            merged, kept = merge_pairs(front, rear, i_f, i_r, self.setup, self._steps)
            self._report(merged.t_first_ns, i_f[kept], i_r[kept])
        self._done = (max(self._done[0], horizons[0]), max(self._done[1], horizons[1]))
        keep_from = self._done[1] - self.setup.alone_ns()
        for name, t_c in (("front", tc[0]), ("rear", tc[1])):
            self._counted[name] = self._counted[name][self._counted[name] >= keep_from]
            k = int(np.searchsorted(t_c, keep_from, side="left"))
            if k:
                t = self._buf[name]
                start = int(t.offset[k]) if k < t.n_turns else t.n_points
                self._buf[name] = t.select(slice(k, t.n_turns), start, t.n_points)
        return merged

    def _report(self, stamps: np.ndarray, i_f: np.ndarray, i_r: np.ndarray) -> None:
        """Call :attr:`on_alone` where the merged turns change between pairs and lone turns."""
        for stamp, f, r in zip(stamps.tolist(), i_f.tolist(), i_r.tolist(), strict=True):
            side = None if f >= 0 and r >= 0 else ("front" if f >= 0 else "rear")
            if side != self._alone_side:
                self._alone_side = side
                if self.on_alone is not None:
                    self.on_alone(stamp, side)
