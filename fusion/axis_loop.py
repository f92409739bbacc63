"""The compiled frame loop of one split-filter axis (numba): prediction, gated update with
the Schmidt rounding cross-covariance, rejection streaks, the odometry anchor and the
absolute fixes of the frame offset.

:func:`~sensorbench.fusion.axis_step.run_axis` prepares the per-step inputs and
documents the model; this is its loop, written on scalars with the kernels of
:mod:`~sensorbench.fusion.kalman_kernels` so that one replay of 10 000 frames takes about
a millisecond instead of 40 (the noise fit replays each axis hundreds of times).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from sensorbench.fusion.kalman_kernels import predict_pv, update_p_correlated

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@numba.njit(cache=True)
def log_two_tail(x: float) -> float:
    """log P(|Z| > x) for a standard normal Z (its asymptotic series far out, where erfc
    underflows)."""
    if x < 25.0:
        return math.log(math.erfc(x / math.sqrt(2.0)))
    return -0.5 * x * x - math.log(x * math.sqrt(0.5 * math.pi))


@numba.njit(cache=True)
def axis_loop(
    dt: np.ndarray,
    z: np.ndarray,
    u: np.ndarray,
    q_steps: np.ndarray,
    slip: np.ndarray,
    rounding: np.ndarray,
    rho: np.ndarray,
    drift: np.ndarray,
    gate_nis: float,
    var_v0: float,
    p0: float,
    var_p0: float,
    max_rejects: int,
    aid_k: np.ndarray,
    aid_z: np.ndarray,
    aid_r: np.ndarray,
    aid_gate: float,
    out: np.ndarray,
    nis_out: np.ndarray,
    nu_out: np.ndarray,
    s_out: np.ndarray,
    acc_out: np.ndarray,
    aid_nis: np.ndarray,
    aid_acc: np.ndarray,
    scored: np.ndarray,
    censor: np.ndarray,
) -> tuple[int, float]:
    """Run the K frames; ``out`` (4, K+1) receives p + b, v, Var p + Var b, Var v; the
    other outputs are filled per frame (nan/True where nothing happened). Returns the
    number of forced updates after ``max_rejects`` consecutive rejections and the negative
    log-likelihood of the innovations of the ``scored`` frames under N(0, S), each beyond
    its ``censor`` bound (ν², unit²; ∞ = none) counting only as P(|ν| > bound)."""
    k_n = dt.size
    nll = 0.0
    n_aid = aid_k.size
    ai = 0
    resets = 0
    streak = 0
    anchor = 0.0  # the odometry before the streak's first rejection
    raw = 0.0  # the sum of the streak's raw increments
    p, v = p0, 0.0
    odo = p0  # the odometry position measurement, anchored to the estimate
    ppp, ppv, pvv = 0.0, 0.0, var_v0
    cp, cv = 0.0, 0.0  # Cov((p̃, ṽ), e): the state error against the rounding it took in
    b, pbb = 0.0, var_p0
    out[0, 0], out[1, 0], out[2, 0], out[3, 0] = p, v, pbb, pvv
    for k in range(k_n):
        p_prev = p
        hk = dt[k]
        p, v, ppp, ppv, pvv = predict_pv(p, v, ppp, ppv, pvv, q_steps[k], hk, u[k])
        ppp += slip[k]
        cp, cv = rho[k] * (cp + hk * cv), rho[k] * cv
        zk = z[k]
        if zk != zk:  # nan: no measurement, the odometry follows the prediction
            odo += p - p_prev
        else:
            # update with the odometry position: y = odo + z, H = [1, 0], R = r_k
            r_k = rounding[k]
            s = ppp + 2.0 * cp + r_k
            nu = odo + zk - p
            nis = nu * nu / s
            nis_out[k], nu_out[k], s_out[k] = nis, nu, s
            if scored[k]:
                if nu * nu > censor[k]:
                    nll -= log_two_tail(np.sqrt(censor[k] / s))
                else:
                    nll += HALF_LOG_2PI + 0.5 * np.log(s) + 0.5 * nis
            forced = streak >= max_rejects
            if nis <= gate_nis or forced:
                if forced:
                    # the model, not the data, was wrong: restore the odometry the
                    # streak replaced by predictions and let the velocity jump
                    resets += 1
                    odo = anchor + raw
                    nu = odo + zk - p
                    pvv = max(pvv, var_v0)
                    s = ppp + 2.0 * cp + r_k
                streak = 0
                odo += zk
                p, v, ppp, ppv, pvv, cp, cv = update_p_correlated(
                    p, v, ppp, ppv, pvv, cp, cv, nu, s, r_k
                )
            else:
                # never applied: the odometry advances by the prediction plus the
                # innovation clipped to the gate (a sluggish model loses only the
                # excess, a bouncing wheel's lost ticks are dropped)
                acc_out[k] = False
                if streak == 0:
                    anchor, raw = odo, 0.0
                streak += 1
                raw += zk
                bound = np.sqrt(gate_nis * s)
                odo = p + min(max(nu, -bound), bound)
        pbb = max(pbb + drift[k], 0.0)
        while ai < n_aid and aid_k[ai] == k + 1:
            # absolute fix z = p + b + e: only the frame offset b moves
            s = pbb + ppp + aid_r[ai]
            nu = aid_z[ai] - p - b
            nis = nu * nu / s
            aid_nis[ai] = nis
            if nis <= aid_gate:
                kb = pbb / s
                b += kb * nu
                pbb -= kb * pbb
            else:
                aid_acc[ai] = False
            ai += 1
        out[0, k + 1], out[1, k + 1], out[2, k + 1], out[3, k + 1] = p + b, v, ppp + pbb, pvv
    return resets, nll


@numba.njit(cache=True)
def nll_sets(
    dt: np.ndarray,
    z: np.ndarray,
    u: np.ndarray,
    jerk: np.ndarray,
    jerk_gains: np.ndarray,
    slip: np.ndarray,
    drag: np.ndarray,
    profile: np.ndarray,
    rho: np.ndarray,
    scored: np.ndarray,
    censor: np.ndarray,
    params: np.ndarray,
    gate: float,
    var_v0: float,
    max_rejects: int,
) -> np.ndarray:
    """Negative log-likelihood (M,) of one series under M parameter sets, rows of
    ``params`` (q, r, q_jerk, slip_scale, drag_scale): :func:`axis_loop` with each set's q
    per step ``q + q_jerk·max(ĵ² − (r, slip_scale, drag_scale)·jerk_gains, 0)``, slip
    ``slip_scale·slip + drag_scale·drag`` and rounding ``r·profile``; ``jerk_gains``
    (3, K) the jerk's noise per unit of each."""
    k_n = dt.size
    m = params.shape[0]
    total = np.empty(m)
    out = np.empty((4, k_n + 1))
    nis_out = np.empty(k_n)
    nu_out = np.empty(k_n)
    s_out = np.empty(k_n)
    acc_out = np.empty(k_n, dtype=np.bool_)
    no_aid = np.empty(0, dtype=np.int64)
    empty = np.empty(0)
    aid_acc = np.empty(0, dtype=np.bool_)
    zeros = np.zeros(k_n)
    q_steps = np.empty(k_n)
    slip_steps = np.empty(k_n)
    rounding = np.empty(k_n)
    for i in range(m):
        q, r, qj, sc, dc = params[i, 0], params[i, 1], params[i, 2], params[i, 3], params[i, 4]
        for k in range(k_n):
            noise = r * jerk_gains[0, k] + sc * jerk_gains[1, k] + dc * jerk_gains[2, k]
            q_steps[k] = q + qj * max(jerk[k] * jerk[k] - noise, 0.0)
            slip_steps[k] = sc * slip[k] + dc * drag[k]
            rounding[k] = r * profile[k]
        acc_out[:] = True
        total[i] = axis_loop(
            dt,
            z,
            u,
            q_steps,
            slip_steps,
            rounding,
            rho,
            zeros,
            gate,
            var_v0,
            0.0,
            0.0,
            max_rejects,
            no_aid,
            empty,
            empty,
            gate,
            out,
            nis_out,
            nu_out,
            s_out,
            acc_out,
            empty,
            aid_acc,
            scored,
            censor,
        )[1]
    return total
