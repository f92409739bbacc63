"""The report's pose-sensor verdict section: compute (data) and render (HTML), kept apart.

:func:`compute_pose_verdict` runs the model-independent checks of
:mod:`~sensorbench.characterize.pose.verdict` on the sessions the report already
prepared (without re-aligning); :func:`render_pose_verdict` shows it as ``validate`` prints it.
"""

from __future__ import annotations

import html
from dataclasses import replace

from sensorbench.characterize.pose.error_model import PoseErrorModel
from sensorbench.characterize.pose.frames import FRAME_ALPHA, frame_statistics
from sensorbench.characterize.pose.sessions import PreparedCampaign
from sensorbench.characterize.pose.validate import ValidationReport
from sensorbench.characterize.pose.verdict import Verdict, assess


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
    """HTML: the two-part verdict as ``validate`` prints it (:meth:`Verdict.lines`)."""
    text = html.escape("\n".join(v.lines()))
    return (
        "<h2>Pose-sensor verdict</h2>"
        "<p>Part 1 asks whether the model describes the errors, Part 2 whether they are "
        "small enough. Part 1 fails with a named reason: DRIFT (τ not inside the "
        "relocalization segments the data has, or a consistent trend within them), SCALE "
        "(similarity scale beyond tolerance), FRAME (a session not in the campaign's map), "
        "MISFIT (the Monte Carlo validation). Part 2 needs a requirement "
        "(<code>sensorbench validate --require</code>).</p>"
        f"<pre>{text}</pre>"
    )
