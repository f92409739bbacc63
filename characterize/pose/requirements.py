"""Accuracy requirements (``--require x.p95<=0.05``) and their predicted distribution.

"The model describes the errors" and "the errors are small enough" are different
questions. A requirement names an axis, a statistic of the absolute error ``|e|`` over
a horizon of H seconds, and a threshold:

- statistics: ``rms``, ``p50``, ``p95``, ``p99`` (percentiles of |e| over the
  horizon's samples), ``max``;
- threshold: a number in the axis' SI unit (m for x, y, z; rad for roll, pitch, yaw),
  or with a unit: ``mm``, ``cm``, ``m`` for positions, ``rad``, ``mrad``, ``deg`` for
  angles (a length on an angle axis, or the reverse, is refused).

Prediction: the statistic is a random variable (a horizon sees a few relocalization
offsets and a stretch of Gauss-Markov noise). Its distribution under the validated
model is simulated with the parameter uncertainty: every draw takes its parameters
from the fit's stated uncertainty (:func:`gm_montecarlo.draw_params`, σ_b from its
Q-profile) and one error series over a horizon sampled at the campaign's median
period, with relocalizations placed by resampling the campaign's segment lengths
(a renewal process, entered at a uniform point of its first segment), plus, for a
session the alignment did not see, an offset constant over the horizon with the
variance the alignment's own error gives it. The requirement *holds* when the
predicted ``confidence`` quantile of the statistic (default 95 %) is at or below the
threshold, i.e. P(statistic ≤ threshold) ≥ confidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sensorbench.characterize.pose.drift import segment_lengths
from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.gm_montecarlo import draw_params, simulate_errors
from sensorbench.characterize.pose.series import AXES, AXIS_UNITS, ErrorSeries
from sensorbench.errors import FitError

REQUIRE_STATS = ("rms", "p50", "p95", "p99", "max")
_UNITS = {
    "m": ("m", 1.0),
    "cm": ("m", 0.01),
    "mm": ("m", 0.001),
    "rad": ("rad", 1.0),
    "mrad": ("rad", 0.001),
    "deg": ("rad", np.pi / 180.0),
}
_PATTERN = re.compile(
    r"^\s*(?P<axis>[a-z]+)\.(?P<stat>[a-z0-9]+)\s*<=\s*"
    r"(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[a-z]*)\s*$"
)
_CHUNK = 25


@dataclass(frozen=True)
class Requirement:
    """``axis.stat <= threshold`` (threshold in the axis' SI unit)."""

    axis: str
    stat: str
    threshold: float
    text: str

    @classmethod
    def parse(cls, text: str) -> Requirement:
        """Parse ``axis.stat<=value[unit]``; FitError naming the problem otherwise."""
        m = _PATTERN.match(text.lower())
        if m is None:
            raise FitError(
                f"--require {text!r}: expected AXIS.STAT<=VALUE[UNIT], e.g. x.p95<=0.05 or "
                "yaw.p99<=1deg"
            )
        axis, stat, unit = m["axis"], m["stat"], m["unit"]
        if axis not in AXES:
            raise FitError(f"--require {text!r}: axis {axis!r} is not one of {', '.join(AXES)}")
        if stat not in REQUIRE_STATS:
            raise FitError(
                f"--require {text!r}: statistic {stat!r} is not one of {', '.join(REQUIRE_STATS)}"
            )
        factor = 1.0
        if unit:
            if unit not in _UNITS:
                raise FitError(f"--require {text!r}: unknown unit {unit!r} ({', '.join(_UNITS)})")
            kind, factor = _UNITS[unit]
            if kind != AXIS_UNITS[axis]:
                raise FitError(
                    f"--require {text!r}: {axis} is in {AXIS_UNITS[axis]}, not a {unit!r} quantity"
                )
        return cls(axis, stat, float(m["value"]) * factor, text)


@dataclass
class RequirementResult:
    """Predicted distribution of one required statistic and whether it holds."""

    requirement: Requirement
    horizon_s: float
    confidence: float
    predicted_quantile: float  # the confidence quantile, SI unit
    predicted_median: float
    predicted_90: tuple[float, float]  # 5 % and 95 % quantiles
    prob_within: float  # P(statistic <= threshold)
    n_draws: int

    @property
    def holds(self) -> bool:
        """The confidence quantile is within the threshold."""
        return bool(self.predicted_quantile <= self.requirement.threshold)

    def reason(self) -> str:
        """Why the requirement fails (empty when it holds)."""
        if self.holds:
            return ""
        r = self.requirement
        return (
            f"{r.text}: over {self.horizon_s:g} s the predicted {100 * self.confidence:g} % "
            f"quantile of {r.axis} {r.stat} is {self.predicted_quantile:.4g} "
            f"{AXIS_UNITS[r.axis]} > {r.threshold:.4g} (P(within) = {self.prob_within:.3f})"
        )

    def to_dict(self) -> dict:
        """JSON-ready."""
        r = self.requirement
        return {
            "requirement": r.text,
            "axis": r.axis,
            "statistic": r.stat,
            "threshold": r.threshold,
            "unit": AXIS_UNITS[r.axis],
            "horizon_s": self.horizon_s,
            "confidence": self.confidence,
            "predicted_quantile": self.predicted_quantile,
            "predicted_median": self.predicted_median,
            "predicted_90": list(self.predicted_90),
            "prob_within": self.prob_within,
            "n_draws": self.n_draws,
            "holds": self.holds,
            "reason": self.reason(),
        }


def horizon_statistics(abs_err: np.ndarray) -> dict[str, np.ndarray]:
    """``{stat: (B, A)}`` of ``|e|`` series ``(B, N, A)`` over their samples."""
    q = np.quantile(abs_err, [0.5, 0.95, 0.99], axis=1)
    return {
        "rms": np.sqrt(np.mean(abs_err**2, axis=1)),
        "p50": q[0],
        "p95": q[1],
        "p99": q[2],
        "max": abs_err.max(axis=1),
    }


def _reloc_pattern(rng: np.random.Generator, t: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    reloc = np.zeros(t.size, dtype=bool)
    first = rng.choice(lengths)
    edges = [first * rng.uniform()]
    while edges[-1] < t[-1]:
        edges.append(edges[-1] + max(float(rng.choice(lengths)), 1e-9))
    idx = np.searchsorted(t, np.array(edges[:-1]))
    reloc[idx[idx < t.size]] = True
    reloc[0] = True
    return reloc


def predict_requirements(
    requirements: list[Requirement],
    model: PoseErrorModel,
    series: list[ErrorSeries],
    horizon_s: float = 60.0,
    confidence: float = 0.95,
    n_draws: int = 1000,
    seed: int = 0,
    parameter_uncertainty: bool = True,
    inherited_variance: np.ndarray | None = None,
) -> list[RequirementResult]:
    """Predicted distribution of every required statistic over ``horizon_s`` (see module doc).

    ``inherited_variance`` (6,) units²: a new session's error also carries the
    alignment's own error (constant over the horizon; from
    :meth:`sessions.PreparedCampaign.future_variance`), drawn anew for every horizon.
    """
    if not requirements:
        return []
    if horizon_s <= 0:
        raise FitError(f"--horizon must be > 0 s, got {horizon_s}")
    rng = np.random.default_rng(seed)
    dt = float(np.median(np.concatenate([np.diff(s.t_s) for s in series])))
    t = np.arange(int(np.ceil(horizon_s / dt)) + 1) * dt
    lengths = segment_lengths(series)
    axes = sorted({AXES.index(r.axis) for r in requirements})
    params = model.params_array()[axes]
    cov = np.stack([model.axes[AXES[i]].cov_log_usable() for i in axes])
    quant = [model.axes[AXES[i]].sigma_b_quantile for i in axes]
    sd = None if inherited_variance is None else np.sqrt(np.asarray(inherited_variance)[axes])
    if parameter_uncertainty:
        drawn = draw_params(params, cov, n_draws, rng, quant)
    else:
        drawn = np.broadcast_to(params, (n_draws, *params.shape)).copy()
    stats: dict[str, list[np.ndarray]] = {k: [] for k in REQUIRE_STATS}
    for j0 in range(0, n_draws, _CHUNK):
        j1 = min(n_draws, j0 + _CHUNK)
        reloc = _reloc_pattern(rng, t, lengths)
        e = simulate_errors(drawn[j0:j1], t, reloc, j1 - j0, rng, sd)
        for k, v in horizon_statistics(np.abs(e)).items():
            stats[k].append(v)
    table = {k: np.concatenate(v) for k, v in stats.items()}
    out = []
    for r in requirements:
        x = table[r.stat][:, axes.index(AXES.index(r.axis))]
        q = np.quantile(x, [confidence, 0.5, 0.05, 0.95])
        out.append(
            RequirementResult(
                r,
                horizon_s,
                confidence,
                float(q[0]),
                float(q[1]),
                (float(q[2]), float(q[3])),
                float(np.mean(x <= r.threshold)),
                n_draws,
            )
        )
    return out
