"""Merge two lidar scans (front and rear) into one 360° scan in the robot frame
(docs/LIDAR.md): one :class:`~sensorbench.logs.LidarTurns` turn per pair of mutually
nearest turns, every point stamped with the pair's stamp, angles in the body frame (rad
CCW, [0, 2π)), ``device_ns = NO_DEVICE_TIME``, ``speed_hz = nan``, both turns' flags ORed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sensorbench.drivers.robot_config import Mount
from sensorbench.errors import FusionError
from sensorbench.fusion.pod_drive import yaw_from_quat
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, PoseBatch
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
"""How far (s) one lidar's turns may run ahead of the other's in :class:`StreamingMerger`
before its older turns are decided unpaired: a lidar that stopped (unplugged, or never up
under ``--allow-missing``) does not make the merger hold the other's turns without
bound. Turns that arrive later than this behind the other lidar's are unpaired."""


def first_turns(turns: LidarTurns, n: int = STEP_TURNS) -> LidarTurns:
    """The turns up to and including the ``n``-th that holds points (all if fewer)."""
    full = np.flatnonzero(turns.count > 0)
    if full.size <= n:
        return turns
    last = int(full[n - 1])
    return turns.select(slice(0, last + 1), 0, int(turns.offset[last] + turns.count[last]))


