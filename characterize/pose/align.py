"""Associate a pose sensor with its reference (mocap) in time and space; per-axis error
(:data:`ERROR_FRAME`), ATE and RPE as evo computes them. Reference time = sensor time +
``offset_s``; the frame maps ``p_ref ≈ R p_sensor + t`` with a body rotation ``B``.
docs/POSE_ERROR.md, "Time offset and frame" and "ATE and RPE"."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from sensorbench.errors import FitError

ERROR_FRAME = (
    "x, y, z: sensor minus reference position in the reference (mocap) world frame, m; "
    "roll, pitch, yaw: rotation vector of R_ref^-1 R_sensor about the reference body "
    "axes x, y, z, rad"
)


# Unit quaternions (x, y, z, w) as arrays, in scipy's conventions (``quat_mul(a, b)`` is
# ``a * b``, rotation vectors in rad with angle in [0, π]): ~30 ns a rotation against
# scipy Rotation's ~1.5 µs, for the thousands of poses a fit composes and interpolates.


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a ⊗ b`` for quaternions ``(..., 4)`` (broadcast), x y z w."""
    ax, ay, az, aw = np.moveaxis(np.asarray(a, dtype=float), -1, 0)
    bx, by, bz, bw = np.moveaxis(np.asarray(b, dtype=float), -1, 0)
    return np.stack(
        [
            aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz,
        ],
        axis=-1,
    )


def quat_inv(q: np.ndarray) -> np.ndarray:
    """The inverse (conjugate) of unit quaternions ``(..., 4)``."""
    out = np.array(q, dtype=float)
    out[..., :3] *= -1.0
    return out


def quat_from_rotvec(v: np.ndarray) -> np.ndarray:
    """Quaternions ``(..., 4)`` of rotation vectors ``(..., 3)`` (rad)."""
    v = np.asarray(v, dtype=float)
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = 0.5 * angle
    # sin(θ/2)/θ, its series below 1e-4 rad (error < 1e-17)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(angle > 1e-4, np.sin(half) / angle, 0.5 - angle * angle / 48.0)
    return np.concatenate([v * k, np.cos(half)], axis=-1)


def quat_as_rotvec(q: np.ndarray) -> np.ndarray:
    """Rotation vectors ``(..., 3)`` (rad, angle in [0, π]) of quaternions ``(..., 4)``."""
    q = np.asarray(q, dtype=float)
    q = np.where(q[..., 3:4] < 0, -q, q)  # the same rotation with w ≥ 0: angle ≤ π
    s = np.linalg.norm(q[..., :3], axis=-1, keepdims=True)
    angle = 2.0 * np.arctan2(s, q[..., 3:4])
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(s > 1e-12, angle / s, 2.0 / np.maximum(q[..., 3:4], 1e-300))
    return q[..., :3] * k


def quat_normalize(q: np.ndarray) -> np.ndarray:
    """Quaternions scaled to unit norm."""
    q = np.asarray(q, dtype=float)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


