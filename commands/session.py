"""Session-file commands: ``info``, ``check``, ``import``, ``export``, ``split``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from sensorbench.cli import cli, subgroup
from sensorbench.commands import options as opt
from sensorbench.commands.progress import progress_bar
from sensorbench.errors import OutputError
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import atomic_output, same_file
from sensorbench.logs.exporters import FORMATS as EXPORT_FORMATS
from sensorbench.logs.exporters import export_stream
from sensorbench.logs.import_times import DUPLICATE_POLICIES
from sensorbench.logs.importers import (
    MAX_ABS_POSITION_M,
    POD_OPTIONAL_COLUMNS,
    POSE_CSV_COLUMNS,
    READERS,
    import_file,
    parse_column_map,
)
from sensorbench.report import session_display as show

import_group = subgroup("import")


def _into_option(help: str) -> Callable[[Any], Any]:
    """``--into`` (parameter ``session``): the session file an import adds to."""
    return click.option(
        "--into", "session", type=click.Path(dir_okay=False, path_type=Path), required=True,
        help=help,
    )  # fmt: skip


def _duplicates_option(help: str) -> Callable[[Any], Any]:
    """``--duplicates``: what an import does with repeated stamps (default ``last``)."""
    return click.option(
        "--duplicates", type=click.Choice(DUPLICATE_POLICIES), default="last",
        show_default=True, help=help,
    )  # fmt: skip


def _max_position_option(help: str) -> Callable[[Any], Any]:
    """``--max-position-m``: the largest accepted position (m)."""
    return opt.number_option(
        "--max-position-m", None, opt.FiniteFloat(min=0, min_open=True), MAX_ABS_POSITION_M, help
    )


@cli.command("info")
@click.argument("session", type=click.Path(path_type=Path))
@opt.json_option()
def info_cmd(session: Path, as_json: bool) -> None:
    """Streams, counts, rates (Hz), time span (s), gaps and device metadata of SESSION.

    Given a ROS bag instead (a rosbag2 directory, or a .bag, .mcap or .db3 file): its
    topics, message types and counts.
    """
    if session.is_dir() or session.suffix in (".bag", ".mcap", ".db3"):
        from sensorbench.logs.import_rosbag import bag_info

        info, lines = bag_info(session), show.bag_lines
    else:
        from sensorbench.logs.info import session_info

        info, lines = session_info(session), show.info_lines
    click.echo(to_json(info) if as_json else "\n".join(lines(info, session)))


@cli.command("check")
@click.argument("session", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--recover/--no-recover", default=True, show_default=True,
    help="Rebuild a file whose writer was killed (the original is kept as NAME.orig.h5).")
@opt.flag_option("--force",
    "Recover a file whose writer ran on another host (check cannot see whether it "
    "still runs) once you know it has stopped.")
@opt.json_option()
@click.pass_context
def check_cmd(ctx: click.Context, session: Path, recover: bool, force: bool, as_json: bool) -> None:
    """Validate SESSION against the format; recover it if its writer died.

    A file another process is writing (a running capture, an import) is reported
    as in use and left untouched. Exit 0 when the file is valid (after recovery),
    1 when it has format errors, is in use or was not closed.
    """

    from sensorbench.logs.check import check_session, recover_session

    report = check_session(session)
    recovery = None
    recoverable = not report.in_use and (force or not report.writer_unknown)
    # a closed file is rebuilt only when asked (--recover): plain check reports it
    asked = ctx.get_parameter_source("recover") is click.core.ParameterSource.COMMANDLINE
    closed = report.status.name != "WRITING"
    if recover and recoverable and report.repairable and (asked or not closed):
        recovery = recover_session(session, force=force)
        report = check_session(session)
    if as_json:
        click.echo(to_json(show.check_doc(session, report, recovery)))
    else:
        unrecovered = bool(report.writer_unknown) and recover and not force
        click.echo("\n".join(show.check_lines(session, report, recovery, unrecovered)))
    if not report.ok:
        ctx.exit(1)


def _import_command(what: str) -> click.Command:
    formats = sorted({f for w, f in READERS if w == what})
    kind_help = {
        "mocap": "motion-capture ground truth (pose stream of kind mocap)",
        "pose": "a pose sensor's log (pose stream of kind pose_sensor)",
        "pods": "pod encoder counts (encoder stream)",
    }[what]
    checks = (
        "Timestamps must not step backwards; repeated stamps follow --duplicates."
        if what == "pods"
        else "Timestamps must not step backwards; repeated stamps follow --duplicates (a "
        "pose that corrects the one it replaces is flagged RELOCALIZED); positions are "
        "converted to m."
    )

    @click.command(what,
        help=f"Import FILE, {kind_help}, into a session (created if missing).\n\n{checks} "
        "The session changes all at once: a failed or killed import leaves it exactly as "
        "it was.")
    @click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--format", "fmt", type=click.Choice(formats), required=True, help="File format.")
    @_into_option("Session file to add the stream to.")
    @click.option("--name", default=None, help=f"Stream name (default: {_DEFAULT_NAMES[what]}).")
    @_duplicates_option(
        "Lines repeating a timestamp: refuse the file (error), or keep the first or the "
        "last of each run; dropped lines are listed.")
    def cmd(
        file: Path, fmt: str, session: Path, name: str | None, duplicates: str, **extra: Any
    ) -> None:
        if same_file(file, session):
            raise OutputError(f"{file} is both the file to import and the session; nothing done")
        options = _format_options(what, fmt, **extra)
        res = import_file(what, file, fmt, session, name=name, duplicates=duplicates, **options)
        click.echo("\n".join(show.import_lines(res, file, session, duplicates)))

    for option in _format_option_decorators(what):
        cmd = option(cmd)
    return cmd


def _format_options(what: str, fmt: str, body: str | None = None, up: str = "y",
        max_position_m: float | None = None, columns: str | None = None, times: Path | None = None
) -> dict[str, Any]:
    """The reader's keyword options from the format-specific command options."""
    options: dict[str, Any] = {"body": body, "up": up} if fmt == "motive" else {}
    if (times is not None) != (fmt == "kitti"):
        raise click.UsageError("--times FILE goes with --format kitti, and only with it")
    if times is not None:
        options["times"] = times
    if max_position_m is not None:
        options["max_position_m"] = max_position_m
    if columns is not None:
        if fmt != "csv":
            raise click.UsageError("--columns applies to --format csv only")
        options["columns"] = parse_column_map(columns, what)
    return options


