"""robot.toml: every configuration that would only fail at bring-up is refused at load,
naming FILE:LINE of the offending key.

Ports are compared as the kernel sees them (``./x`` and ``x``, ``//x`` and ``/x``, two
symlinks to one device are one port), and a port that exists must be a serial tty
(``/dev/null`` and regular files are not; an emulator's pseudo-terminal, a
``/dev/pts/N`` character device, is). Delays, timeouts and mount magnitudes have
limits; names must fit the session's event table (32 bytes) and not take a reserved
stream name; an ``[emulation]`` scenario must exist.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers.robot_config import parse_robot_config
from sensorbench.errors import ConfigError


def _config(
    front: str = "",
    rear: str = "",
    powerup: str = "gap_s = 1.0",
    extra: str = "",
    front_port: str = "/dev/sensorbench/front",
    rear_port: str = "/dev/sensorbench/rear",
    front_name: str = "front",
) -> str:
    return f"""\
[robot]
name = "t"

[powerup]
{powerup}

[[devices]]
name = "{front_name}"
kind = "a1"
port = "{front_port}"
mount = {{x_m = 0.2, y_m = 0.0, yaw_deg = 0}}
{front}

[[devices]]
name = "rear"
kind = "ld19"
port = "{rear_port}"
mount = {{x_m = -0.2, y_m = 0.0, yaw_deg = 180}}
{rear}
{extra}
"""


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.fixture
def pty():
    """A pseudo-terminal's slave end, as the emulators serve devices on."""
    master, slave = os.openpty()
    try:
        yield os.ttyname(slave)
    finally:
        os.close(master)
        os.close(slave)


def _refused(text: str, needle: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_robot_config(text, "robot.toml")
    assert str(err.value).startswith(f"robot.toml:{_line(text, needle)}:"), str(err.value)
    assert message in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("front_port", "rear_port"),
    [("./x", "x"), ("//dev/sensorbench/a", "/dev/sensorbench/a"), ("/dev/a/../b", "/dev/b")],
)
def test_one_port_spelled_two_ways_is_one_port(front_port, rear_port, tmp_path) -> None:
    text = _config(front_port=front_port, rear_port=rear_port)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        _refused(text, f'port = "{rear_port}"', "is already used by 'front'")
    finally:
        os.chdir(cwd)


def test_two_symlinks_to_one_device_are_one_port(tmp_path, pty) -> None:
    (tmp_path / "a").symlink_to(pty)
    (tmp_path / "b").symlink_to(pty)
    text = _config(front_port=str(tmp_path / "a"), rear_port=str(tmp_path / "b"))
    _refused(text, f'port = "{tmp_path / "b"}"', f"(that is {pty}) is already used by 'front'")


def test_an_emulators_pty_is_a_port(pty, tmp_path) -> None:
    (tmp_path / "link").symlink_to(pty)
    cfg = parse_robot_config(_config(front_port=pty, rear_port=str(tmp_path / "link2")), "r.toml")
    assert cfg.device("front").port == pty
    parse_robot_config(_config(front_port=str(tmp_path / "link")), "r.toml")


@pytest.mark.parametrize(("what", "said"), [("/dev/null", "a character device 1:3"),
    ("regular file", "a regular file"), ("directory", "a directory"),
    ("FIFO", "a FIFO (named pipe)")])  # fmt: skip
def test_a_port_that_is_not_a_serial_tty_is_refused(what, said, tmp_path) -> None:
    port = {"/dev/null": "/dev/null", "regular file": str(tmp_path / "f"), "directory": "/tmp",
            "FIFO": str(tmp_path / "p")}[what]  # fmt: skip
    if what == "regular file":
        (tmp_path / "f").write_text("x")
    elif what == "FIFO":
        os.mkfifo(tmp_path / "p")
    text = _config(rear_port=port)
    _refused(text, f'port = "{port}"', f"is {said}")
    _refused(text, f'port = "{port}"', "not a serial port")


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        ("powerup", "gap_s = 1e9", "powerup.gap_s: must be in [0, 60], got 1000000000.0"),
        (
            "powerup",
            "timeout_s = 1e12",
            "powerup.timeout_s: must be in [0.1, 120], got 1000000000000.0",
        ),
        ("front", "gap_s = 61", "devices[0].gap_s: must be in [0, 60], got 61"),
        ("front", "gap_s = 1" + "0" * 400, "devices[0].gap_s: must be a number (finite), got 100"),
        ("front", "timeout_s = 1e6", "devices[0].timeout_s: must be in [0.1, 120], got 1000000.0"),
        (
            "rear",
            "mount = {x_m = 1e30, y_m = 0.0, yaw_deg = 0}",
            "devices[1].mount.x_m: must be in [-10, 10], got 1e+30",
        ),
        (
            "rear",
            "mount = {x_m = 0.1, y_m = -11, yaw_deg = 0}",
            "devices[1].mount.y_m: must be in [-10, 10], got -11",
        ),
        (
            "rear",
            "mount = {x_m = 0.1, y_m = 0, yaw_deg = 1e9}",
            "devices[1].mount.yaw_deg: must be in [-360, 360], got 1000000000.0",
        ),
        (
            "rear",
            "mount = {x_m = 0.1, y_m = 0, yaw_rad = 100}",
            "devices[1].mount.yaw_rad: must be in [-6.28319, 6.28319], got 100",
        ),
    ],
)
def test_delays_timeouts_and_mounts_have_limits(section, key, message) -> None:
    if section == "rear":  # replaces the device's mount
        text = _config().replace("mount = {x_m = -0.2, y_m = 0.0, yaw_deg = 180}", key)
    else:
        text = _config(**{section: key})
    _refused(text, key, message)


