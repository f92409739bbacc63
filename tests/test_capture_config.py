"""robot.toml validation: bad configurations are refused before any device is opened,
with the line of the offending key; the shipped examples are valid."""

from __future__ import annotations

import math

import capture_util as cu
import pytest
from capture_util import ROBOT_TOML as GOOD
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers.robot_config import load_robot_config, parse_robot_config
from sensorbench.errors import ConfigError


def _line_of(text: str, needle: str, nth: int = 1) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[nth - 1]


def test_good_config_and_its_units() -> None:
    c = parse_robot_config(GOOD, "good.toml")
    assert [d.name for d in c.devices] == ["front", "top", "pods"]
    assert c.powerup_order == ("front", "top", "pods")
    top = c.device("top")
    assert top.baud == 230400 and top.gap_s == 0.5 and top.mount.yaw_rad == pytest.approx(3.14159)
    assert c.device("front").gap_s == 1.0 and c.device("front").baud == 115200
    assert c.device("pods").protocol == "csv" and c.device("pods").mount is None
    assert c.footprint_m.shape == (4, 2)


def test_shipped_examples_are_valid(tmp_path) -> None:
    real = load_robot_config(cu.REPO / "examples" / "robot.toml")
    assert {d.kind for d in real.devices} == {"a1", "ld19", "pods"}
    assert [d.port for d in real.devices] == [f"/dev/{d.name}" for d in real.devices]
    rear = real.device("lidar_rear")
    assert rear.mount.yaw_rad == pytest.approx(math.pi) and rear.mount.x_m == -0.2
    assert len(real.pods.wheels) == 3 and real.pods.counts_per_rev == 2000
    emu = load_robot_config(cu.EMULATED_CONFIG, run_dir=tmp_path)
    assert all(d.port.startswith(str(tmp_path)) for d in emu.devices)
    front, back = emu.device("lidar_front"), emu.device("lidar_rear")
    assert front.serial != back.serial  # same USB IDs, different units


@pytest.mark.parametrize(
    ("edit", "needle", "nth", "message"),
    [
        (
            ('kind = "ld19"', 'kind = "ld20"'),
            'kind = "ld20"',
            1,
            "devices[1].kind: must be one of ['ld19', 'ld06', 'a1', 'pods'], got 'ld20'",
        ),
        (('port = "/dev/sensorbench/top"\n', ""), "[[devices]]", 2, "devices[1].port: is required"),
        (('name = "top"', 'name = "front"'), 'name = "front"', 2, "duplicate device name"),
        (('name = "top"', 'name = "merged"'), 'name = "merged"', 1, "'merged' is reserved"),
        (('name = "pods"', 'name = "estimate"'), 'name = "estimate"', 1, "'estimate' is reserved"),
        (
            ("yaw_rad = 3.14159", "yaw = 3.14159"),
            "yaw = 3.14159",
            1,
            "devices[1].mount.yaw: unknown key (known keys here: x_m, y_m, yaw_deg, yaw_rad)",
        ),
        (
            ("x_m = 0.2, y_m = 0.0, yaw_deg = 0", "x = 0.2, y = 0.0, yaw_deg = 0"),
            "x = 0.2",
            1,
            "devices[0].mount.x: unknown key (known keys here: x_m, y_m, yaw_deg, yaw_rad)",
        ),
        (
            ("gap_s = 0.5", "gap_s = -1"),
            "gap_s = -1",
            1,
            "devices[1].gap_s: must be in [0, 60], got -1",
        ),
        (('protocol = "csv"', 'protocol = "json"'), 'protocol = "json"', 1, "protocol"),
        (
            ('port = "/dev/sensorbench/pods"', 'port = "/dev/sensorbench/top"'),
            'port = "/dev/sensorbench/top"',
            2,
            "already used",
        ),
        (("gap_s = 1.0", 'order = ["front", "top"]'), "order = ", 1, "exactly once"),
        (('kind = "a1"', 'kind = "a1"\nserial = "xyz"'), 'serial = "xyz"', 1, "32 hex digits"),
        (
            ("[powerup]", "[power_up]"),
            "[power_up]",
            1,
            "power_up: unknown key (known keys here: devices, emulation, pods, powerup, robot)",
        ),
        (('name = "t"', 'name = "t'), 'name = "t', 1, "not valid TOML"),
    ],
)
def test_bad_configuration_is_refused_naming_the_line(edit, needle, nth, message) -> None:
    text = GOOD.replace(*edit)
    with pytest.raises(ConfigError) as err:
        parse_robot_config(text, "robot.toml")
    line = _line_of(text, needle, nth)
    assert str(err.value).startswith(f"robot.toml:{line}: "), (str(err.value), line)
    assert message in str(err.value)


def test_run_dir_placeholder_needs_a_run_dir() -> None:
    text = GOOD.replace("/dev/sensorbench/top", "{run_dir}/top")
    with pytest.raises(ConfigError, match="give a run directory"):
        parse_robot_config(text)
    assert parse_robot_config(text, run_dir="/x").device("top").port == "/x/top"


def test_capture_refuses_a_bad_config_before_opening_any_device(tmp_path) -> None:
    # the good devices point at ports that do not exist: had capture opened one, the
    # error would be about that port, not about the configuration's line
    text = GOOD.replace('kind = "ld19"', 'kind = "lidar"')
    cfg = tmp_path / "robot.toml"
    cfg.write_text(text)
    out = tmp_path / "s.h5"
    res = CliRunner().invoke(
        cli, ["capture", "--config", str(cfg), "--duration", "1", "-o", str(out)]
    )
    assert res.exit_code == 2
    line = _line_of(text, 'kind = "lidar"')
    assert f"robot.toml:{line}: " in res.output
    assert "devices[1].kind: must be one of" in res.output and "got 'lidar'" in res.output
    assert not out.exists()
    res = CliRunner().invoke(cli, ["bringup", "--config", str(cfg)])
    assert res.exit_code == 2 and "got 'lidar'" in res.output


def test_capture_refuses_an_unwritable_output_before_bringup(tmp_path) -> None:
    cfg = tmp_path / "robot.toml"
    cfg.write_text(GOOD)  # its ports do not exist: bring-up would fail if it ran
    for out in (tmp_path / "missing" / "s.h5", tmp_path / "robot.toml"):
        res = CliRunner().invoke(
            cli, ["capture", "--config", str(cfg), "--duration", "1", "-o", str(out)]
        )
        assert res.exit_code == 2, res.output
        assert "does not exist" in res.output or "exists; a recording never replaces" in res.output
        assert "bring-up" not in res.output
