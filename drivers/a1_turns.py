"""A1 turn assembly: a node stream cut into complete turns, and host times of nodes.

:class:`TurnAssembler` is what the live scanner
(:class:`~sensorbench.drivers.a1_scanner.A1Scanner`) and the offline decoder
(:func:`~sensorbench.drivers.a1_raw.decode_capture`) share: nodes in (with host and
optionally device times), complete :class:`~sensorbench.logs.LidarTurns` out (angle
rad CCW, range m with ``inf`` for no return, quality, host time). :func:`spread_times`
spreads the nodes of one received chunk over the gap to the previous chunk.
"""

from __future__ import annotations

import numpy as np

from sensorbench.drivers.a1_protocol import MAX_RANGE_Q2, Nodes, possible_nodes
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, TurnFlag


class TurnAssembler:
    """Cuts a node stream into turns at the start flags; keeps all per-instance state.

    Nodes before the first start flag (the head starts mid-turn) are counted in
    :attr:`leading_nodes_skipped` and not stored. A turn is emitted when the next
    turn's start flag arrives, or by :meth:`flush` (flagged ``PACKET_LOSS``).
    Nodes with an impossible angle are dropped and counted in :attr:`nodes_dropped`
    (a start flag they carry passes to the next node kept); distances beyond 12 m
    are stored as ``nan`` and counted in :attr:`ranges_beyond_limit`.
    """

    def __init__(self) -> None:
        self.leading_nodes_skipped = 0
        self.turns_emitted = 0
        self.nodes_dropped = 0
        self.ranges_beyond_limit = 0
        self._carry_start = False
        self._parts: list[tuple[Nodes, np.ndarray, np.ndarray | None]] = []
        self._started = False
        self._flags = 0

    def mark(self, flag: TurnFlag) -> None:
        """Set ``flag`` on the turn being assembled."""
        self._flags |= int(flag)

    def reset(self) -> None:
        """Forget the turn in progress and wait for a new start flag (after a restart)."""
        self._parts = []
        self._started = False
        self._flags = 0
        self._carry_start = False

    def _drop_impossible(
        self, nodes: Nodes, t_ns: np.ndarray, dev_ns: np.ndarray | None
    ) -> tuple[Nodes, np.ndarray, np.ndarray | None]:
        """The nodes with a possible angle, with their host and device times; a start
        flag on a dropped node moves to the next node kept (in this call or the next)."""
        keep = possible_nodes(nodes)
        start = nodes.start.copy()
        if self._carry_start and start.size:
            start[0] = True
        turn = np.cumsum(start)
        kept_turn = turn[keep]
        last_kept = int(kept_turn[-1]) if kept_turn.size else 0
        self._carry_start = bool(start.size) and int(turn[-1]) > last_kept
        if keep.all() and not start[0] ^ nodes.start[0]:
            return nodes, t_ns, dev_ns
        self.nodes_dropped += int(np.count_nonzero(~keep))
        new_start = np.diff(np.concatenate(([0], kept_turn))) > 0
        kept = Nodes(
            new_start, nodes.quality[keep], nodes.angle_q6[keep], nodes.dist_q2[keep],
            nodes.pos[keep],
        )  # fmt: skip
        return kept, t_ns[keep], None if dev_ns is None else dev_ns[keep]

    def feed(self, nodes: Nodes, t_ns: np.ndarray, dev_ns: np.ndarray | None = None) -> LidarTurns:
        """Add nodes stamped ``t_ns`` (host, int64 ns each) and optionally ``dev_ns``
        (device time, :mod:`~sensorbench.drivers.a1_clock`); returns the turns completed.

        A turn's ``device_ns`` is its first node's device time when every node of the
        turn has one, else ``NO_DEVICE_TIME``.
        """
        if len(nodes) == 0:
            return LidarTurns.empty()
        nodes, t_ns, dev_ns = self._drop_impossible(nodes, t_ns, dev_ns)
        if len(nodes) == 0:
            return LidarTurns.empty()
        self.ranges_beyond_limit += int(np.count_nonzero(nodes.dist_q2 > MAX_RANGE_Q2))
        starts = np.flatnonzero(nodes.start)
        if not self._started:
            if starts.size == 0:
                self.leading_nodes_skipped += len(nodes)
                return LidarTurns.empty()
            self.leading_nodes_skipped += int(starts[0])
            nodes, t_ns = _slice(nodes, int(starts[0]), len(nodes)), t_ns[starts[0] :]
            dev_ns = None if dev_ns is None else dev_ns[starts[0] :]
            starts = starts - starts[0]
            self._started = True
        out: list[LidarTurns] = []
        prev = 0
        for cut in [*starts.tolist(), len(nodes)]:
            if cut > prev:
                dev = None if dev_ns is None else dev_ns[prev:cut]
                self._parts.append((_slice(nodes, prev, cut), t_ns[prev:cut], dev))
            if cut < len(nodes):
                done = self._close(0)
                if done is not None:
                    out.append(done)
            prev = cut
        return LidarTurns.concat(out)

    def flush(self) -> LidarTurns:
        """Emit the turn in progress, flagged ``PACKET_LOSS`` (it is incomplete)."""
        done = self._close(int(TurnFlag.PACKET_LOSS))
        self._started = False
        return done if done is not None else LidarTurns.empty()

    def _close(self, extra_flags: int) -> LidarTurns | None:
        parts, self._parts = self._parts, []
        n = sum(len(p[0]) for p in parts)
        if n == 0:
            return None
        flags, self._flags = self._flags | extra_flags, 0
        nodes = Nodes(
            *(
                np.concatenate([getattr(p[0], f) for p in parts])
                for f in ("start", "quality", "angle_q6", "dist_q2", "pos")
            )
        )
        t_ns = np.concatenate([p[1] for p in parts])
        first_dev = parts[0][2]
        device_ns = NO_DEVICE_TIME
        if first_dev is not None and all(p[2] is not None for p in parts):
            device_ns = int(first_dev[0])
        self.turns_emitted += 1
        return LidarTurns(
            t_first_ns=np.array([t_ns[0]]),
            device_ns=np.array([device_ns]),
            speed_hz=np.array([np.nan]),
            count=np.array([n]),
            flags=np.array([flags]),
            angle=nodes.angle_ccw_rad,
            range=nodes.range_m,
            intensity=nodes.quality,
            t_ns=t_ns,
        )


def _slice(nodes: Nodes, lo: int, hi: int) -> Nodes:
    return Nodes(
        nodes.start[lo:hi],
        nodes.quality[lo:hi],
        nodes.angle_q6[lo:hi],
        nodes.dist_q2[lo:hi],
        nodes.pos[lo:hi],
    )


def spread_times(
    t_prev_ns: int | None, t_ns: int, k: int, max_node_ns: int = 1_000_000
) -> np.ndarray:
    """Host times of ``k`` nodes received in one chunk at ``t_ns``.

    The nodes arrived between the previous chunk (``t_prev_ns``) and this one; they are
    spread evenly over that interval, which is clamped to ``max_node_ns`` per node so
    a pause before the chunk does not stretch it.
    """
    if k == 0:
        return np.empty(0, dtype=np.int64)
    span = k * max_node_ns if t_prev_ns is None else min(t_ns - t_prev_ns, k * max_node_ns)
    step = span / k
    return t_ns - np.round(step * np.arange(k - 1, -1, -1)).astype(np.int64)
