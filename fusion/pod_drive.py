"""A session's pod drive (:class:`Drive`): encoder frames on the host clock against a
reference path, cut into intervals of tick and reference body increments (m, m, rad) and
aligned in time, for the pod fit and the odometry replay (docs/PODS.md § "Geometry fit").
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from typing import Any

import numpy as np

from sensorbench.errors import FitError, SessionError
from sensorbench.fusion.odometry_drift import frame_period
from sensorbench.fusion.pod_kinematics import relative_poses, se2_log
from sensorbench.logs import NO_DEVICE_TIME, Session

MCU_CLOCK_TOLERANCE_PPM = 100.0
"""Prior 1σ of a pod MCU clock's rate about its nominal (ppm): a crystal's ±20-50 ppm plus
temperature and ageing."""
RATE_BLOCKS = 8
"""Blocks of equal device time whose mean host times give the data's clock slope."""
RATE_CONFLICT_SIGMA = 10.0
"""Data slope this many combined σ from the nominal: the clock is off nominal, trust the
data."""
GYRO_DRIFT_WINDOW_S = 4.0
"""Window (s) of the local quadratic (Savitzky-Golay) that follows the gyro's wandering
bias (:func:`gyro_drift`)."""


@dataclass
class Drive:
    """One session prepared for fitting: encoder frames and the reference path.

    Attributes:
        label: session label or file name.
        t_enc: encoder frame times on the host clock (s), increasing.
        counts: cumulative counts (n, N), int64.
        imu_yaw: IMU yaw at the frames (rad, unwrapped) or None.
        t_ref: reference sample times (s), valid samples only.
        ref: reference poses (m, 3): x, y (m), yaw (rad, unwrapped).
        max_gap_s: reference gaps longer than this invalidate the frames in them.
        counts_per_rev: from the encoder stream's attributes, if recorded.
        names: pod names from the encoder stream's attributes, if recorded.
        bounce: (n−1,) frame steps where a pod lost contact (found with the IMU),
            excluded from the fit; None until checked.
        nominal_c: the robot's nominal distance per tick (m), 2π·wheel_radius_m /
            counts_per_rev of the recorded geometry or configuration, if any.
    """

    label: str
    t_enc: np.ndarray
    counts: np.ndarray
    imu_yaw: np.ndarray | None
    t_ref: np.ndarray
    ref: np.ndarray
    max_gap_s: float
    counts_per_rev: np.ndarray | None = None
    names: tuple[str, ...] | None = None
    bounce: np.ndarray | None = None
    nominal_c: float | None = None


