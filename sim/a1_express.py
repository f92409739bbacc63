"""RPLIDAR A1 express-scan capsules from samples: the bytes and what they decode to.

An express capsule (84 bytes; Slamtec ``rplidar_sdk``, ``sl_lidar_cmd.h``) carries 32
samples: a start angle (q6), and per sample a distance (mm) and an angle offset (6
bits, 1/8 degree). The vendor SDK (``handler_capsules.cpp``) places sample ``j`` at
the start angle plus ``j / 32`` of the way to the *next* capsule's start angle, less
its offset, in fixed point; so a capsule is decodable only once the next one is known,
and a sample's angle can only be what that arithmetic gives. :func:`express_stream`
chooses each capsule's start angle so that the samples' angles fall inside the
offsets' range (a line fit through the capsule's readings, placed mid-range above it),
sets each offset to the nearest representable one, and records what a correct
decoder must output (:attr:`ExpressStream.angle_q6` and the other fields): the
emulator's truth, computed here in numpy from the SDK's formula, independently of the
driver's compiled decoder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CAPSULE_LEN = 84
PER_CAPSULE = 32
QUALITY = 0x2F  # the SDK's quality for an express sample with a return
_FULL_Q6 = 360 * 64
_FULL_Q16 = 360 << 16
_MID_OFFSET_DEG = 31.5 / 8  # start angles sit mid-range above the samples
_MAX_MM = 0x3FFF  # 14-bit distance field


@dataclass(frozen=True)
class ExpressStream:
    """A looped sample stream as express capsules (``m`` capsules of 32 samples).

    Attributes:
        capsules: ``(m, 84)`` capsule bytes, S flag clear (the emulator sets it on the
            first capsule after EXPRESS_SCAN).
        t_end_s: emission time of each capsule: its last sample's time (s).
        period_s: length of one loop of the stream (s).
        sample_us: median sample spacing (µs), the express GET_SAMPLERATE answer.
        t_s: ``(m, 32)`` sample times (s).
        start: ``(m, 32)`` the SDK's sync bit (a new turn starts at the sample).
        quality: ``(m, 32)`` :data:`QUALITY` for a return, 0 for none.
        angle_q6: ``(m, 32)`` decoded angle, q6 degrees clockwise, in [0, 23040).
        dist_q2: ``(m, 32)`` decoded distance, q2 mm (1 mm steps).
    """

    capsules: np.ndarray
    t_end_s: np.ndarray
    period_s: float
    sample_us: int
    t_s: np.ndarray
    start: np.ndarray
    quality: np.ndarray
    angle_q6: np.ndarray
    dist_q2: np.ndarray

    def __len__(self) -> int:
        return int(self.t_end_s.size)


def express_stream(t_s: np.ndarray, angle_deg_cw: np.ndarray, range_m: np.ndarray) -> ExpressStream:
    """Capsules of the samples (times s, angles ° clockwise, ranges m with 0 for no
    return), truncated to whole capsules; the last capsule's successor is the first
    (the stream loops)."""
    m = t_s.size // PER_CAPSULE
    if m < 2:
        raise ValueError(f"an express stream needs at least 64 samples, got {t_s.size}")
    n = m * PER_CAPSULE
    t = np.asarray(t_s[:n], dtype=np.float64).reshape(m, PER_CAPSULE)
    a = np.degrees(np.unwrap(np.radians(np.asarray(angle_deg_cw[:n], dtype=np.float64))))
    a = a.reshape(m, PER_CAPSULE)
    j = np.arange(PER_CAPSULE, dtype=np.float64)
    jc = j - j.mean()
    slope = (a - a.mean(axis=1, keepdims=True)) @ jc / (jc @ jc)
    first = a.mean(axis=1) - slope * j.mean()
    start_q6 = np.mod(np.round((first + _MID_OFFSET_DEG) * 64).astype(np.int64), _FULL_Q6)
    prev_q8 = start_q6 << 2
    diff = np.roll(start_q6, -1) * 4 - prev_q8
    diff[diff < 0] += 360 << 8
    inc = diff << 3
    nominal = (prev_q8 << 8)[:, None] + np.arange(PER_CAPSULE)[None, :] * inc[:, None]
    want = np.mod(nominal / 65536.0 - a + 180.0, 360.0) - 180.0  # offset that fits (°)
    offset = np.clip(np.round(want * 8), 0, 63).astype(np.int64)
    angle = np.mod((nominal - (offset << 13)) >> 10, _FULL_Q6)
    sync = np.mod(nominal + inc[:, None], _FULL_Q16) < inc[:, None]
    metres = np.asarray(range_m[:n], dtype=np.float64).reshape(m, PER_CAPSULE)
    mm = np.clip(np.round(metres * 1000.0), 0, _MAX_MM).astype(np.int64)
    words = (mm << 2) | (offset >> 4)
    caps = np.zeros((m, CAPSULE_LEN), np.uint8)
    caps[:, 2] = start_q6 & 0xFF
    caps[:, 3] = start_q6 >> 8
    cab = caps[:, 4:].reshape(m, 16, 5)
    cab[:, :, 0] = words[:, 0::2] & 0xFF
    cab[:, :, 1] = words[:, 0::2] >> 8
    cab[:, :, 2] = words[:, 1::2] & 0xFF
    cab[:, :, 3] = words[:, 1::2] >> 8
    cab[:, :, 4] = (offset[:, 0::2] & 0xF) | ((offset[:, 1::2] & 0xF) << 4)
    check = np.bitwise_xor.reduce(caps[:, 2:], axis=1)
    caps[:, 0] = 0xA0 | (check & 0xF)
    caps[:, 1] = 0x50 | (check >> 4)
    dt = float(np.median(np.diff(t.ravel())))
    return ExpressStream(
        capsules=caps,
        t_end_s=t[:, -1].copy(),
        period_s=float(t[-1, -1] - t[0, 0]) + dt,
        sample_us=round(dt * 1e6),
        t_s=t,
        start=sync,
        quality=np.where(mm > 0, QUALITY, 0).astype(np.uint8),
        angle_q6=angle.astype(np.uint16),
        dist_q2=(mm * 4).astype(np.uint16),
    )


def with_new_scan_flag(capsule: np.ndarray) -> np.ndarray:
    """A copy of a capsule with its S flag set (the first capsule of a scan); the
    checksum follows (bit 7 of byte 3 is bit 7 of the checksum, in byte 1)."""
    out = capsule.copy()
    out[3] |= 0x80
    out[1] ^= 0x08
    return out
