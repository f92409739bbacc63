"""Accuracy requirements (``--require x.p95<=0.05``): the ``confidence`` quantile of a
statistic of ``|e|`` over a horizon (s), predicted with the parameter uncertainty, and
bounded for the verdict (holds, fails, cannot tell). docs/POSE_ERROR.md ("The verdict")."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import numpy as np

from sensorbench.characterize.pose.drift import segment_lengths
from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.gm_montecarlo import draw_params, simulate_errors
from sensorbench.characterize.pose.series import AXIS_UNITS, POSE_AXES, ErrorSeries
from sensorbench.errors import FitError

REQUIRE_STATS = ("rms", "p50", "p95", "p99", "max")
_UNITS = {
    "m": ("m", 1.0), "cm": ("m", 0.01), "mm": ("m", 0.001),
    "rad": ("rad", 1.0), "mrad": ("rad", 0.001), "deg": ("rad", np.pi / 180.0),
}
_PATTERN = re.compile(
    r"^\s*(?P<axis>[a-z]+)\.(?P<stat>[a-z0-9]+)\s*<=\s*"
    r"(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[a-z]*)\s*$"
)
_CHUNK = 25
_SAMPLE_BUDGET = 4_000_000  # samples of the verdict's Monte Carlo under one relocalization pattern
_BATCH_SAMPLES = 150_000  # simulated samples held at once (they stay in the CPU's cache)
VERDICT_CONFIDENCE = 0.95
BOUND_DRAWS = 200
"""Parameter draws whose confidence quantiles give the verdict's bounds."""
HORIZONS_PER_DRAW = 200
"""Horizons simulated under every draw (common random numbers)."""
CENTRE_HORIZONS = 4000
"""Horizons simulated under the point estimate for its confidence quantile."""


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
        if axis not in POSE_AXES:
            raise FitError(
                f"--require {text!r}: axis {axis!r} is not one of {', '.join(POSE_AXES)}"
            )
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
class RequirementPrediction:
    """Predicted distribution of one required statistic over a new horizon."""

    requirement: Requirement
    horizon_s: float
    confidence: float  # the fraction of horizons the threshold must cover
    predicted_quantile: float  # the confidence quantile, parameter uncertainty in
    predicted_median: float
    predicted_90: tuple[float, float]  # 5 % and 95 % quantiles
    prob_within: float  # P(statistic <= threshold) for a new horizon
    n_draws: int

    def to_dict(self) -> dict:
        """JSON-ready (every field, a subclass's too)."""
        r = self.requirement
        own = {f.name: getattr(self, f.name) for f in fields(self)[1:]}
        return {
            "requirement": r.text,
            "axis": r.axis,
            "statistic": r.stat,
            "threshold": r.threshold,
            "unit": AXIS_UNITS[r.axis],
            **own,
            "predicted_90": list(self.predicted_90),
        }


@dataclass
class RequirementResult(RequirementPrediction):
    """The prediction and the verdict: bounds of the true confidence quantile."""

    verdict_confidence: float = VERDICT_CONFIDENCE
    quantile_estimate: float = float("nan")  # the confidence quantile at the point estimate
    quantile_bounds: tuple[float, float] = (float("nan"), float("nan"))  # lower, upper
    met_confidence: float = float("nan")  # share of parameter draws within the threshold
    unidentified: tuple[str, ...] = ()  # the axis' parameters these sessions do not identify
    converged: bool = True  # the axis' fit converged (else every parameter is unidentified)

    @property
    def verdict(self) -> str:
        """``"holds"``, ``"fails"`` or ``"undecided"`` at :attr:`verdict_confidence`;
        undecided while a parameter of the axis is not identified (the bounds take it as
        known)."""
        if self.unidentified:
            return "undecided"
        if self.quantile_bounds[1] <= self.requirement.threshold:
            return "holds"
        if self.quantile_bounds[0] > self.requirement.threshold:
            return "fails"
        return "undecided"

    @property
    def holds(self) -> bool:
        """The requirement is shown to hold: the upper bound is within the threshold."""
        return self.verdict == "holds"

    def reason(self) -> str:
        """Why the requirement is not shown to hold (empty when it holds)."""
        if self.holds:
            return ""
        r = self.requirement
        u = AXIS_UNITS[r.axis]
        lo, hi = self.quantile_bounds
        what = (
            f"over {self.horizon_s:g} s the {100 * self.confidence:g} % quantile of {r.axis} "
            f"{r.stat} is {self.quantile_estimate:.4g} {u}, "
            f"{100 * self.verdict_confidence:g} % bounds [{lo:.4g}, {hi:.4g}]"
        )
        if self.verdict == "fails":
            return f"{r.text} fails: {what} > {r.threshold:.4g}"
        if not self.converged:
            return (f"{r.text} cannot tell: the fit of {r.axis} did not converge ({what}, "
                    "from a point that is no optimum)")
        if self.unidentified:
            them = "it" if len(self.unidentified) == 1 else "them"
            return (f"{r.text} cannot tell: {', '.join(self.unidentified)} of {r.axis} not "
                    f"identified from these sessions ({what}, taking {them} as known)")
        return (
            f"{r.text} cannot tell: {what} straddle {r.threshold:.4g} (met with confidence "
            f"{self.met_confidence:.2f}; more sessions narrow the bounds)"
        )

    def to_dict(self) -> dict:
        """JSON-ready."""
        return {
            **super().to_dict(),
            "quantile_bounds": list(self.quantile_bounds),
            "verdict": self.verdict,
            "holds": self.holds,
            "reason": self.reason(),
            "unidentified": list(self.unidentified),
            "converged": self.converged,
        }


