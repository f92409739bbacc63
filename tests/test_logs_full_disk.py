"""Every writer on a full or read-only disk: exit 2 naming the output, nothing left behind.

A real file system, not a simulated error: a small tmpfs mounted for the test (root
only; the tests skip, saying so, where ``mount`` is not allowed — CI runs as root),
filled until only ``headroom`` bytes are free, and one mounted read-only. Each
command runs in its own process, so a crash (SIGSEGV: rc -11 — HDF5 used to die
disposing of a file it failed to flush) fails the test instead of the test run.

For every case: exit code 2, no traceback, the output named in the message, no hidden
temporary file or lock left on the disk, and a file that existed before (``--force``,
``import --into``) byte for byte unchanged. The headrooms are 0 (the first write
fails) and half of what the command writes when it succeeds (measured first, on an
ordinary directory), so the write fails in the middle.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import lidar_util
import pytest
import session_util as su

from sensorbench.sim.emulator_ld19 import SyntheticLD19Samples

HERE = Path(__file__).parent
DISK_MB = 24
PODS_MODEL = HERE / "data" / "old_model_files" / "pods.toml"
SENSORBENCH = [sys.executable, "-c", "from sensorbench.cli import main; main()"]


def _run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*SENSORBENCH, *args], capture_output=True, text=True, timeout=timeout)


def _mount(path: Path, options: str) -> str:
    """Mount a tmpfs at ``path``; "" when done, else why not."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"rc {done.returncode}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=20)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """Inputs on an ordinary directory: a simulated square, a TUM file, an LD19 capture."""
    d = tmp_path_factory.mktemp("inputs")
    sim = d / "square.h5"
    done = _run(["simulate", "--scenario", "square", "-o", str(sim)])
    assert done.returncode == 0, done.stderr
    samples = SyntheticLD19Samples.generate(duration_s=6.0, p_no_return=0.02, seed=3)
    (d / "ld19.bin").write_bytes(lidar_util.ld19_bytes(samples))
    return {
        "sim": sim,
        "tum": su.write_tum(d / "mocap.tum", 30000),
        "raw": d / "ld19.bin",
        "session": su.write_small_session(d / "small.h5", lidar=su.lidar_turns(200, 1200)),
    }


@dataclass(frozen=True)
class Case:
    """One writing command: ``args(inputs, disk)`` and the path its message must name."""

    args: Callable[[dict[str, Path], Path], list[str]]
    named: str
    """The output's name relative to the disk."""
    existing: str = ""
    """A file the disk holds before the command runs (copied from inputs), kept intact."""


def _export(stream: str, fmt: str, out: str, *more: str) -> Case:
    """``export`` of ``stream`` of the simulated session to ``out`` on the disk."""
    return Case(
        lambda i, d: ["export", str(i["sim"]), "--stream", stream, "--format", fmt,
                      "-o", str(d / out), *more],
        out,
    )  # fmt: skip


CASES = {
    "import into a new session": Case(
        lambda i, d: ["import", "mocap", str(i["tum"]), "--format", "tum",
                      "--into", str(d / "new.h5")],
        "new.h5",
    ),
    "import into an existing session": Case(
        lambda i, d: ["import", "mocap", str(i["tum"]), "--format", "tum", "--name", "m2",
                      "--into", str(d / "small.h5")],
        "small.h5",
        existing="session",
    ),
    "simulate": Case(
        lambda i, d: ["simulate", "--scenario", "forward", "-o", str(d / "sim.h5")], "sim.h5"
    ),
    "decode ld19": Case(
        lambda i, d: ["decode", "ld19", str(i["raw"]), "-o", str(d / "dec.h5")], "dec.h5"
    ),
    "merge": Case(
        lambda i, d: ["merge", str(i["sim"]), "--front", "lidar_front", "--rear", "lidar_rear",
                      "-o", str(d / "merged.h5")],
        "merged.h5",
    ),
    "replay -o": Case(
        lambda i, d: ["replay", str(i["sim"]), "--pods", str(PODS_MODEL), "--t-end", "6",
                      "-o", str(d / "estimate.h5")],
        "estimate.h5",
    ),
    "export csv": _export("pods", "csv", "pods.csv"),
    "export tum": _export("mocap", "tum", "mocap.tum"),
    "export mcap": _export("pods", "mcap", "pods.mcap"),
    "export --force": replace(_export("mocap", "tum", "old.tum", "--force"), existing="tum"),
    "split": Case(
        lambda i, d: ["split", str(i["sim"]), "--pieces", "3", "-o", str(d / "pieces")],
        "pieces",
    ),
    "characterize --plots": Case(
        lambda i, d: ["characterize", "lidar", str(i["sim"]), "--device", "ld19",
                      "--timing-only", "--plots", str(d / "plots")],
        "plots",
    ),
    "fit pods -o": Case(
        lambda i, d: ["fit", "pods", str(i["sim"]), "-o", str(d / "pods.toml")], "pods.toml"
    ),
}  # fmt: skip

