"""The split filters on the pod stream as it arrives, stepped on the pod reader's thread.

Each encoder batch goes through the :class:`~sensorbench.fusion.odometry_stream.
OdometryStream` ``replay`` reads a session through, and one ``SplitFilter.step`` over
its frames is published before the reader goes back to its port; ``live-odometry``
only coasts, records and ends the stream. How a live run differs from ``replay`` and
in what order a step publishes: docs/LIVE.md, "Live is replay" and "At wire speed".
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sensorbench.errors import ModelFileError
from sensorbench.fusion.aid_queue import Aiding, PoseAidModel
from sensorbench.fusion.axis_loop import predict_pv
from sensorbench.fusion.estimate_stream import (
    CROSS_CHECK,
    estimate_batch,
    estimate_times_ns,
    write_monitor_events,
)
from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.monitor_stream import NisMonitorStream
from sensorbench.fusion.odometry_stream import OdometryFrames, OdometryStream
from sensorbench.fusion.pod_drive import yaw_from_quat
from sensorbench.fusion.pod_kinematics import (
    PodGeometry,
    body_increments_few,
    increments_inverse,
)
from sensorbench.fusion.split_filter import FilterState, FrameChunk, SplitFilter
from sensorbench.fusion.split_frame import FrameStepper
from sensorbench.live.latency import LatencyLog
from sensorbench.live.udp import PREDICTED, PoseDatagram, wrap_yaw
from sensorbench.logs import EncoderBatch, PoseBatch, PoseFlag, SessionWriter
from sensorbench.logs.model_keys import AXES
from sensorbench.logs.schema import ESTIMATE_STREAM

DEGRADED, COASTING = int(PoseFlag.DEGRADED), int(PoseFlag.COASTING)

_STOP = object()
RECORD_S = 0.1
"""Longest time (s) a step's estimate is held before it is appended to the session."""
AID_WAIT_S = 0.25
"""Longest wait (s) for the pose stream before frames are filtered without it."""
COAST_S = 0.1
"""Silence of the pod stream (s) after which the prediction is published, once per this."""


def estimate_rows(
    t0_ns: int, t_s: list[float], degraded: list[bool], coasting: list[bool]
) -> tuple[list[int], list[int]]:
    """:func:`~sensorbench.fusion.estimate_stream.estimate_times_ns` (ns) and
    :func:`~sensorbench.fusion.estimate_stream.estimate_flags` of a step's frames (times
    ``t_s``, s) in scalars, bit for bit: a live step holds a frame or a few."""
    t_ns = [t0_ns + round(t * 1e9) for t in t_s]
    bits = zip(degraded, coasting, strict=True)
    return t_ns, [DEGRADED * d | COASTING * c for d, c in bits]


@dataclass(frozen=True)
class OdometryModels:
    """What the live filters run with (the models ``replay`` is given).

    Attributes:
        geometry: the pod geometry (``--pods``).
        noise: the filter noise (``--noise``, or the untuned defaults).
        aid_model: the pose-error model (``--pose-model``), None: no aiding.
        gate: the NIS gate.
        monitor_window, monitor_level: the consistency monitor's window and level.
        imu: the pod stream carries IMU yaw: with a slip law the filters widen the pose
            where the pods disagree with it, and the monitor has four channels.
    """

    geometry: PodGeometry
    noise: FilterNoise
    aid_model: PoseAidModel | None = None
    gate: float = 6.63
    monitor_window: int = 50
    monitor_level: float = 0.999
    imu: bool = False

    @classmethod
    def from_files(
        cls,
        pods: str | os.PathLike[str],
        noise: str | os.PathLike[str] | None = None,
        pose_model: str | os.PathLike[str] | None = None,
        imu: bool = False,
    ) -> OdometryModels:
        """The models from their files (``fit pods``, ``fit noise``, ``fit pose-error``);
        without a noise model the untuned defaults.

        Raises:
            ModelFileError: a file of another kind, version or units, or malformed, or
                a two-pod model (the IMU's heading: not run live yet).
        """
        from sensorbench.characterize.pose.error_model import PoseErrorModel
        from sensorbench.fusion.filter_noise import load_noise_model
        from sensorbench.fusion.pod_kinematics import load_pod_model

        geometry = load_pod_model(pods)
        if geometry.imu_rate_var is not None:
            raise ModelFileError(f"{pods}: two pods with the IMU's heading: `live` does not "
                                 "run this layout yet (`replay` does)")  # fmt: skip
        return cls(
            geometry,
            load_noise_model(noise) if noise is not None else FilterNoise.default(),
            PoseErrorModel.load(pose_model).aid_model() if pose_model is not None else None,
            imu=imu,
        )

    def warm_up(self) -> None:
        """Compile (or load from numba's cache) every kernel a live step runs, before any
        device is powered: numba compiles on the first call holding the interpreter lock,
        which on the pod reader's first frame would stall every reader (docs/LIVE.md)."""
        filters = SplitFilter(self.noise, gate=self.gate, aid_model=self.aid_model)
        period = 0.05 if self.aid_model is not None else None
        state = filters.start(0.0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), self.geometry, period)
        if FrameStepper.takes(filters, state):
            FrameStepper(filters, state).step(np.array([0.005]), np.zeros((1, 3)))
            return
        aid = None
        if self.aid_model is not None:
            aid = Aiding(np.array([0.005]), np.zeros((1, 3)), np.ones(1, bool), np.zeros(1, bool))
        filters.step(state, FrameChunk(np.array([0.005]), np.zeros((1, 3)), aid))


