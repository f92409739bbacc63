"""Fuzzing the LD19 parser: arbitrary and mutated streams, any chunking.

Properties: never raises; every packet it yields is one whose 47 bytes pass the
CRC (checked with the bitwise reference, not the driver's table) and whose fields
are exactly those bytes; packets, offsets, every counter and the per-packet
``failures_before`` / ``lost_before`` equal those of the independent sequential
reference (``ld19_util.ref_decode``), the offsets and reasons of the packets with a
good CRC and an impossible field included; the byte accounting adds up; chunking does
not matter; after garbage it is back in sync within one packet of clean data.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ld19_util import (
    REF_MAX_SPEED,
    concat_packets,
    packet_rows,
    ref_crc8,
    ref_decode,
    ref_rows,
    ref_unpack,
)

from sensorbench.drivers.ld19_parser import LD19Packets, LD19Parser
from sensorbench.sim.emulator_ld19 import encode_packets

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clean_packets(draw, min_k: int = 1, max_k: int = 6) -> bytes:
    """Well-formed packets with arbitrary point values (``54 2C`` may occur inside)."""
    k = draw(st.integers(min_k, max_k))
    start = np.array(draw(st.lists(st.integers(0, 35999), min_size=k, max_size=k)))
    speed = draw(st.lists(st.integers(500, REF_MAX_SPEED), min_size=k, max_size=k))
    # a span the vendor SDK keeps at that speed: whole degrees x 250 <= speed
    span = np.array([draw(st.integers(0, (s // 250 - 1) * 100)) for s in speed])
    dist = draw(st.lists(st.integers(0, 65535), min_size=12 * k, max_size=12 * k))
    inten = draw(st.lists(st.integers(0, 255), min_size=12 * k, max_size=12 * k))
    ts = draw(st.lists(st.integers(0, 29999), min_size=k, max_size=k))
    return encode_packets(
        np.array(speed),
        start,
        (start + span) % 36000,
        np.array(dist),
        np.array(inten),
        np.array(ts),
    )


@st.composite
def impossible_packet(draw) -> bytes:
    """One packet with a good CRC and one impossible field: timestamp >= 30000 ms,
    speed above the limit, an angle >= 360 deg or a span above 36 deg."""
    what = draw(st.sampled_from(["timestamp", "speed", "angle", "span"]))
    speed, start, end, ts = 3600, 1000, 1880, 100
    if what == "timestamp":
        ts = draw(st.integers(30000, 65535))
    elif what == "speed":
        speed = draw(st.integers(REF_MAX_SPEED + 1, 65535))
    elif what == "angle":
        start = draw(st.integers(36000, 65535))
    else:
        end = (start + draw(st.integers(3601, 35999))) % 36000
    dist = draw(st.lists(st.integers(0, 65535), min_size=12, max_size=12))
    return encode_packets(
        np.array([speed]), np.array([start]), np.array([end]), np.array(dist),
        np.zeros(12, np.uint8), np.array([ts]),
    )  # fmt: skip


@st.composite
def mutated(draw) -> bytes:
    """Clean packets with flips, insertions, deletions and headers (any type) sprinkled in."""
    buf = bytearray(draw(clean_packets(1, 8)))
    for _ in range(draw(st.integers(0, 12))):
        ops = ["flip", "insert", "delete", "header", "other_type", "impossible"]
        op = draw(st.sampled_from(ops))
        pos = draw(st.integers(0, len(buf)))
        if op == "flip" and pos < len(buf):
            buf[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=50))
        elif op == "delete" and pos < len(buf):
            del buf[pos : pos + draw(st.integers(1, 50))]
        elif op == "header":
            buf[pos:pos] = b"\x54\x2c"
        elif op == "other_type":  # e.g. 54 E0 health: an unknown packet after a good one
            buf[pos:pos] = bytes([0x54, draw(st.integers(0, 255))])
        elif op == "impossible":  # a good CRC on an impossible timestamp, speed or angle
            buf[pos:pos] = draw(impossible_packet())
    return bytes(buf)


def _feed_chunked(stream: bytes, cuts: list[int]) -> tuple[LD19Parser, LD19Packets]:
    """Feed ``stream`` in reads cut at ``cuts``; each read's host time is its start offset."""
    p = LD19Parser()
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    parts = [p.feed(stream[a:b], host_ns=a) for a, b in itertools.pairwise(bounds)]
    out = concat_packets(parts)
    # a packet comes out of the read that brought its last byte
    last_byte = out.stream_offset + 46
    read_start = np.asarray(bounds)[np.searchsorted(bounds, last_byte, side="right") - 1]
    assert np.array_equal(out.host_ns, read_start)
    return p, out


