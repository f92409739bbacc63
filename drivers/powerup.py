"""Staggered power-up of a robot's serial devices, one after another, with a verdict
table. Times in seconds (docs/A1.md, Power-up).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import serial

from sensorbench.drivers import a1_kind
from sensorbench.drivers.a1_reader import A1Scanner
from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.kernels import warm_up
from sensorbench.drivers.port_power import PortPower
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import ConfigError, DriverError
from sensorbench.logs import TurnFlag

A1_READY_POINTS = 100  # points of the first complete valid turn that makes an A1 ready
StepsFactory = Callable[["DeviceSpec"], "DeviceSteps"]
log = logging.getLogger("sensorbench.powerup")


@dataclass
class DeviceSpec:
    """One device to bring up (``kind``: a registered one), with deadlines (s): the wait
    after it is ready before the next starts, for the first complete valid turn after the
    start, for each request/answer while opening. ``options``: kind-specific extras
    (``config``: the device's configuration, which a streaming kind's steps need;
    ``scan_mode`` for an A1). ``steps``: a steps factory instead of the
    registered kind's (a device outside the registry, e.g. in a test).
    """

    name: str
    kind: str
    port: str
    delay_after_s: float = 2.0
    ready_timeout_s: float = 5.0
    read_timeout_s: float = 1.0
    power: PortPower | None = None
    options: dict[str, Any] = field(default_factory=dict)
    steps: StepsFactory | None = None


@dataclass
class PowerUpResult:
    """One row of the bring-up table.

    ``time_to_first_turn_s`` is from the start command to the first complete valid
    turn (or packet) (s), nan when not ready. ``warning`` says what went wrong that
    did not stop the device (its port power could not be switched: staggered by DTR).
    """

    device: str
    kind: str
    port: str
    tty: str
    serial: str
    ready: bool
    why: str
    time_to_first_turn_s: float
    attempts: int
    warning: str = ""


class DeviceSteps:
    """The device-specific part of bringing one device up; the defaults suit a device
    that only streams. Every method must return or raise :class:`DriverError` within its
    deadline."""

    handle: Any

    def open(self) -> str:
        """Open and identify; return the device's serial (``""`` if it has none)."""
        raise NotImplementedError

    def check(self) -> None:
        """Health check (reset once on error); DriverError if unusable. Nothing to ask a
        streaming device."""

    def start(self) -> None:
        """Start the device (motor/scan); a streaming device streams by itself."""

    def wait_ready(self, timeout_s: float) -> None:
        """Wait for the first complete valid turn (or packet); DriverError after timeout_s."""
        raise NotImplementedError

    def idle(self) -> None:
        """Drain input while the sequencer waits (must not block)."""

    def park(self) -> bool:
        """Hold the device still with its port open (an A1: motor stopped by DTR); False,
        doing nothing, for a device without anything to hold (a streaming device is not
        opened ahead of its turn)."""
        return False

    def close(self) -> None:
        """Stop and close (best effort, never raises)."""


