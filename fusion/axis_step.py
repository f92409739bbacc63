"""One axis of the split filters (:mod:`~sensorbench.fusion.split_filter`), stepped chunk
by chunk: its per-step inputs prepared from the odometry and the noise, run through the
compiled loop (:mod:`~sensorbench.fusion.axis_loop`) from a carried state.
:class:`AxisState` carries what a step needs of earlier frames (the loop's state and the
last :data:`~sensorbench.fusion.odometry_motion.MOTION_HISTORY` steps), so any chunks give
the numbers of one run, to the last bit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numba
import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.axis_loop import (
    NIS_GATE_99,
    AxisLoopState,
    AxisOutputs,
    AxisSteps,
    axis_loop,
    start_state,
)
from sensorbench.fusion.odometry_motion import MOTION_HISTORY, motion_inputs

if TYPE_CHECKING:
    from sensorbench.fusion.filter_noise import AxisNoise


@dataclass(frozen=True)
class AxisAid:
    """Absolute fixes of one axis within a chunk of K frames.

    Attributes:
        index: (M,) frame 1..K after whose odometry update each fix is applied
            (non-decreasing, may repeat).
        z: (M,) the fixes (m or rad).
        r: (M,) their variances (m² or rad²).
    """

    index: np.ndarray
    z: np.ndarray
    r: np.ndarray


@dataclass(frozen=True)
class AxisInput:
    """What one axis filter takes over K steps (arrays (K,); m or rad of the axis).

    Attributes:
        dt: step durations (s, > 0).
        z: odometry increments of the axis over each step; nan = no measurement (the step
            is predicted only).
        slip: the slip model's variance of each step (unit²): its rolling part when
            ``drag`` is given, else the whole; scaled by ``noise.slip_scale`` (``drag`` by
            ``noise.drag_share``) it is added to Var p at each prediction; None = none.
        drag: the dragging part of the slip model's step variance (unit²).
        rest: True for frames where no pod's count changed: updated, NIS nan (an
            unchanged count's rounding is the previous frame's, so the innovation tests
            nothing).
        r_profile: r's factor at each step
            (:meth:`~sensorbench.fusion.pod_kinematics.PodGeometry.rounding_profile`);
            None = r throughout.
        drift: growth of the odometry frame's offset variance over each step (unit²;
            negative entries shrink it, never below 0); None = no drift.
        aid: absolute fixes of the frame offset within these steps (None = none).
    """

    dt: np.ndarray
    z: np.ndarray
    slip: np.ndarray | None = None
    drag: np.ndarray | None = None
    rest: np.ndarray | None = None
    r_profile: np.ndarray | None = None
    drift: np.ndarray | None = None
    aid: AxisAid | None = None

    def __post_init__(self) -> None:
        k_n = len(self.dt)
        named = (("z", self.z), ("slip", self.slip), ("drag", self.drag), ("rest", self.rest),
                 ("r_profile", self.r_profile), ("drift", self.drift))  # fmt: skip
        for name, val in named:
            if val is not None and len(val) != k_n:
                raise FusionError(f"axis input {name} has {len(val)} steps, dt has {k_n}")

    def head(self, n: int) -> AxisInput:
        """The first ``n`` steps (of an input without fixes)."""
        if self.aid is not None:
            raise FusionError("the head of an axis input with fixes is not defined")
        steps = ("dt", "z", "slip", "drag", "rest", "r_profile", "drift")
        return replace(self, **{f: v[:n] for f in steps if (v := getattr(self, f)) is not None})


@dataclass(frozen=True)
class AxisState:
    """One axis filter between two chunks: the loop's state, as the 14 floats of an
    :class:`~sensorbench.fusion.axis_loop.AxisLoopState` the compiled step takes and
    gives, and the motion history (4, H): the last steps' (at most
    :data:`~sensorbench.fusion.odometry_motion.MOTION_HISTORY`) durations (s), increments,
    rounding r and slip variance (unit²) as the filter stated them. Never written."""

    carry: np.ndarray
    history: np.ndarray = field(default_factory=lambda: np.empty((4, 0)))

    @property
    def loop(self) -> AxisLoopState:
        """The loop's state."""
        c = self.carry.tolist()
        return AxisLoopState(
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
            int(c[8]), int(c[9]), c[10], c[11], int(c[12]), c[13],
        )  # fmt: skip

    @property
    def position(self) -> float:
        """The estimate in the world (odometry frame plus its offset; m or rad)."""
        return float(self.carry[0]) + float(self.carry[5])


