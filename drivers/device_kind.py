"""What one kind of device is (:class:`DeviceKind`) and what capture hands a kind's
reader factory (:class:`ReaderContext`); imports no kind family (docs/ARCHITECTURE.md,
Device kinds).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sensorbench.errors import ConfigError

if TYPE_CHECKING:
    import serial

    from sensorbench.drivers.device_protocol import DeviceProtocol
    from sensorbench.drivers.powerup import DeviceSpec, DeviceSteps
    from sensorbench.drivers.reader_base import DeviceReader
    from sensorbench.drivers.robot_config import DeviceConfig, PodGeometry

MIN_VALID = 3
"""Valid items the default probe needs to name a kind."""
STREAM_READ_S = 0.05
"""Longest wait of one read of a streaming device (LD19, pods) (s): at most 20
wake-ups a second per device, a third of the CPU of 20 ms reads; packet times come
from the device clocks, not from the read boundaries."""


@dataclass(frozen=True)
class ReaderContext:
    """What capture hands a kind's reader factory besides the device's configuration.

    Attributes:
        attrs: stream attributes common to every kind (port path, config line, mount).
        speed: emulation speed-up of the device clock (1.0 for hardware).
        handle: the device handle the bring-up left open for the reader to take over
            (an A1 scanner), or None.
        pods: the nominal pod geometry of the configuration, or None.
    """

    attrs: dict[str, Any]
    speed: float = 1.0
    handle: Any = None
    pods: PodGeometry | None = None


ProbeFn = Callable[["DeviceKind", "serial.Serial", float, float], "tuple[str, dict] | None"]
ProtocolFn = Callable[["DeviceKind", "DeviceConfig", ReaderContext], "DeviceProtocol"]


@dataclass(frozen=True)
class DeviceKind:
    """One kind of device (see the module docstring).

    Attributes:
        name: the ``kind`` value in robot.toml (``ld19``).
        model: the model name stored in session attributes (``LD19``).
        protocol: the wire protocol; kinds with the same protocol share a parser,
            a probe and an emulator (``ld19``, ``rplidar``, ``pods``).
        baud: default line speed (baud).
        mounted: the device has a mount (lidars); pods do not.
        emulator: ``"module:function"`` building the kind's emulator,
            ``(kind, device, request) -> emulator`` (see
            ``sensorbench.sim.kind_emulators``).
        make_protocol: ``(kind, device, context) -> DeviceProtocol``: the device's
            protocol object for capture (the reader, bring-up and probe defaults
            are built on it); None only when all three are given.
        make_reader: ``(kind, device, context) -> DeviceReader`` for capture, or None
            for the default (:meth:`reader`).
        make_steps: ``(kind, spec) -> DeviceSteps`` for the power-up sequencer, or
            None for the default (:meth:`steps`).
        probe: ``(kind, port, listen_s, request_timeout_s) -> (detail, info) | None``,
            or None for the default (:meth:`run_probe`, which sets the baud and clears
            the input first).
        option_keys: extra robot.toml keys this kind accepts.
        parse_options: ``(validator, table, path, what) -> dict`` of validated
            :class:`~sensorbench.drivers.robot_config.DeviceConfig` fields from the
            kind's extra keys (the validator names the line on error); a kind whose
            keys are not fields of its own returns them as ``{"options": {...}}``.
        keeps_bringup_handle: the reader takes over the device the bring-up left
            running (an A1's open port and spinning motor) instead of reopening it.
        probe_writes: the probe sends bytes (run after the listen-only probes).
        sim_defaults: defaults of the synthetic samples the emulator serves without a
            scenario (``rate_hz``, ``samples_per_s``, ``range_min_m``, ``range_max_m``).
        datasheet: where the defaults come from (a ``docs/`` section).
    """

    name: str
    model: str
    protocol: str
    baud: int
    mounted: bool
    emulator: str
    make_protocol: ProtocolFn | None = None
    make_reader: Callable[[DeviceKind, DeviceConfig, ReaderContext], DeviceReader] | None = None
    make_steps: Callable[[DeviceKind, DeviceSpec], DeviceSteps] | None = None
    probe: ProbeFn | None = None
    option_keys: frozenset[str] = frozenset()
    parse_options: Callable[[Any, dict, tuple, str], dict] | None = None
    keeps_bringup_handle: bool = False
    probe_writes: bool = False
    sim_defaults: Mapping[str, float] = field(default_factory=dict)
    datasheet: str = ""

    def __post_init__(self) -> None:
        needs = [f for f in ("make_reader", "make_steps", "probe") if getattr(self, f) is None]
        if self.make_protocol is None and needs:
            raise ConfigError(
                f"device kind {self.name!r}: give make_protocol, or {', '.join(needs)} too")

    def reader(self, dev: DeviceConfig, ctx: ReaderContext) -> DeviceReader:
        """The capture reader of ``dev``: by default the kind's protocol on a link at
        the configured baud, with the device's deadline for its first valid item."""
        if self.make_reader is not None:
            return self.make_reader(self, dev, ctx)
        from sensorbench.drivers.serial_link import LinkConfig, SerialLink
        from sensorbench.drivers.serial_reader import SerialReader

        config = LinkConfig(first_valid_timeout_s=dev.timeout_s, read_timeout_s=STREAM_READ_S)
        protocol = self._protocol(dev, ctx)
        return SerialReader(
            SerialLink(dev.name, dev.port, protocol, baud=dev.baud, kind=self.name, config=config))

    def steps(self, spec: DeviceSpec) -> DeviceSteps:
        """Bring-up of the device in ``spec`` (its configuration in
        ``spec.options["config"]``): by default open at the configured baud and wait
        for valid items of the kind's protocol."""
        if self.make_steps is not None:
            return self.make_steps(self, spec)
        from sensorbench.drivers.powerup import StreamSteps

        dev = spec.options["config"]
        return StreamSteps(spec, dev.baud, self.valid_counter(dev))

    def run_probe(
        self, port: serial.Serial, listen_s: float, timeout_s: float
    ) -> tuple[str, dict] | None:
        """``(detail, info)`` when the kind's device answers on the open ``port`` (set to
        the kind's baud, input cleared), else None; by default listen ``listen_s`` (s) and
        count valid items (at least :data:`MIN_VALID`)."""
        port.baudrate = self.baud
        port.reset_input_buffer()
        if self.probe is not None:
            return self.probe(self, port, listen_s, timeout_s)
        from sensorbench.drivers.robot_config import DeviceConfig
        from sensorbench.drivers.serial_port import read_for

        dev = DeviceConfig(self.name, self.name, port.port or "", self.baud, None, 0.0, listen_s)
        n = self.valid_counter(dev)(read_for(port, listen_s))
        if n < MIN_VALID:
            return None
        item = self._protocol(dev, ReaderContext({})).valid_item
        return f"{self.model}: {n} {item}s at {self.baud} baud", {"valid": n}

    def valid_counter(self, dev: DeviceConfig) -> Callable[[bytes], int]:
        """``(chunk) -> valid items completed by it``: a fresh protocol object of the
        kind (on a link that is never opened) consuming the chunks, nothing stored."""
        from sensorbench.drivers.serial_link import SerialLink

        protocol = self._protocol(dev, ReaderContext({}))
        SerialLink(dev.name, dev.port, protocol, baud=dev.baud, kind=self.name)
        return lambda chunk: protocol.consume(time.monotonic_ns(), chunk)

    def emulator_factory(self) -> Callable[..., Any]:
        """The emulator builder named by :attr:`emulator` (imported now)."""
        module, _, attr = self.emulator.partition(":")
        return getattr(importlib.import_module(module), attr)

    def _protocol(self, dev: DeviceConfig, ctx: ReaderContext) -> DeviceProtocol:
        if self.make_protocol is None:
            raise ConfigError(f"device kind {self.name!r} has no protocol object")
        return self.make_protocol(self, dev, ctx)
