"""The live LD19 reader over the emulator's pty: capture into a session through an
unplug and replug, a stall, a silent port and a wrong baud rate."""

from __future__ import annotations

import itertools
import re
import threading
import time

import numpy as np
import pytest
from ld19_util import TurnSink, ideal_samples, truth_points
from timing_util import SLACK_S, wait_until

from sensorbench.drivers.kernels import warm_up as warm_up_kernels
from sensorbench.drivers.ld19_decode import decode_ld19
from sensorbench.drivers.ld19_parser import POINTS_PER_PACKET, LD19Parser
from sensorbench.drivers.ld19_reader import LD19Protocol
from sensorbench.drivers.ld19_turns import WIRE_S
from sensorbench.drivers.reader_base import DeviceReader
from sensorbench.drivers.serial_link import LinkConfig, SerialLink
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.errors import DriverError, SessionError
from sensorbench.logs import Session, SessionWriter, TurnFlag
from sensorbench.sim.emulator_ld19 import (
    LD19Emulator,
    LD19Truth,
    SyntheticLD19Samples,
    encode_packets,
)
from sensorbench.sim.pty import PtyPort

SPEED = 4.0  # emulation speed-up: a 10 Hz turn every 25 ms of wall time


@pytest.fixture(scope="module", autouse=True)
def _kernels_compiled() -> None:
    """Compile (or load) the parser's kernel before any emulator starts: on a busy
    machine that takes seconds, and an emulator already streaming meanwhile piles up
    bytes that then arrive in one burst (capture does the same, kernels.warm_up)."""
    warm_up_kernels()


def _truth_turns(truth: LD19Truth, t0_ns: float) -> list[dict]:
    """Turns of the packets actually offered to the line, split where the native
    angle drops by more than 180 deg (written here from the protocol, not the driver).

    ``t0_ns``: host time of simulated t = 0 on the emulator's clock.
    """
    pts = truth_points(truth.select(truth.offered))
    cw = pts["angle_cdeg"]
    starts = np.flatnonzero(np.diff(cw) < -18000) + 1
    bounds = np.concatenate(([0], starts, [cw.size]))
    dist = pts["distance_mm"]
    inten = pts["intensity"]
    t_first = pts["t_s"]
    out = []
    for a, b in itertools.pairwise(bounds):
        out.append(
            {
                "ccw": np.radians(np.mod(36000 - cw[a:b], 36000) / 100),
                "range": np.where(dist[a:b] == 0, np.inf, dist[a:b] / 1000),
                "intensity": inten[a:b],
                # host time at which the emulated head measured the first sample
                "host_ns": t0_ns + t_first[a] / SPEED * 1e9,
            }
        )
    return out


def _match(stored, truth_turns) -> list[int]:
    """Index of the truth turn each stored turn equals exactly (AssertionError if none)."""
    key = {t["intensity"].tobytes() + t["range"].astype(np.float32).tobytes(): i
           for i, t in enumerate(truth_turns)}  # fmt: skip
    idx = []
    for i in range(stored.n_turns):
        turn = stored.turn(i)
        k = turn.intensity.astype(np.uint8).tobytes() + turn.range.tobytes()
        assert k in key, f"stored turn {i} is not a turn the emulator sent"
        j = key[k]
        ang = np.angle(np.exp(1j * (turn.angle - truth_turns[j]["ccw"])))
        assert np.abs(ang).max() < 1e-6  # float32 of the exact angles
        idx.append(j)
    return idx


