"""The vendor near filter (ldlidar_stl_sdk ``Tofbf::NearFilter``), point for point.

``reference_near_filter`` below is a line-by-line transcription of the SDK's C++
(src/tofbf.cpp) into plain Python loops; the vectorised implementation must drop
exactly the points it drops, on constructed sectors and on random turns with
dropouts, far points and dim clusters.
"""

from __future__ import annotations

import numpy as np
import pytest

from sensorbench.drivers.ld19_near_filter import (
    near_filter_mask,
    near_filter_turns,
    vendor_mask,
)
from sensorbench.logs import LidarTurns

SPEED = 3375.0  # deg/s: 0.75° per sample at 4500 samples/s, exact in binary; limit 1.5°


def reference_near_filter(points: list[tuple[float, int, int, int]], speed: float) -> set[int]:
    """Indices the SDK keeps; ``points`` are (angle, distance, intensity, index)."""
    normal, pending, item, group = [], [], [], []
    for n in points:
        (pending if n[1] < 5000 else normal).append(n)
    if not points:
        return set()
    limit = speed / 4500 * 2
    pending.sort(key=lambda p: p[0])
    last = (-10.0, 0, 0, -1)
    for n in pending:
        cut = abs(n[0] - last[0]) > limit or abs(n[1] - last[1]) > last[1] * 0.03
        if cut and item:
            group.append(item)
            item = []
        item.append(n)
        last = n
    if item:
        group.append(item)
    if not group:
        return {p[3] for p in normal}
    first_item, last_item = group[0][0], group[-1][-1]
    if (
        abs(first_item[0] + 360.0 - last_item[0]) < limit
        and abs(first_item[1] - last_item[1]) < last[1] * 0.03
    ):
        group[0] = group[-1] + group[0]
        del group[-1]
    for n in group:
        if not n:
            continue
        if len(n) > 15:
            normal += n
            continue
        if len(n) < 3:
            c = sum(m[2] for m in n) // len(n)
            if c < 220:
                continue
        if sum(m[2] for m in n) / len(n) > 15:
            normal += n
    return {p[3] for p in normal}


def _reference_drop(angle, dist, inten, speed=SPEED) -> np.ndarray:
    pts = [
        (float(a), int(d), int(i), k)
        for k, (a, d, i) in enumerate(zip(angle, dist, inten, strict=True))
    ]
    kept = reference_near_filter(pts, speed)
    return np.array([k not in kept for k in range(len(pts))])


def test_every_third_beam_missing_drops_all_38_returns():
    # 57 beams at 1 m, intensity 200, beams 2, 5, 8, ... without a return: every two
    # returns between dropouts are a 2-point cluster below intensity 220
    k = np.arange(57)
    angle = 30.0 + 0.75 * k
    dist = np.where(k % 3 == 2, 0, 1000)
    inten = np.where(k % 3 == 2, 0, 200)
    drop = vendor_mask(angle, dist, inten, SPEED)
    np.testing.assert_array_equal(drop, _reference_drop(angle, dist, inten))
    assert int(np.sum(drop & (dist > 0))) == 38
    assert drop.all()  # the 19 single dim no-returns go too
    # the same wall without dropouts is one 57-point cluster: kept
    assert not vendor_mask(angle, np.full(57, 1000), np.full(57, 200), SPEED).any()


def test_dropouts_split_a_wall_and_bright_or_long_pieces_survive():
    k = np.arange(40)
    angle = 100.0 + 0.75 * k
    dist = np.full(40, 2000)
    inten = np.full(40, 200)
    dist[[10, 11, 25]] = 0  # pieces: 10, [0 0], 13, [0], 14 points
    inten[[10, 11]] = 230  # a bright no-return run (seen on real units): it stays
    inten[12:25] = 12  # the middle piece is dim: dropped
    drop = vendor_mask(angle, dist, inten, SPEED)
    np.testing.assert_array_equal(drop, _reference_drop(angle, dist, inten))
    assert np.flatnonzero(drop).tolist() == list(range(12, 26))


def test_clusters_meet_across_zero_and_a_turn_that_is_one_cluster_is_dropped():
    k = np.arange(480)
    angle = 0.75 * k  # a whole turn, 0 .. 359.25°
    dist = np.full(480, 1500)
    inten = np.full(480, 10)  # dim everywhere
    dist[5:470] = 6000  # only 5 points after 0° and 10 before 360° are near
    drop = vendor_mask(angle, dist, inten, SPEED)
    np.testing.assert_array_equal(drop, _reference_drop(angle, dist, inten))
    # merged across 0°/360° into one 15-point dim cluster: dropped
    assert np.flatnonzero(drop).tolist() == [*range(5), *range(470, 480)]
    # the SDK's quirk: one cluster meeting itself at 0°/360° merges into itself and
    # is erased, so every near point of the turn goes, however bright
    one = vendor_mask(angle, np.full(480, 1500), np.full(480, 250), SPEED)
    assert one.all() and _reference_drop(angle, np.full(480, 1500), np.full(480, 250)).all()


@pytest.mark.parametrize("seed", range(12))
def test_random_turns_match_the_transcribed_sdk_point_for_point(seed):
    rng = np.random.default_rng(seed)
    n = 480
    angle = 0.75 * np.arange(n)
    # piecewise walls with 3 % jumps, far stretches, dropouts and dim pieces
    walls = rng.uniform(300, 7000, 30)
    dist = np.repeat(walls, n // 30).astype(np.int64)
    dist = np.round(dist * rng.uniform(0.995, 1.005, n)).astype(np.int64)
    dist[rng.random(n) < rng.uniform(0.05, 0.5)] = 0
    inten = np.repeat(rng.integers(0, 256, 30), n // 30)
    inten = np.clip(inten + rng.integers(-20, 21, n), 0, 255)
    inten[rng.random(n) < 0.1] = 240
    order = rng.permutation(n)  # the SDK sorts by angle; input order must not matter
    drop = vendor_mask(angle[order], dist[order], inten[order], SPEED)
    ref = _reference_drop(angle[order], dist[order], inten[order])
    np.testing.assert_array_equal(drop, ref)
    assert 0 < drop.sum() < n  # a case that exercises both outcomes


def test_stored_turns_use_the_vendor_filter_and_keep_no_returns_inf():
    # the every-third-missing sector inside a stored turn (CCW rad, m, inf = no return)
    k = np.arange(57)
    cw = 30.0 + 0.75 * k
    rng_m = np.where(k % 3 == 2, np.inf, 1.0)
    inten = np.where(k % 3 == 2, 0, 200)
    ccw = np.deg2rad(np.mod(360.0 - cw, 360.0))
    assert near_filter_mask(ccw, rng_m, inten, SPEED / 360.0).all()
    turns = LidarTurns(
        t_first_ns=[0],
        device_ns=[0],
        speed_hz=[SPEED / 360.0],
        count=[57],
        flags=[0],
        angle=ccw.astype(np.float32),
        range=rng_m.astype(np.float32),
        intensity=inten.astype(np.uint16),
        t_ns=np.zeros(57, np.int64),
    )
    out = near_filter_turns(turns)
    assert int(np.isnan(out.range).sum()) == 38
    assert np.array_equal(np.isinf(out.range), k % 3 == 2)
