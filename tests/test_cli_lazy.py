"""The CLI's table of commands (``sensorbench.cli.COMMANDS``) says what the command
modules attach: every top-level command, the modules that attach it, and its help.

The table lets ``sensorbench --help`` list the commands without importing them; if a
module gains, loses or renames a command, or a help line changes, this fails.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import click
import pytest

from sensorbench import commands
from sensorbench.cli import COMMANDS


def _attached() -> dict[str, tuple[set[str], str]]:
    """Load every command module: name → (modules, first line)."""
    from sensorbench.cli import cli

    for info in pkgutil.iter_modules(commands.__path__):
        importlib.import_module(f"sensorbench.commands.{info.name}")
    out: dict[str, tuple[set[str], str]] = {}
    for name, cmd in cli.commands.items():
        leaves = cmd.commands.values() if isinstance(cmd, click.Group) else [cmd]
        owners = {c.callback.__module__.rsplit(".", 1)[-1] for c in leaves if c.callback}
        out[name] = (owners, " ".join((cmd.help or "").split()))
    return out


def test_table_names_every_command_its_modules_and_its_help() -> None:
    attached = _attached()
    assert set(attached) == set(COMMANDS)
    for name, (owners, help_text) in attached.items():
        modules, line = COMMANDS[name]
        assert set(modules) == owners, name
        assert help_text.startswith(line), (name, line)


def test_a_command_found_lazily_is_the_real_one() -> None:
    from click.testing import CliRunner

    from sensorbench.cli import cli

    result = CliRunner().invoke(cli, ["fit", "--help"])
    assert result.exit_code == 0, result.output
    assert {"pods", "noise", "pose-error"} <= set(cli.commands["fit"].commands)  # type: ignore[attr-defined]
    assert CliRunner().invoke(cli, ["no-such-command"]).exit_code == 2


def test_a_group_shared_by_modules_is_whole_after_another_command_loaded_one() -> None:
    """`decode` loads a1, which also attaches `emulate a1`: `emulate` must still get
    capture's and ld19's commands when it is asked for later."""
    from click.testing import CliRunner

    from sensorbench.cli import cli

    assert CliRunner().invoke(cli, ["decode", "--help"]).exit_code == 0
    result = CliRunner().invoke(cli, ["emulate", "--help"])
    assert result.exit_code == 0, result.output
    assert {"a1", "ld19", "pods", "robot"} <= set(cli.commands["emulate"].commands)  # type: ignore[attr-defined]


def test_every_help_page_states_its_ranges() -> None:
    """No option's range reads ``x<=None`` (a bound-less range printed as if it had one)."""
    from sensorbench.cli import cli

    _attached()
    pages = []
    for name, cmd in cli.commands.items():
        leaves = cmd.commands.items() if isinstance(cmd, click.Group) else [(name, cmd)]
        for leaf, command in leaves:
            ctx = click.Context(command, info_name=leaf)
            pages.append((leaf, command.get_help(ctx)))
    assert len(pages) > 30
    bad = [leaf for leaf, text in pages if "None]" in text or "=None" in text]
    assert not bad, bad


@pytest.mark.parametrize(
    "args", [["--help"], ["--version"], ["fit", "--help"], ["simulate", "--list"]]
)
def test_printing_into_a_full_device_exits_2_with_a_message(args) -> None:
    """``--help`` and ``--version`` print outside any command: into /dev/full they ended in
    an OSError traceback; every command's own printing already ended with exit 2."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", "from sensorbench.cli import main; main()",
                               *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "No space left on device (ENOSPC)" in done.stderr and "Traceback" not in done.stderr
