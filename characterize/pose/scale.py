"""Scale of a pose sensor's positions against the reference, independent of the noise model:
a similarity transform (Sim(3); planar: Sim(2)) beside the SE(3) one, its 95 % interval
from batch means (verdict ``SCALE``). docs/POSE_ERROR.md ("The verdict")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from sensorbench.characterize.pose.align import planar_fit, umeyama
from sensorbench.errors import FitError

N_BLOCKS = 20
"""Target number of batch-means blocks over the campaign."""
MIN_BLOCK_S = 2.0
"""Shortest block, s."""
MIN_BLOCKS = 5
"""Fewer blocks than this: the scale's interval is not stated (not testable)."""
SCALE_TOLERANCE = 0.005
"""Default tolerance on |s − 1| beyond the interval (0.5 %)."""


def similarity_fit(
    src: np.ndarray, dst: np.ndarray, planar: bool = False
) -> tuple[float, np.ndarray, np.ndarray]:
    """``(s, R (3,3), t (3,))`` with ``dst ≈ s R src + t`` (Sim(3); Sim(2) if planar).

    R is the rigid fit's (Umeyama's, yaw only when planar); s is the regression of ``src``
    on ``dst`` (``Σ|b|² / Σ<R a, b>``, centred, x-y only when planar; docs/POSE_ERROR.md, SCALE);
    ``t = μ_dst − s R μ_src``."""
    mu_s, mu_d = src.mean(axis=0), dst.mean(axis=0)
    rot, _ = (planar_fit if planar else umeyama)(src, dst)
    ap, bp = _plane(src - mu_s, planar), _plane(dst - mu_d, planar)
    den = float(np.sum((ap @ _plane_rot(rot, planar).T) * bp))
    s = float(np.sum(bp * bp) / den) if den > 0 else float("nan")
    return s, rot, mu_d - s * rot @ mu_s


@dataclass
class ScaleCheck:
    """Similarity scale with its batch-means interval, and the SE(3)/Sim residuals."""

    scale: float
    ci95: tuple[float, float]
    se: float
    n_blocks: int
    block_s: float
    tolerance: float
    planar: bool
    residual_rigid_m: float
    residual_similarity_m: float
    session_scales: dict[str, float]

    @property
    def testable(self) -> bool:
        """Enough blocks for an interval."""
        return self.n_blocks >= MIN_BLOCKS and np.isfinite(self.se)

    @property
    def failed(self) -> bool:
        """True when the interval excludes 1 by more than the tolerance."""
        lo, hi = self.ci95
        return self.testable and (lo > 1.0 + self.tolerance or hi < 1.0 - self.tolerance)

    def reason(self) -> str:
        """Why the scale fails (empty when it does not)."""
        if not self.failed:
            return ""
        return (
            f"position scale {self.scale:.4f} (95 % interval {self.ci95[0]:.4f}–"
            f"{self.ci95[1]:.4f}) excludes 1 by more than {100 * self.tolerance:.2g} %: the "
            f"sensor's distances are {100 * (1 / self.scale - 1):+.2f} % off "
            f"(RMS residual {1000 * self.residual_rigid_m:.1f} mm rigid, "
            f"{1000 * self.residual_similarity_m:.1f} mm with scale)"
        )

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            "scale": self.scale,
            "ci95": list(self.ci95),
            "se": self.se,
            "interval_method": "batch means over contiguous time blocks, Student t",
            "n_blocks": self.n_blocks,
            "block_s": self.block_s,
            "tolerance": self.tolerance,
            "alignment": "sim2" if self.planar else "sim3",
            "residual_rigid_m": self.residual_rigid_m,
            "residual_similarity_m": self.residual_similarity_m,
            "session_scales": self.session_scales,
            "testable": self.testable,
            "failed": self.failed,
            "reason": self.reason(),
        }


def _residual(src: np.ndarray, dst: np.ndarray, s: float, rot: np.ndarray, t: np.ndarray) -> float:
    d = s * src @ rot.T + t - dst
    return float(np.sqrt(np.mean(np.sum(d * d, axis=1))))


def scale_check(
    sessions: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]], planar: bool = False,
    per_session: bool = False, tolerance: float = SCALE_TOLERANCE,
) -> ScaleCheck:
    """Scale of the sensor's positions against the reference, with its 95 % interval.

    ``sessions``: ``(name, t_s (N,), sensor positions (N, 3) in the sensor's frame,
    reference positions (N, 3))`` of associated samples. One similarity transform for
    all sessions (``per_session`` False: they share the sensor's map), or one rotation
    and translation per session with a common scale."""
    if not sessions:
        raise FitError("no sessions for the scale check")
    groups = [[i] for i in range(len(sessions))] if per_session else [list(range(len(sessions)))]
    num = den = rigid = 0.0
    rots, centres = {}, {}
    for g in groups:
        src = np.concatenate([sessions[i][2] for i in g])
        dst = np.concatenate([sessions[i][3] for i in g])
        rot, t_rigid = (planar_fit if planar else umeyama)(src, dst)
        rigid += _residual(src, dst, 1.0, rot, t_rigid) ** 2 * src.shape[0]
        mu_s, mu_d = src.mean(axis=0), dst.mean(axis=0)
        a, b = _plane(src - mu_s, planar), _plane(dst - mu_d, planar)
        num += float(np.sum(b * b))
        den += float(np.sum((a @ _plane_rot(rot, planar).T) * b))
        for i in g:
            rots[i], centres[i] = rot, (mu_s, mu_d)
    scale = num / den if den > 0 else float("nan")
    total = sum(float(x[1][-1] - x[1][0]) for x in sessions)
    block = max(total / N_BLOCKS, MIN_BLOCK_S)
    sums, sim, n_all = [], 0.0, 0
    session_scales = {}
    for i, (name, t, src, dst) in enumerate(sessions):
        mu_s, mu_d = centres[i]
        rot = _plane_rot(rots[i], planar)
        a, b = _plane(src - mu_s, planar), _plane(dst - mu_d, planar)
        u = (np.sum(b * b, axis=1) - scale * np.sum((a @ rot.T) * b, axis=1)) / den
        k = max(1, round((t[-1] - t[0]) / block))
        idx = np.minimum(((t - t[0]) / max(t[-1] - t[0], 1e-12) * k).astype(int), k - 1)
        sums.append(np.bincount(idx, u, k))
        session_scales[name] = similarity_fit(src, dst, planar)[0]
        full = rots[i]
        t_sim = mu_d - scale * full @ mu_s
        sim += _residual(src, dst, scale, full, t_sim) ** 2 * src.shape[0]
        n_all += src.shape[0]
    u_blocks = np.concatenate(sums)
    k = u_blocks.size
    if k >= 2:
        se = float(np.sqrt(k / (k - 1) * np.sum(u_blocks**2)))
        half = float(student_t.ppf(0.975, k - 1)) * se
    else:
        se = half = float("nan")
    return ScaleCheck(
        scale, (scale - half, scale + half), se, k, block, tolerance, planar,
        float(np.sqrt(rigid / n_all)), float(np.sqrt(sim / n_all)), session_scales,
    )


def _plane(x: np.ndarray, planar: bool) -> np.ndarray:
    return x[:, :2] if planar else x


def _plane_rot(rot: np.ndarray, planar: bool) -> np.ndarray:
    return rot[:2, :2] if planar else rot