@dataclass
class MergeResult:
    """One merged turn per pair, the input turns that formed each pair (``front_index``,
    ``rear_index``), the turns left without a partner within ``max_dt_s``, the pairs the
    pose source does not cover (``outside_pose``) and the grid step (rad)."""

    turns: LidarTurns
    front_index: np.ndarray
    rear_index: np.ndarray
    unpaired_front: int
    unpaired_rear: int
    outside_pose: int
    step_rad: float


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
        j = np.clip(np.searchsorted(dst, src), 1, dst.size - 1)
        return np.where(np.abs(src - dst[j - 1]) <= np.abs(dst[j] - src), j - 1, j)

    a_to_b = nearest(ta, tb)
    b_to_a = nearest(tb, ta)
    ia = np.arange(ta.size)
    ok = (b_to_a[a_to_b] == ia) & (np.abs(tb[a_to_b] - ta) <= max_dt_ns)
    return ia[ok], a_to_b[ok]


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
    """Even-odd test: which points (m) lie inside the closed polygon (V, 2)."""
    poly = np.asarray(polygon, dtype=float)
    inside = np.zeros(np.shape(x), dtype=bool)
    px, py = poly[:, 0], poly[:, 1]
    qx, qy = np.roll(px, -1), np.roll(py, -1)
    for x0, y0, x1, y1 in zip(px, py, qx, qy, strict=True):
        crosses = (y0 > y) != (y1 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            xc = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
        inside ^= crosses & (x < xc)
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
    first = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
    last = np.r_[first[1:], pair.size] - 1
    key = np.concatenate([key[last] - TWO_PI, key, key[first] + TWO_PI])
    ext = np.concatenate([last, np.arange(pair.size), first])
    order = np.argsort(key, kind="stable")
    key, ext = key[order], ext[order]
    r_e, i_e, p_e = rng[ext], inten[ext], pair[ext]

    grid_pair = np.repeat(np.arange(n_pairs), n_bins)
    g = grid_pair * span + np.tile(np.arange(n_bins) * width, n_pairs)
    j = np.clip(np.searchsorted(key, g, side="right"), 1, key.size - 1)
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


def merge_pairs(
    front: LidarTurns,
    rear: LidarTurns,
    i_f: np.ndarray,
    i_r: np.ndarray,
    setup: MergeSetup,
    steps: tuple[float, float, float],
) -> tuple[LidarTurns, np.ndarray]:
    """Merge the given pairs of turns with ``steps`` (:meth:`MergeSetup.steps`, rad);
    returns the merged turns and a per-pair kept mask (False: the pose source does not
    cover the pair's first point, last point or stamp)."""
    n_bins = max(8, round(TWO_PI / steps[0]))
    tc_f, tc_r = turn_centres_ns(front)[i_f], turn_centres_ns(rear)[i_r]
    stamp = _mid_ns(tc_f, tc_r)
    kept = np.ones(stamp.size, dtype=bool)
    ref_pose = None
    pose_at = setup.pose_at
    if pose_at is not None and stamp.size:
        kept &= np.all(np.isfinite(np.column_stack(pose_at(stamp))), axis=1)
        for turns, idx in ((front, i_f), (rear, i_r)):
            first = turns.offset[idx]
            last = first + np.maximum(turns.count.astype(np.int64)[idx], 1) - 1
            for t in (turns.t_ns[first], turns.t_ns[last]):
                kept &= np.isfinite(pose_at(t)[0])
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
        pts, pair = _pair_points(turns, idx)
        x, y, pts, pair = _to_body(turns, pts, pair, mount, pose_at, ref_pose)
        if setup.footprint is not None and x.size:
            out = ~points_in_polygon(x, y, setup.footprint)
            x, y, pts, pair = x[out], y[out], pts[out], pair[out]
        bearing = np.mod(np.arctan2(y, x), TWO_PI)
        r, i = _resample(bearing, np.hypot(x, y), turns.intensity[pts], pair, n_pairs, n_bins, own)
        nearer = r < merged_r
        merged_r = np.where(nearer, r, merged_r)
        merged_i = np.where(nearer, i, merged_i)
    width = TWO_PI / n_bins
    out = LidarTurns(
        t_first_ns=stamp,
        device_ns=np.full(n_pairs, NO_DEVICE_TIME, dtype=np.int64),
        speed_hz=np.full(n_pairs, np.nan),
        count=np.full(n_pairs, n_bins),
        flags=front.flags[i_f] | rear.flags[i_r],
        angle=np.tile(np.arange(n_bins) * width, n_pairs),
        range=merged_r.ravel(),
        intensity=merged_i.ravel(),
        t_ns=np.repeat(stamp, n_bins),
    )
    return out, kept


def merge_scans(front: LidarTurns, rear: LidarTurns, setup: MergeSetup) -> MergeResult:
    """Pair and merge two whole streams into 360° scans in the body frame (module docstring).

    Raises:
        FusionError: no angular step can be measured.
    """
    steps = setup.steps(front, rear)
    i_f, i_r = pair_nonempty(front, rear, setup.max_dt_s)
    parts = [
        merge_pairs(front, rear, i_f[k : k + CHUNK_PAIRS], i_r[k : k + CHUNK_PAIRS], setup, steps)
        for k in range(0, max(i_f.size, 1), CHUNK_PAIRS)
    ]
    merged = LidarTurns.concat([p[0] for p in parts])
    kept = np.concatenate([p[1] for p in parts])
    unpaired = int(front.n_turns - i_f.size), int(rear.n_turns - i_r.size)
    step = TWO_PI / max(8, round(TWO_PI / steps[0]))
    return MergeResult(merged, i_f[kept], i_r[kept], *unpaired, int(np.sum(~kept)), step)


class StreamingMerger:
    """Incremental merge for capture: push turns as they arrive, get merged turns back,
    equal to :func:`merge_scans` over the whole streams, delayed by about ``2 × max_dt_s``
    plus one turn (and until both streams have :data:`STEP_TURNS` turns with points), as
    long as neither lidar falls :data:`MAX_LAG_S` behind the other. Not thread-safe: call
    from one thread."""

    def __init__(self, setup: MergeSetup) -> None:
        self.setup = setup
        self._buf = {"front": LidarTurns.empty(), "rear": LidarTurns.empty()}
        self._done_ns = np.iinfo(np.int64).min
        self._steps: tuple[float, float, float] | None = None
        self.unpaired = {"front": 0, "rear": 0}

    def push(self, which: str, turns: LidarTurns) -> LidarTurns:
        """Add ``turns`` of ``"front"`` or ``"rear"``; return the pairs now final (maybe none)."""
        if which not in self._buf:
            raise FusionError(f"push 'front' or 'rear' turns, not {which!r}")
        self._buf[which] = LidarTurns.concat([self._buf[which], turns])
        sides = (self._buf["front"], self._buf["rear"])
        centres = (turn_centres_ns(sides[0]), turn_centres_ns(sides[1]))
        ends = [int(tc[-1]) for tc in centres if tc.size]
        if not ends:
            return LidarTurns.empty()
        ready = len(ends) == 2 and (
            self._steps is not None
            or min(int(np.count_nonzero(t.count > 0)) for t in sides) >= STEP_TURNS
        )
        horizon = min(ends) - 2 * round(self.setup.max_dt_s * 1e9) if ready else None
        stale = max(ends) - round(MAX_LAG_S * 1e9)  # the side ahead gives up older turns
        if len(ends) < 2 or min(ends) < stale:
            horizon = stale if horizon is None else max(horizon, stale)
        return LidarTurns.empty() if horizon is None else self._emit(horizon, ready, centres)

    def flush(self) -> LidarTurns:
        """Merge every pair still pending (at the end of a capture)."""
        return self._emit(np.iinfo(np.int64).max, merge=True)

    def _emit(
        self, horizon_ns: int, merge: bool, centres: tuple[np.ndarray, np.ndarray] | None = None
    ) -> LidarTurns:
        """The pairs final at ``horizon_ns`` merged (when ``merge``: the angular steps are
        known or measurable), the turns it decides unpaired counted, the rest kept;
        ``centres``: the buffers' turn centres (ns) when :meth:`push` computed them."""
        front, rear = self._buf["front"], self._buf["rear"]
        tc_f, tc_r = centres or (turn_centres_ns(front), turn_centres_ns(rear))
        i_f = i_r = np.empty(0, np.int64)
        merged = LidarTurns.empty()
        if merge and front.n_turns and rear.n_turns:
            if self._steps is None:
                self._steps = self.setup.steps(front, rear)
            i_f, i_r = pair_nonempty(front, rear, self.setup.max_dt_s, (tc_f, tc_r))
            latest = np.maximum(tc_f[i_f], tc_r[i_r])
            new = (latest <= horizon_ns) & (latest > self._done_ns)
            merged, _ = merge_pairs(front, rear, i_f[new], i_r[new], self.setup, self._steps)
        for name, tc, used in (("front", tc_f, i_f), ("rear", tc_r, i_r)):
            decided = (tc <= horizon_ns) & (tc > self._done_ns)
            decided[used] = False
            self.unpaired[name] += int(decided.sum())
        if horizon_ns > self._done_ns:
            self._done_ns = horizon_ns
        keep_from = self._done_ns - 2 * round(self.setup.max_dt_s * 1e9)
        for name, tc in (("front", tc_f), ("rear", tc_r)):
            k = int(np.searchsorted(tc, keep_from, side="left"))
            if k:
                t = self._buf[name]
                start = int(t.offset[k]) if k < t.n_turns else t.n_points
                self._buf[name] = t.select(slice(k, t.n_turns), start, t.n_points)
        return merged