def _format_option_decorators(what: str) -> list[Callable[[Any], Any]]:
    """The format-specific options of ``import WHAT``, innermost first."""
    if what == "pods":
        return [click.option("--columns", default=None, metavar="NAME=HEADER,...",
            help="The file's header for each column name it names otherwise, e.g. "
            "t_s=t,c0=count0,c1=count1,c2=count2 (names: one time column t_s [s], t_ms "
            "[ms], t_us [µs], t_ns or host_ns [ns]; counters c0, c1, ...; optional "
            + ", ".join(POD_OPTIONAL_COLUMNS) + ").")]
    return [
        click.option(
            "--times", type=click.Path(dir_okay=False, path_type=Path),
            help="kitti: the times file, one time (s) per line for each pose line.",
        ),
        click.option("--columns", default=None, metavar="NAME=HEADER,...",
            help="csv: the file's header for each column name it names otherwise, e.g. "
            "t_s=time,x=pos_x (names: " + ", ".join(POSE_CSV_COLUMNS) + ")."),
        _max_position_option(
            "Largest accepted |x|, |y|, |z| (m); a larger value is refused as an error."),
        click.option(
            "--up", type=click.Choice(["y", "z"]), default="y", show_default=True,
            help="Motive: the export's up axis (y is converted to z-up).",
        ),
        click.option(
            "--body", default=None, help="Motive: rigid-body name (if the file has several)."
        ),
    ]


_DEFAULT_NAMES = {"mocap": "mocap", "pose": "pose_sensor", "pods": "pods"}


@import_group.command("rosbag")
@click.argument("bag", type=click.Path(exists=True, path_type=Path))
@click.option("--topic", "topics", multiple=True, metavar="TOPIC=NAME[:KIND]",
    help="A topic and the stream it becomes (repeat), e.g. '/tf[base_link]=mocap'; pose "
    "kinds: mocap, pose_sensor, estimate (default: from the name, docs/FORMAT.md).")
@click.option("--tf", "tfs", multiple=True, metavar="PARENT:CHILD=NAME[:KIND]",
    help="The pose of frame CHILD in frame PARENT composed along /tf and /tf_static "
    "(repeat), e.g. map:camera_link=cam.")
@_into_option("Session file to add the streams to.")
@click.option("--reloc-topic", default=None,
    help="Every message on this topic is a relocalization of the pose sensor at its stamp.")
@click.option("--events", "events_topic", metavar="TOPIC",
    help="Diagnostics (DiagnosticArray) or log messages on TOPIC become session events.")
@_duplicates_option("Messages repeating a header stamp: refuse, or keep the first or last.")
@_max_position_option("Largest accepted |x|, |y|, |z| (m).")
def import_rosbag_cmd(bag: Path, topics: tuple[str, ...], tfs: tuple[str, ...], session: Path,
        reloc_topic: str | None, events_topic: str | None, duplicates: str, max_position_m: float
) -> None:
    """Import topics of a ROS bag (rosbag2 sqlite3 or MCAP, ROS 1 .bag) into a session.

    Pose messages and TF become pose streams, LaserScan a lidar stream, JointState an
    encoder stream; header stamps are the sample times. See docs/FORMAT.md.
    """
    from sensorbench.logs.import_rosbag import TfSpec, TopicSpec, import_rosbag, read_rosbag

    if not topics and not tfs:
        raise click.UsageError("name at least one --topic TOPIC=NAME or --tf PARENT:CHILD=NAME")
    specs = [TopicSpec.parse(t) for t in topics]
    chains = [TfSpec.parse(t) for t in tfs]
    with progress_bar(f"reading {bag.name}") as progress:
        parsed = read_rosbag(
            bag, specs, reloc_topic, max_position_m, duplicates,
            tfs=chains, events_topic=events_topic, progress=progress,
        )  # fmt: skip
        import_rosbag(bag, parsed, session)
    lines = show.rosbag_lines(parsed, bag, session, duplicates, reloc_topic, events_topic)
    click.echo("\n".join(lines))


