"""``sensorbench record-raw``: exact bytes from an emulated device's pty, read times in
the sidecar, ``decode`` of the recording, refusal of an existing output."""

from __future__ import annotations

import json
import os
import termios
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from timing_util import wait_until

from sensorbench.cli import cli
from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.raw_recorder import _IFLAG_OFF, _LFLAG_OFF
from sensorbench.errors import ImportFormatError
from sensorbench.logs import Session
from sensorbench.logs.raw_file import read_raw_recording, sidecar_path
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit, encode_nodes
from sensorbench.sim.emulator_ld19 import LD19Emulator, encode_packets


def is_raw(fd: int) -> bool:
    """True if the tty ``fd`` has every mode ``set_raw`` clears cleared."""
    iflag, oflag, cflag, lflag, _, _, _ = termios.tcgetattr(fd)
    return not (
        iflag & _IFLAG_OFF or oflag & termios.OPOST or lflag & _LFLAG_OFF or cflag & termios.CRTSCTS
    )


def _make_cooked(path: str) -> None:
    """Leave the tty as a fresh one is: 9600 baud, canonical, echo, CR->LF, XON/XOFF."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    try:
        iflag, oflag, cflag, lflag, _, _, cc = termios.tcgetattr(fd)
        iflag |= termios.ICRNL | termios.IXON
        lflag |= termios.ICANON | termios.ECHO | termios.ISIG
        oflag |= termios.OPOST
        termios.tcsetattr(
            fd, termios.TCSANOW, [iflag, oflag, cflag, lflag, termios.B9600, termios.B9600, cc]
        )
        assert not is_raw(fd)
    finally:
        os.close(fd)


def _record(args: list[str]) -> dict:
    res = CliRunner().invoke(cli, ["record-raw", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_ld19_bytes_recorded_exactly_and_decoded_with_read_times(tmp_path):
    out = tmp_path / "ld19.bin"
    with LD19Emulator(speed=1.0, startup_s=0.0, autostart=False, seed=4) as emu:
        _make_cooked(emu.path)
        # the recorder opens the port first; the unit starts streaming 0.3 s later
        # and goes silent 1.6 s later, so the recording holds its whole stream
        timers = [threading.Timer(0.3, emu.start), threading.Timer(1.9, emu.stall, (60.0,))]
        for t in timers:
            t.start()
        try:
            doc = _record([emu.path, "--baud", "230400", "--duration", "2.4", "-o", str(out)])
        finally:
            for t in timers:
                t.join()
        truth = emu.truth()
    off = truth.offered
    sent = encode_packets(
        truth.speed[off],
        truth.start[off],
        truth.end[off],
        truth.distance_mm[off],
        truth.intensity[off],
        truth.timestamp[off],
    )
    data = out.read_bytes()
    assert len(sent) > 47 * 375  # over a second of packets, every byte value many times
    assert data == sent
    assert doc["bytes"] == len(sent) and doc["stopped_by"] == "duration"
    rec = read_raw_recording(out)
    assert rec.offsets is not None and rec.offsets.size == doc["reads"] > 10
    assert np.all(np.diff(rec.t_ns) >= 0)
    assert any("baud=230400" in c for c in rec.comments)
    # each read's host time is after the emulator sent its first byte
    first_sent = truth.host_ns[off][rec.offsets // 47]
    assert np.all(rec.t_ns >= first_sent)

    dec = tmp_path / "ld19.h5"
    res = CliRunner().invoke(cli, ["decode", "ld19", str(out), "-o", str(dec), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["packets"] == off.sum() and summary["crc_failures"] == 0
    with Session(dec) as s:
        turns = s.lidar("ld19").read()
        assert "host" in s.lidar("ld19").attrs["time_base"]
    # the decoded points are the truth's, in order (complete turns only)
    dist = truth.distance_mm[off].ravel()
    want = np.where(dist == 0, np.inf, dist / 1000.0)
    got = turns.range.astype(np.float64)
    n = got.size
    same = [
        k
        for k in range(want.size - n + 1)
        if np.allclose(want[k : k + n], got, rtol=0, atol=1e-6, equal_nan=False)
        and np.array_equal(np.isinf(want[k : k + n]), np.isinf(got))
    ]
    assert len(same) == 1  # one place in the sent stream, point for point
    # times are host receive times (between the first and last read)
    assert rec.t_ns[0] - 10**9 <= turns.t_first_ns[0] <= rec.t_ns[-1]


def test_a1_scan_recorded_with_the_scan_request_and_decoded_exactly(tmp_path):
    """The A1 named by its robot configuration: 115200 baud and DTR low (its motor spins)
    by default, as a real A1's USB adapter needs (docs/CAPTURE.md)."""
    out = tmp_path / "a1.bin"
    with A1Emulator(speed=1.0, seed=2, unit=A1Unit(spinup_s=0.1)) as emu:
        _make_cooked(emu.path)
        (tmp_path / "lidar_front").symlink_to(emu.path)
        doc = _record(["lidar_front", "--config", str(DEFAULT_CONFIG), "--run-dir", str(tmp_path),
                       "--duration", "1.5", "--send", "a5 20", "-o", str(out)])  # fmt: skip
        emu.stop()
        truth = emu.truth()
    data = out.read_bytes()
    d = truth.delivered
    sent = proto.SCAN_DESCRIPTOR + encode_nodes(
        truth.start[d], truth.quality[d], truth.angle_q6[d], truth.dist_q2[d]
    )
    # the recording stops at its duration while the unit still sends: a prefix
    assert len(data) > 5 * 2000 and sent.startswith(data)
    assert emu.requests == [0x20]
    assert doc["bytes"] == len(data)
    dec = tmp_path / "a1.h5"
    res = CliRunner().invoke(cli, ["decode", "a1", str(out), "-o", str(dec), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["bytes_skipped"] == 0 and summary["scans"] == 1
    n = (len(data) - 7) // 5
    assert summary["nodes"] == n
    with Session(dec) as s:
        turns = s.lidar("a1").read()
        assert "read times" in s.attrs["source"]
    starts = np.flatnonzero(truth.start[d][:n])
    q2 = truth.dist_q2[d][starts[0] : n]
    got = turns.range.astype(np.float64)
    want = np.where(q2 == 0, np.inf, q2 / 4000.0)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=0, atol=0)


def test_a1_opened_with_dtr_high_records_no_scan(tmp_path):
    """``--dtr high`` reaches the emulated A1 (its modem-line channel): the motor stays
    stopped for the whole recording and the scan request gets no node."""
    out = tmp_path / "a1.bin"
    with A1Emulator(speed=1.0, seed=2, unit=A1Unit(spinup_s=0.1)) as emu:
        doc = _record([emu.path, "--baud", "115200", "--dtr", "high", "--duration", "1.0",
                       "--send", "a5 20", "-o", str(out)])  # fmt: skip
        # the close reaches the emulator on its modem-line channel's thread, after the
        # recording has returned: stopping the emulator at once could miss it
        wait_until(lambda: len(emu.motor_log) >= 3, 5.0, "the motor to spin after the close")
        emu.stop()
        log = emu.motor_log
    # spinning from power-on, stopped by the open, spinning again after the close
    assert [on for _, on in log] == [True, False, True]
    assert log[2][0] - log[1][0] > 0.9  # stopped for the whole second
    assert doc["bytes"] == len(out.read_bytes()) <= len(proto.SCAN_DESCRIPTOR)  # no node


def test_port_not_in_the_config_names_its_devices(tmp_path):
    res = CliRunner().invoke(cli, ["record-raw", "lidar_side", "--config", str(DEFAULT_CONFIG),
                                   "--run-dir", str(tmp_path), "--duration", "1", "-o",
                                   str(tmp_path / "x.bin")])  # fmt: skip
    assert res.exit_code == 2 and "no device is 'lidar_side'" in res.output
    assert "lidar_front" in res.output and not (tmp_path / "x.bin").exists()


def test_existing_output_is_refused_without_force(tmp_path):
    out = tmp_path / "raw.bin"
    out.write_bytes(b"keep me")
    with LD19Emulator(speed=1.0, startup_s=0.0, seed=1) as emu:
        res = CliRunner().invoke(
            cli, ["record-raw", emu.path, "--baud", "230400", "--duration", "0.3", "-o", str(out)]
        )
        assert res.exit_code == 2 and "exists" in res.output and "--force" in res.output
        assert out.read_bytes() == b"keep me" and not sidecar_path(out).exists()
        doc = _record(
            [emu.path, "--baud", "230400", "--duration", "0.5", "-o", str(out), "--force"]
        )
    assert doc["bytes"] > 0 and out.read_bytes() != b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.bin", "raw.bin.chunks"]


def test_missing_port_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(
        cli,
        [
            "record-raw",
            str(tmp_path / "ttyUSB9"),
            "--baud",
            "230400",
            "--duration",
            "1",
            "-o",
            str(tmp_path / "r.bin"),
        ],
    )
    assert res.exit_code == 2 and "does not exist" in res.output
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(("port", "what"), [("file", "a regular file"), ("/dev/null", "not a tty"),
                                            ("fifo", "a FIFO (named pipe)")])  # fmt: skip
def test_a_port_that_is_no_tty_is_named_so(tmp_path, port, what):
    """A regular file, a FIFO or a character device without tty settings: the message
    says what it is (it said 'Inappropriate ioctl ... Is another program using it?')."""
    if port == "file":
        (tmp_path / port).write_bytes(b"x")
    elif port == "fifo":
        os.mkfifo(tmp_path / port)
    path = port if port.startswith("/") else str(tmp_path / port)
    res = CliRunner().invoke(cli, ["record-raw", path, "--baud", "230400", "--duration", "1",
                                   "-o", str(tmp_path / "r.bin")])  # fmt: skip
    assert res.exit_code == 2 and f"{path}: {what}, not a serial port" in res.output
    assert not (tmp_path / "r.bin").exists()


@pytest.mark.parametrize(
    ("rows", "what"),
    [
        ("offset,t_ns\n0,5\n3,4\n", ":5:2: t_ns 4 before"),
        ("offset,t_ns\n1,5\n", ":4:1: the first offset must be 0"),
        ("offset,t_ns\n0,5\n0,6\n", ":5:1: offset 0 not above"),
        ("offset,t_ns\n0,5\n99,6\n", ":5:1: offset 99 beyond"),
        ("offset;t_ns\n", ":3: expected the header"),
        ("offset,t_ns\n0,x\n", ":4:2: column 't_ns': 'x' is not an integer"),
        ("offset,t_ns\n0,5,6\n", ":4: expected 'offset,t_ns', got 3 cells"),
    ],
)
def test_sidecar_errors_name_file_and_line(tmp_path, rows, what):
    raw = tmp_path / "r.bin"
    raw.write_bytes(bytes(10))
    sidecar_path(raw).write_text("# sensorbench record-raw chunks v1\n# port=x\n" + rows)
    with pytest.raises(ImportFormatError, match=f"r.bin.chunks{what}"):
        read_raw_recording(raw)


def test_recording_without_sidecar_reads_bytes_only(tmp_path):
    raw = tmp_path / "r.bin"
    raw.write_bytes(b"\x54\x2c")
    rec = read_raw_recording(Path(raw))
    assert rec.data == b"\x54\x2c" and rec.offsets is None


def test_a1_express_recorded_with_its_sample_rate_and_decoded_at_4000_per_second(tmp_path):
    """``--send "a5 59 a5 82 05 00 00 00 00 00 22"``: GET_SAMPLERATE, then EXPRESS_SCAN
    (docs/CAPTURE.md). The recording holds the unit's durations, so ``decode a1`` times
    the express turns on the device clock; every sample is what the emulator sent."""
    out = tmp_path / "a1x.bin"
    send = "a5 59 a5 82 05 00 00 00 00 00 22"
    with A1Emulator(speed=1.0, seed=2, unit=A1Unit(spinup_s=0.1)) as emu:
        _record([emu.path, "--baud", "115200", "--dtr", "low", "--duration", "1.5", "--send", send,
                 "-o", str(out)])  # fmt: skip
        emu.stop()
        truth = emu.truth()
    assert emu.requests == [0x59, 0x82]
    data = out.read_bytes()
    assert data.startswith(proto.SAMPLERATE_DESCRIPTOR) and proto.EXPRESS_DESCRIPTOR in data
    dec = tmp_path / "a1x.h5"
    res = CliRunner().invoke(cli, ["decode", "a1", str(out), "-o", str(dec), "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert summary["scan_modes"] == ["express"] and summary["bytes_skipped"] == 0
    with Session(dec) as s:
        turns = s.lidar("a1").read()
        assert "express sample duration 254 us" in s.lidar("a1").attrs["device_time"]
    complete = turns.count[:-1]  # the last is cut by the end of the recording
    rate = complete.sum() / ((turns.device_ns[-1] - turns.device_ns[0]) * 1e-9)
    assert abs(rate - 1e6 / 254) < 1.0  # every sample of ~3937/s, on the device clock
    sel = truth.express & truth.delivered
    starts = np.flatnonzero(truth.start[sel])
    q2 = truth.dist_q2[sel][starts[0] : starts[0] + turns.n_points]
    got = turns.range.astype(np.float64)
    np.testing.assert_array_equal(got, np.where(q2 == 0, np.inf, q2 / 4000.0).astype(np.float32))
