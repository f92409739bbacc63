"""The report's pose-sensor verdict section: compute (data) and render (HTML), kept apart.

:func:`compute_pose_verdict` runs the model-independent checks of
:mod:`~sensorbench.characterize.pose.verdict` on the sessions the report already
prepared (without re-aligning); :func:`render_pose_verdict` renders the two-part table.
"""

from __future__ import annotations

import html
from dataclasses import replace

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.frames import FRAME_ALPHA, frame_statistics
from sensorbench.characterize.pose.series import AXIS_UNITS, POSE_AXES
from sensorbench.characterize.pose.sessions import PreparedCampaign
from sensorbench.characterize.pose.validate import ValidationReport
from sensorbench.characterize.pose.verdict import Verdict, assess
from sensorbench.report.html import table, verdict_span


def compute_pose_verdict(
    campaign: PreparedCampaign, model: PoseErrorModel, validation: ValidationReport | None
) -> Verdict:
    """The two-part verdict (no requirements) on the report's prepared sessions.

    Sessions aligned each on its own get no frame check (every session's mean error is
    absorbed); under one transform, the campaign's check at :data:`FRAME_ALPHA` (the
    report keeps every session, so it judges them here).
    """
    prepared = campaign.prepared
    frames = None
    if campaign.align == "campaign" and len(prepared) >= 2:
        check = campaign.frames or frame_statistics([p.series for p in prepared])
        frames = replace(check, level=FRAME_ALPHA / len(prepared))
    return assess(prepared, model, validation, frames, campaign.align)


def render_pose_verdict(v: Verdict) -> str:
    """HTML: part 1 (model: per-axis stationarity and trend, scale, frames, Monte Carlo,
    named reasons) and part 2 (requirements, or a note that none were given)."""
    e = html.escape
    reasons = v.reasons()
    parts = [
        "<h2>Pose-sensor verdict</h2>",
        "<p>Part 1 asks whether the model describes the errors, part 2 whether they are "
        "small enough. Part 1 fails with a named reason: DRIFT (τ not inside the "
        "relocalization segments the data has, or a consistent trend within them), SCALE "
        "(similarity scale beyond tolerance), FRAME (a session not in the campaign's map), "
        "MISFIT (the Monte Carlo validation).</p>",
        _axis_table(v),
        table(["check", "result", "verdict"], _check_rows(v), "part 1: model-independent checks"),
        "<p>Model: "
        + verdict_span(v.model_ok, "HOLDS", "FAILED")
        + "</p>"
        + ("<ul>" + "".join(f"<li>{e(str(r))}</li>" for r in reasons) + "</ul>" if reasons else ""),
        _requirements_table(v)
        if v.requirements
        else "<p>Part 2: no accuracy requirement given (<code>sensorbench validate --require"
        "</code> states one and predicts whether it holds).</p>",
    ]
    if v.wrong:
        between = " The requirements are predicted between them." if v.requirements else ""
        parts.append(f"<p>{e(v.wrong_line())}: the nav stack must handle them.{between}</p>")
    return "".join(parts)


def _axis_table(v: Verdict) -> str:
    """Part 1 per axis: τ against the segment lengths, and the per-segment trend."""
    rows = []
    for a in POSE_AXES:
        st, tr = v.stationarity[a], v.trend[a]
        lo, hi = st.tau_ci95_s
        trend = f"{tr.slope:.3g} {AXIS_UNITS[a]}/s, p = {tr.p_value:.2g}" if tr.testable else "n/a"
        ci = f"[{lo:.3g}, {hi:.3g}]" if st.tau_identified else "not identified"
        rows.append([
            a, f"{st.tau_s:.3g}", ci,
            f"{st.median_segment_s:.3g}", verdict_span(st.stationary, "stationary", "DRIFT"),
            trend, verdict_span(not tr.failed, "–", "DRIFT"),
        ])  # fmt: skip
    head = ["axis", "τ (s)", "95 % interval", "median segment (s)", "stationary", "trend"]
    caption = "part 1: τ against the segment lengths, and per-segment trends"
    return table([*head, "trend verdict"], rows, caption)


def _check_rows(v: Verdict) -> list[list[str]]:
    """Part 1's campaign checks that ran: scale, frames, Monte Carlo."""
    checks = []
    if (sc := v.scale) is not None:
        checks.append([
            "scale (" + ("Sim(2)" if sc.planar else "Sim(3)") + ")",
            f"{sc.scale:.4f} [{sc.ci95[0]:.4f}, {sc.ci95[1]:.4f}], batch means over "
            f"{sc.n_blocks} blocks, tolerance {100 * sc.tolerance:g} %",
            verdict_span(not sc.failed, "ok" if sc.testable else "not testable", "SCALE"),
        ])  # fmt: skip
    if v.frames is not None:
        bad = v.frames.failed_sessions()
        shown = ", ".join(bad) if bad else ("one map" if v.frames.testable else "not testable")
        checks.append(["frames", shown, verdict_span(not bad, "ok", "FRAME")])
    if v.validation is not None:
        failed = f"{len(v.validation.failures())} failed checks"
        passed = verdict_span(v.validation.passed, "passed", failed)
        checks.append(["Monte Carlo", v.validation.mode, passed])
    return checks


def _requirements_table(v: Verdict) -> str:
    """Part 2: each requirement's quantile, its bounds, the prediction and the verdict."""
    rows = [
        [r.requirement.text, f"{r.horizon_s:g}", f"{r.quantile_estimate:.4g}",
         f"[{r.quantile_bounds[0]:.4g}, {r.quantile_bounds[1]:.4g}]", f"{r.predicted_quantile:.4g}",
         verdict_span(r.holds, "holds", "FAILS" if r.verdict == "fails" else "cannot tell")]
        for r in v.requirements
    ]  # fmt: skip
    head = ["requirement", "horizon (s)", "quantile", "its bounds"]
    return table([*head, "predicted for a new horizon", "verdict"], rows, "part 2: requirements")