class A1Steps(DeviceSteps):
    """Bring-up of an RPLIDAR A1 (option ``scan_mode``: default the configuration's,
    ``typical`` without one); ready at a valid turn of :data:`A1_READY_POINTS` points."""

    def __init__(self, spec: DeviceSpec) -> None:
        mode = spec.options.get("scan_mode") or a1_kind.scan_mode(spec.options.get("config"))
        self.handle = A1Scanner(spec.port, read_timeout_s=spec.read_timeout_s, scan_mode=mode)

    def open(self) -> str:
        """Connect and GET_INFO; returns the 32-hex-digit serial."""
        return self.handle.open(check_health=False).serial

    def check(self) -> None:
        """GET_HEALTH, one reset on error."""
        self.handle.check_health()

    def start(self) -> None:
        """The scan (motor via DTR where the port has it)."""
        self.handle.start()

    def wait_ready(self, timeout_s: float) -> None:
        """Poll until a complete turn without error flags and with enough points."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _, _, turns = self.handle.poll(min(0.05, max(0.0, deadline - time.monotonic())))
            good = (turns.flags & (TurnFlag.PACKET_LOSS | TurnFlag.CRC_ERRORS)) == 0
            if (good & (turns.count >= A1_READY_POINTS)).any():
                return
        sc = self.handle
        state = ""
        if sc.link.connected:
            try:
                sc.lidar.stop()
                health = sc.lidar.get_health()
                state = f"; health now {health.status} (code 0x{health.error_code:04x})"
            except DriverError as err:
                state = f"; no health answer ({err})"
        raise DriverError(f"no complete valid turn within {timeout_s:.1f} s of the scan start "
            f"({sc.link.bytes_total} bytes, {sc.assembler.nodes_total} nodes, "
            f"{sc.link.unplugs} unplugs{state}): "
            "motor not spinning, or the supply browned out (start the lidars further apart)")

    def idle(self) -> None:
        """Read what arrived, so the buffer does not overflow while others start."""
        if self.handle.link.connected:
            self.handle.poll(0.0)

    def park(self) -> bool:
        """Open the port if needed, stop the scan and the motor (DTR set); keep the port."""
        self.handle.park()
        return True

    def close(self) -> None:
        """Stop the scan and release the port (the motor spins from then on)."""
        self.handle.close()


class StreamSteps(DeviceSteps):
    """Bring-up of a device that only streams (LD19, pod MCU): open at ``baud``, wait
    for ``min_packets`` valid packets (``count_valid(chunk)``: those in each new chunk)."""

    def __init__(self, spec: DeviceSpec, baud: int, count_valid: Callable[[bytes], int],
            min_packets: int = 5) -> None:
        self.spec = spec
        self.baud = baud
        self.count_valid = count_valid
        self.min_packets = min_packets
        self.handle: serial.Serial | None = None
        self.bytes_seen = 0

    def open(self) -> str:
        """Open the port (the device has no identity to read)."""
        self.handle = open_serial(self.spec.port, self.baud, timeout_s=0.05)
        return ""

    def wait_ready(self, timeout_s: float) -> None:
        """Read until ``min_packets`` valid packets or ``timeout_s`` (s)."""
        deadline = time.monotonic() + timeout_s
        valid = 0
        while time.monotonic() < deadline:
            try:
                chunk = self.handle.read(4096)
            except (serial.SerialException, OSError) as err:
                raise DriverError(f"{self.spec.port} went away: {err}") from err
            self.bytes_seen += len(chunk)
            valid += self.count_valid(chunk) if chunk else 0
            if valid >= self.min_packets:
                return
        raise DriverError(
            f"{valid} valid packets ({self.bytes_seen} bytes) within {timeout_s:.1f} s at "
            f"{self.baud} baud: silent, wrong baud rate or wrong device")

    def idle(self) -> None:
        """Discard what arrived."""
        if self.handle is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                self.handle.reset_input_buffer()

    def close(self) -> None:
        """Close the port."""
        handle, self.handle = self.handle, None
        if handle is not None:
            with contextlib.suppress(serial.SerialException, OSError):
                handle.close()


def _poll_until(done: Callable[[], bool], timeout_s: float) -> bool:
    """Ask ``done`` every 50 ms until it holds or ``timeout_s`` (s) passed; whether it held."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


