"""The A1 driver: node decoding, turns equal to the emulator's truth, unplug, stalls."""

from __future__ import annotations

import threading
import time

import a1_util as u
import numpy as np
import pytest
import rplidar
from a1_util import decode_nodes
from hypothesis import given, settings
from hypothesis import strategies as st
from timing_util import SLACK_S

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_protocol import ScanMode
from sensorbench.drivers.a1_reader import A1Lidar, A1Scanner
from sensorbench.drivers.a1_turns import A1Turns
from sensorbench.errors import DriverError
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, TurnFlag
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.pty import Faults, PtyPort

# the turn kernels compiled before a test polls for a fixed time: from an empty numba
# cache their compile alone (~1.5 s) outlasted a 1 s window and no turn came out
pytestmark = pytest.mark.usefixtures("warm_readers")

node = st.tuples(
    st.booleans(), st.integers(0, 63), st.integers(0, 360 * 64 - 1), st.integers(0, 0xFFFF)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(node, min_size=1, max_size=50))
def test_vectorised_decode_equals_the_library_node_decoder(nodes):
    data = b"".join(u.encode_node(*n) for n in nodes)
    ours, used, skipped = decode_nodes(data)
    assert (used, skipped) == (len(data), 0)
    for i, (s, q, a, d) in enumerate(nodes):
        lib = rplidar._process_scan(data[5 * i : 5 * i + 5])  # the library is right here
        assert lib == (
            bool(ours.start[i]),
            int(ours.quality[i]),
            ours.angle_q6[i] / 64.0,
            ours.dist_q2[i] / 4.0,
        )
        assert (ours.start[i], ours.quality[i], ours.angle_q6[i], ours.dist_q2[i]) == (s, q, a, d)


def test_decode_resyncs_byte_by_byte_after_corruption_and_loss():
    rng = np.random.default_rng(3)
    fields = [
        (
            bool(i % 50 == 0),
            int(rng.integers(1, 64)),
            int(rng.integers(0, 23040)),
            int(rng.integers(1, 40000)),
        )
        for i in range(400)
    ]
    nodes = [u.encode_node(*f) for f in fields]
    broken = bytearray(b"".join(nodes))
    broken[5 * 100 + 1] ^= 0x01  # check bit of node 100
    del broken[5 * 250 + 2]  # one byte of node 250 lost
    out, used, skipped = decode_nodes(bytes(broken))
    got = list(
        zip(
            out.start.tolist(),
            out.quality.tolist(),
            out.angle_q6.tolist(),
            out.dist_q2.tolist(),
            strict=True,
        )
    )
    # everything except the damaged nodes comes back, in order: node 100 (check bit),
    # 250 (read across the slip) and possibly 251 (its start byte precedes the
    # position where the slip is detected)
    lost = [i for i, f in enumerate(fields) if f not in got]
    assert set(lost) <= {100, 250, 251} and {100, 250} <= set(lost)
    assert got == [f for i, f in enumerate(fields) if i not in lost]
    assert used == len(broken)
    assert skipped + 5 * len(got) == len(broken)  # every byte accounted for


def test_reference_conversion_native_cw_to_ccw():
    """The conversion the decoder's turns are compared against, on known points."""
    angle = u.ccw_rad(np.array([0, 90 * 64, 270 * 64], np.uint16))
    assert np.allclose(angle, [0.0, 3 * np.pi / 2, np.pi / 2])
    r = u.range_m(np.array([4000, 8, 0], np.uint16))
    assert r[0] == 1.0 and r[1] == 0.002 and np.isinf(r[2])


def test_host_times_spread_the_nodes_of_a_read_over_the_gap_to_the_previous_one():
    nodes = [u.encode_node(i == 0 or i == 8, 15, 64 * i, 4000) for i in range(10)]
    t = A1Turns(max_node_ns=1_000_000)
    t.feed(1_000_000, nodes[0])  # first read: nothing before it (one node, at most 1 ms)
    t.feed(2_000_000, b"".join(nodes[1:5]))  # 4 nodes over the 1 ms since
    turn = t.feed(10_000_000_000, b"".join(nodes[5:10]))  # a pause: at most 1 ms per node
    assert turn.n_turns == 1 and turn.count.tolist() == [8]
    assert turn.t_ns.tolist() == [
        1_000_000,
        1_250_000,
        1_500_000,
        1_750_000,
        2_000_000,
        9_996_000_000,
        9_997_000_000,
        9_998_000_000,
    ]
    assert turn.device_ns.tolist() == [NO_DEVICE_TIME]  # no sample duration given


