"""Dual-scan merge on geometry with known answers (ray-cast truth)."""

from __future__ import annotations

import json
from dataclasses import replace

import lidar_util as U
import numpy as np
import pytest
import session_util as su
from click.testing import CliRunner
from scipy.spatial.transform import Rotation

from sensorbench.cli import cli
from sensorbench.errors import FusionError, SessionError
from sensorbench.fusion.scan_merge import (
    MAX_LAG_S,
    MergeSetup,
    Mount,
    StreamingMerger,
    merge_scans,
    pair_turns,
    points_in_polygon,
    pose_interpolator,
    turn_centres_ns,
)
from sensorbench.fusion.scan_merge_session import merge_session
from sensorbench.logs import LidarTurns, Session, TurnFlag
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import SIM_T0_NS, Simulation, simulate_to_session
from sensorbench.sim.world import Obstacle, World, box_vertices

FRONT = (0.2, 0.0, 0.0)
REAR = (-0.2, 0.0, np.pi)
SIGMA = 0.01  # injected range noise (m)
FOOTPRINT = np.array([[-0.3, -0.3], [0.3, -0.3], [0.3, 0.3], [-0.3, 0.3]])


def _view(turns: LidarTurns, half_width_deg: float) -> LidarTurns:
    """Blank (inf) every return outside ±half_width of the sensor's forward axis."""
    a = turns.angle.astype(float)
    keep = np.minimum(a, 2 * np.pi - a) <= np.radians(half_width_deg)
    return replace(turns, range=np.where(keep, turns.range, np.inf))


def _pair_of_scans(world, pose, duration_s=3.0, sigma=SIGMA, rate_hz=5.5, sps=2000.0):
    common = dict(rate_hz=rate_hz, samples_per_s=sps, sigma_m=sigma)
    f = U.synth_scan(world, pose, duration_s, seed=1, mount=FRONT, phase_rad=0.3, **common)
    r = U.synth_scan(
        world, pose, duration_s, seed=2, mount=REAR, t0_s=0.04, phase_rad=1.1, **common
    )
    return f.turns, r.turns


def _truth_from_body(world, pose, turns: LidarTurns, i: int) -> np.ndarray:
    one = turns.turn(i)
    x, y, yaw = pose(np.array([one.t_ns[0] * 1e-9]))
    return world.raycast(np.array([x[0], y[0]]), yaw[0] + one.angle.astype(float))


def test_two_half_views_merge_to_raycast_truth():
    world, pose = U.room(), U.still(0.5, -0.3, 0.7)
    front, rear = _pair_of_scans(world, pose)
    # each lidar sees ±100° around its own forward axis: together 360° with overlap
    res = merge_scans(_view(front, 100), _view(rear, 100), MergeSetup(Mount(*FRONT), Mount(*REAR)))
    assert res.turns.n_turns == min(front.n_turns, rear.n_turns) >= 15
    step = res.step_rad
    x, y, yaw = pose(np.zeros(1))
    origin = np.array([x[0], y[0]])
    one = res.turns.turn(0)
    truth = _truth_from_body(world, pose, res.turns, 0)
    # bins away from depth edges and corners: the truth is nearly linear over ±1 step
    side = [world.raycast(origin, yaw[0] + one.angle + d) for d in (-step, step)]
    with np.errstate(invalid="ignore"):
        smooth = np.abs(side[0] + side[1] - 2 * truth) < 0.01
    # a truth point is visible when some lidar, within its ±100° view, sees it unoccluded
    px = origin[0] + truth * np.cos(yaw[0] + one.angle)
    py = origin[1] + truth * np.sin(yaw[0] + one.angle)
    visible = np.zeros(truth.size, dtype=bool)
    for mx, my, myaw in (FRONT, REAR):
        lx = origin[0] + np.cos(yaw[0]) * mx - np.sin(yaw[0]) * my
        ly = origin[1] + np.sin(yaw[0]) * mx + np.cos(yaw[0]) * my
        bearing = np.arctan2(py - ly, px - lx)
        rel = np.angle(np.exp(1j * (bearing - yaw[0] - myaw)))
        with np.errstate(invalid="ignore"):
            seen = world.raycast(np.array([lx, ly]), bearing) >= np.hypot(px - lx, py - ly) - 1e-3
        visible |= seen & (np.abs(rel) <= np.radians(100))
    use = smooth & visible & np.isfinite(truth)
    # parallax shadows (a box edge hides the wall behind from both lidars) are small
    assert use.sum() >= 0.9 * np.isfinite(truth).sum()
    err = np.concatenate(
        [
            (res.turns.turn(i).range - _truth_from_body(world, pose, res.turns, i))[use]
            for i in range(res.turns.n_turns)
        ]
    )
    # every bin a lidar saw is finite
    assert np.all(np.isfinite(err))
    # interpolating between two noisy points keeps the error ≤ σ per bin (plus mm of
    # flat-wall curvature); over N ≈ 5000 bins P(|N(0,σ)| > 4.5σ) · N ≈ 0.03
    assert np.max(np.abs(err)) <= 4.5 * SIGMA
    # mean error: SE ≤ σ/√N
    assert abs(np.mean(err)) <= 3 * SIGMA / np.sqrt(err.size)
    assert np.sqrt(np.mean(err**2)) <= SIGMA


