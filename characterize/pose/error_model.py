"""Pose-sensor error model: relocalization offsets + first-order Gauss-Markov + white noise.

Per axis (x, y, z in m; roll, pitch, yaw in rad) ``e(t) = b_s + g(t) + v(t)`` with
parameters sigma_b, sigma, tau_s (s), sigma_v, fitted by the exact 2-state Kalman
likelihood (docs/POSE_ERROR.md, "The fit", "Model file")."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numba
import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import beta, chi2
from scipy.stats import f as f_dist

from sensorbench.characterize.pose.series import AXIS_UNITS, POSE_AXES, ErrorSeries
from sensorbench.characterize.pose.whiten import (
    DIFFUSE_SCALE,
    filter_gains,
    spacings,
    whiten_columns,
)
from sensorbench.errors import FitError, ModelFileError
from sensorbench.fusion.aid_queue import PoseAidModel
from sensorbench.logs.model_file import (
    check_envelope,
    load_document,
    model_document,
    write_document,
)
from sensorbench.logs.model_keys import POSE_ERROR_KEYS, check_document

PARAMS: tuple[str, ...] = ("sigma_b", "sigma", "tau_s", "sigma_v")
"""Parameter names, in the column order of every parameter array."""

Progress = Callable[[int, int], None]
"""``progress(done, total)``: how far a long computation is (the CLI draws a bar)."""

_MAX_BLOCK_ELEMENTS = 6_000_000
MAX_RESTRICTED_STEP = 1.0
"""Largest restricted-likelihood step of sigma, tau, sigma_v, in standard errors."""
MAX_SE_LOG = 2.0
"""Above this standard error of ln θ a parameter counts as not identified."""
TAU_WHITE_DEVIANCE = float(chi2.ppf(0.95, 1))
"""Deviance (3.84) below which tau_s is not told from its lower bound (0.1 median spacing:
the GM part white): its 95 % profile-likelihood interval reaches that bound, so tau_s is
not identified (a Wald interval about the optimum would exclude the small truth)."""
MAX_ITER, FD_STEP_LOG, NEWTON_TOL = 60, 3e-3, 1e-5
"""The fit's Newton iterations at most, central-difference step (in ln θ) and convergence
threshold of the Newton decrement (:func:`minimize_batched`; provenance ``fit_options``)."""
MODEL_KIND = "pose_error_gm"
MODEL_UNITS = {"length": "m", "angle": "rad", "time": "s"}
READ_UNITS = {"length": "m", "angle": "rad"}
"""Units a file must have to load (files without ``time`` load)."""
FORMAT_VERSION = 1
_LOG_2PI = math.log(2.0 * math.pi)


# --------------------------------------------------------------------------- likelihood


@dataclass
class _Packed:
    """Sessions × axes packed as columns of ``(N_max, D)`` arrays (padding has w = 0)."""

    y: np.ndarray  # (N, D) error, 0 where padded
    dt: np.ndarray  # (N, D) s; inf at each session start (g stationary)
    reset: np.ndarray  # (N, D) bool: b reset here
    diffuse: np.ndarray  # (N, D) bool: a wrong relocalization's reset (offset unknown)
    w: np.ndarray  # (N, D) 1.0 valid / 0.0 padding
    session: np.ndarray  # (D,) session index of each column
    axis: np.ndarray  # (D,) axis index of each column


def _pack(series: list[ErrorSeries], axes: list[int]) -> _Packed:
    n_max = max(s.n for s in series)
    cols = [(i, a) for i in range(len(series)) for a in axes]
    d = len(cols)
    y = np.zeros((n_max, d))
    dt = np.full((n_max, d), np.inf)
    reset = np.zeros((n_max, d), dtype=bool)
    diffuse = np.zeros((n_max, d), dtype=bool)
    w = np.zeros((n_max, d))
    for c, (i, a) in enumerate(cols):
        s = series[i]
        y[: s.n, c] = s.error[:, a]
        dt[1 : s.n, c] = np.diff(s.t_s)
        reset[: s.n, c] = s.reloc
        diffuse[: s.n, c] = s.wrong
        w[: s.n, c] = 1.0
    return _Packed(y, dt, reset, diffuse, w, *np.array(cols).T)


def _nll_columns(p: _Packed, col: np.ndarray, params: np.ndarray, n_used: int) -> np.ndarray:
    """:func:`_nll_kernel` on ``p`` with ``phi = exp(-dt/tau)`` once per (column, tau)."""
    tau = params[:, 2]
    order = np.lexsort((tau, col))
    c, t = col[order], tau[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = (c[1:] != c[:-1]) | (t[1:] != t[:-1])
    source = np.empty(order.size, dtype=np.int64)
    source[order] = np.cumsum(first) - 1
    return _nll_kernel(
        p.y, p.dt, p.reset, p.diffuse, p.w, col, params, n_used, source, order[first]
    )


@numba.njit(cache=True)
def _nll_kernel(
    y: np.ndarray, dt: np.ndarray, reset: np.ndarray, diffuse: np.ndarray, w: np.ndarray,
    col: np.ndarray, params: np.ndarray, n_used: int, source: np.ndarray, first: np.ndarray,
) -> np.ndarray:
    """Negative log-likelihood ``(C,)`` of data columns ``col`` of the :class:`_Packed` arrays.

    Column c runs on data column ``col[c]`` with ``params[c]`` (:data:`PARAMS` order,
    linear units) over the first ``n_used`` rows, with the transition factor of column
    ``first[source[c]]``. A diffuse reset's first-sample constant term is removed."""
    n_c = col.size
    phis = np.empty(first.size)
    out = np.zeros(n_c)
    m0 = np.zeros(n_c)
    m1 = np.zeros(n_c)
    p00 = np.zeros(n_c)
    p01 = np.zeros(n_c)
    p11 = np.zeros(n_c)
    for k in range(n_used):
        for u in range(first.size):
            c = first[u]
            phis[u] = math.exp(-dt[k, col[c]] / params[c, 2])
        for c in range(n_c):
            j = col[c]
            if w[k, j] == 0.0:
                continue
            phi = phis[source[c]]
            s2 = params[c, 1] * params[c, 1]
            rv = params[c, 3] * params[c, 3]
            m1[c] *= phi
            p01[c] *= phi
            p11[c] = phi * phi * p11[c] + s2 * (1.0 - phi * phi)
            if reset[k, j]:
                m0[c] = 0.0
                p00[c] = params[c, 0] * params[c, 0]
                p01[c] = 0.0
                if diffuse[k, j]:
                    p00[c] = DIFFUSE_SCALE * (p00[c] + s2 + rv)
                    out[c] -= 0.5 * (_LOG_2PI + math.log(p00[c]))
            a = p00[c] + p01[c]
            b = p01[c] + p11[c]
            s = max(a + b + rv, rv)  # S >= R exactly; guards round-off when R is tiny
            nu = y[k, j] - m0[c] - m1[c]
            k0 = a / s
            k1 = b / s
            m0[c] += k0 * nu
            m1[c] += k1 * nu
            p00[c] -= k0 * a
            p01[c] -= k0 * b
            p11[c] -= k1 * b
            out[c] += 0.5 * (_LOG_2PI + math.log(s) + nu * nu / s)
    return out


