"""The device-kind registry: one record per kind of device a robot configuration may list.

A kind (``kind = "ld19"`` in robot.toml) is everything sensorbench needs to know about
one model of device, in one place:

- its **configuration schema**: default baud rate, whether it has a mount, the extra
  keys it accepts and how they are validated (:attr:`DeviceKind.parse_options`);
- its **reader** for capture (:attr:`DeviceKind.make_reader`);
- its **bring-up** steps for the power-up sequencer (:attr:`DeviceKind.make_steps`);
- its **probe** for ``sensorbench devices --probe`` (:attr:`DeviceKind.probe`);
- its **emulator** (a ``module:function`` name in ``sensorbench.sim``, resolved only
  when an emulated robot or ``sensorbench emulate`` needs it, so drivers never import
  the simulator) and the **simulator defaults** of the synthetic samples it serves.

Kinds that speak the same protocol share the family functions (``ld19_kind``,
``a1_kind``, ``pods_kind``); a new model of an existing protocol is one
:func:`register` call below (the LD06 is one: LD19 protocol, its own name and
datasheet defaults, ``docs/LD19.md``). A new protocol brings its own modules (parser,
reader, family functions, emulator) and one registration.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sensorbench.drivers import a1_kind, ld19_kind, pods_kind
from sensorbench.errors import ConfigError

if TYPE_CHECKING:
    import serial

    from sensorbench.drivers.powerup import DeviceSpec, DeviceSteps
    from sensorbench.drivers.reader_base import DeviceReader
    from sensorbench.drivers.robot_config import DeviceConfig, PodGeometry


@dataclass(frozen=True)
class ReaderContext:
    """What capture hands a kind's reader factory besides the device's configuration.

    Attributes:
        attrs: stream attributes common to every kind (port path, config line, mount).
        speed: emulation speed-up of the device clock (1.0 for hardware).
        handle: the device handle the bring-up left open for the reader to take over
            (an A1 scanner), or None.
        pods: the nominal pod geometry of the configuration, or None.
        read_timeout_s: longest single read wait of a streaming reader (s).
    """

    attrs: dict[str, Any]
    speed: float = 1.0
    handle: Any = None
    pods: PodGeometry | None = None
    read_timeout_s: float = 0.05


ProbeFn = Callable[["DeviceKind", "serial.Serial", float, float], "tuple[str, dict] | None"]


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
        option_keys: extra robot.toml keys this kind accepts.
        parse_options: ``(validator, table, path, what) -> dict`` of validated
            :class:`~sensorbench.drivers.robot_config.DeviceConfig` fields from the
            kind's extra keys (the validator names the line on error).
        make_reader: ``(kind, device, context) -> DeviceReader`` for capture.
        make_steps: ``(kind, spec) -> DeviceSteps`` for the power-up sequencer.
        keeps_bringup_handle: the reader takes over the device the bring-up left
            running (an A1's open port and spinning motor) instead of reopening it.
        probe: ``(kind, port, listen_s, request_timeout_s) -> (detail, info) | None``.
        probe_writes: the probe sends bytes (run after the listen-only probes).
        emulator: ``"module:function"`` building the kind's emulator (see
            ``sensorbench.sim.kind_emulators``).
        sim_defaults: defaults of the synthetic samples the emulator serves without a
            scenario (``rate_hz``, ``samples_per_s``, ``range_min_m``, ``range_max_m``).
        datasheet: where the defaults come from (a ``docs/`` section).
    """

    name: str
    model: str
    protocol: str
    baud: int
    mounted: bool
    make_reader: Callable[[DeviceKind, DeviceConfig, ReaderContext], DeviceReader]
    make_steps: Callable[[DeviceKind, DeviceSpec], DeviceSteps]
    probe: ProbeFn
    emulator: str
    option_keys: frozenset[str] = frozenset()
    parse_options: Callable[[Any, dict, tuple, str], dict] | None = None
    keeps_bringup_handle: bool = False
    probe_writes: bool = False
    sim_defaults: Mapping[str, float] = field(default_factory=dict)
    datasheet: str = ""

    def emulator_factory(self) -> Callable[..., Any]:
        """The emulator builder named by :attr:`emulator` (imported now)."""
        module, _, attr = self.emulator.partition(":")
        return getattr(importlib.import_module(module), attr)


