"""The pod stream parser: wraps, sequence gaps, corruption, resets; counters vs injected faults.

Streams come from the emulator (through a real pty where faults are injected at
the link) and the expected values from the emulator's truth record.
"""

from __future__ import annotations

import binascii
import itertools
import math
import struct
import time
from dataclasses import fields

import numpy as np
import pods_util
import pytest
from capture_util import damaged as damaged_frames
from hypothesis import given, settings
from hypothesis import strategies as st

from sensorbench.drivers.pods_parser import MAX_CSV_LINE, PodFrames, PodStreamParser
from sensorbench.drivers.pods_protocol import SYNC, make_flags
from sensorbench.errors import DriverError
from sensorbench.sim.emulator_pods import PodEmulator, encode_binary, encode_csv
from sensorbench.sim.pty import Faults

SAMPLES = pods_util.make_samples(n=1200, seed=3)
RAW = dict(
    seq=np.arange(1200) % 65536,
    t_us=SAMPLES.mcu_time_us % 2**32,
    counts_raw=SAMPLES.counts % 2**16,
)
STREAM, FLEN = encode_binary(
    RAW["seq"],
    RAW["t_us"],
    RAW["counts_raw"],
    16,
    SAMPLES.yaw_rate_rad_s.astype(np.float32),
    SAMPLES.yaw_rad.astype(np.float32),
)


concat = PodFrames.concat


def feed_chunks(parser: PodStreamParser, data: bytes, sizes: list[int]) -> PodFrames:
    out, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        out.append(parser.feed(data[i : i + n]))
        i, k = i + n, k + 1
    return concat(out)


def test_unwraps_counters_and_clock_across_their_wraps() -> None:
    p = PodStreamParser(3, 16, "binary")
    f = p.feed(STREAM)
    assert len(f) == 1200 and p.stats.crc_errors == 0 and p.stats.lost_frames == 0
    np.testing.assert_array_equal(f.seq, np.arange(1200))
    np.testing.assert_array_equal(f.counts, SAMPLES.counts)  # crosses ±2**15 several times
    assert (np.abs(SAMPLES.counts) > 2**16).any()
    np.testing.assert_array_equal(f.device_ns, SAMPLES.mcu_time_us * 1000)
    np.testing.assert_array_equal(f.yaw, SAMPLES.yaw_rad.astype(np.float32))
    assert p.pending_bytes == 0 and p.stats.bytes_skipped == 0


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(1, 60), min_size=1, max_size=12))
def test_any_chunking_gives_the_same_frames(sizes: list[int]) -> None:
    f = feed_chunks(PodStreamParser(3, 16), STREAM[: 60 * FLEN], sizes)
    np.testing.assert_array_equal(f.counts, SAMPLES.counts[:60])
    np.testing.assert_array_equal(f.seq, np.arange(60))


def test_sequence_gaps_count_lost_frames() -> None:
    rng = np.random.default_rng(7)
    removed = np.sort(rng.choice(np.arange(1, 1199), size=37, replace=False))
    keep = np.setdiff1d(np.arange(1200), removed)
    data = b"".join(STREAM[i * FLEN : (i + 1) * FLEN] for i in keep)
    p = PodStreamParser(3, 16)
    f = p.feed(data)
    assert p.stats.lost_frames == 37
    np.testing.assert_array_equal(f.seq, keep)
    np.testing.assert_array_equal(f.counts, SAMPLES.counts[keep])


def test_a_gap_longer_than_the_sequence_wrap_is_counted_modulo_65536() -> None:
    # documented limit: seq is 16 bit; 70000 frames missing look like 70000 - 65536
    seq = np.array([5, 5 + 70000]) % 65536
    data, _ = encode_binary(seq, np.array([0, 350_000_000]), np.zeros((2, 3), np.int64), 16)
    p = PodStreamParser(3, 16)
    p.feed(data)
    assert p.stats.lost_frames == 70000 - 65536 - 1


def _run_faulty_link(faults: Faults, variant: str = "binary", seed: int = 11):
    s = pods_util.make_samples(n=2400, seed=seed, imu=True)
    with PodEmulator(s, variant=variant, speed=40.0, faults=faults, seed=seed) as em:
        ser = pods_util.open_then_start(em)
        stream = pods_util.drain(ser, em)
        ser.close()
    return s, em.truth(), em.port.stats, stream