# --------------------------------------------------------------------------- sigma_b Q-profile


@numba.njit(cache=True)
def _offset_normal_equations(
    y: np.ndarray, dt: np.ndarray, seg: np.ndarray, n_seg: int, sigma: float, tau: float,
    sigma_v: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``A = BᵀV⁻¹B`` (k, k) and ``r = BᵀV⁻¹y`` (k,) for one session of one axis.

    V is the covariance of g + v (g stationary at sample 0, ``dt`` in s with inf at 0),
    B the indicator of segment ``seg[i]`` (0..k-1, non-decreasing). The scalar Kalman
    filter of g whitens y and every column of B with the same gains; a past segment's
    column is dropped once its filtered state has decayed below 1e-12."""
    a = np.zeros((n_seg, n_seg))
    r = np.zeros(n_seg)
    m = np.zeros(n_seg)
    e = np.zeros(n_seg)
    my = 0.0
    p = 0.0
    rv = sigma_v * sigma_v
    s2 = sigma * sigma
    lo = 0
    for i in range(y.size):
        phi = math.exp(-dt[i] / tau) if math.isfinite(dt[i]) else 0.0
        p = phi * phi * p + s2 * (1.0 - phi * phi)
        cur = seg[i]
        my *= phi
        for j in range(lo, cur + 1):
            m[j] *= phi
        while lo < cur and abs(m[lo]) < 1e-12:
            lo += 1
        s = p + rv
        gain = p / s
        ey = y[i] - my
        for j in range(lo, cur + 1):
            e[j] = (1.0 if j == cur else 0.0) - m[j]
        for j in range(lo, cur + 1):
            r[j] += e[j] * ey / s
            for col in range(lo, cur + 1):
                a[j, col] += e[j] * e[col] / s
        my += gain * ey
        for j in range(lo, cur + 1):
            m[j] += gain * e[j]
        p = p * rv / s
    return a, r


def offset_qprofile(
    series: list[ErrorSeries], axis: int, sigma: float, tau_s: float, sigma_v: float
) -> QProfile:
    """The sigma_b Q-profile of one axis over ``series`` (docs/POSE_ERROR.md, "The fit").

    One entry per usual segment, each session's block of C decomposed on its own; a
    session whose mean an alignment absorbed on this axis (``meta["mean_group"]``,
    ``meta["mean_axes"]``) puts its segments in that group."""
    lam, z, ones, group = [], [], [], []
    labels: dict[str, int] = {}
    for s in series:
        b, c = _gls_offsets(s, axis, sigma, tau_s, sigma_v)
        usual = ~s.wrong_segments  # a wrong relocalization's offset is no draw of sigma_b
        c = c[np.ix_(usual, usual)]
        ev, vec = np.linalg.eigh(0.5 * (c + c.T))
        lam.append(ev)
        z.append(vec.T @ b[usual])
        ones.append(vec.T @ np.ones(ev.size))
        label = s.meta.get("mean_group") if POSE_AXES[axis] in s.meta.get("mean_axes", ()) else None
        gid = -1 if label is None else labels.setdefault(str(label), len(labels))
        group.append(np.full(ev.size, gid))
    zz = np.concatenate(z)
    return QProfile(np.concatenate(lam), zz**2, zz, np.concatenate(ones), np.concatenate(group))


@dataclass
class QProfile:
    """sigma_b's Q-profile: per segment j, λ_j and z_j (docs/POSE_ERROR.md, "The fit").

    χ² with k − groups dof at the true sigma_b (``ones`` = Uᵀ1, ``group``: the absorbed
    means); without them (z² only) k dof."""

    lam: np.ndarray  # (k,) unit²
    z2: np.ndarray  # (k,) unit²
    z: np.ndarray | None = None  # (k,) unit, signed
    ones: np.ndarray | None = None  # (k,)
    group: np.ndarray | None = None  # (k,) int, -1: mean not absorbed

    @property
    def _groups(self) -> list[np.ndarray]:
        if self.group is None or self.z is None or self.ones is None:
            return []
        return [self.group == g for g in np.unique(self.group[self.group >= 0])]

    @property
    def dof(self) -> int:
        """k − the number of absorbed means."""
        return int(self.lam.size - len(self._groups))

    def _residuals(self, w: np.ndarray) -> np.ndarray:
        """``z`` minus each group's weighted mean along ``ones`` (weights ``w`` (..., k))."""
        groups = self._groups
        if not groups:
            return np.broadcast_to(np.sqrt(self.z2), w.shape)
        g = np.stack(groups, axis=1).astype(float)  # (k, groups) one-hot membership
        u, z = self.ones, self.z
        beta = ((w * u * z) @ g) / ((w * u * u) @ g)
        return z - (beta @ g.T) * u

    def q(self, s2: np.ndarray) -> np.ndarray:
        """Q at every s² (any shape)."""
        return np.maximum(self._q_slope(s2)[0], 0.0)

    def quantile(self, u: np.ndarray) -> np.ndarray:
        """sigma_b at probabilities ``u`` of ``P(sigma_b ≤ s) = P(χ²_dof ≥ Q(s²))`` (axis unit;
        0 below the mass at 0)."""
        u = np.asarray(u, dtype=float)
        with np.errstate(divide="ignore"):
            target = chi2.isf(u, self.dof)
        # Q decreases and Q(s²) ≤ Σ z²/s²: bracket on a log grid of s² below Σ z²/target,
        # then Newton in s² (bisection when it leaves the bracket)
        with np.errstate(divide="ignore"):
            bound = np.where(target > 0, np.sum(self.z2) / target, 0.0)
        top = float(np.max(bound, initial=0.0, where=np.isfinite(bound)))
        grid = np.concatenate([[0.0], top * np.logspace(-12, 0, 97)])
        qg = self.q(grid)
        i = np.clip(np.searchsorted(-qg, -target, side="left"), 1, grid.size - 1)
        lo, hi = grid[i - 1], np.minimum(grid[i], bound)
        frac = np.clip((qg[i - 1] - target) / np.maximum(qg[i - 1] - qg[i], 1e-300), 0.0, 1.0)
        x = np.where(hi > lo, lo + frac * (hi - lo), hi)
        at_zero = qg[0] <= target  # the mass at sigma_b = 0
        for _ in range(60):
            q, dq = self._q_slope(x)
            above = q > target
            lo, hi = np.where(above, x, lo), np.where(above, hi, x)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = x - (q - target) / dq
            inside = np.isfinite(step) & (step > lo) & (step < hi)
            new = np.where(inside, step, 0.5 * (lo + hi))
            done = (np.abs(new - x) <= 1e-12 * np.maximum(new, 1e-300)) | (
                np.abs(q - target) <= 1e-9 * target  # far below any chi2 level asked
            )
            x = new
            if np.all(done | at_zero | (target == 0)):
                break
        out = np.where(at_zero, 0.0, np.sqrt(x))
        return np.where(target == 0, np.inf, out)

    def _q_slope(self, s2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Q and dQ/ds² = −Σ w² e² (e the residuals after the groups' means) at s²."""
        w = 1.0 / (np.asarray(s2, dtype=float)[..., None] + self.lam)
        we2 = w * self._residuals(w) ** 2
        return np.sum(we2, axis=-1), -np.sum(w * we2, axis=-1)


# --------------------------------------------------------------------------- wrong relocalizations


WRONG_ALPHA = 0.05
"""Family-wise level of naming a usual relocalization wrong (Bonferroni over the
relocalizations of a fit)."""
NAMING_ROUNDS = 3
"""Fit → name → refit rounds at most (the names settle in one or two)."""


def _gls_offsets(
    s: ErrorSeries, axis: int, sigma: float, tau_s: float, sigma_v: float
) -> tuple[np.ndarray, np.ndarray]:
    """One axis' segment offsets ``b̂ = A⁻¹r`` (k,) unit and their covariance ``A⁻¹`` unit²."""
    y = np.ascontiguousarray(s.error[:, axis])
    dt, seg = spacings(s.t_s), s.segment_id
    a, r = _offset_normal_equations(y, dt, seg, s.n_segments, sigma, tau_s, sigma_v)
    c = np.linalg.inv(a)
    return c @ r, c


def _gross_pvalue(b: np.ndarray, v: np.ndarray, sb2: np.ndarray, dof: int) -> np.ndarray:
    """``(k,)`` p-values of offsets ``b`` ``(k, 6)`` (variances ``v``) under N(0, sb2 + v):
    each axis' F(1, dof) ratio as its χ²₁ deviate, the six summed (χ²₆)."""
    ratio = b**2 / np.maximum(sb2 + v, 1e-300)
    z2 = chi2.isf(f_dist.sf(ratio, 1, max(dof, 1)), 1)
    return chi2.sf(np.sum(z2, axis=1), len(POSE_AXES))


@dataclass
class WrongRelocs:
    """The relocalizations a fit names wrong (:func:`name_wrong`; docs/POSE_ERROR.md,
    "Wrong relocalizations")."""

    n_segments: int  # the offsets estimated, one per segment (session starts included)
    sessions: list[str]
    t_s: np.ndarray  # (k,) s, the named segments' first samples
    jump: np.ndarray  # (k, 6) their offsets (m, rad)
    masks: list[np.ndarray]  # per series: (N,) bool at the named segments' first samples
    n_exempt: int  # the session starts that are no candidates (:func:`start_exempt`)

    @classmethod
    def none(cls, series: list[ErrorSeries]) -> WrongRelocs:
        """Nothing named among ``series``."""
        return cls(
            sum(s.n_segments for s in series), [], np.zeros(0), np.zeros((0, len(POSE_AXES))),
            [np.zeros(s.n, bool) for s in series], int(start_exempt(series).sum()),
        )

    @property
    def n_relocalizations(self) -> int:
        """The relocalizations: segments less the exempt session starts."""
        return self.n_segments - self.n_exempt

    def same_as(self, other: WrongRelocs) -> bool:
        """True when both name the same segments."""
        return all(np.array_equal(a, b) for a, b in zip(self.masks, other.masks, strict=True))

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-ready summary (the model file's ``[wrong_relocalizations]``): the share
        of relocalizations (not session starts) named wrong with its Clopper-Pearson 95 %
        interval (neither without a relocalization), each named jump and, when there are
        some, their median horizontal size |(x, y)| (m)."""
        k, n, a = len(self.sessions), self.n_relocalizations, 1.0 - 0.95
        out: dict[str, Any] = {"n_relocalizations": int(n), "n_wrong": k}
        if n > 0:
            lo = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
            hi = 1.0 if k >= n else float(beta.ppf(1 - a / 2, k + 1, n - k))
            out.update(rate=k / n, rate_ci95=[lo, hi])
        out["named"] = [
            {"session": s, "t_s": float(t), "jump": [float(x) for x in j]}
            for s, t, j in zip(self.sessions, self.t_s, self.jump, strict=True)
        ]
        if self.sessions:
            out["median_jump_m"] = float(np.median(np.hypot(self.jump[:, 0], self.jump[:, 1])))
        return out


def start_exempt(series: list[ErrorSeries]) -> np.ndarray:
    """``(S,)`` bool: the session's start is no candidate for a wrong relocalization,
    because an alignment of its own absorbed its mean (``meta["mean_group"]`` shared with
    no other of ``series``), so that its offset cannot be told from that alignment's.
    Under one frame for several sessions, or none, a start is the sensor localizing into
    its map like any relocalization (docs/POSE_ERROR.md)."""
    groups = [s.meta.get("mean_group") for s in series]
    return np.array([g is not None and groups.count(g) == 1 for g in groups], dtype=bool)


def name_wrong(
    series: list[ErrorSeries], fits: dict[str, AxisFit], sigma_b2: np.ndarray | None = None,
    dof: int = 0, n_family: int = 0, exempt: np.ndarray | None = None,
) -> WrongRelocs:
    """Name the wrong relocalizations among ``series`` under ``fits``' sigma, tau, sigma_v.

    Candidates: the relocalizations, and the session starts not :func:`start_exempt`
    (an exempt start's offset counts as a usual one in sigma_b's moment estimate). Without
    ``sigma_b2``: one at a time at ``WRONG_ALPHA / K``, K the offsets (segments, starts
    included: conservative; docs/POSE_ERROR.md). With ``sigma_b2`` ``(6,)`` (a model
    fitted elsewhere, from ``dof`` offsets), each relocalization is tested against it at
    ``WRONG_ALPHA / n_family`` (default K). ``exempt`` ``(S,)``: the starts exempt, where
    ``series`` is not all the sessions aligned together (default :func:`start_exempt`)."""
    params = np.stack([fits[a].values for a in POSE_AXES])
    est = [[_gls_offsets(s, a, *params[a, 1:]) for a in range(len(POSE_AXES))] for s in series]
    b = np.concatenate([np.stack([o for o, _ in e], 1) for e in est])  # (K, 6) unit
    v = np.concatenate([np.stack([np.diag(c) for _, c in e], 1) for e in est])  # (K, 6) unit²
    k_all = b.shape[0]
    start = np.zeros(k_all, bool)  # the first segments of sessions their own frame absorbed
    start[np.cumsum([0] + [s.n_segments for s in series[:-1]])] = (
        start_exempt(series) if exempt is None else exempt
    )
    level = WRONG_ALPHA / max(n_family or k_all, 1)
    usual = np.ones(k_all, bool)
    if sigma_b2 is not None:
        usual = start | (_gross_pvalue(b, v, np.asarray(sigma_b2)[None, :], dof) >= level)
    else:
        excess = b**2 - v
        while usual.sum() > 3:
            n = int(usual.sum())
            sb2 = np.clip((excess[usual].sum(axis=0) - excess) / (n - 1), 0.0, None)
            p = np.where(usual & ~start, _gross_pvalue(b, v, sb2, n - 1), np.inf)
            j = int(np.argmin(p))
            if p[j] >= level:
                break
            usual[j] = False
    masks, names, times, jumps = [], [], [], []
    k0 = 0
    for s in series:
        wrong_seg = ~usual[k0 : k0 + s.n_segments]
        starts = np.flatnonzero(s.reloc)
        m = np.zeros(s.n, bool)
        m[starts[wrong_seg]] = True
        masks.append(m)
        names += [s.name] * int(wrong_seg.sum())
        times += list(s.t_s[starts[wrong_seg]])
        jumps.append(b[k0 : k0 + s.n_segments][wrong_seg])
        k0 += s.n_segments
    return WrongRelocs(
        k_all, names, np.array(times), np.concatenate(jumps), masks, int(start.sum())
    )


# --------------------------------------------------------------------------- optimizer


def _stencil(d: int, h: float) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
    """Offsets of the central-difference stencil (1 + 2d + d(d-1) sets) and each pair's
    ``(i, j, +column, -column)``."""
    eye = h * np.eye(d)
    ij = list(itertools.combinations(range(d), 2))
    both = np.array([eye[i] + eye[j] for i, j in ij]).reshape(-1, d)
    signed = [np.stack([x, -x], axis=1).reshape(-1, d) for x in (eye, both)]
    first = 1 + 2 * d
    pairs = [(i, j, first + 2 * k, first + 2 * k + 1) for k, (i, j) in enumerate(ij)]
    return np.concatenate([np.zeros((1, d)), *signed]), pairs


def _grad_hess(f: np.ndarray, d: int, h: float, pairs: list) -> tuple[np.ndarray, np.ndarray]:
    """Gradient and Hessian from stencil values ``f`` (P, n_sets)."""
    f0 = f[:, 0]
    fp = f[:, 1 : 1 + 2 * d : 2]
    fm = f[:, 2 : 2 + 2 * d : 2]
    g = (fp - fm) / (2 * h)
    hess = np.zeros((f.shape[0], d, d))
    idx = np.arange(d)
    hess[:, idx, idx] = (fp - 2 * f0[:, None] + fm) / h**2
    for i, j, ipp, imm in pairs:
        v = (f[:, ipp] - fp[:, i] - fp[:, j] + 2 * f0 - fm[:, i] - fm[:, j] + f[:, imm]) / (
            2 * h**2
        )
        hess[:, i, j] = hess[:, j, i] = v
    return g, hess


@dataclass
class _OptResult:
    theta: np.ndarray  # (P, d) log-parameters
    nll: np.ndarray  # (P,)
    hess: np.ndarray  # (P, d, d)
    at_bound: np.ndarray  # (P, d) bool
    converged: np.ndarray  # (P,) bool


def _saddle_free(
    th: np.ndarray, g: np.ndarray, hs: np.ndarray, lower: np.ndarray, upper: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Saddle-free Newton parts at ``th`` (P, d): free mask (not held at a bound), |H|'s
    eigenvectors and floored |eigenvalues|, the gradient in that basis, the decrement."""
    d = th.shape[1]
    lo_hit = (th <= lower + _AT_BOUND) & (g > 0)
    hi_hit = (th >= upper - _AT_BOUND) & (g < 0)
    free = ~(lo_hit | hi_hit)
    hm = hs * free[:, :, None] * free[:, None, :]
    hm[:, np.arange(d), np.arange(d)] += ~free
    ev, vec = np.linalg.eigh(hm)
    ev_abs = np.maximum(np.abs(ev), 1e-8 * np.abs(ev).max(axis=1, keepdims=True) + 1e-12)
    proj = np.einsum("pij,pi->pj", vec, g * free)
    decrement = 0.5 * np.sum(proj**2 / ev_abs, axis=1)
    return free, vec, ev_abs, proj, decrement


def _damped_step(
    vec: np.ndarray, ev_abs: np.ndarray, proj: np.ndarray, free: np.ndarray, lam: np.ndarray
) -> np.ndarray:
    """The Levenberg-Marquardt step in the |H| eigenbasis, free parameters only, ≤ 2 (log)."""
    scale = ev_abs.max(axis=1)
    step = -np.einsum("pij,pj->pi", vec, proj / (ev_abs + (lam * scale)[:, None]))
    step *= free
    big = np.abs(step).max(axis=1)
    return step * np.minimum(1.0, 2.0 / np.maximum(big, 1e-300))[:, None]


_AT_BOUND = 1e-9
"""How close to a bound (log units) a parameter counts as held there."""


def minimize_batched(
    fun: Callable[[np.ndarray, np.ndarray], np.ndarray], theta0: np.ndarray, lower: np.ndarray,
    upper: np.ndarray, progress: Progress | None = None,
) -> _OptResult:
    """Minimise P independent smooth functions of d bounded parameters at once.

    ``fun(theta (P_active, n_sets, d), active indices) -> (P_active, n_sets)``. Damped
    saddle-free Newton on a central-difference stencil of step :data:`FD_STEP_LOG`; a
    problem stops at a Newton decrement below :data:`NEWTON_TOL` (or a rejected step below
    100 times it)."""
    p, d = theta0.shape
    offsets, pairs = _stencil(d, FD_STEP_LOG)

    def evaluate(th: np.ndarray, act: np.ndarray) -> tuple[np.ndarray, ...]:
        sets = np.clip(th[:, None, :] + offsets[None], lower[act, None, :], upper[act, None, :])
        f = fun(sets, act)
        g, hs = _grad_hess(f, d, FD_STEP_LOG, pairs)
        bad = ~np.all(np.isfinite(f), axis=1)
        f0 = np.where(bad, np.inf, f[:, 0])
        g[bad] = 0.0
        hs[bad] = np.eye(d)
        return f0, g, hs

    theta = np.clip(theta0.astype(float), lower, upper)
    all_idx = np.arange(p)
    nll, grad, hess = evaluate(theta, all_idx)
    lam = np.full(p, 1e-3)
    converged = np.zeros(p, dtype=bool)
    active = all_idx[np.isfinite(nll)]
    for it in range(MAX_ITER):
        if progress is not None:
            progress(it, MAX_ITER)
        if active.size == 0:
            break
        th = theta[active]
        free, vec, ev_abs, proj, decrement = _saddle_free(
            th, grad[active], hess[active], lower[active], upper[active]
        )
        done = decrement < NEWTON_TOL
        converged[active[done]] = True
        keep = ~done
        active, th, proj, vec, ev_abs, free = (
            x[keep] for x in (active, th, proj, vec, ev_abs, free)
        )
        if active.size == 0:
            break
        step = _damped_step(vec, ev_abs, proj, free, lam[active])
        trial = np.clip(th + step, lower[active], upper[active])
        f_t, g_t, h_t = evaluate(trial, active)
        ok = np.isfinite(f_t) & (f_t <= nll[active] + 1e-12 * np.abs(nll[active]))
        acc = active[ok]
        theta[acc], nll[acc], grad[acc], hess[acc] = trial[ok], f_t[ok], g_t[ok], h_t[ok]
        lam[acc] = np.maximum(lam[acc] / 4.0, 1e-9)
        rej = active[~ok]
        lam[rej] = lam[rej] * 10.0 + 1e-3
        # a rejected step that no longer moves anything, or one rejected that close
        # to the optimum: numerically converged
        near = ~ok & (decrement[keep] < 100.0 * NEWTON_TOL)
        converged[active[near]] = True
        stuck = near | (~ok & (np.abs(trial - th).max(axis=1) < 1e-8))
        active = active[~stuck & (lam[active] < 1e8)]
    at_bound = (theta <= lower + 1e-6) | (theta >= upper - 1e-6)
    if progress is not None:
        progress(MAX_ITER, MAX_ITER)
    return _OptResult(theta, nll, hess, at_bound, converged)


# --------------------------------------------------------------------------- model


@dataclass
class AxisFit:
    """Fitted parameters of one axis (linear units) with log-space uncertainty."""

    axis: str
    sigma_b: float
    sigma: float
    tau_s: float
    sigma_v: float
    cov_log: np.ndarray  # (4, 4) covariance of ln(params), nan rows for bounded ones
    n_samples: int = 0
    n_segments: int = 0
    neg_log_likelihood: float = float("nan")
    converged: bool = True
    qprofile: QProfile | None = None

    @property
    def has_qprofile(self) -> bool:
        """True when sigma_b's uncertainty is its Q-profile (≥ 1 degree of freedom)."""
        return self.qprofile is not None and self.qprofile.dof >= 1

    @property
    def sigma_b_free(self) -> bool:
        """False when alignments absorbed every segment offset: sigma_b not identified."""
        return self.qprofile is None or self.qprofile.dof >= 1

    @property
    def unit(self) -> str:
        """Unit of sigma_b, sigma and sigma_v."""
        return AXIS_UNITS[self.axis]

    @property
    def values(self) -> np.ndarray:
        """``(4,)`` parameters in :data:`PARAMS` order."""
        return np.array([self.sigma_b, self.sigma, self.tau_s, self.sigma_v])

    @property
    def se_log(self) -> np.ndarray:
        """``(4,)`` standard errors of the log-parameters (nan on a bound)."""
        return np.sqrt(np.diag(self.cov_log))

    @property
    def identified(self) -> np.ndarray:
        """``(4,)`` bool: finite se_log below :data:`MAX_SE_LOG` (the Monte Carlo draws these),
        and none when the fit did not converge (its Hessian is not the optimum's)."""
        ok = self._log_identified()
        ok[0] = (ok[0] or self.has_qprofile) and self.sigma_b_free
        return ok & self.converged

    def unidentified(self) -> tuple[str, ...]:
        """The parameters (:data:`PARAMS` names) that are not :attr:`identified`."""
        return tuple(p for p, ok in zip(PARAMS, self.identified, strict=True) if not ok)

    def _log_identified(self) -> np.ndarray:
        se = self.se_log
        return np.isfinite(se) & (se < MAX_SE_LOG)

    def cov_log_usable(self) -> np.ndarray:
        """Covariance with the rows/columns of parameters with se_log ≥ 2 or nan set to 0."""
        ok = self._log_identified()
        ok[0] &= self.sigma_b_free
        return np.where(ok[:, None] & ok[None, :], np.nan_to_num(self.cov_log), 0.0)

    def sigma_b_quantile(self, u: np.ndarray) -> np.ndarray:
        """sigma_b (axis unit) at probabilities ``u``: its Q-profile, else the log-normal
        ``exp(N(ln σ̂_b, se²))`` (the point estimate if se_log is not usable)."""
        u = np.asarray(u, dtype=float)
        if self.has_qprofile:
            return self.qprofile.quantile(u)  # type: ignore[union-attr]
        se = self.se_log[0] if self._log_identified()[0] and self.sigma_b_free else 0.0
        with np.errstate(over="ignore", divide="ignore"):
            return self.sigma_b * np.exp(se * ndtri(u))

    def ci(self, z: float = 1.959963984540054) -> np.ndarray:
        """``(4, 2)`` central intervals of probability ``2Φ(z) − 1`` (nan if unidentified)."""
        lv = np.log(self.values)
        se = np.where(self.identified, self.se_log, np.nan)
        with np.errstate(over="ignore"):
            out = np.exp(np.stack([lv - z * se, lv + z * se], axis=1))
        if self.has_qprofile and self.converged:
            out[0] = self.sigma_b_quantile(ndtr(np.array([-z, z])))
        return out


def _qprofile_from(
    table: dict[str, Any], lam: np.ndarray, z2: np.ndarray, where: str
) -> QProfile | None:
    """The Q-profile of a model file's table (None when absent); ModelFileError if malformed."""
    if lam.size == 0:
        return None
    keys = ("seg_proj", "seg_ones", "seg_group")
    if not any(k in table for k in keys):
        return QProfile(lam, z2)
    try:
        z, ones = (np.array(table[k], dtype=float) for k in keys[:2])
        group = np.array(table["seg_group"], dtype=int)
    except KeyError as exc:
        raise ModelFileError(
            f"{where}: {exc} missing (seg_proj, seg_ones and seg_group go together)"
        ) from exc
    if not (z.shape == ones.shape == group.shape == lam.shape) or not np.allclose(z * z, z2):
        raise ModelFileError(
            f"{where}: seg_proj, seg_ones and seg_group disagree with seg_var and seg_proj2"
        )
    return QProfile(lam, z2, z, ones, group)


@dataclass
class PoseErrorModel:
    """A fitted per-axis pose-error model with provenance (file keys: docs/POSE_ERROR.md)."""

    axes: dict[str, AxisFit]
    sensor: str = ""
    reference: str = "mocap"
    frame: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)
    wrong_relocalizations: dict[str, Any] = field(default_factory=dict)
    """:meth:`WrongRelocs.to_dict` of the fit (empty: not known, e.g. an older file)."""

    def params_array(self) -> np.ndarray:
        """``(6, 4)`` parameters, axes in :data:`POSE_AXES` order, columns :data:`PARAMS`."""
        return np.stack([self.axes[a].values for a in POSE_AXES])

    def cov_log_array(self) -> np.ndarray:
        """``(6, 4, 4)`` log-parameter covariances, unidentified parameters zeroed."""
        return np.stack([self.axes[a].cov_log_usable() for a in POSE_AXES])

    def sigma_b_quantiles(self) -> list[Callable[[np.ndarray], np.ndarray]]:
        """Per axis (:data:`POSE_AXES` order) the quantile function of sigma_b's uncertainty."""
        return [self.axes[a].sigma_b_quantile for a in POSE_AXES]

    def aid_model(self) -> PoseAidModel:
        """The model as the split filter's aiding model (its x, y and yaw axes)."""
        return PoseAidModel.from_dict({
            a: {p: getattr(self.axes[src], p) for p in PARAMS}
            for a, src in (("x", "x"), ("y", "y"), ("theta", "yaw"))
        })

    # ---------------------------------------------------------------- file I/O

    def to_dict(self) -> dict[str, Any]:
        """The TOML document as a nested dict."""
        axes: dict[str, Any] = {}
        for a in POSE_AXES:
            f = self.axes[a]
            ci = f.ci()
            axes[a] = {
                "unit": f.unit,
                **{k: getattr(f, k) for k in PARAMS},
                "n_samples": int(f.n_samples),
                "n_segments": int(f.n_segments),
                "neg_log_likelihood": float(f.neg_log_likelihood),
                "converged": bool(f.converged),
                "se_log": {k: float(v) for k, v in zip(PARAMS, f.se_log, strict=True)},
                "identified": {k: bool(v) for k, v in zip(PARAMS, f.identified, strict=True)},
                "ci95": {k: [float(ci[i, 0]), float(ci[i, 1])] for i, k in enumerate(PARAMS)},
                "cov_log": [float(v) for v in f.cov_log.ravel()],
            }
            qp = f.qprofile
            if qp is not None:
                table = {"seg_var": qp.lam, "seg_proj2": qp.z2}
                if qp.z is not None and qp.ones is not None and qp.group is not None:
                    table |= {"seg_proj": qp.z, "seg_ones": qp.ones, "seg_group": qp.group}
                axes[a]["sigma_b_qprofile"] = {k: np.asarray(v).tolist() for k, v in table.items()}
        body: dict[str, Any] = {"axes": axes}
        if self.wrong_relocalizations:
            body["wrong_relocalizations"] = self.wrong_relocalizations
        return model_document(
            MODEL_KIND, FORMAT_VERSION, MODEL_UNITS, self.provenance, body, sensor=self.sensor,
            reference=self.reference, frame=self.frame,
            description="error = b (offset, N(0, sigma_b^2), new at each "
            "relocalization) + g (first-order Gauss-Markov, stationary std sigma, "
            "correlation time tau_s) + v (white, std sigma_v)",
        )

    def save(self, path: str | Path) -> Path:
        """Write the model as TOML; returns the path."""
        return write_document(path, self.to_dict())

    @classmethod
    def from_dict(cls, doc: dict[str, Any], source: str = "<dict>") -> PoseErrorModel:
        """Parse a model document; ModelFileError naming the missing or unknown key."""
        check_envelope(doc, source, MODEL_KIND, FORMAT_VERSION, READ_UNITS, "pose-error")
        check_document(doc, POSE_ERROR_KEYS, source)
        meta = doc["model"]
        try:
            axes = {}
            for a in POSE_AXES:
                t = doc["axes"][a]
                cov = np.array(t.get("cov_log", [0.0] * 16), dtype=float).reshape(4, 4)
                qp = t.get("sigma_b_qprofile", {})
                lam = np.array(qp.get("seg_var", []), dtype=float)
                z2 = np.array(qp.get("seg_proj2", []), dtype=float)
                if lam.shape != z2.shape or np.any(~(lam > 0)) or np.any(~(z2 >= 0)):
                    raise ModelFileError(
                        f"{source}: axes.{a}.sigma_b_qprofile: seg_var (> 0) and seg_proj2 "
                        "(≥ 0) must be finite and of equal length; refit to rewrite it"
                    )
                axes[a] = AxisFit(
                    a, *(float(t[k]) for k in PARAMS), cov, int(t.get("n_samples", 0)),
                    int(t.get("n_segments", 0)), float(t.get("neg_log_likelihood", float("nan"))),
                    bool(t.get("converged", True)),
                    _qprofile_from(qp, lam, z2, f"{source}: axes.{a}.sigma_b_qprofile"),
                )  # fmt: skip
        except KeyError as exc:
            raise ModelFileError(f"{source}: missing key {exc} in pose-error model") from exc
        sensor, reference, frame = (str(meta.get(k, "")) for k in ("sensor", "reference", "frame"))
        prov, wrong = (dict(doc.get(k, {})) for k in ("provenance", "wrong_relocalizations"))
        return cls(axes, sensor, reference, frame, prov, wrong)

    @classmethod
    def load(cls, path: str | os.PathLike[str], sensor: str | None = None) -> PoseErrorModel:
        """Read a model file written by :meth:`save` (checks kind, version and units);
        with ``sensor``, ModelFileError unless it is a model of that pose stream (or of
        an unnamed one)."""
        model = cls.from_dict(load_document(path), str(path))
        if sensor is not None and model.sensor and model.sensor != sensor:
            raise ModelFileError(
                f"{path}: a model of sensor {model.sensor!r}, not of {sensor!r}: pass --sensor "
                "or the model of this sensor"
            )
        return model


# --------------------------------------------------------------------------- fitting


def _initial_guess(
    series: list[ErrorSeries], axis: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Moment-based start and bounds (log space) for one axis over some sessions."""
    resid, seg_means, diffs, dts, durations = [], [], [], [], []
    for s in series:
        e = s.error[:, axis]
        sid = s.segment_id
        means = np.bincount(sid, weights=e) / np.maximum(np.bincount(sid), 1)
        seg_means.append(means[~s.wrong_segments])
        resid.append(e - means[sid])
        same = sid[1:] == sid[:-1]
        diffs.append(np.diff(e)[same])
        dts.append(np.diff(s.t_s))
        durations.append(s.duration_s)
    r = np.concatenate(resid)
    scale = float(np.sqrt(np.mean(np.concatenate([s.error[:, axis] for s in series]) ** 2)))
    scale = max(scale, 1e-12)
    var_w = max(float(np.var(r)), 1e-6 * scale**2)
    dt_med = float(np.median(np.concatenate(dts)))
    var_d = float(np.var(np.concatenate(diffs))) if sum(len(x) for x in diffs) else var_w
    sv0 = math.sqrt(max(0.25 * var_d, 1e-6 * scale**2))
    # e-folding lag of the within-segment residual (biased low; only a starting point)
    rho1 = float(np.clip(1.0 - var_d / (2.0 * var_w), 0.05, 0.999))
    tau0 = -dt_med / math.log(rho1)
    t_max = max(durations)
    tau0 = float(np.clip(tau0, 2 * dt_med, t_max))
    sm = np.concatenate(seg_means)
    sb0 = max(
        float(np.std(sm)) if sm.size > 1 else abs(float(sm[0])) if sm.size else 0.0,
        0.3 * math.sqrt(var_w),
    )
    s0 = math.sqrt(var_w)
    theta0 = np.log([sb0, s0, tau0, sv0])
    lower = np.log([1e-4 * scale, 1e-4 * scale, 0.1 * dt_med, 1e-5 * scale])
    upper = np.log([1e2 * scale, 1e2 * scale, 1e2 * t_max, 1e1 * scale])
    return theta0, lower, upper


@dataclass
class _Problem:
    """One independent likelihood maximisation: one axis over a group of sessions."""

    axis: int
    sessions: list[int]


def _fit_problems(
    series: list[ErrorSeries], problems: list[_Problem], theta_start: np.ndarray | None = None,
    progress: Progress | None = None, white: bool = False,
) -> _OptResult:
    """Maximise the likelihood of every problem in one batched optimisation; ``white``:
    with tau_s held at its lower bound (0.1 median spacing, where phi ≤ e⁻¹⁰: the GM
    part white), sigma_b, sigma and sigma_v free."""
    axes_used = sorted({p.axis for p in problems})
    packed = _pack(series, axes_used)
    col_of = {
        (int(s), int(a)): c
        for c, (s, a) in enumerate(zip(packed.session, packed.axis, strict=True))
    }
    prob_cols = [np.array([col_of[(s, p.axis)] for s in p.sessions]) for p in problems]
    starts = [_initial_guess([series[s] for s in p.sessions], p.axis) for p in problems]
    theta0 = np.stack([s[0] for s in starts]) if theta_start is None else theta_start
    lower = np.stack([s[1] for s in starts])
    upper = np.stack([s[2] for s in starts])
    if white:
        theta0 = theta0.copy()
        theta0[:, 2] = upper[:, 2] = lower[:, 2]

    def fun(theta: np.ndarray, active: np.ndarray) -> np.ndarray:
        n_sets = theta.shape[1]
        cols_a = np.concatenate([prob_cols[p] for p in active])
        owner_a = np.repeat(np.arange(active.size), [prob_cols[p].size for p in active])
        # columns: (data column, set) pairs
        data_col = np.repeat(cols_a, n_sets)
        owner_c = np.repeat(owner_a, n_sets)
        set_c = np.tile(np.arange(n_sets), cols_a.size)
        params = np.exp(theta[owner_c, set_c])
        # rows past the longest active session are padding for every column: skip them
        n_used = int(max(series[s].n for p in active for s in problems[p].sessions))
        nll = _nll_columns(packed, data_col, params, n_used)
        out = np.zeros((active.size, n_sets))
        np.add.at(out, (owner_c, set_c), nll)
        return out

    return minimize_batched(fun, theta0, lower, upper, progress)


def _cov_from_hessian(hess: np.ndarray, at_bound: np.ndarray) -> np.ndarray:
    """Inverse Hessian over the free parameters; nan rows/cols for bounded ones."""
    d = hess.shape[0]
    cov = np.full((d, d), np.nan)
    free = ~at_bound
    hf = hess[np.ix_(free, free)]
    with contextlib.suppress(np.linalg.LinAlgError):
        if free.any() and np.linalg.eigvalsh(hf).min() > 0:
            cov[np.ix_(free, free)] = np.linalg.inv(hf)
    return cov


def _stage(progress: Progress | None, stage: int, stages: int) -> Progress | None:
    """``progress`` for stage ``stage`` of ``stages`` equal ones (None stays None)."""
    if progress is None:
        return None
    return lambda done, total: progress(stage * total + done, stages * total)


class GroupFits(dict[str, AxisFit]):
    """``{axis: AxisFit}`` of one group of sessions, with the wrong relocalizations named."""

    def __init__(self, fits: dict[str, AxisFit], wrong: WrongRelocs) -> None:
        super().__init__(fits)
        self.wrong = wrong


def fit_groups(
    series: list[ErrorSeries], groups: list[list[int]], progress: Progress | None = None,
) -> list[GroupFits]:
    """Fit every axis on each group of session indices, all groups in one batch.

    Each group is refitted with its named wrong relocalizations' offsets unknown until
    the names settle (:data:`NAMING_ROUNDS` at most); ``progress`` follows the first fit."""
    if not series:
        raise FitError("no sessions to fit")
    fits = _fit_groups(series, groups, progress)
    wrong = [WrongRelocs.none([series[i] for i in g]) for g in groups]
    todo = list(range(len(groups)))
    for _ in range(NAMING_ROUNDS):
        found = {gi: name_wrong([series[i] for i in groups[gi]], fits[gi]) for gi in todo}
        todo = [gi for gi in todo if not found[gi].same_as(wrong[gi])]
        if not todo:
            break
        copies: list[ErrorSeries] = []
        refit_groups = []
        for gi in todo:
            wrong[gi] = found[gi]
            refit_groups.append(list(range(len(copies), len(copies) + len(groups[gi]))))
            marks = zip(groups[gi], found[gi].masks, strict=True)
            copies += [replace(series[i], wrong=m) for i, m in marks]
        for gi, f in zip(todo, _fit_groups(copies, refit_groups), strict=True):
            fits[gi] = f
    return [GroupFits(f, w) for f, w in zip(fits, wrong, strict=True)]


def _fit_groups(
    series: list[ErrorSeries], groups: list[list[int]], progress: Progress | None = None,
) -> list[dict[str, AxisFit]]:
    """One batched fit of every axis of every group (the series' wrong marks as given)."""
    problems = [_Problem(a, g) for g in groups for a in range(len(POSE_AXES))]
    theta_start = None
    counts = np.bincount([s for g in groups for s in g], minlength=len(series))
    overlapping = bool(counts.max() > 1)
    # bound the (N, columns) work arrays: fit blocks of problems
    n_sets = 1 + 2 * len(PARAMS) + len(PARAMS) * (len(PARAMS) - 1)
    cost = [n_sets * sum(series[s].n for s in p.sessions) for p in problems]
    blocks, cur, acc = [], [], 0
    for i, c in enumerate(cost):
        if cur and acc + c > _MAX_BLOCK_ELEMENTS:
            blocks.append(cur)
            cur, acc = [], 0
        cur.append(i)
        acc += c
    blocks.append(cur)
    stages = len(blocks) + int(overlapping)
    if overlapping:
        # overlapping groups (leave-one-out): the fit on their union is close to every
        # group's optimum and a much better start than the moments
        union = sorted({s for g in groups for s in g})
        full = _fit_problems(
            series, [_Problem(a, union) for a in range(len(POSE_AXES))],
            progress=_stage(progress, 0, stages),
        )
        theta_start = np.tile(full.theta, (len(groups), 1))
    parts = [
        _fit_problems(
            series, [problems[i] for i in b],
            None if theta_start is None else theta_start[b],
            _stage(progress, k + int(overlapping), stages),
        )
        for k, b in enumerate(blocks)
    ]
    res = _OptResult(
        *(np.concatenate([getattr(r, f) for r in parts]) for f in _OptResult.__dataclass_fields__)
    )
    # tau indistinguishable from white (its lower bound): not identified, as at a bound
    res.at_bound[:, 2] |= np.concatenate([
        _tau_looks_white(series, [problems[i] for i in b], r)
        for b, r in zip(blocks, parts, strict=True)
    ])
    out: list[dict[str, AxisFit]] = []
    n_a = len(POSE_AXES)
    for gi, g in enumerate(groups):
        rows = slice(gi * n_a, (gi + 1) * n_a)
        theta = _restricted_step(
            series, g, res.theta[rows], res.hess[rows], res.at_bound[rows], FD_STEP_LOG
        )
        fits = {}
        for a, name in enumerate(POSE_AXES):
            pi = gi * n_a + a
            cov = _cov_from_hessian(res.hess[pi], res.at_bound[pi])
            values = np.exp(theta[a])
            qp = offset_qprofile([series[s] for s in g], a, *values[1:])
            fits[name] = AxisFit(
                name, *map(float, values), cov, int(sum(series[s].n for s in g)),
                int(sum(series[s].n_segments for s in g)), float(res.nll[pi]),
                bool(res.converged[pi]), qp,
            )
        out.append(fits)
    return out


def _tau_looks_white(
    series: list[ErrorSeries], problems: list[_Problem], fit: _OptResult
) -> np.ndarray:
    """``(P,)`` bool: the likelihood cannot tell ``fit``'s tau_s from its lower bound, at
    which the GM samples are white (:data:`TAU_WHITE_DEVIANCE`): a tau far below the
    sampling period is not identified, whatever the curvature at the optimum says."""
    pinned = _fit_problems(series, problems, fit.theta, white=True)
    return 2.0 * (pinned.nll - fit.nll) < TAU_WHITE_DEVIANCE


def _restricted_step(
    series: list[ErrorSeries], group: list[int], theta: np.ndarray, hess: np.ndarray,
    at_bound: np.ndarray, h: float,
) -> np.ndarray:
    """θ ``(6, 4)`` (log) moved one Newton step towards the restricted (REML) likelihood.

    REML adds ``½ log det(JᵀV(θ)⁻¹J)``, J = ``meta["nuisance_jacobian"]`` ``(N, 6, P)``
    shared within ``meta["nuisance_group"]``; the step is capped at
    :data:`MAX_RESTRICTED_STEP` standard errors; sigma_b is left as fitted."""
    members: dict[str, list[int]] = {}
    for i in group:
        m = series[i].meta
        jac = m.get("nuisance_jacobian")
        if jac is not None and np.shape(jac)[0] == series[i].n:
            members.setdefault(str(m.get("nuisance_group")), []).append(i)
    if not members:
        return theta
    grad = np.zeros_like(theta)
    for sessions in members.values():
        blocks = [
            (spacings(s.t_s), s.reloc, s.wrong, np.asarray(s.meta["nuisance_jacobian"], float))
            for s in (series[i] for i in sessions)
        ]
        per_axis = [_nuisance_info(blocks, np.exp(theta[a]), a) for a in range(len(POSE_AXES))]
        total = sum(per_axis)
        for a in range(len(POSE_AXES)):
            for j in np.flatnonzero(~at_bound[a]):
                ends = []
                for sign in (1.0, -1.0):
                    th = theta[a].copy()
                    th[j] += sign * h
                    sign_det, logdet = np.linalg.slogdet(
                        total - per_axis[a] + _nuisance_info(blocks, np.exp(th), a)
                    )
                    ends.append(logdet if sign_det > 0 else np.nan)
                grad[a, j] += (ends[0] - ends[1]) / (2.0 * h)
    out = theta.copy()
    for a in range(len(POSE_AXES)):
        free = ~at_bound[a] & np.isfinite(grad[a])
        free[0] = False  # sigma_b: from the segments only; its restricted form is its Q-profile
        hf = hess[a][np.ix_(free, free)]
        if free.any() and np.all(np.linalg.eigvalsh(hf) > 0):
            step = np.linalg.solve(hf, 0.5 * grad[a, free])
            se = np.sqrt(np.diag(np.linalg.inv(hf)))
            out[a, free] -= np.clip(step, -MAX_RESTRICTED_STEP * se, MAX_RESTRICTED_STEP * se)
    return out


def _nuisance_info(blocks: list, params: np.ndarray, axis: int) -> np.ndarray:
    """``Σ_sessions J_aᵀ V_a⁻¹ J_a`` of one axis under its parameters ``params`` (4,)."""
    out = 0.0
    for dt, reset, wrong, jac in blocks:
        gains = filter_gains(dt, reset, params[None], wrong)
        w = whiten_columns(np.ascontiguousarray(jac[:, axis, :]), reset, *(x[:, 0] for x in gains))
        out = out + w.T @ w
    return np.asarray(out)


def fit_pose_error(
    series: list[ErrorSeries], sensor: str = "", reference: str = "mocap", frame: str = "",
    inputs: list[dict[str, Any]] | None = None, extra_provenance: dict[str, Any] | None = None,
    progress: Progress | None = None,
) -> PoseErrorModel:
    """Joint ML fit of (sigma_b, sigma, tau, sigma_v) per axis over all sessions."""
    fits = fit_groups(series, [list(range(len(series)))], progress)[0]
    options = {"max_iter": MAX_ITER, "fd_step_log": FD_STEP_LOG, "tol": NEWTON_TOL}
    prov: dict[str, Any] = {"fit_options": options, "sessions": [s.name for s in series]}
    if extra_provenance:
        prov.update(extra_provenance)
    if inputs:
        prov["inputs"] = inputs
    return PoseErrorModel(dict(fits), sensor, reference, frame, prov, fits.wrong.to_dict())
