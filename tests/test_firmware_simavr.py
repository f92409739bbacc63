"""The built ATmega328P image under simavr, read by the real pod reader through a pty.

Nothing is mocked: ``make -C firmware`` builds the image and the harness; the harness
runs the image, drives its encoder pins with quadrature edges from a trajectory and
writes its UART to a pty; a :class:`~sensorbench.drivers.pods_reader.PodProtocol` on the link opens
the pty with pyserial. The trajectories have a row at every 5 ms latch instant of
the firmware, and the harness puts no edge on a row's time, so the counts the
firmware latches are exactly the rows' counts (minus the counts at its boot):
the expectation below is read off the trajectory, not computed by the emulator.

Simulated time runs as fast as the machine allows (``speed=0``) and waits whenever
the reader falls behind (the pty is full): the checks are on counts, ``seq``, ``t_us``
and CRCs, never on wall time, so a loaded machine makes the tests slower, not wrong.
"""

from __future__ import annotations

import math
import subprocess
import time

import firmware_util
import numpy as np
import pytest
import serial
from pods_util import FrameSink

from sensorbench.drivers.pods_parser import PodFrames, PodStreamParser
from sensorbench.drivers.pods_reader import PodProtocol
from sensorbench.drivers.serial_link import LinkConfig, SerialLink
from sensorbench.drivers.serial_port import open_serial, read_for
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.errors import SimError
from sensorbench.sim.emulator_firmware import FirmwarePodEmulator, Injected
from sensorbench.sim.pod_trajectory import PodTrajectory

PERIOD_US = 5000
DEADLINE_S = 120.0  # a run of a few simulated seconds, on a machine busy with others


@pytest.fixture(scope="module")
def elf():
    firmware_util.product("harness")
    return firmware_util.product("avr")


def grid_trajectory(seconds: float, rates: tuple[float, ...], seed: int = 0) -> PodTrajectory:
    """Rows every 5 ms: per pod a constant rate (counts/s) plus a random walk."""
    t = np.arange(round(seconds * 1e6 / PERIOD_US) + 1, dtype=np.int64) * PERIOD_US
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.integers(-20, 21, size=(t.size, len(rates))), axis=0)
    counts = np.round(np.outer(t * 1e-6, rates)).astype(np.int64) + walk - walk[0]
    return PodTrajectory(t, counts + np.arange(len(rates)) * 1000)


