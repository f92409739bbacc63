"""evo (the trajectory-evaluation package) as an independent peer for ATE and RPE.

Given a ground-truth and an estimate TUM file and a time offset, the pairs are built
here without sensorbench: each estimate sample with the ground truth interpolated at
its time + offset (position linearly, rotation by scipy's Slerp), samples whose
bracketing ground-truth samples are further apart than the gap limit left out. evo
then computes its APE (translation part, after its own SE(3) Umeyama alignment) and
RPE (delta in frames) on them; :func:`evo_associated_ate` lets evo associate the raw
files itself (nearest stamps within 10 ms) with the same offset.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation, Slerp

evo_metrics = pytest.importorskip("evo.core.metrics")
from evo.core import sync  # noqa: E402
from evo.core.trajectory import PoseTrajectory3D  # noqa: E402
from evo.tools import file_interface  # noqa: E402


def _wxyz(q: np.ndarray) -> np.ndarray:
    return q[:, [3, 0, 1, 2]]


def tum_rows(path: Path) -> np.ndarray:
    """The numeric rows of a TUM file (t, x, y, z, qx, qy, qz, qw)."""
    return np.loadtxt(path, comments="#").reshape(-1, 8)


def pairs(
    gt: np.ndarray, est: np.ndarray, offset_s: float, gap_spacings: float = 3.0
) -> tuple[PoseTrajectory3D, PoseTrajectory3D]:
    """(reference, estimate) trajectories of the interpolated pairs (see the module)."""
    t_gt, t_est = gt[:, 0], est[:, 0] + offset_s
    limit = gap_spacings * np.median(np.diff(t_gt))
    j = np.clip(np.searchsorted(t_gt, t_est), 1, t_gt.size - 1)
    keep = (t_est >= t_gt[0]) & (t_est <= t_gt[-1]) & (t_gt[j] - t_gt[j - 1] <= limit)
    tq = t_est[keep]
    pos = np.column_stack([np.interp(tq, t_gt, gt[:, k]) for k in (1, 2, 3)])
    quat = Slerp(t_gt, Rotation.from_quat(gt[:, 4:8]))(tq).as_quat()
    ref = PoseTrajectory3D(pos, _wxyz(quat), tq)
    e = est[keep]
    return ref, PoseTrajectory3D(
        e[:, 1:4], _wxyz(e[:, 4:8] / np.linalg.norm(e[:, 4:8], axis=1)[:, None]), tq
    )


def ape(ref: PoseTrajectory3D, est: PoseTrajectory3D) -> dict:
    """evo_ape --align, translation part: rmse, mean, median, std, min, max (m)."""
    aligned = copy.deepcopy(est)
    aligned.align(ref)
    metric = evo_metrics.APE(evo_metrics.PoseRelation.translation_part)
    metric.process_data((ref, aligned))
    return metric.get_all_statistics()


def rpe(ref: PoseTrajectory3D, est: PoseTrajectory3D, delta_frames: int) -> tuple[dict, dict]:
    """evo_rpe (delta in frames, its default pairs): translation (m) and angle (deg)."""
    out = []
    for relation in (
        evo_metrics.PoseRelation.translation_part,
        evo_metrics.PoseRelation.rotation_angle_deg,
    ):
        metric = evo_metrics.RPE(relation, delta_frames, evo_metrics.Unit.frames, all_pairs=False)
        metric.process_data((ref, est))
        out.append(metric.get_all_statistics())
    return out[0], out[1]


def evo_associated_ate(gt_path: Path, est_path: Path, offset_s: float) -> dict:
    """evo's whole pipeline on the raw files: associate (10 ms), align, APE (m)."""
    ref = file_interface.read_tum_trajectory_file(str(gt_path))
    est = file_interface.read_tum_trajectory_file(str(est_path))
    ref, est = sync.associate_trajectories(ref, est, max_diff=0.01, offset_2=offset_s)
    return ape(ref, est)
