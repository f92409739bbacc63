"""``sensorbench fit pose-error`` and ``sensorbench validate``: the pose-sensor error model."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from sensorbench.cli import cli, subgroup
from sensorbench.commands import options as opt
from sensorbench.commands.progress import progress_bar
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import atomic_figures, atomic_output, check_output, force_option

_SESSION_OPTS = [
    click.argument(
        "sessions", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False)
    ),
    click.option("--sensor", required=True, help="Pose stream of the sensor under test."),
    click.option(
        "--reference", default="mocap", show_default=True, help="Pose stream of the reference."
    ),
    opt.flag_option("--planar",
        "Align frames by yaw + translation only (planar robot) instead of SE(3)."),
    opt.flag_option("--no-align",
        "The sensor already reports in the reference frame: no spatial alignment "
        "(the same as --align none)."),
    click.option("--align", type=click.Choice(["auto", "campaign", "session", "none"]),
        default="auto", show_default=True,
        help="Frame transforms: one for all SESSIONS (campaign), one each (session), none, "
        "or auto: campaign when all SESSIONS are in one map, else session (docs/POSE_ERROR.md)."),
    opt.number_option(
        "--max-offset", None, opt.FiniteFloat(0.0, 3600.0), 0.5,
        "Largest time offset between sensor and reference clocks searched, s.",
    ),
    opt.number_option(
        "--time-offset", None, opt.FiniteFloat(-opt.MAX_SECONDS, opt.MAX_SECONDS), None,
        "Known clock offset, s (reference time = sensor time + offset); "
        "default: estimated from angular rates.",
    ),
    opt.number_option(
        "--max-gap", None, opt.FiniteFloat(0.0, 3600.0, min_open=True), None,
        "Longest gap in a track interpolated across, s (default: 3 x each track's "
        "median sample spacing, so a sensor at any rate from 1 Hz up is paired).",
    ),
    opt.window_options(
        "Use only samples from this time on (s from each session's start: its "
        "earliest sample of any stream, the origin of every time reported).",
        "Use only samples before this time (s)."),
]


@dataclass(frozen=True)
class _Selection:
    """SESSIONS and how the sensor's stream is paired with the reference's in them."""

    sessions: tuple[str, ...]
    sensor: str
    reference: str
    planar: bool
    no_align: bool
    align: str  # campaign, session or none
    max_offset: float  # s
    time_offset: float | None  # s, reference time = sensor time + offset
    max_gap: float | None  # s; None: from each track's sample spacing
    t_start: float | None  # s from each session's start
    t_end: float | None

    def prepare(self) -> Any:
        """The campaign aligned in time and space, with its frame check (``prepare_campaign``)."""
        from sensorbench.characterize.pose.sessions import (
            load_tracks,
            prepare_campaign,
            session_names,
        )

        paths = list(self.sessions)
        return prepare_campaign(
            [load_tracks(p, self.sensor, self.reference, self.t_start, self.t_end) for p in paths],
            session_names(paths), paths, "none" if self.no_align else self.align, self.planar,
            self.time_offset, self.max_offset, self.max_gap,
        )  # fmt: skip


def _selection(**values: Any) -> _Selection:
    """:class:`_Selection` of the options' values; the sensor must not be the reference."""
    selection = _Selection(**values)
    if selection.sensor == selection.reference:  # the error would be zero by construction
        raise click.BadParameter(
            f"the sensor and the reference are both stream {selection.sensor!r}; "
            "compare two different pose streams", param_hint="'--sensor' / '--reference'")
    return selection


_session_options = opt.stack(
    opt.grouped("selection", _selection, *_SESSION_OPTS),
    opt.json_option("One JSON document on stdout."),
    click.option(
        "--plots", type=click.Path(file_okay=False), help="Directory for PNG figures (created)."
    ),
)
"""The options shared by ``fit pose-error`` and ``validate``; the command gets
:class:`_Selection`'s fields as one ``selection`` argument."""


