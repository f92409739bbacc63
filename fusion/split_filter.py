"""The split filters: three independent two-state Kalman filters for x, y and heading.

Per axis the state is (p, v), position (m, or rad) and velocity (m/s, rad/s), with a
velocity random walk q (m²/s³, rad²/s³), ``F = [[1, Δt], [0, 1]]``,
``Q = q·Δt·[[Δt², Δt], [Δt, 1]]``; one scalar update per frame by the axis's odometry
position (H = [1, 0], noise r), gated; the heading filter runs first and x, y take its
estimate. The (p, v) filter lives in the odometry frame; a scalar offset b per axis
(world minus odometry frame) carries the start's uncertainty, the slip's random walk and
the absolute aiding. The model, gate, aiding and fitted refinements: docs/PODS.md
§ "Split filters".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.aid_queue import Aiding, AidQueue, PoseAidModel, aid_interval
from sensorbench.fusion.axis_loop import NIS_GATE_99
from sensorbench.fusion.axis_step import (
    AxisAid,
    AxisState,
    AxisTrack,
    _constants,
    axis_result,
    start_axis,
)
from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.odometry_drift import (
    CalibrationError,
    PodSlip,
    SlipModel,
)
from sensorbench.fusion.pod_kinematics import PodGeometry
from sensorbench.fusion.split_step import _split_chunk, dead_reckon
from sensorbench.logs.model_keys import AXES


def frame_steps(
    t_s: np.ndarray, body_increments: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Checked filter input: frame times (K+1,) s, increments (K, 3) and steps (K,) s.

    Raises:
        FusionError: not K+1 times for (K, 3) increments, or times not strictly increasing.
    """
    t, inc = _shaped(np.asarray(t_s, dtype=float), body_increments)
    dt = t[1:] - t[:-1]
    if not (dt > 0).all():
        raise FusionError("frame times must be strictly increasing")
    return t, inc, dt


