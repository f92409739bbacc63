"""Device clock (unwrap, offset and drift from the lower envelope) and LD19 turn assembly."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest
from ld19_util import TurnSink, ideal_samples

from sensorbench.drivers import ld19_reader
from sensorbench.drivers.device_clock import CounterUnwrapper, DeviceClock
from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.ld19_near_filter import near_filter_mask
from sensorbench.drivers.ld19_parser import LD19Parser
from sensorbench.drivers.ld19_reader import LD19Protocol
from sensorbench.drivers.ld19_turns import TurnAssembler, cw_cdeg_to_ccw_rad
from sensorbench.errors import DriverError
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, TurnFlag
from sensorbench.sim.emulator_ld19 import encode_packets

# -- counter unwrapping ----------------------------------------------------------------


def test_unwrap_across_calls_and_wraps():
    u = CounterUnwrapper(30000)
    a = u.unwrap(np.array([29990, 29995, 3]))
    b = u.unwrap(np.array([8, 29999, 1]))
    assert a.tolist() == [29990, 29995, 30003]
    assert b.tolist() == [30008, 59999, 60001]


def test_unwrap_backstep_and_long_silence_from_host_time():
    u = CounterUnwrapper(2**16, max_backstep=10)
    assert u.unwrap(np.array([100, 95, 200])).tolist() == [100, 95, 200]
    # 45 s of silence on a 30 s counter: the host clock says one whole extra wrap
    v = CounterUnwrapper(30000)
    v.unwrap(np.array([1000]))
    assert v.unwrap(np.array([16000]), expected_step=np.array([45000.0])).tolist() == [46000]
    with pytest.raises(DriverError):
        v.unwrap(np.array([30000]))


# -- clock fit -------------------------------------------------------------------------


def _simulate(n: int, offset_s: float, drift: float, seed: int, slope_extra: float = 1.0):
    """LD19-like stamps: a packet every 8/3 ms, ms floor, wraps at 30000; host receive
    time = offset + (1 + drift) * device time + 4 ms + Exp(3 ms) latency."""
    rng = np.random.default_rng(seed)
    dev_ms = np.arange(n) * 8 / 3 + 12345.0
    true_host_ns = offset_s * 1e9 + dev_ms * 1e6 * (1 + drift) * slope_extra
    host = (true_host_ns + 4e6 + rng.exponential(3e6, n)).astype(np.int64)
    raw = np.floor(dev_ms).astype(np.int64) % 30000
    return host, raw, dev_ms, true_host_ns


def test_clock_recovers_offset_and_drift():
    n = 375 * 120  # two minutes of packets
    host, raw, dev_ms, _ = _simulate(n, offset_s=1234.5, drift=50e-6, seed=3)
    clock = DeviceClock(modulus=30000, tick_ns=1_000_000)
    devs = [clock.update(host[i : i + 37], raw[i : i + 37]) for i in range(0, n, 37)]
    dev_ns = np.concatenate(devs)
    assert np.array_equal(dev_ns, (np.floor(dev_ms) * 1e6).astype(np.int64))  # unwrapped
    # Window minima of ~375 receive delays scatter by ~10-30 us (Exp(3 ms)/375 plus the
    # 1 ms stamp floor); over 120 windows of 1 s, the slope's standard error is
    # ~25 us / sqrt(sum (x - xbar)^2) = 25e-6 / 380 = 0.07 ppm. 1 ppm is > 10 sigma.
    assert (clock.slope - 1.0) * 1e6 == pytest.approx(50.0, abs=1.0)  # drift, ppm
    assert clock.uncertainty_ns() < 100_000
    # Mapped host time of a stamp = true time of that stamp + the constant 4 ms latency
    # (unobservable from one-way stamps) + the smallest extra delay (< 0.2 ms here).
    stamps = (np.floor(dev_ms[-375:]) * 1e6).astype(np.int64)
    true_of_stamp = 1234.5e9 + stamps * (1 + 50e-6)
    err = clock.to_host(stamps) - true_of_stamp
    assert np.all(np.abs(err - 4e6) < 0.2e6)


def test_clock_follows_an_accelerated_emulator_slope():
    n = 375 * 30
    host, raw, _, _ = _simulate(n, offset_s=10.0, drift=0.0, seed=4, slope_extra=0.1)
    clock = DeviceClock(modulus=30000, tick_ns=1_000_000)
    for i in range(0, n, 50):
        clock.update(host[i : i + 50], raw[i : i + 50])
    assert clock.slope == pytest.approx(0.1, rel=1e-3)


def test_clock_keeps_the_nominal_slope_until_the_minima_span_two_windows():
    """Two window minima a packet apart say nothing about the slope.

    A 4x emulator (slope 0.25), 0.5 s windows, every packet 20 ms late except the last
    of window 0 (on time) and the first of window 1 (5 ms late): a line through those
    two minima, 10 ms of device time apart, has slope 0.25 + 5/10 = 0.75 and maps the
    next window hundreds of ms off. The fit must wait for minima two windows apart.
    """
    clock = DeviceClock(modulus=None, tick_ns=1_000_000, window_s=0.5, nominal_slope=0.25)
    dev_ms = np.arange(0, 2010, 10)
    delay_ms = np.full(dev_ms.size, 20.0)
    delay_ms[dev_ms == 490] = 0.0
    delay_ms[dev_ms == 500] = 5.0
    delay_ms[dev_ms == 1490] = 1.0
    host_ns = np.rint((0.25 * dev_ms + delay_ms) * 1e6).astype(np.int64)
    upto = np.searchsorted(dev_ms, 1010)  # windows 0 and 1 closed, window 2 open
    clock.update(host_ns[:upto], dev_ms[:upto])
    assert not clock.fitted and clock.slope == 0.25
    # the line under the lowest point (490 ms, on time) maps 1000 ms to 0.25 s
    assert clock.to_host(1_000_000_000) == pytest.approx(250e6, abs=0.01e6)
    clock.update(host_ns[upto:], dev_ms[upto:])  # window 2 closes: minima span 1 s
    assert clock.fitted and clock.slope == pytest.approx(0.25, abs=0.01)


def test_a_known_rate_holds_the_slope_against_starved_windows():
    """A 10× emulator (slope 0.1 exactly), 1 s windows of device time, the first half of
    the run received ever less late (a reader starved while everything starts, 40 ms
    falling to 0): a free line through the window minima tilts by ~4 %, one held within
    max_drift 1 % stays within it."""
    dev_ms = np.arange(0, 12_000, 5)
    late_ms = np.where(dev_ms < 6000, 40.0 * (1 - dev_ms / 6000), 0.0)  # 40 ms -> 0
    host_ns = np.rint((0.1 * dev_ms + late_ms + 0.2) * 1e6).astype(np.int64)
    free = DeviceClock(modulus=None, tick_ns=1_000_000, nominal_slope=0.1)
    held = DeviceClock(modulus=None, tick_ns=1_000_000, nominal_slope=0.1, max_drift=0.01)
    for i in range(0, dev_ms.size, 20):
        free.update(host_ns[i : i + 20], dev_ms[i : i + 20])
        held.update(host_ns[i : i + 20], dev_ms[i : i + 20])
    assert abs(free.slope / 0.1 - 1) > 0.03
    assert abs(held.slope / 0.1 - 1) <= 0.01 + 1e-12
    with pytest.raises(DriverError, match="max_drift"):
        DeviceClock(modulus=None, tick_ns=1, nominal_slope=None, max_drift=0.01)


@pytest.mark.parametrize("max_read", [4, 400])
@pytest.mark.parametrize(("nominal", "max_drift"), [(1.0, 0.01), (0.1, None), (None, None)])
def test_observations_in_scalars_are_update_then_to_host_bit_for_bit(nominal, max_drift, max_read):
    """Pod reads of one to ``max_read`` frames: 20 s of 200 Hz µs stamps at ``nominal`` host s
    per device s (1 + 80 ppm drift), each read's frames received together 0.1–5 ms after
    its last (exponential; a starved stretch 40 ms late): ``update_few`` gives what
    ``update`` + ``to_host`` give, every frame, before and after the fit (windows closing
    inside a read, several in a long one), and leaves the same fit."""
    rng = np.random.default_rng(7)
    dev_us = 1_000_000 + np.arange(4000) * 5_000 + rng.integers(0, 3, 4000)
    late_ns = 100_000 + rng.exponential(1e6, 4000) + np.where(np.arange(4000) // 500 == 3, 4e7, 0)
    host = (7e11 + dev_us * 1e3 * (nominal or 0.5) * (1 + 80e-6) + late_ns).astype(np.int64)
    one = DeviceClock(modulus=None, tick_ns=1000, nominal_slope=nominal, max_drift=max_drift)
    vec = DeviceClock(modulus=None, tick_ns=1000, nominal_slope=nominal, max_drift=max_drift)
    cuts = np.cumsum(rng.integers(1, max_read + 1, 4000))
    got, want = [], []
    for a, b in itertools.pairwise([0, *cuts[cuts < 4000].tolist(), 4000]):
        got += one.update_few(int(host[b - 1]), dev_us[a:b].tolist())
        want += vec.to_host(vec.update(np.full(b - a, host[b - 1]), dev_us[a:b])).tolist()
    assert one.fitted and len(one._windows) == 19
    assert got == want
    fit_one, fit_vec = ((c._ref, c._line(), len(c._windows), c.points) for c in (one, vec))
    assert fit_one == fit_vec  # the same fit: reference point, line, windows, points
    assert one.uncertainty_ns() == vec.uncertainty_ns()


def test_clock_before_any_data_and_reset():
    clock = DeviceClock(modulus=None, tick_ns=1000)
    with pytest.raises(DriverError):
        clock.to_host(0)
    clock.update(np.array([5_000_000]), np.array([1000]))
    assert clock.to_host(1_000_000) == 5_000_000  # one point: nominal slope through it
    assert not clock.fitted
    clock.reset()
    assert clock.points == 0


# -- turn assembly ---------------------------------------------------------------------


def _stream(duration_s: float, seed: int = 0):
    s = ideal_samples(duration_s=duration_s, p_no_return=0.0, seed=seed)
    k = s.t_s.size // 12
    fields = {
        "speed": np.full(k, 3600),
        "start": (np.round(s.angle_deg_cw[::12] * 100) % 36000).astype(int),
        "end": (np.round(s.angle_deg_cw[11::12] * 100) % 36000).astype(int),
        "distance_mm": np.round(s.range_m * 1000).astype(int).reshape(k, 12),
        "intensity": s.intensity.reshape(k, 12),
        "timestamp": np.floor(s.t_s[::12] * 1000).astype(int) % 30000,
    }
    return s, fields


def test_angle_conversion_is_ccw_radians_from_forward():
    cw = np.array([0, 9000, 18000, 27000, 35999.9])
    ccw = cw_cdeg_to_ccw_rad(cw)
    assert ccw.dtype == np.float32
    assert ccw[0] == 0 and ccw[1] == pytest.approx(1.5 * np.pi)  # 90 deg CW = 270 deg CCW
    assert ccw[2] == pytest.approx(np.pi) and ccw[3] == pytest.approx(0.5 * np.pi)
    assert np.all((ccw >= 0) & (ccw < np.float32(2 * np.pi)))


def test_turns_split_at_the_wrap_and_drop_the_first_partial_turn():
    s, f = _stream(duration_s=0.305)  # 1368 samples: turns 0, 1, 2 and 18 points of turn 3
    raw = encode_packets(**f)
    parser, asm = LD19Parser(), TurnAssembler(host_times=False)
    out = LidarTurns.concat(
        [asm.push(parser.feed(raw[i : i + 999])) for i in range(0, len(raw), 999)]
    )
    # turn 0 is dropped (a reader cannot know it saw a turn from its start); turn 3 is
    # still in progress
    assert out.n_turns == 2 and out.count.tolist() == [450, 450]
    assert asm._pending["cw"].size == 18 and asm.partial_dropped == 1
    sl = slice(450, 1350)
    assert np.array_equal(out.intensity, s.intensity[sl])
    assert np.allclose(out.range, np.round(s.range_m[sl] * 1000) / 1000, rtol=0, atol=1e-6)
    expected_ccw = np.mod(-np.radians(s.angle_deg_cw[sl]), 2 * np.pi)
    d = np.angle(np.exp(1j * (out.angle - expected_ccw)))
    assert np.abs(d).max() < np.radians(0.0051)  # start/end are rounded to 0.01 deg
    # device time of a point: packet stamp (ms, floored) + i * step / speed
    assert out.device_ns[0] != NO_DEVICE_TIME and abs(int(out.device_ns[0]) - 100_000_000) < 1e6
    assert np.allclose(np.diff(out.t_ns[6:18]), 1e9 / 4500, atol=2)  # one packet
    assert out.speed_hz.tolist() == [10.0, 10.0] and not out.flags.any()


def test_a_packet_without_speed_is_timed_at_the_devices_sample_rate():
    """A packet reporting speed 0 carries no period: its points are spaced at the
    LD19's real rate (docs/LD19.md: 4545/s, not the datasheet's 4500)."""
    _, f = _stream(duration_s=0.305)
    f["speed"][40] = 0  # points 480..491, the 31st to 42nd of the first turn kept
    f["end"][40] = f["start"][40]  # the SDK's span rule at 0 deg/s
    asm = TurnAssembler(host_times=False)
    out = asm.push(LD19Parser().feed(encode_packets(**f)))
    rate = get_kind("ld19").sim_defaults["samples_per_s"]
    assert rate == 4545.0
    assert np.allclose(np.diff(out.t_ns[30:42]), 1e9 / rate, atol=1)


def test_held_packets_give_each_turn_on_the_read_that_ends_it(monkeypatch):
    # 3-packet reads (the emulator's bursts) of 1.2 s: the reader leaves in the parser
    # the packets that cannot end a turn and assembles once a turn; a reference forced
    # to assemble every read (MAX_HELD = 1) gives the same turns, on the same reads, in
    # device times (the clock fit aside)
    _, f = _stream(duration_s=1.2, seed=4)
    raw = encode_packets(**f)
    reads = [raw[i : i + 3 * 47] for i in range(0, len(raw), 3 * 47)]

    def per_read() -> tuple[list[LidarTurns], int]:
        protocol, sink = LD19Protocol(), TurnSink()
        protocol.assembler = asm = TurnAssembler(host_times=False)
        protocol.link = SimpleNamespace(writer=sink, name="ld19")  # type: ignore[assignment]
        pushes = []
        asm.push = lambda pk: pushes.append(len(pk)) or TurnAssembler.push(asm, pk)
        out = []
        for r in reads:
            sink.batches.clear()
            protocol.consume(0, r)
            out.append(LidarTurns.concat(list(sink.batches)))
        return out, len(pushes)

    held, n_held = per_read()
    monkeypatch.setattr(ld19_reader, "MAX_HELD", 1)
    every, n_every = per_read()
    assert n_every == len(reads) and n_held <= 13  # one assembly a turn (12 begun)
    assert [t.n_turns for t in held] == [t.n_turns for t in every]
    assert sum(t.n_turns for t in held) == 10  # 12 turns begun, the first and last partial
    a, b = LidarTurns.concat(held), LidarTurns.concat(every)
    for name in ("t_first_ns", "device_ns", "count", "flags", "angle", "range", "t_ns"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_no_return_is_inf():
    _, f = _stream(duration_s=0.35)
    f["distance_mm"][50, 0] = 0  # sample 600, in turn 1 (samples 450..899)
    out = TurnAssembler(host_times=False).push(LD19Parser().feed(encode_packets(**f)))
    pos = 600 - 450
    assert np.isinf(out.range[pos]) and np.isfinite(np.delete(out.range, pos)).all()


def test_loss_and_crc_flags_and_after_reconnect():
    _, f = _stream(duration_s=1.05)  # turns 0..9 complete
    raw = bytearray(encode_packets(**f))
    del raw[47 * 200 : 47 * 201]  # packet 200 lost: samples 2400.., turn 5
    raw[47 * 299 + 10] ^= 0x55  # packet 300 fails its CRC: samples 3600.., turn 8
    parser, asm = LD19Parser(), TurnAssembler(host_times=False)
    out = asm.push(parser.feed(bytes(raw)))
    assert out.n_turns == 9
    turn_no = np.rint(out.device_ns / 1e8).astype(int).tolist()
    flags = dict(zip(turn_no, out.flags.tolist(), strict=True))
    loss, crc = int(TurnFlag.PACKET_LOSS), int(TurnFlag.CRC_ERRORS)
    assert flags == {1: 0, 2: 0, 3: 0, 4: 0, 5: loss, 6: 0, 7: 0, 8: loss | crc, 9: 0}
    assert out.count[turn_no.index(5)] == 450 - 12 and out.count[turn_no.index(8)] == 450 - 12
    # a reconnect: the turn in progress is dropped, the next complete one is flagged
    asm.reset(after_reconnect=True)
    parser.resync()
    again = asm.push(parser.feed(encode_packets(**f)))
    assert again.n_turns == 9 and again.flags[0] == int(TurnFlag.AFTER_RECONNECT)
    assert not again.flags[1:].any()


def test_near_filter_drops_small_dim_clusters_only():
    n = 450
    angle = np.linspace(0, 2 * np.pi, n, endpoint=False)
    rng_m = np.full(n, 2.0)
    inten = np.full(n, 200)
    rng_m[100] = 1.0  # isolated point, dim: rejected
    rng_m[200] = 1.0  # isolated point, bright (>= 220): kept
    inten[200] = 230
    rng_m[300:305] = 1.5  # 5-point cluster of intensity 10: rejected
    inten[300:305] = 10
    rng_m[400:406] = 6.0  # beyond 5 m: never filtered
    inten[400:406] = 0
    bad = near_filter_mask(angle, rng_m, inten, speed_hz=10.0)
    assert np.flatnonzero(bad).tolist() == [100, 300, 301, 302, 303, 304]
