"""LD19 packet format: CRC, the manual's example packet, parser rules and counters."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ld19_util import (
    MANUAL_FIELDS,
    MANUAL_PACKET,
    MANUAL_PACKET_10HZ,
    concat_packets,
    packet_rows,
    ref_crc8,
    ref_decode,
    ref_rows,
)

from sensorbench.drivers.ld19_parser import (
    CRC8_TABLE,
    LD19Parser,
    _scan,
    build_crc8_table,
    point_angles_cdeg,
)
from sensorbench.sim.emulator_ld19 import encode_packets


def _packets(k: int, seed: int = 0, ts0: int = 0) -> tuple[bytes, dict]:
    """``k`` well-formed packets at 10 Hz, 4500 samples/s, from random point values."""
    rng = np.random.default_rng(seed)
    j = np.arange(k)
    start = (j * 960) % 36000  # 12 samples of 0.8 deg per packet
    fields = {
        "speed": np.full(k, 3600),
        "start": start,
        "end": (start + 880) % 36000,
        "distance_mm": rng.integers(0, 12000, (k, 12)),
        "intensity": rng.integers(0, 256, (k, 12)),
        "timestamp": (ts0 + (j * 8) // 3) % 30000,
    }
    return encode_packets(**fields), fields


def test_crc_table_from_polynomial_matches_bitwise_reference():
    table = build_crc8_table(0x4D)
    assert np.array_equal(table, CRC8_TABLE)
    for b in range(256):
        assert table[b] == ref_crc8(bytes([b]))
    assert ref_crc8(b"123456789") == 0xC3


def test_manual_example_packet_decodes_exactly():
    assert ref_crc8(MANUAL_PACKET[:-1]) == 0x50 and ref_crc8(MANUAL_PACKET) == 0
    # as printed, the vendor SDK drops it: 10 whole degrees at 2152 deg/s, over
    # 2152 x 12 / 4500 x 1.5 = 8.6 (lipkg.cpp); so does the parser
    p = LD19Parser()
    assert len(p.feed(MANUAL_PACKET)) == 0 and p.counters.span_failures == 1
    # the same packet at 3600 deg/s (14.4 deg allowed) decodes to the manual's fields
    p = LD19Parser()
    pk = p.feed(MANUAL_PACKET_10HZ, host_ns=123)
    assert len(pk) == 1
    assert int(pk.speed_deg_s[0]) == 3600
    assert int(pk.start_cdeg[0]) == MANUAL_FIELDS["start"]
    assert int(pk.end_cdeg[0]) == MANUAL_FIELDS["end"]
    assert int(pk.timestamp_ms[0]) == MANUAL_FIELDS["timestamp"]
    assert (int(pk.distance_mm[0, 0]), int(pk.intensity[0, 0])) == MANUAL_FIELDS["first"]
    assert (int(pk.distance_mm[0, -1]), int(pk.intensity[0, -1])) == MANUAL_FIELDS["last"]
    # angles by float division: step = 1043 / 11 = 94.8181... (the SDK's integer step is 94)
    ang = pk.angles_cdeg()[0]
    assert ang[0] == 32427 and ang[-1] == pytest.approx(33470, abs=1e-9)
    assert ang[1] - ang[0] == pytest.approx(1043 / 11)
    assert p.counters.packets == 1 and p.counters.bytes_skipped == 0 and int(pk.host_ns[0]) == 123


def test_encoder_reproduces_the_manual_packet_byte_for_byte():
    dist = [224, 220, 217, 213, 211, 208, 205, 202, 199, 197, 194, 192]
    inten = [228, 226, 229, 227, 228, 233, 228, 226, 233, 229, 229, 229]
    raw = encode_packets(2152, 32427, 33470, np.array(dist), np.array(inten), 6714)
    assert raw == MANUAL_PACKET


def test_angle_wraps_inside_a_packet():
    ang = point_angles_cdeg(np.array([35900]), np.array([780]))[0]  # 359.00 -> 7.80 deg
    step = 880 / 11
    assert ang[0] == 35900 and ang[1] == pytest.approx(35900 + step)
    assert ang[2] == pytest.approx((35900 + 2 * step) % 36000)
    assert np.all((ang >= 0) & (ang < 36000))


@pytest.mark.parametrize("chunk", [1, 7, 46, 47, 48, 500, 100000])
def test_any_chunking_gives_the_same_packets(chunk):
    # 2100 packets: reads share 1024-packet output blocks, so earlier batches, kept
    # while later reads fill their block and the next, must come out intact
    raw, fields = _packets(2100)
    stream = b"\x00\x54\x2c\x54" + raw + b"\x54"
    p = LD19Parser()
    out = concat_packets([p.feed(stream[i : i + chunk]) for i in range(0, len(stream), chunk)])
    assert len(out) == 2100
    assert np.array_equal(out.distance_mm, fields["distance_mm"])
    assert np.array_equal(out.intensity, fields["intensity"])
    assert np.array_equal(out.timestamp_ms, fields["timestamp"])
    assert np.array_equal(out.stream_offset, 4 + 47 * np.arange(2100))
    c = p.counters
    assert c.bytes == len(stream)
    assert c.bytes == 47 * c.packets + c.bytes_skipped + p.pending_bytes
    assert p.pending_bytes == 1  # the trailing 0x54 may still start a packet


def test_scan_holds_packets_until_taken_and_says_where_angles_step_back():
    # 2100 packets in 100-byte reads, scanned and then taken at once: the packets feed
    # gives read by read, in one batch (held past the 1024-packet block they start in);
    # each scan says whether its packets' native angles step back (a turn ends there)
    raw, _ = _packets(2100)
    reads = [raw[i : i + 100] for i in range(0, len(raw), 100)]
    feeder, p = LD19Parser(), LD19Parser()
    fed = [feeder.feed(r) for r in reads]
    back, expected, angles = [], [], [-1]  # the native angles so far, start, end, start...
    for r, pk in zip(reads, fed, strict=True):
        assert p.scan(r) == len(pk) and p.unread == sum(len(f) for f in fed[: len(back) + 1])
        back.append(p.stepped_back)
        new = np.stack([pk.start_cdeg, pk.end_cdeg], axis=1).ravel().tolist()
        expected.append(any(b < a for a, b in itertools.pairwise(angles[-1:] + new)))
        angles += new
    got, want = p.take(), concat_packets(fed)
    assert back == expected and sum(back) == 55  # 2100 packets of 9.6 deg: 55 wraps
    for a, b in ((got.fields, want.fields), (got.distance_mm, want.distance_mm),
                 (got.intensity, want.intensity)):  # fmt: skip
        assert np.array_equal(a, b)
    assert len(p.take()) == 0 and p.unread == 0
    p.scan(raw[:470])
    p.resync()  # a reconnect drops the packets not taken
    assert p.unread == 0 and len(p.take()) == 0


def test_corrupted_packet_costs_one_packet_and_resyncs_by_one_byte():
    raw, fields = _packets(10)
    buf = bytearray(raw)
    buf[3 * 47 + 20] ^= 0xFF  # damage packet 3's payload
    p = LD19Parser()
    out = p.feed(bytes(buf))
    assert len(out) == 9
    assert np.array_equal(out.distance_mm, np.delete(fields["distance_mm"], 3, axis=0))
    assert p.counters.crc_failures == 1
    assert p.counters.lost_packets == 1 and p.counters.timestamp_gaps == 1
    assert out.lost_before.tolist() == [0, 0, 0, 1, 0, 0, 0, 0, 0]
    assert out.failures_before.tolist() == [0, 0, 0, 1, 0, 0, 0, 0, 0]


def test_header_bytes_inside_payload_and_a_packet_hidden_after_a_false_header():
    raw, fields = _packets(8, seed=2)
    fields["distance_mm"][:, 5] = 0x2C54  # 54 2C inside every payload
    raw = encode_packets(**fields)
    # a torn packet (header + 20 bytes) in front: the real packet starts inside its window
    stream = raw[:20] + raw
    p = LD19Parser()
    out = p.feed(stream)
    assert len(out) == 8 and np.array_equal(out.distance_mm, fields["distance_mm"])
    ref = ref_decode(stream)
    assert np.array_equal(packet_rows(out), ref_rows(ref.packets))
    assert p.counters.crc_failures == ref.crc_failures


def test_unknown_packet_types_are_skipped_and_counted():
    raw, fields = _packets(6)
    health = bytes([0x54, 0xE0, 0x01, 0x02, 0x03])
    info = bytes([0x54, 0x0F]) + bytes(20)
    stream = raw[:94] + health + raw[94:188] + info + raw[188:]
    p = LD19Parser()
    out = concat_packets([p.feed(stream[i : i + 33]) for i in range(0, len(stream), 33)])
    assert len(out) == 6 and np.array_equal(out.distance_mm, fields["distance_mm"])
    assert p.counters.unknown_packets == 2
    assert p.counters.bytes_skipped == len(health) + len(info)


def test_span_sanity_rejects_impossible_angles_even_with_a_good_crc():
    _raw, fields = _packets(5)
    fields["end"][2] = (fields["start"][2] + 9000) % 36000  # a 90 deg packet
    fields["start"][3] = 40000  # not an angle
    stream = encode_packets(**fields)
    p = LD19Parser()
    out = p.feed(stream)
    assert len(out) == 3
    assert p.counters.span_failures == 2 and p.counters.crc_failures == 0
    assert ref_decode(stream).span_failures == 2


def test_timestamp_wrap_is_not_a_gap():
    raw, _ = _packets(40, ts0=29950)
    p = LD19Parser()
    out = p.feed(raw)
    assert len(out) == 40
    assert out.timestamp_ms.min() < 100 and out.timestamp_ms.max() > 29900
    assert p.counters.timestamp_gaps == 0 and p.counters.lost_packets == 0


def test_state_is_per_instance():
    raw_a, fa = _packets(5, seed=1)
    raw_b, fb = _packets(5, seed=2)
    a, b = LD19Parser(), LD19Parser()
    out_a = [a.feed(raw_a[:30]), b.feed(raw_b[:50]), a.feed(raw_a[30:]), b.feed(raw_b[50:])]
    assert np.array_equal(concat_packets([out_a[0], out_a[2]]).distance_mm, fa["distance_mm"])
    assert np.array_equal(concat_packets([out_a[1], out_a[3]]).distance_mm, fb["distance_mm"])


def test_gap_counting_survives_packets_without_a_period():
    _, fields = _packets(12)
    fields["speed"][4] = 0  # a packet reporting speed 0: no period of its own (and, to
    fields["end"][4] = fields["start"][4]  # pass the SDK's span rule at 0 deg/s, no span)
    fields["end"][5] = fields["start"][5]  # and one with a zero span
    raw = encode_packets(**fields)
    stream = raw[: 47 * 6] + raw[47 * 7 :]  # packet 6 lost, right after them
    p = LD19Parser()
    out = concat_packets([p.feed(stream[i : i + 100]) for i in range(0, len(stream), 100)])
    assert len(out) == 11
    assert p.counters.lost_packets == 1 and p.counters.timestamp_gaps == 1
    assert out.lost_before.tolist() == [0] * 6 + [1] + [0] * 4


@pytest.mark.parametrize(
    ("span", "speed", "gap_ms", "lost"),
    [
        (1100, 6000, 3, 1),  # period 2 ms: 1.5 periods rounds to 2 (even): 1 lost
        (1100, 6000, 5, 1),  # 2.5 periods rounds to 2: 1 lost
        (1100, 6000, 7, 3),  # 3.5 periods rounds to 4: 3 lost
        # period 52/330 ms, gap 127132.5 periods exactly: in floating point
        # 20033 / (120 / 11 * 52 / 3600) = 127132.50000000001 would round up
        (52, 3600, 20033, 127131),
    ],
)
def test_lost_packets_at_exact_half_period_ties_round_to_even(span, speed, gap_ms, lost):
    # period = 12 steps of span / 11 at speed = 120 / 11 * span / speed ms
    raw = encode_packets(
        np.full(2, speed),
        np.array([0, 1000]),
        np.array([span, 1000 + span]),
        np.zeros((2, 12), int),
        np.zeros((2, 12), int),
        np.array([100, 100 + gap_ms]),
    )
    p = LD19Parser()
    out = p.feed(raw)
    assert out.lost_before.tolist() == [0, lost] == ref_decode(raw).lost_before
    assert p.counters.lost_packets == lost and p.counters.timestamp_gaps == 1


def _resync_against_control(first: bytes, second: bytes):
    """Feed ``first``, resync (or not: the control), feed ``second``."""
    synced, control = LD19Parser(), LD19Parser()
    for p in (synced, control):
        p.feed(first)
    tail = synced.pending_bytes
    synced.resync()
    assert synced.pending_bytes == 0
    got, ctl = synced.feed(second), control.feed(second)
    c = synced.counters
    assert c.bytes == len(first) + len(second) == 47 * c.packets + c.bytes_skipped
    assert got.stream_offset.tolist() == [len(first) + len(second) - 94 + 47 * j for j in (0, 1)]
    # packets 8 and 9 follow packet 4: a gap of 3 packets, forgotten after a resync
    assert ctl.lost_before.tolist() == [3, 0] and got.lost_before.tolist() == [0, 0]
    assert synced.counters.timestamp_gaps == 0
    return tail, synced, control, got, ctl


def test_resync_forgets_failures_not_yet_given_to_a_packet():
    raw, _ = _packets(10)
    bad = bytearray(raw[47 * 5 : 47 * 6])
    bad[20] ^= 0xFF  # packet 5 fails its CRC: examined, no packet after it yet
    tail, synced, _, got, ctl = _resync_against_control(
        raw[: 47 * 5] + bytes(bad) + b"\0", raw[47 * 8 :]
    )
    assert tail == 46 and synced.counters.crc_failures == 1  # the last 46 bytes are kept
    assert ctl.failures_before.tolist() == [1, 0] and got.failures_before.tolist() == [0, 0]


def test_resync_forgets_where_the_next_packet_was_expected():
    raw, _ = _packets(10)
    # packet 4 ends on a header byte whose type byte arrives after the resync:
    # 54 E0 (health) right after a packet is an unknown packet, unless resynced between
    first = raw[: 47 * 5] + b"\x54"
    second = b"\xe0" + bytes(46) + raw[47 * 8 :]
    tail, synced, control, _, _ = _resync_against_control(first, second)
    assert tail == 1
    assert control.counters.unknown_packets == 1 and synced.counters.unknown_packets == 0


def test_every_input_type_gives_the_same_packets_and_is_left_untouched():
    raw, fields = _packets(20)
    stream = b"\x54\x2c" + raw
    spread = np.zeros(2 * len(stream), np.uint8)
    spread[::2] = np.frombuffer(stream, np.uint8)  # a strided view holds the stream
    arr = np.frombuffer(stream, np.uint8).copy()
    inputs = [stream, bytearray(stream), memoryview(stream), arr, spread[::2]]
    for data in inputs:
        p = LD19Parser()
        out = concat_packets([p.feed(data[i : i + 100]) for i in range(0, len(stream), 100)])
        assert np.array_equal(out.distance_mm, fields["distance_mm"]), type(data)
        assert np.array_equal(out.stream_offset, 2 + 47 * np.arange(20))
    assert bytes(arr) == stream and bytes(spread[::2]) == stream
    assert len(_scan.signatures) == 1  # one compiled specialisation serves them all