def _known_delay_floor_ms(chunks, truth: LD19Truth, t0_ns: float, split_ns: int,
                          turns_host_ns: list[np.ndarray]) -> list[np.ndarray]:  # fmt: skip
    """Per power cycle (received before / after ``split_ns``) and per turn starting at
    ``turns_host_ns`` (true host ns), the least delay of the packets the clock had
    received by the end of that turn (ms): a packet's delay is its receive time minus the
    earliest it could arrive, when the emulated head has measured its 12 points and the
    packet has crossed the wire. The clock rests on the least-delayed packets it has
    seen, so this is the part of the latency it cannot see when it stamps the turn: 0-1 ms
    on a quiet machine; more after a replug on a loaded one, until a packet comes through
    quickly (derived from what the machine did, not a guess of it)."""
    parser, got = LD19Parser(), []
    for t_ns, data in chunks:
        got.append(parser.feed(data, t_ns))
    pk = {f: np.concatenate([getattr(g, f) for g in got]) for f in ("start_cdeg", "end_cdeg",
          "timestamp_ms", "host_ns")}  # fmt: skip
    span = np.mod(truth.end.astype(float) - truth.start, 36000) / 100.0
    dt = span / (POINTS_PER_PACKET - 1) / truth.speed
    earliest = t0_ns + (truth.t_s + (POINTS_PER_PACKET - 1) * dt + WIRE_S) / SPEED * 1e9
    turn_ns = 0.1 / SPEED * 1e9  # a 10 Hz turn in wall time
    out = []
    for cycle, received in enumerate((pk["host_ns"] < split_ns, pk["host_ns"] >= split_ns)):
        sent = np.flatnonzero(truth.offered & (truth.power_cycle == cycle))
        key = {(int(truth.timestamp[j]), int(truth.start[j]), int(truth.end[j])): j for j in sent}
        recv = pk["host_ns"][received]
        delays = np.array([
            h - earliest[key[(int(ts), int(a), int(b))]]
            for ts, a, b, h in zip(pk["timestamp_ms"][received], pk["start_cdeg"][received],
                                   pk["end_cdeg"][received], recv, strict=True)
        ]) / 1e6  # fmt: skip
        least = np.minimum.accumulate(delays)  # receive order
        seen = np.searchsorted(recv, turns_host_ns[cycle] + turn_ns, side="right") - 1
        out.append(least[np.maximum(seen, 0)])
    return out