EXISTING_NAMES = {"session": "small.h5", "tum": "old.tum"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _bytes(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


class Sizes(dict):
    """Bytes each case writes when the disk has room (and that it succeeds then), run on
    first use: each test pays for its own case only (all 14 in the first test's set-up
    went past its 300 s with a second copy of the suite running beside it)."""

    def __init__(self, inputs: dict[str, Path], tmp_path_factory) -> None:
        super().__init__()
        self.inputs, self.factory = inputs, tmp_path_factory

    def __missing__(self, name: str) -> int:
        case = CASES[name]
        d = self.factory.mktemp("roomy")
        if case.existing and name != "export --force":  # that one: what it writes
            shutil.copy2(self.inputs[case.existing], d / EXISTING_NAMES[case.existing])
        before = _bytes(d / case.named)
        done = _run(case.args(self.inputs, d))
        assert done.returncode in (0, 1), (name, done.stderr)  # fit pods: 1 = incomplete
        self[name] = _bytes(d / case.named) - before
        return self[name]


@pytest.fixture(scope="module")
def sizes(inputs, tmp_path_factory) -> Sizes:
    return Sizes(inputs, tmp_path_factory)


@pytest.fixture
def disk(tmp_path) -> Iterator[Path]:
    """A fresh tmpfs of DISK_MB MB (skips where mounting is not allowed)."""
    path = tmp_path / "disk"
    why = _mount(path, f"size={DISK_MB}m")
    if why:
        pytest.skip(f"cannot mount a tmpfs here ({why}); needs root, as in CI")
    try:
        yield path
    finally:
        _umount(path)


def _fill(disk: Path, headroom: int) -> None:
    """Leave about ``headroom`` bytes free on ``disk``."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(disk / "filler", "wb") as fh, contextlib.suppress(OSError):
        fh.write(bytes(max(0, free - headroom)))


def _check_refusal(done: subprocess.CompletedProcess, disk: Path, case: Case) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert str(disk / case.named) in done.stderr, done.stderr
    left = [p.name for p in disk.rglob(".*")]
    assert left == [], f"left on the disk: {left}"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["start", "middle"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_full_disk_gives_exit_2_and_leaves_nothing(name, where, inputs, sizes, disk) -> None:
    case = CASES[name]
    kept = None
    headroom = 0
    if case.existing:
        kept = disk / EXISTING_NAMES[case.existing]
        shutil.copy2(inputs[case.existing], kept)
        before = _sha(kept)
        if name.startswith("import"):  # room for the copy: the new stream is what fails
            headroom = kept.stat().st_size
    if where == "middle":
        if sizes[name] < 16384:
            pytest.skip(f"{name} writes {sizes[name]} bytes: no middle on 4 KiB pages")
        headroom += sizes[name] // 2
    _fill(disk, headroom)
    _check_refusal(_run(case.args(inputs, disk)), disk, case)
    if kept is not None:
        assert _sha(kept) == before


@pytest.mark.parametrize("name", ["import into a new session", "export csv", "split"])
def test_a_full_disk_in_the_middle_of_a_write(name, inputs, sizes, disk) -> None:
    """The quick subset of the test above (that one runs with --runslow)."""
    _fill(disk, sizes[name] // 2)
    _check_refusal(_run(CASES[name].args(inputs, disk)), disk, CASES[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_a_read_only_disk_gives_exit_2(name, inputs, tmp_path) -> None:
    case = CASES[name]
    path = tmp_path / "ro"
    why = _mount(path, f"size={DISK_MB}m")
    if why:
        pytest.skip(f"cannot mount a tmpfs here ({why}); needs root, as in CI")
    try:
        kept = None
        if case.existing:
            kept = path / EXISTING_NAMES[case.existing]
            shutil.copy2(inputs[case.existing], kept)
            before = _sha(kept)
        remount = subprocess.run(
            ["mount", "-o", "remount,ro", str(path)], capture_output=True, timeout=20
        )
        assert remount.returncode == 0, remount.stderr
        _check_refusal(_run(case.args(inputs, path)), path, case)
        if kept is not None:
            assert _sha(kept) == before
    finally:
        _umount(path)


def test_a_failed_write_reaches_the_writer_not_hdf5(tmp_path, monkeypatch) -> None:
    """Without mounting (any machine): the disk fills after 200 kB; the offline writer
    reports it naming its output and leaves nothing, and HDF5, which never saw the
    error, closed the file normally (no crash of this process)."""
    import errno

    from sensorbench.errors import SessionError
    from sensorbench.logs.writer import SessionWriter

    real_pwrite = os.pwrite
    written = [0]

    def pwrite(fd: int, data, offset: int) -> int:
        if written[0] + len(data) > 200_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        written[0] += len(data)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    out = tmp_path / "s.h5"
    expected = rf"writing {out} failed: No space left on device"
    with pytest.raises(SessionError, match=expected), SessionWriter(out, swmr=False) as w:
        w.add_lidar("l")
        w.append_turns("l", su.lidar_turns(200, 1200))
    assert list(tmp_path.iterdir()) == []