def test_inf_where_neither_saw_anything():
    world, pose = U.room(boxes=False), U.still(0.5, -0.3, 0.7)
    front, rear = _pair_of_scans(world, pose)
    blind_rear = replace(rear, range=np.full(rear.n_points, np.inf))
    assert blind_rear.n_turns
    res = merge_scans(_view(front, 80), blind_rear, MergeSetup(Mount(*FRONT), Mount(*REAR)))
    a = res.turns.angle.astype(float)
    behind = np.minimum(np.abs(a - np.pi), 2 * np.pi - np.abs(a - np.pi)) < np.radians(60)
    assert np.all(np.isinf(res.turns.range[behind]))
    ahead = np.minimum(a, 2 * np.pi - a) < np.radians(60)
    assert np.all(np.isfinite(res.turns.range[ahead]))


def test_footprint_hits_are_removed():
    x0, y0, yaw0 = 0.5, -0.3, 0.7
    pose = U.still(x0, y0, yaw0)
    c, s = np.cos(yaw0), np.sin(yaw0)
    # a mast on the robot at body (0, 0.15), inside the 0.6 m square footprint
    mast = box_vertices((x0 - s * 0.15, y0 + c * 0.15), (0.06, 0.06), yaw0)
    world = World([*U.room().obstacles, Obstacle("mast", "box", mast)])
    front, rear = _pair_of_scans(world, pose)
    setup = MergeSetup(Mount(*FRONT), Mount(*REAR))
    kept = merge_scans(front, rear, setup).turns
    removed = merge_scans(front, rear, MergeSetup(Mount(*FRONT), Mount(*REAR), FOOTPRINT)).turns

    def inside(t: LidarTurns) -> np.ndarray:
        fin = np.isfinite(t.range)
        a, r = t.angle.astype(float), np.where(fin, t.range, 0.0)
        return fin & points_in_polygon(r * np.cos(a), r * np.sin(a), FOOTPRINT)

    assert inside(kept).sum() >= 3 * kept.n_turns  # the mast shows without the footprint
    assert inside(removed).sum() == 0
    # away from the mast's shadow nothing changes
    a = kept.angle.astype(float)
    far_from_mast = np.abs(np.mod(a - np.pi / 2 + np.pi, 2 * np.pi) - np.pi) > np.radians(60)
    assert np.array_equal(kept.range[far_from_mast], removed.range[far_from_mast])


