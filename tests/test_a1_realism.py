"""The A1 emulator's real-capture defaults, seen through the driver and the datasheet.

An emulated A1 with the defaults (quality 15 on ~97 % of returns, 45 % of nodes
without a return, 317 nodes per turn, start flags on 351-359°, turns overlapping,
no-returns reading 4-7° ahead so the angle steps back after them) is captured by
the real scanner and characterized; the datasheet must report the quality
histogram, zero-range fraction and nodes per turn the emulator was given.
"""

from __future__ import annotations

import time

import numpy as np

from sensorbench.characterize.lidar.stats import characterize_turns
from sensorbench.drivers.a1_scanner import A1Scanner
from sensorbench.logs import LidarTurns
from sensorbench.sim.emulator_a1 import (
    REAL_NODES_PER_TURN,
    REAL_SAMPLE_US,
    REAL_ZERO_FRACTION,
    A1Emulator,
    A1Realism,
    RoomSamples,
)


def _capture(seconds: float, speed: float = 4.0) -> tuple[LidarTurns, object, A1Scanner]:
    with A1Emulator(RoomSamples.generate(duration_s=60.0, seed=11), speed=speed) as emu:
        sc = A1Scanner(emu.path, read_timeout_s=0.5)
        sc.open()
        sc.start()
        out = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            out.append(sc.poll(0.02)[2])
        sc.close()
        truth = emu.truth()
    return LidarTurns.concat(out), truth, sc


def test_characterization_reports_what_the_real_defaults_give():
    turns, _, sc = _capture(4.0)
    assert sc.sample_rate.standard_us == REAL_SAMPLE_US
    ch = characterize_turns(turns, device="front", model="A1", timing_only=True)
    doc = ch.as_dict()
    ret = doc["returns"]
    n = ret["n_points"]
    assert n > 20_000
    # zero-range fraction: binomial, 4 sigma
    p0 = REAL_ZERO_FRACTION
    assert abs(ret["no_return_pct"] / 100 - p0) <= 4 * np.sqrt(p0 * (1 - p0) / n)
    # quality histogram of the returns: the given levels, each within 4 sigma
    n_ret = n - round(n * ret["no_return_pct"] / 100)
    levels = dict(A1Realism().quality_levels)
    assert set(ret["intensity_pct"]) == {str(q) for q in levels}
    for q, p in levels.items():
        got = ret["intensity_pct"][str(q)] / 100
        assert abs(got - p) <= 4 * np.sqrt(p * (1 - p) / n_ret), (q, got, p)
    assert ret["no_return_with_intensity_pct"] == 0  # an A1 sends quality 0 then
    # nodes per turn: every complete turn has 317 +- 1 (boundary between samples)
    ppt = doc["timing"]["points_per_turn"]
    assert ppt["median"] == REAL_NODES_PER_TURN
    assert ppt["p5"] >= REAL_NODES_PER_TURN - 1 and ppt["p95"] <= REAL_NODES_PER_TURN + 1
    # device clock: 317 x 508 us per turn
    rate = 1e6 / (REAL_SAMPLE_US * REAL_NODES_PER_TURN)
    assert doc["timing"]["clock"] == "device"
    assert abs(doc["timing"]["rate_hz"] / rate - 1) < 0.002
    table = ch.table()
    assert "No returns" in table and "Intensity levels  15: 9" in table


def test_real_turns_start_near_360_overlap_and_step_back():
    turns, truth, _ = _capture(2.0, speed=8.0)
    cw = np.mod(360.0 - np.degrees(turns.angle.astype(np.float64)), 360.0)
    first = cw[turns.offset]
    assert np.all((first >= 351) & (first <= 359 + 1 / 64))
    # each turn ends past its own start: the last nodes repeat angles the next
    # turn reads again (1-9 deg of overlap)
    ret = np.isfinite(turns.range)
    for i in range(turns.n_turns - 1):
        t = turns.turn(i)
        a = np.unwrap(np.radians(np.mod(360.0 - np.degrees(t.angle.astype(np.float64)), 360)))
        # the last returns (no-returns read ahead of the head): 1-9 deg past 360, less
        # a few node steps (the last nodes may be no-returns; 317 nodes of ~1.15 deg)
        last = np.flatnonzero(np.isfinite(t.range))[-1]
        span = np.degrees(a[last] - a[0])
        assert 360.0 + 1.0 - 1.2 * (t.range.size - last) < span < 360.0 + 9.0 + 0.1, (i, span)
    # backward steps within turns: where a run of no-returns (read 4-7 deg ahead) gives
    # way to a return, by the lead less one node step, and nowhere else
    d = np.degrees(np.diff(np.unwrap(np.radians(cw))))
    same = np.ones(d.size, bool)
    same[turns.offset[1:] - 1] = False
    back = same & (d < 0)
    assert back.sum() > 100
    assert np.all(~ret[:-1][back] & ret[1:][back])
    step = (360.0 + np.array([1.0, 9.0])) / (REAL_NODES_PER_TURN - 1)  # node step range
    q6 = 1 / 64  # angle resolution on the wire
    assert np.all((d[back] >= -7.0 + step[0] - q6) & (d[back] <= -4.0 + step[1] + q6))
    # the truth says the same (every node, q6 units)
    assert np.all(truth.quality[truth.dist_q2 == 0] == 0)
