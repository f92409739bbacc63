"""The power-up sequencer with emulated A1s: order, brown-out, deadlines, port power."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from timing_util import SLACK_S

from sensorbench.drivers import kernels
from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.powerup import (
    DeviceSpec,
    DeviceSteps,
    PortPower,
    PowerUpResult,
    PowerUpSequencer,
    StreamSteps,
)
from sensorbench.errors import ConfigError, DriverError
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.emulator_base import SimClock
from sensorbench.sim.power import PowerBus
from sensorbench.sim.pty import Faults, PtyPort


class StartGate:
    """Lets devices start only together: once every one of ``n`` reached its start, in
    rank order, back to back (each start returns before the next begins); then nobody
    goes on to its first turn until ``bus`` has seen the round's ``n`` motor starts (each
    emulator sees its DTR on its own thread: under load the rear's could come after the
    front's first turn, and "together" would not be)."""

    def __init__(self, n: int, bus: PowerBus) -> None:
        self.n, self.bus = n, bus
        self.next = 0
        self.round_starts = 0
        self.barrier = threading.Barrier(n, action=self._new_round, timeout=10.0)
        self.turn = threading.Condition()

    def _new_round(self) -> None:
        self.next = 0
        self.round_starts = len(self.bus.motor_starts)

    def start(self, rank: int, start) -> None:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise DriverError("the other devices did not reach their start") from None
        with self.turn:
            self.turn.wait_for(lambda: self.next == rank, timeout=10.0)
            try:
                start()
            finally:
                self.next += 1
                self.turn.notify_all()
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not (
            self.next == self.n and len(self.bus.motor_starts) >= self.round_starts + self.n
        ):
            time.sleep(0.001)


class GatedSteps:
    """A device's own steps, its start through a :class:`StartGate`."""

    def __init__(self, steps: DeviceSteps, rank: int, gate: StartGate) -> None:
        self.steps, self.rank, self.gate = steps, rank, gate

    def __getattr__(self, name: str):
        return getattr(self.steps, name)

    def start(self) -> None:
        self.gate.start(self.rank, self.steps.start)


class TogetherSequencer(PowerUpSequencer):
    """The control experiment the stagger is measured against: every device brought up on
    its own thread, with the sequencer's retries, the starts of each attempt together."""

    def __init__(self, specs: list[DeviceSpec], bus: PowerBus, **kw) -> None:
        gate = StartGate(len(specs), bus)
        super().__init__([self._gated(s, rank, gate) for rank, s in enumerate(specs)], **kw)

    @staticmethod
    def _gated(spec: DeviceSpec, rank: int, gate: StartGate) -> DeviceSpec:
        factory = spec.steps or get_kind(spec.kind).steps
        return replace(spec, steps=lambda s: GatedSteps(factory(s), rank, gate))

    def bring_all(self) -> list[PowerUpResult]:
        results: dict[str, PowerUpResult] = {}
        threads = [
            threading.Thread(target=lambda s=s: results.update({s.name: self.bring_up(s)}))
            for s in self.specs
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60.0)
        return [results[s.name] for s in self.specs]


SPEED = 10.0


@pytest.fixture(autouse=True, scope="module")
def _kernels_compiled() -> None:
    """The decoders compiled (or loaded from numba's cache) before any timed bring-up, as
    `bring_up` does before powering devices: a cold compile (~25 s) inside a sequencer's
    run is not its deadline."""
    kernels.warm_up()


FRONT = bytes.fromhex("00112233445566778899aabbccddeeff")
REAR = bytes.fromhex("ffeeddccbbaa99887766554433221100")


def pair(tmp_path, bus: PowerBus | None = None, together: bool = False, **kw):
    """Two A1s with identical USB IDs (same emulator, same model) but their own serials.

    Each motor spins from power-on (nobody holds its port). Unless ``together``, the
    second is powered after the first one's inrush (plugged in one after the other);
    together, the bus browns out at power-on, before any software runs.
    """
    inrush_s = bus.inrush_s / SPEED if bus is not None else 0.15
    def one(name: str, serial: bytes) -> A1Emulator:
        link = str(tmp_path / f"lidar_{name}")
        return A1Emulator(name=name, link=link, power=bus, speed=SPEED, **kw,
                          unit=A1Unit(serial=serial))  # fmt: skip

    a = one("front", FRONT)
    if not together:
        time.sleep(inrush_s + 0.01)
    return a, one("rear", REAR)


