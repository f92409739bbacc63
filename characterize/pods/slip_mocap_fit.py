"""Fit the wheels' slip law (:class:`~sensorbench.fusion.odometry_drift.PodSlip`) and the
creep from the pods against motion capture, for drives without an IMU: the covariance of
the intervals' odometry-minus-reference body increment by Gaussian maximum likelihood,
intervals beyond the χ²₃ bound of :data:`TRIM_P` dropped (docs/PODS.md § "Wheel slip").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.stats import chi2

from sensorbench.characterize.pods.drift_fit import MAX_TRIM_PASSES, speeds
from sensorbench.characterize.pods.slip_fit import MIN_DRAG_M, SlipFit
from sensorbench.errors import FitError
from sensorbench.fusion.odometry_drift import PodSlip, averaged_counts, pod_distances
from sensorbench.fusion.pod_drive import Drive, drive_intervals
from sensorbench.fusion.pod_kinematics import PodGeometry, expected_frac_variance

TRIM_P = 1e-6
"""Tail probability of δ's χ²₃ (its Mahalanobis norm under the fit) beyond which an
interval is a fault and dropped."""
MIN_INTERVALS = 30


def _intervals(
    drives: Sequence[Drive], offsets: Sequence[float], w: np.ndarray, interval_s: float
) -> tuple[np.ndarray, ...]:
    """Per usable interval: δ (M, 3), signed reference motion (M, 3), rolled and dragged
    distance (M, N, m), travel (M, N, ticks), endpoint speeds² (M, 3), the contact's
    distance weighted by the wheel's lateral acceleration (M, N, m²·rad/s²), the rolled
    distance by its speed (M, N, m²/s) and the signed travel weighted by its speed and by
    its lateral acceleration (M, N each, ticks·m/s, ticks·m·rad/s²: the creep's
    regressors) and the drive each interval is of (M,); a wheel's speed is its contact's
    over the floor, rolled and dragged."""
    w_inv = np.linalg.pinv(w)
    parts: list[tuple[np.ndarray, ...]] = []
    for k, (d, offset) in enumerate(zip(drives, offsets, strict=True)):
        dn, xi, bounds = drive_intervals(d, offset, interval_s)
        if dn.shape[0] == 0:
            continue
        steps = averaged_counts(np.diff(d.counts, axis=0).astype(float), d.t_enc)
        rolled, dragged = pod_distances(w, steps @ w_inv.T)
        # the steps' time averaged alike: frames a host stamped in bursts have 0 s steps
        h = np.maximum(averaged_counts(np.diff(d.t_enc)[:, None], d.t_enc), 1e-9)
        # the contact's speed over the floor (rolled and dragged) and its distance
        contact = np.hypot(rolled, dragged)
        speed, turn = contact / h, np.abs(steps @ w_inv[2])[:, None] / h
        by_turn = contact * speed * turn
        creep = (rolled * speed, steps * speed, steps * speed * turn)
        cum = [
            np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
            for x in (rolled, dragged, steps, by_turn, *creep)
        ]
        lo, hi = bounds[:, 0], bounds[:, 1]
        v = speeds(d.counts.astype(float) @ w_inv.T, d.t_enc)
        sums = [c[hi] - c[lo] for c in cum]
        ends = v[lo] ** 2 + v[hi] ** 2
        parts.append((dn @ w_inv.T - xi, xi, *sums[:3], ends, *sums[3:], np.full(lo.size, k)))
    if not parts:
        return tuple(np.empty((0, 3)) for _ in range(11))
    return tuple(np.concatenate([p[k] for p in parts]) for k in range(11))


def fit_pod_slip_mocap(
    drives: Sequence[Drive],
    geometry: PodGeometry,
    offsets: Sequence[float],
    interval_s: float = 0.5,
) -> SlipFit:
    """Fit the slip law from drives against their reference (module docstring) over
    intervals of ``interval_s`` s, the drives' encoder-to-reference time ``offsets`` (s)
    those the pod fit found.

    Raises:
        FitError: fewer than :data:`MIN_INTERVALS` usable intervals (before or after the
            trim), nothing rolled, or drives that do not identify the creep's terms.
    """
    w = geometry.W
    w_inv = np.linalg.pinv(w)
    # an IMU's heading row (0, 0, 1) neither slips nor rounds: its c taken infinite
    wheel = np.hypot(w[:, 0], w[:, 1])
    c = np.divide(1.0, wheel, out=np.full(wheel.shape, np.inf), where=wheel > 0)
    delta, signed, rolled, dragged, travel, ends, by_turn, by_speed, *creep, drive = _intervals(
        drives, offsets, w, interval_s
    )
    if delta.shape[0] < MIN_INTERVALS:
        raise FitError(f"only {delta.shape[0]} intervals to fit the slip law from")
    if rolled.sum() < 1.0:
        raise FitError(f"the pods rolled only {rolled.sum():.2f} m")
    beta, *_ = np.linalg.lstsq(signed, delta, rcond=None)
    resid = delta - signed @ beta
    drag_ok = float(dragged.sum()) >= MIN_DRAG_M
    # Σ_k = Σ_p θ_p·basis[p]_k: the law's two terms, the noise's three, the timing's
    # three, the law's lateral-acceleration term
    body = np.einsum("ji,li->jli", w_inv, w_inv)  # (3, 3, N): W⁺[j, i]·W⁺[l, i]

    def through_pods(per_pod: np.ndarray) -> np.ndarray:
        return np.einsum("jli,mi->mjl", body, per_pod)

    eye = np.eye(3)
    basis = [through_pods(rolled / c**2), through_pods(dragged / c**2)]
    basis += [np.broadcast_to(np.outer(eye[j], eye[j]), (*resid.shape, 3)) for j in range(3)]
    basis += [ends[:, j, None, None] * np.outer(eye[j], eye[j]) for j in range(3)]
    basis += [through_pods(by_turn / c**2)]
    if not drag_ok:
        basis = [basis[0] + basis[1], *basis[2:]]
    full = np.stack(basis)  # (P, M, 3, 3)

    def rounding_of(law: np.ndarray) -> np.ndarray:
        per_m = law[0] * rolled + law[1] * dragged + law[2] * by_turn
        return through_pods(expected_frac_variance(travel, per_m / c**2) * (wheel > 0))

    theta, keep, rounding = _trimmed_fit(resid, full, drag_ok, rounding_of)
    if np.count_nonzero(keep) < MIN_INTERVALS:
        raise FitError(f"only {np.count_nonzero(keep)} of {keep.size} intervals left to fit "
                       f"the slip law from once those beyond its χ²₃ bound (p = {TRIM_P:g}) "
                       f"were dropped: it needs {MIN_INTERVALS}")  # fmt: skip
    law = np.array([theta[0], theta[1] if drag_ok else theta[0], theta[-1]])
    se = _standard_errors(theta, full[:, keep], rounding[keep])
    cov = np.einsum("p,pmjl->mjl", theta, full[:, keep]) + rounding[keep]
    # the creep against the fitted geometry: the body error of the counts' share
    # −κ·Δn·(v − v̄) (about the drives' mean: a constant scale is the geometry's), under
    # the law's covariance, its covariance from the intervals' scores
    ref = [float(x.sum() / rolled.sum()) for x in (by_speed, by_turn)]
    design = np.stack([-((x - r * travel) @ w_inv.T) for x, r in zip(creep, ref, strict=True)], 2)
    coef, coef_cov = _gls(design[keep], delta[keep], np.linalg.inv(cov), drive[keep])
    kappa, kappa_se = coef[-2:], np.sqrt(np.diag(coef_cov)[-2:])
    n_law = 2 if drag_ok else 1
    return SlipFit(
        PodSlip(w, *(float(v) for v in law)),
        float(se[0]),
        float(se[1]) if drag_ok else float("nan"),
        np.asarray(theta[n_law : n_law + 3], dtype=float),
        int(np.count_nonzero(keep)),
        int(np.count_nonzero(~keep)),
        drag_ok,
        float(rolled.sum()),
        float(dragged.sum()),
        interval_s,
        method="odometry against mocap over intervals, every pod given one law; "
        "intercept: the reference noise per body axis (m², m², rad²)",
        timing_s=np.sqrt(theta[n_law + 3 : n_law + 6]),
        turn_se=float(se[-1]),
        creep={
            "speed_s_per_m": float(kappa[0]),
            "speed_se_s_per_m": float(kappa_se[0]),
            "turn_s2_per_m_rad": float(kappa[1]),
            "turn_se_s2_per_m_rad": float(kappa_se[1]),
            "speed_ref_m_per_s": ref[0],
            "turn_ref_m_rad_per_s2": ref[1],
        },
    )


def _gls(
    design: np.ndarray, y: np.ndarray, weight: np.ndarray, drive: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised least squares of ``y`` (M, 3) on ``design`` (M, 3, P) with per-row
    weights (M, 3, 3) = the inverse covariance: the coefficients and their covariance, a
    Newey–West sandwich over the intervals' scores with the geometry fit's lags within
    each ``drive`` (M,): the weights are the law's, which need not be the intervals'
    own covariance (docs/PODS.md, Creep).

    Raises:
        FitError: no more intervals than coefficients (their scores' sandwich is then 0),
            or a design of lower rank (a coefficient the drives do not move).
    """
    from sensorbench.characterize.pods.geometry_fit import hac_meat  # imports this module

    xtw = np.einsum("mjp,mjl->mpl", design, weight)
    normal = np.einsum("mpl,mlq->pq", xtw, design)
    n, rank = design.shape[2], int(np.linalg.matrix_rank(normal))
    if design.shape[0] <= n or rank < n:
        raise FitError(f"the creep's {n} terms from {design.shape[0]} intervals of rank {rank}: "
                       f"they need more than {n} intervals over which the wheels' speeds and "
                       "the turn rate vary")  # fmt: skip
    bread = np.linalg.inv(normal)
    coef = bread @ np.einsum("mpl,ml->p", xtw, y)
    score = np.einsum("mpl,ml->mp", xtw, y - np.einsum("mjp,p->mj", design, coef))
    return coef, bread @ hac_meat(score, drive) @ bread


