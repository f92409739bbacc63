"""What each key of a model file means, with its unit: written as a comment above the key.

Every model file sensorbench writes explains itself, as robot_localization's parameter
file does: :func:`~sensorbench.logs.model_file.write_document` puts the note of each key
(and of each table) on the line above it. Keys are dotted paths; ``*`` stands for one
level that repeats (an axis, a session): ``axes.*.q`` is the note of ``axes.x.q``,
``axes.y.q`` and ``axes.theta.q``. Arrays of tables (``[[pod]]``) have no index. A
table marked as a report (``report``, ``provenance``) is what the fit measured or used,
written for the reader and never read back; its keys are explained in docs/PODS.md and
docs/POSE_ERROR.md. ``tests/test_model_notes.py`` checks that every key a fit writes has
a note here or lies in such a table.
"""

from __future__ import annotations

from collections.abc import Mapping

ENVELOPE: dict[str, str] = {
    "model": "what this file is",
    "model.kind": "the kind of model (pod_geometry, filter_noise, pose_error_gm)",
    "model.format_version": "layout version of this kind; a newer one is refused",
    "model.software": "the sensorbench version that wrote the file",
    "model.created_utc": "when the file was written (ISO 8601, UTC)",
    "units": "the unit of each quantity in this file; a reader expecting others refuses it",
    "units.*": "the unit of this quantity",
    "provenance": (
        "where the model came from: each input's path and SHA-256, the fit's options "
        "(report: not read back)"
    ),
}

POD_GEOMETRY: dict[str, str] = {
    "fit": "how the geometry fit went (report: not read back)",
    "pod": (
        "one table per pod, in counter order. Body frame x forward, y left, θ "
        "counter-clockwise; a pod's ticks Δn = (cos φ Δx + sin φ Δy + L Δθ) / c"
    ),
    "pod.name": "the pod's name (its counter in the encoder stream)",
    "pod.distance_per_tick": "c: travel of the wheel's contact per encoder tick (m)",
    "pod.rolling_angle": "φ: the direction the wheel rolls in the body frame (rad, from x)",
    "pod.lever_arm": (
        "L = x sin φ − y cos φ: ticks per radian of the body's rotation times c (m); the "
        "pod's position along its own rolling axis is not observable"
    ),
    "pod.counts_per_rev": "encoder counts per wheel revolution (from robot.toml)",
    "pod.wheel_radius": "c · counts_per_rev / 2π (m)",
    "pod.sigma_distance_per_tick": "1σ standard error of distance_per_tick (m)",
    "pod.sigma_rolling_angle": "1σ standard error of rolling_angle (rad)",
    "pod.sigma_lever_arm": "1σ standard error of lever_arm (m)",
    "pod.sigma_wheel_radius": "1σ standard error of wheel_radius (m)",
    "pod.outlier_intervals": "fit intervals left out as outliers (count)",
    "pod.residual_sigma_ticks": "robust σ of the fit's residuals (ticks per interval)",
    "pod.status": "per parameter: ok, or why the drives could not identify it",
    "pod.status.*": "ok, or why the drives could not identify this parameter",
    "slip": (
        "the wheels' slip law: variance of a pod's travel error per metre rolled "
        "(roll) and dragged sideways (drag), m²/m; the filters' odometry noise"
    ),
    "slip.roll_m2_per_m": "variance of a pod's travel error per metre it rolls (m²/m)",
    "slip.drag_m2_per_m": "variance of a pod's travel error per metre dragged sideways (m²/m)",
    "slip.roll_se_m2_per_m": "standard error of roll_m2_per_m (m²/m)",
    "slip.drag_se_m2_per_m": "standard error of drag_m2_per_m (m²/m)",
    "slip.intercept": (
        "variance not growing with motion: against the IMU the gyro's noise (rad²); against "
        "mocap the reference's noise per body axis (m², m², rad²)"
    ),
    "slip.intercept_rad2": "older name of intercept, against the IMU (rad²)",
    "slip.n_windows": "windows the slip law was fitted over",
    "slip.trimmed_windows": "windows dropped as faults",
    "slip.drag_identified": "false when the drives hardly dragged a pod sideways",
    "slip.rolled_m": "distance rolled by the pods the fit sees (m)",
    "slip.dragged_m": "distance dragged sideways by the pods the fit sees (m)",
    "slip.window_s": "window length (s)",
    "slip.method": "how the law was fitted",
    "slip.timing_s": "against mocap, the residual timing error per body axis (s)",
    "calibration": (
        "the fit's joint covariance of the stacked rows (cos φ, sin φ, L)/c of every pod, "
        "in ticks per m and per rad; the filters add its effect to their stated variance"
    ),
    "calibration.units": "the unit of row_covariance's entries",
    "calibration.row_covariance": "3·pods × 3·pods covariance of the stacked rows",
}

