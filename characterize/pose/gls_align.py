"""Time offset and frame alignment by generalised least squares under the error model.

φ = (time offset δ (s), world rotation ε, translation t (m), body rotation β (rad))
is fitted by Gauss-Newton GLS, every column whitened by the model's Kalman filter
(:mod:`whiten`); ``planar`` keeps ε and β about z, ``none`` fits δ alone; a group
shares the frame and one δ. The regressors come from the
reference, so a rough θ costs efficiency, not consistency. docs/POSE_ERROR.md
("Time offset and frame")."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation
from scipy.stats import chi2

from sensorbench.characterize.pose.align import Interpolator, PoseTrack, frame_errors
from sensorbench.characterize.pose.whiten import filter_gains, spacings, whiten_columns
from sensorbench.errors import FitError

MAX_OFFSET_STEP_S = 0.05
"""Largest change of a time offset in one Gauss-Newton step (s)."""
STEP_TOLERANCE = 0.01
"""Converged when every step is below this fraction of its parameter's standard error."""
MAX_GLS_ITER = 12
"""Gauss-Newton iterations of :func:`refine` at most (then :attr:`GroupFit.converged` is
False)."""


@dataclass
class Frame:
    """World rotation R, translation t (m) and body rotation B: ``p_ref ≈ R p + t``."""

    rotation: np.ndarray
    translation: np.ndarray
    body_rotation: np.ndarray
    mode: str  # "se3", "planar" or "none"