@pytest.mark.parametrize(
    "faults", [Faults(corrupt_rate=2e-3), Faults(drop_rate=2e-3)], ids=["corrupt", "drop"]
)
def test_link_faults_lose_exactly_the_damaged_frames(faults: Faults) -> None:
    s, truth, stats, stream = _run_faulty_link(faults)
    offsets = stats.corrupted_offsets or stats.dropped_offsets
    damaged = damaged_frames(truth.offset, truth.length, truth.delivered, offsets)
    assert 50 < damaged.sum() < 400  # ~2400 frames × 26 B × 2e-3 ≈ 125 hit frames
    p = PodStreamParser(3, 16)
    f = feed_chunks(p, stream, [97, 4096, 13])
    intact = truth.index[~damaged]
    np.testing.assert_array_equal(f.seq, intact)  # every intact frame, nothing else
    np.testing.assert_array_equal(f.counts, s.counts[intact])
    np.testing.assert_array_equal(f.device_ns, s.mcu_time_us[intact] * 1000)
    between = damaged & (truth.index > intact[0]) & (truth.index < intact[-1])
    assert p.stats.lost_frames == int(between.sum())
    if stats.corrupted_offsets:
        # every AA 55 that does not start or lie inside an intact frame is an error;
        # candidates in the last 300 bytes may legitimately wait in the tail
        buf = np.frombuffer(stream, np.uint8)
        cand = np.flatnonzero((buf[:-1] == 0xAA) & (buf[1:] == 0x55))
        starts, ends = truth.offset[~damaged], truth.offset[~damaged] + truth.length[~damaged]
        j = np.searchsorted(starts, cand, side="right") - 1
        stray = cand[~((j >= 0) & (cand < ends[np.maximum(j, 0)]))]
        assert int((stray < len(stream) - 300).sum()) <= p.stats.crc_errors <= stray.size
        # a hit frame whose first 4 bytes (sync, len, flags) are intact fails its CRC
        body_hit = damaged & ~_damaged_after(truth, offsets, 4)
        early = truth.offset < len(stream) - 300
        assert p.stats.crc_errors >= int((body_hit & early).sum())


def _damaged_after(truth, offsets: list[int], skip: int) -> np.ndarray:
    """Frames hit somewhere in their first ``skip`` bytes."""
    offs = np.sort(np.asarray(offsets))
    lo = np.searchsorted(offs, truth.offset, side="left")
    hi = np.searchsorted(offs, truth.offset + skip, side="left")
    return truth.delivered & (hi > lo)


def test_stall_frames_are_counted_lost_in_csv() -> None:
    # at most 50 counts per frame: a ~400-frame stall stays under half the 16-bit range
    s = pods_util.make_samples(n=3000, seed=5, step=50, drift=(0, 0, 0))
    with PodEmulator(s, variant="csv", speed=10.0) as em:
        ser = pods_util.open_then_start(em)
        time.sleep(0.3)
        em.stall(0.2)
        stream = pods_util.drain(ser, em)
        ser.close()
    truth = em.truth()
    p = PodStreamParser(3, 16, "csv")
    f = feed_chunks(p, stream, [333])
    assert (~truth.delivered).sum() > 100
    assert p.stats.lost_frames == int((~truth.delivered).sum())
    np.testing.assert_array_equal(f.seq, truth.index[truth.delivered])
    np.testing.assert_array_equal(f.counts, s.counts[truth.index[truth.delivered]])
    np.testing.assert_allclose(f.yaw_rate, truth.yaw_rate[truth.delivered], rtol=1e-6)


def test_csv_broken_lines_are_counted_and_skipped() -> None:
    lines = encode_csv(RAW["seq"][:10], RAW["t_us"][:10], RAW["counts_raw"][:10], 16)
    bad = [
        b"# pods firmware 1.2\n",  # banner: skipped, not an error
        b"12,34,1,2\n",  # too few fields
        b"12,34,1,2,x\n",  # not a number
        b"70000,34,1,2,3\n",  # seq out of range
        b"1,2,3,4,5,6,7,8\n",  # too many fields
        b"\xff\xfe garbage\n",
    ]
    stream = b"".join(lines[:3]) + b"".join(bad) + lines[3].rstrip(b"\n") + b"\r\n"
    stream += lines[4][:5] + lines[5] + b"".join(lines[6:])  # a line cut short merges
    p = PodStreamParser(3, 16, "csv")
    f = feed_chunks(p, stream, [7])
    assert p.stats.crc_errors == 6
    assert f.seq.tolist() == [0, 1, 2, 3, 6, 7, 8, 9]
    assert p.stats.lost_frames == 2
    np.testing.assert_array_equal(f.counts, SAMPLES.counts[[0, 1, 2, 3, 6, 7, 8, 9]])
    assert np.isnan(f.yaw).all()