def _shaped(t: np.ndarray, body_increments: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``t`` (K+1,) and the increments as a contiguous (K, 3) float array.

    Raises:
        FusionError: not K+1 times for (K, 3) increments.
    """
    inc = np.ascontiguousarray(body_increments, dtype=float)
    if inc.ndim != 2 or inc.shape[1] != 3 or t.shape != (inc.shape[0] + 1,):
        raise FusionError(f"need K+1 times and (K, 3) increments, got {t.shape} and {inc.shape}")
    return t, inc


_NO_STEPS, _NO_ROUNDING = np.empty((0, 3, 3)), np.empty((0, 3))
_NO_LAW = (np.empty((0, 3)), np.zeros(3), np.empty((3, 0)))
_NO_CAL = (np.empty((3, 0)), np.empty((3, 0)), np.zeros(3), np.empty((0, 3)),
           np.empty((3, 0)), np.zeros(2), np.empty((0, 0)))  # fmt: skip
_NO_FIXES = (np.empty(0, np.int64), np.empty(0), np.empty(0))
_NO_IMU = np.empty(0)


_NO_CARRY, _NO_FLOOR = np.zeros(8), np.ones(2)
_ORDER = ("theta", "x", "y")
"""The axes in the order the heading filter's output feeds the other two."""


def _fixes(aid: AxisAid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An axis's fixes as :func:`_split_chunk` takes them: (index, z, r) arrays."""
    return (np.ascontiguousarray(aid.index, np.int64), np.ascontiguousarray(aid.z, float),
            np.ascontiguousarray(aid.r, float))  # fmt: skip


@dataclass
class SplitResult:
    """Replay of the split filters over K frames.

    Attributes:
        t_s: frame times (K+1,) (s); index 0 is the state the frames started from.
        pose: (K+1, 3) x, y (m), heading (rad, unwrapped).
        velocity: (K+1, 3) world-frame velocities (m/s, m/s, rad/s).
        var: (K+1, 3) position/heading variances.
        tracks: per-axis :class:`~sensorbench.fusion.axis_step.AxisTrack`.
        coasting: (K,) True for frames that end a gap longer than ``stale_s``.
        gate: the NIS gate the updates were tested at.
        imu_check: (K,) the pods' heading increments against the IMU's, u² (χ²₁ under the
            slip law; nan at rest, without an IMU or a slip law:
            :func:`~sensorbench.fusion.split_step._disagreement`).
    """

    t_s: np.ndarray
    pose: np.ndarray
    velocity: np.ndarray
    var: np.ndarray
    tracks: dict[str, AxisTrack]
    coasting: np.ndarray
    gate: float
    imu_check: np.ndarray

    @property
    def rejected(self) -> dict[str, int]:
        """Odometry updates rejected by the gate, per axis."""
        return {a: t.rejected for a, t in self.tracks.items()}

    @property
    def aid_rejected(self) -> dict[str, int]:
        """Aiding updates rejected by the gate, per axis."""
        return {a: t.aid_rejected for a, t in self.tracks.items()}


@dataclass(frozen=True)
class FrameChunk:
    """The next K encoder frames for :meth:`SplitFilter.step`.

    Attributes:
        t_s: (K,) frame times (s), strictly increasing and after the state's last frame.
        body_increments: (K, 3) body twist increments (m, m, rad) from the frame before
            each, e.g. ``W⁻¹·Δn``; rows with nan are missing (predict only).
        aiding: pose samples that came with these frames (None = none); a sample is
            applied at the first frame at or after its time, in this chunk or a later one.
        imu_dtheta: (K,) the IMU's heading increments (rad, nan: none), None without an
            IMU: with a slip law, frames the pods disagree with it on widen the heading.
        heading_var: (K,) the heading's variance growth (rad²) over each step beyond the
            slip law's: an IMU heading's gyro bias
            (:func:`~sensorbench.fusion.pod_kinematics.imu_bias_variance`); None: none.
    """

    t_s: np.ndarray
    body_increments: np.ndarray
    aiding: Aiding | None = None
    imu_dtheta: np.ndarray | None = None
    heading_var: np.ndarray | None = None


@dataclass(frozen=True)
class SessionModel:
    """What a session's filters keep constant from :meth:`SplitFilter.start` on.

    Attributes:
        t0_s: time of the first frame (s).
        var0: the start's variances (x, y m²; θ rad²).
        drift: the slip model the odometry frame drifts by (None: ``drift_q`` per second).
        calibration: the pod geometry's uncertainty (None without one).
        aid_interval_s: the pose sensor's period Δt_aid (s) in the aiding variance.
        rounding: the pods' tick rounding covariance (3, 3) and its heading-averaged floor
            of x and y (2,) (the constants of
            :meth:`~sensorbench.fusion.pod_kinematics.PodGeometry.rounding_profile`, computed
            once); None without pods: the rounding is white.
    """

    t0_s: float
    var0: tuple[float, float, float]
    drift: SlipModel | None
    calibration: CalibrationError | None
    aid_interval_s: float | None
    rounding: tuple[np.ndarray, np.ndarray] | None


@dataclass(frozen=True)
class FilterState:
    """The split filters between two chunks: everything a later frame depends on.

    Attributes:
        model: the session's constants.
        t_s: time of the last frame filtered (s).
        frames: frames filtered so far.
        x, y, theta: the axis filters (:class:`~sensorbench.fusion.axis_step.AxisState`).
        odometry: (3,) the dead-reckoned pose at the last frame (m, m, rad; carries pose
            samples to their frames); None when the filters take no aiding.
        pose_error: (8,) the odometry pose error's covariance under the slip model (x and
            y drift with the heading error): xx, yy (m²), θθ (rad²), xθ, yθ (m·rad); the
            disagreement with the IMU the heading's σ was widened by (rad) and its world
            path (2,, m·rad; :func:`~sensorbench.fusion.split_step._widen_xy`); None
            without a slip model.
        calibration: (3, P) sensitivities to the calibration's parameters along the
            estimated heading and along a zero heading, None without a row covariance.
        calibration_var: (3,) the calibration variances at the last frame: x, y along
            the estimated heading, θ.
        aid: the pose samples waiting for their frame.
    """

    model: SessionModel
    t_s: float
    frames: int
    x: AxisState
    y: AxisState
    theta: AxisState
    odometry: np.ndarray | None
    pose_error: np.ndarray | None
    calibration: tuple[np.ndarray, np.ndarray] | None
    calibration_var: np.ndarray
    aid: AidQueue | None

    def axis(self, name: str) -> AxisState:
        """The filter of axis ``name`` (x, y or theta)."""
        return getattr(self, name)

    @property
    def pose(self) -> np.ndarray:
        """(3,) the estimate at the last frame: x, y (m), heading (rad, unwrapped)."""
        return np.array([self.axis(a).position for a in AXES])


class SplitFilter:
    """Three independent (position, velocity) filters for x, y and heading: :meth:`run`
    a session, or :meth:`start` and :meth:`step` chunk by chunk (any split gives the
    numbers of one run, to the last bit).

    Args:
        noise: per-axis q and r (:class:`FilterNoise`).
        gate: NIS gate for every scalar update (6.63 = 99 %, 8.81 = 99.7 %).
        stale_s: a frame gap longer than this counts as coasting (s).
        aid_model: pose-error model for absolute aiding (optional).
        drift_q: odometry-frame drift per axis (x, y in m²/s, heading rad²/s) when
            ``noise`` has no fitted slip model; default 1e-6 each (1 mm/√s, 1 mrad/√s).
            With one (``noise.drift``) the offset variances grow with the motion and
            carry the heading error into x and y instead.
    """

    def __init__(
        self,
        noise: FilterNoise,
        gate: float = NIS_GATE_99,
        stale_s: float = 0.1,
        aid_model: PoseAidModel | None = None,
        drift_q: tuple[float, float, float] = (1e-6, 1e-6, 1e-6),
    ) -> None:
        if not gate > 0:
            raise FusionError(f"NIS gate must be > 0, got {gate}")
        self.noise = noise
        self.gate = float(gate)
        self.stale_s = float(stale_s)
        self.aid_model = aid_model
        self.drift_q = np.array([float(d) for d in drift_q])
        self._consts = np.array([_constants(noise.axis(a), self.gate) for a in _ORDER])

    def run(
        self,
        t_s: np.ndarray,
        body_increments: np.ndarray,
        pose0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        aiding: Aiding | None = None,
        pods: PodGeometry | None = None,
    ) -> SplitResult:
        """Replay the frames at ``t_s`` (K+1,) s with the body increments (K, 3) between them
        (as :class:`FrameChunk`'s) through the three filters: :meth:`start` at the first frame
        (``pose0``, ``var0``, ``pods`` as there), then one :meth:`step` over the rest (Δt_aid
        from :func:`~sensorbench.fusion.aid_queue.aid_interval` of ``aiding``).

        Raises:
            FusionError: non-increasing times, shape mismatch, aiding without model.
        """
        t, inc, _ = frame_steps(t_s, body_increments)
        interval = None if aiding is None else aid_interval(aiding, t[0], t[-1])
        state = self.start(t[0], pose0, var0, pods, interval)
        return self.step(state, FrameChunk(t[1:], inc, aiding))[1]

    def start(
        self,
        t0_s: float,
        pose0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        var0: tuple[float, float, float] = (0.0, 0.0, 0.0),
        pods: PodGeometry | None = None,
        aid_interval_s: float | None = None,
    ) -> FilterState:
        """The filters at the first frame (time ``t0_s``, s), at rest at ``pose0`` (x, y m,
        heading rad) with variances ``var0``.

        Args:
            pods: the geometry the increments are computed with: its calibration error
                adds to the offset's variance, its slip law replaces ``noise.drift`` and its
                rounding profile scales r.
            aid_interval_s: the pose sensor's period Δt_aid (s) in the aiding variance,
                needed to aid (replay: :func:`~sensorbench.fusion.aid_queue.aid_interval`;
                live: the sensor's nominal period).
        """
        calibration = None if pods is None else pods.calibration_error()
        pod_slip = None if pods is None else pods.slip_model()
        rounding = None
        if pods is not None:
            floor = pods.rounding_floor()
            rounding = (pods.rounding_covariance(), np.array([floor["x"], floor["y"]]))
        model = SessionModel(
            t0_s=float(t0_s),
            var0=(float(var0[0]), float(var0[1]), float(var0[2])),
            drift=pod_slip if pod_slip is not None else self.noise.drift,
            calibration=calibration,
            aid_interval_s=None if aid_interval_s is None else float(aid_interval_s),
            rounding=rounding,
        )
        axes = [start_axis(pose0[j], var0[j]) for j in range(3)]
        return FilterState(
            model=model,
            t_s=float(t0_s),
            frames=0,
            x=axes[0],
            y=axes[1],
            theta=axes[2],
            odometry=None if model.aid_interval_s is None else np.array([float(p) for p in pose0]),
            pose_error=None if model.drift is None else np.array([*model.var0, *[0.0] * 5]),
            calibration=None if calibration is None else (calibration.start(), calibration.start()),
            calibration_var=np.zeros(3),
            aid=None
            if model.aid_interval_s is None
            else AidQueue(model.t0_s, model.aid_interval_s),
        )

    def step(self, state: FilterState, chunk: FrameChunk) -> tuple[FilterState, SplitResult]:
        """Filter the K frames of ``chunk`` from ``state``.

        Returns:
            The state after the last frame and the result over the K frames (its index 0:
            the frame ``state`` was at).

        Raises:
            FusionError: times not after the state's and strictly increasing, not (K, 3)
                increments, aiding without a model or a pose sensor period, pose samples
                out of time order.
        """
        model = state.model
        t = np.concatenate(([state.t_s], np.asarray(chunk.t_s, dtype=float)))
        t, inc = _shaped(t, chunk.body_increments)
        odo = None if state.odometry is None else dead_reckon(inc, state.odometry)
        aid, queue = self._aid(state, chunk.aiding, t, odo)
        fixes = (_NO_FIXES,) * 3 if aid is None else tuple(_fixes(aid[a]) for a in _ORDER)
        drift, pose_error = model.drift, state.pose_error
        kind, given, law = 0, (_NO_STEPS, _NO_STEPS), _NO_LAW
        if isinstance(drift, PodSlip):
            kind, law = 2, drift.kernel_arrays
        elif drift is not None:
            kind, given = 1, drift.step_covariance_parts(inc, t[1:] - t[:-1])
        carry = _NO_CARRY if pose_error is None else pose_error
        cal = _NO_CAL
        if model.calibration is not None and state.calibration is not None:
            cal = (*state.calibration, state.calibration_var, *model.calibration.kernel_arrays)
        rounding = (_NO_ROUNDING, _NO_FLOOR) if model.rounding is None else model.rounding
        axes = (state.theta, state.x, state.y)
        imu = _NO_IMU if chunk.imu_dtheta is None else np.ascontiguousarray(chunk.imu_dtheta, float)
        if imu.size not in (0, inc.shape[0]):
            raise FusionError(f"need K IMU increments for K frames, got {imu.size}")
        hv = chunk.heading_var
        hv = _NO_IMU if hv is None else np.ascontiguousarray(hv, dtype=float)
        if hv.size not in (0, inc.shape[0]):
            raise FusionError(f"need K heading variances for K frames, got {hv.size}")
        try:
            out = _split_chunk(
                t, inc, imu, hv, (kind, self.drift_q, given, law, carry), cal, rounding,
                (self._consts, (state.theta.carry, state.x.carry, state.y.carry)),
                (state.theta.history, state.x.history, state.y.history), fixes,
            )  # fmt: skip
        except ValueError as exc:  # the only one the kernel raises
            raise FusionError(str(exc)) from exc
        ends, (dt, carry, sens, rows, imu_check) = out[:3], out[3:]
        (theta, th), (x, tx), (y, ty) = (
            axis_result(a, *o) for a, o in zip(axes, ends, strict=True)
        )
        new = FilterState(
            model=model,
            t_s=float(t[-1]),
            frames=state.frames + dt.size,
            x=x,
            y=y,
            theta=theta,
            odometry=None if odo is None else odo[-1].copy(),
            pose_error=None if pose_error is None else carry[:8],
            calibration=None if cal is _NO_CAL else (sens[0], sens[1]),
            calibration_var=carry[8:],
            aid=queue,
        )
        result = SplitResult(
            t_s=t,
            pose=rows[0],
            velocity=rows[1],
            var=rows[2],
            tracks={"x": tx, "y": ty, "theta": th},
            coasting=dt > self.stale_s,
            gate=self.gate,
            imu_check=imu_check,
        )
        return new, result

    def _aid(
        self, state: FilterState, aiding: Aiding | None, t: np.ndarray, odo: np.ndarray | None
    ) -> tuple[dict[str, AxisAid] | None, AidQueue | None]:
        """Per-axis fixes for the frames ``t`` (K+1,), None if none, and the queue left."""
        queue = state.aid
        if aiding is not None:
            if self.aid_model is None:
                raise FusionError("pose aiding needs a pose-error model (--pose-model)")
            if queue is None:
                raise FusionError(
                    "pose aiding needs the pose sensor's period: start the filters with "
                    "aid_interval_s"
                )
            queue = queue.add(aiding, state.t_s)
        if queue is None or odo is None or self.aid_model is None or queue.t_s.size == 0:
            return None, queue
        if queue.t_s[0] > t[-1]:  # none due by these frames (most live steps): nothing to take
            return None, queue
        queue, fixes = queue.take(t, odo, self.aid_model)
        return fixes, queue
