"""The compiled frame loop of one split-filter axis (numba): prediction, gated update,
rejection streaks, the odometry anchor and the absolute fixes of the frame offset
(:func:`~sensorbench.fusion.axis_step.step_axis` prepares its inputs), written on scalars:
one replay of 10 000 frames takes about a millisecond (the noise fit runs hundreds).

Inputs, state and outputs are each a ``typing.NamedTuple`` (:class:`AxisSteps`,
:class:`AxisLoopState`, :class:`AxisOutputs`): named fields, yet a
plain tuple to numba, so ``cache=True`` works (a jitclass or structref is not cached).
:func:`predict_pv` and :func:`update_p` are the Kalman predict and update written out on
the 2×2 covariance's three scalars (tests compare them with the matrix form).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numba
import numpy as np

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
NIS_GATE_99 = 6.63
VAR_V0 = 1.0
"""An axis's initial velocity variance (unit²/s², the initial velocity is 0), and the least
a forced update resets it to."""
MAX_REJECTS = 8
"""Consecutive rejected increments after which the streak's odometry is restored, the next
increment applied and the velocity variance reset to :data:`VAR_V0` (counted in
``resets``; docs/PODS.md § "Split filters")."""
MAX_CARRIED = 3
"""The same after this many consecutive rejections whose steps were all kept (three 1 %
events in a row, 10⁻⁶: the model is wrong, not the data)."""

Cov2 = tuple[float, float, float, float, float]
"""(p, v, Var p, Cov(p, v), Var v) of one axis."""


@numba.njit(cache=True)
def predict_pv(
    p: float, v: float, ppp: float, ppv: float, pvv: float, q: float, h: float, u: float = 0.0
) -> Cov2:
    """Propagate one axis ``h`` seconds under the velocity random walk ``q``, with a known
    acceleration ``u`` (unit/s², a control input: it moves the mean, not the covariance)."""
    qh = q * h
    pvv_n = pvv + qh
    return (
        p + v * h + 0.5 * u * h * h,
        v + u * h,
        ppp + 2.0 * h * ppv + h * h * pvv + qh * h * h,
        ppv + h * pvv_n,
        pvv_n,
    )


@numba.njit(cache=True)
def update_p(p: float, v: float, ppp: float, ppv: float, pvv: float, nu: float, s: float) -> Cov2:
    """Kalman update with a position innovation ``nu`` (unit) of variance ``s`` = Var p + r
    (unit²), H = [1, 0]: the gain is ``(Var p, Cov(p, v))/s``; returns the state and its
    covariance."""
    kp = ppp / s
    kv = ppv / s
    return (
        p + kp * nu,
        v + kv * nu,
        ppp - kp * kp * s,
        ppv - kp * kv * s,
        pvv - kv * kv * s,
    )


class AxisSteps(NamedTuple):
    """Per-step inputs of one axis over K frames (arrays (K,) unless stated; unit = m or
    rad of the axis).

    Attributes:
        dt: step durations (s).
        z: odometry increments (unit); nan = no measurement (predict only).
        u: acceleration fed forward (unit/s²).
        q: velocity random walk of each step (unit²/s³).
        slip: position random walk the odometry takes over each step (unit²).
        rounding: the odometry position's rounding variance r of each step (unit²).
        drift: growth of the frame offset's variance over each step (unit²).
        scored: whether the step's innovation enters the likelihood (bool).
        censor: ν² bound (unit²) beyond which an innovation counts only as exceeding it
            (∞ = none).
        aid_k: (M,) int64, frame 1..K after whose update each absolute fix is applied
            (non-decreasing).
        aid_z, aid_r: (M,) the fixes (unit) and their variances (unit²).
    """

    dt: np.ndarray
    z: np.ndarray
    u: np.ndarray
    q: np.ndarray
    slip: np.ndarray
    rounding: np.ndarray
    drift: np.ndarray
    scored: np.ndarray
    censor: np.ndarray
    aid_k: np.ndarray
    aid_z: np.ndarray
    aid_r: np.ndarray


class AxisLoopState(NamedTuple):
    """What the loop carries from one frame to the next (unit = m or rad of the axis).

    Attributes:
        p, v: position (odometry frame, unit) and velocity (unit/s).
        ppp, ppv, pvv: Var p, Cov(p, v), Var v.
        b, pbb: the frame offset (world minus odometry frame) and its variance.
        odo: the odometry position measurement, anchored to the estimate.
        streak: consecutive rejected updates so far.
        carried: consecutive rejected updates so far whose own steps were carried.
        anchor: the odometry before the streak's first rejection.
        raw: the sum of the streak's raw increments.
        resets: updates forced after :data:`MAX_REJECTS` rejections so far.
        nll: negative log-likelihood of the scored innovations so far.
    """

    p: float
    v: float
    ppp: float
    ppv: float
    pvv: float
    b: float
    pbb: float
    odo: float
    streak: int
    carried: int
    anchor: float
    raw: float
    resets: int
    nll: float


class AxisOutputs(NamedTuple):
    """Per-frame results the loop fills in (preallocated; nan/True where nothing happened).

    Attributes:
        position, velocity, var_p, var_v: (K,) after each frame: p + b (unit), v,
            Var p + Var b, Var v.
        nis, innovation, s: (K,) ν²/S, ν and S of each odometry update.
        accepted: (K,) bool, whether the update passed the gate.
        aid_nis, aid_accepted: (M,) the same for each absolute fix.
        kept: (K,) how far the odometry the state follows moved beyond the frame's
            increment (unit; nan without one): 0 where the increment was taken (accepted or
            carried), minus the excess over the gate a rejected increment dropped, the
            streak's dropped excess put back on a forced update.
    """

    position: np.ndarray
    velocity: np.ndarray
    var_p: np.ndarray
    var_v: np.ndarray
    nis: np.ndarray
    innovation: np.ndarray
    s: np.ndarray
    accepted: np.ndarray
    aid_nis: np.ndarray
    aid_accepted: np.ndarray
    kept: np.ndarray


def start_state(p0: float, var_p0: float) -> AxisLoopState:
    """The loop state before the first frame: at rest at ``p0`` (odometry anchored there),
    the start's uncertainty ``var_p0`` carried by the frame offset."""
    p = float(p0)
    return AxisLoopState(
        p, 0.0, 0.0, 0.0, VAR_V0, 0.0, float(var_p0), p, 0, 0, 0.0, 0.0, 0, 0.0
    )


