"""The ``sensorbench`` command line: a click group that imports a command's modules
(:data:`COMMANDS`) only when that command runs, and maps library errors to exit code 2."""

from __future__ import annotations

import sys
from importlib import import_module

import click

from sensorbench.errors import SensorbenchError

EXIT_BAD_INPUT = 2

_EMULATE = ("a1", "capture", "ld19")
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "bench": (("bench",), "Measure throughput and cost as ratios and rates, each from several rounds."),
    "bringup": (("capture",), "Staggered power-up check of every configured device, then close them."),
    "capture": (("capture",), "Record every configured device into one session file."),
    "characterize": (("lidar",), "Characterize a sensor from a session."),
    "check": (("session",), "Validate SESSION against the format; recover it if its writer died."),
    "decode": (("a1", "ld19"), "Decode raw byte captures into sessions."),
    "demo": (("demo",), "Bring up the emulated robot, capture a campaign, fit, validate and report."),
    "devices": (("udev",), "List serial devices: node, USB port path, ID_PATH, VID:PID, serial, kind."),
    "emulate": (_EMULATE, "Serve emulated devices on pseudo-terminals."),
    "export": (("session",), "Export one stream of SESSION to a TUM trajectory or a CSV table (SI units, ns times), or its streams to an MCAP file (docs/FORMAT.md)"),
    "fit": (("pods", "pose_error"), "Fit models from sessions."),
    "import": (("session",), "Import foreign files (mocap, pose logs, pod CSV) into a session."),
    "info": (("session",), "Streams, counts, rates (Hz), time span (s), gaps and device metadata of SESSION."),
    "live": (("live",), "Capture every configured device and run the filters, the merge and the view live."),
    "merge": (("lidar",), "Merge a front and a rear lidar into one 360° scan per turn pair."),
    "record-raw": (("record_raw",), "Record PORT's bytes for --duration seconds into OUTPUT, exactly as received."),
    "replay": (("pods",), "Replay a session's pods through the split x/y/heading filters."),
    "report": (("report",), "Write DIR/report.html: every table and figure for SESSIONS (HDF5)."),
    "simulate": (("simulate",), "Simulate a scenario and write a session with every sensor stream and its truth."),
    "split": (("session",), "Split SESSION into consecutive pieces by time (--pieces N or --every S)."),
    "udev": (("udev",), "Name serial devices by USB port path with udev rules."),
    "validate": (("pose_error",), "Leave-one-session-out Monte Carlo validation of the pose-error model."),
}  # fmt: skip
"""Top-level command → (the ``commands`` modules that attach it, its one-line help)."""


_REGISTERED: set[str] = set()
"""The ``commands`` modules loaded by a command's look-up."""


class _Group(click.Group):
    """A click group that turns library errors, and a full or read-only disk, into a
    message and exit code 2."""

    def invoke(self, ctx: click.Context) -> object:
        from sensorbench.logs.atomic_output import PATH_ERRNOS, WRITE_ERRNOS, disk_error_text

        try:
            return super().invoke(ctx)
        except SensorbenchError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except OSError as exc:  # a write the command did not name, or a path the kernel
            # refuses wherever it was looked at: still a clear message
            if exc.errno not in WRITE_ERRNOS | PATH_ERRNOS:
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            what = "cannot write" if exc.errno in WRITE_ERRNOS else "unusable path"
            click.echo(f"error: {where}{what}: {disk_error_text(exc)}", err=True)
            ctx.exit(EXIT_BAD_INPUT)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)


class _LazyGroup(_Group):
    """The top-level group: a command's modules are imported when it is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        # every module the command needs, once each (a module may attach to several
        # groups: `decode` loads a1, which also adds `emulate a1`)
        for module in COMMANDS.get(cmd_name, ((), ""))[0]:
            if module not in _REGISTERED:
                _REGISTERED.add(module)
                import_module(f"sensorbench.commands.{module}")
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(n) for n in COMMANDS)
        rows = [(name, _short(text, limit)) for name, (_, text) in sorted(COMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a word, with "..." as click cuts help."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 3, 0)].rsplit(" ", 1)[0] + "..."


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sensorbench", prog_name="sensorbench")
def cli() -> None:
    """Bring up, capture, characterize and validate a robot's sensors.

    Units everywhere are SI (m, rad, s); times in files are int64 nanoseconds.
    Every analysis command takes --json. Exit codes: 0 ok, 1 a check or
    validation ran and failed, 2 bad usage or bad input.
    """


def subgroup(name: str) -> click.Group:
    """Return the shared sub-group ``name`` (e.g. ``fit``), creating it once, its help
    from :data:`COMMANDS`."""
    existing = cli.commands.get(name)
    if isinstance(existing, click.Group):
        return existing
    group = _Group(name=name, help=COMMANDS[name][1])
    cli.add_command(group)
    return group


def main() -> None:
    """Console-script entry point."""
    try:
        sys.exit(cli.main(prog_name="sensorbench", standalone_mode=True))
    except OSError as exc:  # --help or --version into a full disk (outside any command)
        from sensorbench.logs.atomic_output import WRITE_ERRNOS, disk_error_text

        if exc.errno not in WRITE_ERRNOS:
            raise
        click.echo(f"error: cannot write the output: {disk_error_text(exc)}", err=True)
        sys.exit(EXIT_BAD_INPUT)
