"""The LD19 emulator through pyserial on its pty: byte-exact against the protocol
table (independent reference decoder) and decoded exactly by the driver's parser,
with link faults whose counts come from ``PtyPort.stats``."""

from __future__ import annotations

import time

import numpy as np
import pytest
import serial
from capture_util import damaged as damaged_frames
from ld19_util import (
    MANUAL_PACKET,
    capture,
    ideal_samples,
    packet_rows,
    ref_decode,
    ref_rows,
    truth_points,
)

from sensorbench.drivers.ld19_parser import PACKET_SIZE, LD19Parser
from sensorbench.errors import SimError
from sensorbench.sim.emulator_a1 import A1Truth
from sensorbench.sim.emulator_ld19 import (
    REAL_SAMPLES_PER_S,
    LD19Emulator,
    LD19Quirks,
    LD19Truth,
    SyntheticLD19Samples,
)
from sensorbench.sim.emulator_pods import PodTruth
from sensorbench.sim.pty import Faults

SPEED = 20.0  # emulation speed-up: 6 s of LD19 stream in 0.3 s


def _run(samples, **kwargs) -> tuple[bytes, LD19Emulator]:
    """Play ``samples`` once through the emulator and capture every byte on the host."""
    emu = LD19Emulator(samples, speed=SPEED, startup_s=0.0, loop=False, autostart=False, **kwargs)
    try:
        with serial.Serial(emu.path, 230400, timeout=0.05) as ser:
            emu.start()
            data = capture(ser, emu.finished)
    finally:
        emu.stop()
    assert emu.finished.is_set(), "the emulator did not finish its samples in time"
    # the host kept up (a starved reader would lose bytes to a full pty, as on a UART)
    assert emu.port.stats.bytes_overrun == 0
    return data, emu


class _Manual:
    """The manual's example packet as device samples (12 samples, linear angles)."""

    t_s = np.arange(12) / 4500.0
    angle_deg_cw = np.linspace(324.27, 334.70, 12)
    range_m = np.array([224, 220, 217, 213, 211, 208, 205, 202, 199, 197, 194, 192]) / 1000
    intensity = np.array([228, 226, 229, 227, 228, 233, 228, 226, 233, 229, 229, 229])
    speed_deg_s = np.full(12, 2152.0)


def test_emulator_puts_the_manual_packet_on_the_tty_byte_for_byte():
    data, emu = _run(_Manual(), quirks=LD19Quirks(timestamp_start_ms=6714))
    assert data == MANUAL_PACKET
    assert emu.port.stats.bytes_delivered == 47


def test_clean_stream_matches_the_reference_decoder_and_truth():
    samples = SyntheticLD19Samples.generate(duration_s=3.0, seed=4)
    data, emu = _run(samples)
    truth = emu.truth()
    assert len(truth) == int(3 * REAL_SAMPLES_PER_S) // 12 and truth.offered.all()
    ref = ref_decode(data)
    assert ref.crc_failures == 0 and len(data) == 47 * len(truth)
    assert np.array_equal(ref_rows(ref.packets), packet_rows(truth))
    # the encoded values are the samples, rounded to the protocol's units
    assert np.array_equal(truth.distance_mm.ravel(), np.round(samples.range_m * 1000))
    assert np.array_equal(truth.start, np.round(samples.angle_deg_cw[::12] * 100) % 36000)
    pts = truth_points(truth)
    assert np.array_equal(pts["t_s"], samples.t_s)  # per point: emission time, as encoded
    assert np.abs(pts["angle_cdeg"] - samples.angle_deg_cw * 100).max() < 0.51
    assert np.array_equal(pts["intensity"], samples.intensity)
    assert np.array_equal(truth.timestamp, np.floor(samples.t_s[::12] * 1000) % 30000)


