"""robot.toml states the pod board and counts/rev; bring-up warns when the drive's top
speed would exceed the board's measured count rate (firmware/README.md)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers import pods_kind
from sensorbench.drivers.robot_config import parse_robot_config
from sensorbench.errors import ConfigError

CONFIG = """
[robot]
name = "pods"

[[devices]]
name = "pods"
kind = "pods"
port = "{run_dir}/nothing-here"
timeout_s = 0.2

[pods]
wheel_radius_m = 0.016
counts_per_rev = {cpr}
wheels = [{{x_m = 0.0, y_m = 0.15, angle_deg = 0.0}}, {{x_m = 0.0, y_m = -0.15, angle_deg = 0.0}},
          {{x_m = -0.1, y_m = 0.0, angle_deg = 90.0}}]
board = "{board}"
top_speed_m_s = 1.5
"""


def limit_speed(board: str, cpr: int) -> float:
    return pods_kind.BOARD_COUNT_RATE[board] / cpr * 2 * math.pi * 0.016


@pytest.mark.parametrize(("cpr", "board", "warns"), [
    (2000, "atmega328p", False),  # 29 800 counts/s: under the measured 91 000
    (8192, "atmega328p", True),  # 122 000 counts/s
    (8192, "stm32f4", False),  # counted in hardware
])  # fmt: skip
def test_bringup_warns_when_the_top_speed_exceeds_the_boards_count_rate(
    tmp_path, cpr, board, warns
):
    path = tmp_path / "robot.toml"
    path.write_text(CONFIG.format(run_dir=tmp_path, cpr=cpr, board=board))
    pods = parse_robot_config(path.read_text(), str(path), run_dir=tmp_path).pods
    assert pods is not None and pods.board == board and pods.counts_per_rev == cpr
    assert (limit_speed(board, cpr) < 1.5) == warns
    res = CliRunner().invoke(cli, ["bringup", "--config", str(path)])
    assert res.exit_code == 1  # no device there
    assert ("counts/s per pod" in res.stderr) == warns, res.stderr


def test_an_unknown_board_is_refused_where_it_is_written(tmp_path):
    text = CONFIG.format(run_dir=tmp_path, cpr=2000, board="esp32")
    must = r"^r\.toml:\d+: pods\.board: must be one of \[.*\], got 'esp32'"
    with pytest.raises(ConfigError, match=must):
        parse_robot_config(text, "r.toml", run_dir=tmp_path)


def test_check_says_which_device_reported_lost_counts(tmp_path):
    from sensorbench.logs import SessionWriter
    from sensorbench.logs.check import check_session

    path = tmp_path / "s.h5"
    with SessionWriter(path, label="loss") as w:
        w.start()
        w.event(1_000, "pods", "count_loss", "the MCU lost 2 counts (pod 0: 2, ...)")
        w.event(2_000, "pods", "count_loss", "the MCU lost 4 counts (pod 1: 4, ...)")
        w.event(3_000, "pods", "note", "unrelated")
    report = check_session(path)
    assert report.ok
    assert [w for w in report.warnings if "count_loss" in w] == [
        "pods: the device reported counts it lost in 2 reads (count_loss events): fits and "
        "replays over those intervals are not exact"
    ]
