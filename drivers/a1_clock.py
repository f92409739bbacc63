"""Device-side time of RPLIDAR A1 nodes: sample index × the unit's own sample duration.

The A1 sends no timestamps, but it sends every sample it takes — one node each in
standard scan, 32 per capsule in express scan — at a fixed sample duration that it
reports itself (GET_SAMPLERATE, firmware ≥ 1.17: ``Tstandard`` and ``Texpress``
µs). The time between two samples on the device's clock is therefore their index
difference × the mode's duration, whatever the host did in between: USB-serial
adapters deliver bytes in bursts, a host that falls behind reads seconds of nodes
at once, and host arrival times then say nothing about the rotation. Host time only
*anchors* this clock: sample 0 of a scan (after a start, restart or reconnect) gets
the host receive time of the read that brought the scan's first node (standard) or
first capsule (express), every later sample ``anchor + index × T``. The compiled
pass (:mod:`~sensorbench.drivers.a1_kernels`) stamps every node so.

Samples lost on the link shift the index. The decoder knows how many bytes it had to
discard to re-align; about that many / 5 nodes (standard) or / 84 capsules of 32
(express) were lost there and the index is advanced by as many, so a loss costs at
most a sample or two of time error, not a drift. A loss that leaves no trace in the
bytes (a kernel buffer overrun that happens to drop whole nodes) cannot be seen
here; the turn it falls in reads short by the lost samples' time.

Stored as a turn's ``device_ns``: the device time of its first node (the start-flag
node), ns. The lidar stream's ``device_time`` attribute says how it was made
(:func:`describe`).
"""

from __future__ import annotations

from sensorbench.drivers.a1_protocol import A1SampleRate


def describe(rate: A1SampleRate | None, mode: str = "standard") -> str:
    """The ``device_time`` attribute of an A1 lidar stream scanned in ``mode`` at ``rate``
    (None: the unit reported none)."""
    us = 0 if rate is None else rate.sample_us(mode)
    if us <= 0:
        return (
            f"none: the unit did not report its {mode} sample duration (GET_SAMPLERATE, "
            "firmware >= 1.17); turn times are host receive times"
        )
    return (
        f"sample index x {mode} sample duration {us} us (GET_SAMPLERATE), anchored at the "
        "host receive time of each scan's first " + ("node" if mode == "standard" else "capsule")
    )
