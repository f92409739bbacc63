"""The pod-MCU wire protocol: constants, frame layout and CRC-16/CCITT-FALSE
(docs/PROTOCOLS.md), shared by the parser and the emulator.
"""

from __future__ import annotations

import binascii

import numpy as np

SYNC = b"\xaa\x55"
SYNC0, SYNC1 = 0xAA, 0x55
HEADER_LEN = 3  # sync (2) + len (1)
CRC_LEN = 2

FLAG_IMU = 0x01
FLAG_COUNTS32 = 0x02
FLAG_ERRORS = 0x04
N_PODS_SHIFT = 4
MAX_PODS = 15

SEQ_BITS = 16
TIME_BITS = 32
COUNTER_BITS = (16, 32)
VARIANTS = ("binary", "csv")
DEFAULT_BAUD = 115200

CRC16_INIT = 0xFFFF


def crc16_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-16/CCITT-FALSE of every row of a ``(k, L)`` uint8 array -> uint16[k]:
    :func:`binascii.crc_hqx` from init 0xFFFF is this CRC (check value 0x29B1)."""
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    k, width = rows.shape
    if width == 0:
        return np.full(k, CRC16_INIT, dtype=np.uint16)
    data = rows.reshape(-1).data
    return np.fromiter(
        (binascii.crc_hqx(data[i : i + width], CRC16_INIT) for i in range(0, k * width, width)),
        dtype=np.uint16, count=k)


def make_flags(n_pods: int, counter_bits: int, imu: bool, errors: bool = False) -> int:
    """The ``flags`` byte for a layout."""
    return (
        (n_pods << N_PODS_SHIFT)
        | (FLAG_COUNTS32 if counter_bits == 32 else 0)
        | (FLAG_IMU if imu else 0)
        | (FLAG_ERRORS if errors else 0)
    )


def payload_length_from_flags(flags: np.ndarray) -> np.ndarray:
    """The ``len`` byte each ``flags`` value implies: bytes from ``flags`` to the last
    payload byte (the error block: N quadrature-error counts and the overruns, u16 each);
    0 if N is 0."""
    flags = np.asarray(flags, dtype=np.int64)
    n = flags >> N_PODS_SHIFT
    width = np.where(flags & FLAG_COUNTS32, 4, 2)
    length = 7 + n * width + np.where(flags & FLAG_IMU, 8, 0)
    length = length + np.where(flags & FLAG_ERRORS, 2 * n + 2, 0)
    return np.where(n > 0, length, 0)
