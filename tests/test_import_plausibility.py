"""Plausibility (issue 40, item 4): values each of which is a number, but which together
FORMAT.md rules out — counters that wrap or jump faster than any wheel turns, INT64_MIN,
wrapped sequence numbers and device times, a no-break space after a count, a mapping
that reads one column twice, stream names that are not names, a Motive file with two
bodies of one name — end in exit 2 naming file:line:column; legal data still import.
The same values written into a session by other means fail ``check``."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.batches import EncoderBatch
from sensorbench.logs.values import MAX_COUNTS_PER_S, MIN_STEP_S

HEADER = "t_s,c0,c1,c2,seq,device_us"


def _pods(rows: list[tuple[float, int, int, int, int, int]]) -> str:
    return HEADER + "\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows)


def _steady(n: int = 10, dt: float = 0.005) -> list[list]:
    """n frames 5 ms apart, 10 counts a frame on each pod, seq and device µs counting up."""
    return [[round(1.0 + k * dt, 6), 10 * k, 20 * k, -10 * k, k, 1000 + 5000 * k] for k in range(n)]


def _import(tmp_path: Path, text: str, what: str = "pods", *extra: str, fname: str = "f.csv"):
    path = tmp_path / fname
    path.write_text(text)
    session = tmp_path / "s.h5"
    fmt = "csv" if what in ("pods", "pose", "mocap") and "--format" not in extra else None
    args = ["import", what, str(path), "--into", str(session), *extra]
    if fmt:
        args += ["--format", fmt]
    return CliRunner().invoke(cli, args), path, session


def _with(row: int, col: int, value: int) -> str:
    rows = _steady()
    rows[row][col] = value
    return _pods(rows)


@pytest.mark.parametrize(
    ("row", "col", "value", "words"),
    [
        # c1 wraps at 16 bits: 32767 + a few counts reads as -32768 + ...
        (5, 2, 20 * 5 - 2**16, "16-bit counter wrapping"),
        (5, 2, 20 * 5 + 2**32, "32-bit counter wrapping"),
        (5, 1, 10 * 5 + 1_000_000, "faster than"),  # 1e6 counts in 5 ms
        (5, 3, 4_600_000_000_000_000_000, "beyond ±2**53"),
        (5, 1, -(2**63), "INT64_MIN"),
    ],
)
def test_counter_jumps_no_wheel_makes_are_refused(tmp_path, row, col, value, words) -> None:
    r, path, session = _import(tmp_path, _with(row, col, value))
    assert r.exit_code == 2, r.output
    assert f"{path}:{row + 2}:{col + 1}: column 'c{col - 1}'" in r.output, r.output
    assert words in r.output
    assert not session.exists()


@pytest.mark.parametrize(
    ("col", "value", "name"),
    [(4, 0, "seq"), (5, 1000 + 5000 * 5 - 2**32, "device_us")],  # wrapped at 16 / 32 bits
)
def test_wrapped_seq_and_device_time_are_refused(tmp_path, col, value, name) -> None:
    rows = _steady()
    for k in range(5, 10):  # from row 5 on the column restarts from its wrap
        rows[k][col] = value + (k - 5) * (1 if name == "seq" else 5000)
    r, path, _ = _import(tmp_path, _pods(rows))
    assert r.exit_code == 2, r.output
    assert f"{path}:7:{col + 1}: column '{name}'" in r.output and "steps back" in r.output


def test_fast_but_possible_steps_import(tmp_path) -> None:
    """The limit is a wheel's, with the interval: the largest legal steps pass exactly."""
    rows = _steady()
    limit = int(MAX_COUNTS_PER_S * MIN_STEP_S)  # the largest step in 5 ms
    rows[3][1] = rows[2][1] + limit
    rows[7][0] = round(rows[6][0] + 1.0, 6)  # a 1 s gap (then 6 more frames 5 ms apart)
    for k in range(7, 10):
        rows[k][0] = round(rows[6][0] + 1.0 + (k - 7) * 0.005, 6)
        rows[k][2] = rows[6][2] + 9_000_000 + 20 * (k - 7)  # 9e6 counts in 1 s
    r, _, session = _import(tmp_path, _pods(rows))
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        assert s.encoder("pods").read().counts.tolist() == [row[1:4] for row in rows]


