"""The pod-MCU emulator against an independent decoder written from docs/PROTOCOLS.md.

Nothing here uses the driver's parser or protocol module to check the emulator: the
CRC is computed bit by bit and frames are unpacked with ``struct`` from the byte
table (the protocol module's CRC is itself checked against that bitwise CRC).
"""

from __future__ import annotations

import binascii
import struct
import time

import numpy as np
import pods_util
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sensorbench.drivers import pods_protocol as proto
from sensorbench.errors import SimError
from sensorbench.sim.emulator_pods import PodEmulator, encode_binary


def crc16_bitwise(data: bytes) -> int:
    """CRC-16/CCITT-FALSE from its definition: poly 0x1021, init 0xFFFF, MSB first."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def decode_binary(stream: bytes) -> list[dict]:
    """Frames per the byte table (offsets 0..3+len+2); raises on any bad frame."""
    frames, i = [], 0
    while i < len(stream):
        assert stream[i : i + 2] == b"\xaa\x55", f"no sync at {i}"
        length, flags = stream[i + 2], stream[i + 3]
        n, wide, imu = flags >> 4, bool(flags & 2), bool(flags & 1)
        assert flags & 0x0C == 0
        w = 4 if wide else 2
        assert length == 7 + n * w + (8 if imu else 0)
        body = stream[i + 2 : i + 3 + length]
        (crc,) = struct.unpack_from("<H", stream, i + 3 + length)
        assert crc == crc16_bitwise(body)
        seq, t_us = struct.unpack_from("<HI", stream, i + 4)
        counts = struct.unpack_from(f"<{n}{'I' if wide else 'H'}", stream, i + 10)
        yaw_rate = yaw = None
        if imu:
            yaw_rate, yaw = struct.unpack_from("<ff", stream, i + 10 + n * w)
        frames.append(dict(seq=seq, t_us=t_us, counts=counts, yaw_rate=yaw_rate, yaw=yaw))
        i += 3 + length + 2
    return frames


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_the_protocol_crc_is_binascii_crc_hqx_from_0xffff(data: bytes) -> None:
    # drivers/pods_protocol.py computes the CRC with binascii.crc_hqx(data, 0xFFFF):
    # the same CRC as the definition, byte for byte, scalar and row-wise
    assert binascii.crc_hqx(data, proto.CRC16_INIT) == crc16_bitwise(data)
    rows = np.frombuffer(data * 3, np.uint8).reshape(3, len(data))
    assert proto.crc16_rows(rows).tolist() == [crc16_bitwise(data)] * 3


def test_crc_check_value_and_documented_example() -> None:
    assert crc16_bitwise(b"123456789") == 0x29B1
    data, length = encode_binary(
        np.array([258]), np.array([1_000_000]), np.array([[100, 65534, 40000]]), 16
    )
    assert length == 18
    assert data == bytes.fromhex("aa550d30020140420f006400feff409ce8f7")
    data, _ = encode_binary(
        np.array([258]),
        np.array([1_000_000]),
        np.array([[100, 65534, 40000]]),
        16,
        np.array([0.5], np.float32),
        np.array([-1.25], np.float32),
    )
    assert data == bytes.fromhex("aa55153102 0140420f00 6400feff409c 0000003f0000a0bf 9515")


@pytest.mark.parametrize("bits", [16, 32])
def test_binary_frames_on_the_pty_match_the_tables(bits: int) -> None:
    s = pods_util.make_samples(n=1500)
    with PodEmulator(s, variant="binary", counter_bits=bits, speed=40.0) as em:
        ser = pods_util.open_then_start(em)
        stream = pods_util.drain(ser, em)
        ser.close()
    frames = decode_binary(stream)
    n = s.t_s.size
    assert len(frames) == n
    idx = np.arange(n)
    assert [f["seq"] for f in frames] == (idx % 65536).tolist()
    assert [f["t_us"] for f in frames] == (s.mcu_time_us % 2**32).tolist()
    got = np.array([f["counts"] for f in frames])
    np.testing.assert_array_equal(got, s.counts % 2**bits)
    # the run crosses the 16-bit wrap and the 32-bit clock wrap
    assert (s.mcu_time_us >= 2**32).any() and (s.mcu_time_us < 2**32).any()
    np.testing.assert_array_equal(
        np.array([f["yaw_rate"] for f in frames], np.float32), s.yaw_rate_rad_s.astype(np.float32)
    )
    np.testing.assert_array_equal(
        np.array([f["yaw"] for f in frames], np.float32), s.yaw_rad.astype(np.float32)
    )
    truth = em.truth()
    assert truth.delivered.all() and truth.index.tolist() == idx.tolist()
    assert truth.offset.tolist() == np.cumsum(np.r_[0, truth.length[:-1]]).tolist()


def test_binary_without_imu_has_the_short_layout() -> None:
    s = pods_util.make_samples(n=300, imu=False)
    with PodEmulator(s, speed=40.0) as em:
        ser = pods_util.open_then_start(em)
        stream = pods_util.drain(ser, em)
        ser.close()
    assert len(stream) == 300 * 18
    assert all(f["yaw"] is None for f in decode_binary(stream))


def test_csv_lines_on_the_pty_match_the_grammar() -> None:
    s = pods_util.make_samples(n=800)
    with PodEmulator(s, variant="csv", speed=40.0) as em:
        ser = pods_util.open_then_start(em)
        stream = pods_util.drain(ser, em)
        ser.close()
    lines = stream.decode("ascii").split("\n")
    assert lines[-1] == ""
    rows = [line.split(",") for line in lines[:-1]]
    assert len(rows) == 800 and all(len(r) == 7 for r in rows)
    seq = np.array([int(r[0]) for r in rows])
    t_us = np.array([int(r[1]) for r in rows])
    counts = np.array([[int(v) for v in r[2:5]] for r in rows])
    assert seq.tolist() == list(range(800))
    np.testing.assert_array_equal(t_us, s.mcu_time_us % 2**32)
    # printed as int16: the same value modulo 2**16, within the signed range
    assert counts.min() >= -(2**15) and counts.max() < 2**15
    np.testing.assert_array_equal(counts % 2**16, s.counts % 2**16)
    yaw_rate = np.array([float(r[5]) for r in rows])
    np.testing.assert_allclose(yaw_rate, s.yaw_rate_rad_s, rtol=1e-6, atol=1e-7)


def test_stall_loses_frames_and_truth_says_which() -> None:
    s = pods_util.make_samples(n=2000, imu=False)
    sends: list[tuple[float, float, int]] = []  # host s before and after, frames
    with PodEmulator(s, speed=10.0) as em:
        send = em._send

        def timed(i: int, j: int) -> None:
            t = time.monotonic()
            send(i, j)
            sends.append((t, time.monotonic(), j - i))

        em._send = timed  # type: ignore[method-assign]
        ser = pods_util.open_then_start(em)
        time.sleep(0.3)
        a = time.monotonic()
        em.stall(0.2)
        b = time.monotonic()
        stream = pods_util.drain(ser, em)
        ser.close()
    truth = em.truth()
    frames = decode_binary(stream)
    lost = int((~truth.delivered).sum())
    # lost: what the emulator wrote in the 0.2 s window (it starts between a and b), ~400
    # frames at 10x and 200 Hz when its thread keeps time; a loaded host delays its writes,
    # so the window is judged on the writes' measured times
    inside = sum(n for t0, t1, n in sends if t0 >= b and t1 < a + 0.2)
    touching = sum(n for t0, t1, n in sends if t1 >= a and t0 < b + 0.2)
    assert 0 < inside <= lost <= touching, (inside, lost, touching)
    assert [f["seq"] for f in frames] == truth.seq[truth.delivered].tolist()


def test_bad_arguments_are_refused() -> None:
    s = pods_util.make_samples(n=10)
    with pytest.raises(SimError):
        PodEmulator(s, variant="json")
    with pytest.raises(SimError):
        PodEmulator(s, counter_bits=24)


def test_loop_continues_time_sequence_and_counts() -> None:
    s = pods_util.make_samples(n=200, imu=False)
    em = PodEmulator(s, speed=20.0, loop=True)
    ser = pods_util.open_then_start(em)
    stream = b""
    end = time.monotonic() + 0.15  # 3 simulated s at 20x: 600 frames, three passes
    while time.monotonic() < end:
        stream += ser.read(65536)
    ser.close()
    em.stop()
    frames = decode_binary(stream[: len(stream) // 18 * 18])
    assert len(frames) > 450
    seq = np.array([f["seq"] for f in frames])
    assert seq.tolist() == list(range(len(frames)))
    counts = np.array([f["counts"] for f in frames], np.int64)
    net = s.counts[-1] - s.counts[0]
    np.testing.assert_array_equal(counts[200:400], (s.counts + net) % 2**16)
    t_us = np.array([f["t_us"] for f in frames], np.int64)
    steps = np.diff(t_us) % 2**32
    assert steps.min() > 0 and steps.max() < 5100  # 5 ms frames, no jump at the seams