def yaw_from_quat(q_xyzw: np.ndarray) -> np.ndarray:
    """Yaw (rad) of unit quaternions (n, 4) in x, y, z, w order."""
    x, y, z, w = (q_xyzw[:, i] for i in range(4))
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def encoder_host_seconds(
    host_ns: np.ndarray, device_ns: np.ndarray, nominal_slope: float | None = None
) -> np.ndarray:
    """Encoder frame times on the host clock (s): a straight line of device time, its
    slope combined with the ``nominal_slope`` (host s per device s, ±
    :data:`MCU_CLOCK_TOLERANCE_PPM`) by
    :func:`_clock_slope` when given, else least squares; without a device clock (or one
    that does not advance: a stopped MCU timer), the host receive times."""
    host = np.asarray(host_ns, dtype=np.int64)
    dev = np.asarray(device_ns, dtype=np.int64)
    has_dev = dev != NO_DEVICE_TIME
    if np.count_nonzero(has_dev) < max(10, host.size // 2) or np.ptp(dev[has_dev]) == 0:
        return (host - host[0]) * 1e-9 + host[0] * 1e-9
    d = (dev[has_dev] - dev[has_dev][0]) * 1e-9
    h = (host[has_dev] - host[0]) * 1e-9
    slope, intercept = np.polyfit(d, h, 1)
    if nominal_slope is not None:
        slope = _clock_slope(d, h, float(nominal_slope), MCU_CLOCK_TOLERANCE_PPM * 1e-6)
        intercept = float(np.mean(h) - slope * np.mean(d))
    out = host[0] * 1e-9 + intercept + slope * (dev - dev[has_dev][0]) * 1e-9
    out[~has_dev] = host[~has_dev] * 1e-9
    return out


def _clock_slope(d: np.ndarray, h: np.ndarray, nominal: float, tolerance: float) -> float:
    """Slope of host ``h`` (s) on device ``d`` (s): the precision-weighted mean of nominal ±
    ``tolerance`` (relative) and the slope through :data:`RATE_BLOCKS` block means of the
    data, or the data's alone beyond :data:`RATE_CONFLICT_SIGMA` combined σ."""
    edges = np.linspace(d.min(), d.max(), RATE_BLOCKS + 1)
    block = np.clip(np.searchsorted(edges, d, side="right") - 1, 0, RATE_BLOCKS - 1)
    n = np.bincount(block, minlength=RATE_BLOCKS)
    full = n > 0
    if np.count_nonzero(full) < 3:
        return nominal
    xs = np.bincount(block, d, RATE_BLOCKS)[full] / n[full]
    ys = np.bincount(block, h, RATE_BLOCKS)[full] / n[full]
    (b, a), *_ = np.linalg.lstsq(np.column_stack([xs, np.ones_like(xs)]), ys, rcond=None)
    sxx = float(np.sum((xs - xs.mean()) ** 2))
    resid = ys - (a + b * xs)
    var_b = float(np.sum(resid**2)) / (xs.size - 2) / sxx
    var_0 = (nominal * tolerance) ** 2
    if (b - nominal) ** 2 > RATE_CONFLICT_SIGMA**2 * (var_b + var_0) or var_b == 0.0:
        return float(b)
    return float((b / var_b + nominal / var_0) / (1.0 / var_b + 1.0 / var_0))


MAX_OFFSET_S = 0.25
"""Search range (±s) of the encoder-to-reference time offset (:func:`align_drive`)."""
ALIGN_INTERVAL_S = 0.5
"""Interval (s of the encoder stream's host clock at real time) of the encoder/mocap time
alignment; a session recorded at N× real time takes it times its ``clock_nominal_slope``."""


def align_interval_for(path: str | os.PathLike[str]) -> float:
    """The alignment interval (s) for one session: :data:`ALIGN_INTERVAL_S` times the encoder
    stream's recorded ``clock_nominal_slope`` (host s per device s: 1/N for a session
    recorded at N× real time; 1.0 when the stream records none).

    Raises:
        FitError: the session cannot be read or has no encoder stream.
    """
    try:
        with Session(path) as s:
            slope = s.encoder_or_only().attrs.get("clock_nominal_slope")
    except SessionError as exc:
        raise FitError(str(exc)) from exc
    return ALIGN_INTERVAL_S * (1.0 if slope is None else float(slope))


def load_drive(path: str | os.PathLike[str]) -> Drive:
    """Read one session's encoder stream and its first mocap stream for the pod fit.

    Raises:
        FitError: no encoder stream, no mocap stream, or too few samples.
    """
    try:
        with Session(path) as s:
            enc = s.encoder_or_only()
            batch = enc.read()
            attrs = enc.attrs
            refs = [n for n in s.pose_names() if s.pose(n).attrs.get("kind") == "mocap"]
            if not refs:
                raise FitError(
                    f"{path}: no mocap pose stream to use as reference; import one with "
                    "'sensorbench import mocap'"
                )
            pose = s.pose(refs[0]).read()
            label = s.label or os.path.basename(str(path))
            config_text = s.config_text
    except SessionError as exc:
        raise FitError(str(exc)) from exc
    if len(batch) < 20 or np.count_nonzero(pose.valid) < 20:
        raise FitError(f"{path}: fewer than 20 encoder frames or valid reference samples")
    if batch.counts.shape[1] < 2:
        raise FitError(f"{path}: the encoder stream has {batch.counts.shape[1]} counter, not >= 2")
    t_enc = encoder_host_seconds(batch.host_ns, batch.device_ns, attrs.get("clock_nominal_slope"))
    order = np.argsort(t_enc, kind="stable")
    yaw = batch.yaw[order]
    imu = np.unwrap(yaw) if np.all(np.isfinite(yaw)) else None
    valid = pose.valid & np.all(np.isfinite(pose.position), axis=1)
    t_ref = pose.t_ns[valid] * 1e-9
    ref = np.column_stack(
        [pose.position[valid, :2], np.unwrap(yaw_from_quat(pose.quat_xyzw[valid]))]
    )
    period = float(np.median(np.diff(pose.t_ns))) * 1e-9
    cpr = attrs.get("counts_per_rev")
    if cpr is None:
        cpr = _config_counts_per_rev(config_text)
    n = batch.counts.shape[1]
    try:
        cpr = None if cpr is None else np.broadcast_to(np.asarray(cpr, float), (n,))
    except ValueError as exc:
        raise FitError(f"{path}: counts_per_rev {cpr!r} is neither one value nor one per "
                       f"counter ({n})") from exc  # fmt: skip
    names = attrs.get("pod_names")
    return Drive(
        label=str(label),
        t_enc=t_enc[order],
        counts=batch.counts[order],
        imu_yaw=imu,
        t_ref=t_ref,
        ref=ref,
        max_gap_s=2.5 * period,
        counts_per_rev=cpr,
        names=None if names is None else tuple(str(n) for n in names),
        nominal_c=_nominal_c(attrs.get("nominal_geometry"), config_text),
    )


def _nominal_c(recorded: Any, config_text: str) -> float | None:
    """2π·wheel_radius_m/counts_per_rev (m per tick) of the stream's recorded nominal
    geometry, else of the robot configuration's ``[pods]``; None without both values."""
    pods: Any = recorded if isinstance(recorded, dict) else None
    if pods is None:
        try:
            pods = tomllib.loads(config_text or "").get("pods")
        except tomllib.TOMLDecodeError:
            return None
    try:
        c = 2.0 * np.pi * float(pods["wheel_radius_m"]) / float(pods["counts_per_rev"])
    except (TypeError, KeyError, ValueError, ZeroDivisionError):
        return None
    return c if np.isfinite(c) and c > 0 else None


def _config_counts_per_rev(config_text: str) -> Any:
    """``[pods] counts_per_rev`` of the session's robot configuration, if it has one."""
    try:
        doc = tomllib.loads(config_text or "")
    except tomllib.TOMLDecodeError:
        return None
    return doc.get("pods", {}).get("counts_per_rev")


def _reference_at(drive: Drive, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference poses interpolated at times ``t`` and whether each is usable."""
    tr = drive.t_ref
    idx = np.searchsorted(tr, t)
    inside = (idx > 0) & (idx < tr.size)
    i1 = np.clip(idx, 1, tr.size - 1)
    gap = tr[i1] - tr[i1 - 1]
    ok = inside & (gap <= drive.max_gap_s)
    pose = np.column_stack([np.interp(t, tr, drive.ref[:, k]) for k in range(3)])
    return pose, ok


def gyro_drift(t: np.ndarray, imu_rel: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """The slow part of IMU minus reference heading (rad) at times ``t`` (s): a local
    quadratic over :data:`GYRO_DRIFT_WINDOW_S` through the usable samples ``ok`` (gaps
    bridged linearly), a straight line for a session shorter than two windows."""
    good = np.flatnonzero(ok)
    if good.size <= 10:
        return np.zeros_like(t)
    frame = frame_period(t)
    half = round(0.5 * GYRO_DRIFT_WINDOW_S / frame)
    if t.size < 4 * half + 2:
        slope, intercept = np.polyfit(t[good], np.unwrap(imu_rel[good]), 1)
        return slope * t + intercept
    # both headings are unwrapped, but across a reference gap in a spin one may be a turn
    # off: the difference is slow, so a 2π step in it is such a slip, not a drift
    from scipy.signal import savgol_filter  # here: live imports this module, not scipy

    bridged = np.interp(t, t[good], np.unwrap(imu_rel[good]))
    return savgol_filter(bridged, 2 * half + 1, 2, mode="interp")


def _raw_intervals(
    drive: Drive, offset_s: float, interval_s: float, heading: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """All intervals' tick and reference increments, which are usable, and each one's first
    and last frame index (M, 2)."""
    t = drive.t_enc + offset_s
    pose, ok = _reference_at(drive, t)
    step = se2_log(relative_poses(pose))
    if heading == "imu":
        if drive.imu_yaw is None:
            raise FitError(f"{drive.label}: heading='imu' but the session has no IMU yaw")
        step[:, 2] = np.diff(drive.imu_yaw - gyro_drift(t, drive.imu_yaw - pose[:, 2], ok))
    cum = np.vstack([np.zeros((1, 3)), np.cumsum(step, axis=0)])
    bad = np.concatenate([[0], np.cumsum(~ok)])
    frame = frame_period(t)
    per = max(1, round(interval_s / frame))
    # a gap of two reference periods between intervals: no shared reference sample
    gap = max(1, int(np.ceil(0.8 * drive.max_gap_s / frame)))
    lo = np.arange(0, t.size - per, per + gap)
    hi = lo + per
    keep = (bad[hi + 1] - bad[lo]) == 0
    if drive.bounce is not None:
        bounced = np.concatenate([[0], np.cumsum(drive.bounce)])
        keep &= (bounced[hi] - bounced[lo]) == 0
    dn = (drive.counts[hi] - drive.counts[lo]).astype(float)
    return dn, cum[hi] - cum[lo], keep, np.column_stack([lo, hi])


def drive_intervals(
    drive: Drive, offset_s: float, interval_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tick and mocap increments over consecutive intervals of about ``interval_s``.

    The reference is taken at ``t_enc + offset_s``; intervals are about two reference
    periods apart (no shared reference sample), those touching a reference gap dropped.

    Returns:
        ``(dn, xi, frames)``: ticks (M, N), reference body increments (M, 3) (m, m, rad)
        and each interval's first and last encoder frame index (M, 2).
    """
    dn, xi, keep, bounds = _raw_intervals(drive, offset_s, interval_s, "mocap")
    return dn[keep], xi[keep], bounds[keep]


def intervals_with_rate(
    drive: Drive, offset_s: float, interval_s: float, heading: str, h: float = 1e-3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Usable intervals plus ∂ξ/∂offset (central difference over ±h seconds)."""
    dn, xi, keep, _ = _raw_intervals(drive, offset_s, interval_s, heading)
    _, xp, kp, _ = _raw_intervals(drive, offset_s + h, interval_s, heading)
    _, xm, km, _ = _raw_intervals(drive, offset_s - h, interval_s, heading)
    keep = keep & kp & km
    return dn[keep], xi[keep], ((xp - xm) / (2 * h))[keep]


def _rss(dn: np.ndarray, xi: np.ndarray) -> float:
    """Mean squared residual (ticks²) of the per-pod least-squares fit, each capped at 3
    robust σ (MAD) so a bounce cannot steer the time offset towards itself."""
    if dn.shape[0] < 6:
        return np.inf
    beta, *_ = np.linalg.lstsq(xi, dn, rcond=1e-10)
    r = dn - xi @ beta
    cap = 3.0 * 1.4826 * np.median(np.abs(r - np.median(r, axis=0)), axis=0)
    return float(np.sum(np.minimum(r * r, cap * cap)) / dn.shape[0])


ALIGN_MIN_CONTRAST = 2.0
"""Largest over smallest alignment cost on the grid (:func:`align_drive_checked`) below
which a drive's time offset is not identified: no pod's counts follow its reference
motion (a sideways drive of two parallel pods: 1.2, the cost flat within its noise; a drive
some pod sees: 50-300)."""


WIDE_OFFSET_S = 2.0
"""Range (±s) of a coarse look beyond :data:`MAX_OFFSET_S` for a clearly better alignment."""


def _moving_cost(drive: Drive, offset_s: float, interval_s: float) -> tuple[float, int]:
    """:func:`_rss` over the intervals where some pod counted, and how many there are: at
    rest every residual is 0, and a shift whose overlap is mostly rest would cost nothing."""
    dn, xi = drive_intervals(drive, offset_s, interval_s)[:2]
    moving = np.any(dn != 0, axis=1)
    return _rss(dn[moving], xi[moving]), int(np.count_nonzero(moving))


def refuse_outside(drive: Drive, offset_s: float, interval_s: float) -> None:
    """Refuse a drive that aligns :data:`ALIGN_MIN_CONTRAST` times better than at
    ``offset_s`` (its best within ±:data:`MAX_OFFSET_S`) somewhere on a 0.1 s grid out to
    ±:data:`WIDE_OFFSET_S`: its reference's clock is off by more than the search. Costs
    are compared over the intervals where the pods moved, and only at offsets keeping at
    least half as many of them as ``offset_s`` (a shift past a short drive's end leaves
    a few intervals, which prove nothing).

    Raises:
        FitError: naming the drive, the offset found and the cost ratio.
    """
    cost, n_moving = _moving_cost(drive, offset_s, interval_s)
    side = np.arange(MAX_OFFSET_S + 0.1, WIDE_OFFSET_S + 1e-9, 0.1)
    grid = np.concatenate([-side[::-1], side])
    looks = [_moving_cost(drive, o, interval_s) for o in grid]
    costs = np.array([c if 2 * n >= n_moving else np.inf for c, n in looks])
    if np.any(np.isfinite(costs)) and ALIGN_MIN_CONTRAST * np.nanmin(costs) < cost:
        at = float(grid[int(np.nanargmin(costs))])
        raise FitError(f"{drive.label}: the encoder and reference streams align best near "
                       f"{at:+.2f} s ({cost / np.nanmin(costs):.3g}× lower cost), outside the "
                       f"±{MAX_OFFSET_S:g} s the fit searches: their clocks disagree by more; "
                       "give the reference the encoder's time base")  # fmt: skip


def align_drive(drive: Drive, interval_s: float) -> float:
    """Offset (s) to add to encoder times so they line up with the reference: the minimum
    of :func:`_rss` on a 10 ms grid over ±:data:`MAX_OFFSET_S`, then a bounded search."""
    return align_drive_checked(drive, interval_s)[0]


def align_drive_checked(drive: Drive, interval_s: float) -> tuple[float, bool]:
    """:func:`align_drive`'s offset (s) and whether the drive identifies it: its cost over
    the grid varies by at least :data:`ALIGN_MIN_CONTRAST` (else the minimum is noise) and
    is not 0 everywhere (no pod counted)."""
    from scipy.optimize import minimize_scalar  # here: live imports this module, not scipy

    grid = np.arange(-MAX_OFFSET_S, MAX_OFFSET_S + 1e-12, 0.01)
    costs = np.array([_rss(*drive_intervals(drive, o, interval_s)[:2]) for o in grid])
    if not np.any(np.isfinite(costs)):
        overlap = min(drive.t_enc[-1], drive.t_ref[-1]) - max(drive.t_enc[0], drive.t_ref[0])
        if overlap <= 0:
            raise FitError(f"{drive.label}: encoder and reference streams do not overlap in time")
        why = ("record longer or align over shorter intervals" if overlap < 6 * interval_s else
               "the robot hardly moved: the fit needs drives that move")
        raise FitError(f"{drive.label}: encoder and reference overlap for {overlap:.1f} s, "
                       f"fewer than 6 usable intervals of {interval_s:g} s: {why}")
    best = float(grid[int(np.nanargmin(costs))])
    finite = costs[np.isfinite(costs)]
    # all 0: no pod counted at all (a robot standing still)
    identified = bool(finite.max() > 0 and finite.max() >= ALIGN_MIN_CONTRAST * finite.min())
    res = minimize_scalar(
        lambda o: _rss(*drive_intervals(drive, o, interval_s)[:2]),
        bounds=(best - 0.01, best + 0.01),
        method="bounded",
        options={"xatol": 1e-5},
    )
    return (float(res.x) if res.fun <= costs.min() else best), identified