def test_pod_wheels_and_the_footprint_have_limits() -> None:
    key = "wheels = [{x_m = 0.0, y_m = 1e30, angle_deg = 0.0}]"
    text = _config(extra=f"[pods]\nwheel_radius_m = 0.024\ncounts_per_rev = 2000\n{key}\n")
    _refused(text, key, "pods.wheels[0].y_m: must be in [-10, 10], got 1e+30")
    key = "footprint_m = [[0, 0], [1e30, 0], [0, 1]]"
    text = _config().replace('name = "t"', f'name = "t"\n{key}')
    _refused(text, key, "robot.footprint_m[1][0]: must be in [-10, 10], got 1e+30")


@pytest.mark.parametrize(("points", "message"), [
    ("[[0, 0], [1, 1], [1, 0], [0, 1]]", "edges 0 and 2 cross or touch"),  # a bow tie
    ("[[0, 0], [2, 0], [2, 2], [1, 0], [0, 2]]", "edges 0 and 2 cross or touch"),  # touching
    ("[[0, 0], [1, 0], [2, 0]]", "must enclose an area"),
    ("[[0, 0], [1, 1]]", "must list at least 3 [x, y] points")])  # fmt: skip
def test_a_footprint_that_is_no_outline_is_refused(points, message) -> None:
    """The merge drops returns inside the footprint by an even-odd test: on a figure eight
    or a line it would keep or drop the wrong ones."""
    key = f"footprint_m = {points}"
    text = _config().replace('name = "t"', f'name = "t"\n{key}')
    _refused(text, key, f"robot.footprint_m: {message}")
    square = "footprint_m = [[0, 0], [1, 0], [1, 1], [0, 1]]"
    parse_robot_config(_config().replace('name = "t"', f'name = "t"\n{square}'), "r.toml")


def test_the_power_switch_settle_time_has_a_limit() -> None:
    key = 'power = {hub = "1-1", port = 2, settle_s = 1e9}'
    text = _config(front=key, powerup='backend = "uhubctl"')
    _refused(text, key, "devices[0].power.settle_s: must be in [0.1, 60], got 1000000000.0")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("events", "reserved"),
        ("truth", "reserved"),
        ("pods", "reserved for encoder streams"),
        ("mocap", "reserved for pose streams"),
        ("a" * 300, "at most 32 characters"),
        ("a" * 33, "at most 32 characters"),
    ],
)
def test_reserved_and_overlong_device_names_are_refused(name, message) -> None:
    text = _config(front_name=name)
    _refused(text, f'name = "{name}"', message)


def test_a_32_character_name_is_fine() -> None:
    parse_robot_config(_config(front_name="a" * 32), "r.toml")


def test_emulation_seed_and_scenario_are_checked() -> None:
    text = _config(extra='[emulation]\nscenario = "square"\nseed = 18446744073709551616\n')
    _refused(
        text,
        "seed = ",
        "emulation.seed: must be in [0, 9223372036854775807], got 18446744073709551616",
    )
    text = _config(extra="[emulation]\nscenario = 5\n")
    _refused(text, "scenario = 5", "emulation.scenario: must be a scenario name or path, got 5")


def test_an_unknown_emulation_scenario_is_refused_at_load_naming_the_line(tmp_path) -> None:
    from sensorbench.sim.emulated_robot import EmulatedRobot

    text = _config(
        front_port="{run_dir}/front", rear_port="{run_dir}/rear",
        extra='[emulation]\nscenario = "no_such_scenario"\n',
    )  # fmt: skip
    path = tmp_path / "robot.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        EmulatedRobot(tmp_path / "run", config=path)
    line = _line(text, "no_such_scenario")
    assert str(err.value).startswith(f"{path}:{line}: [emulation] unknown scenario"), str(
        err.value
    )


def test_the_cli_refuses_at_load_with_file_and_line(tmp_path) -> None:
    text = _config(powerup="timeout_s = 1e12")
    path = tmp_path / "robot.toml"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["bringup", "--config", str(path)])
    assert result.exit_code == 2
    assert f"{path}:{_line(text, 'timeout_s')}:" in result.output, result.output


@pytest.mark.parametrize(
    ("text", "needle"),
    [(_config(front_port="/dev/sensor\\nbench"), "port ="),
     (_config().replace('name = "t"', 'name = "t\\tu"'), 'name = "t')],
)  # fmt: skip
def test_a_control_character_in_the_robot_name_or_a_port_is_refused(text, needle) -> None:
    """A newline or tab in either loaded: the name went into the session, the port to open()."""
    _refused(text, needle, "without control characters")


def test_two_a1s_with_one_serial_are_refused_as_the_swap_check_would_miss_them() -> None:
    """Bring-up checks each A1's reported serial against its own: two alike (any case)
    would let a swap of front and rear through."""
    a1 = ('[[devices]]\nname = "{name}"\nkind = "a1"\nport = "/dev/sensorbench/{name}"\n'
          'serial = "{serial}"\nmount = {{x_m = 0.2, y_m = 0.0, yaw_deg = 0}}\n')
    head = '[robot]\nname = "t"\n\n[powerup]\ngap_s = 1.0\n\n'
    serial = "0123456789ABCDEF0123456789ABCDEF"
    same = head + a1.format(name="front", serial=serial) + a1.format(name="rear",
                                                                     serial=serial.lower())
    _refused(same, f'serial = "{serial.lower()}"', "is already 'front''s")
    other = serial[:-1] + "0"
    apart = head + a1.format(name="front", serial=serial) + a1.format(name="rear", serial=other)
    devices = parse_robot_config(apart, "robot.toml").devices
    assert [d.serial.upper() for d in devices if d.serial] == [serial, other]