class _Row:
    """Row ``i`` of a track's per-frame block, from frame ``first``, as an attribute."""

    def __init__(self, i: int, first: int = 0) -> None:
        self.i, self.first = i, first

    def __get__(self, track: AxisTrack | None, owner: type | None = None) -> np.ndarray:
        if track is None:
            raise AttributeError("a row is read from a track, not from its class")
        n = track._n
        return track._floats[self.i * n + self.first : (self.i + 1) * n]


class AxisTrack:
    """Output of one axis filter over K frames (index 0 = the state it started from): views
    into :func:`_axis_chunk`'s two blocks, taken when read (a live step reads two of them).

    Attributes:
        p, v: estimates after each frame (K+1,): position in the world (odometry
            frame plus its offset) and velocity.
        var_p, var_v: their variances (K+1,) (var_p includes the offset's).
        nis: NIS ν²/S of each odometry update (K,), nan where no update happened.
        nis_chi2: the same with the frames at rest nan (``AxisInput.rest``; they test
            nothing): χ²₁ under the model, the statistic the monitor and the consistency
            checks use.
        accepted: whether each odometry update passed the gate (K,).
        aid_nis, aid_accepted: NIS and gate result of each aiding update.
        innovation, s: innovation of each odometry update and its variance.
        resets: updates forced after
            :data:`~sensorbench.fusion.axis_loop.MAX_REJECTS` consecutive rejections.
    """

    __slots__ = ("_flags", "_floats", "_n", "resets")

    def __init__(self, floats: np.ndarray, flags: np.ndarray, resets: int) -> None:
        self._floats, self._flags, self.resets = floats, flags, resets
        self._n = (len(floats) - len(flags) - 14) // 7  # 8n + M + 14 floats, n + M flags

    p = _Row(0)
    v = _Row(1)
    var_p = _Row(2)
    var_v = _Row(3)
    nis = _Row(4, 1)
    innovation = _Row(5, 1)
    s = _Row(6, 1)
    nis_chi2 = _Row(7, 1)

    @property
    def accepted(self) -> np.ndarray:
        """Whether each odometry update passed the gate (K,)."""
        return self._flags[1 : self._n]

    @property
    def aid_nis(self) -> np.ndarray:
        """NIS of each aiding update (M,)."""
        return self._floats[8 * self._n : -14]

    @property
    def aid_accepted(self) -> np.ndarray:
        """Gate result of each aiding update (M,)."""
        return self._flags[self._n :]

    @property
    def rejected(self) -> int:
        """Odometry updates rejected by the gate."""
        return int(np.count_nonzero(~self.accepted))

    @property
    def aid_rejected(self) -> int:
        """Aiding updates rejected by the gate."""
        return int(np.count_nonzero(~self.aid_accepted))


def start_axis(p0: float = 0.0, var_p0: float = 0.0) -> AxisState:
    """An axis at rest at ``p0`` (m or rad) with variance ``var_p0`` (carried by the
    odometry frame's offset) and velocity variance
    :data:`~sensorbench.fusion.axis_loop.VAR_V0`, before its first frame."""
    return AxisState(np.array(start_state(p0, var_p0), dtype=float))


