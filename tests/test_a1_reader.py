"""The live A1 reader into a session, and ``sensorbench decode a1`` of its raw bytes."""

from __future__ import annotations

import json
import threading
import time

import a1_util as u
import numpy as np
import pytest
import serial
from click.testing import CliRunner
from timing_util import SLACK_S

from sensorbench.cli import cli
from sensorbench.drivers.a1_reader import a1_reader
from sensorbench.drivers.powerup import DeviceSpec, PowerUpSequencer
from sensorbench.drivers.reader_base import DeviceReader
from sensorbench.errors import DriverError
from sensorbench.logs import NO_DEVICE_TIME, Session, SessionWriter
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit

SERIAL = bytes.fromhex("a1a1a1a1b2b2b2b2c3c3c3c3d4d4d4d4")


def truth_turns(truth):
    d = truth.delivered
    return u.ref_turns(truth.start[d], truth.quality[d], truth.angle_q6[d], truth.dist_q2[d])


def check_turns(turns, ref, n):
    for i in range(n):
        t = turns.turn(i)
        q, a, d = ref[i]
        np.testing.assert_array_equal(t.intensity, q)
        np.testing.assert_array_equal(t.angle, u.ccw_rad(a).astype(np.float32))
        np.testing.assert_array_equal(t.range, u.range_m(d).astype(np.float32))


@pytest.fixture(scope="module")
def live_session(tmp_path_factory):
    path = tmp_path_factory.mktemp("a1_live") / "live.h5"
    with A1Emulator(speed=4.0, unit=A1Unit(serial=SERIAL)) as emu:
        with SessionWriter(path, label="a1") as w:
            reader = a1_reader(
                "lidar_front",
                emu.path,
                attrs={"frame": "front"},
                read_timeout_s=0.5,
                first_turn_timeout_s=2.0,
            )
            assert isinstance(reader, DeviceReader)
            reader.declare(w)
            w.start()
            reader.start()
            time.sleep(0.6)
            status = reader.status()
            time.sleep(0.3)
            status = reader.status()
            reader.stop()
        truth = emu.truth()
    return path, truth, status, reader


def test_live_reader_writes_turns_raw_and_events(live_session):
    path, truth, status, _ = live_session
    assert status.connected and status.kind == "a1" and status.name == "lidar_front"
    assert status.turns_per_s > 5.5 * 4 * 0.5  # 5.5 Hz at 4x, loosely (scheduling)
    assert status.items_per_s > 0 and status.bytes_per_s > 0
    assert status.crc_errors == 0 and status.drops == 0 and status.since_last_data_s < 0.5
    ref = truth_turns(truth)
    with Session(path) as s:
        lidar = s.lidar("lidar_front")
        assert lidar.attrs["model"] == "A1" and lidar.attrs["frame"] == "front"
        turns = lidar.read()
        raw = s.raw("lidar_front").read_bytes()
        kinds = [e.kind for e in s.events()]
    assert turns.n_turns >= 10
    assert turns.n_turns in (len(ref), len(ref) - 1)  # the last one may be cut by stop
    check_turns(turns, ref, turns.n_turns)
    assert np.all(turns.flags == 0)
    # the raw stream is every byte received: answers, descriptor, nodes
    assert raw.startswith(bytes.fromhex("a55a1400000004"))  # GET_INFO answer first
    assert SERIAL in raw[:27]
    nodes = u.ref_decode_nodes(u.scan_bytes(raw))
    n = nodes.start.size
    np.testing.assert_array_equal(nodes.angle_q6, truth.angle_q6[:n])
    assert kinds[0] == "start" and "stop" in kinds
    with Session(path) as s:  # DTR reached the emulator through its modem-line channel
        assert not any("no modem lines" in e.message for e in s.events())