@dataclass
class PoseTrack:
    """Timed poses: ``t_s`` (N,) s, ``position`` (N, 3) m, ``quat_xyzw`` (N, 4)."""

    t_s: np.ndarray
    position: np.ndarray
    quat_xyzw: np.ndarray
    valid: np.ndarray | None = None
    flags: np.ndarray | None = None
    name: str = ""

    def __post_init__(self) -> None:
        self.t_s = np.asarray(self.t_s, dtype=np.float64)
        self.position = np.asarray(self.position, dtype=np.float64)
        self.quat_xyzw = np.asarray(self.quat_xyzw, dtype=np.float64)
        n = self.t_s.shape[0]
        if self.position.shape != (n, 3) or self.quat_xyzw.shape != (n, 4):
            raise FitError(f"{self.name or 'track'}: position (N,3) and quat (N,4) required")
        self.valid = (
            np.ones(n, dtype=bool) if self.valid is None else np.asarray(self.valid, dtype=bool)
        )
        self.valid &= np.all(np.isfinite(self.position), axis=1)
        self.valid &= np.all(np.isfinite(self.quat_xyzw), axis=1)
        norms = np.linalg.norm(np.nan_to_num(self.quat_xyzw), axis=1)
        self.valid &= norms > 0.5
        if self.flags is not None:
            self.flags = np.asarray(self.flags, dtype=np.uint8)

    def _memo(self, name: str, build: Callable[[], Any]) -> Any:
        """``build()`` once, again only when one of the track's arrays is replaced."""
        arrays = (self.t_s, self.position, self.quat_xyzw, self.valid, self.flags)
        cached = self.__dict__.get(name)
        if cached is None or any(a is not b for a, b in zip(cached[0], arrays, strict=True)):
            cached = (arrays, build())
            self.__dict__[name] = cached
        return cached[1]

    def interpolator(self) -> Interpolator:
        """The track prepared for interpolation (built once)."""
        return self._memo("_interpolator", lambda: Interpolator(self))

    def only_valid(self) -> PoseTrack:
        """The valid samples, sorted by time with duplicates removed (computed once)."""
        return self._memo("_only_valid", self._sorted_valid)

    def _sorted_valid(self) -> PoseTrack:
        order = np.argsort(self.t_s, kind="stable")
        kept = np.flatnonzero(np.asarray(self.valid)[order])
        first = np.ones(kept.size, bool)  # the first of each time (none when nothing is valid)
        first[1:] = np.diff(self.t_s[order[kept]]) > 0
        kept = kept[first]
        if kept.size < 3:
            raise FitError(f"{self.name or 'track'}: fewer than 3 valid poses")
        idx = order[kept]
        out = PoseTrack(
            self.t_s[idx], self.position[idx], self.quat_xyzw[idx], None,
            None if self.flags is None else carry_flags(self.flags[order], kept), self.name,
        )
        out._memo("_only_valid", lambda: out)
        return out