def test_pairs_farther_than_max_dt_are_not_merged():
    ms = 1_000_000
    ia, ib = pair_turns(np.array([0, 100, 200, 300]) * ms, np.array([40, 260, 500]) * ms, 100 * ms)
    # 0↔40 and 300↔260 are mutual nearest; 500 is 200 ms from anything
    assert ia.tolist() == [0, 3] and ib.tolist() == [0, 1]

    world, pose = U.room(), U.still(0.5, -0.3, 0.7)
    front, rear = _pair_of_scans(world, pose, duration_s=6.0, rate_hz=10.0, sps=5000.0)
    tc_r = turn_centres_ns(rear)
    hole = (tc_r > 2e9) & (tc_r < 3.5e9)  # the rear lidar is silent for 1.5 s
    keep = np.flatnonzero(~hole)
    rear = LidarTurns.concat([rear.turn(int(i)) for i in keep])
    setup = MergeSetup(Mount(*FRONT), Mount(*REAR), max_dt_s=0.1)
    res = merge_scans(front, rear, setup)
    tc_f, tc_r = turn_centres_ns(front), turn_centres_ns(rear)
    both = (res.front_index >= 0) & (res.rear_index >= 0)
    i_f, i_r = res.front_index[both], res.rear_index[both]
    dt = np.abs(tc_f[i_f] - tc_r[i_r])
    assert np.all(dt <= 0.1e9)
    # brute force: a front turn farther than 0.1 s from every rear turn is never merged
    # with one, and goes out alone when farther than alone_ns (0.3 s)
    far = np.min(np.abs(tc_f[:, None] - tc_r[None, :]), axis=1)
    lonely = far > 0.1e9
    assert lonely.sum() >= 10
    assert not np.any(np.isin(np.flatnonzero(lonely), i_f))
    alone = np.flatnonzero(far > setup.alone_ns())
    assert alone.size >= 5 and res.alone_rear == 0
    assert res.front_index[~both].tolist() == alone.tolist() and res.alone_front == alone.size
    assert res.unpaired_front >= lonely.sum() - alone.size
    flagged = (res.turns.flags & int(TurnFlag.SINGLE_LIDAR)) != 0
    assert flagged.tolist() == (~both).tolist()
    assert np.all(np.diff(res.turns.t_first_ns) > 0)
    # stamps halfway between the two turns
    assert np.all(np.abs(res.turns.t_first_ns[both] - (tc_f[i_f] + tc_r[i_r]) / 2) <= 1)
    assert np.array_equal(res.turns.t_first_ns[~both], tc_f[alone])
    tight = merge_scans(front, rear, MergeSetup(Mount(*FRONT), Mount(*REAR), max_dt_s=0.02))
    assert tight.turns.n_turns < res.turns.n_turns
    pairs = (tight.front_index >= 0) & (tight.rear_index >= 0)
    assert np.all(np.abs(tc_f[tight.front_index[pairs]] - tc_r[tight.rear_index[pairs]]) <= 0.02e9)


def _wall_smear(world_pose, merged: LidarTurns) -> float:
    """RMS distance (m) of merged points near the x = 4 m wall from that wall, in the world."""
    d = []
    for i in range(merged.n_turns):
        one = merged.turn(i)
        x, y, yaw = world_pose(np.array([one.t_ns[0] * 1e-9]))
        fin = np.isfinite(one.range)
        a = yaw[0] + one.angle[fin].astype(float)
        wx, wy = x[0] + one.range[fin] * np.cos(a), y[0] + one.range[fin] * np.sin(a)
        near = (np.abs(wx - 4.0) < 0.5) & (np.abs(wy) < 2.5)
        d.append(wx[near] - 4.0)
    d = np.concatenate(d)
    assert d.size > 500
    return float(np.sqrt(np.mean(d**2)))


def test_motion_compensation_reduces_wall_smear():
    world = U.room(boxes=False)
    pose = U.turning(1.0)  # 1 rad/s: 0.1 rad per 10 Hz turn
    front, rear = _pair_of_scans(world, pose, duration_s=4.0, rate_hz=10.0, sps=5000.0)
    plain = merge_scans(front, rear, MergeSetup(Mount(*FRONT), Mount(*REAR)))
    # odometry as a pose stream at 100 Hz, interpolated per point
    t = np.arange(0, 4.2, 0.01)
    x, y, yaw = pose(t)
    quat = Rotation.from_euler("z", yaw[:, None]).as_quat()
    stream = su.all_valid((t * 1e9).astype(np.int64), np.column_stack([x, y, 0 * x]), quat)
    comp = merge_scans(
        front, rear, MergeSetup(Mount(*FRONT), Mount(*REAR), pose_at=pose_interpolator(stream))
    )
    smear_plain, smear_comp = _wall_smear(pose, plain.turns), _wall_smear(pose, comp.turns)
    # compensated: noise only (σ, less after interpolation); uncompensated: points
    # up to 0.05 rad off at 4 m (≈ 0.1 m) plus the mis-stamped half of each pair
    assert smear_comp <= 1.5 * SIGMA
    assert smear_plain >= 3 * smear_comp


