"""Compile (or load from numba's cache) every kernel the device readers use, before
any device starts: a compile on a first read would stall every other reader.
"""

from __future__ import annotations

import threading

import numpy as np

from sensorbench.drivers import a1_protocol
from sensorbench.drivers.a1_turns import A1Turns
from sensorbench.drivers.device_clock import CounterUnwrapper
from sensorbench.drivers.ld19_parser import LD19Parser

# the manual's example packet (docs/LD19.md): CRC-valid (its span, 2152 °/s, is one the
# SDK drops: the warm-up only needs the kernel compiled or loaded, whatever the verdict)
_LD19_PACKET = bytes.fromhex(
    "542C6808AB7EE000E4DC00E2D900E5D500E3D300E4D000E9CD00E4CA00E2C700E9C500E5C200E5C000E5BE823A1A50"
)
# two standard turns (node bytes as in docs/A1.md: S, !S, quality; C, angle; distance)
_A1_NODES = b"".join(
    bytes([0x3D if i % 8 == 0 else 0x3E, 0x01 | ((i * 8) & 0x7F) << 1, (i * 8) >> 7, 0xA0, 0x0F])
    for i in range(17))
_lock = threading.Lock()
_done = False


def warm_up() -> None:
    """Run every reader kernel once. Idempotent and thread-safe: the compile (or cache
    load) happens once per process."""
    global _done
    with _lock:
        if _done:
            return
        LD19Parser().feed(_LD19_PACKET * 3, host_ns=0)
        A1Turns(sample_us=500).feed(0, _A1_NODES)
        capsule = bytes([0xA0, 0x50]) + bytes(a1_protocol.CAPSULE_LEN - 2)  # checksum 0
        A1Turns("express", sample_us=250).feed(0, capsule * 3)
        CounterUnwrapper(30000).unwrap(np.zeros(1, np.int64))  # the LD19's
        _done = True
