"""An output a directory will not take, though its mode bits allow it: an immutable
directory (``chattr +i``: even root gets EPERM) and an immutable file given with
``--force``. Every writing command exits 2 naming the output, writes nothing and leaves
the old file as it was (an EPERM used to escape as a PermissionError traceback).

Those cases need root (``chattr``) and skip elsewhere, saying so. An output in a directory
that does not exist is refused (a file) or made (a directory); one below a regular file is
refused saying so; ``-`` is refused (these commands do not write standard output).
Read-only and full file systems are tests/test_logs_full_disk.py's; outputs that are
inputs, devices, links or sessions being written are tests/test_logs_outputs.py's and
tests/test_atomic_force.py's.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

PODS = str(Path(__file__).parent / "data" / "old_model_files" / "pods.toml")

COMMANDS = {
    "export csv": ["export", "{S}", "--format", "csv", "--stream", "mocap", "-o", "{O}"],
    "export mcap": ["export", "{S}", "--format", "mcap", "-o", "{O}"],
    "split": ["split", "{S}", "--pieces", "2", "-o", "{O}"],
    "report": ["report", "{S}", "-o", "{O}"],
    "import --into": ["import", "pose", "--format", "tum", "{T}", "--into", "{O}"],
    "simulate": ["simulate", "--scenario", "forward", "-o", "{O}"],
    "fit pods": ["fit", "pods", "{D}", "-o", "{O}"],
    "fit noise": ["fit", "noise", "{D}", "--pods", PODS, "-o", "{O}"],
    "decode a1": ["decode", "a1", "{S}", "--no-descriptor", "-o", "{O}"],
}
FORCE = {"export csv", "export mcap", "fit pods", "fit noise", "simulate"}


@pytest.fixture(scope="module")
def drive(tmp_path_factory) -> Path:
    """A simulated drive (pods and mocap, 50 s) the fits can run on."""
    from sensorbench.sim.scenario import load_scenario
    from sensorbench.sim.simulation import simulate_to_session

    sc = load_scenario("forward")
    off = {n: {"enabled": False, "model": p["model"]} for n, p in sc.lidars.items()}
    sc = sc.with_overrides({"lidars": off, "pose_sensor": {"enabled": False}})
    return simulate_to_session(sc, 3, tmp_path_factory.mktemp("drive") / "drive.h5")


def _chattr(flag: str, path: Path) -> None:
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, timeout=10)
    if done.returncode != 0:
        pytest.skip(f"chattr {flag} is not possible here (needs root and ext4/xfs/btrfs)")


@pytest.fixture
def immutable(tmp_path, drive):
    """(inputs, an immutable directory holding one old file)."""
    inputs = _inputs(tmp_path, drive)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "old").write_text("precious\n")
    _chattr("+i", locked)
    yield inputs, locked
    _chattr("-i", locked)


def _inputs(tmp_path: Path, drive: Path) -> dict[str, Path]:
    tum = su.write_tum(tmp_path / "t.tum", 20)
    return {"S": su.write_small_session(tmp_path / "s.h5"), "T": tum, "D": drive}


def _run(command: str, inputs: dict[str, Path], out: Path, *extra: str) -> tuple[int, str]:
    fill = {"{S}": str(inputs["S"]), "{T}": str(inputs["T"]), "{D}": str(inputs["D"]),
            "{O}": str(out)}  # fmt: skip
    args = [fill.get(a, a) for a in COMMANDS[command]] + list(extra)
    done = CliRunner().invoke(cli, args)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise AssertionError(f"{' '.join(args)}: uncaught {done.exception!r}") from done.exception
    return done.exit_code, done.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_new_output_in_an_immutable_directory_is_refused(immutable, command) -> None:
    inputs, locked = immutable
    out = locked / "new"
    code, output = _run(command, inputs, out)
    assert code == 2 and str(out) in output and "Operation not permitted" in output, output
    assert "Traceback" not in output
    assert sorted(p.name for p in locked.iterdir()) == ["old"]


@pytest.mark.parametrize("command", sorted(FORCE))
def test_force_over_an_immutable_file_is_refused_and_keeps_it(tmp_path, drive, command) -> None:
    inputs = _inputs(tmp_path, drive)
    old = tmp_path / "old"
    old.write_text("precious\n")
    _chattr("+i", old)
    try:
        code, output = _run(command, inputs, old, "--force")
    finally:
        _chattr("-i", old)
    assert code == 2 and str(old) in output and "Operation not permitted" in output, output
    assert old.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old", "s.h5", "t.tum"]


DIRECTORY_OUTPUTS = {"split", "report"}


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_in_a_directory_that_does_not_exist(tmp_path, drive, command) -> None:
    """A file output there is refused naming the directory; a directory output (split's
    pieces, the report) is made with its parents, as ``mkdir -p`` would."""
    out = tmp_path / "no" / "such" / "out"
    code, output = _run(command, _inputs(tmp_path, drive), out)
    if command in DIRECTORY_OUTPUTS:
        assert code == 0 and any(out.iterdir()), output
    else:
        assert code == 2 and f"directory {out.parent} does not exist" in output, output
        assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - DIRECTORY_OUTPUTS))
def test_an_output_below_a_file_is_refused_naming_the_file(tmp_path, drive, command) -> None:
    """Its "directory" is a regular file: said so, not that it does not exist."""
    (tmp_path / "plain").write_text("precious\n")
    code, output = _run(command, _inputs(tmp_path, drive), tmp_path / "plain" / "out")
    assert code == 2 and f"directory {tmp_path / 'plain'} is not a directory" in output, output
    assert (tmp_path / "plain").read_text() == "precious\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_dash_is_refused_not_written_as_a_file(tmp_path, drive, command, monkeypatch) -> None:
    """``-o -`` asks for standard output, which these commands do not write: refused, exit
    2; it wrote a file (or made a directory) named '-' and said "wrote ... to -"."""
    inputs = _inputs(tmp_path, drive)
    monkeypatch.chdir(tmp_path)
    code, output = _run(command, inputs, Path("-"))
    assert code == 2 and "'-' is not standard output here" in output, output
    assert not (tmp_path / "-").exists()