def test_capture_through_unplug_and_replug(tmp_path):
    link = tmp_path / "ld19"
    samples = ideal_samples(duration_s=60.0, seed=1)
    session = tmp_path / "cap.h5"
    with LD19Emulator(samples, link=str(link), speed=SPEED, startup_s=0.5, seed=1) as emu:
        # A reader starved by a loaded machine must get every byte late, not lose some:
        # the link's default 0.5 s before an overrun (a 4 KiB pty buffer holds 57 ms at
        # 4x) dropped bytes under load and failed this test on crc_errors.
        emu.port.write_timeout_s = 30.0
        t0_ns = emu.clock.t0_ns
        writer = SessionWriter(session, label="unplug")
        protocol = LD19Protocol(clock_slope=1 / SPEED)
        config = LinkConfig(backoff_max_s=0.2)
        reader = SerialReader(SerialLink("ld19", link, protocol, writer, config=config))
        assert isinstance(reader, DeviceReader)
        reader.declare(writer)
        writer.start()
        try:
            reader.start()
            wait_until(lambda: protocol.assembler.turns_out >= 10, 5.0, "10 turns")
            emu.unplug()
            wait_until(lambda: any(e[1] == "unplug" for e in reader.events), 2.0, "unplug event")
            before = protocol.assembler.turns_out
            time.sleep(0.1)
            emu.replug()
            wait_until(lambda: reader.link.reconnects == 1, 3.0, "reconnect")
            wait_until(lambda: protocol.assembler.turns_out >= before + 10, 5.0, "10 more turns")
            status = reader.status()
        finally:
            reader.stop()
            writer.close()
        truth = emu.truth()

    assert status.connected and status.reconnects == 1 and status.crc_errors == 0
    with Session(session) as s:
        stored = s.lidar("ld19").read()
        events = [e for e in s.events() if e.source == "ld19"]
        raw = s.raw("ld19").read_bytes()
        chunks = list(s.raw("ld19").iter_chunks())
    kinds = [e.kind for e in events]
    assert kinds[:3] == ["start", "unplug", "reconnect"] and kinds[-1] == "stop"
    assert stored.n_turns == protocol.assembler.turns_out >= 20
    assert len(raw) == reader.link.bytes_total

    cycles = {}
    for c in (0, 1):
        cycles[c] = _truth_turns(truth.select(truth.power_cycle == c), t0_ns)
    unplug_ns = next(e.t_ns for e in events if e.kind == "unplug")
    after = np.flatnonzero(stored.flags & TurnFlag.AFTER_RECONNECT)
    assert after.size == 1  # exactly one turn starts the post-replug segment
    split = int(after[0])
    parts, hosts = [], []
    for seg, sl in ((0, slice(0, split)), (1, slice(split, stored.n_turns))):
        end = int(stored.offset[sl.stop - 1] + stored.count[sl.stop - 1])
        part = stored.select(sl, int(stored.offset[sl.start]), end)
        idx = _match(part, cycles[seg])
        # every turn intact, none missing between the first and the last stored one
        assert idx == list(range(idx[0], idx[0] + len(idx)))
        assert idx[0] >= 1  # the first (partial) turn of each power cycle is never stored
        parts.append(part)
        hosts.append(np.array([cycles[seg][j]["host_ns"] for j in idx]))
    floor_ms = _known_delay_floor_ms(chunks, truth, t0_ns, unplug_ns, hosts)
    for part, host, floor in zip(parts, hosts, floor_ms, strict=True):
        err_ms = (part.t_first_ns - host) / 1e6
        # Host time of the first point, from the device clock against the emulator's
        # own clock. Receive times only lag (the emulator's 8 ms send tick, scheduling,
        # the pty), and the clock rests on the least-delayed packets, so the error is a
        # small positive latency: the least delay of the packets it had seen by then
        # (floor), plus the fit's own spread; the 1 ms stamp resolution allows a little
        # below 0. (Measured: 0..9 ms, median ~1 ms, floor 0-1 ms. Beside a second copy of
        # the suite the first turns after a replug came 34, 34, 27, 15 ms late while the
        # least delay of the whole cycle was 1.4 ms: a bound on that least delay failed.)
        late_ms = err_ms - floor
        assert np.all((err_ms > -3.0) & (late_ms < 25.0)), (err_ms, floor)
        assert np.median(err_ms - floor) < 8.0 and np.median(err_ms) > -1.0, (err_ms, floor)
    # the turn interrupted by the unplug is dropped, not stored truncated
    assert not (stored.flags & TurnFlag.PACKET_LOSS).any()
    assert np.all(stored.count == 450)
    assert np.all(np.diff(stored.t_first_ns) > 0)

    # decoding the session's raw bytes again gives the same turns (the reconnect is
    # found from the session's events), point for point
    summary = decode_ld19(session, tmp_path / "again.h5")
    with Session(tmp_path / "again.h5") as s:
        again = s.lidar("ld19").read()
    assert summary["turns"] == stored.n_turns
    assert np.array_equal(again.count, stored.count) and np.array_equal(again.flags, stored.flags)
    # same bytes, same receive times, same clock slope (recorded in the stream's attrs)
    for col in ("angle", "range", "intensity", "device_ns", "t_ns", "t_first_ns"):
        assert np.array_equal(getattr(again, col), getattr(stored, col)), col


def test_stall_reports_stale_and_resumes(tmp_path):
    samples = SyntheticLD19Samples.generate(duration_s=30.0, seed=2)
    with LD19Emulator(samples, speed=SPEED, startup_s=0.0) as emu:
        protocol, sink = LD19Protocol(), TurnSink()
        reader = SerialReader(SerialLink("ld19", emu.path, protocol, sink))
        reader.start()
        try:
            wait_until(lambda: protocol.assembler.turns_out >= 3, 5.0, "3 turns")
            emu.stall(0.8)
            wait_until(lambda: any(e[1] == "stale" for e in reader.events), 2.0, "stale event")
            n = protocol.assembler.turns_out
            wait_until(lambda: protocol.assembler.turns_out >= n + 3, 5.0, "turns after the stall")
        finally:
            reader.stop()
    kinds = [e[1] for e in reader.events]
    assert kinds.index("stale") < kinds.index("note")  # "data resumed"
    turns = sink.collected()
    # the turns on either side of the gap (one if the gap did not cross a wrap)
    assert 1 <= np.count_nonzero(turns.flags & TurnFlag.PACKET_LOSS) <= 2
    assert reader.protocol.parser.counters.lost_packets > 0.8 * SPEED * 375 * 0.9