def _mecanum(n: int = 60) -> list[list]:
    """Four counters at 49 Hz, 210 ticks a revolution (a real mecanum robot's shape):
    each wheel 0.5 rev/s (2 counts a frame) from a count near 17 000."""
    dt = 1 / 49
    return [[round(k * dt, 6), *(17_000 + 1000 * j + 2 * k for j in range(4))] for k in range(n)]


def _csv4(rows: list[list]) -> str:
    return "t_s,c0,c1,c2,c3\n" + "".join(",".join(str(v) for v in r) + "\n" for r in rows)


@pytest.mark.parametrize("signed", [False, True])
def test_a_16_bit_wrap_between_frames_20_ms_apart_is_refused(tmp_path, signed) -> None:
    """At 49 Hz a 16-bit wrap steps 65 536 counts in 20 ms, 3.2e6 counts/s: under the
    garbage limit (1e7) but 4x the fastest wheel; it is named, not passed to ``fit pods``
    (which blamed the clocks: 'align best near -0.85 s')."""
    rows = _mecanum()
    top = 32_767 if signed else 65_535
    for k, row in enumerate(rows):  # c1 counts up through the counter's top at frame 30
        row[2] = top - 59 + 2 * k
        if row[2] > top:
            row[2] -= 2**16
    r, path, session = _import(tmp_path, _csv4(rows))
    assert r.exit_code == 2, r.output
    where = f"{path}:32:3: column 'c1': counter c1 jumps by -65534 in 0.0204 s, faster than 1e+06"
    assert where in r.output, r.output
    assert "16-bit counter wrapping" in r.output and not session.exists()


def test_mecanum_shaped_gaps_and_repeated_frames_import(tmp_path) -> None:
    """A 2 s hole in the frames with the wheels turning through it (65 536 counts, the
    wrap's size, at 3.3e4 counts/s) and repeated frames import: all but the repeats."""
    rows = _mecanum()
    for k in range(30, 60):
        rows[k][0] = round(rows[k][0] + 2.0, 6)
        rows[k][2] += 2**16
    text = _csv4([*rows[:10], rows[9], *rows[10:]])  # line 12 repeats line 11
    r, _, session = _import(tmp_path, text)
    assert r.exit_code == 0, r.output
    assert "dropped 1 line(s) repeating a timestamp" in r.output
    with Session(session) as s:
        b = s.encoder("pods").read()
    assert b.counts.tolist() == [row[1:] for row in rows]


@pytest.mark.parametrize("sep", [",", " "])
def test_a_no_break_space_after_a_count_is_refused(tmp_path, sep) -> None:
    rows = _steady()
    rows[6][1] = "60\u00a0"
    text = _pods(rows).replace(",", sep)
    r, path, _ = _import(tmp_path, text)
    assert r.exit_code == 2, r.output
    assert f"{path}:8:2: column 'c0': '60\\xa0' is not an integer" in r.output  # shown, not hidden


def test_a_session_with_wrapped_counts_fails_check(tmp_path) -> None:
    """What the importer refuses, ``check`` finds in a session written otherwise."""
    n = 10
    counts = np.cumsum(np.full((n, 3), 10), axis=0)
    counts[6:, 1] -= 2**16
    seq = np.arange(n)
    seq[8:] -= 256
    path = tmp_path / "w.h5"
    with SessionWriter(path, swmr=False) as w:
        w.add_encoder("pods", n_counts=3)
        w.append_encoder(
            "pods",
            EncoderBatch(
                su.T0 + np.arange(n) * 5_000_000,
                np.full(n, -(2**63)),
                seq,
                counts,
                np.full(n, np.nan),
                np.full(n, np.nan),
            ),
        )
    r = CliRunner().invoke(cli, ["check", str(path)])
    assert r.exit_code == 1, r.output
    assert "encoders/pods/counts[6]: counter c1 jumps by -65526" in r.output
    assert "16-bit" in r.output
    assert "encoders/pods/seq[8]: the sequence number steps back" in r.output


def test_a_column_mapped_over_another_is_refused(tmp_path) -> None:
    text = "t_s,x,y,yaw\n0.0,1.0,2.0,0.0\n0.1,1.5,2.5,0.1\n"
    r, _, session = _import(tmp_path, text, "mocap", "--columns", "y=x")
    assert r.exit_code == 2, r.output
    # x's header now belongs to y: nothing copied, and the message says where x's column went
    assert "header lacks x (--columns reads its column as y)" in r.output
    assert not session.exists()
    r = _import(tmp_path, text, "mocap", "--columns", "x=x,y=x")[0]
    assert r.exit_code == 2 and "maps column 'x' twice" in r.output, r.output


