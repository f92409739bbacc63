"""The causal frame clock and the odometry stream: chunk-invariant, and right on known truth.

The truth here is generated without the simulator: an MCU clock ticking at 200 Hz with
a known drift, host receive times = true time + a non-negative latency, a burst of
frames queued before the port was opened, an MCU restart.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sensorbench.fusion.frame_clock import MAX_SLEW, WARMUP_S, FrameClock
from sensorbench.fusion.odometry_stream import OdometryFrames, OdometryStream
from sensorbench.logs import NO_DEVICE_TIME, EncoderBatch

T0 = 5_000_000_000_000


def _frames(n: int, seed: int, drift_ppm: float = 80.0, backlog: int = 60):
    """(true host ns, received/stamped host ns, device ns) of n frames at 200 Hz."""
    rng = np.random.default_rng(seed)
    dev = np.arange(n, dtype=np.int64) * 5_000_000 + 123_456_789
    true = T0 + np.round((dev - dev[0]) * (1 + drift_ppm * 1e-6)).astype(np.int64)
    host = true + rng.exponential(0.4e6, n).astype(np.int64) + 200_000
    host[:backlog] = host[backlog]  # queued before the port was opened: one burst
    return true, np.maximum.accumulate(host), dev


def _run(clock: FrameClock, host, dev, bounds) -> tuple[np.ndarray, np.ndarray]:
    idx, out = [], []
    for a, b in itertools.pairwise(bounds):
        i, t = clock.push(host[a:b], dev[a:b])
        idx.append(i)
        out.append(t)
    i, t = clock.flush()
    return np.concatenate([*idx, i]), np.concatenate([*out, t])


def test_frame_times_follow_the_device_clock_and_the_least_delayed_frames() -> None:
    true, host, dev = _frames(24_000, seed=1)  # two minutes
    idx, t = _run(FrameClock(T0), host, dev, [0, host.size])
    np.testing.assert_array_equal(idx, np.arange(host.size))
    t_ns = T0 + t * 1e9
    err = t_ns - true
    # the burst is not taken for the frames' time: after the warm-up the error is the
    # smallest latency (0.2 ms), then the loop follows the 80 ppm drift within its slew
    assert np.all(np.abs(err) < 1.5e6), np.abs(err).max()
    assert np.abs(err[-2000:]).max() < 1.0e6
    dt = np.diff(t)
    nominal = np.diff(dev) * 1e-9
    assert np.all(np.abs(dt / nominal - 1) <= MAX_SLEW * (1 + 1e-9))
    # host_ns itself jitters by the latency; the frame clock does not
    assert np.std(np.diff(host) * 1e-9 - nominal) > 50 * np.std(dt - nominal)


def test_a_restart_and_frames_without_device_time_start_new_epochs() -> None:
    _, host, dev = _frames(2000, seed=2, backlog=1)
    dev = dev.copy()
    dev[1000:] -= dev[1000] - 1_000  # the MCU restarted: its clock starts again
    dev[1500:1510] = NO_DEVICE_TIME
    clock = FrameClock(T0)
    idx, t = _run(clock, host, dev, [0, 700, 1001, 1505, 2000])
    np.testing.assert_array_equal(idx, np.arange(2000))
    np.testing.assert_array_equal(t[1500:1510], (host[1500:1510] - T0) * 1e-9)
    # each epoch anchors after WARMUP_S of device time: times stay near host_ns
    assert np.all(np.abs(t - (host - T0) * 1e-9) < 0.05)
    # a restart's epoch holds its frames for the warm-up: pushed before it ends, none out
    held = FrameClock(T0)
    i, _ = held.push(host[:1000], dev[:1000])
    assert len(i) == 1000
    i, _ = held.push(host[1000:1100], dev[1000:1100])
    assert len(i) == 0 and (dev[1099] - dev[1000]) * 1e-9 < WARMUP_S


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    cuts=st.lists(st.integers(0, 3000), min_size=0, max_size=12),
)
def test_any_split_into_pushes_gives_the_same_times(seed: int, cuts: list[int]) -> None:
    _, host, dev = _frames(3000, seed=seed)
    dev = dev.copy()
    dev[2000:] -= dev[2000] - 7  # a restart
    dev[2500:2503] = NO_DEVICE_TIME
    whole = _run(FrameClock(T0, 0.1), host, dev, [0, 3000])
    parts = _run(FrameClock(T0, 0.1), host, dev, [0, *sorted(cuts), 3000])
    np.testing.assert_array_equal(whole[0], parts[0])
    assert whole[1].tobytes() == parts[1].tobytes()


def _batches(n: int, seed: int, bits: int | None = None):
    rng = np.random.default_rng(seed)
    _, host, dev = _frames(n, seed)
    counts = np.cumsum(rng.integers(-40, 60, size=(n, 3)), axis=0)
    stored = counts % (1 << bits) if bits else counts
    yaw = np.angle(np.exp(1j * np.cumsum(rng.normal(0, 0.3, n))))
    yaw[100:103] = np.nan
    return EncoderBatch(host, dev, np.arange(n), stored, yaw, np.zeros(n)), counts


def _stream(batch: EncoderBatch, bounds, bits=None) -> tuple[OdometryStream, OdometryFrames]:
    odo = OdometryStream(3, 1.0, bits)
    parts = [
        odo.push(EncoderBatch(*(getattr(batch, f)[a:b] for f in _FIELDS)))
        for a, b in itertools.pairwise(bounds)
    ]
    return odo, OdometryFrames.concat([*parts, odo.flush()], 3)


_FIELDS = ("host_ns", "device_ns", "seq", "counts", "yaw", "yaw_rate")


@pytest.mark.parametrize("bits", [None, 16])
def test_the_stream_gives_increments_of_the_kept_frames_in_any_chunks(bits) -> None:
    batch, counts = _batches(1500, seed=4, bits=bits)
    odo, whole = _stream(batch, [0, 1500], bits)
    assert odo.t0_ns == batch.host_ns[0] and odo.dropped == 0
    t_all = np.concatenate([[odo.start_t_s], whole.t_s])
    assert t_all.size == 1500 and np.all(np.diff(t_all) > 0)
    np.testing.assert_array_equal(whole.dn, np.diff(counts, axis=0).astype(float))
    expected = np.angle(np.exp(1j * np.diff(batch.yaw)))
    ok = np.isfinite(expected)
    np.testing.assert_allclose(whole.imu_dtheta[ok], expected[ok], atol=1e-12)
    assert np.isnan(whole.imu_dtheta[~ok]).all()
    _, chunked = _stream(batch, [0, 1, 2, 250, 251, 900, 1500], bits)
    for f in ("t_s", "dn", "imu_dtheta"):
        assert getattr(chunked, f).tobytes() == getattr(whole, f).tobytes(), f


def test_frames_whose_time_does_not_advance_are_dropped_and_their_counts_carried() -> None:
    batch, counts = _batches(1300, seed=5)
    dev = batch.device_ns.copy()
    dev[1250:] -= dev[1250] - dev[0]  # a restart late in the stream
    b = EncoderBatch(batch.host_ns, dev, batch.seq, batch.counts, batch.yaw, batch.yaw_rate)
    odo, frames = _stream(b, [0, 1300])
    t_all = np.concatenate([[odo.start_t_s], frames.t_s])
    assert np.all(np.diff(t_all) > 0)
    # every tick is in some increment: the sum of increments is the total count change
    np.testing.assert_array_equal(frames.dn.sum(axis=0), (counts[-1] - counts[0]).astype(float))
    assert odo.dropped + t_all.size == 1300


@pytest.mark.parametrize("max_read", [1, 4])
def test_a_few_frames_a_push_are_the_whole_push_bit_for_bit(max_read: int) -> None:
    """A live read of a few frames takes the stream's scalar path: 1300 frames pushed 1 to
    ``max_read`` at a time (yaw wrapping across ±π, steps of exactly ±π, three without
    yaw, a restart late in the stream, and three frames repeating their predecessor's
    device time, whose times do not advance) give the whole push's frames, bits and drops."""
    batch, _ = _batches(1300, seed=6)
    dev = batch.device_ns.copy()
    dev[1250:] -= dev[1250] - dev[0]
    dev[700:703] = dev[699]
    batch.yaw[500:503] = (0.0, np.pi, 0.0)  # steps of exactly +π and −π
    b = EncoderBatch(batch.host_ns, dev, batch.seq, batch.counts, batch.yaw, batch.yaw_rate)
    whole_odo, whole = _stream(b, [0, 1300])
    cuts = np.cumsum(np.random.default_rng(1).integers(1, max_read + 1, 1300))
    few_odo, few = _stream(b, [0, *cuts[cuts < 1300].tolist(), 1300])
    assert few_odo.dropped == whole_odo.dropped > 0
    assert np.isnan(few.imu_dtheta).sum() == 4 and np.ptp(few.yaw[np.isfinite(few.yaw)]) > 6
    assert whole.imu_dtheta[500:502].tolist() == [np.pi, -np.pi]
    for f in ("t_s", "dn", "imu_dtheta", "yaw"):
        assert getattr(few, f).tobytes() == getattr(whole, f).tobytes(), f


@pytest.mark.parametrize("at", [100, 1100])  # in an epoch's warm-up, after it
def test_a_device_clock_straying_from_host_starts_a_new_epoch_in_the_warm_up_too(at) -> None:
    """The device clock steps 100 s ahead of host_ns (an MCU restart taken for a silence):
    a new epoch from there, in the warm-up as after it; every frame near its true time."""
    true, host, dev = _frames(2000, seed=2, backlog=1)
    dev = dev.copy()
    dev[at:] += 100_000_000_000
    idx, t = _run(FrameClock(T0), host, dev, [0, 2000])
    np.testing.assert_array_equal(idx, np.arange(2000))
    assert np.abs(t - (true - T0) * 1e-9).max() < 1.5e-3  # the first test's bound
