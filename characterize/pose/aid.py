"""The pose-error model (``sensorbench fit pose-error``) as the split filter's aiding model."""

from __future__ import annotations

import os

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.fusion.aid_queue import PoseAidModel


def load_pose_aid_model(path: str | os.PathLike[str]) -> PoseAidModel:
    """Read the pose-error model file written by ``sensorbench fit pose-error``.

    Raises:
        ModelFileError: the file is not a usable pose-error model.
    """
    model = PoseErrorModel.load(path)
    return PoseAidModel.from_dict(
        {
            a: {
                "sigma_b": model.axes[src].sigma_b,
                "sigma": model.axes[src].sigma,
                "tau_s": model.axes[src].tau_s,
                "sigma_v": model.axes[src].sigma_v,
            }
            for a, src in (("x", "x"), ("y", "y"), ("theta", "yaw"))
        }
    )
