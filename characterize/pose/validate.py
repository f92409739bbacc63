"""Leave-one-session-out Monte Carlo validation of the pose-error model: each held-out
session's statistics (:data:`STAT_NAMES`) among B simulations of a model that session did
not inform; failing sessions named by step-down. docs/POSE_ERROR.md ("Validation")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from sensorbench.characterize.pose.error_model import (
    PARAMS,
    AxisFit,
    PoseErrorModel,
    Progress,
    fit_groups,
    name_wrong,
    start_exempt,
)
from sensorbench.characterize.pose.gm_montecarlo import (
    STAT_NAMES,
    draw_params,
    error_statistics,
    simulate_statistics,
)
from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries
from sensorbench.errors import FitError

SIDAK_BAND = (0.0043, 0.9957)
"""Per-axis two-sided band of one statistic for a 95 % family of six axes."""


class Fold(NamedTuple):
    """A held-out session's error, its training sessions' errors, the variance (6,)
    units² its error inherits from the others' alignment (None: nothing), and whether the
    GLS offset and frame fitted to the others converged (False: the alignment the
    held-out session is judged under is not their optimum's)."""

    held_out: ErrorSeries
    training: list[ErrorSeries]
    inherited_variance: np.ndarray | None
    converged: bool = True


FoldSource = Callable[[list[int], frozenset[int]], list[Fold]]
"""``(targets, excluded) -> [Fold, ...]``: one per target, trained without ``excluded``."""


def _transform(stat: str, x: np.ndarray) -> np.ndarray:
    if stat in ("rms", "max_abs", "growth", "nis", "kurtosis"):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x)
    if stat == "lag1":
        return np.arctanh(np.clip(x, -1 + 1e-12, 1 - 1e-12))
    return np.asarray(x, dtype=float)


@dataclass
class SessionCheck:
    """Validation of one held-out session. Arrays are ``(6 axes, 7 stats)``."""

    name: str
    observed: np.ndarray
    percentile: np.ndarray  # upper-tail p: (1 + #{T_sim ≥ T_obs}) / (B + 1)
    z: np.ndarray
    sim_median: np.ndarray
    sim_low: np.ndarray
    sim_high: np.ndarray
    critical_z: float
    p_joint: float
    failed: np.ndarray
    params: np.ndarray  # (6, 4) model used for this session
    wrong_t_s: tuple[float, ...] = ()  # its wrong relocalizations named (s), jumps given

    @property
    def passed(self) -> bool:
        """True when no check of this session failed."""
        return not bool(self.failed.any())

    def failures(self) -> list[dict[str, Any]]:
        """The failed checks: axis, statistic, observed, simulated band, upper-tail p
        (key ``percentile``), z."""
        return [{
            "session": self.name,
            "axis": POSE_AXES[i],
            "statistic": STAT_NAMES[j],
            "observed": float(self.observed[i, j]),
            "sim_band": [float(self.sim_low[i, j]), float(self.sim_high[i, j])],
            "percentile": float(self.percentile[i, j]),
            "z": float(self.z[i, j]),
        } for i, j in zip(*np.nonzero(self.failed), strict=True)]