@dataclass
class GroupFit:
    """The GLS estimate of one group of sessions."""

    offsets_s: np.ndarray  # (S,) s, reference time = sensor time + offset
    frame: Frame
    cov: np.ndarray  # (P, P) covariance of the estimated parameters
    offset_column: np.ndarray  # (S,) column of each session's offset in cov (-1: given)
    centre: np.ndarray  # (3,) m, the point the rotation increments turn about
    fit_frame: bool = True
    converged: bool = True  # False: :data:`MAX_GLS_ITER` steps, the last not yet negligible

    def offset_se_s(self, i: int) -> float:
        """Standard error (s) of session ``i``'s offset; nan when it was given."""
        c = int(self.offset_column[i])
        return float(np.sqrt(self.cov[c, c])) if c >= 0 else float("nan")

    def jacobian(
        self, i: int, pair: tuple[PoseTrack, PoseTrack], max_gap_s: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(times (M,), ``∂e/∂φ`` (M, 6, P)) of session ``i`` of this fit at its estimate,
        columns as in :attr:`cov` (the offsets fitted, then the frame's)."""
        t, jac, n_frame, n_delta = self._design_at(pair, float(self.offsets_s[i]), max_gap_s)
        full = np.zeros((t.size, 6, self.cov.shape[0]))
        if self.offset_column[i] >= 0:
            full[:, :, self.offset_column[i]] = jac[:, :, 0]
        if n_frame:
            full[:, :, n_delta:] = jac[:, :, 1:]
        return t, full

    def induced_variance(
        self, pair: tuple[PoseTrack, PoseTrack], offset_s: float, max_gap_s: float | None = None
    ) -> np.ndarray:
        """``(6,)`` variance (m² or rad²) this estimate's own error causes in another session.

        A session aligned with this offset (column 0 when pooled) and frame carries ``J Δφ``,
        Δφ ~ N(0, cov): ``diag(J cov Jᵀ)`` per axis, averaged over its samples."""
        _, jac, n_frame, n_delta = self._design_at(pair, offset_s, max_gap_s)
        jac_cols, cov_idx = list(range(1, 1 + n_frame)), list(range(n_delta, n_delta + n_frame))
        if n_delta == 1 and np.all(self.offset_column == 0):  # the pooled offset
            jac_cols, cov_idx = [0, *jac_cols], [0, *cov_idx]
        j = jac[:, :, jac_cols]
        c = self.cov[np.ix_(cov_idx, cov_idx)]
        return np.einsum("kap,pq,kaq->a", j, c, j) / j.shape[0]

    def _design_at(
        self, pair: tuple[PoseTrack, PoseTrack], offset_s: float, max_gap_s: float | None
    ) -> tuple[np.ndarray, np.ndarray, int, int]:
        """(times, Jacobian (M, 6, 1 + frame columns), frame columns, offset columns)."""
        s = _Session(pair[0].only_valid(), pair[1].interpolator(), np.zeros(0), np.zeros(0))
        t, _, jac = _design(s, offset_s, self.frame, self.centre, max_gap_s, True)
        n_frame = jac.shape[2] - 1 if self.fit_frame else 0
        return t, jac, n_frame, self.cov.shape[0] - n_frame


@dataclass
class _Session:
    sensor: PoseTrack  # valid samples only
    ref: Interpolator
    starts: np.ndarray  # relocalization times after the first sample (s, sensor clock)
    wrong: np.ndarray  # times inside wrong relocalizations' segments (s, sensor clock)


def reset_mask(t_s: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Segment starts at times ``t_s``: sample 0 and the first sample at or after each start."""
    reset = np.zeros(t_s.size, dtype=bool)
    idx = np.searchsorted(t_s, np.asarray(starts, dtype=float) - 1e-9)
    reset[idx[idx < t_s.size]] = True
    reset[0] = True
    return reset


def wrong_mask(t_s: np.ndarray, reset: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The starts (of ``reset`` at times ``t_s``) of the segments holding ``times`` (s)."""
    first = np.flatnonzero(reset)
    seg = np.searchsorted(t_s[first], np.asarray(times, dtype=float) + 1e-9, side="right") - 1
    out = np.zeros(t_s.size, dtype=bool)
    out[first[np.clip(seg, 0, first.size - 1)]] = True
    return out


def _skew_rows(d: np.ndarray) -> np.ndarray:
    """``(N, 3, 3)`` ∂(ε × d)/∂ε = −[d]×: column j is e_j × d (``+ 0.0``: zeros unsigned)."""
    return np.cross(np.eye(3), d[:, None, :]).transpose(0, 2, 1) + 0.0


def _frame_columns(mode: str) -> tuple[list[int], int, list[int]]:
    """Indices of ε and β components fitted, and the number of translation columns."""
    if mode == "se3":
        return [0, 1, 2], 3, [0, 1, 2]
    if mode == "planar":
        return [2], 3, [2]
    return [], 0, []


def _design(
    s: _Session, offset: float, frame: Frame, centre: np.ndarray, max_gap_s: float | None,
    fit_delta: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times (M,), error (M, 6), Jacobian (M, 6, 1 + frame params)) at kept samples."""
    pos, quat, inside = s.ref(s.sensor.t_s + offset, max_gap_s)
    idx = np.flatnonzero(inside)
    if idx.size < 10:
        raise FitError(f"{s.sensor.name or 'sensor'}: fewer than 10 poses inside the reference")
    p_s, q_s = s.sensor.position[idx], s.sensor.quat_xyzw[idx]
    args = (frame.rotation, frame.translation, frame.body_rotation)
    e = frame_errors(p_s, q_s, pos[idx], quat[idx], *args)
    eps_i, n_t, beta_i = _frame_columns(frame.mode)
    n_cols = 1 + len(eps_i) + n_t + len(beta_i)
    jac = np.zeros((idx.size, 6, n_cols))
    if fit_delta:
        vel, omega = s.ref.rates(s.sensor.t_s[idx] + offset)
        jac[:, :3, 0] = -vel
        jac[:, 3:, 0] = -omega
    c = 1
    if eps_i:
        skew = _skew_rows(pos[idx] - centre)
        to_body = Rotation.from_quat(quat[idx]).inv().as_matrix()
        jac[:, :3, c : c + len(eps_i)] = skew[:, :, eps_i]
        jac[:, 3:, c : c + len(eps_i)] = to_body[:, :, eps_i]
        c += len(eps_i)
    jac[:, np.arange(n_t), c + np.arange(n_t)] = 1.0
    c += n_t
    jac[:, 3 + np.asarray(beta_i, dtype=int), c + np.arange(len(beta_i))] = 1.0
    return s.sensor.t_s[idx], e, jac


def _apply(frame: Frame, step: np.ndarray, centre: np.ndarray) -> Frame:
    """The frame after a step (ε, t, β) in the parametrisation of :func:`_design`."""
    eps_i, n_t, beta_i = _frame_columns(frame.mode)
    eps = np.zeros(3)
    eps[eps_i] = step[: len(eps_i)]
    dt = step[len(eps_i) : len(eps_i) + n_t]
    beta = np.zeros(3)
    beta[beta_i] = step[len(eps_i) + n_t :]
    turn = Rotation.from_rotvec(eps)
    rot = (turn * Rotation.from_matrix(frame.rotation)).as_matrix()
    trans = turn.apply(frame.translation - centre) + centre + (dt if n_t else 0.0)
    body = (Rotation.from_matrix(frame.body_rotation) * Rotation.from_rotvec(beta)).as_matrix()
    return Frame(rot, np.asarray(trans, dtype=float), body, frame.mode)


def _normal_equations(
    sessions: list[_Session], offsets: np.ndarray, frame: Frame, centre: np.ndarray,
    params: np.ndarray, col: np.ndarray, n_delta: int, n_frame: int, max_gap_s: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Whitened Gauss-Newton information ``(P, P)`` and gradient ``(P,)`` at the estimate.

    ``col``: each session's offset column (−1: offsets kept); ``n_delta`` offset and
    ``n_frame`` frame columns (P = their sum); ``params``: the weighting model (6, 4)."""
    n_par = n_delta + n_frame
    estimate_offset = n_delta > 0
    info = np.zeros((n_par, n_par))
    grad = np.zeros(n_par)
    for i, s in enumerate(sessions):
        t, e, jac = _design(s, float(offsets[i]), frame, centre, max_gap_s, estimate_offset)
        full = np.zeros((t.size, 6, n_par))
        if estimate_offset:
            full[:, :, col[i]] = jac[:, :, 0]
        if n_frame:
            full[:, :, n_delta:] = jac[:, :, 1:]
        reset = reset_mask(t, s.starts)
        diffuse = wrong_mask(t, reset, s.wrong)
        phi, kb, kg, isq = filter_gains(spacings(t), reset, params, diffuse)
        for a in range(6):
            cols = np.ascontiguousarray(np.column_stack([e[:, a], full[:, a, :]]))
            w = whiten_columns(cols, reset, phi[:, a], kb[:, a], kg[:, a], isq[:, a])
            info += w[:, 1:].T @ w[:, 1:]
            grad += w[:, 1:].T @ w[:, 0]
    return info, grad


def refine(
    pairs: list[tuple[PoseTrack, PoseTrack]], offsets_s: list[float], frame: Frame,
    starts: list[np.ndarray], params: np.ndarray, estimate_offset: bool = True,
    max_gap_s: float | None = None, fit_frame: bool = True, wrong: list[np.ndarray] | None = None,
) -> GroupFit:
    """Gauss-Newton GLS of the time offsets and the shared frame of a group of sessions.

    ``pairs``: (sensor, reference) tracks; ``offsets_s``: starting (or given) offsets (s);
    ``frame``: the starting frame (its ``mode`` says what is fitted); ``starts``: each
    session's relocalization times after its first sample (s, sensor clock); ``params``:
    (6, 4) error-model parameters weighting the fit; ``estimate_offset``: one offset for
    all, starting at their mean (else each kept); ``wrong``: per session, the
    first-sample times of its wrong relocalizations' segments, whose offsets stay free.
    Returns the estimate, its covariance and whether Gauss-Newton converged within
    :data:`MAX_GLS_ITER` iterations (if not, the last iterate)."""
    wrong = wrong or [np.zeros(0)] * len(pairs)
    sessions = [
        _Session(sen.only_valid(), ref.interpolator(), st, w)
        for (sen, ref), st, w in zip(pairs, starts, wrong, strict=True)
    ]
    offsets = np.asarray(offsets_s, dtype=float).copy()
    if estimate_offset and np.ptp(offsets) > 0:
        offsets[:] = offsets.mean()
    n_delta = int(estimate_offset)
    col = np.full(len(sessions), 0 if estimate_offset else -1)
    eps_i, n_t, beta_i = _frame_columns(frame.mode)
    n_frame = len(eps_i) + n_t + len(beta_i) if fit_frame else 0
    n_par = n_delta + n_frame
    if n_par == 0:
        return GroupFit(offsets, frame, np.zeros((0, 0)), col, np.zeros(3), fit_frame)
    centre = np.mean(np.concatenate([s.ref.ref.position for s in sessions]), axis=0)
    params = np.asarray(params, dtype=float)
    info, converged = np.eye(n_par), False
    for _ in range(MAX_GLS_ITER):
        info, grad = _normal_equations(
            sessions, offsets, frame, centre, params, col, n_delta, n_frame, max_gap_s
        )
        try:
            step = -np.linalg.solve(info, grad)
        except np.linalg.LinAlgError as exc:
            raise FitError("the time offset and frame are not determined by these poses") from exc
        d = step[:n_delta]
        big = np.max(np.abs(d)) if d.size else 0.0
        if big > MAX_OFFSET_STEP_S:
            step *= MAX_OFFSET_STEP_S / big
        if estimate_offset:
            offsets += step[col]
        if n_frame:
            frame = _apply(frame, step[n_delta:], centre)
        if np.all(np.abs(step) < STEP_TOLERANCE * np.sqrt(np.diag(np.linalg.inv(info)))):
            converged = True
            break
    cov = np.linalg.inv(info)
    return GroupFit(offsets, frame, 0.5 * (cov + cov.T), col, centre, fit_frame, converged)


PIECES = 4
"""Pieces of a session whose own offsets test the constant-offset assumption."""
DRIFT_ALPHA = 0.01
"""Level at which the pieces' offsets disagree (the clocks drift apart)."""


@dataclass
class OffsetDrift:
    """A session's time offset estimated on :data:`PIECES` consecutive pieces."""

    offsets_s: np.ndarray  # (K,) s
    se_s: np.ndarray  # (K,) s
    mid_times_s: np.ndarray  # (K,) s, sensor clock
    chi2: float  # of the pieces about their weighted mean, K - 1 degrees of freedom
    p_value: float
    slope: float  # s per s: weighted least-squares trend of the pieces' offsets
    converged: np.ndarray | None = None  # (K,) bool: each piece's GLS converged (None: all)

    @property
    def unconverged(self) -> list[int]:
        """The pieces (1-based) whose GLS stopped at :data:`MAX_GLS_ITER`: their offsets,
        hence the χ², the slope and the inflation, are not the optimum's."""
        if self.converged is None:
            return []
        return [int(k) + 1 for k in np.flatnonzero(~np.asarray(self.converged, bool))]

    @property
    def drifts(self) -> bool:
        """The pieces disagree beyond their standard errors (p < :data:`DRIFT_ALPHA`)."""
        return bool(self.p_value < DRIFT_ALPHA)

    @property
    def inflation(self) -> float:
        """Factor on the offset's standard error: the Birge ratio √(χ²/(K − 1)) when the
        pieces disagree, else 1."""
        return (
            float(np.sqrt(max(1.0, self.chi2 / (self.offsets_s.size - 1)))) if self.drifts else 1.0
        )

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "pieces_offset_s": self.offsets_s.tolist(),
            "pieces_se_s": self.se_s.tolist(),
            "pieces_mid_time_s": self.mid_times_s.tolist(),
            "chi2": self.chi2,
            "p_value": self.p_value,
            "drift_s_per_s": self.slope,
            "drifts": self.drifts,
            "unconverged_pieces": self.unconverged,
        }


def offset_pieces(
    pair: tuple[PoseTrack, PoseTrack], offset_s: float, frame: Frame, starts: np.ndarray,
    params: np.ndarray, max_gap_s: float | None = None,
) -> OffsetDrift | None:
    """The offset of each of :data:`PIECES` equal-time pieces (frame fixed), and their
    agreement (docs/POSE_ERROR.md, "Clock drift"); None when a piece has too few poses."""
    sensor, ref = pair[0].only_valid(), pair[1]
    edges = np.linspace(sensor.t_s[0], sensor.t_s[-1] + 1e-9, PIECES + 1)
    offs, ses, mids, done = [], [], [], []
    for a, b in itertools.pairwise(edges):
        m = (sensor.t_s >= a) & (sensor.t_s < b)
        if m.sum() < 20:
            return None
        piece = PoseTrack(sensor.t_s[m], sensor.position[m], sensor.quat_xyzw[m], name=sensor.name)
        st = np.asarray(starts)[(np.asarray(starts) > a) & (np.asarray(starts) < b)]
        try:
            g = refine(
                [(piece, ref)], [offset_s], frame, [st], params, max_gap_s=max_gap_s,
                fit_frame=False,
            )
        except FitError:
            return None
        offs.append(float(g.offsets_s[0]))
        ses.append(g.offset_se_s(0))
        done.append(g.converged)
        mids.append(0.5 * (a + b))
    o, se, t = np.array(offs), np.array(ses), np.array(mids)
    w = 1.0 / se**2
    mean = np.sum(w * o) / np.sum(w)
    stat = float(np.sum(w * (o - mean) ** 2))
    tc = t - np.sum(w * t) / np.sum(w)
    slope = float(np.sum(w * tc * (o - mean)) / np.sum(w * tc * tc))
    return OffsetDrift(
        o, se, t, stat, float(chi2.sf(stat, PIECES - 1)), slope, np.array(done, dtype=bool)
    )