@cli.command("export")
@click.argument("session", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--stream", "name", help="Stream name (or 'events'); mcap: default all.")
@click.option("--format", "fmt", type=click.Choice((*EXPORT_FORMATS, "mcap")), required=True,
    help="tum (pose streams), csv (any stream) or mcap (scans, poses, odometry, pod counts, "
    "transforms and events as ROS 2 messages, for ros2 bag and Foxglove).")
@opt.output_option(required=True, force="OUTPUT")
@opt.flag_option("--skip-invalid",
    "Leave impossible samples out (non-finite or absurd values in valid samples, "
    "times stepping back or repeating, impossible stamps; lidar: their whole turn) and "
    "say how many, instead of refusing the stream.")
@opt.file_option(
    "--pods", "pods_path",
    "mcap: replay the filters on the pod stream (as `replay`) and write /odom and /tf.",
)  # fmt: skip
@opt.file_option(
    "--noise", "noise_path", "mcap with --pods: the filter-noise model; default: untuned."
)
def export_cmd(session: Path, name: str | None, fmt: str, output: Path, skip_invalid: bool,
        pods_path: Path | None, noise_path: Path | None, force: bool) -> None:
    """Export one stream of SESSION to a TUM trajectory or a CSV table (SI units, ns times),
    or its streams to an MCAP file (docs/FORMAT.md); with --pods also the filters'
    odometry replayed on the pod stream, as /odom and /tf.

    A stream holding impossible samples is refused (exit 2, naming the dataset and the
    first bad index) unless --skip-invalid. A session being written, or not closed, is
    refused: its file holds a partial snapshot."""
    from sensorbench.logs.check import refuse_unusable

    if (pods_path or noise_path) and (fmt != "mcap" or pods_path is None):
        raise click.UsageError("--pods (and --noise) go with --format mcap")
    refuse_unusable(session, "export")
    if fmt == "mcap":
        from sensorbench.logs.export_mcap import export_mcap

        odometry = None
        if pods_path is not None:
            from sensorbench.fusion.filter_noise import FilterNoise, load_noise_model
            from sensorbench.fusion.odometry_replay import replay_session
            from sensorbench.fusion.pod_kinematics import load_pod_model

            noise = load_noise_model(noise_path) if noise_path else FilterNoise.default()
            geometry = load_pod_model(pods_path)
            for why in noise.drift_warnings(geometry):
                click.echo(f"warning: {why}", err=True)
            odometry = replay_session(session, geometry, noise).odometry_track()
        with (
            atomic_output(output, force=force, inputs=[session]) as tmp,
            progress_bar(f"writing {output.name}") as progress,
        ):
            done = export_mcap(
                session, tmp, None if name is None else [name], progress,
                skip_invalid=skip_invalid, odometry=odometry,
            )  # fmt: skip
        click.echo("\n".join(show.mcap_lines(done, output)))
        return
    if name is None:
        raise click.UsageError(f"--stream is required for --format {fmt}")
    with atomic_output(output, force=force, inputs=[session]) as tmp:
        table = export_stream(session, name, fmt, tmp, skip_invalid=skip_invalid)
    click.echo(f"wrote {table.rows} rows to {output}")
    if table.skipped:
        click.echo(f"skipped {table.skipped} invalid samples of {name!r} (--skip-invalid)")


@cli.command("split")
@opt.session_argument()
@click.option("--pieces", type=click.IntRange(min=1), default=None, help="N pieces of equal span.")
@click.option("--every", "every_s", type=opt.FiniteFloat(min=0, min_open=True),
    help="Pieces of S seconds (the last one shorter).")
@opt.output_option(
    "Directory for the pieces (STEM_pieceK.h5).", required=True, directory=True, dest="out_dir"
)
def split_cmd(session: Path, pieces: int | None, every_s: float | None, out_dir: Path) -> None:
    """Split SESSION into consecutive pieces by time (--pieces N or --every S).

    Streams, events and the truth of simulated sessions are sliced consistently; each
    piece records where it came from. `validate` on the pieces refits leaving one
    piece out at a time.
    """
    from sensorbench.logs.split import split_session

    for path in split_session(session, out_dir, pieces, every_s):
        click.echo(f"wrote {path}")


for _what in ("mocap", "pose", "pods"):
    import_group.add_command(_import_command(_what))
