"""The split filters' step compiled: one call per chunk of frames (live: per frame).

:func:`_split_chunk` is :meth:`~sensorbench.fusion.split_filter.SplitFilter.step` in one
numba call (the model: :mod:`~sensorbench.fusion.split_filter`): the slip law's step
covariances, the calibration's variances, the heading filter, then the x and y filters
along the heading it gives (:func:`~sensorbench.fusion.axis_step._axis_chunk` per axis).
Replay and live call it alike, so they agree to the last bit (docs/LIVE.md, Cost).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from sensorbench.fusion.axis_step import _axis_chunk, _axis_run, _axis_steps
from sensorbench.fusion.odometry_drift import (
    _body_covariances,
    _carry_pose_error,
    _carry_sensitivities,
    _tick_variances,
    _world,
    correct_creep,
)


@numba.njit(cache=True)
def _arc(dx: float, dy: float, dth: float, heading: float) -> tuple[float, float]:
    """World x and y (m) of one constant-twist arc (dx, dy m, dth rad) from ``heading``."""
    if abs(dth) < 1e-6:
        s, c = 1.0 - dth**2 / 6.0, dth / 2.0 - dth**3 / 24.0
    else:
        s, c = np.sin(dth) / dth, (1.0 - np.cos(dth)) / dth
    rx, ry = s * dx - c * dy, c * dx + s * dy
    ch, sh = np.cos(heading), np.sin(heading)
    return ch * rx - sh * ry, sh * rx + ch * ry


@numba.njit(cache=True)
def world_arcs(inc: np.ndarray, heading: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World-frame x and y (m) of each step's constant-twist arc (the SE(2) exponential of
    the body increments ``inc`` (K, 3), as :func:`~sensorbench.fusion.pod_kinematics.se2_exp`)
    rotated by ``heading`` (K,) rad at its start; nan where a row has nan. Compiled: a live
    frame and a replay's K rows take the same sin and cos (docs/LIVE.md, Cost)."""
    n = inc.shape[0]
    x, y = np.empty(n), np.empty(n)
    for k in range(n):
        dx, dy, dth = inc[k, 0], inc[k, 1], inc[k, 2]
        if np.isnan(dx) or np.isnan(dy) or np.isnan(dth):
            x[k] = y[k] = np.nan
        else:
            x[k], y[k] = _arc(dx, dy, dth, heading[k])
    return x, y


@numba.njit(cache=True)
def dead_reckon(inc: np.ndarray, pose0: np.ndarray) -> np.ndarray:
    """The odometry path (K+1, 3) (m, m, rad unwrapped) from ``pose0`` (3,) over the body
    increments ``inc`` (K, 3), a nan component taken as 0: :func:`world_arcs` summed step
    after step, as :func:`~sensorbench.fusion.pod_kinematics.integrate_path`."""
    n = inc.shape[0]
    out = np.empty((n + 1, 3))
    out[0] = pose0
    for k in range(n):
        d = np.where(np.isnan(inc[k]), 0.0, inc[k])
        wx, wy = _arc(d[0], d[1], d[2], out[k, 2])
        out[k + 1, 0], out[k + 1, 1] = out[k, 0] + wx, out[k, 1] + wy
        out[k + 1, 2] = out[k, 2] + d[2]
    return out