def specs(a, b, delay_s: float = 0.2, ready_s: float = 1.0) -> list[DeviceSpec]:
    return [
        DeviceSpec(
            "lidar_front",
            "a1",
            a.link,
            delay_after_s=delay_s,
            ready_timeout_s=ready_s,
            read_timeout_s=0.5,
        ),
        DeviceSpec(
            "lidar_rear",
            "a1",
            b.link,
            delay_after_s=delay_s,
            ready_timeout_s=ready_s,
            read_timeout_s=0.5,
        ),
    ]


def brownout_bus(inrush_s: float = 1.5) -> PowerBus:
    # 1.5 simulated s of inrush per motor start = 0.15 s at 10x
    return PowerBus(inrush_s=inrush_s, mode="error", error_code=0x8002, clock=SimClock(SPEED))


# Started together, two motors brown the bus out when the second starts within the
# first's inrush. "Together" is back to back on one thread: the rear's motor starts after
# the front's scan request is answered, and each emulator sees its DTR on its own thread;
# on a loaded machine (load 15) one run in two went past a 0.5-s inrush and nothing browned
# out, and with a second copy of the suite beside it the front's scan request took longer
# than 1.5 s. These tests take 3 s of inrush (real time) and release the parked units
# 3.2 s apart, so the release still starts one motor per inrush.
TOGETHER_INRUSH_S = 30.0  # simulated s (3 s at 10x)
TOGETHER_DELAY_S = 3.2


def test_two_identical_a1s_come_up_in_order_with_their_serials(tmp_path):
    bus = brownout_bus()
    a, b = pair(tmp_path, bus)
    with a, b:
        t_begin = bus.clock.now()
        results = PowerUpSequencer(specs(a, b), retries=0).run()
        time.sleep(0.05)
        spinning = (a.motor_on, b.motor_on)
    assert [r.device for r in results] == ["lidar_front", "lidar_rear"]
    assert all(r.ready for r in results), [r.why for r in results]
    assert [r.serial for r in results] == [FRONT.hex().upper(), REAR.hex().upper()]
    assert [r.port for r in results] == [a.link, b.link]
    assert results[0].tty.startswith("/dev/pts/")
    # first turn: 0.5 s spin-up + at most two turns at 5.5 Hz, in simulated seconds
    for r in results:
        assert 0.5 / SPEED <= r.time_to_first_turn_s <= (0.5 + 2 / 5.5) / SPEED + 0.3
    (t_front, n_front), (t_rear, n_rear) = [m for m in bus.motor_starts if m[0] >= t_begin]
    assert (n_front, n_rear) == ("front", "rear")
    assert t_rear - t_front >= 0.2 * SPEED  # the rear starts after the delay...
    assert t_rear - t_front >= results[0].time_to_first_turn_s * SPEED  # ...after front's turn
    assert bus.brownouts == []
    assert spinning == (True, True)  # released at the end (keep=False): a free port spins


def _run_together(directory):
    """One run of two A1s started together by :class:`TogetherSequencer` (one retry):
    the bus, the results, the host seconds it took, the bus time it began and the motor
    starts since (simulated s)."""
    directory.mkdir()
    bus = brownout_bus(TOGETHER_INRUSH_S)
    a, b = pair(directory, bus)
    with a, b:
        t_begin = bus.clock.now()
        t0 = time.monotonic()
        sequencer = TogetherSequencer(
            specs(a, b, TOGETHER_DELAY_S, ready_s=0.5), bus, retries=1, backoff_s=0.05
        )
        results = sequencer.run()
        elapsed = time.monotonic() - t0
        # each emulator takes a DTR change on its own thread: on a loaded host the second
        # attempt's motor starts can land after the sequencer gave up (bounded wait)
        deadline = time.monotonic() + 10.0
        while len([m for m in bus.motor_starts if m[0] >= t_begin]) < 4:
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    return bus, results, elapsed, t_begin, [t for t, _ in bus.motor_starts if t >= t_begin]