def test_decode_of_the_session_raw_stream_equals_the_live_turns(live_session, tmp_path):
    path, _, _, _ = live_session
    out = tmp_path / "decoded.h5"
    res = CliRunner().invoke(cli, ["decode", "a1", str(path), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["scans"] == 1 and summary["bytes_skipped"] == 0
    with Session(path) as s:
        live = s.lidar("lidar_front").read()
    with Session(out) as s:
        dec = s.lidar("a1").read()
        assert "host monotonic_ns at receive" in s.lidar("a1").attrs["time_base"]
    # the turns the capture gave, no more: not the one the stop cut after them
    assert summary["turns"] == dec.n_turns == live.n_turns
    for f in ("angle", "range", "intensity", "t_ns", "count", "flags", "t_first_ns"):
        np.testing.assert_array_equal(getattr(dec, f), getattr(live, f))
    # device times (node count x the GET_SAMPLERATE answer in the raw stream) too
    assert np.all(live.device_ns != NO_DEVICE_TIME)
    np.testing.assert_array_equal(dec.device_ns, live.device_ns)


def test_decode_bare_byte_file_with_synthetic_times(tmp_path):
    with A1Emulator(speed=4.0) as emu:
        with serial.Serial(emu.path, 115200, timeout=0.05) as s:
            s.write(b"\xa5\x20")
            raw = u.read_for(s, 0.8)
        truth = emu.truth()
    f = tmp_path / "capture.bin"
    f.write_bytes(raw)
    out = tmp_path / "s.h5"
    res = CliRunner().invoke(cli, ["decode", "a1", str(f), "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    ref = truth_turns(truth)
    with Session(out) as s:
        turns = s.lidar("a1").read()
    check_turns(turns, ref, len(ref) - 1)
    assert np.all(np.diff(turns.t_ns) == 500_000)  # 2000 nodes/s


def test_decode_refuses_what_is_not_a_capture(tmp_path):
    f = tmp_path / "noise.bin"
    f.write_bytes(bytes(range(256)) * 4)
    res = CliRunner().invoke(cli, ["decode", "a1", str(f), "-o", str(tmp_path / "x.h5")])
    assert res.exit_code == 2 and "no A1 scan descriptor" in res.output
    assert not (tmp_path / "x.h5").exists()
    out = tmp_path / "out.h5"  # a name without "exists" in it: the message must say so
    out.write_bytes(b"")
    raw = tmp_path / "ok.bin"
    raw.write_bytes(u.SCAN_DESCRIPTOR + u.encode_node(True, 10, 0, 4000) * 3)
    res = CliRunner().invoke(cli, ["decode", "a1", str(raw), "-o", str(out)])
    assert res.exit_code == 2 and f"{out} exists" in res.output
    assert out.read_bytes() == b""  # left alone


def test_reader_start_fails_within_its_deadline_when_no_turn_comes():
    with A1Emulator(speed=4.0, unit=A1Unit(spinup_s=1e6)) as emu:
        reader = a1_reader("lidar_front", emu.path, read_timeout_s=0.3, first_turn_timeout_s=0.5)
        t0 = time.monotonic()
        with pytest.raises(DriverError, match="no complete turn"):
            reader.start()
        assert 0.5 <= time.monotonic() - t0 < 0.5 + 0.3 + SLACK_S  # open + deadline + stop
        assert not reader.status().connected


def test_reader_takes_over_a_scanner_from_the_sequencer(tmp_path):
    with A1Emulator(speed=4.0, unit=A1Unit(serial=SERIAL)) as emu:
        seq = PowerUpSequencer([DeviceSpec("lidar_front", "a1", emu.path, read_timeout_s=0.5)])
        (row,) = seq.run(keep=True)
        assert row.ready
        with SessionWriter(tmp_path / "s.h5") as w:
            reader = a1_reader("lidar_front", emu.path, scanner=seq.handles["lidar_front"])
            reader.declare(w)
            w.start()
            reader.start()
            time.sleep(0.4)
            reader.stop()
        # the scan (typical Express: the default without a configuration) was not restarted
        assert emu.requests.count(0x82) == 1 and 0x20 not in emu.requests
    with Session(tmp_path / "s.h5") as s:
        assert s.lidar("lidar_front").attrs["serial"] == SERIAL.hex().upper()
        assert s.lidar("lidar_front").attrs["scan_mode"] == "Express"
        assert s.lidar("lidar_front").n_turns > 3
        # the raw stream holds the bring-up's exchange too: identification first
        assert s.raw("lidar_front").read_bytes().startswith(bytes.fromhex("a55a1400000004"))


def test_stop_reports_a_reader_thread_stuck_in_the_driver():
    """A thread stuck in a driver call is reported in the status; stop keeps its deadline."""
    release = threading.Event()
    with A1Emulator(speed=4.0, unit=A1Unit(serial=SERIAL)) as emu:
        reader = a1_reader("lidar_front", emu.path, read_timeout_s=0.5, first_turn_timeout_s=2.0)
        reader.start()
        entered = threading.Event()

        def stuck_poll(timeout_s):
            entered.set()
            release.wait(5.0)
            return 0, b""

        reader.link.poll = stuck_poll
        assert entered.wait(2.0)
        t0 = time.monotonic()
        reader.stop(timeout_s=0.3)
        assert 0.3 <= time.monotonic() - t0 < 0.3 + SLACK_S  # the deadline, then the port closes
        assert reader.status().last_error == "lidar_front: reader thread did not stop within 0.3 s"
        release.set()