def _classify(out, truth, stats, damaged):
    """Split decoded packets into exact copies of undamaged packets and CRC misses.

    A CRC miss is a packet damaged by two or more faults that still passes the
    CRC-8 (probability 1/256 per such packet: a protocol limit, not a parser bug).
    Returns (index into truth of each exact packet, offered-stream offsets of misses).
    """
    good = truth.select(~damaged)
    good_idx = np.flatnonzero(~damaged)
    key = {tuple(r): i for i, r in zip(good_idx.tolist(), packet_rows(good), strict=True)}
    kept = np.setdiff1d(np.arange(stats.bytes_offered), np.asarray(stats.dropped_offsets))
    exact, misses = [], []
    for row, pos in zip(packet_rows(out), out.stream_offset.tolist(), strict=True):
        i = key.get(tuple(row))
        if i is not None:
            exact.append(i)
        else:
            misses.append(int(kept[pos]))
    return np.asarray(exact, dtype=np.int64), np.asarray(misses, dtype=np.int64)


def test_stream_with_faults_decodes_exactly_and_counters_match_injection():
    samples = SyntheticLD19Samples.generate(duration_s=6.0, seed=5)
    faults = Faults(corrupt_rate=0.01, drop_rate=0.002)
    data, emu = _run(
        samples,
        faults=faults,
        quirks=LD19Quirks(header_in_payload_rate=0.3, timestamp_start_ms=28000),
        seed=11,
    )
    st = emu.port.stats
    truth = emu.truth()
    assert st.bytes_corrupted > 500 and st.bytes_dropped > 100
    damaged = damaged_frames(
        truth.offset, PACKET_SIZE, truth.offered, st.corrupted_offsets + st.dropped_offsets
    )
    assert len(data) == st.bytes_delivered

    p = LD19Parser()
    out = p.feed(data)
    # the parser is exactly the byte-by-byte rule: same packets, same CRC failures
    ref = ref_decode(data)
    assert np.array_equal(packet_rows(out), ref_rows(ref.packets))
    c = p.counters
    assert c.crc_failures == ref.crc_failures and c.span_failures == ref.span_failures

    exact, misses = _classify(out, truth, st, damaged)
    # every decoded packet is an encoded packet, point for point, in order ...
    assert np.all(np.diff(exact) > 0)
    # ... except CRC misses, which lie on damaged packets. Expected misses: packets with
    # >= 2 faults (about 2250 * 0.08 = 180) / 256 = 0.7 plus shifted windows after drops
    # (about 130 * 0.2 / 256 = 0.1); P(Poisson(0.8) > 5) < 1e-3.
    assert len(misses) <= 5
    bad_start = truth.offset[damaged]
    for m in misses:
        assert np.any((bad_start <= m) & (m < bad_start + 47))
    # nothing undamaged is lost, except a packet hidden under a miss (one per miss at most)
    assert int((~damaged).sum()) - exact.size <= len(misses)
    assert (truth.select(~damaged).distance_mm == 0x2C54).any(axis=1).sum() > 100
    assert (np.diff(truth.timestamp.astype(int)) < 0).sum() >= 1  # the 30000 ms wrap passed
    assert c.bytes == st.bytes_delivered
    assert c.bytes == 47 * c.packets + c.bytes_skipped + p.pending_bytes
    # lost packets counted from timestamp gaps = packets missing between decoded ones
    if not misses.size:
        inner = damaged[exact[0] : exact[-1] + 1]
        assert c.lost_packets == int(inner.sum())
        assert c.timestamp_gaps == np.count_nonzero(np.diff(inner.astype(int)) == 1)


