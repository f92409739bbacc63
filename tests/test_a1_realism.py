"""The A1 emulator's real-capture defaults, seen through the driver and the datasheet.

An emulated A1 with its defaults is captured by the real scanner (standard scan, as the
three real captures were) and characterized; every statistic of the point sequence
must fall inside what the three real A1M8 captures measure, as docs/A1.md ("What real
units send") lists them with their source (REAL below, copied from that table), and
the datasheet must report the quality levels, zero-range fraction and nodes per turn
the emulator was given.
"""

from __future__ import annotations

import numpy as np
import pytest

from sensorbench.characterize.lidar.display import datasheet
from sensorbench.characterize.lidar.stats import characterize_turns, sequence_stats
from sensorbench.drivers.a1_reader import A1Scanner
from sensorbench.logs import LidarTurns
from sensorbench.sim.a1_samples import (
    IDEAL_A1,
    REAL_NODES_PER_TURN,
    REAL_SAMPLE_US,
    REAL_ZERO_FRACTION,
    A1Realism,
    RoomSamples,
)
from sensorbench.sim.emulator_a1 import A1Emulator

REAL = {  # docs/A1.md, "What real units send": the three real captures' ranges
    "zero_pct": (35.0, 54.0),
    "no_return_run_mean": (6.9, 22.6),
    "no_return_run_median": (2.0, 3.0),
    "resume_step_back_deg": (4.4, 5.1),
    "backward_not_at_change_pct": (15.0, 23.0),
    "return_step_p1_deg": 0.25,  # at least (the smallest p1 of the three)
    "return_step_p99_deg": 3.7,  # at most (the largest p99 of the three)
    "backward_step_pct": (2.0, 4.0),
    "no_return_with_quality_pct": (9.0, 28.0),
    "turn_span_deg": (352.0, 367.0),
    "turns_under_360": (41, 44),
    "first_point_deg": (351.0, 359.0),
}


def _capture(samples: RoomSamples, n_turns: int, speed: float = 3.0) -> LidarTurns:
    """``n_turns`` complete turns of an emulated A1 at ``speed``, with every node delivered
    (at 3x a 4 kB pty holds 130 ms of nodes: a host stall longer than that drops whole
    nodes, which no decoder can see; such a run is repeated, not judged)."""
    for _ in range(3):
        with A1Emulator(samples, speed=speed) as emu:
            sc = A1Scanner(emu.path, read_timeout_s=0.5)
            sc.open()
            sc.start()
            out = []
            while sum(t.n_turns for t in out) < n_turns:
                out.append(sc.poll(0.02)[2])
            sc.close()
            if emu.truth().delivered.all():
                return LidarTurns.concat(out)
    raise AssertionError("the pty dropped nodes in three runs: the machine is overloaded")


@pytest.fixture(scope="module")
def real_defaults() -> LidarTurns:
    return _capture(RoomSamples.generate(duration_s=60.0, seed=11), 45)


def test_the_point_sequence_falls_inside_the_real_captures(real_defaults):
    q = sequence_stats(real_defaults)
    lo, hi = REAL["no_return_run_mean"]
    assert lo <= q.no_return_run_mean <= hi, q
    assert q.return_step_p1_deg >= REAL["return_step_p1_deg"], q
    assert q.return_step_p99_deg <= REAL["return_step_p99_deg"], q
    # and spread like theirs, not like an even sweep (1.14 deg each)
    assert q.return_step_p99_deg - q.return_step_p1_deg > 2.5, q
    lo, hi = REAL["no_return_run_median"]  # mostly short runs, a few long
    assert lo <= q.no_return_run_median <= hi, q
    lo, hi = REAL["backward_step_pct"]
    assert lo <= q.backward_step_pct <= hi, q
    lo, hi = REAL["backward_not_at_change_pct"]
    assert lo <= q.backward_not_at_change_pct <= hi, q
    lo, hi = REAL["resume_step_back_deg"]  # where returns resume
    assert lo <= q.resume_step_back_deg <= hi, q
    lo, hi = REAL["no_return_with_quality_pct"]
    assert lo <= q.no_return_with_quality_pct <= hi, q
    lo, hi = REAL["turn_span_deg"]
    # a span's ends fall anywhere within a node's step of the turn's ends (1.14 deg at
    # 317 nodes a turn): the extremes of two samples of ~45 turns differ by up to it
    step = 360.0 / REAL_NODES_PER_TURN
    assert lo - step <= q.turn_span_min_deg and q.turn_span_max_deg <= hi + step, q
    # 41 of 44 real turns under 360 deg: at least the lower 95 % Wilson bound, 82 %
    assert q.turns_under_360_pct >= 82.0, q
    lo, hi = REAL["first_point_deg"]
    assert lo <= q.first_point_deg[0] and q.first_point_deg[1] <= hi + 1 / 64, q