@dataclass
class ValidationReport:
    """Campaign-level result of :func:`validate_sessions`."""

    sessions: list[SessionCheck]
    n_draws: int
    seed: int
    alpha: float
    alpha_session: float
    mode: str  # "leave-one-session-out" or "given model"
    parameter_uncertainty: bool
    extra: dict[str, Any] = field(default_factory=dict)
    named: list[str] = field(default_factory=list)  # step-down order, worst first
    warnings: list[str] = field(default_factory=list)  # e.g. a fold's GLS not converged

    @property
    def passed(self) -> bool:
        """True when every session passed."""
        return all(s.passed for s in self.sessions)

    def failures(self) -> list[dict[str, Any]]:
        """All failed checks across sessions."""
        return [f for s in self.sessions for f in s.failures()]

    def rank_histogram(self, bins: int = 10) -> dict[str, list[int]]:
        """Counts of upper-tail p in ``bins`` equal bins, per statistic, over sessions × axes.

        A correct model gives a flat histogram; U-shape = spread too small, dome = too
        large, slope = bias."""
        edges = np.linspace(0.0, 1.0, bins + 1)
        out = {}
        for j, stat in enumerate(STAT_NAMES):
            p = np.concatenate([s.percentile[:, j] for s in self.sessions])
            p = p[np.isfinite(p)]
            out[stat] = np.histogram(p, bins=edges)[0].astype(int).tolist()
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary with every upper-tail p (key ``percentile``) and verdict."""
        failed_axes: dict[str, list[str]] = {}  # the statistics failed in any session
        for f in self.failures():
            if f["statistic"] not in failed_axes.setdefault(f["axis"], []):
                failed_axes[f["axis"]].append(f["statistic"])
        sessions = []
        for s in self.sessions:
            per_axis = {}
            for i, a in enumerate(POSE_AXES):
                per_axis[a] = {
                    "passed": not bool(s.failed[i].any()),
                    "stats": {
                        st: {
                            "observed": _f(s.observed[i, j]),
                            "percentile": _f(s.percentile[i, j]),
                            "z": _f(s.z[i, j]),
                            "sim_median": _f(s.sim_median[i, j]),
                            "sim_band": [_f(s.sim_low[i, j]), _f(s.sim_high[i, j])],
                            "inside_sidak_band": bool(
                                SIDAK_BAND[0] <= s.percentile[i, j] <= SIDAK_BAND[1]
                            ),
                            "failed": bool(s.failed[i, j]),
                        }
                        for j, st in enumerate(STAT_NAMES)
                    },
                }
            sessions.append({
                "name": s.name,
                "passed": s.passed,
                "critical_z": s.critical_z,
                "p_joint": s.p_joint,
                "wrong_relocalizations_t_s": list(s.wrong_t_s),
                "model_params": {
                    a: dict(zip(PARAMS, map(_f, s.params[i]), strict=True))
                    for i, a in enumerate(POSE_AXES)
                },
                "axes": per_axis,
            })
        return {
            "passed": self.passed,
            "mode": self.mode,
            "n_draws": self.n_draws,
            "seed": self.seed,
            "alpha_family": self.alpha,
            "alpha_per_session": self.alpha_session,
            "parameter_uncertainty": self.parameter_uncertainty,
            "sidak_band_per_axis": list(SIDAK_BAND),
            "statistics": list(STAT_NAMES),
            "failures": self.failures(),
            "failed_axes": failed_axes,
            "rank_histogram": self.rank_histogram(),
            "named": list(self.named),
            "warnings": list(self.warnings),
            "sessions": sessions,
            **self.extra,
        }


def _f(x: float) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def check_session(
    series: ErrorSeries, params: np.ndarray, cov_log: np.ndarray | None, n_draws: int,
    rng: np.random.Generator, alpha_session: float,
    sigma_b_quantile: list[Callable[[np.ndarray], np.ndarray]] | None = None,
    inherited_variance: np.ndarray | None = None, shift: np.ndarray | None = None,
) -> SessionCheck:
    """Place one session's real statistics among ``n_draws`` simulations of the model.

    With ``cov_log`` every draw has its own parameters (:func:`draw_params`, sigma_b from
    ``sigma_b_quantile`` per axis); ``inherited_variance`` (6,) units²: an offset constant
    over the session added to every draw; ``shift`` (N, 6): the named wrong
    relocalizations' jumps, given to every draw. Innovations are whitened by ``params``."""
    sim_params = (
        params if cov_log is None else draw_params(params, cov_log, n_draws, rng, sigma_b_quantile)
    )
    sd = None if inherited_variance is None else np.sqrt(np.asarray(inherited_variance, float))
    sims = simulate_statistics(
        sim_params, series.t_s, series.reloc, n_draws, rng, whiten=params, session_sd=sd,
        wrong=series.wrong, shift=shift,
    )
    obs = error_statistics(series.t_s, series.reloc, series.error, params, series.wrong)
    a, s = len(POSE_AXES), len(STAT_NAMES)
    observed = np.stack([obs[k] for k in STAT_NAMES], axis=1)
    sim = np.stack([sims[k] for k in STAT_NAMES], axis=2)  # (B, A, S)
    percentile = np.full((a, s), np.nan)
    z = np.zeros((a, s))
    z_draws = np.zeros((n_draws, a, s))
    valid = np.isfinite(observed) & np.all(np.isfinite(sim), axis=0)
    for j, stat in enumerate(STAT_NAMES):
        ts = _transform(stat, sim[:, :, j])
        to = _transform(stat, observed[:, j])
        mu = ts.mean(axis=0)
        sd = ts.std(axis=0)
        ok = valid[:, j] & (sd > 0) & np.isfinite(to)
        valid[:, j] = ok
        sd = np.where(ok, sd, 1.0)
        z[:, j] = np.where(ok, (to - mu) / sd, 0.0)
        z_draws[:, :, j] = np.where(ok, (ts - mu) / sd, 0.0)
        cnt = np.sum(sim[:, :, j] >= observed[None, :, j], axis=0)
        percentile[:, j] = np.where(ok, (1.0 + cnt) / (n_draws + 1.0), np.nan)
    max_draws = np.abs(z_draws).reshape(n_draws, -1).max(axis=1)
    max_obs = float(np.abs(z).max())
    crit = float(np.quantile(max_draws, 1.0 - alpha_session, method="higher"))
    p_joint = float((1.0 + np.sum(max_draws >= max_obs)) / (n_draws + 1.0))
    q = np.quantile(sim, [SIDAK_BAND[0], 0.5, SIDAK_BAND[1]], axis=0)
    return SessionCheck(
        series.name, observed, percentile, z, q[1], q[0], q[2], crit, p_joint,
        valid & (np.abs(z) > crit), np.asarray(params, dtype=float),
        tuple(series.t_s[series.wrong].tolist()),
    )


