"""A writer process for the crash test: the full robot's data rate, deterministic content.

Run as ``python logs_crash_writer.py SESSION``. Streams: one LD19 and two A1s at the
rates and turn rates of their device kinds, pods at 1 kHz, raw bytes of all four devices.
Every append is announced on stdout (``stream first_seq count t_ns``) *after* the
append call returns, so the parent knows exactly what was handed to the writer,
and when, even after a SIGKILL.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import session_util as su

from sensorbench.drivers.device_kinds import get_kind
from sensorbench.logs import LidarTurns, SessionWriter

LIDARS = {  # points/s, turns/s
    name: (get_kind(kind).sim_defaults["samples_per_s"], get_kind(kind).sim_defaults["rate_hz"])
    for name, kind in (("ld19", "ld19"), ("front", "a1"), ("rear", "a1"))
}
STEP_S = 0.02


def point_values(seq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Angle, range, intensity of global point number ``seq`` (the expected content)."""
    return (
        (seq % 6283).astype(np.float32) / 1000,
        (seq % 12000).astype(np.float32) / 1000,
        (seq % 256).astype(np.uint16),
    )


def raw_payload(seq: int, n: int) -> bytes:
    """The ``n`` raw bytes starting at byte number ``seq`` of a device's stream."""
    return (np.arange(seq, seq + n) % 251).astype(np.uint8).tobytes()


def main(path: str) -> None:
    w = SessionWriter(path, label="crash", flush_interval_s=0.5)
    for name in LIDARS:
        w.add_lidar(name)
        w.add_raw(name)
    w.add_raw("pods")
    w.add_encoder("pods", 3)
    w.start()
    out = sys.stdout
    seq = dict.fromkeys(["ld19", "front", "rear", "pods", "raw"], 0)
    raw_seq = dict.fromkeys([*LIDARS, "pods"], 0)
    t0 = time.monotonic()
    k = 0
    while True:
        k += 1
        time.sleep(max(0.0, t0 + k * STEP_S - time.monotonic()))
        now = time.monotonic_ns()
        for name, (rate, hz) in LIDARS.items():
            n = int(rate * k * STEP_S) - seq[name]  # fractional points carry over
            s = np.arange(seq[name], seq[name] + n)
            a, r, i = point_values(s)
            t = now + np.arange(n, dtype=np.int64)
            w.append_turns(name, LidarTurns([now], [seq[name]], [hz], [n], [0], a, r, i, t))
            out.write(f"{name} {seq[name]} {n} {now}\n")
            seq[name] += n
            nbytes = 47 * n // 12
            w.append_raw(name, now, raw_payload(raw_seq[name], nbytes))
            out.write(f"raw:{name} {raw_seq[name]} {nbytes} {now}\n")
            raw_seq[name] += nbytes
        n = int(1000 * STEP_S)
        s = np.arange(seq["pods"], seq["pods"] + n)
        w.append_encoder(
            "pods",
            su.encoder_batch(now + s - s[0], np.stack([s, 2 * s, -s], axis=1), seq=s),
        )
        out.write(f"pods {seq['pods']} {n} {now}\n")
        seq["pods"] += n
        w.append_raw("pods", now, raw_payload(raw_seq["pods"], 24 * n))
        out.write(f"raw:pods {raw_seq['pods']} {24 * n} {now}\n")
        raw_seq["pods"] += 24 * n
        out.flush()


if __name__ == "__main__":
    main(sys.argv[1])