def _stream(setup: MergeSetup, front: LidarTurns, rear: LidarTurns, late_s: float = 0.0):
    """Push both streams turn by turn in the order their last points arrive (the rear's
    after 1.5 s ``late_s`` later), then flush; the merger, its output, its on_alone calls
    and the front turns it held after each front push."""
    ends = []
    for name, t in (("front", front), ("rear", rear)):
        last = t.t_ns[t.offset + t.count - 1]
        if name == "rear":
            last = np.where(last > 1.5e9, last + round(late_s * 1e9), last)
        ends += [(int(last[i]), name, i) for i in range(t.n_turns)]
    calls: list = []
    held: list = []
    sm = StreamingMerger(setup, on_alone=lambda t, side: calls.append((t, side)))
    out = []
    for _, name, i in sorted(ends):
        out.append(sm.push(name, (front if name == "front" else rear).turn(i)))
        if name == "front":
            held.append(sm._buf["front"].n_turns)
    out.append(sm.flush())
    return sm, LidarTurns.concat(out), calls, held


@pytest.mark.parametrize("gap_s", [0.0, 2.0, 7.0])
def test_streaming_merger_equals_offline(gap_s):
    # the rear silent for gap_s (unplugged) after 2 s: the front goes out alone, flagged,
    # from alone_ns after the rear's last turn to alone_ns before its first again
    world, pose = U.room(), U.turning(0.5)
    front, rear = _pair_of_scans(world, pose, duration_s=12.0, rate_hz=10.0, sps=5000.0)
    tc = turn_centres_ns(rear)
    gone = (tc > 2e9) & (tc < (2 + gap_s) * 1e9)
    rear = LidarTurns.concat(
        [rear.turn(i) for i in range(rear.n_turns) if i % 7 != 3 and not gone[i]]
    )
    setup = MergeSetup(Mount(*FRONT), Mount(*REAR), pose_at=lambda t: pose(t * 1e-9))
    offline = merge_scans(front, rear, setup)
    sm, online, calls, _ = _stream(setup, front, rear)
    assert np.array_equal(online.t_first_ns, offline.turns.t_first_ns)
    assert np.array_equal(online.range, offline.turns.range)
    assert np.array_equal(online.flags, offline.turns.flags)
    assert sm.unpaired == {"front": offline.unpaired_front, "rear": offline.unpaired_rear}
    assert sm.alone == {"front": offline.alone_front, "rear": offline.alone_rear}
    alone = (online.flags & int(TurnFlag.SINGLE_LIDAR)) != 0
    tc_r = turn_centres_ns(rear)
    last, back = tc_r[tc_r < 2.05e9].max(), tc_r[tc_r > 2.05e9].min()
    t, d = online.t_first_ns, setup.alone_ns()
    assert alone.tolist() == ((t > last + d) & (t < back - d)).tolist()
    assert alone.sum() >= 10 * (gap_s - 2 * 0.35)  # 10 Hz, 0.3 s + a turn off each end
    if gap_s:  # an on_alone call at the first lone turn and at the first pair after
        after = int(t[~alone & (t > t[alone][-1])][0])
        assert calls == [(int(t[alone][0]), "front"), (after, None)]
    else:
        assert calls == []
    with pytest.raises(FusionError):
        sm.push("left", front.turn(0))