FILTER_NOISE: dict[str, str] = {
    "axes": (
        "one table per filter axis (x, y in the world frame: m; theta: rad); each axis "
        "filter has state (position, velocity) and measures the odometry position"
    ),
    "axes.*": "this axis's filter noise",
    "axes.*.q": "velocity random walk at rest (unit²/s³)",
    "axes.*.r": "variance of the odometry position's measurement (unit²)",
    "axes.*.dof": "innovation tails: inf = Gaussian (the only law a fit produces)",
    "axes.*.q_jerk": "extra velocity random walk per squared observed jerk (s³); 0 = none",
    "axes.*.slip_scale": "scale of the pods' rolling-slip variance in this axis (1 = as fitted)",
    "axes.*.drag_scale": "scale of the pods' dragging-slip variance in this axis",
    "axes.*.feedforward": "the observed acceleration is fed forward (always true)",
    "axes.*.nis_se": "the fit's own level error of the clipped mean NIS (widens its band)",
    "axes.*.stamp_var": "variance of a frame's time stamp (s²), times the squared velocity",
    "axes.*.q_acc": "format 1 only: refused",
    "drift": (
        "how far the odometry frame drifts from the world per metre travelled and per "
        "radian turned, per body axis"
    ),
    "drift.units": "the unit of the drift coefficients",
    "drift.*": "this axis's drift",
    "drift.*.per_m_x": "variance per metre travelled along body x (m² or rad² per m)",
    "drift.*.per_m_y": "variance per metre travelled along body y (m² or rad² per m)",
    "drift.*.per_rad": "variance per radian turned (m² or rad² per rad)",
    "filter": "what the filters' state and measurement are (report: not read back)",
    "reach": (
        "how far the fit's drives went (99th percentiles over short windows); replay "
        "warns when a session goes beyond 1.5× of it"
    ),
    "reach.units": "the unit of each reach figure",
    "reach.speed": "99th percentile of speed over the drives' windows (m/s)",
    "reach.strafe": "99th percentile of sideways speed (m/s)",
    "reach.turn": "99th percentile of turn rate (rad/s)",
    "reach.speed_turn": "99th percentile of speed × turn rate (m·rad/s²)",
    "report": "the fit's figures per axis: likelihood, NIS and its band (report)",
}

POSE_ERROR: dict[str, str] = {
    "model.sensor": "the pose sensor's stream name",
    "model.reference": "the reference stream (motion capture) it was judged against",
    "model.frame": "the frame the errors are expressed in",
    "model.description": "the model in one sentence",
    "axes": (
        "one table per pose axis (x, y, z in m; roll, pitch, yaw in rad): error = an "
        "offset drawn at each relocalization + first-order Gauss-Markov noise"
    ),
    "axes.*": "this axis's error model",
    "axes.*.unit": "the axis's unit",
    "axes.*.sigma_b": "standard deviation of the offset drawn at each relocalization (unit)",
    "axes.*.sigma": "stationary standard deviation of the Gauss-Markov noise (unit)",
    "axes.*.tau_s": "correlation time of the Gauss-Markov noise (s)",
    "axes.*.sigma_v": "white measurement noise beside the Gauss-Markov (unit); 0 = none",
    "axes.*.n_samples": "error samples the fit used",
    "axes.*.n_segments": "segments between relocalizations",
    "axes.*.neg_log_likelihood": "the fit's negative log-likelihood",
    "axes.*.converged": "whether the optimizer converged",
    "axes.*.se_log": "standard errors of log(sigma_b, sigma, tau_s[, sigma_v])",
    "axes.*.identified": "which parameters the data identify",
    "axes.*.ci95": "95 % intervals of the parameters (unit, unit, s[, unit])",
    "axes.*.cov_log": "covariance of the log-parameters (for validation's draws)",
    "axes.*.sigma_b_qprofile": "what sigma_b's profile interval is computed from (report)",
    "wrong_relocalizations": (
        "relocalizations whose offset is far outside N(0, sigma_b²): named one at a time, "
        "their offsets left free in the fit"
    ),
    "wrong_relocalizations.n_relocalizations": "relocalizations the fit saw",
    "wrong_relocalizations.n_wrong": "those named wrong",
    "wrong_relocalizations.rate": "n_wrong / n_relocalizations",
    "wrong_relocalizations.rate_ci95": "95 % interval of the rate (Clopper-Pearson)",
    "wrong_relocalizations.median_jump_m": "median horizontal size |(x, y)| of the named jumps (m)",
    "wrong_relocalizations.named": "one table per named wrong relocalization",
    "wrong_relocalizations.named.session": "the session it is in",
    "wrong_relocalizations.named.t_s": "its time from the session start (s)",
    "wrong_relocalizations.named.jump": "its offset per axis (m, m, m, rad, rad, rad)",
}

NOTES: dict[str, dict[str, str]] = {
    "pod_geometry": {**ENVELOPE, **POD_GEOMETRY},
    "filter_noise": {**ENVELOPE, **FILTER_NOISE},
    "pose_error_gm": {**ENVELOPE, **POSE_ERROR},
}
"""Notes per model kind."""

REPORT_TABLES = ("provenance", "fit", "filter", "report", "axes.*.sigma_b_qprofile")
"""Tables written for the reader and never read back: their own keys carry no note."""


def _patterns(path: str) -> list[str]:
    """``path`` as written, then with its second level, its last level, or both as ``*``."""
    parts = path.split(".")
    out = [path]
    if len(parts) >= 2:
        out.append(".".join([parts[0], "*", *parts[2:]]))
        out.append(".".join([*parts[:-1], "*"]))
    if len(parts) >= 3:
        out.append(".".join([parts[0], "*", *parts[2:-1], "*"]))
    return out


def note(notes: Mapping[str, str], path: str) -> str | None:
    """The note of the key or table at dotted ``path`` (None: none)."""
    for p in _patterns(path):
        if p in notes:
            return notes[p]
    return None


def in_report(path: str) -> bool:
    """Whether ``path`` lies inside a report table (its keys need no note)."""
    return any(p.startswith(t + ".") for p in _patterns(path) for t in REPORT_TABLES)
