"""The pod reader on a real pty: session contents vs the emulator's truth, unplug, CSV."""

from __future__ import annotations

import itertools
import time
import types

import numpy as np
import pods_util
import pytest
from capture_util import damaged as damaged_frames

from sensorbench.drivers.pods_reader import RESTART_TOLERANCE_NS, PodProtocol
from sensorbench.drivers.serial_link import LinkConfig, SerialLink
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.errors import DriverError
from sensorbench.logs import EncoderBatch, Session, SessionWriter
from sensorbench.sim.emulator_pods import PodEmulator, encode_binary, encode_csv


def _record(tmp_path, variant: str, unplug: bool = False):
    # ≤ 50 counts per frame: a ~0.3 s unplug at 10x (600 frames) stays unwrappable
    s = pods_util.make_samples(n=2400, step=50, drift=(0, 0, 0), seed=2)
    em = PodEmulator(s, variant=variant, speed=10.0, link=str(tmp_path / "pods"))
    # A reader starved by a loaded machine must get every byte late, not lose some
    # (the link's default 0.5 s before an overrun holds 85 ms of frames at 10x).
    em.port.write_timeout_s = 30.0
    path = tmp_path / "s.h5"
    w = SessionWriter(path, label="pods", config_text="")
    # The host opens the port (baud set) before the MCU starts, as the emulator's
    # contract asks: bytes sent before the open are garbled by the baud mismatch, and
    # under load a batch computed before the open could land after pyserial's flush
    # (6 malformed CSV lines once, with a CPU hog on the reader's core).
    protocol = PodProtocol(protocol=variant, clock_slope=1 / 10.0)
    config = LinkConfig(first_valid_timeout_s=None)
    r = SerialReader(SerialLink("pods", em.link, protocol, w, config=config))
    r.declare(w)
    w.start()
    r.start()
    em.start()
    if unplug:
        time.sleep(0.6)
        em.unplug()
        time.sleep(0.3)
        em.replug()
    assert em.finished.wait(15)
    time.sleep(0.2)
    status = r.status()
    r.stop()
    em.stop()
    w.close()
    with Session(path) as ses:
        stream = ses.encoder("pods")
        return s, em.truth(), status, stream.read(), ses.events(), dict(stream.attrs)


@pytest.mark.parametrize("variant", ["binary", "csv"])
def test_every_received_frame_is_stored_exactly(tmp_path, variant: str) -> None:
    s, truth, status, b, _events, attrs = _record(tmp_path, variant)
    assert attrs["protocol"] == variant and attrs["counter_bits"] == 16
    assert attrs["clock_nominal_slope"] == pytest.approx(1 / 10.0)  # the analysis times by it
    np.testing.assert_array_equal(b.seq, np.arange(2400))  # every frame, in order
    np.testing.assert_array_equal(b.counts, s.counts[b.seq])
    np.testing.assert_array_equal(b.device_ns, s.mcu_time_us[b.seq] * 1000)
    np.testing.assert_allclose(b.yaw_rate, truth.yaw_rate[b.seq], rtol=1e-6)
    assert status.drops == 0 and status.crc_errors == 0 and status.kind == "pods"
    assert np.all(np.diff(b.host_ns) >= 0)
    # host times from the device clock: 5 ms frames at 10x are 0.5 ms apart on the host;
    # receive stamps come in chunks, the clock model restores the spacing (±0.5 ms). On
    # a busy machine whole windows arrive late and a free line through their minima was
    # 6-13 % off; the pod clock is held within MAX_CLOCK_DRIFT (1 %) of its known rate.
    spacing = np.median(np.diff(b.host_ns[-500:])) / 1e6
    assert spacing == pytest.approx(0.5, abs=0.025)


def test_unplug_is_an_event_and_the_gap_counts_as_drops(tmp_path) -> None:
    s, truth, status, b, events, _ = _record(tmp_path, "binary", unplug=True)
    kinds = [e.kind for e in events]
    assert "unplug" in kinds and "reconnect" in kinds
    assert status.reconnects == 1
    gap = np.diff(b.seq) - 1
    assert gap.sum() == status.drops >= int((~truth.delivered).sum())
    np.testing.assert_array_equal(b.counts, s.counts[b.seq])  # counts survive the gap


