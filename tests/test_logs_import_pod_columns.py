"""``import pods --format csv --columns``: any logger's pod CSV, its headers mapped.

The files are written here as other loggers write them (``t,count0,count1,count2``,
milliseconds, semicolons, one or five counters); the imported stream must hold
exactly the values written, and a wrong mapping is exit 2 naming the column.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from importers_util import read_pod_csv

from sensorbench.cli import cli
from sensorbench.errors import ImportFormatError
from sensorbench.logs import Session
from sensorbench.logs.importers import parse_column_map

HELD_OUT_STYLE = "t,count0,count1,count2\n0.000,0,0,0\n0.005,12,-3,7\n0.010,25,-7,15\n"


def _import(tmp_path: Path, text: str, *extra: str, name: str = "log.csv"):
    path = tmp_path / name
    path.write_text(text)
    session = tmp_path / "s.h5"
    args = ["import", "pods", str(path), "--format", "csv", "--into", str(session), *extra]
    return CliRunner().invoke(cli, args), path, session


def test_the_held_out_style_csv_imports_with_columns(tmp_path: Path) -> None:
    r, _, session = _import(tmp_path, HELD_OUT_STYLE,
                            "--columns", "t_s=t,c0=count0,c1=count1,c2=count2")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "imported 3 samples" in r.output
    with Session(session) as s:
        stream = s.encoder("pods")
        b = stream.read()
        attrs = dict(stream.attrs)
    assert b.host_ns.tolist() == [0, 5_000_000, 10_000_000]
    assert b.counts.tolist() == [[0, 0, 0], [12, -3, 7], [25, -7, 15]]
    assert np.isnan(b.yaw).all() and np.isnan(b.yaw_rate).all()  # no IMU columns
    assert attrs["column_map"] == "t_s=t,c0=count0,c1=count1,c2=count2"
    assert attrs["time_base"] == "file timestamps (t_s: s)"


def test_without_the_mapping_the_file_is_refused_with_a_hint(tmp_path: Path) -> None:
    r, path, session = _import(tmp_path, HELD_OUT_STYLE)
    assert r.exit_code == 2
    assert f"{path}:1: no time column" in r.output and "--columns" in r.output
    assert not session.exists()


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (
            "t_s=time,c0=count0,c1=count1,c2=count2",
            r"log.csv:1: --columns t_s=time: no column 'time'",
        ),
        ("t_s=t,c0=count0,c1=count1,c2=count3", r"--columns c2=count3: no column 'count3'"),
        ("t_s=t,c0=count0,c2=count2", r"log.csv:1: counter columns must be c0, c1, .* c0, c2"),
        ("t_s=t,c0=count0,c1=count0", r"--columns maps column 'count0' twice \(c0, c1\)"),
        ("tee=t,c0=count0", r"--columns tee=t: unknown column name 'tee'"),
        ("t_s=t,c0=count0,c0=count1", r"--columns names 'c0' twice"),
        ("t_s", r"--columns entry 't_s' is not NAME=HEADER"),
    ],
)
def test_a_wrong_mapping_is_exit_2_naming_the_column(tmp_path, columns, message) -> None:
    r, _, session = _import(tmp_path, HELD_OUT_STYLE, "--columns", columns)
    assert r.exit_code == 2, r.output
    assert re.search(message, r.output), r.output
    assert not session.exists()


def test_a_bad_cell_names_the_file_s_own_header(tmp_path: Path) -> None:
    text = HELD_OUT_STYLE.replace("25,-7,15", "25,-7.5,15")
    r, path, _ = _import(tmp_path, text, "--columns", "t_s=t,c0=count0,c1=count1,c2=count2")
    assert r.exit_code == 2
    assert f"{path}:4:3: column 'count1': '-7.5' is not an integer" in r.output


@pytest.mark.parametrize(
    ("name", "cells", "ns"),
    [
        ("t_s", ["0", "1.000000001", "2.5"], [0, 1_000_000_001, 2_500_000_000]),
        ("t_ms", ["0", "1.5", "1000.000001"], [0, 1_500_000, 1_000_000_001]),
        ("t_us", ["0", "2.25", "7"], [0, 2_250, 7_000]),
        # big stamps past float64's 53 bits, steps under a day (a longer jump is refused)
        ("t_ns", ["1700000000000000000", "1700000000000000012", "1700000000000000999"],
         [1_700_000_000_000_000_000, 1_700_000_000_000_000_012, 1_700_000_000_000_000_999]),
        ("host_ns", ["5", "6", "7"], [5, 6, 7]),
    ],
)
def test_each_time_unit_is_converted_exactly(tmp_path, name, cells, ns) -> None:
    path = tmp_path / "p.csv"
    path.write_text("stamp,a\n" + "".join(f"{c},{k}\n" for k, c in enumerate(cells)))
    b = read_pod_csv(path, columns={name: "stamp", "c0": "a"}).batch
    assert b.host_ns.tolist() == ns and b.counts[:, 0].tolist() == [0, 1, 2]


def test_any_number_of_counters_imu_and_other_separators(tmp_path: Path) -> None:
    one = tmp_path / "one.txt"
    one.write_text("# a logger's banner\ntime_ms enc\n0 5\n10 -6\n")
    b = read_pod_csv(one, columns=parse_column_map("t_ms=time_ms,c0=enc", "pods")).batch
    assert b.counts.tolist() == [[5], [-6]] and b.host_ns.tolist() == [0, 10_000_000]
    five = tmp_path / "five.csv"
    five.write_text(
        "ts;e0;e1;e2;e3;e4;heading;turn\n1.0;1;2;3;4;5;0.5;nan\n1.5;2;3;4;5;6;0.6;0.2\n"
    )
    mapping = "t_s=ts,c0=e0,c1=e1,c2=e2,c3=e3,c4=e4,yaw=heading,yaw_rate=turn"
    r, _, session = _import(tmp_path, five.read_text(), "--columns", mapping, name="five.csv")
    assert r.exit_code == 0, r.output
    with Session(session) as s:
        b = s.encoder("pods").read()
    assert b.counts.tolist() == [[1, 2, 3, 4, 5], [2, 3, 4, 5, 6]]
    assert b.yaw.tolist() == [0.5, 0.6] and np.isnan(b.yaw_rate[0]) and b.yaw_rate[1] == 0.2


def test_one_time_column_is_used_the_mapped_one_when_there_are_several(tmp_path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("t_s,host_ns,c0\n1.0,7,1\n2.0,9,2\n")
    with pytest.raises(ImportFormatError, match=r"several time columns \(t_s, host_ns\)"):
        read_pod_csv(path)
    assert read_pod_csv(path, columns={"host_ns": "host_ns"}).batch.host_ns.tolist() == [7, 9]
    # a header taken by a mapping is not also read under its own name
    path.write_text("t_s,c0,c1\n1.0,5,6\n")
    b = read_pod_csv(path, columns={"c0": "c1", "c1": "c0"}).batch
    assert b.counts.tolist() == [[6, 5]]


def test_pods_help_lists_no_motive_or_position_options() -> None:
    r = CliRunner().invoke(cli, ["import", "pods", "--help"])
    assert r.exit_code == 0
    for stale in ("--body", "--up", "--max-position-m", "Motive", "RELOCALIZED"):
        assert stale not in r.output
    assert "--columns" in r.output and "t_ms" in r.output
    r = CliRunner().invoke(cli, ["import", "mocap", "--help"])
    assert "--body" in r.output and "--up" in r.output
