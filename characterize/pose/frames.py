"""Are all sessions of a campaign in the same map? The session-level frame check
(``FRAME``): F test against the within-session segment means, or leave-one-out χ²₆ under
the noise model. docs/POSE_ERROR.md ("The verdict")."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import chi2
from scipy.stats import f as f_dist

from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries

FRAME_ALPHA = 0.01
"""Level of the frame check over all sessions (Bonferroni)."""
MIN_DOF = 3
"""Fewest within-session degrees of freedom for the segment-mean variance."""


@dataclass
class FrameCheck:
    """Per session: its mean error against what the offsets may explain.

    ``method``: the within-session segment-mean spread (F test, ``dof`` = ν), or the
    leave-one-out form against the noise model (χ² test, ``dof`` = 6)."""

    sessions: list[str]
    statistic: np.ndarray  # (S,) X_i
    p_value: np.ndarray  # (S,)
    mean_error: np.ndarray  # (S, 6) unit
    allowed_sd: np.ndarray  # (S, 6) sqrt(V̂ c_i), unit
    dof: int
    level: float  # per-session level α / S
    excluded: list[str] = field(default_factory=list)  # removed one by one (worst first)
    own_alignment: dict[str, dict] = field(default_factory=dict)
    method: str = "within-session segment means"

    @property
    def testable(self) -> bool:
        """Enough degrees of freedom for the allowance, and at least 2 sessions."""
        return self.dof >= MIN_DOF and len(self.sessions) + len(self.excluded) >= 2

    def failed_sessions(self) -> list[str]:
        """Sessions not in the campaign's map: those excluded, and any still failing."""
        still = [s for s, p in zip(self.sessions, self.p_value, strict=True) if p < self.level]
        return [*self.excluded, *(still if self.testable else [])]

    def reason(self, name: str) -> str:
        """Why session ``name`` fails the frame check."""
        extra = self.own_alignment.get(name, {})
        own = ""
        if extra:
            own = (
                f"; its own alignment differs from the campaign's by "
                f"{1000 * extra['translation_m']:.0f} mm and {extra['rotation_deg']:.2f} deg"
            )
        return f"session {name} is not in the same map{own}"

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "testable": self.testable,
            "method": self.method,
            "dof": self.dof,
            "level_per_session": self.level,
            "excluded": list(self.excluded),
            "failed_sessions": self.failed_sessions(),
            "sessions": {
                n: {
                    "statistic": float(self.statistic[i]),
                    "p_value": float(self.p_value[i]),
                    "mean_error": dict(zip(POSE_AXES, self.mean_error[i].tolist(), strict=True)),
                    "allowed_sd": dict(zip(POSE_AXES, self.allowed_sd[i].tolist(), strict=True)),
                }
                for i, n in enumerate(self.sessions)
            },
            "own_alignment": self.own_alignment,
        }


def frame_statistics(
    series: list[ErrorSeries], alpha: float = FRAME_ALPHA, n_total: int | None = None
) -> FrameCheck:
    """Frame check of sessions aligned with one shared transform (docs/POSE_ERROR.md, FRAME).

    ``n_total``: number of sessions in the campaign for the Bonferroni level (default:
    ``len(series)``; sessions already excluded still count)."""
    sess_means, c, dev2, dof = [], [], np.zeros(6), 0
    for s in series:
        starts = np.flatnonzero(s.reloc)
        n = np.diff(starts, append=s.n).astype(float)
        means = np.add.reduceat(s.error, starts, axis=0) / n[:, None]
        w = n / n.sum()
        sess_means.append(w @ means)
        c.append(float(np.sum(w * w)))
        dev2 += np.sum((means - means.mean(axis=0)) ** 2, axis=0)
        dof += n.size - 1
    m = np.array(sess_means)
    c_arr = np.array(c)
    v = dev2 / dof if dof > 0 else np.full(6, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        allowed = np.sqrt(v[None, :] * c_arr[:, None])
        x = np.sum((m / allowed) ** 2, axis=1)
    p = f_dist.sf(x / 6.0, 6, max(dof, 1)) if dof > 0 else np.full(len(series), np.nan)
    level = alpha / (n_total or len(series))
    return FrameCheck([s.name for s in series], x, np.asarray(p, float), m, allowed, dof, level)


def mean_variance(series: ErrorSeries, params: np.ndarray) -> np.ndarray:
    """``(6,)`` variance of a session's mean error under the model ``params`` (6, 4).

    ``σ_b² Σ_s w_s² + (σ²/n²)(n + 2 Σ_{j<k} e^{−(t_k − t_j)/τ}) + σ_v²/n``; the double
    sum by the recursion ``S_k = e^{−Δt_k/τ}(S_{k−1} + 1)`` (O(n))."""
    n = series.n
    w = np.bincount(series.segment_id) / n
    phi = np.exp(-np.diff(series.t_s)[:, None] / params[None, :, 2])
    acc = np.zeros(6)
    pair = np.zeros(6)
    for f in phi:
        acc = f * (acc + 1.0)
        pair += acc
    gm = params[:, 1] ** 2 * (n + 2.0 * pair) / n**2
    return params[:, 0] ** 2 * np.sum(w * w) + gm + params[:, 3] ** 2 / n


def loo_frame_statistics(
    held_out: list[ErrorSeries], allowed_var: np.ndarray, alpha: float = FRAME_ALPHA,
    n_total: int | None = None,
) -> FrameCheck:
    """Leave-one-out frame check (docs/POSE_ERROR.md, FRAME).

    ``held_out[i]``: session i under the alignment fitted to the others;
    ``allowed_var``: ``(S, 6)`` the variance its mean may have (:func:`mean_variance`
    inflated for the others' alignment error)."""
    n = len(held_out)
    m = np.array([s.error.mean(axis=0) for s in held_out])  # (S, 6) session means
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.sum(m**2 / allowed_var, axis=1)
    # dof 6 (χ²₆): the allowance is the model's, not estimated from within sessions
    return FrameCheck(
        [s.name for s in held_out], x, np.asarray(chi2.sf(x, 6), float), m, np.sqrt(allowed_var),
        6, alpha / (n_total or n), method="leave-one-out session means against the noise model",
    )