def knot_counts(traj: PodTrajectory, traj_us: np.ndarray) -> np.ndarray:
    """The rows' counts at trajectory times on the 5 ms grid (last row after the end)."""
    assert np.all(traj_us % PERIOD_US == 0)
    return traj.counts[np.minimum(traj_us // PERIOD_US, traj.t_us.size - 1)]


def record(em: FirmwarePodEmulator, protocol: PodProtocol | None = None, **options) -> tuple:
    """Open the reader, power the MCU on, read until the trajectory is over."""
    protocol = protocol or PodProtocol(**options)
    config = LinkConfig(first_valid_timeout_s=None)
    sink = FrameSink(protocol.parser.n_pods)
    reader = SerialReader(SerialLink("pods", em.link, protocol, writer=sink, config=config))
    reader.start()
    try:
        em.start()
        assert em.finished.wait(DEADLINE_S), em.errors
        deadline = time.monotonic() + 30.0  # the reader drains what the pty holds
        while reader.status().since_last_data_s < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        status = reader.status()
    finally:
        reader.stop()
        em.stop()
    assert not em.errors
    return sink.collected(), protocol.parser.stats, status


def boots_of(device_ns: np.ndarray) -> np.ndarray:
    """Boot index of each frame: the MCU clock restarts at every boot."""
    return np.r_[0, np.cumsum(np.diff(device_ns) < 0)]


def test_every_frame_exact_through_wraps_and_a_reset(elf) -> None:
    # pod 0 turns 40 000 counts/s (its 16-bit counter wraps every 1.6 s), pod 1 backwards
    traj = grid_trajectory(2.0, (40_000.0, -9_000.0, 150.0))
    em = FirmwarePodEmulator(elf, traj, speed=0, auto_reset=False, boot_s=0.1,
                             inject=Injected(reset_at_us=(1_400_000,)))  # fmt: skip
    frames, stats, status = record(em)
    assert stats.crc_errors == 0 and stats.lost_frames == 0 and stats.bytes_skipped == 0
    assert status.crc_errors == 0 and status.drops == 0
    assert stats.resets == 1 and len(em.resets) == 1 and len(em.boots) == 2
    # the restart lands on the first boot's latch grid, one hold after the reset
    assert em.boots[0].traj_us == 0
    assert em.boots[1].traj_us % PERIOD_US == 0
    assert em.boots[1].traj_us - em.resets[0] == pytest.approx(100_000, abs=100)

    t_us = frames.device_ns // 1000
    boot = boots_of(frames.device_ns)
    np.testing.assert_array_equal(frames.seq, np.arange(len(frames.seq)))  # none lost
    for k in (0, 1):
        mine = t_us[boot == k]
        # seq and t_us from 0 at each boot: latches every 5 ms from the first one
        np.testing.assert_array_equal(mine, PERIOD_US * np.arange(1, mine.size + 1))
    # boot 0 streams until the reset (the frame latched within ~2 ms of it may be lost
    # with the MCU's RAM); boot 1 to the end of the trajectory and its tail
    assert t_us[boot == 0][-1] >= em.resets[0] - 2 * PERIOD_US
    assert em.boots[1].traj_us + t_us[boot == 1][-1] >= traj.t_us[-1] - traj.t_us[0]

    # the counts: the trajectory at each latch, minus the counts at the firmware's boot
    start = knot_counts(traj, np.array([b.traj_us for b in em.boots]))
    np.testing.assert_array_equal(np.array([b.base for b in em.boots]), start)
    firmware = np.concatenate(
        [knot_counts(traj, em.boots[k].traj_us + t_us[boot == k]) - start[k] for k in (0, 1)]
    )
    # the host's cumulative counts: boot 0 from its first frame; at the reset the new
    # counters (from 0) are added to where the counts were
    first = boot == 0
    np.testing.assert_array_equal(frames.counts[first], firmware[first])
    last0 = frames.counts[first][-1]
    np.testing.assert_array_equal(frames.counts[~first], last0 + firmware[~first])
    assert firmware[:, 0].max() > 2**15  # past the signed 16-bit range: the wire wrapped
    # the emulator's own truth (the harness's edge rule) agrees with the rows
    for k in (0, 1):
        expected = firmware_util.expected_counts(em, k, t_us[boot == k])
        np.testing.assert_array_equal(expected, firmware[boot == k])
    assert np.isnan(frames.yaw).all()  # the AVR image has no IMU


def test_a_reset_during_another_s_hold_starts_the_hold_over(elf) -> None:
    # as pressing RESET during the bootloader's wait: the second reset (inside the
    # first's 0.1 s hold) holds the MCU for another 0.1 s, then one boot follows, on
    # the latch grid, its every frame exact
    traj = grid_trajectory(1.0, (20_000.0, -5_000.0, 700.0), seed=4)
    em = FirmwarePodEmulator(elf, traj, speed=0, auto_reset=False, boot_s=0.1,
                             inject=Injected(reset_at_us=(300_000, 320_000)))  # fmt: skip
    frames, stats, _ = record(em)
    assert len(em.resets) == 2 and len(em.boots) == 2
    assert stats.resets == 1 and stats.lost_frames == 0
    assert em.boots[1].traj_us % PERIOD_US == 0
    assert em.boots[1].traj_us - em.resets[1] == pytest.approx(100_000, abs=100)
    t_us = frames.device_ns // 1000
    boot = boots_of(frames.device_ns)
    offset = 0
    for k, b in enumerate(em.boots):
        start = knot_counts(traj, np.array([b.traj_us]))
        firmware = knot_counts(traj, b.traj_us + t_us[boot == k]) - start
        np.testing.assert_array_equal(frames.counts[boot == k], offset + firmware)
        offset = frames.counts[boot == k][-1]


def test_dtr_resets_the_uno_on_every_open(elf, tmp_path) -> None:
    # an Uno or Nano: opening the port asserts DTR, which resets the MCU; it is silent
    # for the bootloader's wait (0.2 s here), then starts over from seq 0, t_us 0.
    # At real rate (speed 1: simulated time never runs ahead of the wall clock), so that
    # what the open's own input flush (pyserial's, after DTR) can discard of the new
    # boot follows from how long the open took
    traj = grid_trajectory(0.5, (3_000.0, -2_000.0, 500.0), seed=3)
    em = FirmwarePodEmulator(elf, traj, speed=1, loop=True, boot_s=0.2,
                             link=tmp_path / "pods")  # fmt: skip
    em.start()
    try:
        time.sleep(0.2)  # the MCU has been streaming since power-on
        opened, open_s = [], []
        for _ in range(2):
            t_open = time.monotonic()
            ser = open_serial(em.link, 115200, timeout_s=0.05)
            open_s.append(time.monotonic() - t_open)
            try:
                data = read_for(ser, 30.0, enough=18 * 150)
            finally:
                ser.close()
            opened.append(data)
            deadline = time.monotonic() + 10
            while len(em.boots) < len(opened) + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        em.stop()
    assert not em.errors
    assert len(em.resets) == 2 and len(em.boots) == 3  # one reset per open, none per close
    for k, data in enumerate(opened, start=1):
        parser = PodStreamParser(3, 16, "binary")
        f = parser.feed(data)
        assert parser.stats.crc_errors == 0
        new = np.flatnonzero(f.new_epoch)
        # frames of the old boot may still arrive between the open and the reset
        after = new[0] if new.size else 0
        t_us = f.device_ns[after:] // 1000
        # the new boot's first frames are t_us 5000, 10000, ...: those sent before the
        # open's flush are gone, at most one per period of the open's time past the boot
        flushed = max(0, math.ceil((open_s[k - 1] - 0.2) * 1e6 / PERIOD_US))
        assert t_us[0] % PERIOD_US == 0 and t_us[0] <= PERIOD_US * (1 + flushed), (
            t_us[0],
            open_s,
        )
        np.testing.assert_array_equal(t_us, t_us[0] + PERIOD_US * np.arange(t_us.size))
        seq_raw = f.seq[after:] - f.seq[after]
        np.testing.assert_array_equal(t_us, PERIOD_US * np.arange(1, t_us.size + 1))
        np.testing.assert_array_equal(seq_raw, np.arange(t_us.size))
        boot = em.boots[k]
        counts = f.counts[after:] - (f.counts[after - 1] if after else 0)
        np.testing.assert_array_equal(counts, firmware_util.expected_counts(em, k, t_us))
        assert boot.traj_us - em.resets[k - 1] == pytest.approx(200_000, abs=100)


def test_simulated_time_never_runs_ahead_of_the_wall_clock(elf) -> None:
    # paced at real time the harness may fall behind on a loaded machine (it waits,
    # never skips), but it never runs ahead: 0.4 s of trajectory take ≥ 0.4 s
    traj = grid_trajectory(0.4, (1_000.0, 0.0, -300.0))
    em = FirmwarePodEmulator(elf, traj, speed=1.0, auto_reset=False)
    t0 = time.monotonic()
    frames, stats, _ = record(em)
    assert em.finished.is_set()
    assert time.monotonic() - t0 >= 0.4
    assert stats.lost_frames == 0 and len(frames.seq) >= 80
    t_us = frames.device_ns // 1000
    np.testing.assert_array_equal(frames.counts, knot_counts(traj, t_us) - traj.counts[0])


def test_a_32_bit_build_sends_32_bit_counters(elf, tmp_path) -> None:
    # make PODS_COUNTER_BITS=32: 24-byte frames whose counters go past 2^16 unwrapped
    build = tmp_path / "build"
    done = subprocess.run(
        ["make", "-C", str(firmware_util.FIRMWARE), f"BUILD={build}", "PODS_COUNTER_BITS=32",
         "avr"], capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    traj = grid_trajectory(1.0, (75_000.0, -60_000.0, 10.0), seed=9)
    em = FirmwarePodEmulator(build / "avr" / "pods-atmega328p.elf", traj, speed=0,
                             auto_reset=False)  # fmt: skip
    frames, stats, _ = record(em, counter_bits=32)
    assert stats.layout_mismatch == 0 and stats.crc_errors == 0 and stats.lost_frames == 0
    # 24 bytes, 32 with the error block (every 16th frame: nothing was lost)
    assert stats.bytes_in == 24 * len(frames.seq) + 8 * int(np.sum(frames.seq % 16 == 0))
    t_us = frames.device_ns // 1000
    np.testing.assert_array_equal(frames.counts, knot_counts(traj, t_us) - traj.counts[0])
    assert frames.counts[:, 0].max() > 2**16


def edge_rate_run(elf, rate: float, phase_deg: float) -> tuple[int, int, int]:
    """Pods at rate, 0.97 × and 0.94 × rate (their edges drift through every relative
    phase), 0.5 s: (largest count error, frames lost, lost edge pairs the frames
    reported); the frames lost are exactly the overruns the frames reported."""
    traj = grid_trajectory(0.5, (rate, -0.97 * rate, 0.94 * rate), seed=7)
    em = FirmwarePodEmulator(
        elf, traj, speed=0, auto_reset=False, inject=Injected(phase_deg=phase_deg)
    )
    frames, stats, _ = record(em)
    t_us = frames.device_ns // 1000
    error = np.abs(frames.counts - (knot_counts(traj, t_us) - traj.counts[0])).max()
    assert stats.overruns == stats.lost_frames
    return int(error), int(stats.lost_frames), int(stats.quad_errors)


@pytest.mark.parametrize(("phase_deg", "stated"), [(90.0, 91_000.0), (55.0, 60_000.0)])
def test_counts_are_exact_up_to_the_stated_edge_rate(elf, phase_deg, stated) -> None:
    # firmware/README.md: every count and frame up to these rates per pod with all
    # three pods moving (ideal quadrature, or 35° of phase error); 25 % faster, counts
    # or frames are lost, and the frames say so: every lost frame is an overrun they
    # report, every count missing is in a lost edge pair they report (or one edge
    # that came with the latch and is in the next frame)
    assert edge_rate_run(elf, stated, phase_deg) == (0, 0, 0)
    error, lost, pairs = edge_rate_run(elf, 1.25 * stated, phase_deg)
    assert error > 0 or lost > 0
    assert error <= 2 * pairs + 1


def test_a_trajectory_value_beyond_64_bits_is_refused_with_file_and_line(tmp_path) -> None:
    # numpy's int64 conversion raised OverflowError through `emulate pods --trajectory`
    bad = tmp_path / "big.txt"
    bad.write_text("0 0\n99999999999999999999 5\n")
    with pytest.raises(SimError, match=r"big.txt:2: a value beyond 64-bit integers"):
        PodTrajectory.read(bad)
    bad.write_text(f"0 0\n5000 {-(1 << 63)}\n")  # the smallest int64 is one
    assert PodTrajectory.read(bad).counts[-1, 0] == -(1 << 63)


def test_a_trajectory_over_the_text_input_cap_is_refused_before_it_is_read(tmp_path) -> None:
    # it was read whole, however large (a session passed by mistake, a runaway log)
    from sensorbench.logs.toml_schema import MAX_TEXT_BYTES

    big = tmp_path / "huge.txt"
    with big.open("wb") as f:
        f.write(b"0 0\n5000 1\n")
        f.truncate(MAX_TEXT_BYTES + 1)
    with pytest.raises(SimError, match=rf"huge.txt: cannot read trajectory: {MAX_TEXT_BYTES + 1} "
                       rf"bytes, more than a trajectory can be \(16 MiB\)"):  # fmt: skip
        PodTrajectory.read(big)


def test_bad_trajectories_are_refused_with_file_and_line(elf, tmp_path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("# t_us c0\n0 0\n5000 10\n5000 12\n")
    with pytest.raises(SimError, match=r"bad.txt:4: t_us 5000 does not increase"):
        PodTrajectory.read(bad)
    bad.write_text("0 0 1\n5000 x 2\n")
    with pytest.raises(SimError, match=r"bad.txt:2: expected integers"):
        PodTrajectory.read(bad)
    # the harness checks its input on its own as well
    done = subprocess.run(
        [str(firmware_util.product("harness")), "--elf", str(elf), "--trajectory", str(bad),
         "--pty"], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "bad.txt:2" in done.stderr
    with pytest.raises(SimError, match="no such firmware image"):
        FirmwarePodEmulator(tmp_path / "missing.elf", grid_trajectory(0.1, (1.0,)))


def test_the_harness_alone_serves_its_own_pty(elf, tmp_path) -> None:
    # firmware/README.md: `pods_harness --elf ... --trajectory ... --pty` prints a pty
    traj = grid_trajectory(0.3, (2_000.0, 0.0, -500.0))
    path = tmp_path / "traj.txt"
    traj.write(path)
    proc = subprocess.Popen(
        [str(firmware_util.product("harness")), "--elf", str(elf), "--trajectory", str(path),
         "--pty", "--speed", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        words = proc.stdout.readline().split()
        assert words[0] == "pty"
        with serial.Serial(words[1], 115200, timeout=0.05) as ser:
            data = read_for(ser, 30.0, enough=18 * 50)
    finally:
        proc.communicate("quit\n", timeout=30)
    assert proc.returncode == 0
    parser = PodStreamParser(3, 16, "binary")
    f = parser.feed(data)
    assert len(f) >= 40 and parser.stats.crc_errors == 0
    t_us = f.device_ns // 1000
    np.testing.assert_array_equal(
        f.counts - f.counts[0],
        (knot_counts(traj, t_us) - traj.counts[0]) - (knot_counts(traj, t_us[:1]) - traj.counts[0]),
    )


def test_injected_double_edges_are_reported_exactly(elf) -> None:
    # both lines of a pod changing between two looks of the pin-change interrupt lose
    # two counts; the firmware counts each such edge pair and every frame carries it
    rates = np.array([2000.0, -1500.0, 800.0])
    t = np.arange(201, dtype=np.int64) * PERIOD_US  # 1 s, straight lines
    traj = PodTrajectory(t, np.round(np.outer(t * 1e-6, rates)).astype(np.int64))
    doubles = ((0, 100_000), (0, 420_000), (0, 730_000), (1, 250_000), (1, 600_000), (2, 510_000))
    em = FirmwarePodEmulator(
        elf, traj, speed=0, auto_reset=False, inject=Injected(double_edges=doubles)
    )
    protocol = PodProtocol()
    parts: list[PodFrames] = []
    feed = protocol.parser.feed
    protocol.parser.feed = lambda *a: parts.append(feed(*a)) or parts[-1]  # type: ignore[method-assign]
    _, stats, status = record(em, protocol)
    frames = PodFrames.concat(parts)
    assert len(em.doubles) == len(doubles)  # the harness applied every one
    per_pod = np.bincount([p for p, _ in em.doubles], minlength=3)
    np.testing.assert_array_equal(frames.quad_errors[-1], per_pod)
    assert stats.quad_errors == len(doubles) and stats.overruns == 0 and stats.lost_frames == 0
    assert status.drops == len(doubles)  # the status line's drops count them
    losses = [m for _, kind, m in protocol.link.events if kind == "count_loss"]
    assert len(losses) >= 1 and all("latches (queue full)" in m for m in losses)
    # and the counts are short by exactly two per double edge, from the next latch on
    t_us = frames.device_ns // 1000
    truth = knot_counts(traj, t_us) - traj.counts[0]
    before = np.array([[sum(q == k and at < x for q, at in em.doubles) for k in range(3)]
                       for x in t_us])  # fmt: skip
    np.testing.assert_array_equal(truth - frames.counts, 2 * np.sign(rates) * before)
    np.testing.assert_array_equal(frames.quad_errors, before)
