"""The two-part verdict on a pose sensor: does the model describe its errors (``DRIFT``,
``SCALE``, ``FRAME``, ``MISFIT``), are they small enough (each ``--require``)?
``passed`` (exit 0): both. docs/POSE_ERROR.md ("The verdict")."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sensorbench.characterize.pose.drift import (
    AxisStationarity,
    AxisTrend,
    AxisVarianceGrowth,
    stationarity,
    trend_test,
    variance_growth,
)
from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.frames import FrameCheck
from sensorbench.characterize.pose.requirements import RequirementResult
from sensorbench.characterize.pose.scale import SCALE_TOLERANCE, ScaleCheck, scale_check
from sensorbench.characterize.pose.series import AXIS_UNITS, POSE_AXES
from sensorbench.characterize.pose.validate import ValidationReport


@dataclass(frozen=True)
class Reason:
    """One named failure of the model part."""

    code: str  # DRIFT, SCALE, FRAME or MISFIT
    subject: str  # the axis, the session, or "campaign"
    message: str

    def __str__(self) -> str:
        return f"{self.code} {self.subject}: {self.message}"


@dataclass
class Verdict:
    """Both parts of the verdict, with every check behind them."""

    align: str
    stationarity: dict[str, AxisStationarity]
    trend: dict[str, AxisTrend]
    scale: ScaleCheck | None
    frames: FrameCheck | None
    validation: ValidationReport | None
    requirements: list[RequirementResult] = field(default_factory=list)
    growth: dict[str, AxisVarianceGrowth] = field(default_factory=dict)
    wrong: dict = field(default_factory=dict)
    """The model's wrong relocalizations (:meth:`error_model.WrongRelocs.to_dict`): the
    requirements are predicted between them, and the nav stack must handle them."""

    def wrong_line(self) -> str:
        """The wrong relocalizations in one line (empty when the model does not say)."""
        return wrong_lines(self.wrong, None)[0] if self.wrong else ""

    def reasons(self) -> list[Reason]:
        """Every named failure of the model part, DRIFT, SCALE, FRAME, then MISFIT."""
        out = []
        for a in POSE_AXES:
            st = self.stationarity[a]
            if not st.stationary:
                out.append(Reason("DRIFT", a, st.reason()))
            tr = self.trend[a]
            if tr.failed:
                u = AXIS_UNITS[a]
                out.append(Reason(
                    "DRIFT", a, f"the error trends within relocalization segments: mean slope "
                    f"{tr.slope:.3g} {u}/s (se {tr.se:.2g}, p = {tr.p_value:.2g} over "
                    f"{tr.n_segments} segments)",
                ))
        for a, g in self.growth.items():
            if g.failed:
                out.append(Reason(
                    "DRIFT", a, f"the error's variance grows with the segment length beyond the "
                    f"model's (slope {g.slope:.3g} per ln s of the observed/expected "
                    f"ratio, p = {g.p_value:.2g} over {g.n_segments} segments)",
                ))
        if self.scale is not None and self.scale.failed:
            out.append(Reason("SCALE", "campaign", self.scale.reason()))
        if self.frames is not None:
            for s in self.frames.failed_sessions():
                out.append(Reason("FRAME", s, self.frames.reason(s)))
        if self.validation is not None:
            for f in self.validation.failures():
                out.append(Reason(
                    "MISFIT", f"{f['session']}/{f['axis']}",
                    f"{f['statistic']} {f['observed']:.4g} outside the simulated band "
                    f"[{f['sim_band'][0]:.4g}, {f['sim_band'][1]:.4g}] "
                    f"(upper-tail p {100 * f['percentile']:.2f} %)",
                ))
        return out

    @property
    def model_ok(self) -> bool:
        """Part 1: no named failure."""
        return not self.reasons()

    @property
    def requirements_ok(self) -> bool:
        """Part 2: every requirement holds (True when none was asked)."""
        return all(r.holds for r in self.requirements)

    @property
    def requirements_verdict(self) -> str:
        """Part 2 in one word: ``"holds"`` (all hold, or none asked), ``"fails"`` (one
        fails), else ``"undecided"``."""
        verdicts = {r.verdict for r in self.requirements}
        if "fails" in verdicts:
            return "fails"
        return "undecided" if "undecided" in verdicts else "holds"

    @property
    def validated(self) -> bool:
        """The model was simulated along held-out sessions (a report of one session is not:
        its checks can name failures, never show that the model holds)."""
        return self.validation is not None

    @property
    def passed(self) -> bool:
        """Both parts hold, the model validated."""
        return self.model_ok and self.validated and self.requirements_ok

    def to_dict(self) -> dict:
        """JSON-ready (the key ``verdict`` of ``validate --json``)."""
        return {
            "passed": self.passed,
            "model": {
                "passed": self.model_ok and self.validated,
                "validated": self.validated,
                "reasons": [asdict(r) for r in self.reasons()],
                "align": self.align,
                "stationarity": {a: v.to_dict() for a, v in self.stationarity.items()},
                "trend": {a: v.to_dict() for a, v in self.trend.items()},
                "variance_growth": {a: v.to_dict() for a, v in self.growth.items()},
                "scale": None if self.scale is None else self.scale.to_dict(),
                "frames": None if self.frames is None else self.frames.to_dict(),
            },
            "requirements": {
                "passed": self.requirements_ok,
                "verdict": self.requirements_verdict,
                "model_rejected": not self.model_ok,
                "items": [r.to_dict() for r in self.requirements],
                "wrong_relocalizations": self.wrong,
            },
        }

    def lines(self) -> list[str]:
        """The two-part verdict as text (the CLI prints it)."""
        out = ["Verdict, part 1 — does the model describe the errors?"]
        out += self._axis_lines() + self._campaign_lines()
        state = "HOLDS" if self.validated else (
            "NOT VALIDATED (no held-out session simulated; the checks above name no failure)")
        out.append("  model: " + (state if self.model_ok else "FAILED"))
        out += [f"    {r}" for r in self.reasons()]
        out.append("Verdict, part 2 — are the errors small enough?")
        if not self.requirements:
            out.append("  no requirement given (--require AXIS.STAT<=VALUE)")
        for req in self.requirements:
            out += _requirement_lines(req)
        if self.wrong:
            between = " (the requirements are judged between them)" if self.requirements else ""
            out.append(f"  {self.wrong_line()}{between}")
        if self.requirements:
            note = "" if self.model_ok else " (predicted from a model that part 1 rejects)"
            word = {"holds": "HOLD", "fails": "FAILED", "undecided": "CANNOT TELL"}
            out.append(f"  requirements: {word[self.requirements_verdict]}{note}")
        if self.passed:
            out.append("VERDICT: PASSED")
        elif self.model_ok and not self.validated:
            out.append("VERDICT: NOT PASSED (the model was not validated: that takes two "
                       "sessions or more, or validate --model)")
        elif self.model_ok and self.requirements_verdict == "undecided":
            out.append("VERDICT: NOT PASSED (a requirement cannot be told from these sessions)")
        else:
            out.append("VERDICT: FAILED")
        return out

    def _axis_lines(self) -> list[str]:
        """Per axis: τ, its interval, the median segment and the drift tests' p-values."""
        out = [
            "  axis    tau (s) [95 %]            median segment (s)  stationary  trend p"
            "   var-growth p"
        ]
        for a in POSE_AXES:
            st, tr, g = self.stationarity[a], self.trend[a], self.growth.get(a)
            lo, hi = st.tau_ci95_s
            ci = f"[{lo:.3g}, {hi:.3g}]" if st.tau_identified else "(not identified)"
            tp = (f"{tr.p_value:.2g}" if tr.testable else "n/a") + (" DRIFT" if tr.failed else "")
            gp = "n/a" if g is None or not g.testable else f"{g.p_value:.2g}"
            gp += " DRIFT" if g is not None and g.failed else ""
            flag = "yes" if st.stationary else "DRIFT"
            out.append(
                f"  {a:6s} {st.tau_s:8.3g} {ci:18s} {st.median_segment_s:12.3g}"
                f"        {flag:10s}  {tp:9s} {gp}"
            )
        return out

    def _campaign_lines(self) -> list[str]:
        """Scale, frames and the Monte Carlo, one line each (those that ran)."""
        out = []
        if self.scale is not None:
            sc = self.scale
            state = "SCALE" if sc.failed else ("ok" if sc.testable else "not testable")
            out.append(
                f"  scale ({'Sim(2)' if sc.planar else 'Sim(3)'}): {sc.scale:.4f} "
                f"[{sc.ci95[0]:.4f}, {sc.ci95[1]:.4f}] (batch means, {sc.n_blocks} blocks), "
                f"tolerance {100 * sc.tolerance:g} %: {state}"
            )
        if self.frames is not None:
            bad = self.frames.failed_sessions()
            if bad:
                state = "not in the campaign's map: " + ", ".join(bad)
            elif self.frames.testable:
                state = "all sessions in one map"
            else:
                state = "not testable (too few relocalizations within sessions)"
            out.append(f"  frames (--align {self.align}): {state}")
        if self.validation is not None:
            v = self.validation
            failed = f"{len(v.failures())} failed checks"
            out.append(f"  Monte Carlo ({v.mode}): " + ("passed" if v.passed else failed))
        return out