@numba.njit(cache=True)
def log_two_tail(x: float) -> float:
    """log P(|Z| > x) for a standard normal Z (its asymptotic series far out, where erfc
    underflows)."""
    if x < 25.0:
        return math.log(math.erfc(x / math.sqrt(2.0)))
    return -0.5 * x * x - math.log(x * math.sqrt(0.5 * math.pi))


@numba.njit(cache=True)
def axis_loop(
    steps: AxisSteps, gate: float, state: AxisLoopState, out: AxisOutputs
) -> AxisLoopState:
    """Run the K frames of ``steps`` from ``state``, filling ``out``; returns the state
    after the last frame. ``gate`` bounds the ν²/S of the odometry updates and the fixes
    (χ²₁). Its ``nll`` has gained the negative log-likelihood of the
    innovations of the ``scored`` frames under N(0, S), each beyond its ``censor`` bound
    counting only as P(|ν| > bound); its ``resets`` the updates forced after
    :data:`MAX_REJECTS` consecutive rejections."""
    nll = state.nll
    n_aid = steps.aid_k.size
    ai = 0
    resets, streak, carried = state.resets, state.streak, state.carried
    anchor, raw, odo = state.anchor, state.raw, state.odo
    p, v = state.p, state.v
    ppp, ppv, pvv = state.ppp, state.ppv, state.pvv
    b, pbb = state.b, state.pbb
    for k in range(steps.dt.size):
        p_prev = p
        hk = steps.dt[k]
        p, v, ppp, ppv, pvv = predict_pv(p, v, ppp, ppv, pvv, steps.q[k], hk, steps.u[k])
        ppp += steps.slip[k]
        zk = steps.z[k]
        out.kept[k] = 0.0
        if zk != zk:  # nan: no measurement, the odometry follows the prediction
            odo += p - p_prev
            out.kept[k] = np.nan
        else:
            # update with the odometry position: y = odo + z, H = [1, 0], R = r_k
            r_k = steps.rounding[k]
            s = ppp + r_k
            nu = odo + zk - p
            nis = nu * nu / s
            out.nis[k], out.innovation[k], out.s[k] = nis, nu, s
            if steps.scored[k]:
                if nu * nu > steps.censor[k]:
                    nll -= log_two_tail(np.sqrt(steps.censor[k] / s))
                else:
                    nll += HALF_LOG_2PI + 0.5 * np.log(s) + 0.5 * nis
            forced = streak >= MAX_REJECTS or carried >= MAX_CARRIED
            if nis <= gate or forced:
                if forced:
                    # the model, not the data, was wrong: restore the odometry the
                    # streak replaced by predictions and let the velocity jump
                    resets += 1
                    out.kept[k] = anchor + raw - odo
                    odo = anchor + raw
                    nu = odo + zk - p
                    pvv = max(pvv, VAR_V0)
                    s = ppp + r_k
                streak = carried = 0
                odo += zk
                p, v, ppp, ppv, pvv = update_p(p, v, ppp, ppv, pvv, nu, s)
            else:
                # never applied. A step the prediction's own step explains (within the
                # gate, about S its variance) is carried: the odometry position's error is
                # white, or the prediction lags the motion, and nothing of the step is
                # lost. A step it cannot explain (a bouncing wheel's lost ticks) is not:
                # the odometry advances by the prediction plus the innovation clipped
                # to the gate
                out.accepted[k] = False
                if streak == 0:
                    anchor, raw = odo, 0.0
                streak += 1
                raw += zk
                step_nu = zk - (p - p_prev)
                if step_nu * step_nu <= gate * s:
                    carried += 1
                    odo += zk
                else:
                    carried = 0
                    bound = np.sqrt(gate * s)
                    clipped = min(max(nu, -bound), bound)
                    out.kept[k] = clipped - nu
                    odo = p + clipped
        pbb = max(pbb + steps.drift[k], 0.0)
        while ai < n_aid and steps.aid_k[ai] == k + 1:
            # absolute fix z = p + b + e: only the frame offset b moves
            s = pbb + ppp + steps.aid_r[ai]
            nu = steps.aid_z[ai] - p - b
            nis = nu * nu / s
            out.aid_nis[ai] = nis
            if nis <= gate:
                kb = pbb / s
                b += kb * nu
                pbb -= kb * pbb
            else:
                out.aid_accepted[ai] = False
            ai += 1
        out.position[k], out.velocity[k] = p + b, v
        out.var_p[k], out.var_v[k] = ppp + pbb, pvv
    return AxisLoopState(
        p, v, ppp, ppv, pvv, b, pbb, odo, streak, carried, anchor, raw, resets, nll
    )


