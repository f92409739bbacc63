"""Every command that reads a file, given the wrong kind of file: exit 2 naming it.

The inputs are what a path can name besides a readable file of the right kind: a
character device that is empty (``/dev/null``) or never ends (``/dev/zero``), a FIFO (a
read waits for a writer forever; one named like a ROS bag too: rosbags opened it and
waited), a directory (one named like a session too), a truncated
session, an HDF5 file that is no session, an empty file, random bytes, a name longer than
the kernel takes and a symbolic link to itself. Each command
is called in-process (click's runner) with a deadline (SIGALRM), so a hang fails its
case; two run as real processes.
A case passes with exit 2, no traceback, and the message naming the path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

PODS = str(Path(__file__).parent / "data" / "old_model_files" / "pods.toml")
DEADLINE_S = 60

INPUTS = ["/dev/null", "/dev/zero", "fifo", "fifo.bag", "directory", "dir.h5", "truncated",
          "foreign", "empty", "garbage", "a name too long", "a loop of links"]
NAMES = {"a name too long": "n" * 300}  # NAME_MAX is 255 bytes

COMMANDS = {
    "check": ["check", "{B}"],
    "info": ["info", "{B}"],
    "export": ["export", "{B}", "--format", "csv", "-o", "{O}.csv"],
    "export --pods": ["export", "{G}", "--format", "mcap", "-o", "{O}.mcap", "--pods", "{B}"],
    "fit pods": ["fit", "pods", "{B}", "-o", "{O}.toml"],
    "fit noise": ["fit", "noise", "{B}", "--pods", PODS, "-o", "{O}.toml"],
    "fit noise --pods": ["fit", "noise", "{G}", "--pods", "{B}", "-o", "{O}.toml"],
    "fit pose-error": ["fit", "pose-error", "{B}", "{B}", "--sensor", "pose", "-o", "{O}.toml"],
    "validate": ["validate", "{B}", "{B}", "--sensor", "pose"],
    "validate --model": ["validate", "{G}", "--sensor", "pose", "--model", "{B}"],
    "report": ["report", "{B}", "-o", "{O}_report"],
    "report --models": ["report", "{G}", "-o", "{O}_report", "--models", "{B}"],
    "characterize lidar": ["characterize", "lidar", "{B}", "--device", "front"],
    "merge": ["merge", "{B}", "--front", "a", "--rear", "b", "-o", "{O}_m.h5"],
    "replay": ["replay", "{B}", "--pods", PODS],
    "replay --pods": ["replay", "{G}", "--pods", "{B}"],
    "replay --noise": ["replay", "{G}", "--pods", PODS, "--noise", "{B}"],
    "replay --pose-model": ["replay", "{G}", "--pods", PODS, "--pose-model", "{B}"],
    "split": ["split", "{B}", "--pieces", "2", "-o", "{O}_split"],
    "decode ld19": ["decode", "ld19", "{B}", "-o", "{O}_d.h5"],
    "decode a1": ["decode", "a1", "{B}", "-o", "{O}_a.h5"],
    "import pose tum": ["import", "pose", "--format", "tum", "{B}", "--into", "{O}_i.h5"],
    "import pose kitti --times": ["import", "pose", "--format", "kitti", "{K}", "--times", "{B}",
                                  "--into", "{O}_i.h5"],
    "import mocap motive": ["import", "mocap", "--format", "motive", "{B}", "--into", "{O}_i.h5"],
    "import pods": ["import", "pods", "--format", "csv", "{B}", "--into", "{O}_i.h5"],
    "import --into": ["import", "pose", "--format", "tum", "{T}", "--into", "{B}"],
    "import rosbag": ["import", "rosbag", "{B}", "--topic", "/odom=odom", "--into", "{O}_r.h5"],
    "simulate --pose-model": ["simulate", "--scenario", "square", "--pose-model", "{B}",
                              "-o", "{O}_s.h5"],
    "capture --config": ["capture", "--config", "{B}", "-o", "{O}_c.h5", "--duration", "1"],
    "live --config": ["live", "--config", "{B}", "-o", "{O}_l.h5", "--duration", "1"],
    "bringup --config": ["bringup", "--config", "{B}"],
    "udev install": ["udev", "install", "{B}", "--rules-dir", "{R}", "--no-reload"],
    "emulate pods --trajectory": ["emulate", "pods", "--firmware", "{G}", "--trajectory", "{B}",
                                  "--duration", "1"],
    "emulate pods --firmware": ["emulate", "pods", "--firmware", "{B}", "--duration", "1"],
}  # fmt: skip


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    good = su.write_small_session(d / "good.h5")
    data = good.read_bytes()
    out = {"good": good, "tum": su.write_tum(d / "ok.tum", 20), "kitti": d / "k.txt"}
    out["kitti"].write_text("1 0 0 0 0 1 0 0 0 0 1 0\n")
    os.mkfifo(d / "fifo")
    os.mkfifo(d / "fifo.bag")  # named like a ROS 1 bag: rosbags opens it (and waits)
    (d / "directory").mkdir()
    (d / "dir.h5").mkdir()  # named like a session: the message must still say "directory"
    (d / "truncated").write_bytes(data[: len(data) // 2])
    with h5py.File(d / "foreign", "w") as f:
        f["x"] = np.arange(10)
    (d / "empty").write_bytes(b"")
    (d / "garbage").write_bytes(np.random.default_rng(1).bytes(5000))
    (d / "a loop of links").symlink_to("a loop of links")
    return out


def _args(command: str, bad: str, files: dict[str, Path], out: Path) -> list[str]:
    fill = {"{B}": bad, "{G}": str(files["good"]), "{O}": str(out), "{T}": str(files["tum"]),
            "{K}": str(files["kitti"]), "{R}": str(out.parent)}  # fmt: skip
    out_args = []
    for a in COMMANDS[command]:
        for key, value in fill.items():
            a = a.replace(key, value)
        out_args.append(a)
    return out_args


class _Hang(Exception):
    pass


def _raise_hang(*_: object) -> None:
    raise _Hang


@pytest.mark.parametrize("bad", INPUTS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_wrong_kind_of_file_is_refused_naming_it(files, tmp_path, command, bad) -> None:
    path = bad if bad.startswith("/dev/") else str(files["good"].parent / NAMES.get(bad, bad))
    args = _args(command, path, files, tmp_path / "out")
    old = signal.signal(signal.SIGALRM, _raise_hang)
    signal.alarm(DEADLINE_S)
    try:
        done = CliRunner().invoke(cli, args)
    except _Hang:
        pytest.fail(f"{' '.join(args)} still ran after {DEADLINE_S} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exc_info
    if command == "report --models" and bad in ("directory", "dir.h5"):  # empty models dir
        assert done.exit_code == 0, done.output  # is one: the report has no model sections
        return
    assert done.exit_code == 2, done.output
    assert path in done.output or Path(path).name in done.output, done.output
    assert "directory" in done.output or bad != "dir.h5", done.output
    assert not any(p.name.startswith("out") for p in tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("command", [["info", "{fifo}"], ["check", "/dev/zero"]])
def test_a_real_process_ends_on_a_fifo_and_a_device(files, command) -> None:
    args = [a.replace("{fifo}", str(files["good"].parent / "fifo")) for a in command]
    done = subprocess.run(
        [sys.executable, "-c", "from sensorbench.cli import main; main()", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "not a file to read" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("where", ["under a file", "in /proc"])
@pytest.mark.parametrize(
    "command",
    [["split", "{G}", "--pieces", "2", "-o", "{D}"], ["report", "{G}", "-o", "{D}"],
     ["simulate", "--scenario", "reloc_campaign", "--all-sessions", "-o", "{D}"]],
)  # fmt: skip
def test_an_output_directory_that_cannot_be_made_is_refused_naming_it(
    files, tmp_path, command, where
) -> None:
    """A directory output below a regular file (ENOTDIR) or where no directory can be
    made (/proc: ENOENT) ended in a mkdir traceback."""
    (tmp_path / "plain").write_bytes(b"x")
    out = str(tmp_path / "plain" / "d") if where == "under a file" else "/proc/sensorbench-out"
    args = [a.replace("{G}", str(files["good"])).replace("{D}", out) for a in command]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2 and f"cannot write {out}" in done.output, done.output
    assert [p.name for p in tmp_path.iterdir()] == ["plain"]


ROBOT = str(Path(__file__).parents[1] / "examples" / "robot.toml")
OUTPUTS = {
    "simulate": ["simulate", "--scenario", "square", "-o", "{D}"],
    "split": ["split", "{G}", "--pieces", "2", "-o", "{D}"],
    "export": ["export", "{G}", "--format", "mcap", "-o", "{D}"],
    "replay -o": ["replay", "{G}", "--pods", PODS, "-o", "{D}"],
    "merge": ["merge", "{G}", "--front", "front", "--rear", "front", "-o", "{D}"],
    "report": ["report", "{G}", "-o", "{D}"],
    "capture": ["capture", "--config", ROBOT, "--duration", "1", "-o", "{D}"],
    "live": ["live", "--config", ROBOT, "--allow-missing", "--duration", "1", "-o", "{D}"],
    "record-raw": ["record-raw", "/dev/null", "--baud", "115200", "--duration", "1", "-o", "{D}"],
}


@pytest.mark.parametrize("where", ["a name too long", "a loop of links", "below a loop of links"])
@pytest.mark.parametrize("command", OUTPUTS)
def test_an_output_path_the_kernel_refuses_is_refused_naming_it(
    files, tmp_path, command, where
) -> None:
    """Names longer than NAME_MAX raised OSError (ENAMETOOLONG) from a path check in
    ``info``, ``check``, ``split`` and ``simulate --all-sessions``; a symbolic link to itself
    raised RuntimeError where an output was compared with the inputs (``Path.resolve``)."""
    (tmp_path / "loop").symlink_to("loop")
    out = {"a name too long": str(tmp_path / ("n" * 300)),
           "a loop of links": str(tmp_path / "loop"),
           "below a loop of links": str(tmp_path / "loop" / "x")}[where]  # fmt: skip
    args = [a.replace("{G}", str(files["good"])).replace("{D}", out) for a in OUTPUTS[command]]
    done = CliRunner().invoke(cli, args)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exc_info
    assert done.exit_code == 2, done.output
    assert out in done.output and "Traceback" not in done.output, done.output
    assert [p.name for p in tmp_path.iterdir()] == ["loop"]