def test_a_lone_turn_is_the_surviving_lidar_on_the_room():
    # the front sees ±100° around its axis, the rear is gone: the scan's front half is the
    # room (ray-cast from the body at the stamp), the half behind holds no return
    world, pose = U.room(), U.still(0.5, -0.3, 0.7)
    front, _ = _pair_of_scans(world, pose)
    setup = MergeSetup(Mount(*FRONT), Mount(*REAR))
    res = merge_scans(_view(front, 100), LidarTurns.empty(), setup)
    assert res.turns.n_turns == res.alone_front == front.n_turns
    assert np.all(res.turns.flags & int(TurnFlag.SINGLE_LIDAR))
    a = res.turns.angle.astype(float)
    behind = np.minimum(np.abs(a - np.pi), 2 * np.pi - np.abs(a - np.pi)) < np.radians(60)
    assert np.all(np.isinf(res.turns.range[behind]))
    x, y, yaw = pose(np.zeros(1))
    one = res.turns.turn(0)
    truth = _truth_from_body(world, pose, res.turns, 0)
    o, step = np.array([x[0], y[0]]), res.step_rad
    side = [world.raycast(o, yaw[0] + one.angle + d) for d in (-step, step)]
    with np.errstate(invalid="ignore"):
        smooth = np.abs(side[0] + side[1] - 2 * truth) < 0.01
    # and unshadowed from the front lidar (parallax: 16 of 1856 bins are not)
    fx, fy = x[0] + np.cos(yaw[0]) * FRONT[0], y[0] + np.sin(yaw[0]) * FRONT[0]
    px, py = x[0] + truth * np.cos(yaw[0] + one.angle), y[0] + truth * np.sin(yaw[0] + one.angle)
    with np.errstate(invalid="ignore"):
        seen = world.raycast(np.array([fx, fy]), np.arctan2(py - fy, px - fx)) >= np.hypot(
            px - fx, py - fy) - 1e-3
    ahead = (np.minimum(one.angle, 2 * np.pi - one.angle) < np.radians(60)) & smooth & seen
    err = np.concatenate(
        [res.turns.turn(i).range[ahead] - truth[ahead] for i in range(res.turns.n_turns)]
    )
    # as the pairs: ≤ σ per bin after interpolation; over N ≈ 3000 bins P(> 4.5σ)·N ≈ 0.02
    assert err.size > 1000 and np.max(np.abs(err)) <= 4.5 * SIGMA
    assert abs(np.mean(err)) <= 3 * SIGMA / np.sqrt(err.size)


@pytest.mark.parametrize("rear_turns", [0, 20])
def test_streaming_merger_holds_bounded_turns_while_one_lidar_is_gone(rear_turns):
    # the rear unplugged after 2 s (or never up): the front's turns were held, and copied on
    # every push, without bound (257 turns after a minute, 3 282 after ten); now they go out
    # alone alone_ns + 2 max_dt after their time (after the grid is known: MAX_LAG_S past
    # the front's tenth turn when the rear never came)
    world, pose = U.room(), U.turning(0.5)
    front, rear = _pair_of_scans(world, pose, duration_s=12.0, rate_hz=10.0, sps=2000.0)
    rear = LidarTurns.concat([rear.turn(i) for i in range(rear_turns)])
    setup = MergeSetup(Mount(*FRONT), Mount(*REAR), pose_at=lambda t: pose(t * 1e-9))
    sm, online, _, held = _stream(setup, front, rear)
    merged = online.n_turns
    window = 2 * setup.alone_ns() * 1e-9 + 2 * setup.max_dt_s
    bound = window * 10.0 + 2  # 10 turns a second
    start = 0 if rear_turns else round((MAX_LAG_S + 1) * 10) + 1  # the grid wait
    assert max(held[start:]) <= bound, (max(held[start:]), bound)
    offline = merge_scans(front, rear, setup)
    assert merged == offline.turns.n_turns and sm.alone["front"] == offline.alone_front > 60
    assert sm.unpaired["front"] + sm.alone["front"] + np.sum(offline.front_index >= 0) - \
        offline.alone_front == front.n_turns  # each front turn decided once


