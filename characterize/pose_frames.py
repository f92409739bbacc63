"""Are all sessions of a campaign in the same map? A session-level frame check.

With one alignment for the whole campaign (the right choice for a sensor that
relocalizes into one map), a session recorded in another map shows a constant offset
over all of its relocalization segments. σ_b would absorb it (metres of "offset
spread"), so it is tested on its own (verdict ``FRAME``).

The test needs no fitted noise model. Under the model each relocalization segment's
mean error ``ē_s`` is ``b_s`` plus the segment's noise mean, independent across
segments; a session's mean error ``m_i = Σ_s w_s ē_s`` (``w_s`` = the segment's share
of the session's samples) has variance ``V c_i`` with ``c_i = Σ_s w_s²``, where V, the
variance of a segment mean, is estimated per axis from the spread of segment means
*within* sessions (about each session's mean of segment means, ``ν = Σ_i (k_i − 1)``
degrees of freedom) — a frame shift common to a session cancels there. Then
``X_i = Σ_axes m_{i,a}² / (V̂_a c_i)``, and ``X_i / 6`` is compared with F(6, ν)
(axes taken as independent). A session fails when its p-value is below α / S
(Bonferroni over the S sessions; α = :data:`FRAME_ALPHA`).

Because the shifted session also pulls the shared alignment (every other session then
carries a share of its offset), :func:`pose_sessions.prepare_campaign` removes the
worst failing session, re-aligns the rest and tests again, until none fails. Not
testable when ν < :data:`MIN_DOF` (sessions with a single segment each cannot tell a
map change from an offset drawn at the session's start) or with fewer than 2
sessions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import f as f_dist

from sensorbench.characterize.pose_series import AXES, ErrorSeries

FRAME_ALPHA = 0.01
"""Level of the frame check over all sessions (Bonferroni)."""
MIN_DOF = 3
"""Fewest within-session degrees of freedom for the segment-mean variance."""


@dataclass
class FrameCheck:
    """Per session: its mean error against what within-session offsets allow."""

    sessions: list[str]
    statistic: np.ndarray  # (S,) X_i
    p_value: np.ndarray  # (S,)
    mean_error: np.ndarray  # (S, 6) unit
    allowed_sd: np.ndarray  # (S, 6) sqrt(V̂ c_i), unit
    dof: int
    level: float  # per-session level α / S
    excluded: list[str] = field(default_factory=list)  # removed one by one (worst first)
    own_alignment: dict[str, dict] = field(default_factory=dict)

    @property
    def testable(self) -> bool:
        """Enough within-session segments and at least 2 sessions (after the exclusions)."""
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
            "dof": self.dof,
            "level_per_session": self.level,
            "excluded": list(self.excluded),
            "failed_sessions": self.failed_sessions(),
            "sessions": {
                n: {
                    "statistic": float(self.statistic[i]),
                    "p_value": float(self.p_value[i]),
                    "mean_error": dict(zip(AXES, self.mean_error[i].tolist(), strict=True)),
                    "allowed_sd": dict(zip(AXES, self.allowed_sd[i].tolist(), strict=True)),
                }
                for i, n in enumerate(self.sessions)
            },
            "own_alignment": self.own_alignment,
        }


def frame_statistics(
    series: list[ErrorSeries], alpha: float = FRAME_ALPHA, n_total: int | None = None
) -> FrameCheck:
    """Frame check of sessions aligned with one shared transform (see module docstring).

    ``n_total``: number of sessions in the campaign for the Bonferroni level (default:
    ``len(series)``; sessions already excluded still count).
    """
    sess_means, c, dev2, dof = [], [], np.zeros(6), 0
    for s in series:
        seg = s.segment_id
        k = int(seg[-1]) + 1
        n = np.bincount(seg, minlength=k).astype(float)
        means = (
            np.stack([np.bincount(seg, s.error[:, i], k) for i in range(6)], axis=1) / n[:, None]
        )
        w = n / n.sum()
        sess_means.append(w @ means)
        c.append(float(np.sum(w * w)))
        dev2 += np.sum((means - means.mean(axis=0)) ** 2, axis=0)
        dof += k - 1
    m = np.array(sess_means)
    c_arr = np.array(c)
    v = dev2 / dof if dof > 0 else np.full(6, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        allowed = np.sqrt(v[None, :] * c_arr[:, None])
        x = np.sum((m / allowed) ** 2, axis=1)
    p = f_dist.sf(x / 6.0, 6, max(dof, 1)) if dof > 0 else np.full(len(series), np.nan)
    level = alpha / (n_total or len(series))
    return FrameCheck([s.name for s in series], x, np.asarray(p, float), m, allowed, dof, level)
