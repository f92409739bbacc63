"""The ``sensorbench`` command line: a thin click group.

Commands live in :mod:`sensorbench.commands`, one module per area; each module
exposes ``register(cli)`` and attaches its commands (or sub-commands of the
shared groups below). This file only builds the group and maps library errors to
exit codes: 0 success, 1 a check or validation that ran and failed, 2 bad usage
or bad input.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import click

from sensorbench import __version__, commands
from sensorbench.errors import SensorbenchError
from sensorbench.logs.atomic_output import WRITE_ERRNOS, disk_error_text

EXIT_BAD_INPUT = 2


class _Group(click.Group):
    """A click group that turns library errors, and a full or read-only disk, into a
    message and exit code 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except SensorbenchError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except OSError as exc:  # a write the command did not name: still a clear message
            if exc.errno not in WRITE_ERRNOS:
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"error: {where}cannot write: {disk_error_text(exc)}", err=True)
            ctx.exit(EXIT_BAD_INPUT)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sensorbench")
def cli() -> None:
    """Bring up, capture, characterize and validate a robot's sensors.

    Units everywhere are SI (m, rad, s); times in files are int64 nanoseconds.
    Every analysis command takes --json. Exit codes: 0 ok, 1 a check or
    validation ran and failed, 2 bad usage or bad input.
    """


def subgroup(name: str, help_text: str) -> click.Group:
    """Return the shared sub-group ``name`` (e.g. ``fit``), creating it once."""
    existing = cli.commands.get(name)
    if isinstance(existing, click.Group):
        return existing
    group = _Group(name=name, help=help_text)
    cli.add_command(group)
    return group


def _load_commands() -> None:
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):  # else a helper, e.g. emulate_options
            module.register(cli)
    for name, group in list(cli.commands.items()):
        if isinstance(group, click.Group) and not group.commands:
            del cli.commands[name]


_load_commands()


def main() -> None:
    """Console-script entry point."""
    sys.exit(cli.main(prog_name="sensorbench", standalone_mode=True))
