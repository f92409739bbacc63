"""RPLIDAR A1 wire format: requests, descriptors, payloads, scan modes (no I/O).

Layouts and limits: docs/A1.md, Protocol and Scan modes.
"""


from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

_T = TypeVar("_T")

SYNC = 0xA5
SYNC2 = 0x5A
CMD_STOP = 0x25
CMD_RESET = 0x40
CMD_SCAN = 0x20
CMD_FORCE_SCAN = 0x21
CMD_GET_INFO = 0x50
CMD_GET_HEALTH = 0x52
CMD_GET_SAMPLERATE = 0x59  # firmware >= 1.17
CMD_EXPRESS_SCAN = 0x82  # firmware >= 1.17
CMD_GET_LIDAR_CONF = 0x84  # firmware >= 1.24

DESCRIPTOR_LEN = 7
NODE_LEN = 5
INFO_LEN = 20
HEALTH_LEN = 3
TYPE_INFO = 0x04
TYPE_HEALTH = 0x06
TYPE_SAMPLE_RATE = 0x15
SAMPLERATE_LEN = 4
SAMPLERATE_MIN_FIRMWARE = (1, 17)
TYPE_SCAN = 0x81
TYPE_EXPRESS = 0x82
CAPSULE_LEN = 84
NODES_PER_CAPSULE = 32
EXPRESS_SYNC1 = 0xA
EXPRESS_SYNC2 = 0x5
EXPRESS_QUALITY = 0x2F
"""Quality given to an express sample with a return (the capsule carries none); the
vendor SDK's value (``0x2F << 2`` in its 8-bit field), 0 for no return."""
EXPRESS_MIN_FIRMWARE = (1, 17)
CONF_MIN_FIRMWARE = (1, 24)
"""The SDK asks GET_LIDAR_CONF only from firmware 1.24 on (``checkSupportConfigCommands``)."""
TYPE_GET_LIDAR_CONF = 0x20
CONF_SCAN_MODE_COUNT = 0x70
CONF_SCAN_MODE_US_PER_SAMPLE = 0x71
CONF_SCAN_MODE_MAX_DISTANCE = 0x74
CONF_SCAN_MODE_ANS_TYPE = 0x75
CONF_SCAN_MODE_TYPICAL = 0x7C
CONF_SCAN_MODE_NAME = 0x7F
STANDARD_MODE_ID = 0
"""SL_LIDAR_CONF_SCAN_COMMAND_STD: the SDK asks only this mode for a standard scan."""
TYPICAL = "typical"
"""robot.toml's ``scan_mode`` default: the mode the unit calls typical (the SDK's default)."""
ANSWER_FORMATS = {TYPE_SCAN: "standard", TYPE_EXPRESS: "express"}
"""The answer types sensorbench decodes: 5-byte nodes and 84-byte capsules."""
MODE_SINGLE = 0
MODE_MULTI = 1

BAUD = 115200
NOMINAL_SAMPLES_PER_S = 2000.0  # standard scan
NOMINAL_EXPRESS_PER_S = 4000.0  # express scan (datasheet's typical sample frequency)
ANGLE_Q6_FULL = 360 * 64
RESYNC_RUN = 4
# datasheet limit (Slamtec RPLIDAR A1 datasheet, ranging range 0.15..12 m; docs/A1.md "Limits")
MAX_RANGE_M = 12.0
MAX_RANGE_Q2 = int(MAX_RANGE_M * 4000)  # q2 mm

HEALTH_STATUS = {0: "good", 1: "warning", 2: "error"}


def descriptor(length: int, mode: int, dtype: int) -> bytes:
    """A 7-byte response descriptor: ``A5 5A``, 30-bit length + 2-bit mode, type."""
    word = (length & 0x3FFFFFFF) | ((mode & 0x3) << 30)
    return bytes([SYNC, SYNC2]) + word.to_bytes(4, "little") + bytes([dtype])


