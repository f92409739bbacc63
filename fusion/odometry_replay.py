"""Replay a session's pods through the split filters (optionally aided by its
``pose_sensor`` stream) and score the estimate against a reference path (mocap, or the
simulator's truth): position (m) and heading (rad) errors, NEES and coverage, rejection
rates and the NIS monitor's degraded spans.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sensorbench.errors import FitError, FusionError, SessionError
from sensorbench.fusion.aid_queue import Aiding, PoseAidModel, aid_interval
from sensorbench.fusion.consistency import (
    AxisConsistency,
    axis_consistency,
    geyer_tau,
    heading_cross_check,
    nis_consistency,
)
from sensorbench.fusion.estimate_stream import (
    CROSS_CHECK,
    estimate_batch,
    estimate_flags,
    estimate_times_ns,
    write_estimate_session,
)
from sensorbench.fusion.filter_noise import FilterNoise, MotionReach
from sensorbench.fusion.monitor_stream import MonitorResult, nis_monitor
from sensorbench.fusion.nees_samples import SharedErrors, model_effective_samples
from sensorbench.fusion.odometry_drift import PodSlip
from sensorbench.fusion.odometry_stream import OdometryFrames, OdometryStream
from sensorbench.fusion.pod_drive import (
    align_drive_checked,
    align_interval_for,
    load_drive,
    yaw_from_quat,
)
from sensorbench.fusion.pod_kinematics import (
    PodGeometry,
    body_increments,
    bridged_yaw_steps,
    imu_bias_variance,
    imu_heading_steps,
    repair_bounces,
)
from sensorbench.fusion.split_filter import (
    _NO_LAW,
    FilterState,
    FrameChunk,
    SplitFilter,
    SplitResult,
)
from sensorbench.fusion.split_step import _add_heading_variance, _disagreement, _frame_rounding
from sensorbench.logs import PoseFlag, Session
from sensorbench.logs.export_mcap import OdometryTrack
from sensorbench.logs.model_file import file_sha256
from sensorbench.logs.model_keys import AXES


@dataclass
class OdometryInput:
    """Encoder frames of one session as filter input.

    Attributes:
        t_s: frame times (K+1,) on the host clock (s), strictly increasing.
        t0_ns: host time (ns) that ``t_s`` is relative to.
        dn: tick increments (K, 3).
        imu_dtheta: IMU yaw increments over each step (K,) (rad), None without IMU.
        source: the session file it was read from.
    """

    t_s: np.ndarray
    t0_ns: int
    dn: np.ndarray
    imu_dtheta: np.ndarray | None = None
    source: str = ""

    def increments(
        self, geometry: PodGeometry, repair: bool = True
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Body increments (K, 3) (m, m, rad) through ``W⁻¹``, which frames were
        rebuilt (K,) bool (with an IMU and ``repair``, those where a parallel pod bounced:
        :func:`repair_bounces`) and, with two pods and the IMU's heading, the heading's
        variance growth (K,) rad² from the gyro bias (:func:`imu_bias_variance`) and which
        steps are at rest (K,) bool (:func:`imu_heading_steps`'; else Nones).

        Raises:
            FusionError: the stream has another number of counters than ``geometry`` pods."""
        if self.dn.shape[1] != geometry.c.size:
            raise FusionError(
                f"{self.source}: the encoder stream has {self.dn.shape[1]} counters and the "
                f"pod model {geometry.c.size} pods: a model fitted on this robot's "
                "sessions is needed")
        if geometry.imu_rate_var is not None:  # two pods, the heading the IMU's
            if self.imu_dtheta is None:
                raise FusionError(f"{self.source}: the pod model takes the heading from the "
                                  "IMU's yaw, which this encoder stream does not carry")
            dt = np.diff(self.t_s)
            dtheta, rest = imu_heading_steps(self.dn, self.imu_dtheta, dt)
            grow = imu_bias_variance(
                rest, dt, geometry.imu_rate_var, geometry.imu_bias_walk or 0.0
            )
            inc = body_increments(geometry.W, np.column_stack([self.dn, dtheta]))
            return inc, np.zeros(len(dt), dtype=bool), grow, rest
        if repair and self.imu_dtheta is not None:
            inc, repaired, _ = repair_bounces(geometry.W, self.dn, self.imu_dtheta)
            return inc, repaired, None, None
        inc = body_increments(geometry.W, self.dn)
        return inc, np.zeros(inc.shape[0], dtype=bool), None, None


