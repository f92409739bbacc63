"""Session-file commands: ``info``, ``check``, ``import``, ``export``."""

from __future__ import annotations

import json
from pathlib import Path

import click

from sensorbench.logs.exporters import FORMATS as EXPORT_FORMATS
from sensorbench.logs.exporters import export_stream
from sensorbench.logs.importers import READERS, import_file


def register(cli: click.Group) -> None:
    """Attach ``info``, ``check``, ``export`` and the ``import`` sub-commands."""
    from sensorbench.cli import subgroup

    cli.add_command(info_cmd)
    cli.add_command(check_cmd)
    cli.add_command(export_cmd)
    group = subgroup("import", "Import foreign files (mocap, pose logs, pod CSV) into a session.")
    for what in ("mocap", "pose", "pods"):
        group.add_command(_import_command(what))


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


@click.command("info")
@click.argument("session", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def info_cmd(session: Path, as_json: bool) -> None:
    """Streams, counts, rates (Hz), time span (s), gaps and device metadata of SESSION."""
    from sensorbench.logs.info import session_info

    info = session_info(session)
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
        return
    click.echo(
        f"{info['path']}  label={info['label']!r}  status={info['status']}  "
        f"schema v{info['schema_version']}  written by sensorbench {info['software_version']}  "
        f"created {info['created_utc']}"
    )
    click.echo(
        f"{'kind':<8} {'name':<16} {'count':>10} {'span s':>9} {'rate Hz':>9} "
        f"{'max gap s':>9} {'gaps>3x':>7}  details"
    )
    for st in info["streams"]:
        count = {"lidar": "turns", "raw": "chunks"}.get(st["kind"], "count")
        extra = {
            "lidar": lambda s: f"{s['points']} points",
            "raw": lambda s: f"{s['bytes']} bytes",
            "encoder": lambda s: f"{s['counters']} counters{', IMU' if s['has_imu'] else ''}",
            "pose": lambda s: (
                f"{s['attrs'].get('kind')}, valid {s['valid_fraction']:.1%}, "
                f"{s['relocalizations']} relocalizations"
            ),
        }[st["kind"]](st)
        meta = {
            k: v
            for k, v in st["attrs"].items()
            if k in ("model", "serial", "port_path", "firmware")
        }
        if meta:
            extra += "  " + " ".join(f"{k}={v}" for k, v in meta.items())
        click.echo(
            f"{st['kind']:<8} {st['name']:<16} {st.get(count, 0):>10} "
            f"{_fmt_s(st.get('span_s')):>9} "
            f"{_fmt_s(st.get('rate_hz')):>9} {_fmt_s(st.get('max_gap_s')):>9} "
            f"{st.get('gaps_over_3x_median', 0):>7}  {extra}"
        )
    if info["events"]:
        click.echo("events: " + ", ".join(f"{k}={v}" for k, v in sorted(info["events"].items())))
    if info["truth"]:
        click.echo(f"truth: {len(info['truth'])} datasets (simulated session)")


@click.command("check")
@click.argument("session", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--recover/--no-recover",
    default=True,
    show_default=True,
    help="Rebuild a file whose writer was killed (the original is kept as NAME.orig.h5).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def check_cmd(ctx: click.Context, session: Path, recover: bool, as_json: bool) -> None:
    """Validate SESSION against the format; recover it if its writer died.

    Exit 0 when the file is valid (after recovery), 1 when it has format errors.
    """
    from sensorbench.logs.check import check_session, recover_session

    report = check_session(session)
    recovery = None
    if recover and not report.errors and report.status.name == "WRITING":
        recovery = recover_session(session)
        report = check_session(session)
    if as_json:
        doc = {
            "path": str(session),
            "ok": report.ok,
            "status": report.status.name.lower(),
            "errors": report.errors,
            "warnings": report.warnings,
            "rows": report.consistent_rows,
        }
        if recovery is not None:
            doc["recovered"] = {
                "backup": str(recovery.backup) if recovery.backup else None,
                "kept_rows": recovery.kept_rows,
                "dropped_rows": recovery.dropped_rows,
            }
        click.echo(json.dumps(doc, indent=2))
    else:
        if recovery is not None:
            click.echo(
                f"recovered {session}: its writer had died; original kept as {recovery.backup}"
            )
            for key, n in recovery.kept_rows.items():
                dropped = recovery.dropped_rows.get(key, 0)
                note = f", dropped {dropped} partly written rows" if dropped else ""
                click.echo(f"  {key}: kept {n} rows{note}")
        for e in report.errors:
            click.echo(f"error: {e}")
        for w in report.warnings:
            click.echo(f"warning: {w}")
        click.echo(f"{session}: {'OK' if report.ok else 'NOT OK'} ({report.status.name.lower()})")
    if not report.ok:
        ctx.exit(1)


def _import_command(what: str) -> click.Command:
    formats = sorted({f for w, f in READERS if w == what})
    kind_help = {
        "mocap": "motion-capture ground truth (pose stream of kind mocap)",
        "pose": "a pose sensor's log (pose stream of kind pose_sensor)",
        "pods": "pod encoder counts (encoder stream)",
    }[what]

    @click.command(
        what,
        help=f"Import FILE, {kind_help}, into a session (created if missing).\n\n"
        "Timestamps must strictly increase; positions are converted to m.",
    )
    @click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
    @click.option("--format", "fmt", type=click.Choice(formats), required=True, help="File format.")
    @click.option(
        "--into",
        "session",
        type=click.Path(dir_okay=False, path_type=Path),
        required=True,
        help="Session file to add the stream to.",
    )
    @click.option("--name", default=None, help="Stream name (default: mocap, pose_sensor or pods).")
    @click.option("--body", default=None, help="Motive: rigid-body name (if the file has several).")
    @click.option(
        "--up",
        type=click.Choice(["y", "z"]),
        default="y",
        show_default=True,
        help="Motive: the export's up axis (y is converted to z-up).",
    )
    def cmd(
        file: Path, fmt: str, session: Path, name: str | None, body: str | None, up: str
    ) -> None:
        options = {"body": body, "up": up} if fmt == "motive" else {}
        stream, n = import_file(what, file, fmt, session, name=name, **options)
        click.echo(f"imported {n} samples from {file} into {session} as stream {stream!r}")

    return cmd


@click.command("export")
@click.argument("session", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--stream", "name", required=True, help="Stream name (or 'events').")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    required=True,
    help="tum (pose streams) or csv (any stream).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), required=True)
def export_cmd(session: Path, name: str, fmt: str, output: Path) -> None:
    """Export one stream of SESSION to a TUM trajectory or a CSV table (SI units, ns times)."""
    n = export_stream(session, name, fmt, output)
    click.echo(f"wrote {n} rows to {output}")
