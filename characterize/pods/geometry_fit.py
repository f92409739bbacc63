"""Fit dead-wheel pod geometry from fixed drives against a reference (mocap, IMU heading):
each pod's row (cos φ, sin φ, L)/c of ``Δn = W·ξ`` by robust (Huber) least squares, its
covariance by a sandwich joint with the sessions' time offsets, unexcited regressors
refused with a reason (docs/PODS.md § "Geometry fit").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.characterize.pods.drift_fit import near_bounces
from sensorbench.characterize.pods.imu_heading_fit import (
    fit_imu_heading_noise,
    with_imu_heading,
)
from sensorbench.characterize.pods.imu_scale import imu_disagreement
from sensorbench.characterize.pods.slip_fit import WINDOW_S as SLIP_WINDOW_S
from sensorbench.characterize.pods.slip_fit import SlipFit, fit_pod_slip
from sensorbench.characterize.pods.slip_mocap_fit import fit_pod_slip_mocap
from sensorbench.errors import FitError, FusionError
from sensorbench.fusion.odometry_replay import reference_noise
from sensorbench.fusion.pod_drive import (
    MAX_OFFSET_S,
    Drive,
    align_drive_checked,
    intervals_with_rate,
    refuse_outside,
)
from sensorbench.fusion.pod_kinematics import PodGeometry, save_pod_model
from sensorbench.logs.model_keys import AXES

DRIVE_FOR = {"x": "forward drive", "y": "sideways drive", "theta": "spin"}
MIN_ROLL_SIGMA = 5.0
"""A pod whose fitted row (a, b, d) on the excited directions is within this many standard
errors of 0 (Wald) did not measurably roll: a wheel off the floor or an encoder not
connected. For such a pod the statistic is χ²₃ and exceeds 5² once in 60 000."""


def huber_irls(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Robust fit of ``y ≈ X·β``: Huber IRLS (knee k = 2.5 scales of the residuals' MAD),
    then rows beyond 5 scales dropped and refitted: Huber alone lets a one-sided outlier (a
    bouncing wheel only loses ticks) pull by k·scale.

    Returns:
        ``(beta, weights, scale)``; weights are ψ(r)/r (1 inside ±k·scale, 0 rejected).
    """
    k, reject = 2.5, 5.0
    keep = np.ones(y.size, dtype=bool)
    beta = np.zeros(X.shape[1])
    w = np.ones_like(y)
    scale = 1.0
    for _ in range(2):
        beta, *_ = np.linalg.lstsq(X[keep], y[keep], rcond=None)
        for _ in range(50):
            r = y - X @ beta
            scale = max(1.4826 * float(np.median(np.abs(r[keep] - np.median(r[keep])))), 1e-9)
            u = np.abs(r) / (k * scale)
            w = np.where(u <= 1.0, 1.0, 1.0 / np.maximum(u, 1e-12)) * keep
            sw = np.sqrt(w)
            new, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
            converged = np.allclose(new, beta, rtol=1e-10, atol=1e-12)
            beta = new
            if converged:
                break
        keep = np.abs(y - X @ beta) <= reject * scale
    return beta, w, scale


