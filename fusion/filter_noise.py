"""The split filters' noise model: per-axis q, r and their fitted refinements
(:class:`AxisNoise`, :class:`FilterNoise`), and its model file (kind ``filter_noise``,
written by ``fit noise``; docs/PODS.md § "Noise fit").
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sensorbench.errors import FusionError, ModelFileError
from sensorbench.fusion.odometry_drift import OdometryDrift
from sensorbench.logs.model_file import model_document, read_model, write_document
from sensorbench.logs.model_keys import AXES, FILTER_NOISE_KEYS

if TYPE_CHECKING:
    from sensorbench.fusion.pod_kinematics import PodGeometry

NOISE_MODEL_KIND = "filter_noise"
NOISE_MODEL_VERSION = 2
DRIFT_UNITS = "per_m_x, per_m_y: m^2 (rad^2 for theta) per m; per_rad: the same per rad"
NOISE_MODEL_UNITS = {
    "q_xy": "m^2/s^3",
    "q_theta": "rad^2/s^3",
    "r_xy": "m^2",
    "r_theta": "rad^2",
}


@dataclass(frozen=True)
class AxisNoise:
    """Noise of one axis.

    Attributes:
        q: velocity random walk at rest (unit²/s³).
        r: odometry-position variance (unit²; the scale² of the innovation's measurement
            part: tick quantization).
        q_jerk: growth of the velocity random walk with the odometry's observed squared
            jerk (s³): the step's q is ``q + q_jerk·ĵ²``
            (:func:`~sensorbench.fusion.odometry_motion.jerk_sq`); 0 = fixed q.
        slip_scale: the share (dimensionless) of the slip model's per-step variance (its
            rolling part, or the whole when it does not split it) in the step's increment.
        drag_scale: the same for the dragging part of a wheel slip law; None =
            ``slip_scale``.
        nis_se: the standard error (RMS over the fitted sessions) of the clipped mean NIS
            each session was matched to, added to a replay's NIS band; 0 = an exact model.
        stamp_var: variance (s²) of the frame times' error: each update's r gains
            ``stamp_var·v̂²``, v̂ the axis's recent velocity; 0 = exact frame times.
        nis_tau: integrated autocorrelation time (≥ 1, updates) of the clipped NIS, the
            largest over the fitted sessions: the monitor's window holds window/τ
            independent updates under the model (live and replay); None = not fitted
            (live takes 1, replay each session's own).
    """

    q: float
    r: float
    q_jerk: float = 0.0
    slip_scale: float = 1.0
    drag_scale: float | None = None
    nis_se: float = 0.0
    stamp_var: float = 0.0
    nis_tau: float | None = None

    def __post_init__(self) -> None:
        if not (self.q > 0 and self.r > 0 and math.isfinite(self.q) and math.isfinite(self.r)):
            raise FusionError(f"filter noise must be finite and > 0, got q={self.q}, r={self.r}")
        for name in ("q_jerk", "slip_scale", "drag_share", "nis_se", "stamp_var"):
            val = getattr(self, name)
            if not (val >= 0 and math.isfinite(val)):
                raise FusionError(f"{name} must be finite and >= 0, got {val}")
        if self.nis_tau is not None and not 1.0 <= self.nis_tau < math.inf:
            raise FusionError(f"nis_tau must be finite and >= 1, got {self.nis_tau}")

    @property
    def drag_share(self) -> float:
        """The scale of the dragging part (``drag_scale``, or ``slip_scale`` when unset)."""
        return self.slip_scale if self.drag_scale is None else self.drag_scale


REACH_WINDOW_S = 0.25
"""Motion is measured over windows of this length (s)."""

REACH_MOTIONS = {
    # key: (what it is, unit, floor: motion below it is no motion)
    "speed": ("driving", "m/s", 0.05),
    "strafe": ("driving sideways", "m/s", 0.05),
    "turn": ("turning", "rad/s", 0.1),
    "speed_turn": ("turning while translating", "m·rad/s²", 0.02),
}
"""The motions the calibration drives' reach is stated in (:class:`MotionReach`)."""


@dataclass(frozen=True)
class MotionReach:
    """How far the calibration drives went: per motion of :data:`REACH_MOTIONS` the 99th
    percentile over every :data:`REACH_WINDOW_S` window of the drives (speed and strafe
    m/s, turn rad/s, speed × turn m·rad/s²). The fitted noise is known to hold within it;
    a session that goes further (by 1.5× plus the motion's floor) is outside it."""

    values: dict[str, float]

    @classmethod
    def of(cls, t_s: Sequence[np.ndarray], increments: Sequence[np.ndarray]) -> MotionReach:
        """The reach of sessions with frame times (K+1,) s and body increments (K, 3)."""
        rows = [_window_motion(t, inc) for t, inc in zip(t_s, increments, strict=True)]
        motion = np.vstack(rows)
        if motion.shape[0] == 0:
            raise FusionError("no motion windows to state a reach from")
        pct = np.percentile(motion, 99, axis=0)
        return cls({k: float(v) for k, v in zip(REACH_MOTIONS, pct, strict=True)})

    def outside(self, other: MotionReach) -> list[str]:
        """Why ``other`` (a replayed session's motion) lies outside this reach, one
        sentence per motion it exceeds; empty when it stays inside."""
        out = []
        for key, (what, unit, floor) in REACH_MOTIONS.items():
            got, had = other.values[key], self.values.get(key, 0.0)
            if got > 1.5 * had + floor:
                out.append(
                    f"{what} at {got:.3g} {unit} (99th percentile) beyond the calibration "
                    f"drives' {had:.3g} {unit}: the fitted noise is not known to hold there"
                )
        return out


def _window_motion(t_s: np.ndarray, increments: np.ndarray) -> np.ndarray:
    """(windows, 4) speed, strafe, turn rate and their product over consecutive windows of
    :data:`REACH_WINDOW_S` (missing increments count as none)."""
    t = np.asarray(t_s, dtype=float)
    inc = np.nan_to_num(np.asarray(increments, dtype=float))
    edges = np.searchsorted(t, np.arange(t[0], t[-1] + 1e-9, REACH_WINDOW_S))
    if edges.size < 2:
        return np.empty((0, 4))
    cum = np.vstack([np.zeros((1, 3)), np.cumsum(inc, axis=0)])
    span = np.diff(t[edges])[:, None]
    ok = span[:, 0] > 0
    rate = (np.diff(cum[edges], axis=0)[ok]) / span[ok]
    speed = np.hypot(rate[:, 0], rate[:, 1])
    turn = np.abs(rate[:, 2])
    return np.column_stack([speed, np.abs(rate[:, 1]), turn, speed * turn])


@dataclass(frozen=True)
class FilterNoise:
    """Noise of the three axis filters (x, y in m; theta in rad), how far the odometry
    drifts from the world (a fitted slip model, or None for a time-based default) and the
    calibration drives' reach (None: not stated)."""

    x: AxisNoise
    y: AxisNoise
    theta: AxisNoise
    drift: OdometryDrift | None = None
    reach: MotionReach | None = None

    def axis(self, name: str) -> AxisNoise:
        """Noise of axis ``name`` (x, y or theta)."""
        return getattr(self, name)

    def drift_warnings(self, pods: PodGeometry) -> list[str]:
        """A warning per drift coefficient the calibration drives did not identify, naming
        the axis and the coefficient (none when ``pods``' slip law replaces the drift)."""
        if self.drift is None or pods.slip_model() is not None:
            return []
        return [f"noise model drift {name}: not identified by the calibration drives, the "
                f"filters take it as {value:g} (overconfident on that motion; refit with "
                "drives that excite it)" for name, value in self.drift.unidentified()]  # fmt: skip

    @classmethod
    def default(cls) -> FilterNoise:
        """Untuned defaults: q = 1 m²/s³ (10 rad²/s³), odometry σ 0.1 mm (1 mrad)."""
        return cls(AxisNoise(1.0, 1e-8), AxisNoise(1.0, 1e-8), AxisNoise(10.0, 1e-6))


def save_noise_model(
    path: str | os.PathLike[str],
    noise: FilterNoise,
    prov: Mapping[str, Any],
    report: Mapping[str, Any] | None = None,
) -> None:
    """Write a filter-noise model file (kind ``filter_noise``)."""
    body: dict[str, Any] = {
        "axes": {a: _axis_table(noise.axis(a)) for a in AXES},
        "filter": {
            "state": "position, mean velocity over the step",
            "measurement": "odometry position: running sum of the axis's increments, H = [1, 0]",
        },
    }
    if noise.drift is not None:
        body["drift"] = {"units": DRIFT_UNITS, **noise.drift.as_dict()}
    if noise.reach is not None:
        body["reach"] = {
            "units": "99th percentile over 0.25 s windows: "
            + ", ".join(f"{k} {u}" for k, (_, u, _) in REACH_MOTIONS.items()),
            **noise.reach.values,
        }
    if report:
        body["report"] = dict(report)
    write_document(
        path, model_document(NOISE_MODEL_KIND, NOISE_MODEL_VERSION, NOISE_MODEL_UNITS, prov, body)
    )


_AXIS_DEFAULTS: dict[str, float | None] = {
    "q_jerk": 0.0, "slip_scale": 1.0, "drag_scale": None, "nis_se": 0.0, "stamp_var": 0.0,
    "nis_tau": None,
}  # fmt: skip
"""The optional keys of an [axes] row and the :class:`AxisNoise` value their absence means."""


def _axis_table(n: AxisNoise) -> dict[str, float]:
    """An axis's [axes] row (keys at their defaults left out)."""
    row = {"q": n.q, "r": n.r}
    row.update((k, v) for k, d in _AXIS_DEFAULTS.items() if (v := getattr(n, k)) != d)
    return row


def load_noise_model(path: str | os.PathLike[str]) -> FilterNoise:
    """Read a filter-noise model file (checks kind, version and units)."""
    doc = read_model(
        path, NOISE_MODEL_KIND, NOISE_MODEL_VERSION, NOISE_MODEL_UNITS, keys=FILTER_NOISE_KEYS
    )
    _refuse_retired_laws(path, doc.get("axes", {}))
    try:
        axes = doc["axes"]
        x, y, theta = (
            AxisNoise(float(axes[a]["q"]), float(axes[a]["r"]), **_optional(axes[a]))
            for a in AXES
        )
    except (KeyError, TypeError, ValueError, FusionError) as exc:
        raise ModelFileError(f"{path}: malformed [axes] table in noise model ({exc})") from exc
    drift = None
    if "drift" in doc:
        try:
            drift = OdometryDrift.from_dict(doc["drift"])
        except FusionError as exc:
            raise ModelFileError(f"{path}: [drift] table: {exc}") from exc
    reach = None
    if "reach" in doc:
        try:
            reach = MotionReach({k: float(doc["reach"][k]) for k in REACH_MOTIONS})
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFileError(f"{path}: [reach] table lacks or garbles {exc}") from exc
    return FilterNoise(x, y, theta, drift=drift, reach=reach)


def _refuse_retired_laws(path: str | os.PathLike[str], axes: Any) -> None:
    """Refuse the laws no fit produces any more, naming the key: ``q_acc`` (format 1: q
    grew with the observed acceleration), a finite ``dof`` (a Student-t innovation law;
    ``dof = inf`` loads) and ``feedforward = false`` (``true`` loads): the filters are
    Gaussian, feed the observed acceleration forward and grow q with the jerk."""
    if not isinstance(axes, Mapping):
        return
    for a, t in axes.items():
        if not isinstance(t, Mapping):
            continue
        dof, feedforward = t.get("dof", math.inf), t.get("feedforward", True)
        try:
            finite = math.isfinite(float(dof))
        except (TypeError, ValueError):
            finite = True
        why = None
        if "q_acc" in t:
            why = "has q_acc, a q growing with the observed acceleration (format 1)"
        elif finite:
            why = f"has dof = {dof!r}, a Student-t innovation law (Gaussian: dof = inf or none)"
        elif feedforward is not True:
            why = f"has feedforward = {feedforward!r} (the acceleration is always fed forward)"
        if why is not None:
            raise ModelFileError(f"{path}: [axes.{a}] {why}: refit with `sensorbench fit noise`")


def _optional(row: Mapping[str, Any]) -> dict[str, Any]:
    """An [axes] row's optional keys as :class:`AxisNoise` takes them (absent: default)."""
    got = {k: row.get(k, d) for k, d in _AXIS_DEFAULTS.items()}
    return {k: None if v is None else float(v) for k, v in got.items()}

