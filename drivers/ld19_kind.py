"""The LD19-protocol family (LD19, LD06): protocol object and probe of a registered kind."""

from __future__ import annotations

from typing import TYPE_CHECKING

import serial

from sensorbench.drivers.serial_port import read_for

if TYPE_CHECKING:
    from sensorbench.drivers.device_kind import DeviceKind, ReaderContext
    from sensorbench.drivers.ld19_reader import LD19Protocol
    from sensorbench.drivers.robot_config import DeviceConfig

MIN_PACKETS = 3
"""CRC-valid packets a probe needs (375 packets/s: 0.3 s of listening sees ~110)."""


def make_protocol(kind: DeviceKind, dev: DeviceConfig, ctx: ReaderContext) -> LD19Protocol:
    """The protocol object of one configured LD19-protocol lidar (its reader, bring-up
    and the kind's defaults are built on it)."""
    from sensorbench.drivers.ld19_reader import LD19Protocol

    return LD19Protocol(attrs={"model": kind.model, **ctx.attrs}, clock_slope=1.0 / ctx.speed)


def check_packets(data: bytes) -> dict | None:
    """Facts about an LD19-protocol stream if ``data`` holds enough CRC-valid packets."""
    from sensorbench.drivers.ld19_parser import LD19Parser

    parser = LD19Parser()
    packets = parser.feed(data)
    count = parser.counters.packets
    if count < MIN_PACKETS:
        return None
    return {"packets": int(count), "crc_failures": int(parser.counters.crc_failures),
        "speed_hz": round(float(packets.speed_deg_s[-1]) / 360.0, 3)}


def probe(
    kind: DeviceKind, port: serial.Serial, listen_s: float, _timeout_s: float
) -> tuple[str, dict] | None:
    """Listen at the kind's baud for CRC-valid packets (the unit streams by itself).

    The LD19 and the LD06 send the same bytes: the probe names the protocol family,
    and ``info["kinds"]`` lists every registered kind that speaks it.
    """
    from sensorbench.drivers.device_kinds import all_kinds

    info = check_packets(read_for(port, listen_s))
    if info is None:
        return None
    same = [k.name for k in all_kinds() if k.protocol == kind.protocol]
    info["kinds"] = same
    models = " or ".join(k.model for k in all_kinds() if k.protocol == kind.protocol)
    return (f"{models} (same protocol): {info['packets']} CRC-valid packets at {kind.baud} baud",
        info)