@subgroup("fit").command("pose-error")
@_session_options
@opt.output_option("Write the model (TOML).", force="OUTPUT and figures")
def fit_pose_error_cmd(selection: _Selection, as_json: bool, plots: str | None,
        output: str | None, force: bool) -> None:
    """Fit the pose-error model of SENSOR against REFERENCE over SESSIONS (HDF5).

    Per axis (x, y, z in m; roll, pitch, yaw in rad) a relocalization offset (sigma_b),
    Gauss-Markov noise (sigma, tau_s in s) and white noise (sigma_v), with 95 % intervals,
    the time offset (s) and alignment; -o writes the model file. See docs/POSE_ERROR.md.
    """
    from sensorbench.characterize.pose.sessions import fit_prepared
    from sensorbench.logs.check import refuse_unusable
    from sensorbench.report.pose_display import FitSummary

    if output:
        check_output(output, force=force, inputs=selection.sessions)
    refuse_unusable(selection.sessions, "fit pose-error")
    campaign = selection.prepare()
    with progress_bar("fitting the pose-error model", enabled=not as_json) as bar:
        model = fit_prepared(
            campaign.prepared, selection.sensor, selection.reference,
            time_offset=campaign.time_offset, progress=bar,
        )  # fmt: skip
    summary = FitSummary.of(campaign, model)
    figures = []
    if plots:
        from sensorbench.characterize.pose.plots import plot_allan, plot_error_bands

        params = model.params_array()
        with atomic_figures(plots, force=force, inputs=selection.sessions) as out:
            for s in campaign.series:
                figures.append(plot_error_bands(s, params, out / f"{s.name}_error.png"))
            figures.append(plot_allan(summary.allan, out / "allan.png"))
        figures = [str(Path(plots) / Path(f).name) for f in figures]
    for w in summary.warnings:
        click.echo(f"warning: {w}", err=True)
    if output:
        with atomic_output(output, force=force, inputs=selection.sessions) as tmp:
            model.save(tmp)
    if as_json:
        click.echo(to_json(summary.to_dict(figures, output)))
        return
    for line in summary.lines():
        click.echo(line)
    if output:
        click.echo(f"model written to {output}")
    for f in figures:
        click.echo(f"figure: {f}")


def _requirements(
    require: tuple[str, ...], horizon: float, confidence: float, verdict_confidence: float
) -> tuple[list[Any], Any]:
    """The ``--require`` requirements, parsed (a bad one fails before any work), and how
    they are projected (a ``Projection``: the draws, seed and the campaign's variance are
    set once known)."""
    from sensorbench.characterize.pose.requirements import Projection, Requirement

    how = Projection(horizon, confidence, verdict_confidence=verdict_confidence)
    return [Requirement.parse(r) for r in require], how


_requirement_options = opt.grouped(
    "asked", _requirements,
    click.option("--require", "require", multiple=True, metavar="AXIS.STAT<=VALUE[UNIT]",
        help="Accuracy requirement: STAT of |error| over --horizon within VALUE in a fraction "
        "--confidence of horizons, e.g. x.p95<=5cm or yaw.p99<=1deg; STAT in rms, p50, p95, "
        "p99, max; VALUE in m or rad unless a unit (mm, cm, m, rad, mrad, deg) is given; "
        "verdict: holds, fails or cannot tell. Repeatable."),
    opt.number_option(
        "--horizon", None, opt.FiniteFloat(min=0.0, min_open=True), 60.0,
        "Horizon of the required statistics, s.",
    ),
    opt.number_option(
        "--confidence", None, opt.FiniteFloat(0.5, 1.0, max_open=True), 0.95,
        "Fraction of horizons whose statistic a requirement asks to be within VALUE "
        "(the statistic's quantile that is judged).",
    ),
    opt.number_option(
        "--verdict-confidence", None, opt.FiniteFloat(0.5, 1.0, min_open=True, max_open=True), 0.95,
        "Confidence of each bound of a requirement's verdict.",
    ),
)  # fmt: skip
"""``--require`` and how requirements are judged: one ``asked`` argument
(:func:`_requirements`)."""


