"""One axis of the split filters (:mod:`~sensorbench.fusion.split_filter`): its
per-step inputs prepared from the odometry and the noise, run through the compiled loop
(:mod:`~sensorbench.fusion.axis_loop`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sensorbench.fusion.axis_loop import axis_loop
from sensorbench.fusion.consistency import calibrated_nis, t_equivalent_gate
from sensorbench.fusion.odometry_motion import jerk_sq, observed_accel

if TYPE_CHECKING:
    from sensorbench.fusion.split_filter import AxisNoise

NIS_GATE_99 = 6.63


@dataclass
class AxisTrack:
    """Output of one axis filter over K frames (index 0 = initial state).

    Attributes:
        p, v: estimates after each frame (K+1,): position in the world (odometry
            frame plus its offset) and velocity.
        var_p, var_v: their variances (K+1,) (var_p includes the offset's).
        nis: NIS ν²/S of each odometry update (K,), nan where no update happened.
        nis_chi2: the same mapped through the axis's innovation law to χ²₁
            (:func:`~sensorbench.fusion.consistency.calibrated_nis`; = nis when Gaussian):
            the statistic the gate, the monitor and the consistency checks use.
        accepted: whether each odometry update passed the gate (K,).
        aid_nis, aid_accepted: NIS and gate result of each aiding update.
        innovation, s: innovation of each odometry update and its variance.
        resets: updates forced after ``max_rejects`` consecutive rejections.
    """

    p: np.ndarray
    v: np.ndarray
    var_p: np.ndarray
    var_v: np.ndarray
    nis: np.ndarray
    accepted: np.ndarray
    aid_nis: np.ndarray
    aid_accepted: np.ndarray
    innovation: np.ndarray
    s: np.ndarray
    nis_chi2: np.ndarray
    resets: int = 0

    @property
    def rejected(self) -> int:
        """Odometry updates rejected by the gate."""
        return int(np.count_nonzero(~self.accepted))

    @property
    def aid_rejected(self) -> int:
        """Aiding updates rejected by the gate."""
        return int(np.count_nonzero(~self.aid_accepted))


def run_axis(
    dt: np.ndarray,
    z: np.ndarray,
    noise: AxisNoise,
    p0: float = 0.0,
    var_p0: float = 0.0,
    var_v0: float = 1.0,
    gate: float = NIS_GATE_99,
    aid_index: np.ndarray | None = None,
    aid_z: np.ndarray | None = None,
    aid_r: np.ndarray | None = None,
    max_rejects: int = 8,
    drift_var: np.ndarray | None = None,
    slip_var: np.ndarray | None = None,
    rest: np.ndarray | None = None,
    r_profile: np.ndarray | None = None,
    drag_var: np.ndarray | None = None,
    r_corr: np.ndarray | None = None,
) -> AxisTrack:
    """Run one axis filter over K odometry increments.

    Args:
        dt: step durations (K,), s (> 0).
        z: odometry increments of the axis over each step (K,), m or rad; nan = no
            measurement (the step is predicted only).
        noise: q and r of the axis.
        p0, var_p0, var_v0: initial position, its variance, initial velocity variance
            (the initial velocity is 0).
        gate: χ²₁ threshold of the calibrated NIS; innovations above it are rejected and
            counted (with a Student-t law the raw ν²/S bound is its F(1, dof) equivalent,
            so the nominal rejection rate is P(χ²₁ > gate) either way: a heavy-tailed
            axis keeps its large but plausible innovations). Accepted updates are the
            linear Kalman update.
        aid_index: frame index k (1..K) after whose odometry update each absolute
            measurement is applied (sorted, may repeat).
        aid_z, aid_r: absolute measurements (m or rad) and their variances.
        drift_var: growth of the odometry frame's offset variance over each step (K,),
            unit²: how far the odometry drifts from the world (slip, scale), which is
            what absolute fixes correct; None = no drift. A negative entry (a heading
            error cancelling on the way back) shrinks it, never below 0.
        slip_var: the slip model's variance (K,) of each step (unit²): its rolling part
            when ``drag_var`` is given, else the whole; ``noise.slip_scale`` times it (plus
            ``noise.drag_share`` times ``drag_var``) is the position random walk the
            odometry takes by slip, added to Var p at each prediction (a step's increment
            may differ from the motion by its slip); None = none.
        drag_var: the dragging part (K,) of the slip model's step variance (unit²).
        r_corr: (K,) correlation of the rounding error at the end of each step with the one
            at its start (:func:`rounding_correlation`: 0 for a fresh draw, 1 for a wheel
            that did not turn, negative for one turning a steady half tick per frame);
            carried as the Schmidt cross-covariance of the state error with it; None = 0
            (white rounding).
        rest: (K,) True for frames where no pod's count changed: the update is applied, but
            its calibrated NIS is nan (not tested): the rounding error of an unchanged
            count is the previous frame's, not a fresh draw of r, so the white-r model
            over-states S there by design and the innovation tests nothing.
        r_profile: (K,) r is multiplied by it at each step: how the tick rounding of this
            axis at the step's heading differs from its heading-averaged level
            (:func:`rounding_profile`); None = r throughout.
        max_rejects: after this many consecutive rejected increments (a bounce
            spans a few frames) the model, not the data, is taken to be wrong: the
            odometry of the whole streak is restored, the next increment applied
            and the velocity variance reset to ``var_v0``; counted in ``resets``.

    Built from :mod:`~sensorbench.fusion.kalman_kernels` (the 2×2 covariance as three
    scalars); outputs go to preallocated arrays.
    """
    dt_a = np.ascontiguousarray(dt, dtype=float)
    z_a = np.ascontiguousarray(z, dtype=float)
    k_n = dt_a.size
    dv = np.zeros(k_n) if drift_var is None else np.asarray(drift_var, dtype=float)
    q, r, dof, q_jerk = float(noise.q), float(noise.r), float(noise.dof), float(noise.q_jerk)
    sv = np.zeros(k_n) if slip_var is None else noise.slip_scale * np.asarray(slip_var, float)
    if drag_var is not None:
        sv = sv + noise.drag_share * np.asarray(drag_var, float)
    rk = np.full(k_n, r) if r_profile is None else r * np.asarray(r_profile, float)
    j2 = jerk_sq(dt_a, z_a, rk, sv) if q_jerk > 0 else np.zeros(k_n)
    u = observed_accel(dt_a, z_a) if noise.feedforward else np.zeros(k_n)
    gate_nis = t_equivalent_gate(gate, dof)
    out = np.empty((4, k_n + 1))
    nis_out = np.full(k_n, np.nan)
    nu_out = np.full(k_n, np.nan)
    s_out = np.full(k_n, np.nan)
    acc_out = np.ones(k_n, dtype=bool)
    if aid_index is None:
        aid_k = np.empty(0, dtype=np.int64)
        aid_zl = aid_rl = np.empty(0)
    else:
        aid_k = np.asarray(aid_index, dtype=np.int64)
        aid_zl = np.asarray(aid_z, dtype=float)
        aid_rl = np.asarray(aid_r, dtype=float)
    aid_nis = np.full(aid_k.size, np.nan)
    aid_acc = np.ones(aid_k.size, dtype=bool)
    resets, _ = axis_loop(
        dt_a,
        z_a,
        np.ascontiguousarray(u, dtype=float),
        q + q_jerk * j2,
        np.ascontiguousarray(sv, dtype=float),
        np.ascontiguousarray(rk, dtype=float),
        np.zeros(k_n) if r_corr is None else np.ascontiguousarray(r_corr, dtype=float),
        np.ascontiguousarray(dv, dtype=float),
        float(gate_nis),
        float(var_v0),
        float(p0),
        float(var_p0),
        int(max_rejects),
        aid_k,
        aid_zl,
        aid_rl,
        float(gate),
        out,
        nis_out,
        nu_out,
        s_out,
        acc_out,
        aid_nis,
        aid_acc,
        np.zeros(k_n, dtype=bool),
        np.full(k_n, np.inf),
    )
    p_out, v_out, pp_out, vv_out = out
    return AxisTrack(
        p=p_out,
        v=v_out,
        var_p=pp_out,
        var_v=vv_out,
        nis=nis_out,
        accepted=acc_out,
        aid_nis=aid_nis,
        aid_accepted=aid_acc,
        innovation=nu_out,
        s=s_out,
        nis_chi2=calibrated_nis(
            nis_out if rest is None else np.where(np.asarray(rest, bool), np.nan, nis_out), dof
        ),
        resets=resets,
    )