_LEVELS = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def horizon_statistics(
    abs_err: np.ndarray, stats: tuple[str, ...] = REQUIRE_STATS
) -> dict[str, np.ndarray]:
    """``{stat: (B, A)}`` of ``|e|`` series ``(B, N, A)`` over their samples, for ``stats``."""
    out = {}
    if "rms" in stats:
        out["rms"] = np.sqrt(np.mean(abs_err**2, axis=1))
    levels = [k for k in _LEVELS if k in stats]
    if levels:
        q = np.quantile(abs_err, [_LEVELS[k] for k in levels], axis=1)
        out.update(zip(levels, q, strict=True))
    if "max" in stats:
        out["max"] = abs_err.max(axis=1)
    return out


@dataclass(frozen=True)
class Projection:
    """How requirements are projected: over ``horizon_s`` (s), at quantile ``confidence``,
    from ``n_draws`` horizons of seed ``seed``, drawing the parameters when
    ``parameter_uncertainty``; ``inherited_variance`` (6,) units² is the alignment's own
    error a new session also carries (constant over a horizon, drawn anew for each:
    :meth:`sessions.PreparedCampaign.future_variance`); ``verdict_confidence`` in (0.5, 1)
    is the one-sided confidence of each verdict bound."""

    horizon_s: float = 60.0
    confidence: float = 0.95
    n_draws: int = 1000
    seed: int = 0
    parameter_uncertainty: bool = True
    inherited_variance: np.ndarray | None = None
    verdict_confidence: float = VERDICT_CONFIDENCE


@dataclass(frozen=True)
class _Horizons:
    """Where horizons are simulated: the grid (s), the segment lengths (s), the axes."""

    t: np.ndarray
    lengths: np.ndarray
    axes: list[int]

    @classmethod
    def of(cls, series: list[ErrorSeries], horizon_s: float, axes: list[int]) -> _Horizons:
        """A horizon at the campaign's median period, with its segment lengths."""
        if horizon_s <= 0:
            raise FitError(f"--horizon must be > 0 s, got {horizon_s}")
        dt = float(np.median(np.concatenate([np.diff(s.t_s) for s in series])))
        t = np.arange(int(np.ceil(horizon_s / dt)) + 1) * dt
        return cls(t, segment_lengths(series), axes)

    def pattern(self, rng: np.random.Generator) -> np.ndarray:
        """Relocalization flags of one horizon (docs/POSE_ERROR.md)."""
        reloc = np.zeros(self.t.size, dtype=bool)
        first = rng.choice(self.lengths)
        edges = [first * rng.uniform()]
        while edges[-1] < self.t[-1]:
            edges.append(edges[-1] + max(float(rng.choice(self.lengths)), 1e-9))
        idx = np.searchsorted(self.t, np.array(edges[:-1]))
        reloc[idx[idx < self.t.size]] = True
        reloc[0] = True
        return reloc


def _columns(requirements: list[Requirement], h: _Horizons) -> list[tuple[int, str]]:
    """(column among the simulated axes, statistic) of every requirement."""
    return [(h.axes.index(POSE_AXES.index(r.axis)), r.stat) for r in requirements]