@cli.command("validate")
@_session_options
@opt.number_option("--draws", None, opt.DRAWS, 1000, "Monte Carlo draws per session.")
@opt.seed_option(help="Random seed.")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False),
    help="Validate this model file on every session instead of leave-one-session-out refits.")
@opt.number_option(
    "--alpha", None, opt.FiniteFloat(0.0, 1.0, min_open=True, max_open=True), 0.05,
    "Family-wise level over all sessions, axes and statistics.",
)  # fmt: skip
@opt.flag_option("--no-parameter-uncertainty",
    "Simulate with the point estimates only "
    "(default: draw parameters from the fit's uncertainty).")
@force_option("figures in --plots")
@opt.number_option(
    "--scale-tolerance", None, opt.FiniteFloat(0.0, 1.0), 0.005,
    "SCALE fails when the similarity scale's 95 % interval excludes 1 by more than "
    "this fraction.",
)
@_requirement_options
@click.pass_context
def validate_cmd(ctx: click.Context, selection: _Selection, as_json: bool, plots: str | None,
        draws: int, seed: int, model_path: str | None, alpha: float,
        no_parameter_uncertainty: bool, force: bool, scale_tolerance: float,
        asked: tuple[list[Any], Any]) -> None:
    """Leave-one-session-out Monte Carlo validation of the pose-error model.

    Places each session's real error statistics among simulated ones at family-wise level
    ALPHA, then the verdict on the model and each --require over --horizon. Exit 0 when
    the model and every requirement hold, 1 naming what failed or could not be told. See
    docs/POSE_ERROR.md, "Validation".
    """
    from sensorbench.characterize.pose.error_model import PoseErrorModel, fit_pose_error
    from sensorbench.characterize.pose.requirements import judge_requirements
    from sensorbench.characterize.pose.validate import validate_sessions
    from sensorbench.characterize.pose.verdict import assess
    from sensorbench.logs.check import refuse_unusable
    from sensorbench.report.pose_display import (
        alignment_warnings,
        validation_document,
        validation_lines,
    )

    requirements, how = asked
    refuse_unusable(selection.sessions, "validate")
    # fail fast on a bad file or a model of another sensor
    model = PoseErrorModel.load(model_path, sensor=selection.sensor) if model_path else None
    campaign = selection.prepare()
    series = campaign.series
    uncertain = not no_parameter_uncertainty
    with progress_bar("validating", enabled=not as_json) as bar:
        report = validate_sessions(
            series, draws, seed, model, alpha, uncertain, folds=campaign.folds, progress=bar
        )
    campaign_model = model or fit_pose_error(series)
    how = replace(how, n_draws=draws, seed=seed, parameter_uncertainty=uncertain,
        inherited_variance=campaign.future_variance())  # fmt: skip
    judged = judge_requirements(requirements, campaign_model, series, how)
    outcome = assess(
        campaign.prepared, campaign_model, report, campaign.frames, campaign.align,
        selection.planar, scale_tolerance, judged,
    )  # fmt: skip
    figures = []
    if plots:
        from sensorbench.characterize.pose.plots import plot_error_bands, plot_rank_histogram

        with atomic_figures(plots, force=force, inputs=selection.sessions) as out:
            for s, chk in zip(series, report.sessions, strict=True):
                figures.append(plot_error_bands(s, chk.params, out / f"{s.name}_validate.png"))
            figures.append(plot_rank_histogram(report, out / "rank_histogram.png"))
        figures = [str(Path(plots) / Path(f).name) for f in figures]
    aligned = alignment_warnings(campaign)
    for w in [*aligned, *report.warnings]:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        doc = validation_document(report, campaign, selection.sensor)
        doc.update(figures=figures, model_file=model_path, verdict=outcome.to_dict(),
            alignment_warnings=aligned)  # fmt: skip
        click.echo(to_json(doc))
    else:
        lines = [*validation_lines(report, campaign), *outcome.lines()]
        for line in [*lines, *(f"figure: {f}" for f in figures)]:
            click.echo(line)
    if not outcome.passed:
        ctx.exit(1)