def step_axis(
    state: AxisState, inp: AxisInput, noise: AxisNoise, gate: float = NIS_GATE_99
) -> tuple[AxisState, AxisTrack]:
    """Run one axis filter over the K steps of ``inp`` from ``state`` (per step: the
    prediction, the odometry update and the step's fixes gated at ``gate`` on their ν²/S,
    the offset's drift).

    Returns:
        The state after the last step and the track of the K steps (its index 0: the
        estimate ``state`` held).
    """
    aid = inp.aid
    floats, flags, history = _axis_chunk(
        state.history,
        (_array(inp.dt), _array(inp.z), _array(inp.slip), _array(inp.drag),
         _array(inp.r_profile), _array(inp.drift)),
        _NO_REST if inp.rest is None else _array(inp.rest, np.bool_),
        _NO_INDEX if aid is None else _array(aid.index, np.int64),
        _array(None if aid is None else aid.z),
        _array(None if aid is None else aid.r),
        _constants(noise, gate),
        state.carry,
    )  # fmt: skip
    return axis_result(state, floats, flags, history)


def axis_result(
    state: AxisState, floats: np.ndarray, flags: np.ndarray, history: np.ndarray
) -> tuple[AxisState, AxisTrack]:
    """The state and track of :func:`_axis_chunk`'s outputs from ``state``."""
    carry = floats[-14:].copy()
    return AxisState(carry, history), AxisTrack(floats, flags, int(carry[12] - state.carry[12]))


_NONE = np.empty(0)
_NO_INDEX = np.empty(0, np.int64)
_NO_REST = np.empty(0, np.bool_)


def _array(v: np.ndarray | None, dtype: type = float) -> np.ndarray:
    """``v`` as a contiguous array of ``dtype`` (empty for None: the kernel's "none")."""
    return _NONE if v is None else np.ascontiguousarray(v, dtype=dtype)


@functools.lru_cache(maxsize=32)
def _constants(noise: AxisNoise, gate: float) -> np.ndarray:
    """The kernel's ``consts`` of a noise and gate (the last 32 pairs kept; never written)."""
    return np.array(
        (noise.q, noise.r, noise.q_jerk, noise.stamp_var, noise.slip_scale, noise.drag_share, gate),
        dtype=float,
    )


@numba.njit(cache=True)
def _axis_steps(
    history: np.ndarray,
    steps_in: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    fixes: tuple[np.ndarray, np.ndarray, np.ndarray],
    consts: np.ndarray,
) -> tuple[AxisSteps, np.ndarray]:  # pragma: no cover - compiled
    """The loop's :class:`~sensorbench.fusion.axis_loop.AxisSteps` of a chunk (arguments as
    :func:`_axis_chunk`'s) and the motion history with the chunk's steps after it (4, H+K)."""
    dt, z, slip, drag, profile, drift = steps_in
    q, r, q_jerk, stamp_var, slip_scale, drag_share = consts[:6]
    k_n, h = dt.size, history.shape[1]
    # this chunk after the steps before it: the windows of the observed motion reach back
    series = np.empty((4, h + k_n))
    series[:, :h] = history
    dt_h, z_h, rk_h, sv_h = series[0], series[1], series[2], series[3]
    dt_h[h:], z_h[h:] = dt, z
    for k in range(k_n):
        sv = slip_scale * slip[k] if slip.size else 0.0
        if drag.size:
            sv = sv + drag_share * drag[k]
        sv_h[h + k] = sv
        rk_h[h + k] = r * profile[k] if profile.size else r
    u, q_steps = motion_inputs(dt_h, z_h, rk_h, sv_h, h, (q, q_jerk, stamp_var))
    steps = AxisSteps(
        dt, z, u, q_steps, sv_h[h:], rk_h[h:], drift if drift.size else np.zeros(k_n),
        np.zeros(k_n, dtype=np.bool_), np.full(k_n, np.inf), fixes[0], fixes[1], fixes[2],
    )  # fmt: skip
    return steps, series


@numba.njit(cache=True)
def _state(carry: np.ndarray) -> AxisLoopState:  # pragma: no cover - compiled
    """The loop state of its 14 floats."""
    return AxisLoopState(
        carry[0], carry[1], carry[2], carry[3], carry[4], carry[5], carry[6], carry[7],
        int(carry[8]), int(carry[9]), carry[10], carry[11], int(carry[12]), carry[13],
    )  # fmt: skip


