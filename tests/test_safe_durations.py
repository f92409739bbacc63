"""Every command that takes ``--duration`` refuses 0, a negative, nan and inf before
doing anything: exit 2 naming the option. A zero-length run served or captured nothing
and exited 0 (the emulators); inf ran forever where a length was asked for (the demo)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli

COMMANDS = {
    "emulate ld19": ["emulate", "ld19"],
    "emulate a1": ["emulate", "a1"],
    "emulate pods": ["emulate", "pods"],
    "emulate robot": ["emulate", "robot", "--run-dir", "{T}"],
    "capture": ["capture", "--config", "{T}/r.toml", "-o", "{T}/c.h5"],
    "live": ["live", "--config", "{T}/r.toml", "-o", "{T}/l.h5"],
    "record-raw": ["record-raw", "/dev/null", "--baud", "115200", "-o", "{T}/r.bin"],
    "demo --live": ["demo", "--live"],
}


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
@pytest.mark.parametrize("command", COMMANDS)
def test_a_duration_that_is_no_length_is_refused(tmp_path, command, value) -> None:
    args = [a.replace("{T}", str(tmp_path)) for a in COMMANDS[command]]
    done = CliRunner().invoke(cli, [*args, "--duration", value])
    assert done.exit_code == 2 and "'--duration'" in done.output, done.output
    assert list(tmp_path.iterdir()) == []
