"""The keys each kind of model file may hold, what each means, and the checks that
refuse any other key or a value of the wrong type.

A schema maps each known key to a :class:`Key` (its note and value rule ``(test, what it
must be)``), to a nested schema (its own note under ``""``, the rule of unnamed keys
under ``"*"``) or to a one-element list for an array of tables (``[[pod]]``). Every
loader checks the whole document and names the first unknown key or wrong value with the
file; the writer puts each key's note on the line above it. Tables marked as a report
(``provenance``, ``fit``, ``report``) are free-form and never read back.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from sensorbench.errors import ModelFileError
from sensorbench.logs.toml_schema import KeyPath, SchemaError

AXES: tuple[str, ...] = ("x", "y", "theta")
"""The filters' axes in the robot frame, in column order everywhere (x forward m,
y left m, theta counter-clockwise rad): the split filters, the pod geometry's
columns, the drift terms, the aiding fixes and the ``filter_noise`` file's tables.
docs/PODS.md ("Adding an axis") says what else an added axis needs."""

COEF_KEYS = ("per_m_x", "per_m_y", "per_rad")
"""The columns of a drift coefficient row: per |Δx| (m), per |Δy| (m), per |Δθ| (rad)."""

POSE_AXES: tuple[str, ...] = ("x", "y", "z", "roll", "pitch", "yaw")
"""A pose's axes (m, m, m, rad, rad, rad), in column order of every ``(N, 6)`` pose or
pose-error array and of the ``pose_error`` file's tables."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _is_real(v: Any) -> bool:
    return _is_int(v) or isinstance(v, float | np.floating)


Rule = tuple[Callable[[Any], bool], str]
"""A value rule: (test, what a value must be); a TOML document's, or (numpy numbers
accepted) a session attribute's (:mod:`~sensorbench.logs.values`)."""
INT: Rule = (_is_int, "an integer")
REAL: Rule = (_is_real, "a number")
SIGMA: Rule = (lambda v: _is_real(v) and not v < 0, "a number ≥ 0 (or nan: not identified)")
COUNT: Rule = (lambda v: _is_int(v) and v >= 0, "an integer ≥ 0")
FLAG: Rule = (lambda v: isinstance(v, bool | np.bool_), "true or false")
TEXT: Rule = (lambda v: isinstance(v, str), "text")
POSITIVE: Rule = (lambda v: _is_real(v) and math.isfinite(v) and v > 0, "a finite number > 0")


def _nonneg(v: Any) -> bool:
    return _is_real(v) and math.isfinite(v) and v >= 0


NONNEG: Rule = (_nonneg, "a finite number ≥ 0")
NONNEGS: Rule = (
    lambda v: _nonneg(v) or (isinstance(v, list) and len(v) > 0 and all(map(_nonneg, v))),
    "a finite number ≥ 0 or a list of them",
)
FINITES: Rule = (
    lambda v: isinstance(v, list) and all(_is_real(x) and math.isfinite(x) for x in v),
    "a list of finite numbers",
)


def _is_covariance(v: Any, nan_rows: bool) -> bool:
    """Whether ``v`` (rows, or n² numbers row by row) is a symmetric positive
    semi-definite matrix, to round-off (1e-9 of its largest entry); with ``nan_rows`` a
    parameter not identified may have a row and column of nan."""
    rows = v if isinstance(v, list) and v and all(isinstance(r, list) for r in v) else None
    flat = [x for r in rows for x in r] if rows else v
    if not isinstance(flat, list) or not flat or not all(map(_is_real, flat)):
        return False
    n = len(rows) if rows else math.isqrt(len(flat))
    if n * n != len(flat) or (rows and any(len(r) != n for r in rows)):
        return False
    m = np.array(flat, dtype=float).reshape(n, n)
    bad = np.isnan(np.diag(m)) if nan_rows else np.zeros(n, bool)
    m = m[~bad][:, ~bad]
    if m.size == 0:
        return True
    if not np.all(np.isfinite(m)):
        return False
    tol = 1e-9 * float(np.abs(m).max())
    return bool(np.all(np.abs(m - m.T) <= tol) and np.linalg.eigvalsh(m).min() >= -tol)


