"""The device-kind registry: one record per kind a robot configuration may list.

A new model of an existing protocol is one :func:`register` call below (the LD06); a
new protocol: README, "Characterizing a new sensor", and docs/ARCHITECTURE.md, Device kinds.
"""

from __future__ import annotations

from dataclasses import replace

from sensorbench.drivers import a1_kind, ld19_kind, pods_kind
from sensorbench.drivers.device_kind import DeviceKind
from sensorbench.errors import ConfigError
from sensorbench.logs.scan_bins import RATED_RANGE_M

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
        known = ", ".join(kind_names())
        raise ConfigError(f"unknown device kind {name!r}; known: {known}") from None


def kind_names() -> tuple[str, ...]:
    """Registered kind names, in registration order."""
    return tuple(_REGISTRY)


def all_kinds() -> tuple[DeviceKind, ...]:
    """Registered kinds, in registration order."""
    return tuple(_REGISTRY.values())


# -- the registrations -----------------------------------------------------------------
# The family modules import their parsers, protocols and the sequencer only when a
# factory runs, so this module stays cheap to import.

LD19 = register(DeviceKind(name="ld19", model="LD19", protocol="ld19", baud=230400, mounted=True,
    emulator="sensorbench.sim.kind_emulators:ld19_family",
    make_protocol=ld19_kind.make_protocol, probe=ld19_kind.probe,
    # samples_per_s: real LD06 captures (docs/LD19.md); datasheet 4500
    sim_defaults={"rate_hz": 10.0, "samples_per_s": 4545.0,
                  "range_min_m": RATED_RANGE_M["LD19"][0], "range_max_m": RATED_RANGE_M["LD19"][1]},
    datasheet="docs/LD19.md (LDROBOT LD19 development manual)",
))  # fmt: skip
# The LD06: the LD19's protocol, bytes and emulation defaults (the samples_per_s above
# are its real captures'); its own name and datasheet (figures: docs/LD19.md, LD06).
register(replace(LD19, name="ld06", model="LD06",
    datasheet="docs/LD19.md, section LD06 (LDROBOT LD06 development manual v1.0)"))  # fmt: skip
register(DeviceKind(name="a1", model="A1", protocol="rplidar", baud=115200, mounted=True,
    emulator="sensorbench.sim.kind_emulators:a1_family",
    make_reader=a1_kind.make_reader, make_steps=a1_kind.make_steps, probe=a1_kind.probe,
    option_keys=frozenset({"serial", "scan_mode"}), parse_options=a1_kind.parse_options,
    keeps_bringup_handle=True, probe_writes=True,
    sim_defaults={"rate_hz": 5.5, "samples_per_s": 2000.0,
                  "range_min_m": RATED_RANGE_M["A1"][0], "range_max_m": RATED_RANGE_M["A1"][1]},
    datasheet="docs/A1.md",
))  # fmt: skip
register(DeviceKind(name="pods", model="pods", protocol="pods", baud=115200, mounted=False,
    emulator="sensorbench.sim.kind_emulators:pods_family",
    make_protocol=pods_kind.make_protocol, probe=pods_kind.probe,
    option_keys=frozenset({"protocol", "counter_bits", "n_pods", "imu"}),
    parse_options=pods_kind.parse_options, datasheet="docs/PODS.md, docs/PROTOCOLS.md",
))  # fmt: skip
