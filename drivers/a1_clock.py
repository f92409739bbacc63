"""Device-side time of RPLIDAR A1 nodes: node count × the unit's own sample duration.

The A1 sends no timestamps, but in standard scan it sends every sample it takes,
one node each, at a fixed sample duration that it reports itself (GET_SAMPLERATE,
``Tstandard`` µs, firmware ≥ 1.17). The time between two nodes on the device's
clock is therefore their index difference × ``Tstandard``, whatever the host did
in between: USB-serial adapters deliver bytes in bursts, a host that falls behind
reads seconds of nodes at once, and host arrival times then say nothing about the
rotation. Host time only *anchors* this clock: the first node of a scan (after a
start, restart or reconnect) gets the host receive time of the chunk that brought
it, every later node ``anchor + index × Tstandard``.

Nodes lost on the link shift the count. The decoder knows how many bytes it had to
discard to re-align (:func:`~sensorbench.drivers.a1_protocol.decode_nodes`); about
that many / 5 nodes were lost there and the count is advanced by as many, so a loss
costs at most a node or two of time error, not a drift. A loss that leaves no trace
in the bytes (a kernel buffer overrun that happens to drop whole nodes) cannot be
seen here; the turn it falls in reads short by the lost nodes' time.

Stored as a turn's ``device_ns``: the device time of its first node (the start-flag
node), ns. The lidar stream's ``device_time`` attribute says how it was made
(:func:`describe`).
"""

from __future__ import annotations

import numpy as np

from sensorbench.drivers.a1_protocol import NODE_LEN, A1SampleRate


class NodeClock:
    """Device time (ns) of consecutive standard-scan nodes from their count.

    Args:
        sample_us: the standard-scan sample duration the unit reported (µs).
    """

    def __init__(self, sample_us: int) -> None:
        if sample_us <= 0:
            raise ValueError(f"sample duration must be > 0 µs, got {sample_us}")
        self.sample_ns = int(sample_us) * 1000
        self.nodes_estimated_lost = 0
        self.reset()

    def reset(self) -> None:
        """Forget the anchor: the next node starts a new scan (start, restart, reconnect)."""
        self._anchor_ns: int | None = None
        self._next = 0

    def stamp(self, k: int, t_ns: int, skipped_bytes: int = 0) -> np.ndarray:
        """Device times (int64 ns) of ``k`` nodes that arrived in one chunk at host ``t_ns``.

        ``skipped_bytes`` were discarded re-aligning before these nodes; ``round(skipped
        / 5)`` nodes are taken as lost there and the count moves past them.
        """
        if self._anchor_ns is None:
            if k == 0:
                return np.empty(0, dtype=np.int64)
            self._anchor_ns = int(t_ns)
            self._next = 0
        else:
            lost = round(skipped_bytes / NODE_LEN)
            self._next += lost
            self.nodes_estimated_lost += lost
        idx = self._next + np.arange(k, dtype=np.int64)
        self._next += k
        return self._anchor_ns + idx * self.sample_ns


def describe(rate: A1SampleRate | None) -> str:
    """The ``device_time`` attribute of an A1 lidar stream for ``rate`` (None: none)."""
    if rate is None:
        return (
            "none: the unit did not report its sample duration (GET_SAMPLERATE, "
            "firmware >= 1.17); turn times are host receive times"
        )
    return (
        f"node count x standard sample duration {rate.standard_us} us (GET_SAMPLERATE), "
        "anchored at the host receive time of each scan's first node"
    )