def truth_turns(truth) -> list[tuple[np.ndarray, ...]]:
    d = truth.delivered
    return u.ref_turns(truth.start[d], truth.quality[d], truth.angle_q6[d], truth.dist_q2[d])


def assert_turn_equals(turns: LidarTurns, i: int, ref: tuple[np.ndarray, ...]) -> None:
    t = turns.turn(i)
    q, a, dist = ref[0], ref[1], ref[2]
    np.testing.assert_array_equal(t.intensity, q)
    np.testing.assert_array_equal(t.angle, u.ccw_rad(a).astype(np.float32))
    np.testing.assert_array_equal(t.range, u.range_m(dist).astype(np.float32))
    # and the q6/q2 values come back exactly
    cw_deg = np.mod(360.0 - np.rad2deg(t.angle.astype(np.float64)), 360.0)
    np.testing.assert_array_equal(np.round(cw_deg * 64).astype(int) % 23040, a)
    r = t.range.astype(np.float64)
    np.testing.assert_array_equal(np.where(np.isinf(r), 0, np.round(r * 4000)), dist)


def collect(scanner: A1Scanner, seconds: float, quiet_s: float | None = None) -> LidarTurns:
    """Turns of ``seconds`` of polling; with ``quiet_s``, until the line has been quiet that
    long (s) instead."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _, data, turns = scanner.poll(0.02)
        out.append(turns)
        if data and quiet_s is not None:
            deadline = time.monotonic() + quiet_s
    return LidarTurns.concat(out)


def test_turns_equal_the_emulator_truth_exactly():
    with A1Emulator(speed=4.0, unit=A1Unit(serial=bytes(16))) as emu:
        sc = A1Scanner(emu.path, read_timeout_s=0.5)
        info = sc.open()
        assert info.serial == "0" * 32 and sc.health.status == "good"
        sc.start()
        turns = collect(sc, 1.5)
        # the unit goes silent, the host reads what reached it: a STOP sent at close lands
        # after more whole turns on a loaded host, which the host then never reads
        emu.stall(60.0)
        turns = LidarTurns.concat([turns, collect(sc, 0.3, quiet_s=0.3)])
        sc.close()
        ref = truth_turns(emu.truth())
    assert turns.n_turns >= 10
    assert turns.n_turns in (len(ref), len(ref) + 1)  # + the partial turn cut by the stop
    for i in range(len(ref)):
        assert_turn_equals(turns, i, ref[i])
    assert np.all(turns.flags[: len(ref)] == 0)
    assert np.all(np.diff(turns.t_ns) >= 0)  # host time, monotonic
    assert np.all(turns.t_first_ns == turns.t_ns[turns.offset])


def collect_raw(scanner: A1Scanner, seconds: float, min_turns: int = 0) -> tuple[LidarTurns, bytes]:
    """Turns and raw bytes of ``seconds`` of polling, or until ``min_turns`` complete turns
    arrived, at most 10 s."""
    out, raw = [], []
    deadline = time.monotonic() + seconds
    end = deadline + 10.0 if min_turns else deadline
    while (now := time.monotonic()) < end and (
        now < deadline or sum(t.n_turns for t in out) < min_turns
    ):
        _, chunk, turns = scanner.poll(0.02)
        out.append(turns)
        raw.append(chunk)
    return LidarTurns.concat(out), b"".join(raw)


def test_unplug_mid_scan_reconnects_with_events_and_loses_no_turn(tmp_path, warm_readers):
    link = str(tmp_path / "lidar_rear")
    events = []
    with A1Emulator(speed=4.0, link=link) as emu:
        sc = u.started_scanner(link, events)
        before, raw_before = collect_raw(sc, 0.8)
        t_unplug = time.monotonic_ns()
        waiting = sc.lidar.waiting()
        emu.unplug()
        truth_before = emu.truth()
        more, raw_more = collect_raw(sc, 0.3)
        emu.replug(boot_s=0.4)
        after, raw_after = collect_raw(sc, 1.5, min_turns=3)
        sc.close()
        truth_all = emu.truth()
    before = LidarTurns.concat([before, more])
    raw_before += raw_more
    kinds = [e[1] for e in events]
    assert "unplug" in kinds and "reconnect" in kinds
    assert kinds.index("unplug") < kinds.index("reconnect")
    assert sc.link.reconnects == 1 and sc.link.unplugs == 1
    # what reached the host is exactly what the emulator delivered (a host descheduled
    # past the emulator's write timeout overruns the pty, as it would a USB adapter), up
    # to the unplug; gone are only the nodes the host had not read: those waiting in the
    # pty just before the unplug, the chunk the emulator was writing then and any after
    sent_before = truth_before.select(truth_before.delivered)
    got = u.ref_decode_nodes(u.scan_bytes(raw_before))
    n = got.start.size
    stamps = sent_before.host_ns
    unread = np.count_nonzero(stamps >= stamps[stamps < t_unplug].max(initial=0))
    assert len(sent_before) - n <= waiting // 5 + 1 + unread
    np.testing.assert_array_equal(got.angle_q6, sent_before.angle_q6[:n])
    np.testing.assert_array_equal(got.dist_q2, sent_before.dist_q2[:n])
    # every complete turn received before the unplug came out, then the cut one, flagged
    ref = u.ref_turns(got.start, got.quality, got.angle_q6, got.dist_q2)
    assert before.n_turns == len(ref) + 1
    for i in range(len(ref)):
        assert_turn_equals(before, i, ref[i])
    assert np.all(before.flags[:-1] == 0)
    assert before.flags[-1] == TurnFlag.PACKET_LOSS
    last = np.flatnonzero(got.start)[-1]
    assert_turn_equals(before, -1, (got.quality[last:], got.angle_q6[last:], got.dist_q2[last:]))
    # after the reconnect: the first complete turn is flagged, and all equal the truth
    # the raw stream holds every byte: the reconnect's GET_INFO, GET_HEALTH, descriptor
    assert raw_after.index(bytes.fromhex("a55a1400000004")) < raw_after.index(u.SCAN_DESCRIPTOR)
    got_after = u.ref_decode_nodes(u.scan_bytes(raw_after))
    sent_after = truth_all.select(np.arange(len(truth_all)) >= len(truth_before))
    sent_after = sent_after.select(sent_after.delivered)
    k = np.flatnonzero(sent_after.start)[0]
    first = np.flatnonzero(got_after.start)[0]
    np.testing.assert_array_equal(
        got_after.angle_q6[first:], sent_after.angle_q6[k : k + got_after.start.size - first]
    )
    ref_after = u.ref_turns(
        got_after.start, got_after.quality, got_after.angle_q6, got_after.dist_q2
    )
    assert after.n_turns == len(ref_after) >= 3
    assert after.flags[0] == TurnFlag.AFTER_RECONNECT
    assert np.all(after.flags[1:] == 0)
    for i in range(len(ref_after)):
        assert_turn_equals(after, i, ref_after[i])


def test_a_different_unit_on_the_path_after_an_unplug_is_refused_not_recorded(tmp_path):
    """Front and rear replugged into each other's ports (or a spare unit put in): the
    unit that answers on the path is not the one the stream was started on, so its
    turns would be recorded (and merged) with the other lidar's mount."""
    link = tmp_path / "lidar_front"
    events = []
    other = A1Unit(serial="AB" * 16)
    with A1Emulator(speed=4.0, link=str(link)) as front, A1Emulator(speed=4.0, unit=other) as rear:
        sc = u.started_scanner(str(link), events)
        collect(sc, 0.5)
        first = sc.info.serial
        front.unplug()
        collect(sc, 0.2)
        link.symlink_to(rear.path)  # the rear unit now answers on the front's path
        turns = collect(sc, 1.5)
        sc.close()
    assert first == bytes(range(16)).hex().upper()
    assert sc.link.unplugs == 1
    assert sc.link.reconnects == 0 and turns.n_turns == 0
    assert "reconnect" not in [e[1] for e in events]
    assert "AB" * 16 in (sc.link.last_error or "") and first in sc.link.last_error
    # one event says why the device stays down, however many retries
    refused = [m for _, kind, m in events if kind == "error" and "reopen refused" in m]
    assert len(refused) == 1 and "AB" * 16 in refused[0] and first in refused[0]