def test_started_together_they_brown_out_and_fail(tmp_path):
    # "Together" is the host's scheduling: beside a second copy of the suite an attempt's
    # two motor starts once landed 3.2 s apart (the front's scan request answered late),
    # past the 3-s inrush, so nothing browned out and the case under test never happened.
    # Such a run is repeated (at most three runs); what is asserted is unchanged.
    for k in range(3):
        bus, results, elapsed, t_begin, starts = _run_together(tmp_path / f"run{k}")
        gaps = np.diff(starts)[0:3:2]  # front to rear, in each of the two attempts
        if len(starts) >= 4 and np.all(gaps < bus.inrush_s):
            break
    else:
        pytest.fail(f"in 3 runs the starts were never together (last: {starts})")
    assert [r.ready for r in results] == [False, False]
    front, rear = results
    # the front's scan was running when the rear's motor (DTR cleared) browned the bus
    # out: its scan stopped and its health reads error; the rear's scan request came
    # after the brown-out and met the protection stop: no answer at all
    assert "no complete valid turn within 0.5 s" in front.why
    assert "health now error (code 0x8002)" in front.why
    assert "0 of 7 bytes of a response descriptor" in rear.why
    assert front.attempts == rear.attempts == 2
    # once per attempt (the reset cleared it, then again); the failed units are held
    # stopped between attempts and released one at a time at the end: no third
    assert len([x for x in bus.brownouts if x.t_s >= t_begin]) == 2
    # bounded by the sequencer's own deadlines: two attempts of the health check and the
    # scan's descriptor (0.5 s each) and the wait for the first turn (ready 0.5 s + 3 reads
    # of 0.5 s + 2 s), the backoff, then the release
    deadlines_s = 2 * (0.5 + 0.5 + 0.5 + 3 * 0.5 + 2.0) + 0.05 + TOGETHER_DELAY_S
    assert elapsed < deadlines_s + SLACK_S, elapsed


def test_staggered_under_the_same_brownout_model_succeeds(tmp_path):
    bus = brownout_bus()
    a, b = pair(tmp_path, bus)
    with a, b:
        results = PowerUpSequencer(specs(a, b, delay_s=0.2), retries=0).run()
    assert [r.ready for r in results] == [True, True]
    assert bus.brownouts == []


def test_silent_brownout_mode_fails_together_too(tmp_path):
    # as above: a run whose two motor starts the host scheduled past the inrush apart
    # (nothing browned out, the front came up) is repeated, at most three runs
    for k in range(3):
        bus = PowerBus(TOGETHER_INRUSH_S, mode="silent", outage_s=20.0, clock=SimClock(SPEED))
        (tmp_path / f"run{k}").mkdir()
        a, b = pair(tmp_path / f"run{k}", bus)
        with a, b:
            t_begin = bus.clock.now()
            sequencer = TogetherSequencer(specs(a, b, TOGETHER_DELAY_S, ready_s=0.5), bus,
                                          retries=0)  # fmt: skip
            results = sequencer.run()
        starts = [t for t, _ in bus.motor_starts if t >= t_begin]
        if len(starts) >= 2 and starts[1] - starts[0] < bus.inrush_s:
            break
    else:
        pytest.fail(f"in 3 runs the starts were never together (last: {starts})")
    assert [r.ready for r in results] == [False, False]
    front, rear = results  # both rebooted: silent for 20 simulated s
    assert "no complete valid turn" in front.why and "no health answer" in front.why
    assert "0 of 7 bytes of a response descriptor" in rear.why


def test_silent_a1_fails_within_its_deadline(tmp_path):
    with A1Emulator(speed=SPEED, faults=Faults(slow_start_s=60.0)) as emu:
        spec = DeviceSpec("lidar_front", "a1", emu.path, read_timeout_s=0.4, ready_timeout_s=5)
        t0 = time.monotonic()
        (r,) = PowerUpSequencer([spec], retries=0).run()
        elapsed = time.monotonic() - t0
    assert not r.ready and np.isnan(r.time_to_first_turn_s)
    assert "0 of 7 bytes" in r.why
    assert r.attempts == 1  # retries=0: one request deadline, not a retry
    assert 0.4 <= elapsed < 0.4 + SLACK_S