def test_silent_port_fails_start_with_a_diagnosis(tmp_path) -> None:
    s = pods_util.make_samples(n=10)
    em = PodEmulator(s, link=str(tmp_path / "pods"))  # never started: silent
    r = SerialReader(
        SerialLink("pods", em.link, PodProtocol(), config=LinkConfig(first_valid_timeout_s=0.3))
    )
    with pytest.raises(DriverError, match="0 bytes"):
        r.start()
    em.stop()
    wrong = PodEmulator(s, link=str(tmp_path / "pods32"), counter_bits=32, loop=True)
    r = SerialReader(
        SerialLink("pods", wrong.link, PodProtocol(), config=LinkConfig(first_valid_timeout_s=0.5))
    )
    wrong.start()
    with pytest.raises(DriverError, match="counter width"):
        r.start()
    wrong.stop()


PODS_ONLY = """\
[robot]
name = "pods-only"

[[devices]]
name = "pods"
kind = "pods"
port = "{run_dir}/pods"
counter_bits = 16
imu = true
"""


def _frame_bytes(truth, k: int) -> bytes:
    """Frame ``k`` as the emulator encoded it (16-bit counters, IMU fields)."""
    sl = slice(k, k + 1)
    data, _ = encode_binary(
        truth.seq[sl], truth.t_us[sl], truth.counts_raw[sl], 16, truth.yaw_rate[sl], truth.yaw[sl]
    )
    return data


def _arrives_byte_exact(truth, k: int, stats) -> bool:
    """Whether frame ``k`` reaches the host unchanged despite the faults in its span.

    Only drops can leave a frame intact (a corrupted byte always changes it); the link
    then delivers the frame's bytes with the dropped ones removed, followed by the next
    frame's first bytes.
    """
    lo, n = int(truth.offset[k]), int(truth.length[k])
    if any(lo <= o < lo + n for o in stats.corrupted_offsets):
        return False
    drops = {o - lo for o in stats.dropped_offsets if lo <= o < lo + n + 8}
    nxt = k + 1
    if nxt >= len(truth.index) or int(truth.offset[nxt]) != lo + n:
        return False
    sent = _frame_bytes(truth, k) + _frame_bytes(truth, nxt)[:8]
    received = bytes(c for j, c in enumerate(sent) if j not in drops)
    return received[:n] == sent[:n]


@pytest.mark.slow
def test_scenario_fault_schedule_through_capture(tmp_path, warm_readers) -> None:
    """pods_faults: corrupt and dropped bytes, an unplug at 12 s for 1 s (simulated),
    counters starting near the 16-bit wrap; the file holds exactly the intact frames.
    ``warm_readers``: the scenario's clock starts with the robot and the unplug comes 1.5 s
    (host) later; from an empty numba cache capture's start outlasted it."""
    from sensorbench.drivers.capture import CaptureOptions, run_capture
    from sensorbench.sim.emulated_robot import EmulatedRobot

    cfg = tmp_path / "pods.toml"
    cfg.write_text(PODS_ONLY)
    speed = 8.0
    with EmulatedRobot(tmp_path / "run", cfg, scenario="pods_faults", speed=speed) as robot:
        result = run_capture(robot.config, tmp_path / "s.h5", 3.0, CaptureOptions(speed=speed))
        em = robot["pods"]
        unplugs, replugs = em.port.stats.unplugs, em.port.stats.replugs
    assert result.ok, result
    truth = em.truth()
    stats = em.port.stats
    assert unplugs == 1 and replugs == 1
    assert stats.bytes_corrupted > 0 and stats.bytes_dropped > 0
    with Session(tmp_path / "s.h5") as s:
        b = s.encoder("pods").read()
        kinds = [e.kind for e in s.events() if e.source == "pods"]
    assert "unplug" in kinds and "reconnect" in kinds
    lost = stats.corrupted_offsets + stats.dropped_offsets
    damaged = damaged_frames(truth.offset, truth.length, truth.delivered, lost)
    i = np.searchsorted(truth.index, b.seq)
    hit = i[np.flatnonzero(damaged[i])]
    # A dropped byte is invisible when the bytes after it repeat it up to the frame's end
    # (e.g. a CRC high byte of 0xAA before the next sync): the frame arrives byte-exact.
    unseen = [k for k in hit if _arrives_byte_exact(truth, int(k), stats)]
    bad = np.setdiff1d(hit, unseen)[:3]
    spans = [(int(truth.offset[k]), int(truth.offset[k] + truth.length[k])) for k in bad]
    hits = [
        o
        for o in stats.corrupted_offsets + stats.dropped_offsets
        if any(lo <= o < hi for lo, hi in spans)
    ]
    assert bad.size == 0, (  # no damaged frame was stored; if one was, say which and how
        f"damaged frames stored: index {truth.index[bad].tolist()}, byte spans {spans}, "
        f"faults at {hits}, {stats.bytes_garbled_baud} bytes garbled after replug"
    )
    np.testing.assert_array_equal(b.yaw, truth.yaw[i])
    np.testing.assert_array_equal(b.yaw_rate, truth.yaw_rate[i])
    # every intact delivered frame between the first and last stored one was stored
    # (except those sent while the port was closed for the reconnect)
    window = (truth.index >= b.seq[0]) & (truth.index <= b.seq[-1])
    intact = window & truth.delivered & ~damaged
    missing = np.setdiff1d(truth.index[intact], b.seq)
    assert missing.size < 0.5 * 200 * speed  # at most ~0.5 s of reconnect latency
    raw0 = truth.counts_raw[i[0]]
    offset = truth.counts[i[0]] - np.where(raw0 >= 2**15, raw0 - 2**16, raw0)
    np.testing.assert_array_equal(b.counts, truth.counts[i] - offset)
    summary = result.devices[0]
    assert summary.drops == int(np.sum(np.diff(b.seq) - 1))
    assert summary.crc_errors > 0