def read_odometry(
    path: str | os.PathLike[str], window_ns: tuple[int | None, int | None] = (None, None)
) -> OdometryInput:
    """Read the encoder stream of a session as filter input (frames in ``[t0, t1)`` ns),
    through :class:`~sensorbench.fusion.odometry_stream.OdometryStream` as ``live`` does.
    The IMU yaw is used when more than half the kept frames carry one.

    Raises:
        FusionError: no encoder stream, fewer than 2 frames, fewer than 2 counters, or 2
            without IMU yaw.
    """
    try:
        with Session(path) as s:
            stream = s.encoder_or_only()
            batch = stream.read(*window_ns)
            attrs = dict(stream.attrs)
    except SessionError as exc:
        raise FusionError(str(exc)) from exc
    if len(batch) < 2:
        raise FusionError(f"{path}: fewer than two encoder frames")
    n = batch.counts.shape[1]
    if n < 2:
        raise FusionError(f"{path}: {n} counter; wheel odometry needs >= 3, or 2 and IMU yaw")
    odo = OdometryStream.for_stream(attrs, n)
    frames = OdometryFrames.concat([odo.push(batch), odo.flush()], n)
    if odo.t0_ns is None or odo.start_t_s is None or len(frames) == 0:
        raise FusionError(f"{path}: fewer than two encoder frames with increasing times")
    yaw = np.concatenate([[odo.start_yaw], frames.yaw])
    imu = frames.imu_dtheta if np.count_nonzero(np.isfinite(yaw)) > yaw.size // 2 else None
    if n == 2 and imu is None:
        raise FusionError(f"{path}: 2 counters and no IMU yaw: the heading needs a third pod "
                          "or the IMU's yaw in the encoder stream")  # fmt: skip
    t_s = np.concatenate([[odo.start_t_s], frames.t_s])
    if n == 2 and imu is not None:  # the heading's only source: its gaps bridged
        imu = bridged_yaw_steps(t_s, yaw, imu)
    return OdometryInput(t_s, odo.t0_ns, frames.dn, imu, str(path))


def read_aiding(
    path: str | os.PathLike[str], t0_ns: int, window_ns: tuple[int | None, int | None]
) -> tuple[Aiding, float | None] | None:
    """``pose_sensor`` samples of a session as aiding input (paused ones unusable) and the
    sensor's nominal period (s) from its stream's ``rate_hz`` (None without a usable one);
    None without such a stream."""
    with Session(path) as s:
        if "pose_sensor" not in s.pose_names():
            return None
        pb = s.pose("pose_sensor").read(*window_ns)
        rate = s.pose("pose_sensor").attrs.get("rate_hz")
    paused = (pb.flags & int(PoseFlag.PAUSED)) != 0
    aiding = Aiding(
        t_s=(pb.t_ns - t0_ns) * 1e-9,
        pose=np.column_stack([pb.position[:, :2], yaw_from_quat(pb.quat_xyzw)]),
        valid=pb.valid & ~paused,
        relocalized=(pb.flags & int(PoseFlag.RELOCALIZED)) != 0,
    )
    try:
        period: float | None = 1.0 / float(rate)
    except (TypeError, ValueError, ZeroDivisionError):
        period = None
    return aiding, period if period is not None and math.isfinite(period) and period > 0 else None