def test_stall_gives_stale_event_then_resumes():
    events = []
    with A1Emulator(speed=4.0) as emu:
        sc = u.started_scanner(emu.path, events, stale_after_s=0.2, restart_after_s=5.0)
        collect(sc, 0.3)
        emu.stall(0.4)
        collect(sc, 0.3)
        assert [e[1] for e in events].count("stale") == 1
        turns = collect(sc, 0.6)
        sc.close()
    assert "data resumed" in [e[2] for e in events]
    assert turns.n_turns > 0


def test_long_silence_restarts_the_scan():
    events = []
    with A1Emulator(speed=4.0) as emu:
        sc = u.started_scanner(
            emu.path, events, read_timeout_s=0.3, stale_after_s=0.1, restart_after_s=0.3
        )
        collect(sc, 0.2)
        emu.stall(0.5)
        collect(sc, 1.2)
        turns = collect(sc, 0.5)
        sc.close()
        scans = emu.requests.count(0x20)
    assert sc.link.restarts >= 1 and scans >= 2
    assert turns.n_turns > 0


def test_a_unit_browned_out_into_protection_stop_mid_scan_is_reset_and_scans_again():
    """Another motor's inrush on the bus (a replugged A1) puts a scanning unit in health
    error: it stops and ignores SCAN until a RESET (Slamtec's protection stop), so a
    restart that only sends STOP and SCAN leaves it dead for the rest of the run."""
    events = []
    with A1Emulator(speed=4.0) as emu:
        sc = u.started_scanner(
            emu.path, events, read_timeout_s=0.3, stale_after_s=0.1, restart_after_s=0.3
        )
        collect(sc, 0.3)
        emu.brown_out("error", 0x8002, 0.0)
        collect(sc, 3.0)
        turns = collect(sc, 1.0)
        sc.close()
        resets = emu.requests.count(proto.CMD_RESET)
    assert sc.link.restarts >= 1 and resets == 1
    assert turns.n_turns >= 2  # at 4x, 1 s is about 20 turns
    assert any("0x8002" in e[2] for e in events)