def held_out_wrong(
    held: ErrorSeries, fits: dict[str, AxisFit], n_usual: int, n_relocs: int,
    others: Sequence[ErrorSeries] = (),
) -> tuple[ErrorSeries, np.ndarray]:
    """``held`` with its wrong relocalizations named under ``fits`` (sigma_b from ``n_usual``
    of ``n_relocs`` offsets; Bonferroni over ``n_relocs`` and ``held``'s), and ``(N, 6)``
    the named jumps over their segments (m, rad). ``others``: the sessions aligned with
    ``held``: its start is a candidate unless an alignment none of them shares absorbed
    its mean (:func:`~sensorbench.characterize.pose.error_model.start_exempt`)."""
    sb2 = np.array([fits[a].sigma_b for a in POSE_AXES]) ** 2
    exempt = start_exempt([held, *others])[:1]
    found = name_wrong([held], fits, sb2, max(n_usual - 1, 1), n_relocs + held.n_segments, exempt)
    marked = replace(held, wrong=found.masks[0])
    seg = marked.segment_id
    jumps = np.zeros((marked.n_segments, len(POSE_AXES)))
    jumps[marked.wrong_segments] = found.jump
    return marked, jumps[seg] * marked.wrong_segments[seg][:, None]


def _sidak(alpha: float, m: int) -> float:
    return 1.0 - (1.0 - alpha) ** (1.0 / m)


def validate_sessions(
    series: list[ErrorSeries], n_draws: int = 1000, seed: int = 0,
    model: PoseErrorModel | None = None, alpha: float = 0.05, parameter_uncertainty: bool = True,
    folds: FoldSource | None = None, progress: Progress | None = None,
) -> ValidationReport:
    """Validate the model on every session (leave-one-session-out unless ``model``).

    Without ``model`` each session is checked against a model refitted on the others
    (≥ 2 sessions), failures named by step-down; ``folds`` gives each held-out session's
    error and its training errors (default: ``series`` as they are)."""
    if not series:
        raise FitError("no sessions to validate")
    if n_draws < 100:
        raise FitError(f"need at least 100 draws for percentiles, got {n_draws}")
    n = len(series)
    if model is not None:
        return _given_model(series, model, n_draws, seed, alpha, parameter_uncertainty, progress)
    if n < 2:
        raise FitError(
            "leave-one-session-out needs at least 2 sessions; pass a model file to "
            "validate a single session"
        )

    def fixed(targets: list[int], excluded: frozenset[int]) -> list[Fold]:
        return [
            Fold(series[i], [series[j] for j in range(n) if j != i and j not in excluded], None)
            for i in targets
        ]

    source = folds or fixed
    checks: dict[int, SessionCheck] = {}
    remaining, excluded, named = list(range(n)), frozenset[int](), []
    warnings: list[str] = []
    for step in range(n):
        alpha_s = _sidak(alpha, len(remaining))
        rng = np.random.default_rng(seed if step == 0 else [seed, step])
        streams = rng.spawn(n)
        round_folds = source(remaining, excluded)
        warnings += [
            w for w in _fold_warnings(round_folds, [series[j].name for j in excluded])
            if w not in warnings
        ]
        got = _round(
            round_folds, n_draws, [streams[i] for i in remaining], alpha_s,
            parameter_uncertainty, progress if step == 0 else None,
        )
        checks.update(zip(remaining, got, strict=True))
        failing = [i for i in remaining if not checks[i].passed]
        if not failing:
            break
        worst = max(failing, key=lambda i: float(np.abs(checks[i].z).max()))  # farthest out
        named.append(checks[worst].name)
        excluded = excluded | {worst}
        remaining = [i for i in remaining if i != worst]
        if len(remaining) < 2:
            named += [checks[i].name for i in remaining if not checks[i].passed]
            break
    return ValidationReport(
        [checks[i] for i in range(n)], n_draws, seed, alpha, _sidak(alpha, n),
        "leave-one-session-out", parameter_uncertainty, named=named, warnings=warnings,
    )


