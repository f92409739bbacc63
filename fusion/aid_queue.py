"""Pose-sensor fixes waiting for the encoder frame the split filters apply them at: a
sample at t (s) after the first frame at or after t, shifted by the odometry's motion
since t, its variance from the pose-error model. :class:`AidQueue` applies it alike
whatever chunks samples and frames arrive in, unless it comes after its frame was
filtered (dropped and counted, ``late``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from sensorbench.errors import FusionError
from sensorbench.fusion.axis_step import AxisAid
from sensorbench.logs.model_keys import AXES


@dataclass(frozen=True)
class AidAxis:
    """Pose-error model of one aided axis: σ_b offset, σ and τ Gauss-Markov, σ_v white."""

    sigma_b: float
    sigma: float
    tau_s: float
    sigma_v: float


@dataclass(frozen=True)
class PoseAidModel:
    """Pose-sensor error per axis (x, y in m; theta in rad) for aiding."""

    x: AidAxis
    y: AidAxis
    theta: AidAxis

    def axis(self, name: str) -> AidAxis:
        """Model of axis ``name``."""
        return getattr(self, name)

    @classmethod
    def from_dict(cls, d: Mapping[str, Mapping[str, float]]) -> PoseAidModel:
        """From ``{"x"|"y"|"theta"|"yaw": {"sigma_b", "sigma", "tau_s", "sigma_v"}}`` (SI)."""
        keys = ("sigma_b", "sigma", "tau_s", "sigma_v")
        try:
            rows = [d[a if a in d or a != "theta" else "yaw"] for a in AXES]
            return cls(*(AidAxis(*(float(t[k]) for k in keys)) for t in rows))
        except KeyError as exc:
            raise FusionError(f"pose-aid model lacks {exc}") from exc


@dataclass
class Aiding:
    """Absolute pose measurements for aiding.

    Attributes:
        t_s: sample times (s), on the encoder time base.
        pose: (M, 3) x, y (m), heading (rad).
        valid: (M,) usable samples (not paused, not invalid).
        relocalized: (M,) True where the sensor reports a relocalization.
    """

    t_s: np.ndarray
    pose: np.ndarray
    valid: np.ndarray
    relocalized: np.ndarray


def usable(aiding: Aiding) -> np.ndarray:
    """(M,) samples that can be applied: valid and with a finite pose."""
    return np.asarray(aiding.valid, bool) & np.all(np.isfinite(aiding.pose), axis=1)


def aid_interval(aiding: Aiding, t0_s: float, t1_s: float) -> float:
    """The pose sensor's period Δt_aid (s) between frame times ``t0_s`` and ``t1_s``: the
    median gap of the usable samples there (1 s with fewer than two)."""
    ta = np.asarray(aiding.t_s, float)
    gaps = np.diff(ta[usable(aiding) & (ta >= t0_s) & (ta <= t1_s)])
    return float(np.median(gaps)) if gaps.size else 1.0


@dataclass(frozen=True)
class AidQueue:
    """Pose samples not applied yet and the numbering of those to come.

    Attributes:
        t0_s: time of the filters' first frame (s); earlier samples are never applied.
        interval_s: the pose sensor's period Δt_aid (s) in the variance model.
        t_s, pose: (P,) times (s) and (P, 3) poses (m, m, rad) of the samples waiting.
        m: (P,) their updates since the last relocalization (1 at one).
        relocalizations: relocalization flags seen so far (of every sample).
        last_segment, last_m: the relocalization count and m of the last sample queued
            (−1, 0 before the first).
        last_t_s: time of the last sample queued (s).
        late: samples dropped because their frame had been filtered before they came.
    """

    t0_s: float
    interval_s: float
    t_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    pose: np.ndarray = field(default_factory=lambda: np.empty((0, 3)))
    m: np.ndarray = field(default_factory=lambda: np.empty(0))
    relocalizations: int = 0
    last_segment: int = -1
    last_m: int = 0
    last_t_s: float = -math.inf
    late: int = 0

    def add(self, aiding: Aiding, filtered_s: float) -> AidQueue:
        """Queue the samples of ``aiding`` (in time order) that can still be applied, the
        filters having filtered the frames up to ``filtered_s`` (s).

        Raises:
            FusionError: usable samples out of time order.
        """
        ta = np.asarray(aiding.t_s, float)
        reloc = np.asarray(aiding.relocalized, bool)
        ok = usable(aiding) & (ta >= self.t0_s)
        seg = self.relocalizations + np.cumsum(reloc)
        times = np.concatenate([[self.last_t_s], ta[ok]])
        if np.any(np.diff(times) < 0):
            bad = int(np.flatnonzero(np.diff(times) < 0)[0])
            raise FusionError(
                f"pose samples must come in time order: t = {times[bad + 1]:.6f} s after "
                f"{times[bad]:.6f} s"
            )
        # m: 1 + the samples queued before in the same relocalization segment
        s = seg[ok]
        i = np.arange(s.size)
        starts = s != np.concatenate([[self.last_segment], s[:-1]])
        first = np.maximum.accumulate(np.where(starts, i, -1))  # −1: the last segment goes on
        m = np.where(first < 0, self.last_m + i + 1, i - first + 1).astype(float)
        last_seg = int(s[-1]) if s.size else self.last_segment
        last_m = int(m[-1]) if s.size else self.last_m
        late = (ta[ok] <= filtered_s) & (filtered_s > self.t0_s)
        keep = ~late
        return replace(
            self,
            t_s=np.concatenate([self.t_s, ta[ok][keep]]),
            pose=np.vstack([self.pose, np.asarray(aiding.pose, float)[ok][keep]]),
            m=np.concatenate([self.m, m[keep]]),
            relocalizations=int(seg[-1]) if seg.size else self.relocalizations,
            last_segment=last_seg,
            last_m=last_m,
            last_t_s=float(times[-1]),
            late=self.late + int(np.count_nonzero(late)),
        )

    def take(
        self, t_s: np.ndarray, odometry: np.ndarray, model: PoseAidModel
    ) -> tuple[AidQueue, dict[str, AxisAid]]:
        """The fixes per axis for the frames ``t_s`` (K+1,) s (index 0 the last frame
        filtered before them) under the pose sensor's error ``model``, and the queue of what
        is left; ``odometry`` (K+1, 3), the odometry path at those frames (m, m, rad
        unwrapped), carries each sample to its frame and unwraps its heading."""
        n = int(np.searchsorted(self.t_s, t_s[-1], side="right")) if t_s.size > 1 else 0
        ta, z, m = self.t_s[:n], self.pose[:n], self.m[:n]
        idx = np.clip(np.searchsorted(t_s, ta, side="left"), 1, t_s.size - 1)
        shift = np.column_stack(
            [odometry[idx, j] - np.interp(ta, t_s, odometry[:, j]) for j in range(3)]
        )
        z = z + shift
        out = {}
        for j, a in enumerate(AXES):
            am = model.axis(a)
            phi = math.exp(-self.interval_s / am.tau_s)
            r = am.sigma_v**2 + am.sigma**2 * (1 + phi) / max(1 - phi, 1e-12) + m * am.sigma_b**2
            zz = z[:, j]
            if a == "theta":
                # bring the absolute heading next to the odometry's unwrapped heading
                ref = odometry[idx, 2]
                zz = ref + (zz - ref + np.pi) % (2 * np.pi) - np.pi
            out[a] = AxisAid(idx, zz, r)
        left = replace(self, t_s=self.t_s[n:], pose=self.pose[n:], m=self.m[n:])
        return left, out
