"""The firmware's portable core (``firmware/core``) built for the host and driven
through ctypes: what the parser decodes from its frames is exactly what it was fed.

A hypothesis property test runs the core as an MCU would (latch at the sample rate,
the main loop draining the queue now and then) through counter wraps (16 and 32
bit), ``t_us`` wraps, MCU resets, samples the core drops because its queue is full
and frames lost on the link, and feeds the bytes to
:class:`~sensorbench.drivers.pods_parser.PodStreamParser` in random chunks. The
expectation follows docs/PROTOCOLS.md, not the parser's code: counts move exactly as
the MCU's counters between two received frames; at a reset the new counters are
added to the cumulative counts; every frame the core dropped or the link lost is
counted as lost; time is unwrapped within a boot.
"""

from __future__ import annotations

import ctypes

import firmware_util
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sensorbench.drivers.pods_parser import PodStreamParser
from sensorbench.sim.emulator_pods import encode_binary

QUEUE = 4  # PODS_QUEUE of the host build
MAX_PODS = 15
MAX_UNRECEIVED = 12  # latches in a row the host may miss: |Δcount| stays < 2^15
CORE_BYTES = 4096  # more than sizeof(pods_core_t) of the host build


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    core = ctypes.CDLL(str(firmware_util.product("host")))
    core.pods_init.argtypes = [ctypes.c_void_p, ctypes.c_uint8, ctypes.c_uint8, ctypes.c_uint8]
    core.pods_init.restype = ctypes.c_int
    core.pods_latch.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_float,
        ctypes.c_float,
    ]
    core.pods_latch.restype = ctypes.c_uint8
    core.pods_pop_frame.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    core.pods_pop_frame.restype = ctypes.c_uint8
    core.pods_crc16.argtypes = [ctypes.c_char_p, ctypes.c_uint8]
    core.pods_crc16.restype = ctypes.c_uint16
    return core


class Mcu:
    """The core driven like the firmware drives it."""

    def __init__(self, lib: ctypes.CDLL, n_pods: int, bits: int, imu: bool) -> None:
        self.lib, self.n_pods = lib, n_pods
        self.bits, self.imu = bits, imu
        self.mem = ctypes.create_string_buffer(CORE_BYTES)
        self.reset()

    def reset(self) -> None:
        assert self.lib.pods_init(self.mem, self.n_pods, self.bits, int(self.imu)) == 0

    def latch(self, t_us: int, counts: np.ndarray, yaw_rate: float, yaw: float) -> bool:
        raw = (ctypes.c_uint32 * MAX_PODS)(*[int(c) % 2**32 for c in counts])
        return bool(self.lib.pods_latch(self.mem, t_us % 2**32, raw, yaw_rate, yaw))

    def pop(self) -> bytes | None:
        out = ctypes.create_string_buffer(128)
        n = self.lib.pods_pop_frame(self.mem, out)
        return out.raw[:n] if n else None


def test_crc_check_value_and_bad_layouts(lib: ctypes.CDLL) -> None:
    assert lib.pods_crc16(b"123456789", 9) == 0x29B1
    mem = ctypes.create_string_buffer(CORE_BYTES)
    for n, bits in ((0, 16), (16, 16), (3, 24), (3, 8)):
        assert lib.pods_init(mem, n, bits, 0) == -1


def test_the_documented_example_frame(lib: ctypes.CDLL) -> None:
    mcu = Mcu(lib, 3, 16, imu=True)
    for _ in range(258):  # seq 258
        mcu.latch(0, np.zeros(3), 0.0, 0.0)
        mcu.pop()
    assert mcu.latch(1_000_000, np.array([100, -2, 40000]), 0.5, -1.25)
    assert mcu.pop() == bytes.fromhex(
        "aa551531020140420f006400feff409c0000003f0000a0bf9515"
    )  # docs/PROTOCOLS.md


