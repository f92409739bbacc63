"""The pod-MCU wire protocol: constants, frame layout and CRC-16/CCITT-FALSE.

The protocol is specified in ``docs/PROTOCOLS.md``; this module is its single
source of numbers for the parser (:mod:`sensorbench.drivers.pods_parser`) and the
emulator (:mod:`sensorbench.sim.emulator_pods`). Two variants share the same fields:

* ``binary``: ``AA 55 | len | flags | seq u16 | t_us u32 | N counts (u16 or u32) |
  [yaw_rate f32, yaw f32] | crc16`` little-endian, CRC-16/CCITT-FALSE over
  ``len`` .. last payload byte;
* ``csv``: ``seq,t_us,c0,...,cN-1[,yaw_rate[,yaw]]\\n`` in decimal.

Wrap widths: ``seq`` wraps at 2**16, ``t_us`` (MCU microseconds) at 2**32, each
counter at 2**counter_bits (16 or 32).
"""

from __future__ import annotations

import numpy as np

SYNC = b"\xaa\x55"
SYNC0, SYNC1 = 0xAA, 0x55
HEADER_LEN = 3  # sync (2) + len (1)
CRC_LEN = 2

FLAG_IMU = 0x01
FLAG_COUNTS32 = 0x02
N_PODS_SHIFT = 4
MAX_PODS = 15

SEQ_BITS = 16
TIME_BITS = 32
COUNTER_BITS = (16, 32)
VARIANTS = ("binary", "csv")
DEFAULT_BAUD = 115200

CRC16_POLY = 0x1021
CRC16_INIT = 0xFFFF


def _crc16_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint16)
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ CRC16_POLY) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
        table[byte] = crc
    return table


CRC16_TABLE = _crc16_table()
_TABLE_LIST = CRC16_TABLE.tolist()


def crc16_ccitt_false(data: bytes) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final XOR)."""
    crc = CRC16_INIT
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _TABLE_LIST[((crc >> 8) ^ byte) & 0xFF]
    return crc


SMALL_BATCH = 32  # rows below which the scalar CRC beats numpy's per-call overhead


def crc16_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-16/CCITT-FALSE of every row of a ``(k, L)`` uint8 array at once -> uint16[k].

    Column by column over all rows (L table lookups on k-vectors); small batches
    (the few frames of one short read) go through the scalar loop instead.
    """
    rows = np.asarray(rows, dtype=np.uint8)
    if rows.shape[0] < SMALL_BATCH:
        return np.array([crc16_ccitt_false(r.tobytes()) for r in rows], dtype=np.uint16)
    crc = np.full(rows.shape[0], CRC16_INIT, dtype=np.uint16)
    for col in range(rows.shape[1]):
        idx = (crc >> np.uint16(8)) ^ rows[:, col]
        crc = (crc << np.uint16(8)) ^ CRC16_TABLE[idx]
    return crc


def payload_length(n_pods: int, counter_bits: int, imu: bool) -> int:
    """Value of the ``len`` byte: bytes from ``flags`` to the last payload byte."""
    return 1 + 2 + 4 + n_pods * (counter_bits // 8) + (8 if imu else 0)


def make_flags(n_pods: int, counter_bits: int, imu: bool) -> int:
    """The ``flags`` byte for a layout."""
    return (
        (n_pods << N_PODS_SHIFT)
        | (FLAG_COUNTS32 if counter_bits == 32 else 0)
        | (FLAG_IMU if imu else 0)
    )


def payload_length_from_flags(flags: np.ndarray) -> np.ndarray:
    """The payload length each ``flags`` value implies (vectorised); 0 if N is 0."""
    flags = np.asarray(flags, dtype=np.int64)
    n = flags >> N_PODS_SHIFT
    width = np.where(flags & FLAG_COUNTS32, 4, 2)
    length = 7 + n * width + np.where(flags & FLAG_IMU, 8, 0)
    return np.where(n > 0, length, 0)