def _trimmed_fit(
    resid: np.ndarray,
    basis: np.ndarray,
    drag_ok: bool,
    rounding_of: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ over ``basis`` (the law's roll and, when ``drag_ok``, drag term, the noise's
    three, the timing's three, the law's lateral-acceleration term), refitted with the
    intervals beyond the χ²₃ bound of :data:`TRIM_P` dropped until none changes side;
    ``rounding_of(law)`` the rounding offset (M, 3, 3) under the law (roll, drag, turn).
    Returns θ, the intervals kept and the rounding offset; the trim stops once fewer than
    :data:`MIN_INTERVALS` are kept."""
    n_law = 2 if drag_ok else 1
    keep = np.ones(resid.shape[0], dtype=bool)
    theta = np.full(basis.shape[0], np.nan)
    law = np.zeros(3)
    bound = chi2.isf(TRIM_P, 3)
    for _ in range(MAX_TRIM_PASSES):
        rounding = rounding_of(law)
        theta = _max_likelihood(resid[keep], basis[:, keep], rounding[keep], theta)
        law = np.array([theta[0], theta[n_law - 1], theta[-1]])
        cov = np.einsum("p,pmjl->mjl", theta, basis) + rounding
        q = np.einsum("mj,mj->m", resid, np.linalg.solve(cov, resid[:, :, None])[:, :, 0])
        now = q <= bound
        if np.array_equal(now, keep) or np.count_nonzero(now) < MIN_INTERVALS:
            return theta, now, rounding  # too few left: the caller refuses
        keep = now
    return theta, keep, rounding


def _max_likelihood(
    resid: np.ndarray, basis: np.ndarray, offset: np.ndarray, start: np.ndarray
) -> np.ndarray:
    """Non-negative θ maximising the Gaussian likelihood of ``resid`` (M, 3) under
    ``Σ_p θ_p·basis[p] + offset``, searched over ln θ from ``start`` (or from the
    moments when it holds nan)."""
    scale = np.array([max(float(np.mean(np.trace(b, axis1=1, axis2=2))), 1e-300) for b in basis])
    if not np.all(np.isfinite(start)):
        # every term at the share of the mean squared δ it would explain alone
        start = np.full(basis.shape[0], float(np.mean(resid**2)) * 3.0 / basis.shape[0]) / scale

    def nll(x: np.ndarray) -> float:
        cov = np.einsum("p,pmjl->mjl", np.exp(x), basis) + offset
        sign, logdet = np.linalg.slogdet(cov)
        if np.any(sign <= 0):
            return np.inf
        q = np.einsum("mj,mj->m", resid, np.linalg.solve(cov, resid[:, :, None])[:, :, 0])
        return 0.5 * float(np.sum(logdet + q))

    # ln θ within e^−25 (a term that explains nothing) and e^10 of one unit of its basis
    lo, hi = np.log(1.0 / scale) - 25.0, np.log(1.0 / scale) + 10.0
    x0 = np.clip(np.log(np.maximum(start, 1e-300)), lo, hi)
    res = minimize(nll, x0, method="L-BFGS-B", bounds=list(zip(lo, hi, strict=True)))
    return np.exp(res.x)


def _standard_errors(theta: np.ndarray, basis: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """√diag of the inverse Fisher information of θ: ½·Σ_m tr(Σ⁻¹·B_p·Σ⁻¹·B_q)."""
    cov = np.einsum("p,pmjl->mjl", theta, basis) + offset
    inv = np.linalg.inv(cov)
    ib = np.einsum("mjk,pmkl->pmjl", inv, basis)
    info = 0.5 * np.einsum("pmjl,qmlj->pq", ib, ib)
    return np.sqrt(np.clip(np.diag(np.linalg.pinv(info)), 0.0, None))