@numba.njit(cache=True)
def _xy_inputs(
    inc: np.ndarray, heading: np.ndarray, roll: np.ndarray, drag: np.ndarray, rounding: np.ndarray
) -> np.ndarray:
    """What the x and y filters take from the heading filter's ``heading`` (K,) rad, (8, K):
    the :func:`world_arcs` of ``inc`` (K, 3) (m), then x and y of ``R(θ)·C·R(θ)ᵀ``
    (:func:`~sensorbench.fusion.odometry_drift.world_step_variances`, m²) for the rolling and
    dragging slip step covariances ``roll`` and ``drag`` (K, 3, 3) and the tick rounding
    covariance ``rounding`` (3, 3); rows left nan for an empty (0, ...) one."""
    out = np.full((8, inc.shape[0]), np.nan)
    out[0], out[1] = world_arcs(inc, heading)
    for k in range(inc.shape[0]):
        c, s = np.cos(heading[k]), np.sin(heading[k])
        if roll.shape[0]:
            out[2, k], out[3, k] = _world(c, s, roll[k])
            out[4, k], out[5, k] = _world(c, s, drag[k])
        if rounding.shape[0]:
            out[6, k], out[7, k] = _world(c, s, rounding)
    return out


@numba.njit(cache=True)
def _steps_from(first: np.ndarray, series: np.ndarray) -> np.ndarray:
    """``series[k] − series[k−1]`` along axis 0, with ``first`` before ``series[0]``."""
    out = series.copy()
    out[1:] -= series[:-1]
    if out.shape[0]:
        out[0] -= first
    return out