COVARIANCE: Rule = (
    lambda v: _is_covariance(v, False),
    "a symmetric positive semi-definite square matrix of finite numbers",
)
COVARIANCE_NAN: Rule = (
    lambda v: _is_covariance(v, True),
    "a symmetric positive semi-definite matrix of n² numbers (nan rows: not identified)",
)


class Key(NamedTuple):
    """One key or table of a model file: its note (written as a comment above it; ""
    none), its value rule (None: any value) and whether it is a report table."""

    note: str = ""
    rule: Rule | None = None
    report: bool = False


_MODEL: dict[str, Any] = {
    "": Key("what this file is"),
    "kind": Key("the kind of model (pod_geometry, filter_noise, pose_error_gm)"),
    "format_version": Key("layout version of this kind; a newer one is refused"),
    "software": Key("the sensorbench version that wrote the file"),
    "created_utc": Key("when the file was written (ISO 8601, UTC)"),
}
_PROVENANCE = Key(
    "where the model came from: each input's path and SHA-256, the fit's options "
    "(report: not read back)",
    report=True,
)


def _envelope(*quantities: str) -> dict[str, Any]:
    """``[model]``, ``[provenance]`` and a ``[units]`` table of these quantities (a
    misspelt one is an unknown key)."""
    units = Key("the unit of this quantity", TEXT)
    return {
        "model": _MODEL,
        "units": {
            "": Key("the unit of each quantity in this file; a reader expecting others refuses it"),
            **dict.fromkeys(quantities, units),
        },
        "provenance": _PROVENANCE,
    }