def _requirement_lines(req: RequirementResult) -> list[str]:
    """One requirement's verdict, its prediction for a new horizon, and why when not held."""
    q = req.requirement
    u = AXIS_UNITS[q.axis]
    lo, hi = req.quantile_bounds
    words = {"holds": "holds", "fails": "FAILS", "undecided": "CANNOT TELL"}
    out = [
        f"  {q.text:20s} over {req.horizon_s:g} s, {100 * req.confidence:g} % quantile "
        f"{req.quantile_estimate:.4g} {u}, {100 * req.verdict_confidence:g} % bounds "
        f"[{lo:.4g}, {hi:.4g}]: {words[req.verdict]}",
        f"  {'':20s} a new horizon: median {req.predicted_median:.4g} {u}, "
        f"{100 * req.confidence:g} % {req.predicted_quantile:.4g} {u} "
        f"(P within {req.prob_within:.3f})",
    ]
    if not req.holds:
        out.append(f"    {req.reason()}")
    return out


def wrong_lines(found: dict[str, Any], simulated: list[dict[str, Any]] | None) -> list[str]:
    """The wrong relocalizations the fit named (rate, interval, each one) beside the
    simulator's (None: not simulated), one per line."""
    if not found:
        return []
    if "rate" in found:
        lo, hi = found["rate_ci95"]
        head = (
            f"wrong relocalizations: {found['n_wrong']} of {found['n_relocalizations']} named, "
            f"{found['rate'] * 100:.1f} %/reloc [{lo * 100:.1f}, {hi * 100:.1f}] % (95 %)"
        )
    else:
        head = (
            f"wrong relocalizations: no relocalization: nothing to rate "
            f"({found['n_wrong']} named)"
        )
    if found["n_wrong"]:
        head += f", median jump {found['median_jump_m']:.2f} m"
    if simulated is not None:
        head += f"; simulated: {len(simulated)}"
    rows = [("named", w) for w in found["named"]] + [("simulated", w) for w in simulated or []]
    return [head] + [
        f"  {kind:<9} {w['session']} t {w['t_s']:8.2f} s: x {w['jump'][0]:+.3f} m, "
        f"y {w['jump'][1]:+.3f} m, yaw {math.degrees(w['jump'][5]):+.1f}°"
        for kind, w in sorted(rows, key=lambda r: (r[1]["session"], r[1]["t_s"]))
    ]