SCAN_DESCRIPTOR = descriptor(NODE_LEN, MODE_MULTI, TYPE_SCAN)
EXPRESS_DESCRIPTOR = descriptor(CAPSULE_LEN, MODE_MULTI, TYPE_EXPRESS)
INFO_DESCRIPTOR = descriptor(INFO_LEN, MODE_SINGLE, TYPE_INFO)
HEALTH_DESCRIPTOR = descriptor(HEALTH_LEN, MODE_SINGLE, TYPE_HEALTH)
SAMPLERATE_DESCRIPTOR = descriptor(SAMPLERATE_LEN, MODE_SINGLE, TYPE_SAMPLE_RATE)


def payload_request(cmd: int, payload: bytes) -> bytes:
    """A request with a payload: ``A5 cmd len payload xor`` (xor of every byte before it)."""
    req = bytes([SYNC, cmd, len(payload)]) + payload
    return req + bytes([functools.reduce(operator.xor, req)])


def express_request(working_mode: int) -> bytes:
    """EXPRESS_SCAN with ``working_mode`` (a scan mode's id; 0, the legacy form, for
    firmware without the configuration commands), flags 0, parameter 0."""
    return payload_request(CMD_EXPRESS_SCAN, bytes([working_mode]) + bytes(4))


def conf_request(conf_type: int, mode_id: int | None = None) -> bytes:
    """GET_LIDAR_CONF for ``conf_type`` (uint32), with a scan mode's id (uint16) where the
    entry is per mode; both little-endian."""
    payload = conf_type.to_bytes(4, "little")
    if mode_id is not None:
        payload += mode_id.to_bytes(2, "little")
    return payload_request(CMD_GET_LIDAR_CONF, payload)


CONF_SIZES = {CONF_SCAN_MODE_COUNT: 2, CONF_SCAN_MODE_US_PER_SAMPLE: 4,
              CONF_SCAN_MODE_MAX_DISTANCE: 4, CONF_SCAN_MODE_ANS_TYPE: 1,
              CONF_SCAN_MODE_TYPICAL: 2}  # fmt: skip
"""Bytes of each GET_LIDAR_CONF value (a name: ASCII text up to a NUL, any length)."""


def conf_value(conf_type: int, answer: bytes) -> bytes:
    """The value of a GET_LIDAR_CONF answer (its first 4 bytes echo the type asked), a
    name's text before its NUL; ValueError if it answers another type, is cut short or
    names a mode in other than ASCII (the answer carries no checksum)."""
    value = answer[4:]
    name = conf_type == CONF_SCAN_MODE_NAME
    if name:
        value = value.split(b"\0")[0]
    if (len(answer) < 4 or int.from_bytes(answer[:4], "little") != conf_type
            or len(value) < CONF_SIZES.get(conf_type, 0) or (name and not value.isascii())):
        raise ValueError(f"GET_LIDAR_CONF 0x{conf_type:02x} answered {answer.hex(' ')}")
    return value


@dataclass(frozen=True)
class ScanMode:
    """One scan mode as the unit describes it (GET_LIDAR_CONF), or the SDK's legacy
    description of a unit without the configuration commands: ``id`` (the express
    request's working mode), ``answer_type`` (the scan descriptor's type byte)."""

    id: int
    name: str
    us_per_sample: float
    max_distance_m: float
    answer_type: int

    @property
    def format(self) -> str | None:
        """``standard`` or ``express`` (what the decoder reads), None for an answer type
        sensorbench does not decode."""
        return ANSWER_FORMATS.get(self.answer_type)

    def describe(self) -> str:
        """``Name (id N, U us, D m)``."""
        return (f"{self.name} (id {self.id}, {self.us_per_sample:g} us, {self.max_distance_m:g} m, "
            f"answer 0x{self.answer_type:02x})")


def legacy_modes(rate: A1SampleRate | None, firmware: tuple[int, int]) -> list[ScanMode]:
    """The modes of a unit without GET_LIDAR_CONF, as the SDK describes them: Standard
    (id 0) and, from firmware 1.17, Express (legacy request, id 1), timed by
    GET_SAMPLERATE (476 µs, the SDK's legacy value, without it), 16 m."""
    std = float(rate.standard_us) if rate is not None else 476.0
    exp = float(rate.express_us) if rate is not None and rate.express_us else 476.0
    modes = [ScanMode(0, "Standard", std, 16.0, TYPE_SCAN)]
    if firmware >= EXPRESS_MIN_FIRMWARE:
        modes.append(ScanMode(1, "Express", exp, 16.0, TYPE_EXPRESS))
    return modes