POD_GEOMETRY_KEYS: dict[str, Any] = {
    **_envelope("distance_per_tick", "rolling_angle", "lever_arm", "wheel_radius", "time_offset"),
    "fit": {
        "": Key("how the geometry fit went (report: not read back)", report=True),
        "*": Key(),
        "time_offsets_s": Key("each pod's clock offset from the reference (s)", FINITES),
    },
    "pod": [
        {
            "": Key(
                "one table per pod, in counter order. Body frame x forward, y left, θ "
                "counter-clockwise; a pod's ticks Δn = (cos φ Δx + sin φ Δy + L Δθ) / c"
            ),
            "name": Key("the pod's name (its counter in the encoder stream)", TEXT),
            "distance_per_tick": Key("c: travel of the wheel's contact per encoder tick (m)", REAL),
            "rolling_angle": Key(
                "φ: the direction the wheel rolls in the body frame (rad, from x)", REAL
            ),
            "lever_arm": Key(
                "L = x sin φ − y cos φ: ticks per radian of the body's rotation times c (m); "
                "the pod's position along its own rolling axis is not observable",
                REAL,
            ),
            "counts_per_rev": Key(
                "encoder counts per wheel revolution (from robot.toml)", POSITIVE
            ),
            "wheel_radius": Key("c · counts_per_rev / 2π (m)", POSITIVE),
            "sigma_distance_per_tick": Key("1σ standard error of distance_per_tick (m)", SIGMA),
            "sigma_rolling_angle": Key("1σ standard error of rolling_angle (rad)", SIGMA),
            "sigma_lever_arm": Key("1σ standard error of lever_arm (m)", SIGMA),
            "sigma_wheel_radius": Key("1σ standard error of wheel_radius (m)", SIGMA),
            "residual_sigma_ticks": Key(
                "robust σ of the fit's residuals (ticks per interval)", SIGMA
            ),
            "outlier_intervals": Key("fit intervals left out as outliers (count)", COUNT),
            "status": {
                "": Key("per parameter: ok, or why the drives could not identify it"),
                "*": Key("ok, or why the drives could not identify this parameter"),
            },
        }
    ],
    "calibration": {
        "": Key(
            "the fit's joint covariance of the stacked rows (cos φ, sin φ, L)/c of every "
            "pod, in ticks per m and per rad; the filters add its effect to their stated "
            "variance"
        ),
        "units": Key("the unit of row_covariance's entries"),
        "row_covariance": Key("3·pods × 3·pods covariance of the stacked rows", COVARIANCE),
    },
    "imu": {
        "": Key(
            "two pods: the heading is the IMU's yaw (its row (0, 0, 1) below the pods')"
        ),
        "yaw_rate_var_rad2_per_s": Key(
            "the IMU yaw increments' random walk (rad²/s), measured at rest", NONNEG
        ),
        "bias_walk_rad2_per_s3": Key(
            "the gyro bias's random walk ((rad/s)²/s): the heading's error grows with the "
            "time moving since the rest that estimated the bias", NONNEG
        ),
    },
    "slip": {
        "": Key(
            "the wheels' slip law: variance of a pod's travel error per metre rolled "
            "(roll) and dragged sideways (drag), m²/m; the filters' odometry noise"
        ),
        "*": Key("a further figure of the slip fit, written for the reader"),
        "roll_m2_per_m": Key("variance of a pod's travel error per metre it rolls (m²/m)", NONNEG),
        "drag_m2_per_m": Key(
            "variance of a pod's travel error per metre dragged sideways (m²/m)", NONNEG
        ),
        "turn_m2_per_m_per_m_rad_s2": Key(
            "variance per metre rolled per m·rad/s² of lateral acceleration (0 when absent)",
            NONNEG,
        ),
        "creep_speed_var_s2_per_m2": Key("variance of the creep κ_v (s²/m²)", NONNEG),
        "creep_turn_var_s4_per_m2_rad2": Key("variance of the creep κ_t (s⁴/(m²·rad²))", NONNEG),
        "creep_speed_ref_m_per_s": Key("the calibration drives' mean wheel speed (m/s)", NONNEG),
        "creep_turn_ref_m_rad_per_s2": Key(
            "the calibration drives' mean lateral acceleration (m·rad/s²)", NONNEG
        ),
        "roll_se_m2_per_m": Key("standard error of roll_m2_per_m (m²/m)", SIGMA),
        "drag_se_m2_per_m": Key("standard error of drag_m2_per_m (m²/m)", SIGMA),
        "intercept": Key(
            "variance not growing with motion: against the IMU the gyro's noise (rad²); "
            "against mocap the reference's noise per body axis (m², m², rad²)",
            NONNEGS,
        ),
        "intercept_rad2": Key("older name of intercept, against the IMU (rad²)", NONNEG),
        "n_windows": Key("windows the slip law was fitted over"),
        "trimmed_windows": Key("windows dropped as faults"),
        "drag_identified": Key("false when the drives hardly dragged a pod sideways"),
        "rolled_m": Key("distance rolled by the pods the fit sees (m)"),
        "dragged_m": Key("distance dragged sideways by the pods the fit sees (m)"),
        "window_s": Key("window length (s)"),
        "method": Key("how the law was fitted"),
        "timing_s": Key("against mocap, the residual timing error per body axis (s)"),
    },
}
"""``pod_geometry`` files (``fit pods -o``)."""

_NOISE_AXIS: dict[str, Any] = {
    "": Key("this axis's filter noise"),
    "q": Key("velocity random walk at rest (unit²/s³)", REAL),
    "r": Key("variance of the odometry position's measurement (unit²)", REAL),
    "dof": Key("innovation tails: inf = Gaussian (the only law a fit produces)", REAL),
    "q_acc": Key("format 1 only: refused", REAL),
    "q_jerk": Key("extra velocity random walk per squared observed jerk (s³); 0 = none", REAL),
    "slip_scale": Key(
        "scale of the pods' rolling-slip variance in this axis (1 = as fitted)", REAL
    ),
    "drag_scale": Key("scale of the pods' dragging-slip variance in this axis", REAL),
    "nis_se": Key("the fit's own level error of the clipped mean NIS (widens its band)", REAL),
    "stamp_var": Key("variance of a frame's time stamp (s²), times the squared velocity", REAL),
    "nis_tau": Key(
        "integrated autocorrelation time of the clipped NIS (updates, >= 1), the largest "
        "over the fitted sessions: sizes the monitor's window; absent = not fitted", REAL
    ),
    "feedforward": Key("the observed acceleration is fed forward (always true)", FLAG),
}
_DRIFT_AXIS: dict[str, Any] = {
    "": Key("this axis's drift"),
    "per_m_x": Key("variance per metre travelled along body x (m² or rad² per m)", REAL),
    "per_m_y": Key("variance per metre travelled along body y (m² or rad² per m)", REAL),
    "per_rad": Key("variance per radian turned (m² or rad² per rad)", REAL),
    "identified": Key(
        "the coefficients the calibration drives identified; one not listed is a guess (0, or "
        "the other per_m's value) and replay and live warn; no list: all taken as identified",
        (lambda v: isinstance(v, list) and all(k in COEF_KEYS for k in v),
         "a list of " + ", ".join(COEF_KEYS)),
    ),
}

