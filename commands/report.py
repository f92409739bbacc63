"""``sensorbench report``: one self-contained HTML page with every table and figure."""

from __future__ import annotations

from pathlib import Path

import click

from sensorbench.cli import cli
from sensorbench.commands import options as opt
from sensorbench.commands.progress import progress_bar
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import force_option


@cli.command("report")
@opt.session_argument("sessions", many=True)
@opt.output_option(
    "Directory for report.html (created).", required=True, directory=True, dest="out_dir"
)
@click.option("--models", "models_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Directory with pods.toml, noise.toml, pose_error.toml (from the fit commands).")
@opt.number_option(
    "--draws", None, opt.DRAWS, 1000, "Monte Carlo draws per session for the validation."
)
@opt.seed_option(help="Monte Carlo seed.")
@click.option("--sensor", default="pose_sensor", show_default=True, help="Pose stream under test.")
@click.option("--reference", default="mocap", show_default=True, help="Reference pose stream.")
@click.option("--align", type=click.Choice(["auto", "campaign", "session"]), default="auto",
    show_default=True,
    help="Pose sessions' frame: auto (one transform when the FRAME check finds them in one "
    "map, else one per session, as evo_ape -a aligns each run), campaign (one transform "
    "for all; the FRAME check names a session that does not fit) or session.")
@force_option("DIR/report.html")
@opt.json_option("Print the report's content as JSON.")
def report_cmd(sessions: tuple[Path, ...], out_dir: Path, models_dir: Path | None, draws: int,
        seed: int, sensor: str, reference: str, align: str, force: bool, as_json: bool) -> None:
    """Write DIR/report.html: every table and figure for SESSIONS (HDF5).

    Lidar datasheets, pod geometry (needs --models), replay errors, the pose-error model
    and its validation, each session's provenance; simulated sessions show their truth
    beside. The page is self-contained. See docs/ARCHITECTURE.md.
    """
    from sensorbench.logs.check import refuse_unusable
    from sensorbench.report.build import ReportOptions, build_report

    refuse_unusable(sessions, "report")
    with progress_bar("report", enabled=not as_json) as bar:
        options = ReportOptions(
            draws=draws, seed=seed, sensor=sensor, reference=reference, align=align
        )
        rep = build_report(
            list(sessions), out_dir, models_dir=models_dir, options=options,
            progress=None if bar is None else bar.say, force=force, steps=bar,
        )  # fmt: skip
    click.echo(to_json({"report": rep.path, **rep.data}) if as_json else f"report: {rep.path}")