def test_a_turn_later_than_the_deadline_is_counted_unpaired():
    # the rear's turns delivered 1 s after their time: past alone_ns + 2 max_dt (0.5 s) the
    # front's went out alone, and each late rear turn is counted unpaired (was: not at all)
    world, pose = U.room(), U.still(0.5, -0.3, 0.7)
    front, rear = _pair_of_scans(world, pose, duration_s=4.0, rate_hz=10.0, sps=2000.0)
    setup = MergeSetup(Mount(*FRONT), Mount(*REAR))
    sm, online, _, _ = _stream(setup, front, rear, late_s=1.0)
    paired = np.count_nonzero((online.flags & int(TurnFlag.SINGLE_LIDAR)) == 0)
    for name, t in (("front", front), ("rear", rear)):  # each turn decided once
        assert sm.unpaired[name] + sm.alone[name] + paired == t.n_turns
    tc = turn_centres_ns(rear)  # these arrive ≥ 1 s late: after the front's went alone
    assert sm.unpaired["rear"] >= np.count_nonzero((tc > 2e9) & (tc < 3e9)) >= 9


def test_bad_setup_is_rejected():
    with pytest.raises(FusionError, match="max_dt_s"):
        MergeSetup(Mount(*FRONT), Mount(*REAR), max_dt_s=0)
    with pytest.raises(FusionError, match="footprint"):
        MergeSetup(Mount(*FRONT), Mount(*REAR), footprint=np.zeros((2, 2)))
    with pytest.raises(FusionError, match="mount"):
        Mount.from_seq([0.1, 0.2])
    # a pose stream with a 1 s occlusion: no pose inside it, none outside the stream
    t = np.r_[np.arange(0, 1.0, 0.01), np.arange(2.0, 3.0, 0.01)]
    stream = su.all_valid(
        (t * 1e9).astype(np.int64), np.zeros((t.size, 3)), np.tile([0, 0, 0, 1.0], (t.size, 1))
    )
    x, _, _ = pose_interpolator(stream)(np.array([0.5, 1.5, 2.5, 3.5, -0.1]) * 1e9)
    assert np.isfinite(x).tolist() == [True, False, True, False, False]
    with pytest.raises(FusionError, match="two valid"):
        pose_interpolator(su.all_valid([0], np.zeros((1, 3)), [[0, 0, 0, 1.0]]))


def test_merge_command_on_simulated_session(tmp_path):
    path = simulate_to_session("lidar_static", 2, tmp_path / "s.h5")
    out = tmp_path / "m.h5"
    runner = CliRunner()
    args = ["merge", str(path), "--front", "lidar_front", "--rear", "lidar_rear", "-o", str(out)]
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["mounts_from"] == "stream attrs" and doc["footprint"] is True
    with Session(out) as s, Session(path) as src:
        merged = s.lidar("merged").read()
        assert merged.n_turns == doc["pairs"] + doc["alone_front"] + doc["alone_rear"]
        assert doc["pairs"] >= src.lidar("lidar_front").n_turns - 2
    sim = Simulation("lidar_static", 2)
    x, y, yaw = sim.trajectory.pose(np.zeros(1))
    p = sim.lidar("lidar_front").params
    good = total = 0
    for i in range(0, merged.n_turns, 10):
        one = merged.turn(i)
        truth = sim.world.raycast(np.array([x[0], y[0]]), yaw[0] + one.angle.astype(float))
        ok = np.isfinite(truth)
        sig = np.interp(truth[ok], p["noise_band_edges_m"][1:], p["noise_band_sigma_m"])
        good += int(np.sum(np.abs(one.range[ok] - truth[ok]) <= 4.5 * sig + 0.02))
        total += int(ok.sum())
    # the simulated A1s add mixed pixels (≈ 2 %) and false points at edges, and the
    # nearer return wins, so a few % of bearings read short; the rest match the truth
    assert good / total >= 0.93
    # the output exists: refused without --force; bad names are bad input
    again = runner.invoke(cli, args)
    assert again.exit_code == 2 and "exists" in again.output
    bad = runner.invoke(cli, ["merge", str(path), "--front", "nope", "--rear", "lidar_rear"])
    assert bad.exit_code == 2 and "lidar_front" in bad.output
    with pytest.raises(SessionError):
        Session(tmp_path / "missing.h5")


SPIN_WITH_MAST = """
name = "spin_mast"
description = "spin in place with a mast on the robot that the chassis lidars see"
[robot]
start_xy_m = [0.0, 0.0]
start_yaw_deg = 0.0
[[robot.occluders]]
name = "mast"
kind = "pillar"
center_m = [0.0, 0.12]
radius_m = 0.03
[trajectory]
kind = "spin"
angle_deg = 360.0
repeats = 1
return = true
max_yaw_rate_deg_s = 90.0
max_yaw_accel_deg_s2 = 180.0
pause_s = 1.0
[mocap]
occlusion_rate_hz = 0.0
"""


