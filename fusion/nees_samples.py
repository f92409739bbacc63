"""How many independent samples a replay's mean NEES holds, from the filters' own error
model: ``N_eff = N²/Σ_ij ρ_ij²``, ρ_ij the correlation of the errors at samples i and j
(the calibration, the slip and the start through the dead-reckoning shear, the rest
white; docs/PODS.md § "Is the stated uncertainty honest?"), the double sum over at most
:data:`MAX_SAMPLES` evenly spaced reference samples scaled to all N.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.fusion.odometry_drift import CalibrationError, world_step_variances

MAX_SAMPLES = 400
"""Reference samples the double sum runs over."""


@dataclass(frozen=True)
class SharedErrors:
    """The shared parts of the filters' stated error along one unaided replay.

    Attributes:
        increments: (K, 3) body increments the filters ran on (m, m, rad).
        heading: (K+1,) the heading estimate at each frame (rad), which rotates them.
        var0: the start's variances (x, y, θ).
        step_cov: (K, 3, 3) body covariance of each step's slip (the slip model's), or
            None for the time-based drift ``drift_var``.
        drift_var: (K, 3) per-axis variance each step adds without a slip model.
        calibration: the geometry's fitted uncertainty, or None.
        dt: (K,) step durations (s) its creep terms need (None: 1 s).
    """

    increments: np.ndarray
    heading: np.ndarray
    var0: tuple[float, float, float]
    step_cov: np.ndarray | None = None
    drift_var: np.ndarray | None = None
    calibration: CalibrationError | None = None
    dt: np.ndarray | None = None

    def covariances(self, frames: np.ndarray) -> np.ndarray:
        """(3, n, n) covariance of the x, y, θ errors at frame indices ``frames``
        (non-decreasing, 0..K) from the slip, the start and the calibration."""
        f = np.asarray(frames, dtype=np.int64)
        out = self._walk(f)
        if self.calibration is not None:
            j = self.calibration.sensitivities_at(self.increments, self.heading, f, self.dt)
            sig = self.calibration.cov
            for a in range(3):
                out[a] += (j[:, a] @ sig) @ j[:, a].T
        return out

    def _walk(self, f: np.ndarray) -> np.ndarray:
        inc = np.nan_to_num(np.asarray(self.increments, dtype=float))
        k_n = inc.shape[0]
        earlier = np.minimum.outer(f, f)
        if self.step_cov is None:
            dv = np.zeros((k_n, 3)) if self.drift_var is None else np.asarray(self.drift_var)
            total = np.vstack([np.asarray(self.var0, float)[None, :], dv])
            cum = np.cumsum(total, axis=0)  # cum[m]: the start and the first m steps
            return np.stack([cum[earlier, a] for a in range(3)])
        th = np.asarray(self.heading, dtype=float)
        c, s = np.cos(th[:-1]), np.sin(th[:-1])
        xw = np.concatenate([[0.0], np.cumsum(c * inc[:, 0] - s * inc[:, 1])])
        yw = np.concatenate([[0.0], np.cumsum(s * inc[:, 0] + c * inc[:, 1])])
        q = np.asarray(self.step_cov, dtype=float)
        world = world_step_variances(q, th[:-1])
        steps = [world["x"], world["y"], world["theta"], c * q[:, 0, 2] - s * q[:, 1, 2],
                 s * q[:, 0, 2] + c * q[:, 1, 2]]  # fmt: skip
        # the start as a step before the first (its θ shears from frame 0 on)
        start = [*np.asarray(self.var0, dtype=float), 0.0, 0.0]
        qxx, qyy, qtt, qxt, qyt = np.vstack([start, np.column_stack(steps)]).T

        def upto(x: np.ndarray) -> np.ndarray:
            return np.cumsum(x)[earlier]  # the start and the steps before the earlier frame

        x0 = upto(qxx + 2 * yw * qxt + yw**2 * qtt)
        x1 = upto(qxt + yw * qtt)
        y0 = upto(qyy - 2 * xw * qyt + xw**2 * qtt)
        y1 = upto(qyt - xw * qtt)
        t0 = upto(qtt)
        yi, xi = yw[f], xw[f]
        cxx = x0 - np.add.outer(yi, yi) * x1 + np.outer(yi, yi) * t0
        cyy = y0 + np.add.outer(xi, xi) * y1 + np.outer(xi, xi) * t0
        return np.stack([cxx, cyy, t0])


def model_effective_samples(
    shared: SharedErrors, frames: np.ndarray, variance: np.ndarray
) -> np.ndarray:
    """N_eff (3,) of the mean NEES of x, y, θ over N reference samples.

    Args:
        shared: the shared parts of the stated error.
        frames: (N,) the frame index (0..K) nearest each reference sample, non-decreasing.
        variance: (N, 3) the variance the NEES divides by at each sample (the stated
            variance plus the reference's noise).
    """
    f = np.asarray(frames, dtype=np.int64)
    v = np.asarray(variance, dtype=float)
    n = f.size
    pick = np.unique(np.linspace(0, n - 1, min(n, MAX_SAMPLES)).round().astype(np.int64))
    cov = shared.covariances(f[pick])
    out = np.empty(3)
    m = pick.size
    pairs = n * (n - 1) / max(m * (m - 1), 1)  # all pairs i ≠ j per pair of the subsample
    for a in range(3):
        vs = v[pick, a]
        rho = cov[a] / np.sqrt(np.outer(vs, vs))
        # i ≠ j: the shared part alone (the white part is independent); i = j: ρ_ii = 1
        off = float(np.sum(rho**2) - np.sum(np.diag(rho) ** 2))
        out[a] = min(float(n), max(1.0, n * n / (n + off * pairs)))
    return out
