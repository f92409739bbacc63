"""What ``fit pose-error`` and ``validate`` print: text lines (mm, degrees, s or ms;
:data:`series.DISPLAY_UNITS`) and JSON (SI units)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.characterize.pose import gls_align
from sensorbench.characterize.pose.allan import allan_cross_check
from sensorbench.characterize.pose.drift import AxisStationarity, stationarity
from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.gm_montecarlo import STAT_NAMES
from sensorbench.characterize.pose.series import AXIS_UNITS, DISPLAY_UNITS, POSE_AXES
from sensorbench.characterize.pose.validate import ValidationReport
from sensorbench.characterize.pose.verdict import wrong_lines
from sensorbench.report.data import pose_params, simulated_wrong
from sensorbench.report.data import validation_document as document


def fmt(v: float, unit: str) -> str:
    """``v`` (stored unit ``unit``: m, rad or s) in its display unit, with the unit."""
    k, shown, form = DISPLAY_UNITS[unit]
    return f"{form.format(k * v)} {shown}"


def model_table(model: PoseErrorModel) -> list[str]:
    """Every axis' parameters with their 95 % intervals (or why not identified)."""
    lines = ["axis   param        value            95 % interval"]
    flat = "not identified (the likelihood is flat in it)"
    stuck = "not identified: the fit did not converge (no interval)"
    for p in pose_params(model):
        lo, hi = (fmt(v, p.unit).strip() for v in p.ci95)
        interval = f"[{lo}, {hi}]" if p.identified else (flat if p.converged else stuck)
        lines.append(f"{p.axis:6s} {p.param:8s} {fmt(p.value, p.unit)}   {interval}")
    return lines


def ms(value_s: float, se_s: float) -> str:
    """``+12.34 ± 0.56 ms`` from seconds (no ± without a standard error)."""
    se = f" ± {1000 * se_s:.2f}" if np.isfinite(se_s) else ""
    return f"{1000 * value_s:+.2f}{se} ms"


def offset_line(offset: Any) -> str:
    """The campaign's time offset (:class:`sessions.TimeOffset`), its se and how it was found."""
    if offset.method == "given":
        return f"time offset {1000 * offset.offset_s:+.2f} ms (given)"
    own = ", ".join(f"{n} {ms(v['offset_s'], v['se_s'])}" for n, v in offset.sessions.items())
    stuck = "" if offset.converged else "; NOT CONVERGED: not the optimum, its se means nothing"
    if offset.pooled:
        agree = (
            f"consistency p = {offset.consistency_p:.2g}"
            if np.isfinite(offset.consistency_p)
            else "one session: no other to agree with"
        )
        return (
            f"time offset {ms(offset.offset_s, offset.se_s)} (one for the campaign, GLS "
            f"with the frame; the sessions' own: {own}; {agree}{stuck})"
        )
    return (
        f"time offsets per session (they differ, p = {offset.consistency_p:.2g}{stuck}): {own}"
    )


def alignment_warnings(campaign: Any) -> list[str]:
    """What a user must not overlook in a campaign's time offset and frame
    (:class:`sessions.PreparedCampaign`): a cross-correlation at its search limit, offsets
    that differ, and every GLS that stopped at its iteration cap, the pooled offset's
    included."""
    out = [
        f"{ps.series.name}: the angular-rate cross-correlation that starts the GLS peaks "
        f"at its search limit (±{1000 * ps.alignment.max_offset_s:.0f} ms): the true offset "
        f"may lie outside it (the GLS went on to {1000 * ps.alignment.offset_s:+.1f} ms); "
        "widen --max-offset or give --time-offset"
        for ps in campaign.prepared
        if ps.alignment.offset_at_search_limit
    ]
    offset = campaign.time_offset
    if offset.method == "gls" and not offset.pooled:
        out.append(
            "the sessions' time offsets differ (consistency p = "
            f"{offset.consistency_p:.2g}): each session keeps its own, so validation "
            "cannot hold a session's offset out"
        )
    fits = [(a.series.name, g) for a, g in zip(campaign.alone, campaign.own_fits, strict=True)]
    joint = campaign.fit if campaign.align == "campaign" else None  # else no GLS of its own
    out += [
        f"{name}: the GLS time offset and frame did not converge within "
        f"{gls_align.MAX_GLS_ITER} Gauss-Newton iterations: the offset, the frame and "
        "their standard errors are not the optimum's"
        for name, g in [*fits, ("the campaign", joint)]
        if g is not None and not g.converged
    ]
    for name, own in offset.sessions.items():
        if stuck := own.get("pieces", {}).get("unconverged_pieces"):
            out.append(
                f"{name}: the GLS time offset of piece(s) {', '.join(map(str, stuck))} of "
                f"{gls_align.PIECES} did not converge within {gls_align.MAX_GLS_ITER} "
                "Gauss-Newton iterations: the clock-drift test (chi2, slope) and the se it "
                "inflates are not the optimum's"
            )
    pooling = offset.method == "gls" and offset.pooled and len(offset.sessions) > 1
    if pooling and not offset.converged:  # one session: its own warning says it
        stuck = [n for n, v in offset.sessions.items() if not v.get("converged", True)]
        out.append(
            f"the campaign's time offset {ms(offset.offset_s, offset.se_s)} is not converged: "
            + (f"it pools the own GLS offsets of {', '.join(stuck)}, which did not converge"
               if stuck else "its GLS did not converge")
            + " (the truth may lie beyond the GLS's reach from the cross-correlation's "
            "start): it is not the optimum and its se means nothing; widen --max-offset or "
            "give --time-offset"
        )
    return out


