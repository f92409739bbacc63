"""The A1 runs on the same serial link and reader thread as the LD19: an emulated A1
and an emulated LD19, each on its own pty, go through the same stall, unplug and
replug mid-capture, and their readers report the same event sequence, the same
messages and the same counters; a reopened A1 that sends no turn gets the same
first-data deadline as any device."""

from __future__ import annotations

import re
import time

import numpy as np
from timing_util import SLACK_S, wait_until

from sensorbench.drivers.a1_reader import A1Scanner, a1_reader
from sensorbench.drivers.ld19_reader import LD19Protocol
from sensorbench.drivers.serial_link import SerialLink
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.logs import Session, SessionWriter, TurnFlag
from sensorbench.sim.emulator_a1 import A1Emulator
from sensorbench.sim.emulator_ld19 import LD19Emulator, SyntheticLD19Samples

SPEED = 4.0
SHARED = ("start", "stale", "unplug", "reconnect", "error", "stop")
"""The event kinds the link and the reader thread emit (protocols add notes) for what the
devices do. An ``overrun`` (the host fell behind: the A1's 3000-byte backlog is 65 ms of
a starved reader at 4× speed) follows the machine's load, not the device: it is counted
against the link's own counter, not compared (on 2 busy cores it came before ``stale``)."""


def _turns(reader) -> int:
    """Complete turns the reader has stored so far."""
    if isinstance(reader.protocol, A1Scanner):
        return reader.protocol.turns_total
    return reader.protocol.assembler.turns_out


def _shared_events(path, name: str, port: str) -> list[tuple[str, str]]:
    """(kind, message) of the link's own events, with the port written as PORT and
    numbers as N, so that two devices' messages can be compared."""
    with Session(path) as s:
        events = [e for e in s.events() if e.source == name and e.kind in SHARED]
    out = []
    for e in events:
        msg = e.message.replace(port, "PORT").replace(name, "NAME")
        out.append((e.kind, re.sub(r"\d+(\.\d+)?", "N", msg)))
    return out