class NllSeries(NamedTuple):
    """One axis series for :func:`nll_sets` (arrays (K,) unless stated; dt, z, u, scored
    and censor as :class:`AxisSteps`').

    Attributes:
        jerk: the observed jerk (unit/s³), unreduced by its noise.
        jerk_gains: (4, K) the jerk's noise variance per unit of r, of slip_scale and of
            drag_scale, and that of ``stamp`` (whole).
        slip, drag: rolling and dragging slip variance of each step (unit²).
        profile: the rounding's profile (r of a step = r·profile + stamp).
        stamp: what the frame times' error adds to each step's r (unit²).
    """

    dt: np.ndarray
    z: np.ndarray
    u: np.ndarray
    jerk: np.ndarray
    jerk_gains: np.ndarray
    slip: np.ndarray
    drag: np.ndarray
    profile: np.ndarray
    stamp: np.ndarray
    scored: np.ndarray
    censor: np.ndarray


@numba.njit(cache=True)
def nll_sets(series: NllSeries, params: np.ndarray, gate: float) -> np.ndarray:
    """Negative log-likelihood (M,) of one series under M parameter sets, rows of
    ``params`` (q, r, q_jerk, slip_scale, drag_scale): :func:`axis_loop` from rest at 0
    with each set's q per step ``q + q_jerk·max(ĵ² − (r, slip_scale, drag_scale)·
    jerk_gains, 0)``, slip ``slip_scale·slip + drag_scale·drag`` and rounding
    ``r·profile + stamp``; no frame offset drift, no absolute fixes."""
    k_n = series.dt.size
    m = params.shape[0]
    total = np.empty(m)
    # the per-frame outputs are not read: one scratch array takes them all
    x = np.empty(k_n)
    accepted, no_aid = np.empty(k_n, dtype=np.bool_), np.empty(0, dtype=np.bool_)
    out = AxisOutputs(x, x, x, x, x, x, x, accepted, np.empty(0), no_aid, x)
    q_steps = np.empty(k_n)
    slip_steps = np.empty(k_n)
    rounding = np.empty(k_n)
    steps = AxisSteps(
        series.dt,
        series.z,
        series.u,
        q_steps,
        slip_steps,
        rounding,
        np.zeros(k_n),
        series.scored,
        series.censor,
        np.empty(0, dtype=np.int64),
        np.empty(0),
        np.empty(0),
    )
    gains, jerk = series.jerk_gains, series.jerk
    start = AxisLoopState(
        0.0, 0.0, 0.0, 0.0, VAR_V0, 0.0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0, 0.0
    )
    for i in range(m):
        q, r, qj, sc, dc = params[i, 0], params[i, 1], params[i, 2], params[i, 3], params[i, 4]
        for k in range(k_n):
            noise = r * gains[0, k] + sc * gains[1, k] + dc * gains[2, k] + gains[3, k]
            q_steps[k] = q + qj * max(jerk[k] * jerk[k] - noise, 0.0)
            slip_steps[k] = sc * series.slip[k] + dc * series.drag[k]
            rounding[k] = r * series.profile[k] + series.stamp[k]
        out.accepted[:] = True
        total[i] = axis_loop(steps, gate, start, out).nll
    return total