@pytest.mark.parametrize("name", ["..", ".", "a\nb", "tab\there", " lead", "bell\x07", "a/b"])
def test_stream_names_that_are_not_names_are_refused(tmp_path, name) -> None:
    r, _, session = _import(tmp_path, _pods(_steady()), "pods", "--name", name)
    assert r.exit_code == 2, r.output
    assert "invalid stream name" in r.output
    assert not session.exists()


def test_a_motive_file_with_two_bodies_of_one_name_is_refused(tmp_path) -> None:
    text = su.motive_text(leading_label_cell=True)[0].replace("wand", "robot")
    r, path, _ = _import(tmp_path, text, "mocap", "--format", "motive", fname="take.csv")
    assert r.exit_code == 2, r.output
    assert f"{path}:4: two rigid bodies are named 'robot' (IDs 1 and 2)" in r.output


def _limited(args: list[str]) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    code = "import sys; from sensorbench.cli import cli; sys.argv[0] = 'sensorbench'; cli()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize("fmt", ["pods", "kitti"])
def test_a_2_gib_sparse_file_is_refused_within_1_gib(tmp_path, fmt) -> None:
    """A file of any size is read in bounded blocks: a 2 GiB sparse file (a few rows,
    then a hole of NUL bytes) ends in exit 2 naming where the text stops, not a
    MemoryError, under RLIMIT_AS = 1 GiB."""
    big = tmp_path / "big.txt"
    if fmt == "pods":
        big.write_text(_pods(_steady()))
        args = ["import", "pods", str(big), "--format", "csv"]
        line = 12
    else:
        big.write_text("1 0 0 0 0 1 0 0 0 0 1 0\n" * 3)
        times = tmp_path / "times.txt"
        times.write_text("0.0\n0.1\n0.2\n")
        args = ["import", "pose", str(big), "--format", "kitti", "--times", str(times)]
        line = 4
    os.truncate(big, 2 << 30)
    r = _limited([*args, "--into", str(tmp_path / "s.h5")])
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{big}:{line}:1: a NUL byte" in r.stderr + r.stdout
    assert "MemoryError" not in r.stderr


def test_a_large_pod_csv_imports_within_1_gib(tmp_path) -> None:
    """500 000 frames (16 MB of text) under RLIMIT_AS = 1 GiB: the file is read in blocks
    and written to the session a chunk at a time (peak RSS 211 MB for 1 M frames, 188 MB
    for 200 k: bounded, not proportional to the file)."""
    n = 500_000
    k = np.arange(n)
    t = 1.0 + k * 0.005
    path = tmp_path / "big.csv"
    with open(path, "w") as fh:
        fh.write("t_s,c0,c1,c2\n")
        for s in range(0, n, 50_000):
            part = slice(s, s + 50_000)
            fh.write(
                "".join(
                    f"{a:.3f},{b},{b},{-b}\n" for a, b in zip(t[part], 7 * k[part], strict=True)
                )
            )
    session = tmp_path / "s.h5"
    r = _limited(["import", "pods", str(path), "--format", "csv", "--into", str(session)])
    assert r.returncode == 0, r.stderr[-2000:]
    with Session(session) as s:
        b = s.encoder("pods").read()
    assert len(b) == n and b.counts[-1].tolist() == [7 * (n - 1), 7 * (n - 1), -7 * (n - 1)]


@pytest.mark.parametrize("command", ["fit pose-error", "validate"])
def test_a_stream_compared_with_itself_is_refused(tmp_path, command) -> None:
    session = su.write_small_session(tmp_path / "a.h5")
    args = [*command.split(), str(session), "--sensor", "mocap", "--reference", "mocap"]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2, r.output
    assert "both stream 'mocap'" in r.output


@pytest.mark.parametrize("baud", ["12345", "0", "115201", "true", "115200.0"])
def test_a_line_rate_no_bridge_runs_is_refused(baud) -> None:
    from capture_util import ROBOT_TOML as GOOD

    from sensorbench.drivers.robot_config import parse_robot_config
    from sensorbench.errors import ConfigError

    text = GOOD.replace(
        'port = "/dev/sensorbench/top"', f'port = "/dev/sensorbench/top"\nbaud = {baud}'
    )
    line = text.splitlines().index(f"baud = {baud}") + 1
    must = rf"(?i)^robot.toml:{line}: devices\[\d\]\.baud: must be (an integer|one of \[1200, .*\])"
    with pytest.raises(ConfigError, match=rf"{must}, got {re.escape(baud)}$"):
        parse_robot_config(text, "robot.toml")
    ok = text.replace(f"baud = {baud}", "baud = 230400")
    assert parse_robot_config(ok, "robot.toml").device("top").baud == 230400