def joint_sandwich(
    xi: np.ndarray, xi_rate: np.ndarray, session: np.ndarray, betas: np.ndarray,
    resid: np.ndarray, weights: np.ndarray, n_sessions: int, hac_lags: int | None = None,
) -> np.ndarray:
    """Covariance of all pod rows and the per-session time offsets jointly (parameters
    (β_0, …, β_{N−1}, δ_0, …, δ_{S−1}); pod p's model on interval m is ``x_m·β_p`` with
    ``∂/∂δ_s = ẋ_m·β_p``): the sandwich A⁻¹BA⁻¹, A = Σ ψ'(r) j jᵀ (Huber), scores summed
    per interval (the pods share its reference noise), residuals scaled by 1/(1 − h)
    (HC3), neighbours' score products up to ``hac_lags`` at Newey–West's weights
    (:func:`hac_meat`; docs/PODS.md § "Geometry fit")."""
    m, k = xi.shape
    n_pods = betas.shape[0]
    n_par = n_pods * k + n_sessions
    score = np.zeros((m, n_par))
    A = np.zeros((n_par, n_par))
    for p in range(n_pods):
        J = np.zeros((m, n_par))
        J[:, p * k : (p + 1) * k] = xi
        J[np.arange(m), n_pods * k + session] = xi_rate @ betas[p]
        inlier = weights[p] >= 1.0
        A += J[inlier].T @ J[inlier]
        # HC3: a row's own fit shrinks its residual by (1 − h); undo it, since the
        # information about a lever arm can sit in a few dozen spin intervals
        G = np.linalg.pinv(xi.T @ (xi * weights[p][:, None]), rcond=1e-12, hermitian=True)
        lev = np.clip(np.einsum("ij,jk,ik->i", xi, G, xi) * weights[p], 0.0, 0.99)
        score += J * (weights[p] * resid[p] / (1.0 - lev))[:, None]
    evals, evecs = np.linalg.eigh(hac_meat(score, session, hac_lags))
    B = (evecs * np.maximum(evals, 0.0)) @ evecs.T
    A_inv = np.linalg.pinv(A, rcond=1e-12, hermitian=True)
    return A_inv @ B @ A_inv


def hac_meat(score: np.ndarray, session: np.ndarray, lags: int | None = None) -> np.ndarray:
    """Σ of the score products (M, P) with up to ``lags`` neighbours within a session (M,)
    at Newey–West's Bartlett weights ``1 − l/(L + 1)`` (None: :func:`default_hac_lags`)."""
    meat = score.T @ score
    lags = default_hac_lags(session) if lags is None else lags
    for lag in range(1, lags + 1):
        same = session[lag:] == session[:-lag]
        g = score[lag:][same].T @ score[:-lag][same]
        meat += (1.0 - lag / (lags + 1)) * (g + g.T)
    return meat


def default_hac_lags(session: np.ndarray) -> int:
    """Newey–West's (1994) lag ``⌊4·(M/100)^(2/9)⌋``, M the median intervals per session."""
    m = float(np.median(np.unique(session, return_counts=True)[1])) if session.size else 0.0
    return int(4.0 * (m / 100.0) ** (2.0 / 9.0)) if m > 0 else 0