def test_mcu_reset_keeps_counts_continuous() -> None:
    first = slice(0, 100)
    t_mid = 2_000_000_000 + np.arange(100) * 5000  # far from the 32-bit wrap
    a, _ = encode_binary(RAW["seq"][first], t_mid, RAW["counts_raw"][first], 16)
    # after a reset the MCU starts again: seq 0, t_us small, counters from 0
    counts_b = np.array([[0, 0, 0], [5, -5, 7], [9, -9, 2]])
    b, _ = encode_binary(np.arange(3), np.array([1000, 6000, 11000]), counts_b % 2**16, 16)
    p = PodStreamParser(3, 16)
    f = p.feed(a + b)
    assert p.stats.resets == 1 and p.stats.lost_frames == 0
    np.testing.assert_array_equal(f.counts[100:], SAMPLES.counts[99] + counts_b)
    assert f.device_ns[100:].tolist() == [1_000_000, 6_000_000, 11_000_000]
    assert f.seq.tolist() == list(range(103))
    assert np.flatnonzero(f.new_epoch).tolist() == [100]


def test_duplicates_and_layout_mismatch() -> None:
    p = PodStreamParser(3, 16)
    f = p.feed(STREAM[: FLEN * 3] + STREAM[FLEN * 2 : FLEN * 4])
    assert p.stats.duplicates == 1 and f.seq.tolist() == [0, 1, 2, 3]
    wide, _ = encode_binary(RAW["seq"][:5], RAW["t_us"][:5], RAW["counts_raw"][:5], 32)
    p = PodStreamParser(3, 16)
    assert len(p.feed(wide)) == 0 and p.stats.layout_mismatch == 5 and p.stats.crc_errors == 0


def _frame(seq: int, t_us: int, counts: list[int], imu: tuple | None, errors: list[int] | None,
           bits: int = 16) -> bytes:
    """One binary frame as the MCU writes it (the error block too, which the emulator's
    encoder does not write)."""
    payload = struct.pack(f"<BHI{len(counts)}{'H' if bits == 16 else 'I'}",
                          make_flags(len(counts), bits, imu is not None, errors is not None),
                          seq % 2**16, t_us % 2**32, *(c % 2**bits for c in counts))
    payload += struct.pack("<ff", *imu) if imu is not None else b""
    payload += struct.pack(f"<{len(errors)}H", *errors) if errors is not None else b""
    body = bytes([len(payload)]) + payload
    return SYNC + body + struct.pack("<H", binascii.crc_hqx(body, 0xFFFF))  # fmt: skip