def test_an_ideal_sweep_is_outside_them():
    """The statistics tell the idealised emulator from the real units (what the realism
    knobs are for)."""
    ideal = RoomSamples.generate(
        duration_s=20.0, rate_hz=5.5, samples_per_s=2000, p_no_return=0.02, realism=IDEAL_A1
    )
    q = sequence_stats(_capture(ideal, 20))
    assert q.no_return_run_mean < REAL["no_return_run_mean"][0]
    assert q.return_step_p99_deg - q.return_step_p1_deg < 0.1
    assert q.backward_step_pct == 0 and q.no_return_with_quality_pct == 0


def test_the_datasheet_says_none_where_there_is_nothing_to_count():
    """No backward step (an ideal sweep): what backward steps are was printed as "nan %",
    "nan°"; no no-return at all, the runs' mean and median as "nan"; the period's p1–p99
    from 3 turns."""
    ideal = RoomSamples.generate(
        duration_s=5.0, rate_hz=5.5, samples_per_s=2000, p_no_return=0.0, realism=IDEAL_A1
    )
    ch = characterize_turns(_capture(ideal, 5), device="front", model="A1", timing_only=True)
    table = datasheet(ch)
    assert "nan" not in table and "% of steps backward\n" in table, table
    assert ch.sequence.backward_step_pct == 0
    # 5 turns: fewer than 20 single periods, no percentile pair (the sample's extremes)
    assert ch.timing.n_single_periods < 20
    period = next(line for line in table.splitlines() if line.startswith("Turn period"))
    assert "p5–p95" not in period and "p1–p99" not in period and "too few for tails" in period


def test_characterization_reports_what_the_real_defaults_give(real_defaults):
    ch = characterize_turns(real_defaults, device="front", model="A1", timing_only=True)
    doc = ch.as_dict()
    ret = doc["returns"]
    n = ret["n_points"]
    assert n > 14_000
    # zero-range fraction: the room's dark sectors and the short bursts cover 45 % of
    # the bearings between them (the sectors fixed, the bursts random: 0.3 % sigma
    # over 45 turns), up to the flicker (0.3 %)
    assert abs(ret["no_return_pct"] / 100 - REAL_ZERO_FRACTION) < 0.02
    lo, hi = REAL["zero_pct"]
    assert lo <= ret["no_return_pct"] <= hi
    # quality histogram of the returns: the given levels, each within 4 sigma
    n_ret = n - round(n * ret["no_return_pct"] / 100)
    levels = dict(A1Realism().quality_levels)
    assert set(ret["intensity_pct"]) == {str(q) for q in levels}
    for q, p in levels.items():
        got = ret["intensity_pct"][str(q)] / 100
        assert abs(got - p) <= 4 * np.sqrt(p * (1 - p) / n_ret), (q, got, p)
    # nodes per turn: every complete turn has 317 +- 1 (boundary between samples)
    ppt = doc["timing"]["points_per_turn"]
    assert ppt["median"] == REAL_NODES_PER_TURN
    assert ppt["p5"] >= REAL_NODES_PER_TURN - 1 and ppt["p95"] <= REAL_NODES_PER_TURN + 1
    # device clock: 317 x 508 us per turn
    rate = 1e6 / (REAL_SAMPLE_US * REAL_NODES_PER_TURN)
    assert doc["timing"]["clock"] == "device"
    assert abs(doc["timing"]["rate_hz"] / rate - 1) < 0.002
    assert doc["sequence"]["n_turns"] >= 40
    table = datasheet(ch)
    for row in ("No returns", "Intensity levels       15: 9", "No-return runs", "Turn span"):
        assert row in table


def test_a_standard_and_an_express_stream_of_one_unit_see_the_same_room():
    """One seed is one unit and one room at any sample rate: the dark sectors (the
    bearings without returns) agree between the standard and the express samples."""
    std = RoomSamples.generate(duration_s=5.0, seed=4)
    exp = RoomSamples.generate(duration_s=5.0, seed=4, samples_per_s=2e6 / REAL_SAMPLE_US)
    bins = np.arange(0, 361, 5)
    dark = [
        np.histogram(s.angle_deg_cw[s.range_m == 0], bins)[0]
        / np.maximum(np.histogram(s.angle_deg_cw, bins)[0], 1)
        for s in (std, exp)
    ]
    assert np.mean(np.abs(dark[0] - dark[1]) < 0.2) > 0.85
