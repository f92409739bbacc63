"""Emulator builders of the registered device kinds (named by ``DeviceKind.emulator``); a
kind of an existing protocol reuses its family's builder (the LD06 the LD19's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sensorbench.errors import SimError
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.emulator_base import fault_schedule, link_faults
from sensorbench.sim.emulator_firmware import FirmwarePodEmulator
from sensorbench.sim.emulator_ld19 import LD19Emulator, SyntheticLD19Samples
from sensorbench.sim.emulator_pods import PodEmulator
from sensorbench.sim.pod_trajectory import PodTrajectory
from sensorbench.sim.power import PowerBus
from sensorbench.sim.pty import Faults

if TYPE_CHECKING:
    from sensorbench.drivers.device_kind import DeviceKind
    from sensorbench.drivers.robot_config import DeviceConfig
    from sensorbench.sim.emulator_base import SimClock
    from sensorbench.sim.simulation import Simulation

_HEALTH = {"good": 0, "warning": 1, "error": 2}


@dataclass
class EmulatorRequest:
    """What a builder gets besides the kind and the device's configuration: the robot's
    simulation (None: the kind's synthetic samples), the scenario's ``[faults.<device>]``
    ``knobs``, the device's ``index`` in the configuration, the LD19-protocol power-on
    to first packet (simulated s), state ``shared`` by the robot's builders (the A1s'
    power bus) and an ATmega328P image to run under simavr as the pod MCU."""

    sim: Simulation | None
    clock: SimClock
    knobs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    index: int = 0
    ld19_startup_s: float = 3.0
    shared: dict[str, Any] = field(default_factory=dict)
    pods_firmware: str | None = None


def _link(dev: DeviceConfig, req: EmulatorRequest) -> dict[str, Any]:
    """The link arguments every emulator takes: its port, faults and their seed."""
    return {"link": dev.port, "faults": link_faults(req.knobs), "seed": req.seed}


def synthetic_ld19_samples(kind: DeviceKind, duration_s: float, seed: int) -> SyntheticLD19Samples:
    """A room seen by an LD19-protocol kind at its datasheet rate and sample rate."""
    d = kind.sim_defaults
    return SyntheticLD19Samples.generate(
        duration_s=duration_s, rate_hz=d["rate_hz"], samples_per_s=d["samples_per_s"], seed=seed
    )


def ld19_family(kind: DeviceKind, dev: DeviceConfig, req: EmulatorRequest) -> LD19Emulator:
    """An LD19-protocol lidar (LD19, LD06) playing the scenario lidar of the device's name."""
    sim, seed = req.sim, req.seed
    samples = sim.lidar(dev.name) if sim is not None else synthetic_ld19_samples(kind, 60.0, seed)
    return LD19Emulator(samples, speed=req.clock.speed, startup_s=req.ld19_startup_s,
        autostart=False, **_link(dev, req))  # fmt: skip


def a1_family(kind: DeviceKind, dev: DeviceConfig, req: EmulatorRequest) -> A1Emulator:
    """An A1 with the configured serial, on the robot's shared power bus when its faults ask
    for brown-outs; express scans play the scenario lidar at twice its sample rate."""
    knobs = req.knobs
    bus = None
    if knobs.get("brownout"):
        bus = req.shared.get("power_bus")
        if bus is None:
            bus = PowerBus(inrush_s=knobs.get("brownout_window_s", 1.5), clock=req.clock)
            req.shared["power_bus"] = bus
    standard = express = None
    if req.sim is not None:
        standard = req.sim.lidar(dev.name)
        rate = float(standard.params["samples_per_s"])
        express = req.sim.lidar(dev.name, samples_per_s=2.0 * rate)
    return A1Emulator(
        standard, express_samples=express, name=dev.name, power=bus, clock=req.clock,
        unit=a1_unit(dev.serial or f"{req.index:032x}", knobs), **_link(dev, req),
    )  # fmt: skip


def a1_unit(serial: bytes | str, knobs: dict[str, Any]) -> A1Unit:
    """An A1 of this serial in the health its ``[faults.<device>]`` ``knobs`` set."""
    health = _HEALTH[knobs.get("health", "good")]
    code = int(knobs.get("health_error_code", 0)) if health else 0
    return A1Unit(serial=serial, health=(health, code))


def pods_family(
    kind: DeviceKind, dev: DeviceConfig, req: EmulatorRequest
) -> PodEmulator | FirmwarePodEmulator:
    """The pod MCU playing the simulation's pods (looped: a capture may outlast them):
    emulated frames, or the firmware image under simavr (``req.pods_firmware``)."""
    if req.sim is None:
        raise SimError(f"{dev.name}: the pod emulator needs a scenario")
    if req.pods_firmware is not None:
        if dev.protocol != "binary" or dev.n_pods != 3 or dev.imu:
            raise SimError(f"{dev.name}: the firmware sends binary frames of 3 counters "
                f"without IMU fields; the config has protocol {dev.protocol!r}, {dev.n_pods} "
                f"pods and imu = {str(dev.imu).lower()}")
        if fault_schedule(req.knobs) or link_faults(req.knobs) != Faults():
            raise SimError(f"{dev.name}: the firmware emulator has no link faults; the "
                           "scenario asks for some")  # fmt: skip
        path = PodTrajectory.from_samples(req.sim.pods())
        return FirmwarePodEmulator(
            req.pods_firmware, path, link=dev.port, speed=req.clock.speed, loop=True)
    return PodEmulator(
        req.sim.pods(), variant=dev.protocol, counter_bits=dev.counter_bits, imu=dev.imu,
        clock=req.clock, baud=dev.baud, loop=True, **_link(dev, req),
    )  # fmt: skip