@numba.njit(cache=True)
def _axis_run(
    steps: AxisSteps, series: np.ndarray, rest: np.ndarray, gate: float, carry: np.ndarray,
    kept: np.ndarray,
) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled
    """:func:`_axis_chunk` on its prepared :func:`_axis_steps`, the loop's ``kept`` (K,)
    into ``kept`` (:class:`~sensorbench.fusion.axis_loop.AxisOutputs`)."""
    k_n = steps.dt.size
    # two blocks, not ten arrays: boxing each returned array costs about a microsecond
    n, m_n = k_n + 1, steps.aid_k.size
    floats = np.full(8 * n + m_n + 14, np.nan)
    flags = np.ones(n + m_n, dtype=np.bool_)
    tail = AxisOutputs(
        floats[1:n], floats[n + 1 : 2 * n], floats[2 * n + 1 : 3 * n], floats[3 * n + 1 : 4 * n],
        floats[4 * n + 1 : 5 * n], floats[5 * n + 1 : 6 * n], floats[6 * n + 1 : 7 * n],
        flags[1:n], floats[8 * n : 8 * n + m_n], flags[n:], kept,
    )  # fmt: skip
    end = axis_loop(steps, gate, _state(carry), tail)
    floats[0], floats[n] = carry[0] + carry[5], carry[1]
    floats[2 * n], floats[3 * n] = carry[2] + carry[6], carry[4]
    for k in range(k_n):  # the frames at rest test nothing
        floats[7 * n + 1 + k] = np.nan if rest.size and rest[k] else floats[4 * n + 1 + k]
    floats[8 * n + m_n :] = (
        end.p, end.v, end.ppp, end.ppv, end.pvv, end.b, end.pbb, end.odo, float(end.streak),
        float(end.carried), end.anchor, end.raw, float(end.resets), end.nll,
    )  # fmt: skip
    h = series.shape[1] - k_n
    return floats, flags, series[:, max(h + k_n - MOTION_HISTORY, 0):].copy()


@numba.njit(cache=True)
def _axis_chunk(
    history: np.ndarray,
    steps_in: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    rest: np.ndarray,
    aid_k: np.ndarray,
    aid_z: np.ndarray,
    aid_r: np.ndarray,
    consts: np.ndarray,
    carry: np.ndarray,
) -> tuple[np.ndarray, ...]:  # pragma: no cover - compiled
    """:func:`step_axis` compiled, on flat arguments (a call costs microseconds): the
    (4, H) motion history, the (K,) arrays of :class:`AxisInput` (dt, z, slip, drag,
    r_profile, drift; empty = None) and its ``rest`` (empty = None), the fixes (index, z,
    r), ``consts`` = the noise's q, r, q_jerk, stamp_var, slip_scale, drag_share and the
    gate, ``carry`` the loop's
    :class:`~sensorbench.fusion.axis_loop.AxisLoopState` as floats. Returns the outputs in
    one float block: position, velocity, var_p, var_v, nis, innovation, s, nis_chi2 over
    K+1 frames each (index 0: the estimate ``carry`` holds; nan for the last four), the M
    fixes' NIS, then the state after the chunk (14 floats); the acceptance of the K
    updates (after an unused index 0) and the M fixes in one bool block; and the motion
    history after the chunk."""
    steps, series = _axis_steps(history, steps_in, (aid_k, aid_z, aid_r), consts)
    return _axis_run(steps, series, rest, consts[6], carry, np.empty(steps.dt.size))


def run_axis(inp: AxisInput, noise: AxisNoise, gate: float = NIS_GATE_99) -> AxisTrack:
    """One axis filter over all of ``inp`` from rest at 0 (:func:`step_axis` from
    :func:`start_axis`)."""
    return step_axis(start_axis(), inp, noise, gate)[1]
