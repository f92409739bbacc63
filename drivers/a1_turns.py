"""A1 turn assembly: a scan's bytes, read by read, cut into complete turns.

:class:`A1Turns` is what the live scanner
(:class:`~sensorbench.drivers.a1_scanner.A1Scanner`) and the offline decoder
(:func:`~sensorbench.drivers.a1_raw.decode_capture`) share, so decoding a session's
raw bytes again gives the live turns exactly. Each :meth:`A1Turns.feed` is one
compiled pass (:mod:`~sensorbench.drivers.a1_kernels`) over the read plus the
unconsumed tail of the previous one; complete turns come out as
:class:`~sensorbench.logs.LidarTurns` (angle rad CCW, range m with ``inf`` for no
return and ``nan`` beyond 12 m, quality, host time; device time where the unit's
sample duration is known).

Times. Host: the nodes decoded from a read are spread evenly over the interval since
the previous read that brought nodes, at most ``max_node_ns`` per node (a pause
before a read does not stretch it). Device: sample index × the mode's sample
duration (GET_SAMPLERATE), anchored at the host receive time of the scan's first
node (standard) or first capsule (express); bytes skipped re-aligning advance the
index by the samples they held (``round(bytes / 5)`` nodes, ``round(bytes / 84)``
capsules of 32), so a loss costs no drift. A bare capture (no receive times) is
timed ``nominal``: every time is ``t0 + index × sample duration``.
"""

from __future__ import annotations

import numpy as np

from sensorbench.drivers import a1_kernels as k
from sensorbench.drivers.a1_protocol import CAPSULE_LEN, NODE_LEN, NODES_PER_CAPSULE
from sensorbench.logs import LidarTurns, TurnFlag

_START_CAP = 4096