def test_a1_that_answers_but_never_turns_fails_at_the_ready_deadline():
    with A1Emulator(speed=SPEED, unit=A1Unit(spinup_s=1e6)) as emu:  # motor never reaches speed
        spec = DeviceSpec("lidar_front", "a1", emu.path, read_timeout_s=0.3, ready_timeout_s=0.6)
        t0 = time.monotonic()
        (r,) = PowerUpSequencer([spec], retries=0).run()
        elapsed = time.monotonic() - t0
    assert not r.ready
    assert r.serial  # it did answer GET_INFO
    assert "no complete valid turn within 0.6 s" in r.why
    assert r.attempts == 1
    assert 0.6 <= elapsed < 0.6 + 0.3 + SLACK_S  # ready deadline + the health query after it


def test_retries_with_backoff_until_the_device_answers():
    with A1Emulator(speed=SPEED, faults=Faults(slow_start_s=0.5)) as emu:
        spec = DeviceSpec("lidar_front", "a1", emu.path, read_timeout_s=0.2, ready_timeout_s=1)
        (r,) = PowerUpSequencer([spec], retries=3, backoff_s=0.1).run()
    assert r.ready and r.attempts >= 2


def test_health_error_is_reset_once_during_bringup():
    with A1Emulator(speed=SPEED) as emu:
        emu.set_health(2, 0x8003)
        spec = DeviceSpec("lidar_front", "a1", emu.path, read_timeout_s=0.5, ready_timeout_s=1)
        (r,) = PowerUpSequencer([spec], retries=0).run()
        assert emu.requests.count(0x40) == 1
    assert r.ready


def test_keep_hands_running_scanners_over():
    with A1Emulator(speed=SPEED) as emu:
        spec = DeviceSpec("lidar_front", "a1", emu.path, read_timeout_s=0.5, ready_timeout_s=1)
        seq = PowerUpSequencer([spec], retries=0)
        (r,) = seq.run(keep=True)
        scanner = seq.handles["lidar_front"]
        assert r.ready and emu.motor_on and scanner.link.connected
        log = list(emu.motor_log)
        seq.close()
        assert seq.handles == {}
        time.sleep(0.05)
        assert emu.motor_on and emu.motor_log == log  # released while spinning: no toggle


def test_stream_steps_for_a_device_without_commands():
    """An LD19-like device: no requests, ready after enough valid packets (within a
    deadline that carries the scheduling slack: three 5-ms packets, on a loaded host)."""
    port = PtyPort(baud=230400)
    stop = False

    def count_valid(chunk: bytes) -> int:
        return chunk.count(b"\x54\x2c")

    def feed():
        while not stop:
            port.send(b"\x54\x2c" + bytes(45))
            time.sleep(0.005)

    t = threading.Thread(target=feed, daemon=True)
    t.start()
    try:
        spec = DeviceSpec(
            "ld19",
            "test_stream",
            port.path,
            ready_timeout_s=1.0 + SLACK_S,
            steps=lambda s: StreamSteps(s, 230400, count_valid, 3),
        )
        (r,) = PowerUpSequencer([spec], retries=0).run()
        assert r.ready and r.serial == ""
        spec_bad = DeviceSpec(
            "ld19",
            "test_stream",
            port.path,
            ready_timeout_s=0.3,
            steps=lambda s: StreamSteps(s, 230400, lambda c: 0, 3),
        )
        (r,) = PowerUpSequencer([spec_bad], retries=0).run()
        assert not r.ready and "0 valid packets" in r.why
    finally:
        stop = True
        t.join(1)
        port.close()


def test_the_sequencer_takes_its_kinds_from_the_one_registry():
    """Every registered kind can be sequenced (its steps come from the registry); an
    unknown one is refused before anything opens, naming the known ones."""
    for name in ("a1", "ld19", "ld06", "pods"):
        PowerUpSequencer([DeviceSpec("dev", name, "/dev/null")])
    with pytest.raises(ConfigError, match=r"dev: cannot sequence it: unknown device kind 'x9'"):
        PowerUpSequencer([DeviceSpec("dev", "x9", "/dev/null")])