ops = st.lists(
    st.tuples(
        st.integers(1, 1_000_000),  # µs since the previous latch
        st.integers(-1500, 1500),  # counter step (×0.5, ×1 or ×1.5 per pod, ± per pod)
        st.sampled_from(["keep", "drain", "drain", "drain_lose_one", "reset"]),
    ),
    min_size=1,
    max_size=160,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_pods=st.integers(1, MAX_PODS),
    bits=st.sampled_from([16, 32]),
    imu=st.booleans(),
    t0=st.integers(0, 2**32 - 1),
    c0=st.integers(-(2**31), 2**31 - 1),
    steps=ops,
    chunks=st.lists(st.integers(1, 64), min_size=1, max_size=8),
)
def test_parsed_frames_are_exactly_what_the_core_was_fed(
    lib: ctypes.CDLL, n_pods, bits, imu, t0, c0, steps, chunks
) -> None:
    half = 2 ** (bits - 1)
    mcu = Mcu(lib, n_pods, bits, imu)
    per_pod = (1 + np.arange(n_pods) % 3) * np.where(np.arange(n_pods) % 2, -1, 1)
    # power-on: any counts (the wire carries their low bits), any clock (to cross the
    # 2^32 µs wrap)
    counts = c0 + 7 * np.arange(n_pods, dtype=np.int64)
    t_us, boot, seq = t0, 0, 0
    fed: list[dict] = []  # frames the host receives, with what the core was given
    latched: list[dict] = []  # queued in the core, oldest first
    since_drain = 0
    received_t: int | None = None
    for dt, step, what in steps:
        if what == "reset" and received_t is not None and 16_000_000 < received_t <= 2**31:
            # the MCU restarts: queue gone, seq and clock from 0, counters from 0. The
            # host sees a restart only if t_us went back (docs/PROTOCOLS.md), which
            # this uptime guarantees (a new boot's first received frame is < 16 s)
            mcu.reset()
            latched.clear()
            counts[:] = 0
            t_us, boot, seq = 0, boot + 1, 0
            continue
        t_us += dt
        counts += step * per_pod // 2
        rate, yaw = np.float32(step / 1000.0), np.float32(dt * 1e-6)
        sample = dict(t_us=t_us, counts=counts.copy(), boot=boot, seq=seq % 2**16)
        if mcu.latch(t_us, counts, rate, yaw):
            latched.append(dict(sample, rate=rate, yaw=yaw))
        seq += 1  # used up even when the queue was full
        since_drain += 1
        # at most MAX_UNRECEIVED latches between two received frames: |Δcount| < 2^15
        may_skip = since_drain < MAX_UNRECEIVED - 2
        if what == "keep" and may_skip:
            continue
        for k, frame in enumerate(iter(mcu.pop, None)):
            queued = latched.pop(0)
            if not (what == "drain_lose_one" and k == 0 and may_skip):
                fed.append(dict(queued, frame=frame))
                received_t = queued["t_us"] % 2**32
        since_drain = 0
        assert not latched
    for frame in iter(mcu.pop, None):
        fed.append(dict(latched.pop(0), frame=frame))

    stream = b"".join(f["frame"] for f in fed)
    parser = PodStreamParser(n_pods, bits, "binary")
    parts, i = [], 0
    for size in chunks * (len(stream) // sum(chunks) + 1):
        parts.append(parser.feed(stream[i : i + size]))
        i += size
        if i >= len(stream):
            break
    got = {f: np.concatenate([getattr(p, f) for p in parts]) for f in ("seq", "device_ns")}
    got_counts = np.concatenate([p.counts for p in parts]).reshape(-1, n_pods)
    got_rate = np.concatenate([p.yaw_rate for p in parts])
    got_yaw = np.concatenate([p.yaw for p in parts])

    st_ = parser.stats
    assert st_.frames == len(fed) and st_.crc_errors == 0 and st_.bytes_skipped == 0
    boots = np.array([f["boot"] for f in fed])
    assert st_.resets == int(np.count_nonzero(np.diff(boots)))
    # the frames of the core are the emulator's encoding of the same fields, byte for byte
    for f in fed[:5]:
        raw = np.asarray(f["counts"]) % 2**bits
        data, _ = encode_binary(
            np.array([f["seq"]]),
            np.array([f["t_us"] % 2**32]),
            raw[None, :],
            bits,
            np.array([f["rate"]]) if imu else None,
            np.array([f["yaw"]]) if imu else None,
        )
        assert data == f["frame"]
    if not fed:
        return
    true_counts = np.array([f["counts"] for f in fed])
    true_t = np.array([f["t_us"] for f in fed])
    same_boot = boots[1:] == boots[:-1]
    # between two received frames of one boot: exactly the counters' and the clock's steps
    np.testing.assert_array_equal(
        np.diff(got_counts, axis=0)[same_boot], np.diff(true_counts, axis=0)[same_boot]
    )
    np.testing.assert_array_equal(
        np.diff(got["device_ns"])[same_boot], 1000 * np.diff(true_t)[same_boot]
    )
    # at a restart the new counters (from 0) are added; the new boot's clock is as sent
    np.testing.assert_array_equal(
        np.diff(got_counts, axis=0)[~same_boot], true_counts[1:][~same_boot]
    )
    np.testing.assert_array_equal(got["device_ns"][1:][~same_boot], 1000 * true_t[1:][~same_boot])
    # the first frame: the counters as the signed width, the clock as sent
    np.testing.assert_array_equal(got_counts[0], (true_counts[0] + half) % (2 * half) - half)
    assert got["device_ns"][0] == 1000 * (true_t[0] % 2**32)
    # every sample the host did not get (queue full, lost on the link) is counted lost
    seqs = np.array([f["seq"] for f in fed])
    assert [int.from_bytes(f["frame"][4:6], "little") for f in fed] == seqs.tolist()
    gaps = (np.diff(seqs) % 2**16)[same_boot] - 1
    assert st_.lost_frames == int(gaps.sum())
    assert np.all(np.diff(got["seq"]) == np.where(same_boot, np.diff(seqs) % 2**16, 1))
    if imu:
        np.testing.assert_array_equal(got_rate, [f["rate"] for f in fed])
        np.testing.assert_array_equal(got_yaw, [f["yaw"] for f in fed])
    else:
        assert np.isnan(got_rate).all() and np.isnan(got_yaw).all()


class _CoreHead(ctypes.Structure):
    """The first fields of ``pods_core_t`` (firmware/core/pods_core.h)."""

    _fields_ = [("n_pods", ctypes.c_uint8), ("counter_bits", ctypes.c_uint8),
                ("imu", ctypes.c_uint8), ("errors", ctypes.c_uint8)]  # fmt: skip


@pytest.mark.parametrize("chunked", [False, True])
def test_a_restart_whose_first_frame_is_lost_counts_its_errors_from_zero(
    lib: ctypes.CDLL, chunked: bool
) -> None:
    """The MCU's lost-edge counts restart at 0 with the MCU. The host misses the restart's
    first frame (the Uno resets when the port opens; a CRC hit): the next error block
    still counts from 0, not as a 16-bit step back from the counts before (which read as
    65 529 lost edges). ``chunked``: the restart and the next error block in two reads."""
    lib.pods_latch_errors.argtypes = [ctypes.c_void_p, ctypes.c_uint32,
        ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint16), ctypes.c_float,
        ctypes.c_float]  # fmt: skip
    lib.pods_latch_errors.restype = ctypes.c_uint8
    mcu = Mcu(lib, 3, 16, imu=False)

    def boot_and_run(n: int, lost: list[int], t0: int = 0) -> list[bytes]:
        mcu.reset()
        _CoreHead.from_buffer(mcu.mem).errors = 1  # as firmware/avr/main.c sets it
        out = []
        for k in range(n):
            counts = (ctypes.c_uint32 * 3)(10 * k, 0, 0)
            assert lib.pods_latch_errors(mcu.mem, t0 + 5000 * (k + 1), counts,
                                         (ctypes.c_uint16 * 3)(*lost), 0.0, 0.0)  # fmt: skip
            frame = mcu.pop()
            assert frame is not None
            out.append(frame)
        return out

    before, after = boot_and_run(400, [7, 0, 0]), boot_and_run(40, [0, 0, 2])
    parser = PodStreamParser(3, 16)
    parser.feed(b"".join(before))
    if chunked:  # the read ends right after the (unrecognised) restart's second frame
        parser.feed(after[1])
        frames = parser.feed(b"".join(after[2:]))
    else:
        frames = parser.feed(b"".join(after[1:]))
    assert parser.stats.resets == 1
    assert frames.quad_errors[-1].tolist() == [7, 0, 2]
    assert (parser.stats.quad_errors, parser.stats.overruns) == (9, 0)
