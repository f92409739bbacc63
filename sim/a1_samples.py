"""Synthetic RPLIDAR A1 samples: a room seen from inside, and how real units depart from an
ideal sweep (:class:`A1Realism`; the figures and their sources are in docs/A1.md,
"What real units send")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sensorbench.sim.emulator_base import check_sweep, room_ranges


@dataclass(frozen=True)
class A1Realism:
    """How a real A1's standard-scan node stream departs from an ideal sweep.

    Defaults follow what is known of real units; docs/A1.md ("What real units send")
    says what each rests on. :data:`IDEAL_A1` switches every effect off.

    Attributes:
        quality_levels: ``(quality, probability)`` of a node with a return; real units
            send 15 almost always and rarely 6-14 (the split among 6-14 is assumed).
            Empty: the old synthetic ``60 - 3·range`` quality.
        start_angle_deg: range of the angle (°, clockwise) the start-flag node reads;
            real units raise the flag on a node reading 351-359°, not at 0°.
        overlap_deg: range of how much more than 360° a turn's nodes span (°, from
            the start-flag node to the last node): the angle steps back by that much
            (plus one node step) at the next start flag, so turns overlap.
        no_return_lead_deg: range of how far ahead of the head (°) the nodes of a run
            of no-returns read, one draw per run (the start-flag node keeps its
            reading): in a real A1's node sequence every run of distance-0 nodes reads
            4-7° ahead, so the angle steps back 3-6° at the return after it
            (docs/A1.md, "What real units send").
        back_step_prob: probability that any node reads an angle behind the previous
            one, besides the lead (0: the real sequence shows no other steps beyond
            its 1° truncation).
        back_step_max_deg: largest such backward step (°).
    """

    quality_levels: tuple[tuple[int, float], ...] = ((15, 0.97), (10, 0.015), (6, 0.015))
    start_angle_deg: tuple[float, float] = (351.0, 359.0)
    overlap_deg: tuple[float, float] = (1.0, 9.0)
    no_return_lead_deg: tuple[float, float] = (4.0, 7.0)
    back_step_prob: float = 0.0
    back_step_max_deg: float = 7.0


IDEAL_A1 = A1Realism(
    quality_levels=(),
    start_angle_deg=(0.0, 0.0),
    overlap_deg=(0.0, 0.0),
    no_return_lead_deg=(0.0, 0.0),
    back_step_prob=0.0,
)
"""The emulator's earlier sweep: start flag at 0°, no overlap, no backward steps."""

REAL_SAMPLE_US = 508
"""Standard sample duration an A1M8 (firmware 1.29) answers to GET_SAMPLERATE (µs)."""
REAL_EXPRESS_US = 254
"""Express sample duration the same unit answers (µs)."""
REAL_NODES_PER_TURN = 317
"""Nodes per turn of a real A1M8 at its default motor speed (~6.2 Hz at 508 µs)."""
REAL_ZERO_FRACTION = 0.45
"""Fraction of nodes with distance 0 in a room (real captures: 35-54 %)."""


@dataclass
class RoomSamples:
    """A1 samples of a rectangular room around the sensor, for scenario-free emulation.

    The sensor sits at ``(x, y)`` in a ``width`` × ``depth`` m room (walls at 0 and
    width/depth); ranges get Gaussian noise of ``sigma_m``; beams beyond
    ``max_range_m`` or with probability ``p_no_return`` return 0. The node stream
    follows ``realism`` (real-capture defaults; :data:`IDEAL_A1` for an ideal sweep).
    """

    t_s: np.ndarray
    angle_deg_cw: np.ndarray
    range_m: np.ndarray
    intensity: np.ndarray
    turn: np.ndarray

    @classmethod
    def generate(
        cls,
        duration_s: float = 20.0,
        rate_hz: float | None = None,
        samples_per_s: float | None = None,
        width: float = 6.0,
        depth: float = 8.0,
        x: float = 2.5,
        y: float = 3.0,
        sigma_m: float = 0.01,
        p_no_return: float = REAL_ZERO_FRACTION,
        max_range_m: float = 12.0,
        seed: int = 0,
        realism: A1Realism | None = None,
    ) -> RoomSamples:
        """Samples for ``duration_s`` s.

        ``samples_per_s`` defaults to one per :data:`REAL_SAMPLE_US`, ``rate_hz`` to
        :data:`REAL_NODES_PER_TURN` nodes per turn. The earlier ideal emulator is
        ``generate(rate_hz=5.5, samples_per_s=2000, p_no_return=0.02, realism=IDEAL_A1)``.
        """
        rl = A1Realism() if realism is None else realism
        fs = 1e6 / REAL_SAMPLE_US if samples_per_s is None else float(samples_per_s)
        rate = fs / REAL_NODES_PER_TURN if rate_hz is None else float(rate_hz)
        check_sweep(duration_s, rate, fs)
        rng = np.random.default_rng(seed)
        n = int(duration_s * fs)
        t = np.arange(n) / fs
        phase = t * rate
        turn = np.floor(phase).astype(np.int64)
        k = int(turn[-1]) + 1
        start = rng.uniform(*rl.start_angle_deg, k)
        span = 360.0 + rng.uniform(*rl.overlap_deg, k)
        first = np.flatnonzero(np.concatenate(([True], turn[1:] != turn[:-1])))
        j = np.arange(n) - first[turn]  # node index within its turn
        per_turn = fs / rate
        # the start-flag node reads start[k], the turn's last node start[k] + span[k]
        head_cw = np.mod(start[turn] + span[turn] * j / (per_turn - 1), 360.0)
        r = room_ranges(head_cw, width, depth, x, y) + rng.normal(0.0, sigma_m, n)
        lost = (r > max_range_m) | (rng.random(n) < p_no_return)
        r[lost] = 0.0
        angle_cw = head_cw.copy()
        back = rng.random(n) < rl.back_step_prob
        angle_cw[back] = np.mod(
            angle_cw[back] - rng.uniform(0, rl.back_step_max_deg, back.sum()), 360
        )
        if rl.quality_levels:
            levels = np.array([q for q, _ in rl.quality_levels], dtype=np.uint8)
            prob = np.array([p for _, p in rl.quality_levels], dtype=np.float64)
            quality = levels[rng.choice(levels.size, n, p=prob / prob.sum())]
        else:
            quality = np.clip(np.round(60 - 3 * r), 1, 63).astype(np.uint8)
        quality[lost] = 0
        if rl.no_return_lead_deg[1] > 0:  # drawn last: the draws above stay as they were
            run_start = lost & ~np.concatenate(([False], lost[:-1]))
            run = np.cumsum(run_start) - 1
            lead = rng.uniform(*rl.no_return_lead_deg, int(run_start.sum()))
            ahead = lost & (j > 0)
            angle_cw[ahead] = np.mod(angle_cw[ahead] + lead[run[ahead]], 360.0)
        return cls(t, angle_cw, r, quality, turn)