FILTER_NOISE_KEYS: dict[str, Any] = {
    **_envelope("q_xy", "q_theta", "r_xy", "r_theta"),
    "axes": {
        "": Key(
            "one table per filter axis (x, y in the world frame: m; theta: rad); each axis "
            "filter has state (position, velocity) and measures the odometry position"
        ),
        **dict.fromkeys(AXES, _NOISE_AXIS),
    },
    "drift": {
        "": Key(
            "how far the odometry frame drifts from the world per metre travelled and per "
            "radian turned, per body axis"
        ),
        "units": Key("the unit of the drift coefficients"),
        **dict.fromkeys(AXES, _DRIFT_AXIS),
    },
    "filter": Key(
        "what the filters' state and measurement are (report: not read back)", report=True
    ),
    "reach": {
        "": Key(
            "how far the fit's drives went (99th percentiles over short windows); replay "
            "warns when a session goes beyond 1.5× of it"
        ),
        "units": Key("the unit of each reach figure"),
        "speed": Key("99th percentile of speed over the drives' windows (m/s)", NONNEG),
        "strafe": Key("99th percentile of sideways speed (m/s)", NONNEG),
        "turn": Key("99th percentile of turn rate (rad/s)", NONNEG),
        "speed_turn": Key("99th percentile of speed × turn rate (m·rad/s²)", NONNEG),
    },
    "report": Key("the fit's figures per axis: likelihood, NIS and its band (report)", report=True),
}
"""``filter_noise`` files (``fit noise -o``)."""

_POSE_AXIS: dict[str, Any] = {
    "": Key("this axis's error model"),
    "unit": Key("the axis's unit", TEXT),
    # The four parameters are fitted and stated in log space (se_log, cov_log, ci95):
    # each is > 0; a sensor without white noise fits a sigma_v at its lower bound.
    "sigma_b": Key("std of the offset drawn at each relocalization (unit)", POSITIVE),
    "sigma": Key("stationary standard deviation of the Gauss-Markov noise (unit)", POSITIVE),
    "tau_s": Key("correlation time of the Gauss-Markov noise (s)", POSITIVE),
    "sigma_v": Key("white measurement noise beside the Gauss-Markov (unit)", POSITIVE),
    "neg_log_likelihood": Key("the fit's negative log-likelihood", REAL),
    "n_samples": Key("error samples the fit used", COUNT),
    "n_segments": Key("segments between relocalizations", COUNT),
    "converged": Key("whether the optimizer converged", FLAG),
    "se_log": Key("standard errors of log(sigma_b, sigma, tau_s[, sigma_v])"),
    "identified": Key("which parameters the data identify"),
    "ci95": Key("95 % intervals of the parameters (unit, unit, s[, unit])"),
    "cov_log": Key("covariance of the log-parameters (for validation's draws)", COVARIANCE_NAN),
    "sigma_b_qprofile": {
        "": Key("what sigma_b's profile interval is computed from (report)", report=True),
        **dict.fromkeys(("seg_var", "seg_proj2", "seg_proj", "seg_ones", "seg_group"), Key()),
    },
}
POSE_ERROR_KEYS: dict[str, Any] = {
    **_envelope("length", "angle", "time"),
    "model": {
        **_MODEL,
        "sensor": Key("the pose sensor's stream name"),
        "reference": Key("the reference stream (motion capture) it was judged against"),
        "frame": Key("the frame the errors are expressed in"),
        "description": Key("the model in one sentence"),
    },
    "axes": {
        "": Key(
            "one table per pose axis (x, y, z in m; roll, pitch, yaw in rad): error = an "
            "offset drawn at each relocalization + first-order Gauss-Markov noise"
        ),
        **dict.fromkeys(POSE_AXES, _POSE_AXIS),
    },
    "wrong_relocalizations": {
        "": Key(
            "relocalizations whose offset is far outside N(0, sigma_b²): named one at a "
            "time, their offsets left free in the fit"
        ),
        "n_relocalizations": Key("relocalizations the fit saw (segments less exempt starts)"),
        "n_wrong": Key("those named wrong"),
        "rate": Key("n_wrong / n_relocalizations (rate and rate_ci95 absent without any)"),
        "rate_ci95": Key("95 % interval of the rate (Clopper-Pearson)"),
        "median_jump_m": Key("median horizontal size |(x, y)| of the named jumps (m)"),
        "named": [
            {
                "": Key("one table per named wrong relocalization"),
                "session": Key("the session it is in"),
                "t_s": Key("its time from the session start (s)"),
                "jump": Key("its offset per axis (m, m, m, rad, rad, rad)"),
            }
        ],
    },
}
"""``pose_error_gm`` files (``fit pose-error -o``)."""