@dataclass
class OdometryCounters:
    """What the odometry thread has done (read from other threads)."""

    steps: int = 0
    frames: int = 0
    predictions: int = 0
    coasting: bool = False
    aid_late: int = 0
    """Pose samples that came after their frame was filtered (dropped live, applied by
    ``replay``)."""
    last_error: str | None = None
    latencies: LatencyLog = field(default_factory=LatencyLog)
    """Frame arrival → datagram sent (ns), the whole run in bounded memory."""


Publisher = Callable[[list[PoseDatagram], list[tuple[float, ...]], tuple[int, ...]], None]
"""``publish(datagrams, velocity_vars, arrivals)``, once per step: one datagram per frame
(or one prediction) with its velocity variances (m²/s², m²/s², rad²/s²; the datagram has
no field for them) and the arrival times (host ns) of the step's pod batches."""


def live_event(
    writer: SessionWriter | None, kind: str, message: str, t_ns: int | None = None
) -> str | None:
    """Write a ``live`` event at ``t_ns`` (session ns; None: now) unless there is no writer
    or it failed; what the write raised (``repr``) when it failed meanwhile (capture
    stops), else None."""
    if writer is None or writer.error is not None:
        return None
    try:
        writer.event(time.monotonic_ns() if t_ns is None else t_ns, "live", kind, message)
    except Exception as exc:
        return repr(exc)
    return None


