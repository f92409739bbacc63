"""ATE and RPE of an aligned pose sensor, computed as evo computes them.

On the alignment's pairs: ATE = |R·p_sensor + t − p_ref| per pair (m); RPE (delta in
frames, pairs (0, Δ), (Δ, 2Δ), …) = the error of the sensor's relative pose,
translation (m) and angle (deg), in the sensor's own body frame (B not applied), Δ the
frames closest to :data:`RPE_DELTA_S`. Each with RMSE, mean, median, sd, min and max.
docs/POSE_ERROR.md ("ATE and RPE").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from sensorbench.characterize.pose.align import Alignment, PoseTrack, interpolate
from sensorbench.errors import FitError

RPE_DELTA_S = 1.0
"""The RPE's delta, s: rounded to whole frames of the sensor."""


@dataclass(frozen=True)
class ErrorStats:
    """evo's statistics of one error (its unit stated where it is used)."""

    rmse: float
    mean: float
    median: float
    std: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: np.ndarray) -> ErrorStats:
        """The statistics of ``values`` (all nan when there are none)."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            nan = float("nan")
            return cls(nan, nan, nan, nan, nan, nan, 0)
        return cls(
            float(np.sqrt(np.mean(v * v))), float(np.mean(v)), float(np.median(v)),
            float(np.std(v)), float(np.min(v)), float(np.max(v)), int(v.size),
        )

    def scaled(self, factor: float) -> dict[str, float]:
        """The statistics times ``factor`` (e.g. 1000 for mm), without ``n``."""
        return {k: v * factor for k, v in asdict(self).items() if k != "n"}


@dataclass(frozen=True)
class TrajectoryError:
    """ATE and RPE of one session (docs/POSE_ERROR.md)."""

    ate_m: ErrorStats
    rpe_m: ErrorStats
    rpe_deg: ErrorStats
    rpe_delta_frames: int
    rpe_delta_s: float
    """Median time between the two poses of an RPE pair (s)."""

    def to_dict(self) -> dict:
        """JSON-ready: ATE (m), RPE (m, deg) and the delta, with units in the keys."""
        return {
            "ate_translation_m": asdict(self.ate_m),
            "rpe_translation_m": asdict(self.rpe_m),
            "rpe_rotation_deg": asdict(self.rpe_deg),
            "rpe_delta_frames": self.rpe_delta_frames,
            "rpe_delta_s": self.rpe_delta_s,
            "definition": "evo_ape (translation part, after the alignment) and evo_rpe "
            "(delta in frames, pairs every delta frames; translation part and rotation "
            "angle)",
        }


def trajectory_error(
    sensor: PoseTrack, reference: PoseTrack, alignment: Alignment, max_gap_s: float | None = None,
    rpe_delta_s: float = RPE_DELTA_S,
) -> TrajectoryError:
    """ATE and RPE of ``sensor`` against ``reference`` under ``alignment``.

    Raises:
        FitError: fewer than two pairs.
    """
    sensor = sensor.only_valid()
    pos, quat, inside = interpolate(reference, sensor.t_s + alignment.offset_s, max_gap_s)
    idx = np.flatnonzero(inside)
    if idx.size < 2:
        raise FitError(f"{sensor.name or 'sensor'}: fewer than 2 poses pair with the reference")
    p_est = sensor.position[idx] @ alignment.rotation.T + alignment.translation
    r_est = Rotation.from_matrix(alignment.rotation) * Rotation.from_quat(sensor.quat_xyzw[idx])
    r_est = r_est.as_matrix()
    p_ref, r_ref = pos[idx], Rotation.from_quat(quat[idx]).as_matrix()
    ate = np.linalg.norm(p_est - p_ref, axis=1)
    t = sensor.t_s[idx]
    k = max(1, round(rpe_delta_s / float(np.median(np.diff(t)))))
    k = min(k, idx.size - 1)
    i = np.arange(0, idx.size - k, k)  # evo_rpe's pairs: (0, Δ), (Δ, 2Δ), ...
    j = i + k

    def relative(p: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rt = np.transpose(r[i], (0, 2, 1))
        return np.einsum("nab,nb->na", rt, p[j] - p[i]), rt @ r[j]

    t_ref, q_ref = relative(p_ref, r_ref)
    t_est, q_est = relative(p_est, r_est)
    rpe_t = np.linalg.norm(t_est - t_ref, axis=1)  # |R_ref,relᵀ (t_est − t_ref)|
    rpe_r = np.degrees(Rotation.from_matrix(np.transpose(q_ref, (0, 2, 1)) @ q_est).magnitude())
    return TrajectoryError(
        ErrorStats.of(ate), ErrorStats.of(rpe_t), ErrorStats.of(rpe_r), k,
        float(np.median(t[j] - t[i])),
    )
