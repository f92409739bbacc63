"""A session whose attributes are damaged, or whose datasets declare absurd shapes, through
every command that reads it: ``check`` exits 1 naming what is wrong, the others exit 2
naming the file and what is wrong; never a traceback, a MemoryError or a silent exit 0.

Attributes are those a reader uses (docs/FORMAT.md, "Attributes"); a shape is absurd when
it declares more bytes than the whole (uncompressed) file holds: 2**40 rows in 1 MB.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner

from sensorbench.cli import cli

PODS = str(Path(__file__).parent / "data" / "old_model_files" / "pods.toml")

COMMANDS = {
    "info": ["info", "{S}"],
    "check": ["check", "{S}"],
    "report": ["report", "{S}", "-o", "{O}"],
    "replay": ["replay", "{S}", "--pods", PODS],
    "export": ["export", "{S}", "--format", "mcap", "-o", "{O}.mcap"],
    "split": ["split", "{S}", "--pieces", "2", "-o", "{O}"],
    "merge": ["merge", "{S}", "--front", "front", "--rear", "front", "-o", "{O}.h5"],
}

ATTRS = {  # name: (group, attribute, value)
    "duration nan": ("/", "duration_s", np.nan),
    "duration negative": ("/", "duration_s", -5.0),
    "duration text": ("/", "duration_s", "abc"),
    "wall anchor nan": ("/", "wall_clock_anchor_ns", np.nan),
    "monotonic anchor text": ("/", "monotonic_anchor_ns", "x"),
    "seed text": ("/", "seed", "x"),
    "seed negative": ("/", "seed", -3),
    "campaign session text": ("/", "campaign_session", "x"),
    "simulated text": ("/", "simulated", "yes"),
    "note not UTF-8": ("/", "note", b"\xff\xfe"),
    "hostname a number": ("/", "hostname", 5),
    "powerup order a number": ("/", "powerup_order", 3),
    "footprint text": ("/", "footprint_m", "x"),
    "devices not JSON": ("/", "devices_json", "not json"),
    "label an array": ("/", "label", np.arange(3)),
    "rate nan": ("pose/mocap", "rate_hz", np.nan),
    "rate negative": ("pose/mocap", "rate_hz", -120.0),
    "counter bits 200": ("encoders/pods", "counter_bits", 200),
    "n_counts text": ("encoders/pods", "n_counts", "3"),
    "mount nan": ("lidar/front", "mount_xy_yaw", [np.nan, 0.0, 0.0]),
    "mount two numbers": ("lidar/front", "mount_xy_yaw", [1.0, 2.0]),
    "mount text": ("lidar/front", "mount_xy_yaw", "abc"),
}

HUGE = ["events", "pose/mocap/t_ns", "pose/mocap/position", "encoders/pods/counts",
        "lidar/front/angle", "raw/front/data"]  # fmt: skip


def _run(command: str, session: Path, out: Path) -> tuple[int, str]:
    args = [a.replace("{S}", str(session)).replace("{O}", str(out)) for a in COMMANDS[command]]
    done = CliRunner().invoke(cli, args)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        raise AssertionError(f"{' '.join(args)}: uncaught {done.exception!r}") from done.exception
    return done.exit_code, done.output


def _refused(command: str, code: int, out: str, session: Path, *named: str) -> None:
    assert code == (1 if command == "check" else 2), out
    assert "Traceback" not in out
    for text in (str(session), *named):
        assert text in out, f"{text!r} not named in\n{out}"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", ATTRS)
def test_a_damaged_attribute_is_refused_naming_it(tmp_path, case, command) -> None:
    group, name, value = ATTRS[case]
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:
        f[group].attrs[name] = value
    code, out = _run(command, session, tmp_path / "out")
    _refused(command, code, out, session, repr(name))
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parametrize("command", ["info", "check", "export"])
@pytest.mark.parametrize("value", ["1", 2.5, True])
def test_a_schema_version_that_is_no_integer_is_refused(tmp_path, command, value) -> None:
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:
        f.attrs["schema_version"] = value
    code, out = _run(command, session, tmp_path / "out")
    assert code == 2 and "schema_version" in out and "not an integer" in out, out
    assert "newer" not in out  # it used to say "version 1 is newer than ... (1)"


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("dataset", HUGE)
def test_a_dataset_declaring_absurd_dimensions_is_refused(tmp_path, dataset, command) -> None:
    """2**40 rows declared (chunked, never written): the file stays ~1 MB; a read of the
    whole dataset would ask for terabytes (MemoryError in split, info, check, export)."""
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:
        ds = f[dataset]
        ds.resize((2**40, *ds.shape[1:]))
    assert session.stat().st_size < 2**22
    code, out = _run(command, session, tmp_path / "out")
    _refused(command, code, out, session, f"/{dataset}", "never written")
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("value", [3, 255])
def test_a_status_that_is_no_status_is_refused(tmp_path, value, command) -> None:
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:
        f["_status"][0] = value
    code, out = _run(command, session, tmp_path / "out")
    _refused(command, code, out, session, "/_status", f"{value} is no status")


INDEX = {"raw chunk offset": ("raw/front/chunks", "offset"),
         "raw chunk length": ("raw/front/chunks", "length"),
         "turn offset": ("lidar/front/turns", "offset"),
         "turn count": ("lidar/front/turns", "count")}  # fmt: skip


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "check"])
@pytest.mark.parametrize("damage", INDEX)
def test_a_closed_file_with_rows_past_its_consistent_data_is_refused_until_recovered(
    tmp_path, damage, command
) -> None:
    """An index row pointing past the stored points or bytes, or not where the row
    before it ends (a damaged index, or a write that failed), in a file marked closed:
    readers took a prefix (or the wrong points) without a word; now they refuse, and
    ``check --recover`` keeps the consistent rows."""
    table, field = INDEX[damage]
    session = su.write_small_session(tmp_path / "s.h5")
    with h5py.File(session, "r+") as f:
        rows = f[table][()]
        rows[field][-1] = 2**31 - 1
        f[table][...] = rows
    code, out = _run(command, session, tmp_path / "out")
    _refused(command, code, out, session, "/" + table.rsplit("/", 1)[0], "check --recover")
    assert not list(tmp_path.glob("out*"))
    done = CliRunner().invoke(cli, ["check", "--recover", str(session)])
    assert done.exit_code == 0 and "OK (recovered)" in done.output, done.output
    if command == "info":
        code, out = _run(command, session, tmp_path / "out")
        assert code == 0, out


_KILLED_WRITER = """
import os, sys, time
import session_util as su
from sensorbench.logs import SessionWriter
w = SessionWriter(sys.argv[1], label="killed", flush_interval_s=0.05)
w.add_encoder("pods", 3)
w.start()
w.append_encoder("pods", su.encoder_batch(su.T0 + su.np.arange(50) * 10**7,
                                          su.np.zeros((50, 3), su.np.int64)))