_REGISTRY: dict[str, DeviceKind] = {}


def register(kind: DeviceKind) -> DeviceKind:
    """Add ``kind`` to the registry (its name must be new)."""
    if kind.name in _REGISTRY:
        raise ConfigError(f"device kind {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def get_kind(name: str) -> DeviceKind:
    """The registered kind called ``name``; ConfigError naming the known ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown device kind {name!r}; known: {', '.join(kind_names())}"
        ) from None


def kind_names() -> tuple[str, ...]:
    """Registered kind names, in registration order."""
    return tuple(_REGISTRY)


def all_kinds() -> tuple[DeviceKind, ...]:
    """Registered kinds, in registration order."""
    return tuple(_REGISTRY.values())


def option_keys() -> frozenset[str]:
    """Every kind-specific key any registered kind accepts."""
    return frozenset().union(*(k.option_keys for k in _REGISTRY.values()))


# -- the registrations -----------------------------------------------------------------
# The family modules import their parsers, readers and the sequencer only when a
# factory runs, so this module stays cheap to import.

LD19 = register(
    DeviceKind(
        name="ld19",
        model="LD19",
        protocol="ld19",
        baud=230400,
        mounted=True,
        make_reader=ld19_kind.make_reader,
        make_steps=ld19_kind.make_steps,
        probe=ld19_kind.probe,
        emulator="sensorbench.sim.kind_emulators:ld19_family",
        sim_defaults={
            "rate_hz": 10.0,
            "samples_per_s": 4500.0,
            "range_min_m": 0.02,
            "range_max_m": 12.0,
        },
        datasheet="docs/LD19.md (LDROBOT LD19 development manual)",
    )
)
# The LD06: the LD19's protocol and bytes; its own name and datasheet figures
# (LDROBOT LD06 development manual v1.0: 230400 baud, 4500 samples/s, 5-13 Hz scan,
# 10 Hz by default, 0.02-12 m; docs/LD19.md, section LD06).
register(
    replace(
        LD19,
        name="ld06",
        model="LD06",
        sim_defaults={
            "rate_hz": 10.0,
            "samples_per_s": 4500.0,
            "range_min_m": 0.02,
            "range_max_m": 12.0,
        },
        datasheet="docs/LD19.md, section LD06 (LDROBOT LD06 development manual v1.0)",
    )
)
register(
    DeviceKind(
        name="a1",
        model="A1",
        protocol="rplidar",
        baud=115200,
        mounted=True,
        make_reader=a1_kind.make_reader,
        make_steps=a1_kind.make_steps,
        probe=a1_kind.probe,
        emulator="sensorbench.sim.kind_emulators:a1_family",
        option_keys=frozenset({"serial"}),
        parse_options=a1_kind.parse_options,
        keeps_bringup_handle=True,
        probe_writes=True,
        sim_defaults={
            "rate_hz": 5.5,
            "samples_per_s": 2000.0,
            "range_min_m": 0.15,
            "range_max_m": 12.0,
        },
        datasheet="docs/A1.md",
    )
)
register(
    DeviceKind(
        name="pods",
        model="pods",
        protocol="pods",
        baud=115200,
        mounted=False,
        make_reader=pods_kind.make_reader,
        make_steps=pods_kind.make_steps,
        probe=pods_kind.probe,
        emulator="sensorbench.sim.kind_emulators:pods_family",
        option_keys=frozenset({"protocol", "counter_bits", "n_pods", "imu"}),
        parse_options=pods_kind.parse_options,
        datasheet="docs/PODS.md, docs/PROTOCOLS.md",
    )
)
