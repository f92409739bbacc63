"""`--force` never destroys (issue 40, item 1): every command that writes an output
replaces only a regular file that nobody writes — never a device node, FIFO, socket or
symbolic link, and never a session a process has open for writing; the refusal (exit 2)
names the file and what it is."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.errors import OutputError
from sensorbench.logs.atomic_output import atomic_output
from sensorbench.logs.update_lock import UpdateLock, writer_of

HERE = Path(__file__).parent
LIVE = HERE / "logs_live_writer.py"

# every command with -o/--force (the output is {target})
FORCED = [
    "export {session} --stream mocap --format csv -o {target} --force",
    "export {session} --format mcap -o {target} --force",
    "replay {session} --pods {model} -o {target} --force",
    "fit pods {session} -o {target} --force",
    "fit noise {session} --pods {model} -o {target} --force",
    "fit pose-error {session} --sensor pose_sensor -o {target} --force",
    "merge {session} --front front --rear front -o {target} --force",
    "decode ld19 {session} -o {target} --force",
    "decode a1 {session} -o {target} --overwrite",
    "simulate --scenario square -o {target} --force",
    "udev rules --by kernels --name front=1-1.2 -o {target} --force",
]


def _fifo(p: Path) -> str:
    os.mkfifo(p)
    return "a FIFO"


def _socket(p: Path) -> str:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))  # the bound name stays after the process lets go of it
    s.close()
    return "a socket"


def _char_device(p: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    return "a character device"


def _symlink(p: Path) -> str:
    (p.parent / "elsewhere.txt").write_text("kept\n")
    p.symlink_to(p.parent / "elsewhere.txt")
    return "a symbolic link"


MAKERS = {"fifo": _fifo, "socket": _socket, "char_device": _char_device, "symlink": _symlink}


def _identity(p: Path) -> tuple[int, int, int]:
    st = os.lstat(p)
    return st.st_ino, st.st_mode, st.st_rdev


def _run(line: str, **paths: Path):
    args = line.format(**{k: str(v) for k, v in paths.items()}).split()
    return CliRunner().invoke(cli, args)


@pytest.fixture()
def inputs(tmp_path: Path) -> dict[str, Path]:
    model = tmp_path / "pods.toml"
    model.write_text("not read: the output check comes first\n")
    return {"session": su.write_small_session(tmp_path / "a.h5"), "model": model}


@pytest.mark.parametrize("kind", sorted(MAKERS))
@pytest.mark.parametrize("line", FORCED)
def test_force_never_replaces_what_is_not_a_regular_file(tmp_path, inputs, line, kind) -> None:
    target = tmp_path / "out.h5"
    what = MAKERS[kind](target)
    before = _identity(target)
    result = _run(line, target=target, **inputs)
    assert result.exit_code == 2, result.output
    assert f"{target} is {what}" in result.output and "never replaced" in result.output
    assert _identity(target) == before
    assert not [p for p in tmp_path.iterdir() if ".partial" in p.name or ".lock" in p.name]


@pytest.fixture()
def live_session(tmp_path: Path):
    """A session a separate process is writing (SWMR, like a running capture)."""
    path = tmp_path / "capturing.h5"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.getenv("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, str(LIVE), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.communicate(timeout=10)
        yield path, proc
    finally:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.mark.parametrize("line", FORCED)
def test_force_never_replaces_a_session_being_written(inputs, live_session, line) -> None:
    path, proc = live_session
    before = su.sha256(path)
    result = _run(line, target=path, **inputs)
    assert result.exit_code == 2, result.output
    assert "open for writing" in result.output and f"process {proc.pid}" in result.output
    assert su.sha256(path) == before  # the writer is silent: its file must not change


def test_the_lock_goes_with_the_writer(inputs, live_session) -> None:
    """Once the writer is gone (even killed) the file is an ordinary output again."""
    path, proc = live_session
    assert f"process {proc.pid}" in writer_of(path)
    proc.kill()
    proc.wait(timeout=10)
    assert writer_of(path) == ""
    line = "export {session} --stream mocap --format csv -o {target} --force"
    result = _run(line, target=path, **inputs)
    assert result.exit_code == 0, result.output
    assert path.read_text().startswith("t_ns,")


def test_a_writer_that_starts_during_the_output_keeps_its_file(tmp_path) -> None:
    """The check is repeated under the file's lock just before the rename."""
    out = tmp_path / "s.h5"
    su.write_small_session(out)
    before = su.sha256(out)
    holder = UpdateLock(out, wait_s=0.0)
    try:
        refused = pytest.raises(OutputError, match=f"{out} is open for writing: process ")
        with refused, atomic_output(out, force=True) as tmp:
            tmp.write_text("would destroy a capture\n")
            holder.acquire()  # a writer takes the file while the output is computed
    finally:
        holder.release()
    assert su.sha256(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.h5"]


@pytest.mark.parametrize(
    "line",
    [
        "export {target} --stream front --format csv -o {out}",
        "export {target} --format mcap -o {out}",
        "replay {target} --pods {model}",
    ],
)
def test_a_session_being_written_or_not_closed_is_not_read(
    tmp_path, inputs, live_session, line
) -> None:
    """export and replay would read a partial snapshot: refused, naming the writer, and
    once the writer is dead, naming the recovery."""
    path, proc = live_session
    out = tmp_path / "out.csv"
    result = _run(line, target=path, out=out, **inputs)
    assert result.exit_code == 2, result.output
    assert f"is being written (process {proc.pid} writes it" in result.output
    proc.kill()
    proc.wait(timeout=10)
    result = _run(line, target=path, out=out, **inputs)
    assert result.exit_code == 2, result.output
    assert "was not closed" in result.output and f"sensorbench check {path}" in result.output
    assert not out.exists()