def parse_descriptor(raw: bytes) -> tuple[int, int, int]:
    """``(length, mode, type)`` of a 7-byte descriptor; ValueError if it is not one."""
    if len(raw) != DESCRIPTOR_LEN or raw[0] != SYNC or raw[1] != SYNC2:
        raise ValueError(f"not a response descriptor: {raw.hex(' ')}")
    word = int.from_bytes(raw[2:6], "little")
    return word & 0x3FFFFFFF, word >> 30, raw[6]


def find_answer(data: bytes, descriptor: bytes, parse: Callable[[bytes], _T]) -> _T | None:
    """The payload after the first ``descriptor`` in ``data``, parsed; None if there is
    none, it is cut short or ``parse`` finds it malformed (ValueError)."""
    at, length = data.find(descriptor), parse_descriptor(descriptor)[0]
    payload = data[at + DESCRIPTOR_LEN : at + DESCRIPTOR_LEN + length]
    if at < 0 or len(payload) < length:
        return None
    try:
        return parse(payload)
    except ValueError:
        return None


@dataclass(frozen=True)
class A1Info:
    """GET_INFO answer: model id, firmware (major, minor), hardware id, 16-byte serial."""

    model: int
    firmware: tuple[int, int]
    hardware: int
    serial: str  # 32 upper-case hex digits

    @classmethod
    def from_payload(cls, raw: bytes) -> A1Info:
        """Decode the 20-byte payload (model, fw minor, fw major, hardware, serial)."""
        if len(raw) != INFO_LEN:
            raise ValueError(f"info payload must be {INFO_LEN} bytes, got {len(raw)}")
        return cls(raw[0], (raw[2], raw[1]), raw[3], raw[4:].hex().upper())


@dataclass(frozen=True)
class A1Health:
    """GET_HEALTH answer: status (``good``/``warning``/``error``) and its error code."""

    status: str
    error_code: int

    @classmethod
    def from_payload(cls, raw: bytes) -> A1Health:
        """Decode the 3-byte payload: status, then the error code as little-endian uint16."""
        if len(raw) != HEALTH_LEN:
            raise ValueError(f"health payload must be {HEALTH_LEN} bytes, got {len(raw)}")
        if raw[0] not in HEALTH_STATUS:
            raise ValueError(f"unknown health status {raw[0]}")
        return cls(HEALTH_STATUS[raw[0]], raw[1] | (raw[2] << 8))


@dataclass(frozen=True)
class A1SampleRate:
    """GET_SAMPLERATE answer: time between two samples (µs) in standard and express scan
    (docs/A1.md, Device-side turn timing)."""

    standard_us: int
    express_us: int

    def sample_us(self, mode: str) -> int:
        """The sample duration of scan ``mode`` (``standard`` or ``express``), µs; 0 when
        the unit reports none for it."""
        return self.express_us if mode == "express" else self.standard_us

    @classmethod
    def from_payload(cls, raw: bytes) -> A1SampleRate:
        """Decode the 4-byte payload: uint16 standard, uint16 express (µs, little-endian)."""
        if len(raw) != SAMPLERATE_LEN:
            raise ValueError(f"sample-rate payload must be {SAMPLERATE_LEN} bytes, got {len(raw)}")
        std, exp = raw[0] | (raw[1] << 8), raw[2] | (raw[3] << 8)
        if std == 0:
            raise ValueError("standard sample duration 0 µs")
        return cls(std, exp)


def describe_clock(rate: A1SampleRate | None, mode: str = "standard") -> str:
    """The ``device_time`` attribute of an A1 lidar stream scanned in ``mode`` at ``rate``
    (None: the unit reported none)."""
    us = 0 if rate is None else rate.sample_us(mode)
    if us <= 0:
        return (f"none: the unit did not report its {mode} sample duration (GET_SAMPLERATE, "
            "firmware >= 1.17); turn times are host receive times")
    return (f"sample index x {mode} sample duration {us} us (GET_SAMPLERATE), anchored at the "
        "host receive time of each scan's first " + ("node" if mode == "standard" else "capsule"))
