"""Imports read any file with bounded memory: a chunk at a time into the session.

Each case runs in a child process whose address space is limited (RLIMIT_AS, 1 GiB: a
2 GiB file cannot be held), where it must import or refuse with exit 2 and a message,
never a MemoryError or any traceback. Sparse files (a valid head, then a 2 GiB hole of
NUL bytes) are refused where the hole starts; a large valid file (``--runslow``) imports
with the child's peak memory well below what holding its rows would take.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import session_util as su

GiB = 2**30
LIMIT = 1 * GiB

_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), resource.RLIM_INFINITY))
from click.testing import CliRunner
from sensorbench.cli import cli
out = []
for args in json.loads(sys.argv[2]):
    r = CliRunner().invoke(cli, args)
    out.append([r.exit_code, r.output, repr(r.exception) if r.exit_code not in (0, 2) else ""])
# this process's own peak (kB): VmHWM belongs to the address space exec made, whereas
# ru_maxrss keeps the forking pytest worker's resident size across the exec
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps([out, int(hwm.split()[1])]))
"""


def _run_limited(cases: list[list[str]], timeout: float = 600) -> tuple[list, int]:
    """(exit code, output, unexpected exception) per command line, and the peak RSS (kB)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(LIMIT), json.dumps(cases)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results, peak_kb = json.loads(done.stdout)
    return results, peak_kb


def _sparse(path: Path, head: str) -> Path:
    path.write_text(head)
    os.truncate(path, 2 * GiB)  # a hole: reads as NUL bytes, takes no disk
    return path


def test_sparse_files_of_every_format_are_refused_at_the_hole(tmp_path) -> None:
    motive = su.motive_text(n=3, extra_body=False)[0]
    kitti_pose = "1 0 0 0 0 1 0 0 0 0 1 0\n"
    files = {
        "tum": _sparse(tmp_path / "a.tum", "1.0 0 0 0 0 0 0 1\n"),
        "euroc": _sparse(tmp_path / "a.csv", "#timestamp,p_RS_R_x,p_RS_R_y,p_RS_R_z,"
                         "q_RS_w,q_RS_x,q_RS_y,q_RS_z\n1000,0,0,0,1,0,0,0\n"),
        "csv": _sparse(tmp_path / "p.csv", "t_s,x,y,z,qx,qy,qz,qw\n1.0,0,0,0,0,0,0,1\n"),
        "pods": _sparse(tmp_path / "pods.csv", "t_s,c0,c1,c2\n0.0,0,0,0\n"),
        "motive": _sparse(tmp_path / "m.csv", motive),
        "kitti": _sparse(tmp_path / "k.txt", kitti_pose),
        "kitti times": _sparse(tmp_path / "times.txt", "0.0\n"),
        "all hole": _sparse(tmp_path / "hole.tum", ""),
    }  # fmt: skip
    (tmp_path / "ok.txt").write_text("0.0\n")
    (tmp_path / "ok_pose.txt").write_text(kitti_pose)
    s = str(tmp_path / "s.h5")
    cases = {
        "tum": ["import", "pose", "--format", "tum", str(files["tum"]), "--into", s],
        "euroc": ["import", "mocap", "--format", "euroc", str(files["euroc"]), "--into", s],
        "csv": ["import", "pose", "--format", "csv", str(files["csv"]), "--into", s],
        "pods": ["import", "pods", "--format", "csv", str(files["pods"]), "--into", s],
        "motive": ["import", "mocap", "--format", "motive", str(files["motive"]), "--into", s],
        "kitti": ["import", "pose", "--format", "kitti", str(files["kitti"]), "--times",
                  str(tmp_path / "ok.txt"), "--into", s],
        "kitti times": ["import", "pose", "--format", "kitti", str(tmp_path / "ok_pose.txt"),
                        "--times", str(files["kitti times"]), "--into", s],
        "all hole": ["import", "pose", "--format", "tum", str(files["all hole"]), "--into", s],
    }  # fmt: skip
    results, _ = _run_limited(list(cases.values()))
    for case, (code, output, exc) in zip(cases, results, strict=True):
        assert code == 2 and not exc, (case, code, output, exc)
        assert "NUL byte" in output and "Traceback" not in output, (case, output)
        named = files[case]
        assert f"{named}:" in output, (case, output)  # file:line:column of the hole
    assert not Path(s).exists()  # nothing was written


def _big_tum(path: Path, rows: int) -> Path:
    """``rows`` TUM lines 10 ms apart, built as fixed-width bytes (fast)."""
    tail = np.frombuffer(b" 0.5 0.25 0.1 0 0 0 1\n", np.uint8)
    with open(path, "wb") as f:
        for start in range(0, rows, 1 << 20):
            i = np.arange(start, min(rows, start + (1 << 20)))
            buf = np.empty((i.size, 12 + tail.size), np.uint8)
            sec, frac = i // 100, i % 100
            for p in range(9):
                buf[:, 8 - p] = 48 + (sec // 10**p) % 10
            buf[:, 9] = ord(".")
            buf[:, 10], buf[:, 11] = 48 + frac // 10, 48 + frac % 10
            buf[:, 12:] = tail
            f.write(buf.tobytes())
    return path


@pytest.mark.slow
def test_a_large_file_imports_with_bounded_memory(tmp_path) -> None:
    """3 million poses (105 MB of text; held whole, 250 B a row: 750 MB, beyond the 1 GiB
    address space with the interpreter's own) import with the child's peak RSS under
    400 MB: what a chunk of 65 536 rows and the libraries take, not the file."""
    rows = 3_000_000
    src = _big_tum(tmp_path / "big.tum", rows)
    s = tmp_path / "s.h5"
    results, peak_kb = _run_limited(
        [["import", "pose", "--format", "tum", str(src), "--into", str(s)]], timeout=1200
    )
    code, output, exc = results[0]
    assert code == 0 and not exc, (output, exc)
    assert f"imported {rows} samples" in output
    assert peak_kb * 1024 < 400e6, peak_kb
    from sensorbench.logs import Session

    with Session(s) as ses:
        batch = ses.pose("pose_sensor").read()
    np.testing.assert_array_equal(batch.t_ns, np.arange(rows) * 10_000_000)