SCHEMAS: dict[str, dict[str, Any]] = {
    "pod_geometry": POD_GEOMETRY_KEYS,
    "filter_noise": FILTER_NOISE_KEYS,
    "pose_error_gm": POSE_ERROR_KEYS,
}
"""Schema per model kind."""


def _entry(schema: Mapping[str, Any], key: str) -> Any:
    """What ``schema`` says of ``key`` (its ``"*"`` rule if it does not name it; None: unknown)."""
    return schema.get(key, schema.get("*"))


def _chain(schema: Mapping[str, Any], path: str) -> list[Key | None]:
    """The :class:`Key` of each level of dotted ``path`` (None where the schema has none)."""
    node: Any = schema
    out: list[Key | None] = []
    for part in path.split("."):
        node = node[0] if isinstance(node, list) else node
        node = _entry(node, part) if isinstance(node, Mapping) else None
        own = node[0] if isinstance(node, list) else node
        out.append(own.get("") if isinstance(own, Mapping) else own)
    return out


def note(schema: Mapping[str, Any], path: str) -> str | None:
    """The note of the key or table at dotted ``path`` (None: none)."""
    key = _chain(schema, path)[-1]
    return key.note if key is not None and key.note else None


def check_document(doc: Mapping[str, Any], schema: Mapping[str, Any], source: str) -> None:
    """ModelFileError ``source: dotted.key: what is wrong`` for the first problem of ``doc``
    against ``schema`` (:func:`_check`)."""
    try:
        _check(doc, schema, ())
    except SchemaError as exc:
        raise ModelFileError(f"{source}: {exc}") from None


def _check(doc: Mapping[str, Any], schema: Mapping[str, Any], path: KeyPath) -> None:
    """Raise :class:`SchemaError` for the first key of ``doc`` (document order) that
    ``schema`` does not know, whose value breaks its :class:`Key`'s rule, is no table (array
    of tables) where the schema has one, or repeats a ``name`` in an array of tables."""
    for key, value in doc.items():
        where, sub = (*path, key), _entry(schema, key)
        tables: list[tuple[KeyPath, Any]] = []  # (where, table) to check against ``sub``
        if sub is None:
            known = ", ".join(sorted(k for k in schema if k not in ("", "*")))
            raise SchemaError(where, f"unknown key (known keys here: {known})")
        if isinstance(sub, Key):
            if sub.rule is not None and not sub.rule[0](value):
                raise SchemaError(where, f"must be {sub.rule[1]}, got {reprlib.repr(value)}")
        elif isinstance(sub, Mapping):
            tables = [(where, value)]
        elif not isinstance(value, list):
            raise SchemaError(where, f"must be an array of tables ([[{key}]]), got {value!r}")
        else:
            names = [repr(v["name"]) for v in value if isinstance(v, Mapping) and "name" in v]
            if dup := next((n for i, n in enumerate(names) if n in names[:i]), None):
                raise SchemaError(where, f"two [[{key}]] tables are named {dup} (must be unique)")
            tables, sub = [((*where, i), v) for i, v in enumerate(value)], sub[0]
        for at, table in tables:
            if not isinstance(table, Mapping):
                raise SchemaError(at, f"must be a table, got {table!r}")
            _check(table, sub, at)
