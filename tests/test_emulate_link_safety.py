"""An emulator's ``--link`` (and ``emulate robot``'s device links) replaces only a symbolic
link: ``emulate ld19 --link /dev/null`` run as root deleted /dev/null, and any regular
file given there was replaced by the link. A file, FIFO or device node there is refused
(exit 2 naming it) and left as it was; an earlier run's link is replaced and removed at
the end."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG

KINDS = {"ld19": ["--startup", "0"], "ld06": ["--startup", "0"], "a1": [], "pods": []}


def _make(path: Path, what: str) -> int:
    """Put ``what`` at ``path``; its file type bits."""
    if what == "a regular file":
        path.write_text("precious\n")
    elif what == "a FIFO (named pipe)":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a /dev/null of its own
        except PermissionError:
            pytest.skip("making a device node needs root (CAP_MKNOD)")
    return stat.S_IFMT(os.lstat(path).st_mode)


@pytest.mark.parametrize("what", ["a regular file", "a FIFO (named pipe)", "a character device"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_link_path_holding_a_file_is_refused_and_kept(tmp_path, kind, what) -> None:
    path = tmp_path / "port"
    mode = _make(path, what)
    done = CliRunner().invoke(cli, ["emulate", kind, "--link", str(path), *KINDS[kind],
                                    "--duration", "0.5"])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert f"{path} is {what}" in done.output, done.output
    assert stat.S_IFMT(os.lstat(path).st_mode) == mode
    if what == "a regular file":
        assert path.read_text() == "precious\n"


@pytest.mark.parametrize("kind", KINDS)
def test_a_dash_is_not_a_link_name(tmp_path, kind, monkeypatch) -> None:
    """``--link -`` made a symbolic link named ``-`` in the working directory."""
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(cli, ["emulate", kind, "--link", "-", *KINDS[kind],
                                    "--duration", "0.5"])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert "'-' is not a --link path" in done.output, done.output
    assert list(tmp_path.iterdir()) == []


def test_the_robot_refuses_a_device_link_holding_a_file(tmp_path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "pods").write_text("precious\n")
    done = CliRunner().invoke(cli, ["emulate", "robot", "--run-dir", str(run),
                                    "--duration", "0.5"])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert f"{run / 'pods'} is a regular file" in done.output, done.output
    assert (run / "pods").read_text() == "precious\n"
    assert [p.name for p in run.iterdir()] == ["pods"]  # no other device was left served
    assert DEFAULT_CONFIG.is_file()


def test_an_earlier_runs_link_is_replaced_then_removed(tmp_path) -> None:
    link = tmp_path / "port"
    link.symlink_to("/dev/pts/does-not-exist")  # a link an earlier, killed run left
    done = CliRunner().invoke(cli, ["emulate", "ld19", "--link", str(link), "--startup", "0",
                                    "--duration", "0.5"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert not os.path.lexists(link)


@pytest.mark.parametrize("where", ["a FIFO", "under /proc"])
def test_a_run_directory_that_cannot_be_made_is_a_message(tmp_path, where) -> None:
    """``emulate robot --run-dir`` on a FIFO or where no directory can be made raised
    FileExistsError / FileNotFoundError."""
    run = tmp_path / "fifo" if where == "a FIFO" else Path("/proc/sensorbench-run")
    if where == "a FIFO":
        os.mkfifo(run)
    done = CliRunner().invoke(cli, ["emulate", "robot", "--run-dir", str(run),
                                    "--duration", "0.5"])  # fmt: skip
    assert done.exit_code == 2, done.output
    assert f"cannot use {run} as the run directory" in done.output, done.output
