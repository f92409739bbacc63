"""The whole robot emulated: every device of a robot config on its own pty, fed by one
:class:`~sensorbench.sim.simulation.Simulation`."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from sensorbench.drivers.device_kinds import get_kind
from sensorbench.drivers.robot_config import RobotConfig, load_robot_config
from sensorbench.errors import ConfigError, SimError
from sensorbench.logs.atomic_output import disk_error_text
from sensorbench.sim.emulator_base import SimClock, apply_fault, fault_schedule
from sensorbench.sim.kind_emulators import EmulatorRequest
from sensorbench.sim.scenario import Scenario
from sensorbench.sim.simulation import Simulation

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "robot-emulated.toml"


class EmulatedRobot:
    """Every device of ``config`` (default: the shipped ``robot-emulated.toml``) emulated
    on ptys in ``run_dir`` at ``speed`` (simulated s per host s), driven by one simulation
    of ``scenario`` and ``seed`` (default: the config's ``[emulation]`` ones, seed 0
    without); ``faults``: apply the scenario's ``[faults.*]`` tables, timed from
    :meth:`start`; ``pods_firmware``: an ATmega328P image run under simavr as the pod MCU.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        config: str | os.PathLike[str] | None = None,
        scenario: Scenario | str | None = None,
        seed: int | None = None,
        speed: float = 1.0,
        ld19_startup_s: float = 3.0,
        faults: bool = True,
        pods_firmware: str | os.PathLike[str] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file there, an unwritable parent
            raise SimError(f"cannot use {self.run_dir} as the run directory: "
                           f"{disk_error_text(exc)}") from None
        self.config_path = Path(config) if config is not None else DEFAULT_CONFIG
        self.config: RobotConfig = load_robot_config(self.config_path, run_dir=self.run_dir)
        emu = self.config.extra.get("emulation", {})
        try:
            seed = emu.get("seed", 0) if seed is None else seed
            self.sim = Simulation(scenario or emu.get("scenario", "square"), seed=seed)
        except SimError as exc:
            if scenario is not None or "scenario" not in emu:
                raise
            line = self.config.extra.get("emulation_lines", {}).get("scenario", 0)
            raise ConfigError(f"{self.config_path}:{line}: [emulation] {exc}") from exc
        self.speed = float(speed)
        # simulate every device's samples before the emulation clock starts: on a
        # loaded machine ray casting three lidars takes seconds, which would otherwise
        # eat the scenario's lead-in before any device is up
        for dev in self.config.devices:
            kind = get_kind(dev.kind)
            if kind.mounted and dev.name in self.sim.lidar_names():
                self.sim.lidar(dev.name)
            elif kind.protocol == "pods":
                self.sim.pods()
        self.clock = SimClock(self.speed)
        self.devices: dict[str, Any] = {}
        self._schedule: list[tuple[float, str, str, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        lidars = set(self.sim.lidar_names())
        shared: dict[str, Any] = {}
        firmware = None if pods_firmware is None else os.fspath(pods_firmware)
        try:
            for i, dev in enumerate(self.config.devices):
                kind = get_kind(dev.kind)
                knobs = self.sim.scenario.faults(dev.name) if faults else {}
                if kind.mounted and dev.name not in lidars:
                    raise SimError(f"{self.config_path}: device {dev.name!r} is not a lidar of "
                        f"scenario {self.sim.scenario.name!r} (it has {sorted(lidars)})")
                model = self.sim.scenario.lidars[dev.name]["model"] if kind.mounted else kind.name
                if get_kind(model).protocol != kind.protocol:
                    raise SimError(f"{self.config_path}: device {dev.name!r} is a {kind.name} "
                        f"but scenario {self.sim.scenario.name!r} simulates it as a {model}")
                request = EmulatorRequest(self.sim, self.clock, knobs, self.sim.seed * 100 + i,
                    i, ld19_startup_s, shared, firmware)  # fmt: skip
                self.devices[dev.name] = kind.emulator_factory()(kind, dev, request)
                self._schedule += [(t, dev.name, a, arg) for t, a, arg in fault_schedule(knobs)]
        except SimError:
            self.stop()  # the emulators already built
            raise
        self._schedule.sort()

    def start(self) -> EmulatedRobot:
        """Power everything on (LD19 and pods start streaming; A1s wait for a scan request)."""
        for em in self.devices.values():
            em.start()
        if self._schedule and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="robot-faults", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop every emulator and remove the links; :attr:`achieved_speeds` then holds
        each device's simulated s per host s (None: not measured, e.g. an emulator that
        has no ``achieved_speed``, or a firmware harness that did not say)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        # the emulators' clocks run on while the others stop: measure them first, the
        # firmware harness once it exited (it reports on exit)
        before = {name: getattr(em, "achieved_speed", None) for name, em in self.devices.items()}
        for em in self.devices.values():
            em.stop()
        self.achieved_speeds: dict[str, float | None] = {
            name: getattr(em, "achieved_speed", None) if before[name] is None else before[name]
            for name, em in self.devices.items()
        }

    def __enter__(self) -> EmulatedRobot:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        for t, name, action, arg in self._schedule:
            self.clock.sleep_until(t, self._stop)
            if self._stop.is_set():
                return
            apply_fault(self.devices[name], action, arg, self.speed)

    def link(self, name: str) -> str:
        """Stable path of device ``name``."""
        return self.config.device(name).port

    def __getitem__(self, name: str) -> Any:
        return self.devices[name]