def _world_distance(sim, turns: LidarTurns) -> np.ndarray:
    """Distance (m) of every finite merged point, placed by the true pose, to the world."""
    fin = np.isfinite(turns.range)
    x, y, yaw = sim.trajectory.pose((turns.t_ns[fin] - SIM_T0_NS) * 1e-9)
    a = yaw + turns.angle[fin].astype(float)
    px, py = x + turns.range[fin] * np.cos(a), y + turns.range[fin] * np.sin(a)
    seg = sim.world.segments
    x0, y0, x1, y1 = (seg[:, k][None, :] for k in range(4))
    dx, dy = x1 - x0, y1 - y0
    u = np.clip(((px[:, None] - x0) * dx + (py[:, None] - y0) * dy) / (dx * dx + dy * dy), 0, 1)
    d = np.hypot(px[:, None] - x0 - u * dx, py[:, None] - y0 - u * dy).min(axis=1)
    for cx, cy, r in sim.world.circles:
        d = np.minimum(d, np.abs(np.hypot(px - cx, py - cy) - r))
    return d


def test_merge_simulated_spin_with_mast(tmp_path):
    scenario = tmp_path / "spin_mast.toml"
    scenario.write_text(SPIN_WITH_MAST)
    path = simulate_to_session(str(scenario), 1, tmp_path / "spin.h5")
    sim = Simulation(load_scenario(str(scenario)), 1)
    fp = np.asarray(sim.scenario.robot["footprint_m"], float)
    runs = {
        "raw": merge_session(
            path, "lidar_front", "lidar_rear", tmp_path / "a.h5", use_footprint=False
        ),
        "plain": merge_session(path, "lidar_front", "lidar_rear", tmp_path / "b.h5"),
        "comp": merge_session(path, "lidar_front", "lidar_rear", tmp_path / "c.h5", pose="mocap"),
    }
    for run in runs.values():
        assert run.result.turns.n_turns > 50

    def on_robot(t: LidarTurns) -> int:
        fin = np.isfinite(t.range)
        a, r = t.angle.astype(float)[fin], t.range[fin]
        return int(points_in_polygon(r * np.cos(a), r * np.sin(a), fp).sum())

    # the simulated A1s see the mast; the footprint (from the recorded robot.toml) drops it
    assert runs["raw"].footprint is False and runs["plain"].footprint is True
    assert on_robot(runs["raw"].result.turns) >= runs["raw"].result.turns.n_turns
    assert on_robot(runs["plain"].result.turns) == 0 == on_robot(runs["comp"].result.turns)

    # spinning at up to 90°/s, points a turn apart in time differ by up to 0.28 rad;
    # placed by the true pose at the stamp, compensated points lie on the walls
    d_plain = _world_distance(sim, runs["plain"].result.turns)
    d_comp = _world_distance(sim, runs["comp"].result.turns)
    p90_plain, p90_comp = np.percentile(d_plain, 90), np.percentile(d_comp, 90)
    assert p90_comp < 0.5 * p90_plain
    # within the A1 noise (≤ 30 mm σ beyond 5 m) plus mocap latency × rate × range
    assert p90_comp < 0.1


