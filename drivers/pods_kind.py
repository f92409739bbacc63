"""The pod-MCU family: configuration keys, protocol object and probe of the ``pods`` kind."""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING, Any

import serial

from sensorbench.drivers.serial_port import read_for
from sensorbench.logs.toml_schema import B, I, S, Table

if TYPE_CHECKING:
    from sensorbench.drivers.device_kind import DeviceKind, ReaderContext
    from sensorbench.drivers.pods_reader import PodProtocol
    from sensorbench.drivers.robot_config import DeviceConfig

MIN_FRAMES = 3
BOARD_COUNT_RATE = {"atmega328p": 91_000.0, "stm32f4": 6_500_000.0}
"""Counts/s per pod a board keeps every count at (firmware/README.md): the ATmega328P
image under simavr with three pods moving at ideal quadrature; the STM32F4's timers
count in hardware, its 16-bit counters extended at each 5 ms latch."""
BOARDS = (*BOARD_COUNT_RATE, "other")
_CSV_LINE = re.compile(rb"^(\d{1,5}),(\d{1,10})((?:,-?\d{1,11})+)(?:,[-+0-9.eEnaif]+){0,2}\r?$")


_OPTIONS = Table({"protocol": S("binary", ("binary", "csv")),
    "counter_bits": I(16, choices=(16, 32)), "n_pods": I(3, 1, 15), "imu": B(False)})  # fmt: skip


def parse_options(v: Any, table: dict, path: tuple, what: str) -> dict:
    """``protocol``, ``counter_bits``, ``n_pods``, ``imu`` of a pods device, validated."""
    return _OPTIONS.pick(table, path)


def make_protocol(kind: DeviceKind, dev: DeviceConfig, ctx: ReaderContext) -> PodProtocol:
    """The protocol object of the pod MCU (the nominal geometry goes with the stream)."""
    from sensorbench.drivers.pods_reader import PodProtocol

    attrs = dict(ctx.attrs)
    if ctx.pods is not None:
        attrs["nominal_geometry"] = {  # stored as JSON
            "wheel_radius_m": ctx.pods.wheel_radius_m,
            "counts_per_rev": ctx.pods.counts_per_rev,
            "wheels": [vars(w) for w in ctx.pods.wheels],
            "units": "x_m, y_m in the body frame (m); angle_rad CCW from body x (rad)",
        }
    return PodProtocol(n_pods=dev.n_pods, counter_bits=dev.counter_bits, protocol=dev.protocol,
        attrs=attrs, clock_slope=1.0 / ctx.speed)


def check_frames(data: bytes) -> dict | None:
    """Facts about a pod-MCU stream (binary frames or CSV lines) in ``data``, else None."""
    from sensorbench.drivers.pods_parser import PodStreamParser

    parser = PodStreamParser(variant="binary")
    parser.feed(data)
    frames = parser.stats.frames + parser.stats.layout_mismatch
    if frames >= MIN_FRAMES:
        return {"variant": "binary", "frames": int(frames)}
    seqs = []
    for line in data.split(b"\n")[1:-1]:  # the first and last may be cut
        match = _CSV_LINE.match(line)
        seqs.append(int(match[1]) if match else None)
    best = run = 0
    for prev, cur in itertools.pairwise(seqs):
        run = run + 1 if prev is not None and cur == (prev + 1) % 65536 else 0
        best = max(best, run)
    if best + 1 >= MIN_FRAMES:
        return {"variant": "csv", "frames": best + 1}
    return None


def probe(
    kind: DeviceKind, port: serial.Serial, listen_s: float, _timeout_s: float
) -> tuple[str, dict] | None:
    """Listen at the kind's baud for valid frames or CSV lines (the MCU streams by itself)."""
    info = check_frames(read_for(port, listen_s))
    if info is None:
        return None
    return f"pod MCU: {info['frames']} valid {info['variant']} frames at {kind.baud} baud", info