@numba.njit(cache=True)
def _frame_rounding(
    w: np.ndarray, w_theta: np.ndarray, tick_var: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """The heading's rounding variance (K,) rad² of each frame's count changes: W (N, 3),
    W⁺'s heading row ``w_theta`` (N,) (rad per tick), ``tick_var`` (K, N) the slip law's
    variance of each pod's travel (tick²); an IMU's row (0, 0, 1) does not round. A pod's
    count change errs from its travel by −f or 1 − f ticks, f the travel's fraction of a
    tick: variance f(1 − f), which the travel's slip s (tick²) smooths. At the worst
    fraction, ½, its mean is 1/6 + Σₙ (−1)ⁿ⁺¹ e^(−2π²n²s)/(π²n²): 1/4 tick² without slip,
    the two independent ends' 1/6 under much (docs/PODS.md, "A lifted or slipping
    wheel")."""
    out = np.zeros(tick_var.shape[0])
    for k in range(tick_var.shape[0]):
        for i in range(w_theta.size):
            if w[i, 0] == 0.0 and w[i, 1] == 0.0:
                continue
            g = 1.0 / 6.0
            for n in range(1, 13):
                term = np.exp(-2.0 * np.pi**2 * n * n * tick_var[k, i]) / (np.pi**2 * n * n)
                g += term if n % 2 else -term
                if term < 1e-9:
                    break
            out[k] += w_theta[i] ** 2 * g
    return out


WIDEN_SIGMA = 4.0
"""A frame whose pods' heading increment is further from the IMU's than its rounding can
take it plus this many σ of the law's slip widens the stated pose (docs/PODS.md, "A lifted
or slipping wheel")."""


@numba.njit(cache=True)
def _disagreement(
    slip: np.ndarray, dtheta: np.ndarray, imu: np.ndarray, rest: np.ndarray,
    ends: tuple[np.ndarray, float], a0: float, kept: np.ndarray,
) -> np.ndarray:  # pragma: no cover - compiled
    """The pods' heading increments ``dtheta`` (K,) against the IMU's ``imu`` (K,) rad, (2,
    K): the disagreement ``u² = (Δθ_pods − Δθ_imu)²/(slip + ends[0])`` (nan at rest or
    without either), ``slip`` (K,) the law's heading variance of each step and ``ends`` a
    frame's rounding, its variance (K,) (rad², :func:`_frame_rounding`) and bound (rad); and A
    (rad) after each step, from ``a0``: the sum of the |disagreement| the heading filter's
    odometry took (``dtheta`` plus ``kept`` (K,) rad, the loop's
    :class:`~sensorbench.fusion.axis_loop.AxisOutputs`; empty: all of it) in the frames
    where it is beyond the bound plus :data:`WIDEN_SIGMA` σ of the slip, the σ the heading
    is widened by, for good."""
    out = np.full((2, dtheta.size), np.nan)
    a = a0
    for k in range(dtheta.size):
        r = dtheta[k] - imu[k]
        if not rest[k] and r == r:
            out[0, k] = r * r / (slip[k] + ends[0][k])
            taken = r + kept[k] if kept.size else r
            bound = ends[1] + WIDEN_SIGMA * np.sqrt(slip[k])
            if abs(r) > bound or abs(taken) > bound:
                a += abs(taken)
        out[1, k] = a
    return out


@numba.njit(cache=True)
def _lever(w_inv: np.ndarray) -> float:
    """The most translation (m) per rad of heading any pod's slip puts into the body step
    (W⁺ (3, N)), over the pods whose slip moves the heading by at least a tenth of the most."""
    top = np.max(np.abs(w_inv[2]))
    out = 0.0
    for i in range(w_inv.shape[1]):
        if abs(w_inv[2, i]) >= 0.1 * top:
            out = max(out, np.hypot(w_inv[0, i], w_inv[1, i]) / abs(w_inv[2, i]))
    return out


@numba.njit(cache=True)
def _widen_xy(
    a: np.ndarray, wx: np.ndarray, wy: np.ndarray, rho: float, a0: float, carry: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """Growth (K,) of the x and y variances (m²) under the heading widened by ``a`` (K,)
    rad (``a0`` before): σ_k = |V_k| + ``rho``·A_k, ``V = Σ A_k·(wx_k, wy_k)`` over the
    world steps (m; nan: none) carried in ``carry[6:8]`` — the position error a heading
    error A_k coherent over the path gives, taken on both axes (its direction turns with
    the error), and the slipping pod's own share (:func:`_lever`); its rises summed,
    never shrinking."""
    out = np.zeros(a.size)
    vx, vy = carry[6], carry[7]
    prev = np.hypot(vx, vy) + rho * a0
    for k in range(a.size):
        if a[k] > 0 and wx[k] == wx[k] and wy[k] == wy[k]:
            vx, vy = vx + a[k] * wx[k], vy + a[k] * wy[k]
            now = np.hypot(vx, vy) + rho * a[k]
            out[k] = max(now * now - prev * prev, 0.0)
            prev = now
    carry[6], carry[7] = vx, vy
    return out


@numba.njit(cache=True)
def _add_heading_variance(
    step_cov: np.ndarray, heading_var: np.ndarray, w: np.ndarray, w_inv: np.ndarray
) -> None:  # pragma: no cover - compiled
    """Add the heading's variance growth (K,) rad² to the body step covariances (K, 3, 3):
    through W⁺'s (3, N) IMU column when W's (N, 3) last row is an IMU's (0, 0, 1), so the
    two pods' Δx, Δy carry the heading error their lever arms give; else to θθ."""
    v = np.array([0.0, 0.0, 1.0])
    if w.shape[0] and w[-1, 0] == 0.0 and w[-1, 1] == 0.0:
        v = w_inv[:, -1].copy()
    for k in range(heading_var.size):
        for j in range(3):
            for m in range(3):
                step_cov[k, j, m] += v[j] * v[m] * heading_var[k]


@numba.njit(cache=True)
def _split_chunk(
    t: np.ndarray,
    inc: np.ndarray,
    imu: np.ndarray,
    heading_var: np.ndarray,
    drift: tuple[int, np.ndarray, tuple[np.ndarray, np.ndarray],
                 tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    cal: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
               np.ndarray],
    rounding: tuple[np.ndarray, np.ndarray],
    axes: tuple[np.ndarray, tuple[np.ndarray, ...]],
    histories: tuple[np.ndarray, np.ndarray, np.ndarray],
    fixes: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...],
) -> tuple[Any, ...]:  # pragma: no cover - compiled
    """:meth:`SplitFilter.step` compiled, one call per chunk (live: per frame).

    Arguments: the frame times (K+1,) s (index 0 the state's), the increments (K, 3), the
    IMU's heading increments (K,) rad (empty: none; :func:`_disagreement`), the heading's
    variance growth (K,) rad² beyond the slip law's (empty: none; the gyro bias of an IMU
    heading, :func:`~sensorbench.fusion.pod_kinematics.imu_bias_variance`), ``drift`` =
    (kind: 0 none, 1 given parts, 2 the pods' slip law; ``drift_q`` (3,) per s; the given
    (rolling, dragging) parts (K, 3, 3); the law's W, (roll, drag, turn) and
    W⁺; the pose error carry (xx, yy, θθ, xθ, yθ; A, V: :func:`_disagreement`,
    :func:`_widen_xy`)); ``cal`` = the calibration's
    sensitivities along the heading and along 0 (3, P each, P = 0: none), its variances
    (3,), W, W⁺, creep references and estimates
    (:func:`~sensorbench.fusion.odometry_drift.correct_creep`) and parameter covariance;
    ``rounding`` = the rounding covariance (3, 3, or (0, 3): none) and its x and y floors
    (2,); per axis (θ, x, y) the kernel constants (a row of one (3, 7) array) and carry
    (14,) (``axes``), the motion history and the fixes (index, z, r).

    Returns per axis (θ, x, y) :func:`~sensorbench.fusion.axis_step._axis_chunk`'s
    outputs, the steps (K,) s, the new pose error carry and calibration variances (11,),
    the new sensitivities along the heading and along 0 (2, 3, P), the (K+1, 3) pose,
    velocity and variance of x, y, θ (3, K+1, 3) and the pods' disagreement with the IMU
    (K,, u²; :func:`_disagreement`): few arrays, as each returned one costs
    about a microsecond to box."""
    k_n = inc.shape[0]
    dt = t[1:] - t[:-1]
    for k in range(k_n):
        if not dt[k] > 0:
            raise ValueError("frame times must be strictly increasing")
    if cal[6].shape[0] > 3 * cal[3].shape[0]:
        inc = correct_creep(inc, np.maximum(dt, 1e-9), (cal[3], cal[4], cal[5]))
    rest = np.empty(k_n, dtype=np.bool_)
    for k in range(k_n):
        rest[k] = inc[k, 0] == 0 and inc[k, 1] == 0 and inc[k, 2] == 0
    kind, drift_q, given, law, carry0 = drift
    consts, carries = axes
    if kind == 2:
        roll_t, drag_t = _tick_variances(law[0], law[1], inc, dt)
        roll, drag = _body_covariances(law[2], roll_t), _body_covariances(law[2], drag_t)
    elif kind == 1:
        roll, drag = given
    else:
        roll = drag = np.empty((0, 3, 3))
    none, want = np.empty(0), np.empty(0, np.int64)
    widen = imu.size > 0 and kind == 2
    carry = carry0.copy()
    check = np.full((2, k_n), np.nan)
    if kind:
        step_cov = roll + drag
        if heading_var.size:
            _add_heading_variance(step_cov, heading_var, law[0], law[2])
        # the heading's share does not depend on the heading
        dv_t = step_cov[:, 2, 2].copy()
        if widen:
            # each pod's count change errs by under a tick: Σ|W⁺θ,i| bounds Δθ's rounding
            end_var = _frame_rounding(law[0], law[2][2], roll_t + drag_t)
            if not rounding[0].shape[0]:
                end_var[:] = 0.0
            bound = (end_var, float(np.sum(np.abs(law[2][2]))))
            law_t = dv_t.copy()
        slip_t, drag_var_t = roll[:, 2, 2].copy(), drag[:, 2, 2].copy()
    else:
        step_cov = roll
        dv_t, slip_t, drag_var_t = drift_q[2] * dt, none, none
        if heading_var.size:
            dv_t += heading_var
    sens_xy, sens_t, cal_var = cal[0].copy(), cal[1].copy(), cal[2].copy()
    pods, cov = (cal[3], cal[4], cal[5]), cal[6]
    h = np.maximum(dt, 1e-9)
    var_t = np.empty((k_n, 3))
    if sens_t.shape[1]:
        # the heading's own (along any heading): from the sensitivities at heading 0
        _carry_sensitivities(sens_t, (inc, np.zeros(k_n + 1), h), pods, cov, want, var_t,
                             np.empty((0, 3, cov.shape[0])))  # fmt: skip
        dv_t = dv_t + _steps_from(cal_var[2], var_t[:, 2])
    steps_t, series_t = _axis_steps(
        histories[0], (dt, inc[:, 2].copy(), slip_t, drag_var_t, none, dv_t), fixes[0],
        consts[0],
    )  # fmt: skip
    if widen:
        # widened by what the heading's odometry took, which neither the drift nor the
        # fixes change: its gate's verdicts first
        kept = np.empty(k_n)
        _axis_run(steps_t, series_t, rest, consts[0][6], carries[0], kept)
        check = _disagreement(law_t, inc[:, 2], imu, rest, bound, carry0[5], kept)
        steps_t.drift[:] += _steps_from(carry0[5] ** 2, check[1] ** 2)
        carry[5] = check[1, -1] if k_n else carry0[5]
    f_t, fl_t, hi_t = _axis_run(steps_t, series_t, rest, consts[0][6], carries[0], np.empty(k_n))
    heading = f_t[: k_n + 1]
    if kind:
        # x and y drift with the heading error, along the path the heading filter gives
        world = _steps_from(carry0[:3], _carry_pose_error(carry, inc, heading, step_cov))
        dv_x, dv_y = world[:, 0].copy(), world[:, 1].copy()
    else:
        dv_x, dv_y = drift_q[0] * dt, drift_q[1] * dt
    if sens_xy.shape[1]:
        var_xy = np.empty((k_n, 3))
        _carry_sensitivities(sens_xy, (inc, heading, h), pods, cov, want, var_xy,
                             np.empty((0, 3, cov.shape[0])))  # fmt: skip
        c = _steps_from(cal_var[:2], var_xy[:, :2])
        dv_x, dv_y = dv_x + c[:, 0], dv_y + c[:, 1]
        if k_n:
            cal_var[0], cal_var[1], cal_var[2] = var_xy[-1, 0], var_xy[-1, 1], var_t[-1, 2]
    w = _xy_inputs(inc, heading[:-1].copy(), roll, drag, rounding[0])
    if widen:
        grow = _widen_xy(check[1], w[0], w[1], _lever(law[2]), carry0[5], carry)
        dv_x, dv_y = dv_x + grow, dv_y + grow
    out = []
    for j in range(2):
        slip = w[2 + j].copy() if kind else none
        drag_var = w[4 + j].copy() if kind else none
        # PodGeometry.rounding_profile at the step's heading, its constants kept
        profile = w[6 + j] / rounding[1][j] if rounding[0].shape[0] else none
        dv = dv_x if j == 0 else dv_y
        out.append(_axis_chunk(
            histories[1 + j], (dt, w[j].copy(), slip, drag_var, profile, dv), rest,
            fixes[1 + j][0], fixes[1 + j][1], fixes[1 + j][2], consts[1 + j], carries[1 + j],
        ))  # fmt: skip
    n = k_n + 1
    rows = np.empty((3, n, 3))  # pose, velocity, var: x, y, θ side by side
    for i in range(3):
        for j, f in enumerate((out[0][0], out[1][0], f_t)):
            rows[i, :, j] = f[i * n : (i + 1) * n]
    sens = np.empty((2, *sens_xy.shape))
    sens[0], sens[1] = sens_xy, sens_t
    ends = np.concatenate((carry, cal_var))
    return (f_t, fl_t, hi_t), out[0], out[1], dt, ends, sens, rows, check[0].copy()