def test_port_power_commands_and_paths(tmp_path):
    p = PortPower(hub="1-1.4", port=2)
    assert p.uhubctl_command(True) == ["uhubctl", "-l", "1-1.4", "-p", "2", "-a", "on"]
    assert p.uhubctl_command(False)[-1] == "off"
    s = PortPower(hub="1-1", port=3, method="sysfs")
    assert str(s.sysfs_disable_path()) == "/sys/bus/usb/devices/1-1/1-1:1.0/1-1-port3/disable"
    root = PortPower(hub="2", port=1, method="sysfs")
    assert str(root.sysfs_disable_path()) == "/sys/bus/usb/devices/usb2/2-0:1.0/usb2-port1/disable"
    for bad in ("1-1; rm -rf /", "../1-1", ""):
        with pytest.raises(ConfigError):
            PortPower(hub=bad, port=1)
    with pytest.raises(ConfigError):
        PortPower(hub="1-1", port=0)
    with pytest.raises(ConfigError):
        PortPower(hub="1-1", port=1, method="relay")


def test_port_power_switching_runs_the_built_command(tmp_path):
    calls = []

    def runner(argv, **kw):
        calls.append(argv)
        return SimpleNamespace(returncode=0, stderr="")

    PortPower("1-1", 2).switch(True, runner=runner)
    assert calls == [["uhubctl", "-l", "1-1", "-p", "2", "-a", "on"]]

    def failing(argv, **kw):
        return SimpleNamespace(returncode=1, stderr="No compatible devices detected!")

    with pytest.raises(DriverError, match="per-port power"):
        PortPower("1-1", 2).switch(False, runner=failing)

    def missing(argv, **kw):
        raise FileNotFoundError(argv[0])

    with pytest.raises(DriverError, match="apt-get install uhubctl"):
        PortPower("1-1", 2).switch(True, runner=missing)

    def slow(argv, **kw):
        raise subprocess.TimeoutExpired(argv, 10)

    with pytest.raises(DriverError, match="did not finish"):
        PortPower("1-1", 2).switch(True, runner=slow)

    s = PortPower("1-1", 3, method="sysfs")
    f = s.sysfs_disable_path(tmp_path)
    f.parent.mkdir(parents=True)
    f.write_text("1")
    s.switch(True, sysfs_root=tmp_path)
    assert f.read_text() == "0"
    s.switch(False, sysfs_root=tmp_path)
    assert f.read_text() == "1"
    with pytest.raises(DriverError, match=r"Linux >= 6\.0"):
        PortPower("1-2", 1, method="sysfs").switch(True, sysfs_root=tmp_path)


def test_powered_port_that_never_shows_a_tty_fails(tmp_path):
    calls = []
    spec = DeviceSpec(
        "lidar_front",
        "a1",
        str(tmp_path / "never"),
        read_timeout_s=0.2,
        power=PortPower("1-1", 2, settle_s=0.2),
    )
    runner = lambda argv, **kw: calls.append(argv) or SimpleNamespace(returncode=0, stderr="")  # noqa: E731
    (r,) = PowerUpSequencer([spec], retries=0, runner=runner).run()
    assert not r.ready and "did not appear within 0.2 s" in r.why
    # switched off first (the stagger covers enumeration), then on at its turn
    assert calls == [
        ["uhubctl", "-l", "1-1", "-p", "2", "-a", "off"],
        ["uhubctl", "-l", "1-1", "-p", "2", "-a", "on"],
    ]


def test_bad_configuration_is_refused():
    with pytest.raises(ConfigError, match="unique"):
        PowerUpSequencer([DeviceSpec("a", "a1", "/x"), DeviceSpec("a", "a1", "/y")])
    with pytest.raises(ConfigError, match="known"):
        PowerUpSequencer([DeviceSpec("a", "lidar9000", "/x")])


KILLED_SCANNER = """
import sys, time
from sensorbench.drivers.a1_reader import A1Scanner
sc = A1Scanner(sys.argv[1], read_timeout_s=1.0)
sc.open()
sc.start()
print("scanning", flush=True)
time.sleep(60)
"""


def test_bringup_after_a_sigkilled_scanner_works_the_first_time():
    # a capture killed while scanning leaves the unit scanning; the next open asserts
    # DTR, the head stops, so no byte says so and every request is ignored until a STOP
    with A1Emulator(speed=4.0) as emu:
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_SCANNER, emu.path], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "scanning"
        finally:
            proc.kill()
            proc.wait(10)
        assert emu.scanning  # what the killed process left behind
        seq = PowerUpSequencer([DeviceSpec("a1", "a1", emu.path, read_timeout_s=0.5)])
        (row,) = seq.run()
        assert row.ready and row.attempts == 1, row