def carry_flags(flags: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The flags of the samples ``kept`` (ascending indices into ``flags``, in time order),
    each with those of the samples dropped since the previous kept one OR-ed in: a flag on
    a dropped sample moves to the next kept one."""
    if kept.size == 0:
        return flags[:0]
    return np.bitwise_or.reduceat(flags[: kept[-1] + 1], np.r_[0, kept[:-1] + 1])


RATE_SPAN_S = 0.02
"""Span of the differences that give the reference's velocities (:meth:`Interpolator.rates`)."""


class Interpolator:
    """A reference track prepared for repeated interpolation (:meth:`__call__`).

    Rotations are interpolated spherically between neighbouring samples, as
    :class:`scipy.spatial.transform.Slerp` does (``q_k ⊗ exp(α log(q_k⁻¹ q_{k+1}))``),
    in the vectorised quaternion forms above."""

    def __init__(self, ref: PoseTrack) -> None:
        self.ref = ref.only_valid()
        self._q = quat_normalize(self.ref.quat_xyzw)
        self._step = quat_as_rotvec(quat_mul(quat_inv(self._q[:-1]), self._q[1:]))
        self._rates: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def rotation(self, t_s: np.ndarray) -> np.ndarray:
        """Quaternions ``(M, 4)`` at ``t_s`` (clipped to the track's span)."""
        t = self.ref.t_s
        tc = np.clip(np.asarray(t_s, dtype=np.float64), t[0], t[-1])
        k = np.clip(np.searchsorted(t, tc, side="right") - 1, 0, t.size - 2)
        alpha = (tc - t[k]) / (t[k + 1] - t[k])
        return quat_mul(self._q[k], quat_from_rotvec(alpha[:, None] * self._step[k]))

    def rates(self, t_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Velocity (M, 3) m/s in the world frame and angular velocity (M, 3) rad/s in
        the body frame at ``t_s``: differences of samples about ``RATE_SPAN_S`` apart
        (``R(t + dt) ≈ R(t) exp(ω dt)``), linearly interpolated."""
        if self._rates is None:
            t = self.ref.t_s
            step = max(1, round(0.5 * RATE_SPAN_S / float(np.median(np.diff(t)))))
            a, b = np.arange(t.size - 2 * step), np.arange(2 * step, t.size)
            dt = (t[b] - t[a])[:, None]
            omega = quat_as_rotvec(quat_mul(quat_inv(self._q[a]), self._q[b])) / dt
            vel = (self.ref.position[b] - self.ref.position[a]) / dt
            self._rates = (0.5 * (t[a] + t[b]), vel, omega)
        mid, vel, omega = self._rates
        v = np.stack([np.interp(t_s, mid, vel[:, i]) for i in range(3)], axis=1)
        w = np.stack([np.interp(t_s, mid, omega[:, i]) for i in range(3)], axis=1)
        return v, w

    def __call__(
        self, t_s: np.ndarray, max_gap_s: float | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Reference pose at ``t_s``: (position (M,3), quat_xyzw (M,4), inside (M,)).

        ``inside`` is False outside the reference and in its gaps longer than
        :func:`gap_limit_s` (``max_gap_s`` when given)."""
        ref = self.ref
        limit = gap_limit_s(ref, max_gap_s)
        t_s = np.asarray(t_s, dtype=np.float64)
        inside = (t_s >= ref.t_s[0]) & (t_s <= ref.t_s[-1])
        j = np.clip(np.searchsorted(ref.t_s, t_s), 1, ref.t_s.size - 1)
        inside &= (ref.t_s[j] - ref.t_s[j - 1]) <= limit
        tc = np.clip(t_s, ref.t_s[0], ref.t_s[-1])
        pos = np.stack([np.interp(tc, ref.t_s, ref.position[:, i]) for i in range(3)], axis=1)
        return pos, self.rotation(tc), inside


GAP_SPACINGS = 3.0
"""A gap in a track longer than this many of its median sample spacings is a dropout."""

MIN_RATE_WINDOW_S = 0.2
"""Shortest window across which the time-offset search takes angular rates (s)."""


def sample_spacing_s(track: PoseTrack) -> float:
    """Median spacing of a track's valid samples (s)."""
    return float(track._memo("_spacing", lambda: np.median(np.diff(track.only_valid().t_s))))


def gap_limit_s(track: PoseTrack, max_gap_s: float | None = None) -> float:
    """The longest gap interpolated across in ``track`` (s): ``max_gap_s`` when given,
    else :data:`GAP_SPACINGS` × its median sample spacing."""
    return float(max_gap_s) if max_gap_s is not None else GAP_SPACINGS * sample_spacing_s(track)


def rate_window_s(sensor: PoseTrack, ref: PoseTrack) -> float:
    """Window of the angular rates: two spacings of the slower track, at least 0.2 s."""
    return max(MIN_RATE_WINDOW_S, 2.0 * max(sample_spacing_s(sensor), sample_spacing_s(ref)))


def umeyama(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rotation R (3,3) and translation t (3,) minimising Σ |R src + t - dst|² (no scale)."""
    mu_s, mu_d = src.mean(axis=0), dst.mean(axis=0)
    cov = (dst - mu_d).T @ (src - mu_s) / src.shape[0]
    u, _, vt = np.linalg.svd(cov)
    s = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        s[2, 2] = -1.0
    rot = u @ s @ vt
    return rot, mu_d - rot @ mu_s


def planar_fit(src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Yaw rotation about z and translation minimising the same cost (planar robots)."""
    mu_s, mu_d = src.mean(axis=0), dst.mean(axis=0)
    a, b = src[:, :2] - mu_s[:2], dst[:, :2] - mu_d[:2]
    yaw = np.arctan2(np.sum(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]), np.sum(a * b))
    rot = Rotation.from_euler("z", yaw).as_matrix()
    return rot, mu_d - rot @ mu_s


@dataclass
class Alignment:
    """Time offset (reference = sensor + offset_s) and frame transform p_ref ≈ R p + t."""

    offset_s: float
    rotation: np.ndarray
    translation: np.ndarray
    body_rotation: np.ndarray
    mode: str  # "se3", "planar" or "none"
    time_offset_method: str  # "angular-rate xcorr + refine", "given"
    rate_correlation: float
    residual_rms_m: float
    n_pairs: int
    n_dropped: int
    max_offset_s: float = math.nan
    """Half-width of the offset search (s); nan when the offset was given."""
    offset_at_search_limit: bool = False
    """The estimated offset lies within :data:`LIMIT_MARGIN_S` of ±max_offset_s: the true
    offset may be outside the searched range (widen ``--max-offset`` or give it)."""
    max_gap_s: float = math.nan
    """The reference's gap limit used for the pairs (s; :func:`gap_limit_s`)."""
    rate_window_s: float = math.nan
    """Window of the angular rates of the offset search (s); nan when given."""
    offset_se_s: float = math.nan
    """Standard error of ``offset_s`` (s); nan when the offset was given or only
    cross-correlated (:mod:`gls_align` gives it)."""

    def to_dict(self) -> dict:
        """JSON/TOML-ready."""
        d = asdict(self)
        d["rotation"] = self.rotation.tolist()
        d["translation"] = self.translation.tolist()
        d["body_rotation"] = self.body_rotation.tolist()
        d["body_rotation_rpy_deg"] = (
            Rotation.from_matrix(self.body_rotation).as_euler("xyz", True).tolist()
        )
        d["rotation_rpy_deg"] = Rotation.from_matrix(self.rotation).as_euler("xyz", True).tolist()
        return d


def _fit_frame(src: np.ndarray, dst: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    if mode == "se3":
        return umeyama(src, dst)
    if mode == "planar":
        return planar_fit(src, dst)
    if mode == "none":
        return np.eye(3), np.zeros(3)
    raise FitError(f"unknown alignment mode {mode!r} (se3, planar or none)")


def windowed_rate(
    track: PoseTrack, grid: np.ndarray, window_s: float, max_gap_s: float | None = None
) -> np.ndarray:
    """|ω| (rad/s) at ``grid`` times from the rotation across ``window_s`` (s), which does
    not amplify orientation noise by the sample rate as differencing samples does; ``nan``
    where the window leaves the track or an end falls in a gap (:func:`gap_limit_s`)."""
    interp = track.interpolator()
    t = interp.ref.t_s
    limit = gap_limit_s(track, max_gap_s)
    a, b = grid - 0.5 * window_s, grid + 0.5 * window_s
    ok = (a >= t[0]) & (b <= t[-1])
    for end in (a, b):
        j = np.clip(np.searchsorted(t, end), 1, t.size - 1)
        ok &= (t[j] - t[j - 1]) <= limit
    out = np.full(grid.size, np.nan)
    if ok.any():
        rel = quat_mul(quat_inv(interp.rotation(a[ok])), interp.rotation(b[ok]))
        out[ok] = np.linalg.norm(quat_as_rotvec(rel), axis=1) / window_s
    return out


def _reloc_mask(track: PoseTrack, grid: np.ndarray, window_s: float) -> np.ndarray:
    """True at grid times whose rate window contains a flagged relocalization."""
    if track.flags is None:
        return np.zeros(grid.size, dtype=bool)
    t = track.t_s[(np.asarray(track.flags) & 1) > 0]
    if t.size == 0:
        return np.zeros(grid.size, dtype=bool)
    lo = np.searchsorted(t, grid - 0.5 * window_s - 1e-9)
    hi = np.searchsorted(t, grid + 0.5 * window_s + 1e-9)
    return hi > lo


def _correlation(a: np.ndarray, b: np.ndarray) -> float:
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 20:
        return -np.inf
    x, y = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = np.sqrt(np.sum(x * x) * np.sum(y * y))
    return float(np.sum(x * y) / den) if den > 0 else -np.inf


def _peak(lags_s: np.ndarray, corr: np.ndarray) -> tuple[float, float]:
    """Lag of the correlation peak, refined by a parabola through its neighbours."""
    i = int(np.argmax(corr))
    step = float(lags_s[1] - lags_s[0]) if lags_s.size > 1 else 0.0
    shift = 0.0
    if 0 < i < lags_s.size - 1 and np.all(np.isfinite(corr[i - 1 : i + 2])):
        c0, c1, c2 = corr[i - 1], corr[i], corr[i + 1]
        den = c0 - 2 * c1 + c2
        if den < 0:
            shift = 0.5 * (c0 - c2) / den
    return float(lags_s[i] + shift * step), float(corr[i])


LIMIT_MARGIN_S = 0.005
"""An estimated offset within this margin (s) of the search limit is flagged
(:attr:`Alignment.offset_at_search_limit`)."""


def offset_at_limit(offset_s: float, max_offset_s: float) -> bool:
    """Whether ``offset_s`` lies within :data:`LIMIT_MARGIN_S` of the ±``max_offset_s`` limit."""
    return abs(offset_s) >= max_offset_s - LIMIT_MARGIN_S


def estimate_time_offset(
    sensor: PoseTrack, ref: PoseTrack, max_offset_s: float = 0.5, window_s: float | None = None,
    step_s: float = 0.001, max_gap_s: float | None = None,
) -> tuple[float, float]:
    """(offset_s, peak normalised correlation) from angular-rate magnitudes.

    Rates across ``window_s`` (default :func:`rate_window_s`) on a common grid, the
    sensor's windows holding a flagged relocalization left out; lags up to
    ``max_offset_s`` every ``step_s``, and a parabola through the peak.

    Raises:
        FitError: naming the cause: no overlap, rates that cannot be taken (samples too
            sparse for the gap limit), or tracks that never turn."""
    sensor, ref = sensor.only_valid(), ref.only_valid()
    window_s = rate_window_s(sensor, ref) if window_s is None else window_s
    lo = max(sensor.t_s[0], ref.t_s[0] - max_offset_s)
    hi = min(sensor.t_s[-1], ref.t_s[-1] + max_offset_s)
    if hi - lo < 4 * window_s + 2 * max_offset_s:
        raise FitError(
            f"sensor ({sensor.t_s[0]:.3f}..{sensor.t_s[-1]:.3f} s) and reference "
            f"({ref.t_s[0]:.3f}..{ref.t_s[-1]:.3f} s) overlap for {max(hi - lo, 0.0):.3f} s, "
            f"less than the {4 * window_s + 2 * max_offset_s:.3f} s the offset search needs "
            "(check their clocks, or give --time-offset)"
        )
    grid = np.arange(lo, hi, step_s)
    a = windowed_rate(sensor, grid, window_s, max_gap_s)
    relocs = _reloc_mask(sensor, grid, window_s)
    if np.count_nonzero(np.isfinite(a) & ~relocs) < 20 <= np.count_nonzero(np.isfinite(a)):
        raise FitError(
            f"{sensor.name or 'track'}: every {window_s:.3f}-s window of its samples holds a "
            "flagged relocalization, so the angular rate it jumps across cannot be "
            "compared with the reference's; give --time-offset"
        )
    a[relocs] = np.nan
    n_lag = int(np.ceil(max_offset_s / step_s))
    ref_grid = grid[0] + step_s * np.arange(-n_lag, grid.size + n_lag + 1)
    b_all = windowed_rate(ref, ref_grid, window_s, max_gap_s)
    for track, rates in ((sensor, a), (ref, b_all)):
        if np.count_nonzero(np.isfinite(rates)) < 20:
            raise FitError(
                f"{track.name or 'track'}: no {window_s:.3f}-s window of its samples "
                f"(median spacing {sample_spacing_s(track):.3f} s) lies clear of its gaps "
                f"(> {gap_limit_s(track, max_gap_s):.3f} s): its angular rate cannot be "
                "taken; widen --max-gap, or give --time-offset"
            )
    for track, rates in ((sensor, a), (ref, b_all)):
        if np.nanstd(rates) < 1e-9:
            raise FitError(
                f"{track.name or 'track'} never turns (its angular rate is constant), so "
                "the time offset cannot be found from rotation; give it (--time-offset) "
                "or record some turning"
            )

    lags = np.arange(-n_lag, n_lag + 1)
    corr = np.array([_correlation(a, b_all[n_lag + i : n_lag + i + grid.size]) for i in lags])
    if not np.isfinite(corr).any():
        raise FitError(
            f"the sensor's and the reference's rate windows ({window_s:.3f} s) never "
            "overlap at any lag within ±max-offset, so their time offset cannot be "
            "found; give it (--time-offset)"
        )
    best = int(lags[int(np.argmax(corr))])
    near = np.arange(max(best - 2, -n_lag), min(best + 2, n_lag) + 1)  # the peak's neighbours
    return _peak(near * step_s, corr[near + n_lag])


def align_sessions(
    pairs: list[tuple[PoseTrack, PoseTrack]], mode: str, offset_s: float | Sequence[float],
    max_gap_s: float | None = None,
) -> list[Alignment]:
    """Align several sessions of one sensor at their time offsets (s; one for all, or one
    each; :func:`estimate_time_offset` finds one): one frame transform fitted to all."""
    if not pairs:
        raise FitError("no sessions to align")
    prepared = []
    offsets = list(offset_s) if isinstance(offset_s, (list, tuple)) else [offset_s] * len(pairs)
    for (sensor, ref), given in zip(pairs, offsets, strict=True):
        sensor, ref = sensor.only_valid(), ref.only_valid()
        offset = float(given)
        pos, quat, inside = ref.interpolator()(sensor.t_s + offset, max_gap_s)
        if inside.sum() < 3:
            raise FitError(
                f"{sensor.name or 'sensor'}: {int(inside.sum())} of its {inside.size} poses "
                f"fall inside the reference track ({ref.t_s[0]:.3f}..{ref.t_s[-1]:.3f} s, gaps "
                f"> {gap_limit_s(ref, max_gap_s):.3f} s left out) at offset {offset:.3f} s; "
                "fewer than 3 cannot be aligned"
            )
        prepared.append((sensor, offset, pos, quat, inside, ref))
    src = np.concatenate([p[0].position[p[4]] for p in prepared])
    dst = np.concatenate([p[2][p[4]] for p in prepared])
    rot, t = _fit_frame(src, dst, mode)
    body = np.eye(3)
    if mode != "none":
        r_s = Rotation.from_matrix(rot) * Rotation.from_quat(
            np.concatenate([p[0].quat_xyzw[p[4]] for p in prepared])
        )
        r_ref = Rotation.from_quat(np.concatenate([p[3][p[4]] for p in prepared]))
        mean = (r_s.inv() * r_ref).mean()
        if mode == "planar":
            mean = Rotation.from_euler("z", mean.as_euler("zyx")[0])
        body = mean.as_matrix()
    out = []
    for sensor, offset, pos, _, inside, ref in prepared:
        d = sensor.position[inside] @ rot.T + t - pos[inside]
        out.append(Alignment(
            offset, rot, t, body, mode, "given", math.nan,
            float(np.sqrt(np.mean(np.sum(d * d, axis=1)))), int(inside.sum()),
            int((~inside).sum()), max_gap_s=gap_limit_s(ref, max_gap_s),
        ))
    return out


def pose_errors(
    sensor: PoseTrack, ref: PoseTrack, alignment: Alignment, max_gap_s: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sensor t_s (M,), error (M, 6) as in :data:`ERROR_FRAME`, index into the sensor's
    valid samples (M,))."""
    sensor = sensor.only_valid()
    pos, quat, inside = ref.interpolator()(sensor.t_s + alignment.offset_s, max_gap_s)
    idx = np.flatnonzero(inside)
    e = frame_errors(
        sensor.position[idx], sensor.quat_xyzw[idx], pos[idx], quat[idx], alignment.rotation,
        alignment.translation, alignment.body_rotation,
    )
    return sensor.t_s[idx], e, idx


def frame_errors(
    position: np.ndarray, quat_xyzw: np.ndarray, ref_position: np.ndarray,
    ref_quat_xyzw: np.ndarray, rotation: np.ndarray, translation: np.ndarray,
    body_rotation: np.ndarray,
) -> np.ndarray:
    """``(N, 6)`` error (:data:`ERROR_FRAME`; rotation ``R_ref⁻¹ R R_sensor B``) of sensor
    against reference poses at the same instants."""
    e_pos = position @ rotation.T + translation - ref_position
    rot, body = (Rotation.from_matrix(m).as_quat() for m in (rotation, body_rotation))
    r_s = quat_mul(quat_mul(rot, quat_xyzw), body)
    e_rot = quat_as_rotvec(quat_mul(quat_inv(ref_quat_xyzw), quat_normalize(r_s)))
    return np.concatenate([e_pos, e_rot], axis=1)


RPE_DELTA_S = 1.0
"""The RPE's delta, s: rounded to whole frames of the sensor."""


@dataclass(frozen=True)
class ErrorStats:
    """evo's statistics of one error (its unit stated where it is used)."""

    rmse: float
    mean: float
    median: float
    std: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> ErrorStats:
        """The statistics of ``values`` (all nan when there are none)."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, nan, 0)
        return cls(
            float(np.sqrt(np.mean(v * v))), float(np.mean(v)), float(np.median(v)),
            float(np.std(v)), float(np.min(v)), float(np.max(v)), int(v.size),
        )

    def scaled(self, factor: float) -> dict[str, float]:
        """The statistics times ``factor`` (e.g. 1000 for mm), without ``n``."""
        return {k: v * factor for k, v in asdict(self).items() if k != "n"}


@dataclass(frozen=True)
class TrajectoryError:
    """ATE and RPE of one session (docs/POSE_ERROR.md)."""

    ate_m: ErrorStats
    rpe_m: ErrorStats
    rpe_deg: ErrorStats
    rpe_delta_frames: int
    rpe_delta_s: float
    """Median time between the two poses of an RPE pair (s)."""

    def to_dict(self) -> dict:
        """JSON-ready: ATE (m), RPE (m, deg) and the delta, with units in the keys."""
        return {
            "ate_translation_m": asdict(self.ate_m),
            "rpe_translation_m": asdict(self.rpe_m),
            "rpe_rotation_deg": asdict(self.rpe_deg),
            "rpe_delta_frames": self.rpe_delta_frames,
            "rpe_delta_s": self.rpe_delta_s,
            "definition": "evo_ape (translation part, after the alignment) and evo_rpe "
            "(delta in frames, pairs every delta frames; translation part and rotation "
            "angle)",
        }


def trajectory_error(
    sensor: PoseTrack, reference: PoseTrack, alignment: Alignment, max_gap_s: float | None = None
) -> TrajectoryError:
    """ATE and RPE of ``sensor`` against ``reference`` under ``alignment``.

    Raises:
        FitError: fewer than two pairs."""
    sensor = sensor.only_valid()
    pos, quat, inside = reference.interpolator()(sensor.t_s + alignment.offset_s, max_gap_s)
    idx = np.flatnonzero(inside)
    if idx.size < 2:
        raise FitError(f"{sensor.name or 'sensor'}: fewer than 2 poses pair with the reference")
    p_est = sensor.position[idx] @ alignment.rotation.T + alignment.translation
    r_est = Rotation.from_matrix(alignment.rotation) * Rotation.from_quat(sensor.quat_xyzw[idx])
    r_est = r_est.as_matrix()
    p_ref, r_ref = pos[idx], Rotation.from_quat(quat[idx]).as_matrix()
    ate = np.linalg.norm(p_est - p_ref, axis=1)
    t = sensor.t_s[idx]
    k = max(1, round(RPE_DELTA_S / float(np.median(np.diff(t)))))
    k = min(k, idx.size - 1)
    i = np.arange(0, idx.size - k, k)  # evo_rpe's pairs: (0, Δ), (Δ, 2Δ), ...
    j = i + k

    def relative(p: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rt = np.transpose(r[i], (0, 2, 1))
        return np.einsum("nab,nb->na", rt, p[j] - p[i]), rt @ r[j]

    t_ref, q_ref = relative(p_ref, r_ref)
    t_est, q_est = relative(p_est, r_est)
    rpe_t = np.linalg.norm(t_est - t_ref, axis=1)  # |R_ref,relᵀ (t_est − t_ref)|
    rpe_r = np.degrees(Rotation.from_matrix(np.transpose(q_ref, (0, 2, 1)) @ q_est).magnitude())
    return TrajectoryError(
        ErrorStats.of(ate), ErrorStats.of(rpe_t), ErrorStats.of(rpe_r), k,
        float(np.median(t[j] - t[i])),
    )