def relocalizations(ps: Any) -> str:
    """``relocalizations: method (k)`` of a prepared session, and the detections that
    change when the time offset moves by ± 2σ."""
    seg = ps.segmentation
    out = f"relocalizations: {seg.method} ({ps.series.n_segments - 1})"
    if k := seg.unstable_times_s.size:
        times = ", ".join(f"{t:.2f}" for t in seg.unstable_times_s)
        out += (
            f"; {k} detection(s) change when the time offset moves by ±2 x "
            f"{1000 * seg.offset_sigma_s:.1f} ms: at {times} s"
        )
    return out


def trajectory_lines(ps: Any) -> list[str]:
    """ATE, RPE, time offset and alignment of a prepared session, as evo states them."""
    al, te = ps.alignment, ps.trajectory
    offset = ms(al.offset_s, al.offset_se_s)
    lines = [f"time offset {offset} ({al.time_offset_method}); alignment {ps.alignment_used()}"]
    if te is not None:
        a = te.ate_m.scaled(1000.0)
        r, d = te.rpe_m.scaled(1000.0), te.rpe_deg.scaled(1.0)
        lines.append(
            f"ATE (evo_ape, translation): RMSE {a['rmse']:.2f} mm, mean {a['mean']:.2f}, "
            f"median {a['median']:.2f}, max {a['max']:.2f} mm over {te.ate_m.n} pairs"
        )
        lines.append(
            f"RPE (evo_rpe, delta {te.rpe_delta_frames} frames = {te.rpe_delta_s:.2f} s): "
            f"translation RMSE {r['rmse']:.2f} mm (mean {r['mean']:.2f}, median "
            f"{r['median']:.2f}, max {r['max']:.2f}), rotation RMSE {d['rmse']:.3f} deg "
            f"(max {d['max']:.3f}) over {te.rpe_m.n} pairs"
        )
    return lines


def fit_warnings(campaign: Any, model: PoseErrorModel) -> list[str]:
    """What ``fit pose-error`` warns of (and the report shows): :func:`alignment_warnings`
    and every axis whose fit did not converge."""
    return alignment_warnings(campaign) + [
        f"{a}: the fit did not converge: its parameters have no interval and count as "
        "not identified (a requirement on it cannot be told)"
        for a in POSE_AXES
        if not model.axes[a].converged
    ]