def test_crc_failures_equal_damaged_packets_with_an_intact_header():
    samples = SyntheticLD19Samples.generate(duration_s=3.0, seed=6)
    data, emu = _run(samples, faults=Faults(corrupt_rate=0.005), seed=2)
    st = emu.port.stats
    truth = emu.truth()
    damaged = damaged_frames(truth.offset, PACKET_SIZE, truth.offered, st.corrupted_offsets)
    hit = np.asarray(st.corrupted_offsets)
    header_hit = np.isin(truth.offset, hit) | np.isin(truth.offset + 1, hit)
    p = LD19Parser()
    out = p.feed(data)
    exact, misses = _classify(out, truth, st, damaged)
    assert exact.size == int((~damaged).sum())
    assert len(misses) <= 3  # ~1125 * 0.025 / 256 = 0.1 expected
    assert p.counters.crc_failures == int((damaged & ~header_hit).sum()) - len(misses)


def test_startup_delay_and_power_cycle_restart_the_timestamp():
    samples = ideal_samples(duration_s=5.0, seed=7)  # packets on whole ms at 3 s
    emu = LD19Emulator(samples, speed=SPEED, startup_s=3.0, loop=False, autostart=False)
    try:
        with serial.Serial(emu.path, 230400, timeout=0.05) as ser:
            emu.start()
            first = capture(ser, emu.finished, quiet_s=0.05, deadline_s=0.03)
            assert first == b""  # at most 1.6 s of device time: still starting up
            rest = capture(ser, emu.finished)
    finally:
        emu.stop()
    truth = emu.truth()
    assert truth.t_s.min() >= 3.0 and truth.timestamp[0] == 3000
    out = LD19Parser().feed(rest)
    assert np.array_equal(packet_rows(out), packet_rows(truth))


def test_unplug_replug_power_cycles_the_unit():
    samples = SyntheticLD19Samples.generate(duration_s=4.0, seed=8)
    with LD19Emulator(samples, speed=SPEED, startup_s=0.5, loop=True) as emu:
        time.sleep(0.1)
        emu.unplug()
        time.sleep(0.05)
        emu.replug()
        time.sleep(0.1)
        truth = emu.truth()
    assert truth.power_cycle.max() == 1
    after = truth.select(truth.power_cycle == 1)
    before = truth.select(truth.power_cycle == 0)
    assert len(before) > 0 and len(after) > 0
    # the device clock restarted at power-on: first stamp after replug is startup_s later
    assert 500 <= int(after.timestamp[0]) <= 503
    assert after.t_s[0] - before.t_s[-1] > 0.5  # unpowered while unplugged + startup


def test_bad_samples_are_refused():
    s = SyntheticLD19Samples.generate(duration_s=0.1)
    s.t_s = s.t_s[:-1]
    with pytest.raises(SimError, match="multiple of 12"):
        LD19Emulator(s, autostart=False)


def test_the_device_ignores_what_the_host_sends():
    samples = SyntheticLD19Samples.generate(duration_s=3.0, seed=9)
    emu = LD19Emulator(samples, speed=SPEED, startup_s=0.0, loop=False, autostart=False)
    try:
        with serial.Serial(emu.path, 230400, timeout=0.05, write_timeout=2.0) as ser:
            emu.start()
            ser.write(b"\xa5\x20" * 1000)  # e.g. an RPLIDAR scan request, many times
            data = capture(ser, emu.finished)
    finally:
        emu.stop()
    assert emu.host_bytes_ignored == 2000 and emu.port.stats.bytes_overrun == 0
    assert np.array_equal(packet_rows(LD19Parser().feed(data)), packet_rows(emu.truth()))


def test_empty_truths_have_zero_rows_of_each_emulators_columns() -> None:
    """Before the first packet/node/frame a truth has zero rows, the 2-D columns their width."""
    ld19, a1, pods = LD19Truth.concat([], 12), A1Truth.concat([]), PodTruth.concat([], 3)
    assert len(ld19) == len(a1) == len(pods) == 0
    assert ld19.distance_mm.shape == (0, 12) and ld19.intensity.dtype == np.uint8
    assert a1.angle_q6.dtype == np.uint16 and pods.counts.shape == (0, 3)
    assert LD19Truth.concat([ld19, ld19], 12).point_t_s.shape == (0, 12)