def test_a_stop_records_what_arrived_before_it():
    """Bytes that reached the host before a stop are recorded even when the reader had not
    read them yet (beside a second copy of the suite a capture's last 0.5 s went unread):
    the reader's last act is a read that does not wait."""
    with PtyPort() as port:
        link = SerialLink("ld19", port.path, LD19Protocol())
        reader = SerialReader(link)
        link.open_link()
        try:
            assert port.send(bytes(range(256)) * 4) == 1024
            wait_until(lambda: link._port.ser.in_waiting == 1024, 2.0, "the bytes in the pty")
            reader._stop.set()  # the stop came before the reader's next poll
            reader._run()
        finally:
            link.close()
    assert link.bytes_total == 1024


def test_silent_port_fails_within_its_deadline():
    with PtyPort() as port:
        reader = SerialReader(SerialLink("ld19", port.path, LD19Protocol()))
        t0 = time.monotonic()
        with pytest.raises(DriverError, match=r"0 bytes, 0 candidate headers, 0 valid") as exc:
            reader.start()
        elapsed = time.monotonic() - t0
    assert 3.5 <= elapsed < 3.5 + SLACK_S, elapsed
    # the message states the time that really passed: the 3.5 s deadline, more on a busy host
    said = re.search(r"within (\d+\.\d) s of opening", str(exc.value))
    assert said and 3.5 <= float(said[1]) <= elapsed + 0.05, str(exc.value)
    assert "is it powered" in str(exc.value)
    assert not reader.running


def test_wrong_baud_rate_is_diagnosed():
    samples = SyntheticLD19Samples.generate(duration_s=10.0, seed=3)
    with LD19Emulator(samples, speed=1.0, startup_s=0.0) as emu:
        config = LinkConfig(first_valid_timeout_s=1.0)
        link = SerialLink("ld19", emu.path, LD19Protocol(), baud=115200, config=config)
        reader = SerialReader(link)
        t0 = time.monotonic()
        with pytest.raises(DriverError, match="wrong baud rate or not an LD19") as exc:
            reader.start()
        assert time.monotonic() - t0 < 1.0 + SLACK_S
    assert link.bytes_total > 1000 and "0 valid" in str(exc.value)
    assert emu.port.stats.bytes_garbled_baud > 0


def _start_error(reader: SerialReader, port: PtyPort, data: bytes) -> str:
    """The message of the DriverError ``reader.start()`` raises when ``data`` arrives
    0.3 s later (after the reader has opened the port: opening flushes what was waiting)."""
    sender = threading.Timer(0.3, port.send, [data])
    sender.start()
    try:
        with pytest.raises(DriverError) as exc:
            reader.start()
    finally:
        sender.join(5)
    return str(exc.value)


def test_a_few_bytes_are_too_few_to_call_the_baud_rate_wrong():
    """A reader starved on a busy machine (or a device still starting) may get a few
    bytes and no header before its deadline: that is no evidence of a wrong baud rate,
    and the message must not say so (it did: "no 54 2C header at all: wrong baud rate
    or not an LD19?", failing the unplug test under load)."""
    packet = encode_packets(
        np.full(1, 3600), [0], [880], np.full((1, 12), 500), np.zeros((1, 12)), [0]
    )
    with PtyPort() as port:
        config = LinkConfig(first_valid_timeout_s=1.0)
        reader = SerialReader(SerialLink("ld19", port.path, LD19Protocol(), config=config))
        msg = _start_error(reader, port, packet[5:40])  # mid-packet: no header
    assert "35 bytes, 0 candidate headers, 0 valid" in msg, msg
    assert "wrong baud rate or not an LD19" not in msg
    assert "too few to tell" in msg and "busy" in msg


def test_headers_not_parsed_yet_at_the_deadline_are_not_a_wrong_baud_rate():
    """The wait for the first packet can end while the reader thread, starved, has
    counted a chunk's bytes and headers but not parsed it yet (seen under CPU hogs:
    "2538 bytes, 54 candidate headers, 0 valid (0 CRC failures): headers but no valid
    CRC: wrong baud rate"). Caught here between counting and parsing."""
    packets = encode_packets(
        np.full(8, 3600), np.arange(8) * 960, np.arange(8) * 960 + 880,
        np.full((8, 12), 500), np.zeros((8, 12)), np.arange(8) * 3,
    )  # fmt: skip
    with PtyPort() as port:
        protocol = LD19Protocol()
        config = LinkConfig(first_valid_timeout_s=1.0)
        reader = SerialReader(SerialLink("ld19", port.path, protocol, config=config))
        parsing = threading.Event()
        real_scan = protocol.parser.scan

        def stalled_scan(data, t_ns=None):
            parsing.set()
            time.sleep(2.0)  # a thread the scheduler keeps waiting past the deadline
            return real_scan(data, t_ns)

        protocol.parser.scan = stalled_scan
        msg = _start_error(reader, port, packets)
    assert parsing.is_set() and "376 bytes, 8 candidate headers, 0 valid" in msg, msg
    assert "not parsed yet" in msg and "wrong baud rate or not an LD19" not in msg