@dataclass
class FitSummary:
    """What ``fit pose-error`` states about a fitted campaign: τ against the segment lengths
    and the Allan cross-check per axis, and the warnings a user must not overlook."""

    campaign: Any
    model: PoseErrorModel
    station: dict[str, AxisStationarity]
    allan: dict[str, dict[str, Any]]
    warnings: list[str]

    @classmethod
    def of(cls, campaign: Any, model: PoseErrorModel) -> FitSummary:
        """The cross-checks and warnings of ``model`` fitted on ``campaign``."""
        series = campaign.series
        return cls(
            campaign, model, stationarity(model, series),
            allan_cross_check(series, model.params_array()), fit_warnings(campaign, model),
        )

    def to_dict(self, figures: list[str], model_file: str | None) -> dict[str, Any]:
        """The JSON document of ``fit pose-error --json``."""
        prepared, frames = self.campaign.prepared, self.campaign.frames
        doc = self.model.to_dict()
        doc["warnings"] = self.warnings
        doc["sessions"] = [ps.to_dict() for ps in prepared]
        doc["rms"] = {ps.series.name: r for ps, r in zip(prepared, self.session_rms(), strict=True)}
        doc["allan"] = {
            a: {k: v for k, v in self.allan[a].items() if "adev" not in k} for a in POSE_AXES
        }
        doc["figures"] = figures
        doc["model_file"] = model_file
        doc["stationarity"] = {a: v.to_dict() for a, v in self.station.items()}
        doc["frames"] = None if frames is None else frames.to_dict()
        doc["time_offset"] = self.campaign.time_offset.to_dict()
        return doc

    def session_rms(self) -> list[dict[str, float]]:
        """Each prepared session's RMS error per axis (m; rad for the rotations)."""
        rms = [np.sqrt(np.mean(ps.series.error**2, axis=0)) for ps in self.campaign.prepared]
        return [dict(zip(POSE_AXES, r.tolist(), strict=True)) for r in rms]

    def lines(self) -> list[str]:
        """The text ``fit pose-error`` prints (without warnings, model file and figures)."""
        camp = self.campaign
        out = []
        if camp.frames is not None:
            out += [
                f"FRAME: {camp.frames.reason(n)}; left out of the fit"
                for n in camp.frames.failed_sessions()
            ]
        if camp.decision:
            out.append(f"frame alignment: {camp.decision}")
        out.append(offset_line(camp.time_offset))
        for ps, rms in zip(camp.prepared, self.session_rms(), strict=True):
            s = ps.series
            shown = ", ".join(f"{a} {fmt(r, AXIS_UNITS[a]).strip()}" for a, r in rms.items())
            out.append(f"{s.name}: {s.n} samples over {s.duration_s:.1f} s, {relocalizations(ps)}")
            out.append(f"  RMS error: {shown}")
            out += [f"  {line}" for line in trajectory_lines(ps)]
        out += model_table(self.model)
        out += wrong_lines(self.model.wrong_relocalizations, None)
        out += self._stationarity_lines()
        return out + self._allan_lines()

    def _stationarity_lines(self) -> list[str]:
        out = [
            "Stationarity: tau (and its 95 % upper bound) against the median relocalization "
            "segment (limit = fraction x median)"
        ]
        for a, st in self.station.items():
            hi = st.tau_ci95_s[1] if st.tau_identified else float("nan")
            out.append(
                f"  {a:6s} tau {st.tau_s:8.3g} s  upper {hi:8.3g} s  limit {st.limit_s:8.3g} s  "
                + ("stationary" if st.stationary else "DRIFT: not stationary here")
            )
        return out

    def _allan_lines(self) -> list[str]:
        out = [
            "Allan cross-check (tau from the ADEV peak / 1.89 vs fitted tau; a peak only at "
            "an interior maximum):"
        ]
        if not self.allan["T_s"]:
            return [*out, "  none: no gap-free piece of 4 samples or more"]
        for a in POSE_AXES:
            c = self.allan[a]
            peak = f"{c['tau_from_peak_s']:8.3f} s" if c["peak_found"] else "no interior peak"
            out.append(
                f"  {a:6s} tau_peak {peak}  tau_fit {c['tau_fit_s']:8.3f} s  "
                f"ADEV data/model in [{c['ratio_min']:.2f}, {c['ratio_max']:.2f}]"
            )
        return out


def validation_lines(report: ValidationReport, campaign: Any) -> list[str]:
    """The Monte Carlo validation as ``validate`` prints it: per session its upper-tail p
    (the share of draws at or above the real statistic)."""
    out = []
    if campaign.decision:
        out.append(f"frame alignment: {campaign.decision}")
    out.append(
        f"{report.mode}, {report.n_draws} draws, family-wise alpha {report.alpha} "
        f"(per session {report.alpha_session:.4f})"
    )
    for chk, ps in zip(report.sessions, campaign.prepared, strict=True):
        al = ps.alignment
        out.append(
            f"{chk.name}: {'PASS' if chk.passed else 'FAIL'} (joint p = {chk.p_joint:.4f}); "
            f"{ps.series.n} samples, time offset {ms(al.offset_s, al.offset_se_s)}, "
            + relocalizations(ps)
        )
        if chk.wrong_t_s:
            out.append("  wrong relocalizations named (their jumps given to every draw) at "
                       + ", ".join(f"{t:.3f} s" for t in chk.wrong_t_s))  # fmt: skip
        out.append("  axis   " + " ".join(f"{s:>9s}" for s in STAT_NAMES))
        for i, a in enumerate(POSE_AXES):
            cells = [
                f"{100 * p:8.2f}{'*' if bad else ' '}" if np.isfinite(p) else f"{'n/a':>9s}"
                for p, bad in zip(chk.percentile[i], chk.failed[i], strict=True)
            ]
            out.append(f"  {a:6s} " + " ".join(cells))
    for f in report.failures():
        out.append(
            f"FAILED: session {f['session']} axis {f['axis']} statistic {f['statistic']}: "
            f"observed {f['observed']:.4g}, simulated 99.14 % band "
            f"[{f['sim_band'][0]:.4g}, {f['sim_band'][1]:.4g}], upper-tail p "
            f"{100 * f['percentile']:.2f} %"
        )
    out.append("upper-tail p in % (draws at or above the real statistic); * = failed check. "
               "Monte Carlo " + ("PASSED" if report.passed else "FAILED"))  # fmt: skip
    return out


def validation_document(report: ValidationReport, campaign: Any, sensor: str) -> dict[str, Any]:
    """The JSON document of ``validate --json`` (without figures, model file and verdict)."""
    found = [simulated_wrong(Path(ps.source), sensor) for ps in campaign.prepared]
    doc = document(report, [None if f is None else len(f) for f in found])
    doc["prepared"] = [ps.to_dict() for ps in campaign.prepared]
    return doc