def test_the_turn_a_silence_cut_is_kept_flagged_when_the_scan_restarts():
    """The scan stops mid-turn (a brown-out) and is restarted after the silence: the
    nodes of the cut turn that reached the host are stored, flagged PACKET_LOSS, as at
    an unplug, not dropped with the restart."""
    with A1Emulator(speed=4.0) as emu:
        sc = u.started_scanner(
            emu.path, read_timeout_s=0.3, stale_after_s=0.1, restart_after_s=0.3
        )
        before = collect(sc, 0.5)
        emu.brown_out("error", 0x8002, 0.0)
        truth = emu.truth()
        turns = LidarTurns.concat([before, collect(sc, 2.0)])
        sc.close()
    assert sc.link.restarts == 1
    got = truth.select(truth.delivered)
    last = np.flatnonzero(got.start)[-1]
    cut = np.flatnonzero(turns.flags == TurnFlag.PACKET_LOSS)
    assert cut.size == 1 and got.start[last + 1 :].size > 0
    assert_turn_equals(turns, int(cut[0]), (got.quality[last:], got.angle_q6[last:],
                                            got.dist_q2[last:]))  # fmt: skip


def test_corruption_flags_turns_and_keeps_the_rest_exact():
    """A corrupted byte breaks a node's S/!S pair, check bit or angle range only with
    probability about 0.24 (measured over single-byte hits on the room stream), so the
    evidence is counted in bytes, not seconds: with 1e-3 of 60 000 offered bytes hit,
    about 14 hits are detectable (P(none) ~ e^-14, whatever the machine load), and an
    A1 turn (~1800 B) stays clean with probability about e^(-1.8 * 0.24) = 0.65.
    (At 2e-4 over 1.5 s the detectable hits were ~3: none in about 5 % of runs.)"""
    events = []
    with A1Emulator(speed=4.0, faults=Faults(corrupt_rate=1e-3), seed=5) as emu:
        sc = u.started_scanner(emu.path, events)
        t0 = time.monotonic()
        out = []
        while emu.port.stats.bytes_offered < 60_000:
            assert time.monotonic() - t0 < 30.0, "the emulator stopped sending"
            out.append(sc.poll(0.02)[2])
        out.append(sc.poll(0.05)[2])
        elapsed_s = time.monotonic() - t0
        sc.close()
        stats = emu.port.stats
    turns = LidarTurns.concat(out)
    assert stats.bytes_corrupted > 0
    assert sc.assembler.bytes_skipped > 0
    flagged = (turns.flags & TurnFlag.CRC_ERRORS) > 0
    assert flagged.any() and not flagged.all()
    bursts = [e for e in events if e[1] == "crc_burst"]
    assert 1 <= len(bursts) <= 1 + elapsed_s  # reported at most once a second
    assert len(bursts) < flagged.sum()  # so fewer reports than damaged turns