def test_a1_and_ld19_go_through_stall_unplug_replug_alike(tmp_path):
    a1_link, ld_link = str(tmp_path / "lidar_a1"), str(tmp_path / "lidar_ld19")
    session = tmp_path / "both.h5"
    samples = SyntheticLD19Samples.generate(duration_s=60.0, seed=2)
    with (
        A1Emulator(speed=SPEED, link=a1_link) as a1_emu,
        LD19Emulator(samples, link=ld_link, speed=SPEED, startup_s=0.2, seed=2) as ld_emu,
    ):
        ld_emu.port.write_timeout_s = 30.0  # a starved reader gets bytes late, not lost
        writer = SessionWriter(session, label="a1+ld19")
        a1 = a1_reader("a1", a1_link, read_timeout_s=0.5, first_turn_timeout_s=3.0)
        ld = SerialReader(SerialLink("ld19", ld_link, LD19Protocol(clock_slope=1 / SPEED)))
        readers = (a1, ld)
        emulators = (a1_emu, ld_emu)
        for r in readers:
            r.declare(writer)
        writer.start()
        try:
            for r in readers:
                r.start()
            wait_until(lambda: all(_turns(r) >= 5 for r in readers), 5.0, "5 turns each")
            for emu in emulators:
                emu.stall(1.0)  # > stale_after_s (0.5 s), < the A1's restart (3 s)
            wait_until(
                lambda: all(any(e[1] == "stale" for e in r.events) for r in readers),
                3.0,
                "stale events",
            )
            wait_until(
                lambda: all(any(e[2] == "data resumed" for e in r.events) for r in readers),
                3.0,
                "data resumed",
            )
            for emu in emulators:
                emu.unplug()
            wait_until(
                lambda: all(any(e[1] == "unplug" for e in r.events) for r in readers),
                2.0,
                "unplug events",
            )
            mid = [r.status() for r in readers]
            time.sleep(0.2)
            a1_emu.replug()
            ld_emu.replug()
            wait_until(lambda: all(r.status().reconnects == 1 for r in readers), 5.0, "reconnects")
            counts = [_turns(r) for r in readers]
            wait_until(
                lambda: all(_turns(r) >= c + 5 for r, c in zip(readers, counts, strict=True)),
                5.0,
                "5 more turns each",
            )
            after = [r.status() for r in readers]
        finally:
            for r in readers:
                r.stop()
            writer.close()

    # one reader and one link for both kinds, each a protocol object on the link (the
    # behaviour below is their output)
    assert type(a1) is type(ld) is SerialReader
    assert type(a1.link) is type(ld.link) is SerialLink

    a1_events = _shared_events(session, "a1", a1_link)
    ld_events = _shared_events(session, "ld19", ld_link)
    a1_kinds = [k for k, _ in a1_events]
    assert a1_kinds == ["start", "stale", "unplug", "reconnect", "stop"]
    assert a1_kinds == [k for k, _ in ld_events]
    by_kind = {k: m for k, m in ld_events}
    for kind, msg in a1_events:
        if kind == "start":  # what was opened: the A1 names the unit it identified
            continue
        # the same text from the same code; the exception and the unit's serial follow
        common = {"unplug": "NAME: PORT went away: ", "reconnect": "reopened PORT"}
        if kind in common:
            assert msg.startswith(common[kind]) and by_kind[kind].startswith(common[kind])
        else:
            assert msg == by_kind[kind], kind

    for before_replug, now in zip(mid, after, strict=True):
        assert not before_replug.connected and before_replug.last_error
        assert "went away" in before_replug.last_error
        assert now.connected and now.reconnects == 1 and now.reader_failures == 0
        assert not now.reader_down and now.since_last_data_s < 0.5
    for link in (a1.link, ld.link):
        assert (link.unplugs, link.reconnects, link.restarts) == (1, 1, 0)
    with Session(session) as s:
        for name, link in (("a1", a1.link), ("ld19", ld.link)):
            assert len(s.raw(name).read_bytes()) == link.bytes_total  # every byte kept
            overruns = [e for e in s.events() if e.source == name and e.kind == "overrun"]
            assert len(overruns) == link.overruns
            assert all(e.message.startswith("host fell behind: ") for e in overruns)
            flags = s.lidar(name).read().flags
            assert np.count_nonzero(flags & TurnFlag.AFTER_RECONNECT) == 1


def test_a_reopened_a1_that_sends_no_turn_misses_the_shared_deadline(tmp_path):
    """After a replug the unit answers and starts its scan, but the motor never gets up
    to speed: the link's first-data deadline after a reopen reports it, as it does for
    an LD19 that sends nothing valid (tests/test_ld19_reader.py)."""
    link = str(tmp_path / "lidar_a1")
    deadline_s = 0.8
    with A1Emulator(speed=SPEED, link=link) as emu:
        reader = a1_reader("a1", link, read_timeout_s=0.5, first_turn_timeout_s=deadline_s)
        reader.start()
        try:
            wait_until(lambda: reader.protocol.turns_total >= 3, 3.0, "3 turns")
            emu.unplug()
            wait_until(lambda: any(e[1] == "unplug" for e in reader.events), 2.0, "unplug event")
            emu.spinup_s = 1e6  # the next motor start never reaches speed
            emu.replug()
            wait_until(lambda: reader.status().reconnects == 1, 5.0, "reconnect")
            t_reconnect = time.monotonic()
            wait_until(
                lambda: "of reopening" in (reader.status().last_error or ""),
                deadline_s + 1.0 + SLACK_S,
                "the no-turn error",
            )
            waited_s = time.monotonic() - t_reconnect
        finally:
            reader.stop()
    msg = reader.status().last_error
    assert msg.startswith(f"a1: no complete turn on {link} within {deadline_s:.1f} s of reopening")
    assert "is the motor spinning" in msg
    assert waited_s < deadline_s + 0.5 + SLACK_S  # reported at the deadline, not later
    errors = [e for e in reader.events if e[1] == "error" and "of reopening" in e[2]]
    assert len(errors) == 1  # once, not on every read