def _quantile_per_set(
    h: _Horizons, sets: np.ndarray, columns: list[tuple[int, str]], level: float, n_horizons: int,
    rng: np.random.Generator, session_sd: np.ndarray | None,
) -> np.ndarray:
    """``(B, R)`` the ``level`` quantile of every required statistic under each parameter set.

    ``sets`` ``(B, A, 4)``; ``n_horizons`` horizons per set, every set under the same
    relocalization patterns and the same normals (common random numbers)."""
    b, a = sets.shape[:2]
    per_call = int(np.clip(_SAMPLE_BUDGET // (b * h.t.size * a), 1, n_horizons))
    batch = max(1, _BATCH_SAMPLES // (h.t.size * a))
    stats = []
    for j0 in range(0, n_horizons, per_call):
        k = min(per_call, n_horizons - j0)
        streams = rng.integers(np.iinfo(np.uint64).max, size=(k, a), dtype=np.uint64, endpoint=True)
        p = np.repeat(sets, k, axis=0)
        all_streams = np.tile(streams, (b, 1))
        reloc = h.pattern(rng)
        # every series has its own random stream: simulating them in batches that stay
        # in the cache gives the same series as all at once
        cols = np.empty((p.shape[0], len(columns)))
        for i0 in range(0, p.shape[0], batch):
            i1 = min(p.shape[0], i0 + batch)
            e = simulate_errors(p[i0:i1], h.t, reloc, i1 - i0, rng, session_sd, all_streams[i0:i1])
            for n, (c, s) in enumerate(columns):
                cols[i0:i1, n] = horizon_statistics(np.abs(e[:, :, [c]]), (s,))[s][:, 0]
        stats.append(cols.reshape(b, k, len(columns)))
    return np.quantile(np.concatenate(stats, axis=1), level, axis=1)


def predict_requirements(
    requirements: list[Requirement], model: PoseErrorModel, series: list[ErrorSeries],
    how: Projection = Projection(),
) -> list[RequirementPrediction]:
    """Predicted distribution of every required statistic over a horizon (docs/POSE_ERROR.md)."""
    if not requirements:
        return []
    rng = np.random.default_rng(how.seed)
    n_draws = how.n_draws
    h, params, cov, quant, sd = _setup(requirements, model, series, how)
    if how.parameter_uncertainty:
        drawn = draw_params(params, cov, n_draws, rng, quant)
    else:
        drawn = np.broadcast_to(params, (n_draws, *params.shape)).copy()
    asked = tuple({r.stat for r in requirements})
    stats: dict[str, list[np.ndarray]] = {k: [] for k in asked}
    for j0 in range(0, n_draws, _CHUNK):
        j1 = min(n_draws, j0 + _CHUNK)
        e = simulate_errors(drawn[j0:j1], h.t, h.pattern(rng), j1 - j0, rng, sd)
        for k, v in horizon_statistics(np.abs(e), asked).items():
            stats[k].append(v)
    table = {k: np.concatenate(v) for k, v in stats.items()}
    out = []
    for r, (c, _) in zip(requirements, _columns(requirements, h), strict=True):
        x = table[r.stat][:, c]
        q = np.quantile(x, [how.confidence, 0.5, 0.05, 0.95])
        met = float(np.mean(x <= r.threshold))
        band = (float(q[2]), float(q[3]))
        out.append(RequirementPrediction(
            r, how.horizon_s, how.confidence, float(q[0]), float(q[1]), band, met, n_draws
        ))  # fmt: skip
    return out


def judge_requirements(
    requirements: list[Requirement], model: PoseErrorModel, series: list[ErrorSeries],
    how: Projection = Projection(),
) -> list[RequirementResult]:
    """:func:`predict_requirements` and the verdict of every requirement (docs/POSE_ERROR.md).

    ``how.parameter_uncertainty=False``: both bounds are the point estimate's quantile."""
    verdict_confidence = how.verdict_confidence
    if not 0.5 < verdict_confidence < 1.0:
        raise FitError(f"--verdict-confidence must be in (0.5, 1), got {verdict_confidence}")
    preds = predict_requirements(requirements, model, series, how)
    if not preds:
        return []
    rng = np.random.default_rng([how.seed, 1])
    h, params, cov, quant, sd = _setup(requirements, model, series, how)
    cols = _columns(requirements, h)
    centre = _quantile_per_set(h, params[None], cols, how.confidence, CENTRE_HORIZONS, rng, sd)[0]
    ratio = np.ones((1, len(requirements)))
    if how.parameter_uncertainty:
        sets = np.concatenate([params[None], draw_params(params, cov, BOUND_DRAWS, rng, quant)])
        q = _quantile_per_set(h, sets, cols, how.confidence, HORIZONS_PER_DRAW, rng, sd)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(q[0] > 0, q[1:] / q[0], 1.0)
        med = np.median(ratio, axis=0)
        ratio /= np.where(med > 0, med, 1.0)
    out = []
    for n, p in enumerate(preds):
        per_set = centre[n] * ratio[:, n]
        lo, hi = np.quantile(per_set, [1.0 - verdict_confidence, verdict_confidence])
        out.append(RequirementResult(
            **vars(p), verdict_confidence=verdict_confidence,
            quantile_estimate=float(centre[n]), quantile_bounds=(float(lo), float(hi)),
            met_confidence=float(np.mean(per_set <= p.requirement.threshold)),
            unidentified=model.axes[p.requirement.axis].unidentified(),
            converged=model.axes[p.requirement.axis].converged,
        ))
    return out


def _setup(
    requirements: list[Requirement], model: PoseErrorModel, series: list[ErrorSeries],
    how: Projection,
) -> tuple[_Horizons, np.ndarray, np.ndarray, list, np.ndarray | None]:
    """The horizons; point estimates ``(A, 4)``, log covariances ``(A, 4, 4)``, sigma_b
    quantile functions and inherited standard deviations (units) of the required axes."""
    h = _Horizons.of(series, how.horizon_s, sorted({POSE_AXES.index(r.axis) for r in requirements}))
    fits = [model.axes[POSE_AXES[i]] for i in h.axes]
    params = model.params_array()[h.axes]
    cov = np.stack([f.cov_log_usable() for f in fits])
    v = how.inherited_variance
    sd = None if v is None else np.sqrt(np.asarray(v)[h.axes])
    return h, params, cov, [f.sigma_b_quantile for f in fits], sd