def scale_inputs(prepared: list) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """``(name, t, sensor position, reference position)`` of prepared sessions (m)."""
    out = []
    for ps in prepared:
        if ps.sensor_position is None:
            continue
        al = ps.alignment
        src = ps.sensor_position
        dst = src @ al.rotation.T + al.translation - ps.series.error[:, :3]
        out.append((ps.series.name, ps.series.t_s, src, dst))
    return out


def assess(
    prepared: list, model: PoseErrorModel, validation: ValidationReport | None,
    frames: FrameCheck | None = None, align: str = "campaign", planar: bool = False,
    scale_tolerance: float = SCALE_TOLERANCE, requirements: list[RequirementResult] | None = None,
) -> Verdict:
    """Run the model-independent checks on prepared sessions and build the verdict.

    ``model``: the model fitted on all the (kept) sessions, or the given model file,
    whose τ is compared with the segment lengths."""
    series = [ps.series for ps in prepared]
    inputs = scale_inputs(prepared)
    scale = (
        scale_check(inputs, planar, per_session=align == "session", tolerance=scale_tolerance)
        if inputs
        else None
    )
    return Verdict(
        align, stationarity(model, series), trend_test(series), scale, frames, validation,
        list(requirements or []), variance_growth(series, model), model.wrong_relocalizations,
    )