def test_missing_port_and_silent_device_give_actionable_errors(tmp_path):
    with pytest.raises(DriverError, match=r"does not exist.*plugged in"):
        A1Lidar(str(tmp_path / "nope"))
    with A1Emulator(speed=4.0, faults=Faults(slow_start_s=30.0)) as emu:
        lid = A1Lidar(emu.path, read_timeout_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(DriverError, match=r"0 of 7 bytes.*within 0\.30 s.*powered"):
            lid.get_info()
        assert time.monotonic() - t0 < 0.3 + SLACK_S
        lid.disconnect()


def test_health_error_is_reset_once():
    with A1Emulator(speed=4.0) as emu:
        emu.set_health(2, 0x8001)
        lid = A1Lidar(emu.path, read_timeout_s=0.5)
        assert lid.ensure_healthy().status == "good"
        assert emu.requests.count(0x40) == 1
        lid.disconnect()


def test_turns_skip_the_leading_partial_turn():
    start = [0, 0, 1, 0, 0, 1, 0]
    data = b"".join(u.encode_node(bool(s), 1, 64 * i, 4000) for i, s in enumerate(start))
    asm = A1Turns(nominal_us=1.0)  # a bare capture: node i at t0 + i us
    turns = asm.feed(0, data)
    assert asm.leading_nodes_skipped == 2
    assert turns.count.tolist() == [3]
    assert turns.t_first_ns.tolist() == [2000]
    rest = asm.flush()
    assert rest.count.tolist() == [2] and rest.flags.tolist() == [TurnFlag.PACKET_LOSS]


def test_recover_stops_clears_reconnects_and_restarts():
    with A1Emulator(speed=4.0) as emu:
        lid = A1Lidar(emu.path, read_timeout_s=0.5)
        lid.start()
        time.sleep(0.2)  # a backlog of nodes, as after a missed descriptor
        old_port = lid._serial
        lid.recover(restart=True)
        assert lid._serial is not old_port and lid.scanning
        assert emu.requests[-2:] == [0x25, 0x20]  # STOP, then a new SCAN
        nodes, _, skipped = decode_nodes(lid.read_available(0.3))
        assert len(nodes) > 0 and skipped == 0
        lid.disconnect()


def test_simulated_a1_samples_come_out_as_ccw_turns_within_quantization():
    from sensorbench.sim.simulation import Simulation

    samples = Simulation("lidar_static", seed=1).lidar("lidar_front")
    with A1Emulator(samples, speed=4.0) as emu:
        sc = u.started_scanner(emu.path)
        turns = collect(sc, 1.0)
        sc.close()
        truth = emu.truth()
    first = np.flatnonzero(truth.start)[0]
    k = np.searchsorted(samples.t_s, truth.t_s[first] % (samples.t_s[-1] + 1 / 2000) - 1e-9)
    n = turns.n_points
    sl = slice(k, k + n)
    expect_ccw = np.deg2rad(np.mod(-samples.angle_deg_cw[sl], 360.0))
    dang = np.angle(np.exp(1j * (turns.angle - expect_ccw)))
    assert np.max(np.abs(dang)) <= np.deg2rad(0.5 / 64) + 1e-6  # half a q6 step
    rng = samples.range_m[sl]
    hit = rng > 0
    assert np.all(np.isinf(turns.range[~hit]))  # no return -> inf
    assert np.max(np.abs(turns.range[hit] - rng[hit])) <= 0.000125 + 1e-6  # half a q2 step
    np.testing.assert_array_equal(turns.intensity, samples.intensity[sl])
    # a turn of the simulated A1 is one turn of the scan
    _, per_turn = np.unique(samples.turn[sl], return_counts=True)
    np.testing.assert_array_equal(turns.count, per_turn)


class ScriptedDevice:
    """A device on a real pty that answers the first scan request with junk."""

    def __init__(self) -> None:
        self.port = PtyPort(baud=115200)
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            data = self.port.recv(0.01)
            for _ in range(data.count(b"\xa5\x20")):
                self.scans += 1
                if self.scans == 1:
                    self.port.send(b"\x00\x11\x22\x33\x44\x55\x66")  # not a descriptor
                else:
                    self.port.send(u.SCAN_DESCRIPTOR + u.encode_node(True, 9, 64, 4000) * 4)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(1)
        self.port.close()


def test_start_recovers_once_from_a_descriptor_error():
    dev = ScriptedDevice()
    events = []
    try:
        lid = A1Lidar(dev.port.path, read_timeout_s=0.3, on_event=lambda *e: events.append(e))
        first_port = lid._serial
        lid.start()
        assert lid.scanning and dev.scans == 2
        assert lid._serial is not first_port  # reconnected
        assert any(e[1] == "error" and "recovering" in e[2] for e in events)
        nodes, _, _ = decode_nodes(lid.read_available(0.2))
        assert nodes.angle_q6.tolist() == [64] * 4
        lid.disconnect()
    finally:
        dev.close()


CONF_VALUES = {0x7F: b"Standard\0", 0x71: (508 << 8).to_bytes(4, "little"),
               0x74: (12 << 8).to_bytes(4, "little"), 0x75: b"\x81"}  # fmt: skip


class ConfDevice(ScriptedDevice):
    """A firmware >= 1.24 unit on a real pty answering GET_LIDAR_CONF for mode 0 (the
    A1M8's Standard: 508 us, 12 m, nodes), each entry damaged the first time it is asked:
    the name with a byte's top bit flipped, the others cut after the echoed type."""


    def _run(self) -> None:
        asked: set[int] = set()
        while not self._stop.is_set():
            data = self.port.recv(0.01)
            while (at := data.find(b"\xa5\x84")) >= 0 and len(data) >= at + 9:
                conf = int.from_bytes(data[at + 3 : at + 7], "little")
                value = CONF_VALUES[conf]
                if conf not in asked:
                    value = b"Stan\xe4ard\0" if conf == 0x7F else b""
                asked.add(conf)
                data = data[at + 9 :]
                answer = conf.to_bytes(4, "little") + value
                self.port.send(bytes([0xA5, 0x5A, len(answer), 0, 0, 0, 0x20]) + answer)


def test_a_damaged_scan_mode_answer_is_asked_again_not_a_crash():
    dev = ConfDevice()
    try:
        lid = A1Lidar(dev.port.path, read_timeout_s=0.3)
        mode = lid.scan_mode(0)
        lid.disconnect()
    finally:
        dev.close()
    assert mode == ScanMode(0, "Standard", 508.0, 12.0, 0x81)


def test_wrong_device_is_refused_within_the_deadlines():
    port = PtyPort(baud=115200)
    stop = threading.Event()

    def noise() -> None:
        rng = np.random.default_rng(0)
        while not stop.is_set():
            port.send(rng.integers(0, 256, 200, dtype=np.uint8).tobytes())
            time.sleep(0.01)

    t = threading.Thread(target=noise, daemon=True)
    t.start()
    try:
        lid = A1Lidar(port.path, read_timeout_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(DriverError):
            lid.get_info()
        # two attempts, each: drain up to one deadline, then one descriptor deadline
        assert time.monotonic() - t0 < 2 * (0.3 + 0.3) + SLACK_S
        lid.disconnect()
    finally:
        stop.set()
        t.join(1)
        port.close()