def _check_invariants(stream: bytes, p: LD19Parser, out: LD19Packets) -> None:
    c = p.counters
    assert c.bytes == len(stream)
    assert c.bytes == 47 * c.packets + c.bytes_skipped + p.pending_bytes
    assert len(out) == c.packets
    for row, off in zip(packet_rows(out), out.stream_offset.tolist(), strict=True):
        raw = stream[off : off + 47]
        assert ref_crc8(raw) == 0  # never a point from a packet that failed its CRC
        ref = ref_unpack(off, raw)
        assert row.tolist() == [ref.speed, ref.start, ref.end, ref.timestamp, *ref.distance,
                                *ref.intensity]  # fmt: skip
    ref = ref_decode(stream)
    assert np.array_equal(packet_rows(out), ref_rows(ref.packets))
    assert out.stream_offset.tolist() == [q.offset for q in ref.packets]
    assert c.crc_failures == ref.crc_failures
    assert c.span_failures == ref.span_failures
    assert c.timestamp_failures == ref.timestamp_failures
    assert c.speed_failures == ref.speed_failures
    assert p.rejected == ref.rejected
    assert c.unknown_packets == ref.unknown_packets
    assert out.failures_before.tolist() == ref.failures_before
    assert out.lost_before.tolist() == ref.lost_before
    assert c.lost_packets == sum(ref.lost_before)
    assert c.timestamp_gaps == sum(lost > 0 for lost in ref.lost_before)


def _prop_arbitrary(data: bytes, cuts: list[int]) -> None:
    p, out = _feed_chunked(data, cuts)
    _check_invariants(data, p, out)


def _prop_mutated(data: bytes, cuts: list[int]) -> None:
    p, out = _feed_chunked(data, cuts)
    _check_invariants(data, p, out)
    whole = LD19Parser().feed(data)
    assert np.array_equal(packet_rows(whole), packet_rows(out))  # chunking does not matter


def _prop_resync(garbage: bytes, clean: bytes, cuts: list[int]) -> None:
    stream = garbage + clean
    p, out = _feed_chunked(stream, cuts)
    _check_invariants(stream, p, out)
    k = len(clean) // 47
    expected = LD19Parser().feed(clean)
    got = out.stream_offset - len(garbage)
    # every clean packet from the second on is decoded (the first may hide under a
    # false header that started in the garbage)
    for j in range(1, k):
        assert 47 * j in got.tolist()
    tail = packet_rows(out)[got >= 47]
    assert np.array_equal(tail, packet_rows(expected)[1:])


cuts_st = st.lists(st.integers(0, 2000), max_size=12)


@FAST
@given(st.binary(max_size=1500), cuts_st)
def test_arbitrary_bytes_never_raise_and_yield_only_crc_valid_packets(data, cuts):
    _prop_arbitrary(data, cuts)


@FAST
@given(mutated(), cuts_st)
def test_mutated_streams(data, cuts):
    _prop_mutated(data, cuts)


@FAST
@given(st.binary(max_size=300), clean_packets(2, 5), cuts_st)
def test_back_in_sync_within_one_packet_of_clean_data(garbage, clean, cuts):
    _prop_resync(garbage, clean, cuts)


@pytest.mark.slow
@LONG
@given(st.binary(max_size=5000), cuts_st)
def test_arbitrary_bytes_long(data, cuts):
    _prop_arbitrary(data, cuts)


@pytest.mark.slow
@LONG
@given(mutated(), cuts_st)
def test_mutated_streams_long(data, cuts):
    _prop_mutated(data, cuts)


@pytest.mark.slow
@LONG
@given(st.binary(max_size=1000), clean_packets(2, 8), cuts_st)
def test_back_in_sync_long(garbage, clean, cuts):
    _prop_resync(garbage, clean, cuts)