def test_frames_read_one_at_a_time_decode_as_the_whole_stream() -> None:
    """The scalar path (reads of one or a few whole frames, or frames then a partial one)
    gives the vectorised path's frames and counters, across wraps,
    gaps, a repeat, an MCU reset, error blocks (wrapping), non-finite IMU values, a frame
    of another layout and a damaged one."""
    frames = [STREAM[i * FLEN : (i + 1) * FLEN] for i in range(300)]
    frames += [frames[-1]]  # a repeat
    c = [int(x) for x in SAMPLES.counts[299]]
    for k in range(300, 340):  # error blocks, their 16-bit counts wrapping; a gap at 320
        if k != 320:
            errs = [(65530 + k) % 2**16, k % 7, 3, (k * 1000) % 2**16]
            frames.append(_frame(k, 2**32 - 100_000 + 5000 * k, [x + 40 * k for x in c],
                                 (0.5, 1.0) if k % 2 else None, errs))  # fmt: skip
    frames += [_frame(340, 1, c, (float("nan"), 1.0), None), _frame(341, 2, c, None, None, 32)]
    frames += [_frame(342, 50_000, c, None, None)]  # the clock went back: a reset
    bad = bytearray(_frame(343, 55_000, c, None, None))
    bad[8] ^= 1
    frames += [bytes(bad), _frame(344, 60_000, [x + 3 for x in c], None, [1, 1, 1, 1])]
    whole, one, few, cut = (PodStreamParser(3, 16) for _ in range(4))
    a = whole.feed(b"".join(frames))
    b = concat([one.feed(f) for f in frames])
    sizes = [1, 2, 3, 5, 4]  # reads of a few whole frames, as a loaded reader gets them
    starts = np.cumsum([0] + [sizes[i % len(sizes)] for i in range(len(frames))])
    c = concat([few.feed(b"".join(frames[i:j])) for i, j in itertools.pairwise(starts)
                if i < len(frames)])  # fmt: skip
    d = feed_chunks(cut, b"".join(frames), [2 * FLEN + 7, FLEN - 7, 3 * FLEN + 1, 11])
    for other in (b, c, d):
        for f in fields(PodFrames):
            np.testing.assert_array_equal(getattr(other, f.name), getattr(a, f.name), f.name)
    assert one.stats == whole.stats == few.stats == cut.stats
    assert whole.stats.duplicates == 1 and whole.stats.resets == 1 and whole.stats.crc_errors == 1
    # lost: 320 and the damaged 343 (340 and 341, dropped, sit before the reset)
    assert whole.stats.lost_frames == 2 and whole.stats.overruns > 65536
    assert whole.stats.non_finite == 1 and whole.stats.layout_mismatch == 1


def test_bad_parser_configuration_is_refused() -> None:
    with pytest.raises(DriverError):
        PodStreamParser(0)
    with pytest.raises(DriverError):
        PodStreamParser(3, 24)
    with pytest.raises(DriverError):
        PodStreamParser(3, 16, "json")


def test_csv_lines_with_infinite_imu_values_are_dropped_as_binary_frames_are() -> None:
    """A session holds finite IMU values or none: an ``inf`` (or a float that overflows to
    it) drops the line as a binary frame's is dropped, its seq gap counting it lost."""
    lines = encode_csv(RAW["seq"][:6], RAW["t_us"][:6], RAW["counts_raw"][:6], 16,
                       np.full(6, 0.5), np.full(6, -1.25))  # fmt: skip
    lines[2] = lines[2].replace(b",0.5,", b",inf,")
    lines[4] = lines[4].replace(b",-1.25", b",-1e999")
    p = PodStreamParser(3, 16, "csv")
    f = p.feed(b"".join(lines))
    assert f.seq.tolist() == [0, 1, 3, 5]
    assert (f.yaw_rate == 0.5).all() and (f.yaw == -1.25).all()
    assert p.stats.non_finite == 2 and p.stats.lost_frames == 2 and p.stats.crc_errors == 0


@pytest.mark.parametrize("read", [1, 7, 100, 257, 4096])
def test_a_csv_line_over_the_limit_is_one_error_in_any_reads(read: int) -> None:
    """A run of more than MAX_CSV_LINE bytes without a newline is one bad line, the same in
    any reads: its rest, after a read cut it, is not taken for a line of its own."""
    lines = encode_csv(RAW["seq"][:4], RAW["t_us"][:4], RAW["counts_raw"][:4], 16)
    noise = b"\x00" * MAX_CSV_LINE + b"," + lines[1]  # line 1's newline-less start was noise
    data = lines[0] + noise + lines[2] + b"x" * 300 + b"\r\n" + lines[3]
    p = PodStreamParser(3, 16, "csv")
    f = feed_chunks(p, data, [read])
    assert f.seq.tolist() == [0, 2, 3] and p.stats.lost_frames == 1
    assert p.stats.crc_errors == 2 and p.stats.bytes_skipped == len(noise) + 302


_STATE = ("_tail", "_cut", "_prev_seq", "_prev_t", "_prev_counts", "_t_unwrapped",
          "_seq_unwrapped", "_cum", "_prev_errors", "_cum_errors")  # fmt: skip
