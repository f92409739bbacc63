"""The keys each kind of model file may hold, and the check that refuses any other.

A misspelt key in a TOML file is otherwise silently ignored (the loader takes its
default); every loader of a model file checks the whole document against its
schema here and names the first unknown key with the file. ``[provenance]``,
``[fit]`` and ``[report]`` are free-form records nothing reads back.

A schema maps each known key to ``None`` (any value: a free-form table or a
scalar), to a value rule (``(test, what it must be)``: a value of the wrong type,
such as ``q = "0.001"`` or ``distance_per_tick = true``, is refused by
:func:`wrong_value`), to a nested schema (a table whose keys are checked in turn) or
to a one-element list holding the schema of each table of an array of tables
(``[[pod]]``). Ranges are the loaders' own checks (``q`` > 0, ``tau_s`` > 0, ...).
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


def _is_real(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


REAL = (_is_real, "a number")
SIGMA = (lambda v: _is_real(v) and not v < 0, "a number ≥ 0 (or nan: not identified)")
COUNT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer ≥ 0")
FLAG = (lambda v: isinstance(v, bool), "true or false")
TEXT = (lambda v: isinstance(v, str), "text")
REALS = (lambda v: isinstance(v, list) and all(map(_is_real, v)), "a list of numbers")

_ENVELOPE: dict[str, Any] = {
    "model": dict.fromkeys(("kind", "format_version", "software", "created_utc")),
    "units": None,
    "provenance": None,
}

def _units(*quantities: str) -> dict[str, Any]:
    """A ``[units]`` table of these quantities: a misspelt one is an unknown key."""
    return {"units": dict.fromkeys(quantities, TEXT)}


POD_GEOMETRY_KEYS: dict[str, Any] = {
    **_ENVELOPE,
    **_units("distance_per_tick", "rolling_angle", "lever_arm", "wheel_radius", "time_offset"),
    "fit": None,
    "pod": [
        {
            "name": TEXT,
            **dict.fromkeys(
                ("distance_per_tick", "rolling_angle", "lever_arm", "counts_per_rev"), REAL
            ),
            "wheel_radius": REAL,
            **dict.fromkeys(
                (
                    "sigma_distance_per_tick",
                    "sigma_rolling_angle",
                    "sigma_lever_arm",
                    "sigma_wheel_radius",
                    "residual_sigma_ticks",
                ),
                SIGMA,
            ),
            "outlier_intervals": COUNT,
            "status": None,
        }
    ],
    "calibration": dict.fromkeys(("units", "row_covariance")),
    "slip": None,
}
"""``pod_geometry`` files (``fit pods -o``)."""

FILTER_NOISE_KEYS: dict[str, Any] = {
    **_ENVELOPE,
    **_units("q_xy", "q_theta", "r_xy", "r_theta"),
    "axes": {
        a: {
            **dict.fromkeys(
                ("q", "r", "dof", "q_acc", "q_jerk", "slip_scale", "drag_scale", "nis_se"), REAL
            ),
            "stamp_var": REAL,
            "feedforward": FLAG,
        }
        for a in AXES
    },
    "drift": {
        "units": None,
        **{a: dict.fromkeys(("per_m_x", "per_m_y", "per_rad"), REAL) for a in AXES},
    },
    "filter": None,
    "reach": dict.fromkeys(("units", "speed", "strafe", "turn", "speed_turn")),
    "report": None,
}
"""``filter_noise`` files (``fit noise -o``)."""

_POSE_AXIS = {
    "unit": TEXT,
    **dict.fromkeys(("sigma_b", "sigma", "tau_s", "sigma_v", "neg_log_likelihood"), REAL),
    **dict.fromkeys(("n_samples", "n_segments"), COUNT),
    "converged": FLAG,
    **dict.fromkeys(("se_log", "identified", "ci95")),
    "cov_log": REALS,
    "sigma_b_qprofile": dict.fromkeys(
        ("seg_var", "seg_proj2", "seg_proj", "seg_ones", "seg_group")
    ),
}
POSE_ERROR_KEYS: dict[str, Any] = {
    **_ENVELOPE,
    **_units("length", "angle", "time"),
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


def wrong_value(doc: Mapping[str, Any], schema: Mapping[str, Any], prefix: str = "") -> str | None:
    """``'name' = value is not what it must be`` for the first value of ``doc`` that
    breaks its rule in ``schema`` (a tuple leaf), or is no table (array of tables) where
    the schema has one, or repeats a ``name`` in an array of tables; None when every
    value keeps its rule."""
    for key, value in doc.items():
        name, sub = f"{prefix}{key}", schema.get(key)
        if isinstance(sub, tuple) and not sub[0](value):
            return f"{name!r} = {value!r} is not {sub[1]}"
        items: list[tuple[str, Any, Any]] = []
        if isinstance(sub, Mapping):
            items = [(name, value, sub)]
        elif isinstance(sub, list):
            if not isinstance(value, list):
                return f"{name!r} = {value!r} is not an array of tables ([[{key}]])"
            items = [(f"{name}[{i}]", v, sub[0]) for i, v in enumerate(value)]
            names = [repr(v["name"]) for v in value if isinstance(v, Mapping) and "name" in v]
            if dup := next((n for i, n in enumerate(names) if n in names[:i]), None):
                return f"two [[{key}]] tables are named {dup} (names must be unique)"
        for where, table, rules in items:
            if not isinstance(table, Mapping):
                return f"{where!r} = {table!r} is not a table"
            found = wrong_value(table, rules, f"{where}.")
            if found:
                return found
    return None