class PowerUpSequencer:
    """Brings ``specs`` up in that order, each with ``retries`` extra attempts, the first
    ``backoff_s`` (s) after a failure, doubled each time; ``runner`` and ``sysfs_root``
    switch port power (injectable for tests)."""

    def __init__(self, specs: list[DeviceSpec], retries: int = 2, backoff_s: float = 0.5,
            runner: Callable[..., Any] = subprocess.run,
            sysfs_root: str | os.PathLike[str] = "/sys") -> None:
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ConfigError(f"device names must be unique, got {names}")
        for spec in specs:
            if spec.steps is None:
                try:
                    get_kind(spec.kind)
                except ConfigError as exc:
                    raise ConfigError(f"{spec.name}: cannot sequence it: {exc}") from None
        if retries < 0 or backoff_s < 0:
            raise ConfigError("retries and backoff_s must be >= 0")
        self.specs = list(specs)
        self.retries = retries
        self.backoff_s = backoff_s
        self.runner = runner
        self.sysfs_root = sysfs_root
        self.handles: dict[str, Any] = {}
        self._steps: dict[str, DeviceSteps] = {}
        self._parked: dict[str, DeviceSteps] = {}
        self._warnings: dict[str, str] = {}  # devices staggered by DTR: why their power was not

    def run(self, keep: bool = False) -> list[PowerUpResult]:
        """Bring every device up, one after another; one result per device, in order.
        With ``keep`` ready devices stay running (see :attr:`handles`); else all close."""
        warm_up()  # compile or load the decoders now, never on a device's first read
        try:
            self._park_all()
            results = self.bring_all()
        finally:
            if keep:
                self._release(self._parked)
            else:
                self.close()
        return results

    def bring_all(self) -> list[PowerUpResult]:
        """The schedule, once every device is parked: each brought up in order, its
        ``delay_after_s`` after the last ready one (a subclass may schedule otherwise)."""
        results = []
        for i, spec in enumerate(self.specs):
            results.append(self.bring_up(spec))
            if results[-1].ready and i + 1 < len(self.specs):
                self._wait(spec.delay_after_s)
        return results

    def close(self) -> None:
        """Stop and close every device still open, in power-up order; parked A1s (which
        spin up when released) one at a time, ``delay_after_s`` apart."""
        ready, self._steps = self._steps, {}
        self.handles.clear()
        for steps in ready.values():
            steps.close()
        self._release(self._parked)

    # -- internals ----------------------------------------------------------------

    def _park_all(self) -> None:
        """Before any device starts: switch off every switched port, and park (port held,
        DTR asserted, motor stopped) every device that holds a motor, including those
        whose port could not be switched off or stayed powered."""
        switched: list[tuple[DeviceSpec, PortPower]] = []
        for spec in self.specs:
            if spec.power is not None and spec.name not in self._warnings:
                try:
                    spec.power.switch(False, runner=self.runner, sysfs_root=self.sysfs_root)
                except DriverError as err:
                    self._no_port_power(spec, f"switching it off failed: {err}")
                else:
                    switched.append((spec, spec.power))
        if switched:  # wait up to the longest settle_s for their ttys to go
            _poll_until(lambda: not any(os.path.exists(s.port) for s, _ in switched),
                max(power.settle_s for _, power in switched))
        for spec, power in [(s, p) for s, p in switched if os.path.exists(s.port)]:
            self._no_port_power(spec,
                f"{spec.port} was still there {power.settle_s:.1f} s after switching it off: "
                "the hub keeps the port powered (no per-port switching, or ganged)")
        for spec in self.specs:
            if ((spec.power is not None and spec.name not in self._warnings)
                    or spec.name in self._parked):
                continue
            self._park_or_close(spec, self._factory(spec)(spec))

    def _no_port_power(self, spec: DeviceSpec, why: str) -> None:
        """Stagger ``spec`` by DTR from now on, and say why."""
        power = spec.power
        where = f"hub {power.hub} port {power.port}" if power is not None else "its port"
        msg = f"port power of {where} not used ({why}); staggered by DTR instead"
        log.warning("%s: %s", spec.name, msg)
        self._warnings[spec.name] = msg

    def _park_or_close(self, spec: DeviceSpec, steps: DeviceSteps) -> None:
        """Keep a device that holds a motor parked, close the others (and one that cannot
        be parked: missing or silent, its bring-up reports it)."""
        with contextlib.suppress(DriverError):
            if steps.park():
                self._parked[spec.name] = steps
                return
        steps.close()

    def _release(self, parked: dict[str, DeviceSteps]) -> None:
        """Close parked devices one at a time, their ``delay_after_s`` apart."""
        names = [s.name for s in self.specs if s.name in parked]
        for i, name in enumerate(names):
            parked.pop(name).close()
            if i + 1 < len(names):
                self._wait(next(s for s in self.specs if s.name == name).delay_after_s)

    @staticmethod
    def _factory(spec: DeviceSpec) -> StepsFactory:
        return spec.steps or get_kind(spec.kind).steps

    def _wait(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            for steps in list(self._steps.values()):  # bring_up may run on several threads
                steps.idle()
            time.sleep(min(0.05, remaining))

    def _power_on(self, spec: DeviceSpec) -> None:
        if spec.power is None or spec.name in self._warnings:
            return
        try:
            spec.power.switch(True, runner=self.runner, sysfs_root=self.sysfs_root)
        except DriverError as err:  # it may be powered anyway: its tty says
            self._no_port_power(spec, f"switching it on failed: {err}")
        if not _poll_until(lambda: os.path.exists(spec.port), spec.power.settle_s):
            raise DriverError(
                f"{spec.port} did not appear within {spec.power.settle_s:.1f} s of powering "
                f"port {spec.power.port} of hub {spec.power.hub}")

    def _result(self, spec: DeviceSpec, serial_no: str, ready: bool, why: str, ttf: float,
            attempts: int) -> PowerUpResult:
        tty = os.path.realpath(spec.port) if os.path.exists(spec.port) else ""
        return PowerUpResult(spec.name, spec.kind, spec.port, tty, serial_no, ready, why, ttf,
            attempts, self._warnings.get(spec.name, ""))

    def bring_up(self, spec: DeviceSpec) -> PowerUpResult:
        """Bring one device up (power, open, check, start, first valid turn), retrying with
        backoff; a device that failed is held parked or closed."""
        why = serial_no = ""
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                self._wait(self.backoff_s * 2 ** (attempt - 2))
            steps = self._parked.pop(spec.name, None) or self._factory(spec)(spec)
            try:
                self._power_on(spec)
                serial_no = steps.open()
                steps.check()
                steps.start()
                t_start = time.monotonic()
                steps.wait_ready(spec.ready_timeout_s)
            except DriverError as err:
                why = str(err)
                self._park_or_close(spec, steps)
                continue
            ttf = time.monotonic() - t_start
            self._steps[spec.name] = steps
            self.handles[spec.name] = steps.handle
            return self._result(spec, serial_no, True, "", ttf, attempt)
        return self._result(spec, serial_no, False, why, float("nan"), self.retries + 1)