@pytest.mark.parametrize(
    ("attrs", "words"),
    [
        ({"scenario_toml": "name = [unclosed", "emulation_speed": 8.0}, "not valid TOML"),
        ({"scenario_toml": "lidars = 3", "emulation_speed": 8.0}, "lidars is not a table"),
        ({"scenario_toml": 'name = "s"', "emulation_speed": "fast"}, "emulation_speed 'fast'"),
        ({"scenario_toml": 'name = "s"', "emulation_speed": float("nan")}, "emulation_speed nan"),
        ({"scenario_toml": 'name = "s"', "emulation_speed": 0.0}, "emulation_speed 0.0"),
    ],
)
def test_report_refuses_a_damaged_recorded_scenario(tmp_path, attrs, words) -> None:
    path = tmp_path / "sim.h5"
    with SessionWriter(path, swmr=False) as w:
        w.add_encoder("pods", n_counts=3)
        w.append_encoder("pods", _frames(10))
        w.set_truth("pods/geometry", np.zeros((3, 6)))
        w.set_truth_attrs(attrs)
    r = CliRunner().invoke(cli, ["report", str(path), "-o", str(tmp_path / "rep")])
    assert r.exit_code == 2, r.output
    assert f"{path}: /truth is damaged: " in r.output and words in r.output, r.output


def _frames(n: int) -> EncoderBatch:
    return EncoderBatch(
        su.T0 + np.arange(n) * 5_000_000,
        np.full(n, -(2**63)),
        np.arange(n),
        np.cumsum(np.full((n, 3), 10), axis=0),
        np.full(n, np.nan),
        np.full(n, np.nan),
    )


def test_capture_drops_pod_frames_with_non_finite_imu_values_and_counts_them() -> None:
    """A binary pod frame with a good CRC but inf/nan IMU values is rejected at the frame
    (the session would hold what ``check`` refuses) and counted; the others pass."""
    from sensorbench.drivers.pods_parser import PodStreamParser
    from sensorbench.sim.emulator_pods import encode_binary

    k = 8
    rate = np.linspace(-1, 1, k)
    yaw = np.linspace(0, 0.7, k)
    rate[2], yaw[5], rate[6], yaw[6] = np.inf, np.nan, -np.inf, np.inf
    data, _ = encode_binary(
        np.arange(k), 5000 * np.arange(k), np.tile(np.arange(k)[:, None], (1, 3)), 16, rate, yaw
    )
    p = PodStreamParser(3, 16)
    f = p.feed(data)
    assert f.seq.tolist() == [0, 1, 3, 4, 7]
    assert p.stats.non_finite == 3 and p.stats.crc_errors == 0
    assert np.isfinite(f.yaw).all() and np.isfinite(f.yaw_rate).all()
    assert f.yaw.tolist() == yaw[[0, 1, 3, 4, 7]].astype(np.float32).astype(float).tolist()


@pytest.mark.parametrize(
    ("what", "fmt", "make", "scipy"),
    [
        ("mocap", "tum", lambda p: su.write_tum(p / "m.tum", 20), False),
        (
            "mocap",
            "motive",
            lambda p: _write(p / "take.csv", su.motive_text(extra_body=False)[0]),
            False,
        ),
        ("pods", "csv", lambda p: _write(p / "f.csv", _pods(_steady())), False),
        # a repeated stamp with another pose: the RELOCALIZED test needs scipy's rotations
        (
            "mocap",
            "tum",
            lambda p: _write(p / "d.tum", "1.0 0 0 0 0 0 0 1\n1.0 5 0 0 0 0 0 1\n"),
            True,
        ),
    ],
)
def test_imports_load_scipy_only_when_they_use_it(tmp_path, what, fmt, make, scipy) -> None:
    """Issue 36: ``import mocap`` spent 65 % of its start-up importing scipy it did not use."""
    src = make(tmp_path)
    code = (
        "import sys; from sensorbench.logs.importers import import_file; "
        f"import_file({what!r}, {str(src)!r}, {fmt!r}, {str(tmp_path / 's.h5')!r}); "
        "print('scipy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(scipy)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
