"""Damaged and crafted ROS bags: exit 2 naming the bag, never a traceback.

Bags written here with rosbags' own writers (``test_logs_import_rosbag.write_bag``) get
bits flipped at random places or are cut short. ``info`` and ``import rosbag`` must then
either work (a flip inside a number's bytes changes the number: ROS 1 bags have no
checksum to tell) or exit 2 naming the bag; rosbags' own ``AssertionError``,
``ReaderError`` and decoder errors used to escape as tracebacks. ``info`` decodes every
message, so a bag an import finds damaged is one ``info`` calls damaged too (it used to
list its topics and exit 0).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli

rosbags = pytest.importorskip("rosbags")
import test_logs_import_rosbag as bags  # noqa: E402
from rosbags.rosbag2 import StoragePlugin  # noqa: E402
from rosbags.rosbag2 import Writer as Writer2  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

FLIPS = 20
TOPICS = ["--topic", "/odom=odom:estimate", "--topic", "/scan=lidar_front"]


def _data_file(bag: Path) -> Path:
    return bag if bag.is_file() else next(p for p in bag.iterdir() if p.suffix in (".mcap", ".db3"))


def _invoke(args: list[str]):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args[:2]}: uncaught {result.exception!r}") from result.exception
    return result


@pytest.mark.parametrize("fmt", ["ros1", "mcap"])
def test_flipped_bits_and_cut_bags_exit_0_or_2_naming_the_bag(fmt, tmp_path) -> None:
    bag = bags.write_bag(tmp_path, fmt)
    target = _data_file(bag)
    original = target.read_bytes()
    rng = random.Random(7)
    refused = 0
    for k in range(FLIPS + 5):
        data = bytearray(original)
        if k < FLIPS:
            for _ in range(3):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        else:  # cut short
            del data[rng.randrange(64, len(data)) :]
        target.write_bytes(bytes(data))
        info = _invoke(["info", bag])
        imported = _invoke(["import", "rosbag", bag, *TOPICS, "--into", tmp_path / f"s{k}.h5"])
        for result in (info, imported):
            assert result.exit_code in (0, 2), result.output
            if result.exit_code == 2:
                assert str(bag) in result.output, result.output
        if imported.exit_code == 2 and "damaged" in imported.output:
            assert info.exit_code == 2, f"flip {k}: import says damaged, info did not"
        refused += imported.exit_code == 2
    assert refused >= 5  # the cut bags at least: the test exercised the damage paths


def test_a_laserscan_with_angle_increment_0_is_refused(tmp_path) -> None:
    store = get_typestore(Stores.ROS2_HUMBLE)
    T = store.types
    path = tmp_path / "scan0"
    with Writer2(path, version=8, storage_plugin=StoragePlugin.MCAP) as w:
        conn = w.add_connection("/scan", "sensor_msgs/msg/LaserScan", typestore=store)
        for k in range(3):
            ns = 1_700_000_000_000_000_000 + k * 100_000_000
            msg = T["sensor_msgs/msg/LaserScan"](
                header=T["std_msgs/msg/Header"](
                    stamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                    frame_id="laser",
                ),
                angle_min=-math.pi,
                angle_max=math.pi,
                angle_increment=0.0,
                time_increment=0.0,
                scan_time=0.1,
                range_min=0.1,
                range_max=12.0,
                ranges=bags.SCAN_R[0],
                intensities=bags.SCAN_I[0],
            )
            w.write(conn, ns, store.serialize_cdr(msg, "sensor_msgs/msg/LaserScan"))
    result = _invoke(
        ["import", "rosbag", path, "--topic", "/scan=front", "--into", tmp_path / "s.h5"]
    )
    assert result.exit_code == 2
    assert f"{path}:/scan:1: angle_increment is 0" in result.output, result.output
    assert not (tmp_path / "s.h5").exists()