def pose_errors(
    t_est: np.ndarray, est: np.ndarray, t_ref: np.ndarray, ref: np.ndarray
) -> dict[str, Any]:
    """Errors of an estimate path against a reference path (n, 3 each: x, y m, heading rad),
    the estimate interpolated linearly at the reference times inside its span.

    Returns:
        rms_m, max_m, final_m (position error at the last common sample),
        heading_rms_rad, heading_max_rad, heading_final_rad, n_samples, and the
        per-sample series ``t_s``, ``pos_err_m``, ``heading_err_rad``.
    """
    tr, e, ref = _at_reference(t_est, est, t_ref, ref)
    d = e[:, :2] - ref[:, :2]
    pos = np.hypot(d[:, 0], d[:, 1])
    head = (e[:, 2] - ref[:, 2] + np.pi) % (2 * np.pi) - np.pi
    return {
        "rms_m": float(np.sqrt(np.mean(pos**2))),
        "max_m": float(pos.max()),
        "final_m": float(pos[-1]),
        "heading_rms_rad": float(np.sqrt(np.mean(head**2))),
        "heading_max_rad": float(np.abs(head).max()),
        "heading_final_rad": float(head[-1]),
        "n_samples": int(tr.size),
        "t_s": tr,
        "pos_err_m": pos,
        "heading_err_rad": head,
    }