def test_missing_port_fails_to_open_within_its_deadline(tmp_path):
    config = LinkConfig(open_timeout_s=0.5)
    reader = SerialReader(SerialLink("ld19", tmp_path / "nothing", LD19Protocol(), config=config))
    t0 = time.monotonic()
    with pytest.raises(DriverError, match="cannot open"):
        reader.start()
    assert time.monotonic() - t0 < 0.5 + SLACK_S


class _DiskFullWriter:
    """A session writer whose disk fills up after ``ok_appends`` raw chunks."""

    def __init__(self, ok_appends: int) -> None:
        self.ok_appends = ok_appends
        self.error: BaseException | None = None
        self.events: list[tuple] = []

    def add_raw(self, name, attrs=None):
        pass

    def add_lidar(self, name, attrs=None):
        pass

    def event(self, t_ns, source, kind, message=""):
        if self.error is not None:
            raise SessionError(f"writing failed: {self.error}")
        self.events.append((kind, message))

    def append_raw(self, name, t_ns, data):
        self.ok_appends -= 1
        if self.ok_appends < 0:
            self.error = OSError(28, "No space left on device")
            raise SessionError(f"writing failed: {self.error}")

    def append_turns(self, name, turns):
        if self.error is not None:
            raise SessionError(f"writing failed: {self.error}")


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failed_writer_stops_the_reader_with_the_cause():
    samples = SyntheticLD19Samples.generate(duration_s=30.0, seed=4)
    with LD19Emulator(samples, speed=SPEED, startup_s=0.0) as emu:
        writer = _DiskFullWriter(ok_appends=20)
        reader = SerialReader(SerialLink("ld19", emu.path, LD19Protocol(), writer))
        reader.declare(writer)
        reader.start()
        try:
            wait_until(lambda: not reader.running, 5.0, "the reader thread to stop")
        finally:
            reader.stop()
    assert "No space left on device" in reader.status().last_error
    # kept in memory when the writer cannot take it: the error, what was skipped, stop
    assert [e[1] for e in reader.events][-3:] == ["error", "note", "stop"]
    assert reader.status().reader_down  # nothing could be recorded any more


def test_a_wrong_device_behind_the_link_after_a_replug_is_reported(tmp_path):
    link = tmp_path / "ld19"
    samples = SyntheticLD19Samples.generate(duration_s=30.0, seed=5)
    emu = LD19Emulator(samples, link=str(link), speed=SPEED, startup_s=0.0)
    config = LinkConfig(first_valid_timeout_s=0.5, backoff_max_s=0.1)
    reader = SerialReader(SerialLink("ld19", link, LD19Protocol(), config=config))
    try:
        reader.start()
        wait_until(lambda: reader.protocol.assembler.turns_out >= 2, 5.0, "2 turns")
        emu.stop()  # unplugged for good; something else appears under the same name
        with PtyPort(link=link, baud=115200) as other:
            wait_until(lambda: reader.link.reconnects == 1, 3.0, "reconnect")
            end = time.monotonic() + 3.0
            while reader.status().last_error is None or "reopening" not in reader.link.last_error:
                other.send(b"RP LIDAR System.\r\n" * 20)  # an A1's boot banner, 115200 baud
                assert time.monotonic() < end, list(reader.events)
                time.sleep(0.02)
            msg = reader.link.last_error
    finally:
        reader.stop()
    assert "within 0.5 s of reopening" in msg and "0 candidate headers, 0 valid" in msg
    assert "wrong baud rate or not an LD19" in msg
    assert [e[1] for e in reader.events].count("error") == 1