_PIECE = st.one_of(  # a frame stepping (seq, t_us, counts) from the last, or stray bytes
    st.tuples(st.integers(0, 3), st.sampled_from([0, 5000, 2**31 + 7, 2**32 - 5000]),
              st.integers(-2**15, 2**15), st.booleans(), st.integers(0, 2**16 - 1),
              st.sampled_from([16, 16, 32]), st.sampled_from([0.5, math.nan, math.inf])),
    st.sampled_from([b"\xaa", b"\xaa\x55", b"\xaa\x55\x0d\x30", b"\xaa\x55\xff\x30", b"\x00"]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECE, max_size=40), st.lists(st.integers(1, 80), min_size=1, max_size=9))
def test_any_reads_decode_as_the_whole_stream(pieces: list, sizes: list[int]) -> None:
    """Frames stepping their seq (repeats, gaps), clock (wraps, restarts) and counters
    (by up to half their range, either way), with or without IMU values (finite or not)
    and error blocks, of the configured layout or not, among stray bytes: any reads of them
    give the frames, counters and state of one read of the whole (scalar and vectorised)."""
    data, seq, t, c, e = [], 9, 2**32 - 20_000, [0, 0, 0], 0
    for p in pieces:
        if isinstance(p, bytes):
            data.append(p)
            continue
        seq, t, c, e = seq + p[0], t + p[1], [x + p[2] * (j - 1) for j, x in enumerate(c)], e + p[4]
        errors = [e % 2**16, 1, 0, e % 7] if e % 2 else None
        data.append(_frame(seq, t, c, (0.25, p[6]) if p[3] else None, errors, p[5]))
    stream = b"".join(data)
    _assert_reads_equal_whole(stream, sizes, "binary")


def _assert_reads_equal_whole(stream: bytes, sizes: list[int], variant: str) -> None:
    """``stream`` fed in reads of ``sizes`` gives one read's frames, counters and state."""
    whole, parts = PodStreamParser(3, 16, variant), PodStreamParser(3, 16, variant)
    a = whole.feed(stream)
    b = feed_chunks(parts, stream, sizes) if stream else a
    for f in fields(PodFrames):
        np.testing.assert_array_equal(getattr(b, f.name), getattr(a, f.name), f.name)
    assert parts.stats == whole.stats
    for name in _STATE:
        assert np.array_equal(getattr(parts, name), getattr(whole, name)), name


_LINE = st.one_of(  # CSV lines: valid (IMU fields, CRLF), non-finite, over the limit, noise
    st.builds(lambda s, c, imu, end: f"{s},{5000 * s},{c},-{c},7{imu}{end}".encode(),
              st.integers(0, 70000), st.integers(0, 40000),
              st.sampled_from(["", ",0.5,1.25", ",nan,nan", ",inf,0", ",0.5"]),
              st.sampled_from(["\n", "\r\n"])),
    st.builds(lambda n: b"9," * n + b"\n", st.integers(100, 200)),
    st.sampled_from([b"# banner\n", b"\n", b"\r\n", b"x,1\n", b"\xff"]),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=30), st.lists(st.integers(1, 300), min_size=1, max_size=9))
def test_any_reads_decode_csv_as_the_whole_stream(lines: list[bytes], sizes: list[int]) -> None:
    """CSV lines in any reads give the frames, counters and state of one read of the whole."""
    stream = b"".join(lines)
    _assert_reads_equal_whole(stream, sizes, "csv")


def test_csv_seq_and_time_printed_signed_read_as_unsigned() -> None:
    """printf's %d of a uint16 seq and %ld of a uint32 t_us (an AVR's int and long) print
    them negative past half their range: read as the counters are, modulo their width."""
    k = np.arange(32_760, 32_780)
    t_us = (2**31 - 50_000 + 5000 * (k - k[0])) % 2**32
    signed = [np.where(v >= 2**(b - 1), v - 2**b, v) for v, b in ((k, 16), (t_us, 32))]
    p = PodStreamParser(3, 16, "csv")
    f = p.feed(b"".join(encode_csv(*signed, RAW["counts_raw"][:20], 16)))
    assert (signed[0] < 0).any() and (signed[1] < 0).any() and p.stats.crc_errors == 0
    np.testing.assert_array_equal(f.seq, k)
    np.testing.assert_array_equal(f.device_ns, (2**31 - 50_000 + 5000 * (k - k[0])) * 1000)
    np.testing.assert_array_equal(f.counts, SAMPLES.counts[:20])