def test_merge_mounts_from_config(tmp_path):
    """Streams without mount attrs take their mounts and footprint from --config."""
    world, pose = U.room(), U.still(0.5, -0.3, 0.7)
    front, rear = _pair_of_scans(world, pose)
    path = U.write_session(
        tmp_path / "s.h5",
        {"lidar_front": front, "lidar_rear": rear},
        attrs={"lidar_front": {"model": "A1"}, "lidar_rear": {"model": "A1"}},
    )
    runner = CliRunner()
    args = ["merge", str(path), "--front", "lidar_front", "--rear", "lidar_rear"]
    missing = runner.invoke(cli, [*args, "-o", str(tmp_path / "x.h5")])
    assert missing.exit_code == 2 and "--config" in missing.output
    config = tmp_path / "robot.toml"
    config.write_text(
        "[robot]\nname = 't'\nfootprint_m = [[-0.3, -0.3], [0.3, -0.3], [0.3, 0.3], [-0.3, 0.3]]\n"
        "[[devices]]\nname = 'lidar_front'\nkind = 'a1'\nport = '/dev/sb_front'\n"
        "mount = {x_m = 0.2, y_m = 0.0, yaw_deg = 0.0}\n"
        "[[devices]]\nname = 'lidar_rear'\nkind = 'a1'\nport = '/dev/sb_rear'\n"
        "mount = {x_m = -0.2, y_m = 0.0, yaw_deg = 180.0}\n"
    )
    out = tmp_path / "m.h5"
    ok = runner.invoke(cli, [*args, "-o", str(out), "--config", str(config), "--json"])
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    assert doc["mounts_from"] == str(config) and doc["footprint"] is True
    direct = merge_scans(front, rear, MergeSetup(Mount(*FRONT), Mount(*REAR), FOOTPRINT))
    with Session(out) as s:
        merged = s.lidar("merged").read()
        assert list(s.lidar("merged").attrs["sources"]) == ["lidar_front", "lidar_rear"]
    # the mounts read from the file are the ones the scans were made with
    assert np.allclose(merged.range, direct.turns.range, atol=1e-6, equal_nan=True)


def test_grid_is_the_finer_resolution():
    """An LD19-like front (0.72°) with an A1-like rear (0.99°) merge on the 0.72° grid."""
    world, pose = U.room(), U.still(0.5, -0.3, 0.7)
    f = U.synth_scan(world, pose, 2.0, seed=1, rate_hz=10.0, samples_per_s=5000.0, mount=FRONT)
    r = U.synth_scan(world, pose, 2.0, seed=2, rate_hz=5.5, samples_per_s=2000.0, mount=REAR)
    res = merge_scans(f.turns, r.turns, MergeSetup(Mount(*FRONT), Mount(*REAR)))
    assert res.step_rad == pytest.approx(np.radians(360 / 500), rel=0.01)
    assert np.all(res.turns.count == 500)
    # each A1 turn pairs with at most one LD19 turn: as many pairs as A1 turns
    assert res.turns.n_turns == r.turns.n_turns
    assert res.unpaired_front == f.turns.n_turns - r.turns.n_turns


def test_the_footprint_test_is_the_plain_even_odd_rule_bit_for_bit():
    # the test runs only the points within the polygon's span of y: the plain rule (every
    # point against every edge) gives the same answer everywhere, on edges, corners, nan
    rng = np.random.default_rng(3)
    poly = np.array([[-0.3, -0.2], [0.25, -0.3], [0.4, 0.1], [0.0, 0.35], [-0.2, 0.1]])
    x = np.concatenate([rng.uniform(-1, 1, 4000), poly[:, 0], [0.0, np.nan, 0.3]])
    y = np.concatenate([rng.uniform(-1, 1, 4000), poly[:, 1], [-0.2, 0.0, np.nan]])
    x[:200] = np.round(x[:200], 1)  # on grid lines through the corners
    y[:200] = np.round(y[:200], 1)
    plain = np.zeros(x.size, dtype=bool)
    for (x0, y0), (x1, y1) in zip(poly, np.roll(poly, -1, axis=0), strict=True):
        with np.errstate(divide="ignore", invalid="ignore"):
            plain ^= ((y0 > y) != (y1 > y)) & (x < x0 + (y - y0) * (x1 - x0) / (y1 - y0))
    got = points_in_polygon(x, y, poly)
    assert np.array_equal(got, plain)
    # and it is the polygon: the uniform points inside, about n × area / 4 m² (binomial)
    nxt = np.roll(poly, -1, axis=0)
    area = 0.5 * abs(np.sum(poly[:, 0] * nxt[:, 1] - nxt[:, 0] * poly[:, 1]))
    n_in, p = int(got[200:4000].sum()), area / 4.0
    assert abs(n_in - 3800 * p) <= 5 * np.sqrt(3800 * p * (1 - p))