def _at_reference(
    t_s: np.ndarray, est: np.ndarray, ref_t: np.ndarray, ref_pose: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference times (s) inside the estimate's span where the reference pose is
    finite, the estimate's columns (n, C) interpolated linearly there, the reference there.

    Raises:
        FusionError: fewer than 2 such times.
    """
    inside = (ref_t >= t_s[0]) & (ref_t <= t_s[-1]) & np.all(np.isfinite(ref_pose), axis=1)
    if np.count_nonzero(inside) < 2:
        raise FusionError("estimate and reference do not overlap in time")
    tr = ref_t[inside]
    return tr, np.column_stack([np.interp(tr, t_s, col) for col in est.T]), ref_pose[inside]


@dataclass
class Replay:
    """One replayed session: the estimate and, when there is a reference, its errors."""

    result: SplitResult
    t0_ns: int
    reference: str | None
    time_offset_s: float
    errors: dict[str, Any] | None
    ref_pose: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)
    consistency: dict[str, AxisConsistency] | None = None
    monitor: dict[str, MonitorResult] = field(default_factory=dict)
    nis_se: dict[str, float] = field(default_factory=dict)

    @property
    def degraded(self) -> np.ndarray:
        """(K+1,) True where any axis's consistency monitor is raised (index 0: never)."""
        flags = np.zeros(self.result.t_s.size, dtype=bool)
        for m in self.monitor.values():
            flags[1:] |= m.degraded
        return flags

    def monitor_events(self) -> list[tuple[float, str, str]]:
        """(time s, axis, "degraded" | "consistent") for every onset and clear, in time order."""
        t = self.result.t_s[1:]
        ev = [
            (float(t[i]), a, kind)
            for a, m in self.monitor.items()
            for kind, idx in (("degraded", m.onsets), ("consistent", m.clears))
            for i in idx
        ]
        return sorted(ev)

    def odometry_track(self) -> OdometryTrack:
        """The estimate per frame as the MCAP export's ``/odom`` and ``/tf`` track."""
        r = self.result
        return OdometryTrack(
            estimate_times_ns(self.t0_ns, r.t_s), r.pose, r.var, r.velocity,
            np.column_stack([r.tracks[a].var_v for a in AXES]),
        )  # fmt: skip

    def write_estimate(
        self,
        output: str | os.PathLike[str],
        session: str | os.PathLike[str],
        models: dict[str, str],
        *,
        overwrite: bool = False,
    ) -> None:
        """Write the estimate to the session file ``output``: poses flagged degraded or
        coasting, the monitor's onsets and clears as events; provenance: the replayed
        ``session`` (path, SHA-256) and ``models`` (``pods_model``, ``noise_model``)."""
        r = self.result
        coasting = np.concatenate([[False], r.coasting])
        times = estimate_times_ns(self.t0_ns, r.t_s)
        batch = estimate_batch(times, r.pose, r.var, estimate_flags(self.degraded, coasting))
        events = [
            (int(estimate_times_ns(self.t0_ns, np.array([t]))[0]), axis, kind)
            for t, axis, kind in self.monitor_events()
        ]
        attrs = {
            "source_session": str(session),
            "source_sha256": file_sha256(session),
            **models,
            "filter": "split x/y/heading, (position, velocity) each",
            "frame": "world (mocap) when the session has mocap, else start pose",
        }
        write_estimate_session(output, batch, events, attrs, overwrite=overwrite)

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (no per-sample series); the nominal rejection rate is
        P(χ²₁ > gate)."""
        from scipy.stats import chi2

        err = None
        if self.errors is not None:
            err = {k: v for k, v in self.errors.items() if not isinstance(v, np.ndarray)}
        r = self.result
        return {
            "frames": int(r.t_s.size - 1),
            "duration_s": float(r.t_s[-1] - r.t_s[0]),
            "reference": self.reference,
            "encoder_to_reference_offset_s": self.time_offset_s,
            "errors": err,
            "rejected_updates": r.rejected,
            "rejected_aiding": r.aid_rejected,
            "coasting_frames": int(np.count_nonzero(r.coasting)),
            "rejection_rate": {
                "actual": {a: t.rejected / max(t.accepted.size, 1) for a, t in r.tracks.items()},
                "nominal": float(chi2.sf(float(r.gate), 1)),
            },
            "nis": {
                a: nis_consistency(
                    t.nis_chi2, float(r.gate), self.nis_se.get(a, 0.0)
                ).summary()
                for a, t in r.tracks.items()
                if np.count_nonzero(np.isfinite(t.nis_chi2)) >= 2
            },
            "consistency": (
                None
                if self.consistency is None
                else {a: c.summary() for a, c in self.consistency.items()}
            ),
            # frames (after the first) any channel of the monitor flags
            "degraded_fraction": float(np.mean(self.degraded[1:])) if r.t_s.size > 1 else 0.0,
            "monitor": {
                a: {
                    "threshold": m.threshold,
                    "degraded_fraction": float(np.mean(m.degraded)) if m.degraded.size else 0.0,
                    "onsets_s": [float(r.t_s[1 + i]) for i in m.onsets],
                    "clears_s": [float(r.t_s[1 + i]) for i in m.clears],
                }
                for a, m in self.monitor.items()
            },
            **self.info,
        }


ReferenceNoise = tuple[np.ndarray, dict[str, float]]
"""A reference's white-noise variance (3,) and heavy-tailed axes (:func:`reference_noise_tails`)."""

TAIL_RATIO = 4.0
"""A reference axis's mean-square second difference over its robust (MAD) one beyond
which its noise is called heavy-tailed: ≈ 1 for white Gaussian noise (within 10 % over
300 triples), 4 = bursts doubling the noise's σ."""


def _second_differences(t_s: np.ndarray, pose: np.ndarray) -> np.ndarray | None:
    """A reference path's second differences (M, 3) over the triples whose two periods
    agree within 10 %, heading unwrapped; None with fewer than 10 samples or triples."""
    t = np.asarray(t_s, dtype=float)
    p = np.asarray(pose, dtype=float).copy()
    if t.size < 10:
        return None
    p[:, 2] = np.unwrap(p[:, 2])
    h = np.diff(t)
    even = np.abs(h[1:] - h[:-1]) <= 0.1 * np.median(h)
    d2 = (p[2:] - 2 * p[1:-1] + p[:-2])[even]
    return d2 if d2.shape[0] >= 10 else None


def reference_noise(t_s: np.ndarray, pose: np.ndarray) -> np.ndarray:
    """White-noise variance (3,) of a reference path's samples (m², m², rad²):
    (1.4826·MAD)²/6 of their second differences (noise variance 6σ²) over the triples
    whose two periods agree within 10 %, heading unwrapped; zeros with fewer than 10.
    """
    return reference_noise_tails(t_s, pose)[0]


def reference_noise_tails(t_s: np.ndarray, pose: np.ndarray) -> ReferenceNoise:
    """:func:`reference_noise` and the axes of the path whose noise is heavy-tailed
    (bursts, held samples then jumps), each with its mean-square second difference over
    the robust one (dimensionless, > :data:`TAIL_RATIO`): the bursts are not in the
    reference noise a replay states, so they count as the filter's error."""
    d2 = _second_differences(t_s, pose)
    if d2 is None:
        return np.zeros(3), {}
    centred = d2 - np.median(d2, axis=0)
    robust = (1.4826 * np.median(np.abs(centred), axis=0)) ** 2
    ratio = np.mean(centred**2, axis=0) / np.maximum(robust, 1e-300)
    return robust / 6.0, {a: float(r) for a, r in zip(AXES, ratio, strict=True) if r > TAIL_RATIO}


def reference_consistency(
    t_s: np.ndarray,
    pose: np.ndarray,
    var: np.ndarray,
    ref_t: np.ndarray,
    ref_pose: np.ndarray,
    ref_var: np.ndarray | None = None,
    shared: SharedErrors | None = None,
) -> dict[str, AxisConsistency]:
    """NEES and coverage per axis of a filter's stated variance against a reference path.

    Args:
        t_s: estimate times (K+1,), s; pose (K+1, 3) x, y (m), heading (rad); var their
            stated variances (K+1, 3) — the split filters' or the joint filter's diagonal.
        ref_t, ref_pose: the reference path on the same time base.
        ref_var: the reference's own white-noise variance per axis (3,)
            (:func:`reference_noise`), added to the stated variance; None = truth.
        shared: the parts of the stated error shared along an unaided replay's path, which
            set the NEES band's effective size
            (:func:`~sensorbench.fusion.nees_samples.model_effective_samples`); None:
            each axis's errors alone.

    An axis is judged where its variance is > 0 (heading errors wrapped to (−π, π]).
    """
    tr, at, ref = _at_reference(t_s, np.hstack([pose, var]), ref_t, ref_pose)
    noise = np.zeros(3) if ref_var is None else np.asarray(ref_var, dtype=float)
    v = at[:, 3:] + noise
    n_eff: list[float | None] = [None] * 3
    if shared is not None and np.all(v > 0):
        frames = np.clip(np.searchsorted(t_s, tr), 0, t_s.size - 1)
        n_eff = model_effective_samples(shared, frames, v).tolist()
    out = {}
    for j, a in enumerate(AXES):
        e = at[:, j] - ref[:, j]
        if a == "theta":
            e = (e + np.pi) % (2 * np.pi) - np.pi
        ok = v[:, j] > 0
        if np.count_nonzero(ok) >= 2:
            out[a] = axis_consistency(tr[ok] - t_s[0], e[ok], v[ok, j], n_eff=n_eff[j])
    return out


def _shared_errors(
    filt: SplitFilter,
    state: FilterState,
    inc: np.ndarray,
    result: SplitResult,
    odo: OdometryInput,
    heading_var: np.ndarray | None = None,
) -> SharedErrors:
    """What the split filters' stated error shares along an unaided replay: the slip
    model they ran with (or their time-based drift) and the heading's ``heading_var``
    (K,) rad² (:class:`FrameChunk`'s), the start, the calibration."""
    model = state.model
    dt = np.diff(odo.t_s)
    step_cov = None if model.drift is None else model.drift.step_covariances(np.nan_to_num(inc), dt)
    if step_cov is not None and heading_var is not None:
        w, _, w_inv = model.drift.kernel_arrays if isinstance(model.drift, PodSlip) else _NO_LAW
        _add_heading_variance(step_cov, np.ascontiguousarray(heading_var), w, w_inv)
    return SharedErrors(
        increments=inc,
        heading=result.pose[:, 2],
        var0=model.var0,
        step_cov=step_cov,
        drift_var=np.outer(dt, filt.drift_q) if step_cov is None else None,
        calibration=model.calibration,
        dt=dt,
    )


def _reference(
    path: str | os.PathLike[str],
    odo: OdometryInput,
    reference: str,
    align_interval_s: float | None,
) -> tuple[np.ndarray | None, np.ndarray | None, float, str | None, ReferenceNoise | None, bool]:
    """The reference path on the filters' frame times (s, relative to ``odo.t0_ns``): its
    times, poses (m, m, rad), the encoder-to-reference offset (s), its name, its white
    noise variance (3,) and heavy-tailed axes (:func:`reference_noise_tails`; None for
    truth) and whether the session identified the offset (a
    robot standing still does not: its alignment cost is flat, and the offset is then 0 s,
    the two streams' common host clock); Nones when the session has no mocap."""
    if reference == "truth":
        with Session(path) as s:
            if "pose/x_y_yaw" not in s.truth_names():
                raise FusionError(f"{path}: no simulator truth; use reference='mocap'")
            rows = s.truth_rows("pose", "t_ns", "x_y_yaw")
            return (rows["t_ns"] - odo.t0_ns) * 1e-9, rows["x_y_yaw"], 0.0, "truth", None, True
    if reference != "mocap":
        raise FusionError(f"reference must be 'mocap' or 'truth', not {reference!r}")
    try:
        drive = load_drive(path)
    except FitError:
        return None, None, 0.0, None, None, True
    drive.t_ref = drive.t_ref - odo.t0_ns * 1e-9
    # aligned on the frames and times the filters run on, not on the pod fit's clock line
    drive.t_enc = odo.t_s
    drive.counts = np.vstack([np.zeros((1, odo.dn.shape[1])), np.cumsum(odo.dn, axis=0)])
    drive.counts = drive.counts.astype(np.int64)
    drive.imu_yaw = None
    if align_interval_s is None:
        align_interval_s = align_interval_for(path)
    offset, identified = align_drive_checked(drive, align_interval_s)
    if not identified:
        offset = 0.0
    ref_t = drive.t_ref - offset
    return ref_t, drive.ref, offset, "mocap", reference_noise_tails(ref_t, drive.ref), identified


def _imu_check(
    geometry: PodGeometry, odo: OdometryInput, result: SplitResult, repaired: int,
    monitor: tuple[float, int, float],
) -> tuple[MonitorResult | None, str | None]:
    """The monitor (gate, window, level) of the pods against the IMU's yaw and what
    standardises it (None, None without an IMU): with a slip law the filters' own u²
    (causal, ``live``'s), on the pods' own increments where frames were ``repaired``;
    without one the session's robust spread per travel bin."""
    if odo.imu_dtheta is None:
        return None, None
    raw = body_increments(geometry.W, odo.dn)
    law = geometry.slip_model()
    if law is not None:
        u2 = result.imu_check
        if repaired:  # a rebuilt frame agrees with the IMU by construction
            dt = np.diff(odo.t_s)
            slip = law.step_covariances(raw, dt)[:, 2, 2]
            still = np.all(odo.dn == 0, axis=1)
            roll, drag = law.pod_tick_variances(raw, dt)
            w, _, w_inv = law.kernel_arrays
            ends = (_frame_rounding(w, w_inv[2], roll + drag), 0.0)  # bound unused
            u2 = _disagreement(slip, raw[:, 2], odo.imu_dtheta, still, ends, 0.0, np.empty(0))[0]
        return nis_monitor(u2, *monitor), "slip law"
    # the spread's floor (rad): a frame's Δθ holds the tick rounding of its two ends. It
    # is what standardises the frames that did not travel (in no bin): at a thousandth of
    # it the clean forward drive (seeds 5, 6) is flagged 50 % of the time, at it 0.4-1 %
    floor = float(np.sqrt(2.0 * geometry.rounding_covariance()[2, 2]))
    chi = heading_cross_check(raw[:, 2], odo.imu_dtheta, floor, np.abs(odo.dn) @ geometry.c)
    return nis_monitor(chi, *monitor), "travel bins"


REFERENCE_GAP_PERIODS = 2.5
"""A reference gap longer than this many of its median periods leaves the frames in it
without a reference pose (as :func:`~sensorbench.fusion.pod_drive.load_drive`'s gaps)."""


def _from_reference_start(
    odo: OdometryInput, ref_t: np.ndarray, ref_pose: np.ndarray
) -> tuple[OdometryInput, float]:
    """``odo`` from its first frame with a reference pose on both sides within
    :data:`REFERENCE_GAP_PERIODS` periods, or at most one period before the reference's first
    sample (times ``ref_t`` s, poses finite), and the encoder time (s) left out before it;
    ``odo`` itself when its first frame has one.

    Raises:
        FusionError: no two frames left with a reference at the first.
    """
    ok = np.all(np.isfinite(ref_pose), axis=1)
    t = np.asarray(ref_t, dtype=float)[ok]
    if t.size < 2:
        return odo, 0.0
    period = float(np.median(np.diff(t)))
    max_gap = REFERENCE_GAP_PERIODS * period
    # a frame up to one period before the first sample takes that sample's pose
    i = np.searchsorted(t, odo.t_s, side="right")
    ic = np.clip(i, 1, t.size - 1)
    covered = (i > 0) & (i < t.size) & (t[ic] - t[ic - 1] <= max_gap)
    covered |= (odo.t_s >= t[0] - period) & (odo.t_s < t[0]) | (odo.t_s == t[-1])
    k = int(np.argmax(covered)) if covered.any() else odo.t_s.size
    if k == 0:
        return odo, 0.0
    if k >= odo.t_s.size - 1:
        raise FusionError(f"{odo.source}: the reference has no usable sample while the encoder "
                          "frames run: no start pose to replay from")  # fmt: skip
    imu = None if odo.imu_dtheta is None else odo.imu_dtheta[k:]
    kept = replace(odo, t_s=odo.t_s[k:], dn=odo.dn[k:], imu_dtheta=imu)
    return kept, float(odo.t_s[k] - odo.t_s[0])


def _monitor_tau(fitted: float | None, nis: np.ndarray, gate: float, given: float | None) -> float:
    """An axis monitor's NIS autocorrelation time: ``given``, else the noise model's
    ``fitted`` one (live's), else the session's own clipped NIS's (not causal)."""
    if given is not None:
        return given
    return fitted if fitted is not None else geyer_tau(np.minimum(nis, gate))


def replay_session(
    path: str | os.PathLike[str],
    geometry: PodGeometry,
    noise: FilterNoise,
    aid_model: PoseAidModel | None = None,
    gate: float = 6.63,
    reference: str = "mocap",
    repair: bool = True,
    align_interval_s: float | None = None,
    monitor_window: int = 50,
    monitor_level: float = 0.999,
    window_ns: tuple[int | None, int | None] = (None, None),
    monitor_tau: float | None = None,
) -> Replay:
    """Replay one session through the split filters with the pods' ``geometry`` and the
    filters' ``noise`` (with ``aid_model`` the ``pose_sensor`` stream aids), from the
    reference pose at the first frame (zero without one), and score it. Frames before the
    reference's first usable sample (mocap that starts late or is occluded at the start)
    are not replayed: there is no start pose for them (``info["skipped_before_reference_s"]``).

    Args:
        reference: ``"mocap"`` (aligned in time to the encoder) or ``"truth"``.
        repair: rebuild bounce frames from the other pods and the IMU yaw (if any).
        align_interval_s: interval (s) of the encoder/mocap time alignment; None:
            :func:`~sensorbench.fusion.pod_drive.align_interval_for`.
        monitor_window, monitor_level: the consistency monitor's window (updates) and
            one-sided level, ``monitor_level ** (1/m)`` for each of its m channels (Šidák).
        monitor_tau: the axis monitors' NIS autocorrelation time; None: the noise
            model's fitted ``nis_tau`` as live takes it, or without one each axis's own
            :func:`~sensorbench.fusion.consistency.geyer_tau` over this session.
        window_ns: replay and score only the frames (and aiding samples) in ``[t0, t1)``
            (ns, None: open).
    """
    odo = read_odometry(path, window_ns=window_ns)
    inc, repaired, heading_var, rest = odo.increments(geometry, repair)  # refuses other layouts
    ref_t, ref_pose, offset, ref_name, ref_noise, offset_identified = _reference(
        path, odo, reference, align_interval_s
    )
    ref_var, ref_tails = (None, {}) if ref_noise is None else ref_noise
    skipped_s, unrested_s = 0.0, 0.0
    if rest is not None:  # the IMU's heading: the gyro bias is first measured at a rest
        unrested_s = float(odo.t_s[int(np.argmax(rest)) if rest.any() else -1] - odo.t_s[0])
    if ref_t is not None and ref_pose is not None:
        frames = odo.t_s.size
        odo, skipped_s = _from_reference_start(odo, ref_t, ref_pose)
        # the increments of the whole stream, as live had them: an IMU heading's bias
        # comes from the rests before, those left out too
        k = frames - odo.t_s.size
        inc, repaired = inc[k:], repaired[k:]
        heading_var = None if heading_var is None else heading_var[k:]
    n_repaired = int(np.count_nonzero(repaired))
    pose0 = (0.0, 0.0, 0.0)
    # the start taken from a noisy reference is known only to the reference's noise
    var0 = (0.0, 0.0, 0.0) if ref_var is None else tuple(float(v) for v in ref_var)
    if ref_t is not None:
        pose0 = tuple(float(np.interp(odo.t_s[0], ref_t, ref_pose[:, k])) for k in range(3))
    aiding = interval = None
    if aid_model is not None and (aid := read_aiding(path, odo.t0_ns, window_ns)):
        aiding, period = aid
        interval = period or aid_interval(aiding, odo.t_s[0], odo.t_s[-1])
    filt = SplitFilter(noise, gate=gate, aid_model=aid_model)
    state = filt.start(odo.t_s[0], pose0, var0, geometry, interval)
    # with two pods the IMU gives the heading: nothing left to check the pods against
    checked = odo if geometry.imu_rate_var is None else replace(odo, imu_dtheta=None)
    chunk = FrameChunk(odo.t_s[1:], inc, aiding, checked.imu_dtheta, heading_var)
    end, result = filt.step(state, chunk)
    errors = consistency = None
    if ref_t is not None:
        errors = pose_errors(result.t_s, result.pose, ref_t, ref_pose)
        shared = None if aiding is not None else _shared_errors(
            filt, state, inc, result, odo, heading_var
        )
        consistency = reference_consistency(
            result.t_s, result.pose, result.var, ref_t, ref_pose, ref_var, shared
        )
    channels = len(result.tracks) + (checked.imu_dtheta is not None)
    level = monitor_level ** (1.0 / channels)
    monitor = {
        a: nis_monitor(
            t.nis_chi2,
            gate,
            monitor_window,
            level,
            _monitor_tau(noise.axis(a).nis_tau, t.nis_chi2, gate, monitor_tau),
        )
        for a, t in result.tracks.items()
    }
    imu_monitor, spread_by = _imu_check(
        geometry, checked, result, n_repaired, (gate, monitor_window, level)
    )
    if imu_monitor is not None:
        monitor[CROSS_CHECK] = imu_monitor
    return Replay(
        result,
        odo.t0_ns,
        ref_name,
        offset,
        errors,
        ref_pose,
        {
            "aided": aiding is not None,
            # False: the session's motion did not identify the offset, taken as 0 s
            "encoder_to_reference_offset_identified": offset_identified,
            # encoder time (s) before the reference's first usable sample, not replayed:
            # the filters start from the reference's pose, which it does not know there
            "skipped_before_reference_s": skipped_s,
            "imu_bounce_check": repair and checked.imu_dtheta is not None,
            "repaired_frames": n_repaired,
            # the heading's σ widened by the pods' disagreement with the IMU (rad)
            "widened_heading_sigma_rad": 0.0
            if end.pose_error is None
            else float(end.pose_error[5]),
            # what standardises the pods-against-IMU check (None: no IMU)
            "imu_check_spread": spread_by,
            "reference_noise_sigma": None
            if ref_var is None
            else dict(zip(AXES, map(float, np.sqrt(ref_var)), strict=True)),
            # axes whose reference noise is heavy-tailed: its bursts count as the error
            "reference_heavy_tailed": ref_tails,
            # where this session's motion lies outside the calibration drives' reach
            "outside_reach": []
            if noise.reach is None
            else noise.reach.outside(MotionReach.of([odo.t_s], [inc])),
            "unidentified_drift": noise.drift_warnings(geometry),
            # an IMU heading's motion before its first rest (s): the gyro bias is not yet
            # measured there and the stated heading omits it
            "moving_before_first_rest_s": unrested_s,
        },
        consistency,
        monitor,
        {a: noise.axis(a).nis_se for a in AXES},
    )