time.sleep(0.5)
os.kill(os.getpid(), 9)
"""


def _damage_root_header(path: Path) -> None:
    """Flip bytes inside the root group's object header: its checksum then fails."""
    data = bytearray(path.read_bytes())
    root = int.from_bytes(data[36:44], "little")  # v2/v3 superblock: the root's address
    assert data[root : root + 4] == b"OHDR", data[root : root + 4]
    for i in range(root + 8, root + 24):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("writer", ["closed", "killed SWMR writer"])
def test_metadata_with_a_bad_checksum_is_refused_at_once(tmp_path, writer, command) -> None:
    """Metadata whose checksum fails, in a closed file and in one its SWMR writer left
    open: refused (exit 2, the file named, "corrupt") in seconds. A SWMR reader retries
    such a read, HDF5's default 100 times with a doubling sleep: `info` on the killed
    writer's file had not returned after 5 minutes."""
    session = tmp_path / "s.h5"
    if writer == "closed":
        su.write_small_session(session)
    else:
        done = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(session)],
                              cwd=Path(__file__).parent, timeout=60, check=False)  # fmt: skip
        assert done.returncode == -signal.SIGKILL
        assert session.read_bytes()[11] & 0x4, "the writer left it marked for SWMR writing"
    _damage_root_header(session)
    t0 = time.monotonic()
    code, out = _run(command, session, tmp_path / "out")
    assert time.monotonic() - t0 < 20.0
    assert code == 2 and str(session) in out and "corrupt" in out and "Traceback" not in out, out
    assert not list(tmp_path.glob("out*"))