class A1Turns:
    """Bytes of one scan in, complete turns out; all state per instance.

    Args:
        mode: ``standard`` (5-byte nodes) or ``express`` (84-byte capsules).
        sample_us: the mode's sample duration (µs) for device times; 0 or None: no
            device time (and, with ``nominal_us``, host times of a bare capture).
        max_node_ns: host-time spreading: at most this much per node (ns).
        nominal_us: > 0 for a capture without receive times: every time is the
            first read's ``t_ns`` + sample index × this (µs, may be fractional).

    Nodes before the first start flag of a scan are counted in
    :attr:`leading_nodes_skipped`, not stored. A turn ends at the next start flag (or
    :meth:`flush`, flagged ``PACKET_LOSS``). Nodes reading an impossible angle (q6 ≥
    23040) are dropped and counted (a start flag they carry passes to the next node
    kept); distances beyond 12 m are stored as ``nan`` and counted. Bytes skipped
    re-aligning flag the turn they fall in ``CRC_ERRORS``.
    """

    def __init__(
        self,
        mode: str = "standard",
        sample_us: float | None = None,
        max_node_ns: int = 1_000_000,
        nominal_us: float = 0.0,
    ) -> None:
        self._check(mode)
        self.mode = mode
        self._cfg = (
            round((sample_us or 0) * 1000),
            int(max_node_ns),
            round(nominal_us * 1000),
        )
        self.offset = 0
        """Stream offset of the next byte fed (the offline decoder sets it per scan)."""
        self.dropped_offsets: list[int] = []
        """Stream offsets of the nodes dropped for an impossible angle."""
        self._totals = np.zeros(k.STATE_SIZE, np.int64)
        self._prev = np.zeros(CAPSULE_LEN, np.uint8)
        self._tb = np.empty((5, _START_CAP), np.int64)
        self._ob = np.empty((3, _START_CAP), np.int64)
        self._offs = np.empty(_START_CAP, np.int64)
        self._st = k.new_state(*self._cfg)
        self._tail = b""

    # -- counters -------------------------------------------------------------------

    def _count(self, slot: int) -> int:
        return int(self._totals[slot] + self._st[slot])

    @property
    def nodes_total(self) -> int:
        """Nodes framed (standard) or decoded from capsules (express)."""
        return self._count(k.NODES)

    @property
    def bytes_skipped(self) -> int:
        """Bytes discarded re-aligning (corruption or loss on the link)."""
        return self._count(k.SKIPPED)

    @property
    def nodes_dropped(self) -> int:
        """Nodes dropped for an impossible angle (q6 ≥ 23040)."""
        return self._count(k.DROPPED)

    @property
    def ranges_beyond_limit(self) -> int:
        """Distances beyond 12 m (stored as ``nan``)."""
        return self._count(k.BEYOND)

    @property
    def leading_nodes_skipped(self) -> int:
        """Nodes before the first start flag of each scan (no turn)."""
        return self._count(k.LEADING)

    @property
    def samples_estimated_lost(self) -> int:
        """Samples estimated lost from the bytes skipped (and express capsules that
        could not be decoded)."""
        return self._count(k.LOST)

    @property
    def capsules(self) -> int:
        """Express capsules accepted."""
        return self._count(k.CAPSULES)

    @property
    def capsule_checksum_failures(self) -> int:
        """Express candidates with the sync nibbles but a wrong checksum."""
        return self._count(k.CAPSULE_FAILS)

    @property
    def pending_bytes(self) -> int:
        """Bytes kept from earlier reads that may still start a node or capsule."""
        return len(self._tail)

    # -- the stream -------------------------------------------------------------------

    def mark(self, flag: TurnFlag) -> None:
        """Set ``flag`` on the turn being assembled."""
        self._st[k.FLAGS] |= int(flag)

    def reset(
        self,
        offset: int | None = None,
        mode: str | None = None,
        sample_us: float | None = None,
        nominal_us: float | None = None,
    ) -> None:
        """A new scan (start, restart, reconnect): no tail, no turn, no clock anchor.

        ``offset`` is the stream offset of the next byte (default: past the tail);
        ``mode``, ``sample_us`` (0: no device time) and ``nominal_us`` (µs) change the
        scan's, when given.
        """
        if mode is not None:
            self._check(mode)
            self.mode = mode
        if sample_us is not None:
            self._cfg = (round(sample_us * 1000), *self._cfg[1:])
        if nominal_us is not None:
            self._cfg = (*self._cfg[:2], round(nominal_us * 1000))
        self._totals[k.NODES : k.RESETS + 1] += self._st[k.NODES : k.RESETS + 1]
        self.offset = self.offset + len(self._tail) if offset is None else int(offset)
        self._st = k.new_state(*self._cfg)
        self._tail = b""

    def feed(self, t_ns: int, data: bytes) -> LidarTurns:
        """Decode ``data`` (the scan's bytes read at host ``t_ns``, ns) after the kept
        tail; returns the turns it completed."""
        buf = (
            np.frombuffer(self._tail + data, dtype=np.uint8)
            if self._tail
            else (np.frombuffer(data, dtype=np.uint8))
        )
        n = buf.size
        most = (
            n // NODE_LEN + 2
            if self.mode == "standard"
            else (n // CAPSULE_LEN + 1) * NODES_PER_CAPSULE + 2
        )
        self._reserve(int(self._st[k.FILL]) + most, most)
        base = self.offset - len(self._tail)
        if self.mode == "standard":
            used = k.standard_pass(buf, base, int(t_ns), self._st, self._offs, self._tb, self._ob)
        else:
            used = k.express_pass(buf, base, int(t_ns), self._st, self._prev, self._tb, self._ob)
        self.offset += len(data)
        self._tail = bytes(buf[used:]) if used < n else b""
        dropped = int(self._st[k.N_DROPPED])
        if dropped:
            self.dropped_offsets.extend(self._ob[2, :dropped].tolist())
        cuts = int(self._st[k.N_CUTS])
        if not cuts:
            return _EMPTY
        ends = self._ob[0, :cuts]
        turns = self._turns(ends.copy(), self._ob[1, :cuts].copy())
        last, fill = int(ends[-1]), int(self._st[k.FILL])
        self._tb[:, : fill - last] = self._tb[:, last:fill]
        self._st[k.FILL] = fill - last
        return turns

    def flush(self) -> LidarTurns:
        """Emit the turn in progress, flagged ``PACKET_LOSS`` (it is incomplete); the
        next node starts nothing until a start flag."""
        fill = int(self._st[k.FILL])
        flags = int(self._st[k.FLAGS]) | int(TurnFlag.PACKET_LOSS)
        self._st[k.FILL] = 0
        self._st[k.FLAGS] = 0
        self._st[k.STARTED] = 0
        if fill == 0:
            return _EMPTY
        return self._turns(np.array([fill]), np.array([flags]))

    # -- internals ------------------------------------------------------------------

    @staticmethod
    def _check(mode: str) -> None:
        if mode not in ("standard", "express"):
            raise ValueError(f"scan mode must be 'standard' or 'express', got {mode!r}")

    def _reserve(self, nodes: int, per_read: int) -> None:
        if nodes > self._tb.shape[1]:
            grown = np.empty((5, max(nodes, 2 * self._tb.shape[1])), np.int64)
            grown[:, : self._tb.shape[1]] = self._tb
            self._tb = grown
        if per_read > self._ob.shape[1]:
            self._ob = np.empty((3, max(per_read, 2 * self._ob.shape[1])), np.int64)
            self._offs = np.empty(self._ob.shape[1], np.int64)

    def _turns(self, ends: np.ndarray, flags: np.ndarray) -> LidarTurns:
        """The turns ``[0, ends[0])``, ``[ends[0], ends[1])``... of the turn buffer."""
        t_first, dev, count, angle, rng, quality, t = k.turn_arrays(self._tb, ends)
        return LidarTurns(
            t_first, dev, np.full(ends.size, np.nan), count, flags, angle, rng, quality, t
        )


def _frozen_empty() -> LidarTurns:
    empty = LidarTurns.empty()
    for name in LidarTurns.__dataclass_fields__:
        getattr(empty, name).flags.writeable = False
    return empty


_EMPTY = _frozen_empty()
"""What a read that completes no turn returns (most reads): shared, read-only."""
