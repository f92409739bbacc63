"""The modem-line channels live in a directory of /tmp, which every user shares: one another
user made (or a link put in its place) is neither served by an emulator nor used by a
driver, and the emulator says why."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from timing_util import SLACK_S, wait_until

from sensorbench.drivers import serial_port
from sensorbench.drivers.serial_port import foreign_channel_dir, open_serial
from sensorbench.errors import SimError
from sensorbench.sim import modem_lines
from sensorbench.sim.modem_lines import ModemLineChannel


@pytest.fixture
def channel_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Channels in ``tmp_path/chan`` instead of the user's directory in /tmp (which the
    emulators of other tests use at the same time)."""
    d = tmp_path / "chan"
    monkeypatch.setattr(serial_port, "modem_channel_path", lambda port: d / "pts-test")
    monkeypatch.setattr(modem_lines, "modem_channel_path", lambda port: d / "pts-test")
    return d


def test_a_directory_others_can_write_is_refused_by_both_ends(channel_dir: Path) -> None:
    levels: list[bool] = []
    channel = ModemLineChannel("/dev/pts/test", levels.append)
    master, slave = os.openpty()
    try:
        with open_serial(os.ttyname(slave), 115200, timeout_s=0.05) as port:
            assert port.modem_lines == "channel"  # its own directory: DTR goes through
            wait_until(lambda: levels == [True], SLACK_S, "DTR asserted by the open")
        wait_until(lambda: levels == [True, False], SLACK_S, "DTR released by the close")
        channel_dir.chmod(0o777)  # as another user's directory would be
        with open_serial(os.ttyname(slave), 115200, timeout_s=0.05) as port:
            assert port.modem_lines is None  # nowhere: not through a directory others write
        assert levels == [True, False]
        with pytest.raises(SimError, match=r"chan belongs to uid \d+ with mode 777"):
            ModemLineChannel("/dev/pts/test", levels.append)
    finally:
        channel.close()
        os.close(master)
        os.close(slave)


def test_a_link_in_its_place_is_refused(channel_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    channel_dir.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SimError, match="chan is a symbolic link, not a directory"):
        ModemLineChannel("/dev/pts/test", lambda level: None)
    assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing bound through the link


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory another user's needs root")
def test_another_users_directory_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, 65534, 65534)
    assert foreign_channel_dir(d) == (f"{d} belongs to uid 65534 with mode 700: another "
        "user may have made it; remove it")
    os.chown(d, 0, 0)
    assert foreign_channel_dir(d) is None


def test_an_emulator_slow_to_apply_dtr_keeps_its_channel(channel_dir: Path) -> None:
    """An emulator thread that takes 2 s to apply DTR (its device's lock held that long on
    a loaded host) still gets it, and keeps it: a host that gave up after 1 s dropped the
    channel, which the emulator read as DTR released."""
    levels: list[bool] = []

    def slow(level: bool) -> None:
        time.sleep(2.0)
        levels.append(level)

    channel = ModemLineChannel("/dev/pts/test", slow)
    master, slave = os.openpty()
    try:
        with open_serial(os.ttyname(slave), 115200, timeout_s=0.05) as port:
            assert port.modem_lines == "channel"
            assert levels == [True] and channel.dtr
            time.sleep(0.3)  # the server would have seen a dropped channel by now
            assert channel.dtr and channel.opens == 1
    finally:
        channel.close()
        os.close(master)
        os.close(slave)
