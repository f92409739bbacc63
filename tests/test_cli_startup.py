"""The CLI starts fast: building the command tree and printing help load no heavy module.

numba (the LD19 kernels), scipy, matplotlib and h5py are loaded by the commands that
use them, when they run. Each check runs in a fresh interpreter, since this test
process has long since imported them all.
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys

HEAVY = ("numba", "scipy", "matplotlib", "h5py")

_EVERY_HELP = r"""
import json, sys
import click
from click.testing import CliRunner
from sensorbench.cli import cli

def walk(group, path):
    yield path
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            yield from walk(cmd, [*path, name])
        else:
            yield [*path, name]

helped, failed = [], []
runner = CliRunner()
for path in walk(cli, []):
    result = runner.invoke(cli, [*path, "--help"])
    (helped if result.exit_code == 0 and "Usage:" in result.output else failed).append(path)
print(json.dumps({"helped": helped, "failed": failed,
                  "heavy": [m for m in sys.argv[1:] if m in sys.modules]}))
"""


def test_help_of_every_command_loads_no_heavy_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _EVERY_HELP, *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    doc = json.loads(out.stdout)
    assert doc["failed"] == []
    # the whole tree was walked: the top level, groups and their leaves
    helped = {" ".join(p) for p in doc["helped"]}
    assert {"", "capture", "fit", "fit pods", "emulate ld19", "import mocap", "bench"} <= helped
    assert doc["heavy"] == []


def test_top_level_help_imports_no_command_module_and_no_numpy() -> None:
    """``sensorbench --help`` lists the commands from the CLI's own table
    (``sensorbench.cli.COMMANDS``): no command module, numpy or importlib.metadata."""
    code = (
        "import sys\n"
        "from sensorbench.cli import cli\n"
        "cli.main(['--help'], standalone_mode=False)\n"
        "print(sorted(m for m in sys.modules if m.startswith('sensorbench.commands.')"
        " or m in ('numpy', 'importlib.metadata')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Commands:" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


def _cpu_s(code: str, *args: str) -> float:
    """CPU seconds (user + sys) of ``python -c code args`` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=60, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_help_costs_little_more_than_importing_click_and_numpy() -> None:
    """CPU time, not wall time: a busy machine delays a process but adds little to its CPU.

    Measured against a reference on the same machine, in alternating rounds: a bare
    interpreter importing click and numpy (about 0.13 s of CPU here). `--help` costs
    about 1.7 times that; with numba, scipy and h5py loaded at start-up (as before)
    it cost 5 times that, and numba alone adds about 2 times.
    """
    help_s, reference_s = [], []
    for _ in range(5):
        help_s.append(_cpu_s("from sensorbench.cli import main; main()", "--help"))
        reference_s.append(_cpu_s("import click, numpy"))
    ratio = statistics.median(help_s) / statistics.median(reference_s)
    assert ratio < 3.0, (
        f"sensorbench --help took {statistics.median(help_s):.2f} s of CPU, "
        f"{ratio:.1f} x importing click and numpy (median of 5)"
    )
