"""The RPLIDAR family (``a1``): configuration keys, reader, bring-up and probe."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

import serial

from sensorbench.drivers import a1_protocol
from sensorbench.drivers.a1_protocol import TYPICAL
from sensorbench.drivers.serial_port import read_for
from sensorbench.logs.toml_schema import S, Table

if TYPE_CHECKING:
    from sensorbench.drivers.device_kind import DeviceKind, ReaderContext
    from sensorbench.drivers.powerup import A1Steps, DeviceSpec
    from sensorbench.drivers.robot_config import DeviceConfig
    from sensorbench.drivers.serial_reader import SerialReader

STOP_SETTLE_S = 0.02  # the A1 needs >= 1 ms after STOP before the next request


def parse_options(v: Any, table: dict, path: tuple, what: str) -> dict:
    """``serial``: the 16-byte GET_INFO serial as 32 hex digits, or absent (any unit);
    ``scan_mode``: ``typical`` (default) or a scan mode's name as the unit reports it
    (``Standard``, ``Express``), checked against the unit at bring-up."""
    out = Table({
        "serial": S(None, test=re.compile(r"[0-9A-Fa-f]{32}").fullmatch,
            what="32 hex digits (the 16-byte serial GET_INFO reports)"),
        "scan_mode": S(TYPICAL, test=re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}").fullmatch,
            what="'typical' or a scan mode's name as the unit reports it ('Standard', "
            "'Express', ...; the bring-up lists the unit's)"),
    }).pick(table, path)  # fmt: skip
    return {"serial": out["serial"], "options": {"scan_mode": out["scan_mode"]}}


def scan_mode(dev: DeviceConfig | None) -> str:
    """The configured scan mode of an A1 (the default without a configuration)."""
    mode = TYPICAL if dev is None else dev.options.get("scan_mode", TYPICAL)
    return str(mode)


def make_reader(kind: DeviceKind, dev: DeviceConfig, ctx: ReaderContext) -> SerialReader:
    """The capture reader; it takes over the scanner the bring-up left spinning."""
    from sensorbench.drivers.a1_reader import a1_reader

    attrs = dict(ctx.attrs)
    if dev.serial:
        attrs["expected_serial"] = dev.serial.upper()
    return a1_reader(dev.name, dev.port, attrs=attrs, scanner=ctx.handle,
        first_turn_timeout_s=dev.timeout_s, scan_mode=scan_mode(dev))


def make_steps(kind: DeviceKind, spec: DeviceSpec) -> A1Steps:
    """Bring-up: identify, check health, start the motor and scan, wait for a turn."""
    from sensorbench.drivers.powerup import A1Steps

    return A1Steps(spec)


def check_info(data: bytes) -> dict | None:
    """Decode a GET_INFO answer (descriptor + 20 bytes) found in ``data``, else None."""
    info = a1_protocol.find_answer(data, a1_protocol.INFO_DESCRIPTOR,
        a1_protocol.A1Info.from_payload)
    if info is None:
        return None
    return {"model": info.model, "firmware": f"{info.firmware[0]}.{info.firmware[1]:02d}",
        "hardware": info.hardware, "serial": info.serial}


def probe(
    kind: DeviceKind, port: serial.Serial, _listen_s: float, timeout_s: float
) -> tuple[str, dict] | None:
    """STOP, then GET_INFO; the answer's descriptor and 20 bytes identify an A1."""
    port.write(bytes([a1_protocol.SYNC, a1_protocol.CMD_STOP]))
    port.flush()
    time.sleep(STOP_SETTLE_S)
    port.reset_input_buffer()
    port.write(bytes([a1_protocol.SYNC, a1_protocol.CMD_GET_INFO]))
    port.flush()
    want = a1_protocol.DESCRIPTOR_LEN + a1_protocol.INFO_LEN
    data = read_for(port, timeout_s, enough=want)
    info = check_info(data)
    if info is None:
        # A slow reply may arrive after the first bytes: a short second look.
        info = check_info(data + read_for(port, min(0.05, timeout_s), enough=want))
    if info is None:
        return None
    return (f"RPLIDAR A1: model {info['model']:#04x}, firmware {info['firmware']}, "
        f"hardware {info['hardware']}, serial {info['serial']}", info)