class OdometryWorker:
    """The ``live-odometry`` thread (module docstring).

    Args:
        models: the filters' models.
        stream_attrs: the pod stream's attributes (``clock_nominal_slope``, wrapping).
        publish: called once per step (:data:`Publisher`); must not block.
        aid_period_s: the pose sensor's period Δt_aid (s), needed with an aid model.
    """

    def __init__(self, models: OdometryModels, stream_attrs: dict[str, Any], publish: Publisher,
                 aid_period_s: float | None = None) -> None:
        self.models = models
        self.publish = publish
        self.aid_period_s = aid_period_s
        w = models.geometry.W  # a property computed on each read: once here
        self._inverse = increments_inverse(w).tolist()
        self.stream = OdometryStream.for_stream(stream_attrs, w.shape[0])
        self.filter = SplitFilter(models.noise, gate=models.gate, aid_model=models.aid_model)
        channels = len(AXES) + (1 if models.imu else 0)
        level = models.monitor_level ** (1.0 / channels)
        # the axes' NIS as correlated as on the fitted sessions; the IMU check's independent
        taus = [models.noise.axis(a).nis_tau or 1.0 for a in AXES] + [1.0]
        self.monitors = {a: NisMonitorStream(models.gate, models.monitor_window, level, taus[i])
                         for i, a in enumerate((*AXES, CROSS_CHECK)[:channels])}  # fmt: skip
        self.counters = OdometryCounters()
        self.writer: SessionWriter | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ended = False
        self._state: FilterState | None = None  # None while the stepper runs them
        self._stepper: FrameStepper | None = None
        self._pending: list[OdometryFrames] = []
        self._arrivals: list[int] = []
        self._aid: list[PoseBatch] = []
        self._aid_t_ns = -math.inf  # latest pose sample time received
        self._aid_seen_ns = 0  # host time of the latest pose batch
        self._last_frame_ns = 0  # host time of the last step
        self._last_pred_ns = 0
        self._held: list[tuple[Any, ...]] = []  # estimate rows not yet recorded
        self._recorded_ns = 0  # host time of the last append to the estimate stream
        self._thread: threading.Thread | None = None

    # -- producers: each steps the filters on its own thread ---------------------------

    def frames(self, batch: EncoderBatch) -> None:
        """Encoder frames as the driver decoded them: stepped and published at once, on
        the calling thread (the pod reader's: no hand-off between a frame and its pose)."""
        self._locked(("encoder", batch, time.monotonic_ns()))

    def poses(self, batch: PoseBatch) -> None:
        """Pose-sensor samples (any thread): frames held for them are stepped at once."""
        self._locked(("pose", batch, time.monotonic_ns()))

    def widened_rad(self) -> float:
        """How much (rad) the pods' disagreement with the IMU has widened the heading's σ
        so far (docs/PODS.md, "A lifted or slipping wheel")."""
        with self._lock:
            state = self._stepper.state() if self._stepper is not None else self._state
        return 0.0 if state is None or state.pose_error is None else float(state.pose_error[5])

    # -- the thread: coasting, recording, the end ------------------------------------------

    def start(self, writer: SessionWriter) -> None:
        """Start the thread; estimates go to ``writer``."""
        self.writer = writer
        self._last_frame_ns = time.monotonic_ns()
        self._thread = threading.Thread(target=self._run, name="live-odometry", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Filter everything held (the end of the stream), record it, then stop."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.counters.last_error = f"live-odometry did not stop within {timeout_s:g} s"

    def _run(self) -> None:
        while not self._stopping.wait(COAST_S / 2):
            self._locked(None)
        self._locked(_STOP)

    def _locked(self, item: Any) -> None:
        """Under the lock: take ``item`` (None: nothing; ``_STOP``: the end), step over
        what waits, coast, record. Never raises: a failure is an ``error`` event."""
        with self._lock:
            if self._ended:
                return
            try:
                final = item is _STOP
                if final:
                    self._ended = True
                    self._pending.append(self.stream.flush())
                elif item is not None:
                    self._take(*item)
                self._step(final=final)
                self._coast()
                self._write_held(final=final)
            except Exception as exc:  # report, keep running: the recording goes on
                self.counters.last_error = f"live-odometry: {exc!r}"
                self._event("error", f"live odometry failed on a step: {exc!r}")

    def _take(self, kind: str, batch: Any, arrived_ns: int) -> None:
        if kind == "encoder":
            self._pending.append(self.stream.push(batch))
            self._arrivals.append(arrived_ns)
        else:
            self._aid.append(batch)
            if len(batch):
                self._aid_t_ns = max(self._aid_t_ns, float(batch.t_ns.max()))
            self._aid_seen_ns = arrived_ns

    def _start_filters(self) -> None:
        """The filters at the stream's first frame, and its estimate sample."""
        odo = self.stream
        if odo.start_t_s is None or odo.t0_ns is None:
            return
        aid = self.aid_period_s if self.models.aid_model is not None else None
        state = self.filter.start(
            odo.start_t_s, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), self.models.geometry, aid
        )
        if FrameStepper.takes(self.filter, state):
            self._stepper = FrameStepper(self.filter, state)
        else:
            self._state = state
        t_ns, flags = estimate_rows(odo.t0_ns, [odo.start_t_s], [False], [False])
        self._record(t_ns, [[0.0] * 3], [[0.0] * 3], flags)

    def _filter(self, frames: OdometryFrames) -> list[list[float]] | None:
        """Step the filters over ``frames``: each frame's
        :data:`~sensorbench.fusion.split_frame.OUT` outputs, None before they started."""
        inc = body_increments_few(self._inverse, frames.dn.tolist())
        imu = frames.imu_dtheta if self.models.imu else None
        if self._stepper is not None:
            return self._stepper.step(frames.t_s, np.array(inc), imu).tolist()
        state, odo = self._state, self.stream
        if state is None or odo.t0_ns is None:
            return None
        aiding, filtered_s = self._aiding(), state.t_s
        state, result = self.filter.step(
            state, FrameChunk(frames.t_s, np.array(inc), aiding, imu)
        )
        self._state = state
        late = (state.aid.late if state.aid is not None else 0) - self.counters.aid_late
        if late > 0 and aiding is not None:
            self._late(late, aiding.t_s[aiding.t_s <= filtered_s], odo.t0_ns)
        tracks = [result.tracks[a] for a in AXES]
        return np.column_stack(
            [result.pose[1:], result.velocity[1:], result.var[1:], *(t.var_v[1:] for t in tracks),
             *(t.nis_chi2 for t in tracks), np.diff(result.t_s), result.imu_check]
        ).tolist()  # fmt: skip

    def _step(self, final: bool) -> None:
        if self._state is None and self._stepper is None:
            self._start_filters()
        odo = self.stream
        if (self._state is None and self._stepper is None) or odo.t0_ns is None:
            return
        pending, self._pending = self._pending, []
        frames = pending[0] if len(pending) == 1 else OdometryFrames.concat(pending, odo.n_counts)
        if self.models.aid_model is not None and not final:
            frames = self._hold_for_aiding(frames)
        if len(frames) == 0:
            return
        rows = self._filter(frames)
        if rows is None:
            return
        found: list[tuple[int, str, str]] = []
        ds = []
        for j, (a, mon) in enumerate(self.monitors.items()):
            d, onsets, clears = mon.push([r[16 if j == 3 else 12 + j] for r in rows])
            ds.append(d)
            found += [(i, a, "degraded") for i in onsets] + [(i, a, "consistent") for i in clears]
        degraded = [any(r) for r in zip(*ds, strict=True)]
        stale = self.filter.stale_s
        t_ns, flags = estimate_rows(odo.t0_ns, frames.t_s.tolist(), degraded,
                                    [r[15] > stale for r in rows])  # fmt: skip
        base = self.counters.frames  # frames before this step (the start frame is not one)
        events = [(t_ns[i - base], a, kind) for i, a, kind in found]
        # the first step holds the frame clock's warm-up (a second of frames): its frames
        # did not wait on the filters, so they count in no latency
        arrivals = tuple(self._arrivals) if self.counters.steps > 0 else ()
        self._arrivals = []
        self._publish(t_ns, rows, flags, arrivals)
        self._record(t_ns, [r[0:3] for r in rows], [r[6:9] for r in rows], flags)
        if self.writer is not None and events:
            write_monitor_events(self.writer, sorted(events))
        self.counters.steps += 1
        self.counters.frames += len(frames)
        self._last_frame_ns = time.monotonic_ns()
        if self.counters.coasting:
            self.counters.coasting = False
            self._event("note", "pod frames again: the filters step on them")

    def _hold_for_aiding(self, frames: OdometryFrames) -> OdometryFrames:
        """Frames the pose stream has caught up with; the rest wait for the next step."""
        odo = self.stream
        if odo.t0_ns is None or len(frames) == 0:
            return frames
        quiet = (time.monotonic_ns() - self._aid_seen_ns) / 1e9 > AID_WAIT_S
        if quiet:
            return frames
        upto = (self._aid_t_ns - odo.t0_ns) * 1e-9
        n = int(np.searchsorted(frames.t_s, upto, side="right"))
        if n < len(frames):
            self._pending = [
                OdometryFrames(frames.t_s[n:], frames.dn[n:], frames.imu_dtheta[n:], frames.yaw[n:])
            ]
        return OdometryFrames(frames.t_s[:n], frames.dn[:n], frames.imu_dtheta[:n], frames.yaw[:n])

    def _late(self, n: int, t_s: np.ndarray, t0_ns: int) -> None:
        """Count ``n`` pose samples that came after their frame was filtered and report
        them, the event at the first one's time (times ``t_s``, s)."""
        self.counters.aid_late += n
        t_ns = int(estimate_times_ns(t0_ns, t_s[:1])[0]) if t_s.size else time.monotonic_ns()
        self._event("note", f"{n} pose sample(s) came after their frames were filtered "
                    "(the pose stream stalled): not applied live; replay applies them", t_ns)

    def _aiding(self) -> Aiding | None:
        """The pose samples received since the last step, on the filters' time base."""
        if self.models.aid_model is None or not self._aid or self.stream.t0_ns is None:
            return None
        parts, self._aid = self._aid, []
        pb = PoseBatch(
            *(np.concatenate([getattr(b, f) for b in parts])
              for f in ("t_ns", "position", "quat_xyzw", "valid", "flags"))
        )  # fmt: skip
        paused = (pb.flags & int(PoseFlag.PAUSED)) != 0
        return Aiding(
            t_s=(pb.t_ns - self.stream.t0_ns) * 1e-9,
            pose=np.column_stack([pb.position[:, :2], yaw_from_quat(pb.quat_xyzw)]),
            valid=pb.valid & ~paused,
            relocalized=(pb.flags & int(PoseFlag.RELOCALIZED)) != 0,
        )

    def _record(self, t_ns: list[int], pose: list[list[float]], var: list[list[float]],
                flags: list[int]) -> None:  # fmt: skip
        """Hold estimate rows (times ns, poses m and rad, variances m² and rad², flags)."""
        if self.writer is not None:
            self._held.append((t_ns, pose, var, flags))

    def _write_held(self, final: bool) -> None:
        """Append the held rows to the session when :data:`RECORD_S` passed, or at the end."""
        now = time.monotonic_ns()
        if self.writer is None or not self._held or (
            not final and now - self._recorded_ns < RECORD_S * 1e9
        ):
            return
        parts, self._held = self._held, []
        self._recorded_ns = now
        t_ns, pose, var, flags = ([x for p in c for x in p] for c in zip(*parts, strict=True))
        batch = estimate_batch(np.array(t_ns, np.int64), np.array(pose, float).reshape(-1, 3),
                               np.array(var, float).reshape(-1, 3), np.array(flags, np.uint8))
        self.writer.append_pose(ESTIMATE_STREAM, batch)

    def _publish(self, t_ns: list[int], rows: list[list[float]], flags: list[int],
                 arrivals: tuple[int, ...], frames: int = 1) -> None:  # fmt: skip
        """One datagram per row (times ns; :data:`~sensorbench.fusion.split_frame.OUT`
        outputs: poses m, rad; velocities m/s, rad/s; variances m², rad², velocity
        variances m²/s², rad²/s²; ``frames`` filtered per row): one call."""
        wall = time.time_ns() - time.monotonic_ns()
        datagrams = [
            PoseDatagram(f, frames, 0, t, wall + t, (r[0], r[1], wrap_yaw(r[2])),
                         (r[3], r[4], r[5]), (r[6], 0.0, 0.0, r[7], 0.0, r[8]))
            for t, r, f in zip(t_ns, rows, flags, strict=True)
        ]
        self.publish(datagrams, [(r[9], r[10], r[11]) for r in rows], arrivals)

    def _coast(self) -> None:
        """While the pods are silent: publish the prediction every :data:`COAST_S`."""
        now = time.monotonic_ns()
        if (self._state is None and self._stepper is None) or self.stream.t0_ns is None:
            return
        silent_s = (now - self._last_frame_ns) / 1e9
        if silent_s < COAST_S or (now - self._last_pred_ns) / 1e9 < COAST_S:
            return
        if not self.counters.coasting:
            self.counters.coasting = True
            self._event("note", f"no pod frame for {silent_s:.2f} s: publishing the prediction")
        self._last_pred_ns = now
        state = self._stepper.state() if self._stepper is not None else self._state
        assert state is not None
        loops = [(state.axis(a).loop, self.models.noise.axis(a).q) for a in AXES]
        pred = [predict_pv(o.p + o.b, o.v, o.ppp + o.pbb, o.ppv, o.pvv, q, silent_s)
                for o, q in loops]  # fmt: skip
        row = [float(p[i]) for i in (0, 1, 2, 4) for p in pred]
        (t_ns,), _ = estimate_rows(self.stream.t0_ns, [state.t_s], [False], [False])
        self.counters.predictions += 1
        t_pred = [t_ns + int(silent_s * 1e9)]
        self._publish(t_pred, [row], [PREDICTED], (), frames=0)

    def _event(self, kind: str, message: str, t_ns: int | None = None) -> None:
        """Write an event at ``t_ns`` (session ns; None: now)."""
        if failed := live_event(self.writer, kind, message, t_ns):
            self.counters.last_error = failed
