"""The split filters stepped on preallocated buffers: the live per-frame path.

:class:`FrameStepper` runs :meth:`~sensorbench.fusion.split_filter.SplitFilter.step`'s
kernel (:func:`~sensorbench.fusion.split_step._split_chunk`) on the same inputs, so its
numbers are the step's to the last bit, but in one compiled call of four arrays: the
session's constants packed once, the state updated in place, one row of outputs per
frame. ``SplitFilter.step`` passes 35 arrays and boxes a dozen results; on a reader
woken for each frame (its caches cold) that cost about three times the filtering
(docs/LIVE.md, "At wire speed"). Filters that take pose aiding or a slip model of
given step covariances (``OdometryDrift``) step through ``SplitFilter.step``.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.axis_step import AxisState
from sensorbench.fusion.odometry_drift import OdometryDrift, PodSlip
from sensorbench.fusion.odometry_motion import MOTION_HISTORY
from sensorbench.fusion.split_filter import (
    _NO_CAL,
    _NO_CARRY,
    _NO_FIXES,
    _NO_FLOOR,
    _NO_IMU,
    _NO_LAW,
    _NO_ROUNDING,
    _NO_STEPS,
    FilterState,
    SplitFilter,
)
from sensorbench.fusion.split_step import _split_chunk

OUT = 17
"""Outputs per frame: x, y, θ (m, m, rad); their velocities (m/s, rad/s); their variances
(m², rad²); velocity variances (m²/s², rad²/s²); NIS with frames at rest nan (x, y, θ,
χ²₁); the step (s); the pods' disagreement with the IMU (u², nan: none;
:func:`~sensorbench.fusion.split_step._disagreement`)."""
_HEAD = 3  # state: last frame time (s), frames filtered, history length
_CARRIES = _HEAD  # 3 × 14 loop states, θ, x, y
_ENDS = _CARRIES + 42  # pose error carry (8) and calibration variances (3)
_HIST = _ENDS + 11  # 3 × (4, MOTION_HISTORY) motion histories
_SENS = _HIST + 12 * MOTION_HISTORY  # (2, 3, P) calibration sensitivities


def _pack(parts: list[np.ndarray]) -> np.ndarray:
    """The arrays' shapes (a count of dimensions, then each), then their values, as one
    float array (dimensions below 2⁵³ are exact)."""
    head: list[float] = []
    for a in parts:
        head += [a.ndim, *a.shape]
    return np.concatenate([np.array(head, float), *(np.ravel(a).astype(float) for a in parts)])


@numba.njit(cache=True)
def _arrays(buf: np.ndarray, n: int) -> tuple[int, list[tuple[int, int, int, int]]]:
    """The offset of :func:`_pack`'s values in ``buf`` and each of its ``n`` arrays'
    (dimensions, shape padded with 1) in order."""
    pos, dims = 0, []
    for _ in range(n):
        nd = int(buf[pos])
        s = [1, 1, 1]
        for j in range(nd):
            s[j] = int(buf[pos + 1 + j])
        dims.append((nd, s[0], s[1], s[2]))
        pos += 1 + nd
    return pos, dims


@numba.njit(cache=True)
def _frames_step(
    consts: np.ndarray, state: np.ndarray, t: np.ndarray, inc: np.ndarray, imu: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """:func:`_split_chunk` over the frames at ``t`` (K,) s with increments ``inc`` (K, 3)
    and the IMU's heading increments ``imu`` (K,, or empty) from ``state`` (updated in
    place), the constants unpacked from ``consts``; the (K, :data:`OUT`) outputs."""
    pos, d = _arrays(consts, 15)
    parts = []
    for _nd, a, b, c in d:
        parts.append(consts[pos : pos + a * b * c])
        pos += a * b * c
    kind = int(parts[0][0])
    axis_consts = parts[1].reshape((3, 7))
    law = (parts[3].reshape((d[3][1], d[3][2])), parts[4].copy(),
           parts[5].reshape((d[5][1], d[5][2])))  # fmt: skip
    n_sens = d[12][2]
    sens = state[_SENS : _SENS + 6 * n_sens].reshape((2, 3, n_sens))
    cal = (sens[0].copy(), sens[1].copy(), state[_ENDS + 8 : _ENDS + 11].copy(),
           parts[6].reshape((d[6][1], d[6][2])), parts[7].reshape((d[7][1], d[7][2])),
           parts[8].copy(), parts[9].reshape((d[9][1], d[9][2])))  # fmt: skip
    rounding = (parts[10].reshape((d[10][1], d[10][2])), parts[11].copy())
    given = (parts[13].reshape((0, 3, 3)), parts[13].reshape((0, 3, 3)))
    h = int(state[2])
    hist = state[_HIST : _HIST + 12 * MOTION_HISTORY].reshape((3, 4, MOTION_HISTORY))
    carries = state[_CARRIES:_ENDS].reshape((3, 14))
    no_fix = (parts[14].astype(np.int64), parts[14].copy(), parts[14].copy())
    k_n = t.size
    times = np.empty(k_n + 1)
    times[0] = state[0]
    times[1:] = t
    out = _split_chunk(
        times, inc, imu, _NO_IMU,
        (kind, parts[2].copy(), given, law, state[_ENDS : _ENDS + 8].copy()), cal,
        rounding, (axis_consts, (carries[0].copy(), carries[1].copy(), carries[2].copy())),
        (hist[0, :, :h].copy(), hist[1, :, :h].copy(), hist[2, :, :h].copy()),
        (no_fix, no_fix, no_fix),
    )  # fmt: skip
    n = k_n + 1
    rows = np.empty((k_n, OUT))
    for j, (floats, _, history) in enumerate(out[:3]):  # θ, x, y
        carries[j] = floats[-14:]
        h_new = history.shape[1]
        hist[j, :, :h_new] = history
        state[2] = h_new
        col = (j + 2) % 3  # x, y, θ order in the rows
        for k in range(k_n):
            rows[k, 9 + col] = floats[3 * n + 1 + k]
            rows[k, 12 + col] = floats[7 * n + 1 + k]
    dt, ends, new_sens, pvv, u2 = out[3], out[4], out[5], out[6], out[7]
    state[_ENDS : _ENDS + 11] = ends
    if n_sens:
        sens[:] = new_sens
    for k in range(k_n):
        for i in range(3):
            rows[k, 3 * i : 3 * i + 3] = pvv[i, k + 1]
        rows[k, 15] = dt[k]
        rows[k, 16] = u2[k]
    if k_n:
        state[0] = t[-1]
    state[1] += k_n
    return rows


class FrameStepper:
    """:meth:`SplitFilter.step` of ``filters`` from ``state`` on buffers (module docstring):
    :meth:`step` gives the outputs, :meth:`state` the :class:`FilterState` the same steps
    would have given.

    Raises:
        FusionError: filters or a state this path does not take (pose aiding, a slip
            model of given step covariances): step those through ``SplitFilter.step``.
    """

    def __init__(self, filters: SplitFilter, state: FilterState) -> None:
        if not self.takes(filters, state):
            raise FusionError("the frame stepper takes no pose aiding and no OdometryDrift")
        model = state.model
        self.filters, self.model = filters, model
        drift = model.drift
        law = drift.kernel_arrays if isinstance(drift, PodSlip) else _NO_LAW
        cal = _NO_CAL[3:] if model.calibration is None else model.calibration.kernel_arrays
        rounding = (_NO_ROUNDING, _NO_FLOOR) if model.rounding is None else model.rounding
        kind = 2 if isinstance(drift, PodSlip) else 0
        sens = (np.empty((3, 0)),) * 2 if state.calibration is None else state.calibration
        p = sens[0].shape[1]  # calibration parameters (the sensitivities' shape in _pack)
        self._consts = _pack([np.array([kind]), filters._consts, filters.drift_q, *law, *cal,
                              *rounding, np.empty((0, p)), _NO_STEPS, _NO_FIXES[1]])  # fmt: skip
        self._state = np.zeros(_SENS + 6 * p)
        self._state[:2] = state.t_s, state.frames
        axes = (state.theta, state.x, state.y)
        h = {a.history.shape[1] for a in axes}
        if len(h) != 1:
            raise FusionError("the axes' motion histories differ in length")
        self._state[2] = h.pop()
        self._state[_CARRIES:_ENDS] = np.concatenate([a.carry for a in axes])
        carry = _NO_CARRY if state.pose_error is None else state.pose_error
        self._state[_ENDS : _ENDS + 11] = np.concatenate([carry, state.calibration_var])
        hist = self._state[_HIST:_SENS].reshape((3, 4, MOTION_HISTORY))
        for j, a in enumerate(axes):
            hist[j, :, : a.history.shape[1]] = a.history
        if p:
            self._state[_SENS:] = np.concatenate([np.ravel(s) for s in sens])

    @staticmethod
    def takes(filters: SplitFilter, state: FilterState) -> bool:
        """Whether these filters from this state step here."""
        return (filters.aid_model is None and state.aid is None and state.odometry is None
                and not isinstance(state.model.drift, OdometryDrift))  # fmt: skip

    @property
    def t_s(self) -> float:
        """Time of the last frame filtered (s)."""
        return float(self._state[0])

    def step(
        self, t_s: np.ndarray, body_increments: np.ndarray, imu_dtheta: np.ndarray | None = None
    ) -> np.ndarray:
        """Filter the frames at ``t_s`` (K,) s with the body increments (K, 3) and the IMU's
        heading increments (K,) rad (None: no IMU) (as
        :class:`~sensorbench.fusion.split_filter.FrameChunk`'s); their (K, :data:`OUT`)
        outputs.

        Raises:
            FusionError: times not after the last frame's and strictly increasing, or
                arrays of other shapes.
        """
        t = np.asarray(t_s, dtype=float)
        inc = np.ascontiguousarray(body_increments, dtype=float)
        imu = _NO_IMU if imu_dtheta is None else np.ascontiguousarray(imu_dtheta, dtype=float)
        if inc.ndim != 2 or inc.shape[1] != 3 or t.shape != (inc.shape[0],) or (
            imu.size not in (0, t.size)
        ):
            raise FusionError(f"need K times, (K, 3) increments and K or no IMU increments, "
                              f"got {t.shape}, {inc.shape} and {imu.shape}")  # fmt: skip
        try:
            return _frames_step(self._consts, self._state, t, inc, imu)
        except ValueError as exc:  # the only one the kernel raises
            raise FusionError(str(exc)) from exc

    def state(self) -> FilterState:
        """The filters' state after the frames stepped so far."""
        st, model = self._state, self.model
        h = int(st[2])
        hist = st[_HIST:_SENS].reshape((3, 4, MOTION_HISTORY))
        carries = st[_CARRIES:_ENDS].reshape((3, 14))
        theta, x, y = (AxisState(carries[j].copy(), hist[j, :, :h].copy()) for j in range(3))
        p = (st.size - _SENS) // 6
        sens: Any = st[_SENS:].reshape((2, 3, p))
        return FilterState(
            model=model,
            t_s=float(st[0]),
            frames=int(st[1]),
            x=x,
            y=y,
            theta=theta,
            odometry=None,
            pose_error=None if model.drift is None else st[_ENDS : _ENDS + 8].copy(),
            calibration=None if model.calibration is None else (sens[0].copy(), sens[1].copy()),
            calibration_var=st[_ENDS + 8 : _ENDS + 11].copy(),
            aid=None,
        )