@pytest.mark.parametrize("variant", ["binary", "csv"])
def test_the_readers_unchecked_batches_pass_the_batch_check_unchanged(variant: str) -> None:
    """``EncoderBatch.decoded`` skips the constructor's check: every batch the reader
    builds so, over reads of 1 to 9 frames and reads that cut frames (the scalar and the
    vectorised decode), is one the check would keep as it is (the same arrays)."""
    s = pods_util.make_samples(n=300, seed=4)
    seq, t_us = np.arange(300) % (1 << 16), s.mcu_time_us % (1 << 32)
    raw = s.counts % (1 << 16)
    if variant == "binary":
        data, _ = encode_binary(seq, t_us, raw, 16, s.yaw_rate_rad_s, s.yaw_rad)
    else:
        data = b"".join(encode_csv(seq, t_us, raw, 16, s.yaw_rate_rad_s, s.yaw_rad))
    protocol, batches = PodProtocol(protocol=variant), []
    writer = types.SimpleNamespace(append_encoder=lambda _, batch: batches.append(batch))
    protocol.link = types.SimpleNamespace(writer=writer, name="pods", event=lambda *_: None)
    rng = np.random.default_rng(5)
    cuts = np.cumsum(rng.integers(1, 9 * len(data) // 300, 200))
    if variant == "binary":  # the second half in reads of 1 to 8 whole frames (the scalar path)
        whole = np.cumsum(rng.integers(1, 9, 200)) * (len(data) // 300) + len(data) // 2
        cuts = np.concatenate([cuts[cuts < whole[0]], whole])
    for k, (a, b) in enumerate(itertools.pairwise([0, *cuts[cuts < len(data)], len(data)])):
        protocol.consume(10**12 + k * 5_000_000, data[a:b])
    assert sum(len(b) for b in batches) == 300
    for batch in batches:
        checked = EncoderBatch(**vars(batch))
        assert all(getattr(checked, f) is v for f, v in vars(batch).items())


def _consume(protocol: PodProtocol, reads: list[tuple[int, bytes]]) -> tuple[EncoderBatch, list]:
    """Feed ``reads`` (receive ns, bytes) to ``protocol``; its frames and events."""
    batches, events = [], []
    writer = types.SimpleNamespace(append_encoder=lambda _, batch: batches.append(batch))
    protocol.link = types.SimpleNamespace(writer=writer, name="pods",
                                          event=lambda *e: events.append(e))  # fmt: skip
    for t_ns, data in reads:
        protocol.consume(t_ns, data)
    fields = ("host_ns", "device_ns", "seq", "counts", "yaw", "yaw_rate")
    return EncoderBatch(*(np.concatenate([getattr(b, f) for b in batches]) for f in fields)), events


@pytest.mark.parametrize("starved", [False, True])
@pytest.mark.parametrize("uptime_min", [20, 50, 71, 100])
def test_an_mcu_restart_after_its_clock_passed_half_its_range_is_a_restart(
    uptime_min: int, starved: bool
) -> None:
    """The Uno restarts on a replug or a reopen (DTR): its clock from 5 ms, seq and counters
    from 0. After an uptime of 35.8 to 71.6 min (mod 71.6) the clock's step looks forward,
    by more than the host's clock ran: it is a restart too, and the counts stay continuous.
    ``starved``: one read holds the frames before and after the restart."""
    k0, n, quiet_ns = uptime_min * 60 * 200, 400, 1_500_000_000  # frames; 1 s boot + 0.5 s
    counts = pods_util.make_samples(n=2 * n, seed=9).counts
    c_old, c_new = counts[:n], counts[n:] - counts[n]
    k = np.arange(n)
    old, _ = encode_binary((k0 + k) % 2**16, 5000 * (k0 + k + 1) % 2**32, c_old % 2**16, 16)
    new, flen = encode_binary(k, 5000 * (k + 1), c_new % 2**16, 16)
    recv = np.concatenate([5_000_000 * k, 5_000_000 * (n + k) + quiet_ns]) + 3_000_000
    ends = [e for e in range(4, 2 * n + 1, 4) if not (starved and n - 40 < e < n + 40)]
    reads = [(int(recv[b - 1]), (old + new)[a * flen : b * flen])
             for a, b in itertools.pairwise([0, *ends])]  # fmt: skip
    protocol = PodProtocol()
    b, events = _consume(protocol, reads)
    first = c_old[0] - np.where(c_old[0] % 2**16 >= 2**15, c_old[0] % 2**16 - 2**16, c_old[0])
    truth = np.concatenate([c_old, c_old[-1] + c_new]) - first
    np.testing.assert_array_equal(b.counts, truth)
    st = protocol.parser.stats
    assert st.resets == 1 and st.lost_frames == 0 and st.frames == 2 * n
    assert b.device_ns[n:].tolist() == (5_000_000 * (k + 1)).tolist()
    assert [e[1] for e in events] == ["note"]
    assert (np.diff(b.host_ns) >= 0).all()
    assert (b.host_ns <= np.repeat([r for r, _ in reads], [len(d) // flen for _, d in reads])).all()


def test_a_silence_after_a_read_late_by_the_tolerance_is_not_a_restart() -> None:
    """An unplug of 60 s (the MCU runs on) after frames all read RESTART_TOLERANCE_NS late (a
    reader starved from its start): the frames after it, that much more on time, are no
    restart."""
    n, gap = 400, 12_000  # frames each side; the silence in frames (60 s)
    k = np.concatenate([np.arange(n), gap + np.arange(n)])
    counts = pods_util.make_samples(n=2 * n, seed=9, step=5).counts
    data, flen = encode_binary(k % 2**16, 5000 * (k + 1), counts % 2**16, 16)
    recv = 5_000_000 * k + 3_000_000
    recv[:n] += RESTART_TOLERANCE_NS
    reads = [(int(recv[b - 1]), data[(b - 4) * flen : b * flen]) for b in range(4, 2 * n + 1, 4)]
    protocol = PodProtocol()
    b, _ = _consume(protocol, reads)
    st = protocol.parser.stats
    assert st.resets == 0 and st.lost_frames == gap - n and st.frames == 2 * n
    np.testing.assert_array_equal(b.counts - b.counts[0], counts - counts[0])


def test_a_starved_reader_stamps_frames_no_earlier_than_sampled_nor_a_read_later() -> None:
    """Reads every ~10 ms of the frames sampled 1 ms before, but for three starvations (3 s,
    3 s, 12 s: whole windows delayed): every stored host time lies between the frame's
    sampling and a read period after it (the clock's line under the on-time windows)."""
    rng, n = np.random.default_rng(1), 200 * 60
    k, starved = np.arange(n), ((10e9, 3e9), (25e9, 3e9), (40e9, 12e9))  # (start, ns)
    true = 10**12 + np.round(5_000_000 * k * (1 + 50e-6)).astype(np.int64)  # 50 ppm fast
    data, flen = encode_binary(k % 2**16, 5000 * (k + 1), np.zeros((n, 3), np.int64), 16)
    reads, t, i = [], float(true[0]), 0
    while i < n:
        t += 10e6 + rng.exponential(1e6)
        t += sum(d for s, d in starved if 0 <= t - true[0] - s < 11e6)
        j = min(int(np.searchsorted(true, t - 1e6, side="right")), n)
        if j > i:
            reads.append((int(t), data[i * flen : j * flen]))
            i = j
    b, _ = _consume(PodProtocol(), reads)
    err_ms = (b.host_ns - true) / 1e6
    assert err_ms.min() >= 0 and err_ms.max() <= 10, (err_ms.min(), err_ms.max())