@dataclass
class PodFit:
    """Fitted geometry of the pods with uncertainties and identifiability.

    Values are NaN where refused; ``status[i][param]`` is ``"ok"`` or the reason.
    Units: c, lever, radius in m; phi in rad; sigmas in the same units (1σ).
    """

    names: tuple[str, ...]
    c: np.ndarray
    sigma_c: np.ndarray
    phi: np.ndarray
    sigma_phi: np.ndarray
    lever: np.ndarray
    sigma_lever: np.ndarray
    counts_per_rev: np.ndarray | None
    status: list[dict[str, str]]
    joint_row_cov: np.ndarray | None  # (3N, 3N) when every direction was excited
    excitation: dict[str, float]
    excited: dict[str, bool]
    singular_values: np.ndarray
    time_offsets_s: list[float]
    sigma_time_offsets_s: list[float]
    labels: list[str]
    n_intervals: int
    outliers: np.ndarray  # (N,) intervals rejected as gross outliers (bounce)
    residual_sigma: np.ndarray  # (N,) ticks
    options: dict[str, Any] = field(default_factory=dict)
    slip: SlipFit | None = None
    slip_note: str = ""
    time_offset_identified: list[bool] = field(default_factory=list)
    imu_rate_var: float | None = None
    imu_bias_walk: float | None = None
    imu_note: dict[str, Any] = field(default_factory=dict)

    @property
    def radius(self) -> np.ndarray | None:
        """Wheel radius (m), or None without counts per revolution."""
        return None if self.counts_per_rev is None else self.c * self.counts_per_rev / (2 * np.pi)

    @property
    def sigma_radius(self) -> np.ndarray | None:
        """1σ of the wheel radius (m)."""
        cpr = self.counts_per_rev
        return None if cpr is None else self.sigma_c * cpr / (2 * np.pi)

    @property
    def complete(self) -> bool:
        """True when every parameter of every pod was identified."""
        return all(v == "ok" for st in self.status for v in st.values())

    def refusals(self) -> list[str]:
        """One message per refused parameter."""
        return [
            f"{self.names[i]}.{k}: {v}"
            for i, st in enumerate(self.status)
            for k, v in st.items()
            if v != "ok"
        ]

    def geometry(self) -> PodGeometry:
        """The fitted geometry for odometry.

        Raises:
            FitError: some parameter was not identified (the message lists them).
        """
        if not self.complete:
            raise FitError("pod geometry incomplete: " + "; ".join(self.refusals()))
        return self._geometry()

    def _geometry(self) -> PodGeometry:
        """The fit as a geometry, refused values as placeholders (1 m per tick, 0 rad,
        0 m) and the joint row covariance only when complete."""
        law = None if self.slip is None else self.slip.slip
        return PodGeometry(
            np.nan_to_num(self.c, nan=1.0),
            np.nan_to_num(self.phi),
            np.nan_to_num(self.lever),
            self.names,
            self.counts_per_rev,
            self.joint_row_cov if self.complete else None,
            None if law is None else (law.roll_var, law.drag_var, law.turn_var),
            None if self.slip is None or self.imu_rate_var is not None
            else self.slip.carried_creep(),
            self.imu_rate_var,
            self.imu_bias_walk,
        )

    def save(self, path: str | Path, prov: dict[str, Any]) -> Path:
        """Write the pod-geometry model file, with the per-pod uncertainty and status.

        Refused values are written as placeholders (1 m per tick, 0 rad, 0 m) next to
        the status saying why; loading such a file for odometry refuses those pods.
        """
        summary = {
            "complete": self.complete,
            "time_offsets_s": self.time_offsets_s,
            "excitation": self.excitation,
            "not_observable": "each pod's position along its own rolling axis",
            **({"imu_heading": self.imu_note} if self.imu_note else {}),
        }
        slip_report = None if self.slip is None else self.slip.as_dict()
        return save_pod_model(path, self._geometry(), prov, self.pod_tables(), summary, slip_report)

    def offsets_identified(self) -> list[bool]:
        """Per session, whether its drive identified its time offset (else it took the
        others' median, or 0 s: :func:`fit_pods`)."""
        return self.time_offset_identified or [True] * len(self.labels)

    def pod_tables(self) -> list[dict[str, Any]]:
        """Per-pod uncertainty and status entries for the model file and JSON."""
        sr = self.sigma_radius
        return [
            {
                "sigma_distance_per_tick": float(self.sigma_c[i]),
                "sigma_rolling_angle": float(self.sigma_phi[i]),
                "sigma_lever_arm": float(self.sigma_lever[i]),
                "outlier_intervals": int(self.outliers[i]),
                "residual_sigma_ticks": float(self.residual_sigma[i]),
                "status": dict(self.status[i]),
                **({} if sr is None else {"sigma_wheel_radius": float(sr[i])}),
            }
            for i in range(len(self.names))
        ]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (SI units)."""
        radius, tables = self.radius, self.pod_tables()
        pods = [
            {
                "name": name,
                "distance_per_tick_m": _f(self.c[i]),
                "rolling_angle_rad": _f(self.phi[i]),
                "lever_arm_m": _f(self.lever[i]),
                "wheel_radius_m": None if radius is None else _f(radius[i]),
                **{k: (_f(v) if isinstance(v, float) else v) for k, v in tables[i].items()},
            }
            for i, name in enumerate(self.names)
        ]
        return {
            "pods": pods,
            "complete": self.complete,
            "refused": self.refusals(),
            "excitation": self.excitation,
            "excited": self.excited,
            "design_singular_values": [float(v) for v in self.singular_values],
            "sessions": [
                {"label": lab, "time_offset_s": off, "sigma_time_offset_s": _f(sd),
                 "time_offset_identified": ok}
                for lab, off, sd, ok in zip(self.labels, self.time_offsets_s,
                    self.sigma_time_offsets_s, self.offsets_identified(), strict=True)
            ],
            "n_intervals": self.n_intervals,
            "options": self.options,
            "not_observable": "each pod's position along its own rolling axis",
            "slip": None if self.slip is None else self.slip.as_dict(),
            "slip_note": self.slip_note,
            "imu_heading": {"yaw_rate_var_rad2_per_s": self.imu_rate_var, **self.imu_note}
            if self.imu_note else None,
        }


def _f(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)


def _noise_sigma(
    xi: np.ndarray, session: np.ndarray, native: np.ndarray | None = None
) -> np.ndarray:
    """Per-column reference-noise σ (3,) of one interval increment: the MAD of consecutive
    increments' differences (noise 3× an increment's) over √3, an upper bound (the
    motion's own change adds to it) capped by ``native`` (:func:`reference_interval_sigma`).
    """
    d2 = [np.diff(x, axis=0) for s in np.unique(session) if (x := xi[session == s]).shape[0] >= 3]
    if not d2:
        return np.full(3, 1e-4)
    d = np.vstack(d2)
    mad = 1.4826 * np.median(np.abs(d - np.median(d, axis=0)), axis=0)
    sigma = mad / np.sqrt(3.0) if native is None else np.minimum(mad / np.sqrt(3.0), native)
    return np.maximum(sigma, 1e-4)


def reference_interval_sigma(drives: Sequence[Drive], heading: str) -> np.ndarray:
    """σ (3,) of an interval increment's reference noise (m, m, rad): √2 × one sample's white
    noise (:func:`~sensorbench.fusion.odometry_replay.reference_noise`), the median over
    the drives, x and y pooled; θ inf (no cap) with the IMU's heading."""
    var = np.median([reference_noise(d.t_ref, d.ref) for d in drives], axis=0)
    xy = np.sqrt(var[0] + var[1])  # √(2·mean of the two)
    return np.array([xy, xy, np.sqrt(2.0 * var[2]) if heading == "mocap" else np.inf])


def excitation(
    xi: np.ndarray, session: np.ndarray, native: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Signal-to-noise energy of each regressor with the others projected out: ``(snr,
    singular_values)``, snr_j = S_j/(M·σ_j²) (S_j the Schur complement of column j in XᵀX,
    σ_j :func:`_noise_sigma`; pure noise ≈ 1), the singular values of X/σ."""
    sigma = _noise_sigma(xi, session, native)
    Z = xi / sigma
    G = Z.T @ Z
    m = Z.shape[0]
    snr = np.zeros(3)
    for j in range(3):
        o = [k for k in range(3) if k != j]
        Goo = G[np.ix_(o, o)]
        s = G[j, j] - G[j, o] @ np.linalg.pinv(Goo) @ G[o, j]
        snr[j] = max(float(s), 0.0) / max(m, 1)
    sv = np.linalg.svd(Z / np.sqrt(max(m, 1)), compute_uv=False)
    return snr, sv


def _fit_core(
    drives: Sequence[Drive], offsets: Sequence[float], interval_s: float, heading: str,
    min_excitation: float, fixed: Sequence[bool] = (),
) -> dict[str, Any]:
    """Intervals of every drive, excitation, robust rows and their joint covariance (the
    time offsets of the sessions ``fixed`` marks held, not estimated: no σ)."""
    parts = [
        intervals_with_rate(d, o, interval_s, heading) for d, o in zip(drives, offsets, strict=True)
    ]
    dn, xi, rate = (np.vstack([p[j] for p in parts]) for j in range(3))
    session = np.concatenate([np.full(p[0].shape[0], i) for i, p in enumerate(parts)])
    held = np.flatnonzero(np.asarray(fixed, dtype=bool))
    rate[np.isin(session, held)] = 0.0
    if dn.shape[0] < 10:
        raise FitError(
            f"only {dn.shape[0]} usable intervals of {interval_s} s; record longer drives "
            f"with the reference visible"
        )
    snr, sv = excitation(xi, session, reference_interval_sigma(drives, heading))
    excited = snr >= min_excitation
    if not (excited[0] or excited[1]):
        raise FitError(
            "the drives contain no translation beyond reference noise: record forward "
            "and sideways drives"
        )
    cols = np.flatnonzero(excited)
    n_pods = dn.shape[1]
    betas = np.zeros((n_pods, cols.size))
    weights = np.ones((n_pods, dn.shape[0]))
    resid = np.zeros((n_pods, dn.shape[0]))
    rsig = np.zeros(n_pods)
    for p in range(n_pods):
        betas[p], weights[p], rsig[p] = huber_irls(xi[:, cols], dn[:, p])
        resid[p] = dn[:, p] - xi[:, cols] @ betas[p]
    lags = default_hac_lags(session)
    joint = joint_sandwich(xi[:, cols], rate[:, cols], session, betas, resid, weights, len(drives),
                           lags)  # fmt: skip
    rows = np.full((n_pods, 3), np.nan)
    cov = np.full((n_pods, 3, 3), np.nan)
    k = cols.size
    for p in range(n_pods):
        rows[p, cols] = betas[p]
        cov[p][np.ix_(cols, cols)] = joint[p * k : (p + 1) * k, p * k : (p + 1) * k]
    return {
        "rows": rows,
        "cov": cov,
        "joint_rows": joint[: n_pods * k, : n_pods * k] if k == 3 else None,
        "excited": excited,
        "snr": snr,
        "sv": sv,
        "outliers": np.count_nonzero(weights == 0.0, axis=1),
        "rsig": rsig,
        "offset_sigma": np.where(
            np.isin(np.arange(len(drives)), held),
            np.nan,
            np.sqrt(np.clip(np.diag(joint)[n_pods * k :], 0.0, None)),
        ),
        "n_intervals": int(dn.shape[0]),
        "hac_lags": lags,
    }


def fit_pods(
    drives: Sequence[Drive], interval_s: float = 0.5, heading: str = "auto",
    min_excitation: float = 100.0, counts_per_rev: float | Sequence[float] | None = None,
    slip_window_s: float = SLIP_WINDOW_S,
) -> PodFit:
    """Fit every pod's distance per tick, rolling angle and lever arm.

    Args:
        drives: prepared sessions (:func:`~sensorbench.fusion.pod_drive.load_drive`),
            e.g. forward, sideways, spin and square drives.
        interval_s: length of the fitting intervals (s).
        heading: where the Δθ regressor comes from: ``"mocap"``, ``"imu"`` (the gyro's
            yaw, bias removed against mocap) or ``"auto"`` (imu when every session carries
            IMU yaw).
        min_excitation: a regressor whose conditional signal energy is below this
            multiple of the reference-noise energy counts as not excited.
        counts_per_rev: ticks per wheel revolution (to report radii), one for every
            wheel or one per wheel; default from the sessions' encoder attributes.
        slip_window_s: window (s) of the slip-law fit against the IMU (:func:`_fit_slip`).

    Raises:
        FitError: no usable intervals, no translation at all, or drives with different
            numbers of counters.
    """
    if not drives:
        raise FitError("no sessions to fit")
    if heading not in ("auto", "mocap", "imu"):
        raise FitError(f"heading must be 'auto', 'mocap' or 'imu', not {heading!r}")
    layouts = [(d.label, d.counts.shape[1]) for d in drives]
    if len({n for _, n in layouts}) > 1:
        raise FitError("the sessions' encoder streams have different numbers of counters ("
                       + ", ".join(f"{k}: {n}" for k, n in layouts)
                       + "): one fit takes the drives of one robot")  # fmt: skip
    # align on the reference's own rotation: the IMU shares the encoder's clock, so
    # with IMU heading a spin would carry no timing information
    aligned = [align_drive_checked(d, interval_s) for d in drives]
    for d, (o, ok) in zip(drives, aligned, strict=True):
        if ok:
            refuse_outside(d, o, interval_s)
    found = [o for o, ok in aligned if ok]
    if not found and any(np.any(np.diff(d.counts, axis=0)) for d in drives):
        raise FitError("no drive's pod counts follow its reference at any time offset within "
                       f"±{MAX_OFFSET_S:g} s (the alignment cost is flat) although the pods "
                       "counted: the reference's clock is off by more, or it tracks another "
                       "body")  # fmt: skip
    # a drive no pod's counts follow (two parallel pods driven sideways) has no offset of
    # its own: it takes the others' (one setup, one latency)
    offsets = [o if ok else (float(np.median(found)) if found else 0.0) for o, ok in aligned]
    imu_refused = [m for d, o in zip(drives, offsets, strict=True)
                   if (m := imu_disagreement(d, o, interval_s))]  # fmt: skip
    if imu_refused and heading == "imu":
        raise FitError("; ".join(imu_refused) + ": an IMU yaw in degrees, of the opposite "
                       "sign or frozen, or a mocap quaternion not in x, y, z, w order; fit "
                       "with --heading mocap")  # fmt: skip
    if imu_refused:  # nothing of the IMU (heading, bounces, slip law) can be trusted
        drives = [replace(d, imu_yaw=None) for d in drives]
    if heading == "auto":
        heading = "imu" if all(d.imu_yaw is not None for d in drives) else "mocap"
    fixed = [not ok for _, ok in aligned]
    core = _fit_core(drives, offsets, interval_s, heading, min_excitation, fixed)
    still = _still_pods(core["rows"], core["cov"], core["excited"], drives)
    n_bounce = 0
    if core["excited"].all() and not still and any(d.imu_yaw is not None for d in drives):
        # second pass: frames where a parallel pod bounced disagree with the IMU's Δθ;
        # drop the intervals holding them (a bounce only loses ticks, so the robust
        # loss alone leaves a one-sided bias in c)
        W = core["rows"]
        try:
            for d in drives:
                if d.imu_yaw is not None:
                    d.bounce = near_bounces(W, np.diff(d.counts, axis=0), np.diff(d.imu_yaw))
                    n_bounce += int(np.count_nonzero(d.bounce))
        except FusionError:
            n_bounce = 0  # a first-pass W that cannot be inverted: keep the robust fit
        else:
            core = _fit_core(drives, offsets, interval_s, heading, min_excitation, fixed)
    rows, cov, excited, snr = core["rows"], core["cov"], core["excited"], core["snr"]
    n_pods = rows.shape[0]
    why = {
        a: f"no {DRIVE_FOR[a]} in the data (excitation {snr[j]:.3g}× the reference noise's "
        f"energy, needs {min_excitation:g}×)"
        for j, a in enumerate(AXES)
    }
    pod_names = next((d.names for d in drives if d.names), None)
    pod_names = tuple(pod_names) if pod_names else tuple(f"pod{i}" for i in range(n_pods))
    c, sc, phi, sphi, lev, slev, status = _derive(
        rows, cov, excited, why,
        {i: f"{pod_names[i]} did not roll in these drives ({msg}): a wheel off the floor "
            "or an encoder not connected" for i, msg in still.items()},
    )  # fmt: skip
    _check_scale(c, pod_names, next((d.nominal_c for d in drives if d.nominal_c), None))
    cpr = next((d.counts_per_rev for d in drives if d.counts_per_rev is not None), None)
    if counts_per_rev is not None:
        cpr = np.broadcast_to(counts_per_rev, n_pods).copy()
    fit = PodFit(
        names=pod_names, c=c, sigma_c=sc, phi=phi, sigma_phi=sphi, lever=lev, sigma_lever=slev,
        counts_per_rev=None if cpr is None else np.asarray(cpr, dtype=float),
        status=status, joint_row_cov=core["joint_rows"],
        excitation={k: float(v) for k, v in zip(AXES, snr, strict=True)},
        excited={k: bool(v) for k, v in zip(AXES, excited, strict=True)},
        singular_values=core["sv"],
        time_offsets_s=offsets,
        sigma_time_offsets_s=[float(v) for v in core["offset_sigma"]],
        labels=[d.label for d in drives], time_offset_identified=[not f for f in fixed],
        n_intervals=core["n_intervals"], outliers=core["outliers"], residual_sigma=core["rsig"],
        options={
            "interval_s": interval_s,
            "max_offset_s": MAX_OFFSET_S,
            "heading": heading,
            "min_excitation": min_excitation,
            "hac_lags": core["hac_lags"],
            "loss": "huber(k=2.5), rows beyond 5 scale rejected",
            "imu_bounce_frames_excluded": n_bounce,
            "imu_refused": imu_refused,
        },
    )  # fmt: skip
    turned = None  # two pods: the drives with the IMU's heading as a last counter
    if n_pods == 2 and fit.complete:
        fit.imu_rate_var, fit.imu_bias_walk, fit.imu_note, turned = _fit_imu_heading(
            drives, offsets
        )
    fit.slip, fit.slip_note = _fit_slip(fit, drives, slip_window_s, turned)
    return fit


MAX_SCALE_RATIO = 1.5
"""Fitted over nominal distance per tick (or its inverse) beyond which the reference's length
unit, or the robot configuration's wheel radius or counts per revolution, is wrong: a
mocap in mm gives 1000, in inches 25.4, quadrature counted ×4 or ÷4."""


def _check_scale(c: np.ndarray, names: Sequence[str], nominal: float | None) -> None:
    """Refuse fitted distances per tick (m) :data:`MAX_SCALE_RATIO` from the nominal.

    Raises:
        FitError: some pod's ratio is beyond it (the message gives each).
    """
    if nominal is None:
        return
    ratio = c / nominal
    off = [i for i in range(c.size) if np.isfinite(ratio[i])
           and not 1 / MAX_SCALE_RATIO <= ratio[i] <= MAX_SCALE_RATIO]  # fmt: skip
    if off:
        raise FitError(
            "fitted distance per tick " + ", ".join(f"{names[i]} {c[i]:.4g} m ({ratio[i]:.4g}×)"
                                                    for i in off)
            + f" against the robot configuration's nominal {nominal:.4g} m (2π·wheel_radius_m/"
            "counts_per_rev): the reference's positions in another unit than m (mm: 1000×), "
            "or the configuration's wheel_radius_m or counts_per_rev wrong"
        )


def _fit_imu_heading(
    drives: Sequence[Drive], offsets: Sequence[float]
) -> tuple[float | None, float | None, dict[str, Any], list[Drive] | None]:
    """Two pods: the IMU yaw's random walk (rad²/s), the gyro bias's walk ((rad/s)²/s),
    their report and the drives with the IMU's heading as a last counter, or Nones and why
    not (:func:`~sensorbench.characterize.pods.imu_heading_fit.fit_imu_heading_noise`)."""
    noise = [float(np.sqrt(reference_noise(d.t_ref, d.ref)[2])) for d in drives]
    try:
        turned = [with_imu_heading(d) for d in drives]
        return (*fit_imu_heading_noise(turned, offsets, noise), turned)
    except FitError as exc:
        return None, None, {"not_fitted": f"{exc}: two pods give no heading without it"}, None


def _fit_slip(
    fit: PodFit, drives: Sequence[Drive], window_s: float, turned: list[Drive] | None
) -> tuple[SlipFit | None, str]:
    """The wheels' slip law, or None and why not: from the pods against the IMU when
    every session carries IMU yaw (:mod:`~sensorbench.characterize.pods.slip_fit`), else
    against mocap over the pod fit's intervals
    (:mod:`~sensorbench.characterize.pods.slip_mocap_fit`); two pods: against mocap, the
    drives ``turned`` with the IMU's heading as a last counter."""
    if not fit.complete:
        return None, "slip law not fitted: the geometry is incomplete"
    if fit.c.size < 3 and fit.imu_rate_var is None:
        return None, "slip law not fitted: two pods give no heading without every session's IMU yaw"
    geometry = PodGeometry(fit.c, fit.phi, fit.lever, fit.names, imu_rate_var=fit.imu_rate_var)
    interval = float(fit.options["interval_s"])
    try:
        if fit.imu_rate_var is not None and turned is not None:  # the pods against mocap
            return fit_pod_slip_mocap(turned, geometry, fit.time_offsets_s, interval), ""
        if all(d.imu_yaw is not None for d in drives):
            return fit_pod_slip(drives, geometry, window_s), ""
        return fit_pod_slip_mocap(drives, geometry, fit.time_offsets_s, interval), ""
    except (FitError, FusionError) as exc:
        return None, f"slip law not fitted: {exc}"


def _still_pods(
    rows: np.ndarray, cov: np.ndarray, excited: np.ndarray, drives: Sequence[Drive]
) -> dict[int, str]:
    """Pods that did not measurably roll, each with what shows it: its row (a, b, d) on the
    excited directions (ticks per m, m, rad) within :data:`MIN_ROLL_SIGMA` standard errors
    of 0, and the ticks its counter moved over all drives. (A sideways pod on forward
    drives and spins rolls on the spins: its d is far from 0.)"""
    cols = np.flatnonzero(excited)
    out = {}
    for i in range(rows.shape[0]):
        ab = rows[i, cols]
        C = cov[i][np.ix_(cols, cols)]
        wald = float(ab @ np.linalg.pinv(C, hermitian=True) @ ab) if np.all(np.isfinite(C)) else 0.0
        z = np.sqrt(max(wald, 0.0))
        if z < MIN_ROLL_SIGMA or not np.any(ab):
            ticks = sum(int(np.abs(np.diff(d.counts[:, i])).sum()) for d in drives)
            out[i] = (f"its counter moved {ticks} ticks in all, its row {z:.3g} standard errors "
                      f"from 0, needs {MIN_ROLL_SIGMA:g}")  # fmt: skip
    return out


def _derive(
    rows: np.ndarray, cov: np.ndarray, excited: np.ndarray, why: dict[str, str],
    still: dict[int, str] | None = None,
) -> tuple[Any, ...]:
    """c, φ, L and their 1σ from each row (a, b, d) and its covariance; status per pod
    (``why[axis]``: the reason an axis that was not excited gives; ``still[pod]``: the
    reason every parameter of a pod that did not roll gives)."""
    n = rows.shape[0]
    out = {k: np.full(n, np.nan) for k in ("c", "sc", "phi", "sphi", "lev", "slev")}
    status = []
    for i in range(n):
        if still and i in still:
            reason = f"not identifiable: {still[i]}"
            status.append(dict.fromkeys(("distance_per_tick", "rolling_angle", "lever_arm"),
                                        reason))  # fmt: skip
            continue
        a, b, d = (0.0 if not excited[j] else rows[i, j] for j in range(3))
        C = np.where(np.isfinite(cov[i]), cov[i], 0.0)
        if excited[0] and excited[1]:
            main = 0 if abs(a) >= abs(b) else 1
        else:
            # one translation direction only: a pod rolls along it if its coefficient
            # is comparable to the strongest pod's, otherwise along the other one
            j = 0 if excited[0] else 1
            main = j if abs(rows[i, j]) >= 0.5 * np.nanmax(np.abs(rows[:, j])) else 1 - j
        dist = "ok" if excited[main] else f"not identifiable: {why[AXES[main]]}"
        missing = [AXES[j] for j in (0, 1) if not excited[j]]
        st = {
            "distance_per_tick": dist,
            "rolling_angle": "ok" if not missing else f"not identifiable: {why[missing[0]]}",
            # the lever arm needs the spin and the pod's own rolling direction
            "lever_arm": dist if excited[2] else f"not identifiable: {why['theta']}",
        }
        status.append(st)
        h2 = a * a + b * b
        c = 1.0 / np.sqrt(h2)
        jc = np.array([-a * c**3, -b * c**3, 0.0])
        jphi = np.array([-b / h2, a / h2, 0.0])
        jl = d * jc + np.array([0.0, 0.0, c])
        if st["distance_per_tick"] == "ok":
            out["c"][i], out["sc"][i] = c, np.sqrt(jc @ C @ jc)
        if st["rolling_angle"] == "ok":
            out["phi"][i], out["sphi"][i] = np.arctan2(b, a), np.sqrt(jphi @ C @ jphi)
        if st["lever_arm"] == "ok":
            out["lev"][i], out["slev"][i] = d * c, np.sqrt(jl @ C @ jl)
    return (*out.values(), status)
