"""The keys each kind of model file may hold, and the check that refuses any other.

A misspelt key in a TOML file is otherwise silently ignored (the loader takes its
default); every loader of a model file checks the whole document against its
schema here and names the first unknown key with the file. ``[provenance]``,
``[fit]`` and ``[report]`` are free-form records nothing reads back.

A schema maps each known key to ``None`` (any value: a free-form table or a
scalar), to a nested schema (a table whose keys are checked in turn) or to a
one-element list holding the schema of each table of an array of tables
(``[[pod]]``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

AXES: tuple[str, ...] = ("x", "y", "theta")
"""The filters' axes in the robot frame, in column order everywhere (x forward m,
y left m, theta counter-clockwise rad): the split filters, the pod geometry's
columns, the drift terms, the aiding fixes and the ``filter_noise`` file's tables.
docs/PODS.md ("Adding an axis") says what else an added axis needs."""

POSE_AXES: tuple[str, ...] = ("x", "y", "z", "roll", "pitch", "yaw")
"""A pose's axes (m, m, m, rad, rad, rad), in column order of every ``(N, 6)`` pose or
pose-error array and of the ``pose_error`` file's tables."""


_ENVELOPE: dict[str, Any] = {
    "model": dict.fromkeys(("kind", "format_version", "software", "created_utc")),
    "units": None,
    "provenance": None,
}

POD_GEOMETRY_KEYS: dict[str, Any] = {
    **_ENVELOPE,
    "fit": None,
    "pod": [
        dict.fromkeys(
            (
                "name",
                "distance_per_tick",
                "rolling_angle",
                "lever_arm",
                "counts_per_rev",
                "wheel_radius",
                "sigma_distance_per_tick",
                "sigma_rolling_angle",
                "sigma_lever_arm",
                "sigma_wheel_radius",
                "outlier_intervals",
                "residual_sigma_ticks",
                "status",
            )
        )
    ],
    "calibration": dict.fromkeys(("units", "row_covariance")),
    "slip": None,
}
"""``pod_geometry`` files (``fit pods -o``)."""

FILTER_NOISE_KEYS: dict[str, Any] = {
    **_ENVELOPE,
    "axes": {
        a: dict.fromkeys(
            (
                "q",
                "r",
                "dof",
                "q_acc",
                "q_jerk",
                "slip_scale",
                "drag_scale",
                "feedforward",
                "nis_se",
                "stamp_var",
            )
        )
        for a in AXES
    },
    "drift": {
        "units": None,
        **{a: dict.fromkeys(("per_m_x", "per_m_y", "per_rad")) for a in AXES},
    },
    "filter": None,
    "reach": dict.fromkeys(("units", "speed", "strafe", "turn", "speed_turn")),
    "report": None,
}
"""``filter_noise`` files (``fit noise -o``)."""

_POSE_AXIS = {
    **dict.fromkeys(
        (
            "unit",
            "sigma_b",
            "sigma",
            "tau_s",
            "sigma_v",
            "n_samples",
            "n_segments",
            "neg_log_likelihood",
            "converged",
            "se_log",
            "identified",
            "ci95",
            "cov_log",
        )
    ),
    "sigma_b_qprofile": dict.fromkeys(
        ("seg_var", "seg_proj2", "seg_proj", "seg_ones", "seg_group")
    ),
}
POSE_ERROR_KEYS: dict[str, Any] = {
    **_ENVELOPE,
    "model": dict.fromkeys(
        (
            "kind",
            "format_version",
            "software",
            "created_utc",
            "sensor",
            "reference",
            "frame",
            "description",
        )
    ),
    "axes": {a: _POSE_AXIS for a in POSE_AXES},
    "wrong_relocalizations": dict.fromkeys(
        ("n_relocalizations", "n_wrong", "rate", "rate_ci95", "median_jump_m")
    )
    | {"named": [dict.fromkeys(("session", "t_s", "jump"))]},
}
"""``pose_error_gm`` files (``fit pose-error -o``)."""


def unknown_key(doc: Mapping[str, Any], schema: Mapping[str, Any], prefix: str = "") -> str | None:
    """The dotted name of the first key of ``doc`` that ``schema`` does not know, or None."""
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if key not in schema:
            return name
        sub = schema[key]
        found = None
        if isinstance(sub, Mapping) and isinstance(value, Mapping):
            found = unknown_key(value, sub, f"{name}.")
        elif isinstance(sub, list) and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, Mapping):
                    found = unknown_key(item, sub[0], f"{name}[{i}].")
                    if found:
                        break
        if found:
            return found
    return None