def _fold_warnings(folds: list[Fold], excluded: list[str]) -> list[str]:
    """One warning per fold whose training alignment did not converge."""
    without = f" (and without {', '.join(excluded)})" if excluded else ""
    return [
        f"held out {f.held_out.name}{without}: the GLS time offset and frame fitted to the "
        "other sessions did not converge (or pools offsets that did not): the alignment "
        "it was judged under is not their optimum's"
        for f in folds if not f.converged
    ]


def _given_model(
    series: list[ErrorSeries], model: PoseErrorModel, n_draws: int, seed: int, alpha: float,
    parameter_uncertainty: bool, progress: Progress | None,
) -> ValidationReport:
    """Every session checked against ``model`` (no refit); every failing one named."""
    n = len(series)
    alpha_s = _sidak(alpha, n)
    streams = np.random.default_rng(seed).spawn(n)
    given = []
    wr = model.wrong_relocalizations
    n_relocs = model.axes["x"].n_segments or int(wr.get("n_relocalizations", 0))  # offsets
    n_usual = n_relocs - int(wr.get("n_wrong", 0))  # offsets less the named
    for i, s in enumerate(series):
        others = [x for j, x in enumerate(series) if j != i]
        marked, shift = held_out_wrong(s, model.axes, n_usual, n_relocs, others)
        given.append(check_session(
            marked, model.params_array(),
            model.cov_log_array() if parameter_uncertainty else None, n_draws, streams[i],
            alpha_s, model.sigma_b_quantiles(), shift=shift,
        ))
        if progress is not None:
            progress(i + 1, n)
    named = [c.name for c in given if not c.passed]
    return ValidationReport(
        given, n_draws, seed, alpha, alpha_s, "given model", parameter_uncertainty, named=named
    )


def _round(
    folds: list[Fold], n_draws: int, streams: list[np.random.Generator],
    alpha_s: float, parameter_uncertainty: bool, progress: Progress | None = None,
) -> list[SessionCheck]:
    """Fit every fold's training sessions (one batch) and check its held-out session."""
    train = [s for fold in folds for s in fold.training]
    groups, k = [], 0
    for fold in folds:
        groups.append(list(range(k, k + len(fold.training))))
        k += len(fold.training)
    n = len(folds)
    refits = None if progress is None else (lambda d, t: progress(d * 1000 // t, 1000 * (n + 1)))
    fits = fit_groups(train, groups, refits)
    out = []
    for i, ((held, _, inherited, _), f, rng) in enumerate(zip(folds, fits, streams, strict=True)):
        if progress is not None:
            progress(1000 * (i + 1), 1000 * (n + 1))
        m = PoseErrorModel(f)
        n_relocs = f.wrong.n_segments
        marked, shift = held_out_wrong(held, f, n_relocs - len(f.wrong.sessions), n_relocs)
        out.append(check_session(
            marked, m.params_array(), m.cov_log_array() if parameter_uncertainty else None,
            n_draws, rng, alpha_s, m.sigma_b_quantiles(), inherited, shift,
        ))
    if progress is not None:
        progress(1000 * (n + 1), 1000 * (n + 1))
    return out
