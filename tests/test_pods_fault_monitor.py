"""The consistency monitor against scripted pod faults (sim/scenarios/pods_wheel_lift.toml,
pods_slip.toml) and the clean forward drive they are built on, same seeds.

Three pods leave no redundancy, so the split filters' own NIS does not see a lifted or
slipping wheel (the velocity adapts); the pods-against-IMU heading check does
(``monitor["pods_vs_imu"]``, docs/PODS.md), standardised by the slip law and the
rounding when the geometry carries a slip law, by travel bins when it does not; both are
run. Stated latency: raised within 0.075 s of the fault's start (a frame's clipped u²
adds at most (6.63 − 0.98)/50 = 0.11 to the window mean, and the threshold of one of four
channels at 99.9 % is 0.74 above the mean: from a window at its expected mean at least 7
frames, 35 ms, fewer when it was already raised; measured over seeds 5–8: 45–60 ms
binned, 25–40 ms with the slip law); held while the faulty pod loses at least a tick a
frame (by the truth: under one its slip is rounding-sized); cleared within one window (50
frames = 0.25 s at 200 Hz) plus 0.1 s after the fault ends (a slipping wheel shows only
while it rolls: the slip scenario's first leg comes to rest at 7.94 s, its truth). Stated
false alarms on the clean drive: below 5 % of the time (measured 0.4–2.2 % binned,
0.00–0.35 % with the slip law; the wheels' real bounces, 0.05 per second per pod, raise
it briefly too).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pods_sim_util import simulate, true_geometry

from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.odometry_replay import CROSS_CHECK, read_odometry, replay_session
from sensorbench.fusion.split_filter import FrameChunk, SplitFilter
from sensorbench.logs import Session
from sensorbench.sim.scenario import load_scenario

SEEDS = (5, 6, 7)
WINDOW_S = 50 / 200.0


def _flags(path: Path, law: bool) -> tuple[np.ndarray, np.ndarray]:
    rp = replay_session(path, true_geometry(law), FilterNoise.default(), reference="truth")
    assert rp.summary()["imu_check_spread"] == ("slip law" if law else "travel bins")
    # replay time is from the first frame; the scenario's windows from the simulation's start
    with Session(path) as s:
        start_ns = int(s.truth("pose/t_ns")[0])
    t = rp.result.t_s[1:] + (rp.t0_ns - start_ns) * 1e-9
    return t, rp.monitor[CROSS_CHECK].degraded


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("faults")
    return {
        (n, s): simulate(tmp, n, s)
        for n in ("forward", "pods_wheel_lift", "pods_slip")
        for s in SEEDS
    }


@pytest.fixture(scope="module", params=[False, True], ids=["binned", "slip-law"])
def runs(request, sessions) -> dict:
    return {key: _flags(path, request.param) for key, path in sessions.items()}


def _losing_a_tick(path: Path, name: str, start: float, end: float) -> float:
    """The last scenario time (s) in [start, end) the faulty pod's lost travel, its
    truth's, is at least a tick a frame: under one the check cannot tell it from the
    rounding (its frames' u² is the rounding's, docs/PODS.md)."""
    p = load_scenario(name).pods
    lost = 1.0 - (p["slip_windows"][0][3] if p["slip_windows"] else 0.0)
    tick = 2 * np.pi * p["wheel_radius_m"][0] / p["counts_per_rev"][0]
    with Session(path) as s:
        rows = s.truth_rows("pose", "t_ns", "x_y_yaw")
    t = (rows["t_ns"] - rows["t_ns"][0]) * 1e-9
    speed = np.hypot(*np.diff(rows["x_y_yaw"][:, :2], axis=0).T) / np.diff(t)
    ok = (t[1:] >= start) & (t[1:] < end) & (lost * speed / p["rate_hz"] >= tick)
    return float(t[1:][ok][-1])


def _fraction(t: np.ndarray, flag: np.ndarray, t0: float, t1: float) -> float:
    sel = (t >= t0) & (t < t1)
    return float(np.mean(flag[sel]))


@pytest.mark.parametrize(
    "name, start, end", [("pods_wheel_lift", 3.0, 5.0), ("pods_slip", 3.0, 7.94)]
)
def test_fault_raises_degraded_within_latency_and_clears_after(
    runs, sessions, name, start, end
) -> None:
    for seed in SEEDS:
        t, flag = runs[(name, seed)]
        onset = t[np.flatnonzero(flag & (t >= start - 0.5))[0]]
        assert start <= onset <= start + 0.075, (seed, onset)
        # held while the faulty pod loses a tick a frame (a false clear would be a gap)
        seen = _losing_a_tick(sessions[(name, seed)], name, start, end)
        assert _fraction(t, flag, start + 0.075, seen) > 0.95, (seed, seen)
        # cleared one window after it: no flag raised continuously since the fault
        t_clear = end + WINDOW_S + 0.1
        assert not flag[np.searchsorted(t, t_clear)], seed
        # the clean drive with the same seed is not degraded through the same span
        tc, fc = runs[("forward", seed)]
        assert _fraction(tc, fc, start + 0.075, end) < 0.5, seed


def test_false_alarms_on_the_clean_drive(runs) -> None:
    for seed in SEEDS:
        flag = runs[("forward", seed)][1]
        assert np.mean(flag) < 0.05, (seed, np.mean(flag))


# The widening (docs/PODS.md, "A lifted or slipping wheel"): truth inside the stated 2σ
# through each scenario's fault window (the slip one runs to 9.0 s) and after it
FAULTS = {"pods_wheel_lift": (3.0, 5.0), "pods_slip": (3.0, 9.0)}


def _widened(path: Path, repair: bool) -> np.ndarray:
    """(K,) the frames that widened the heading: its stated variance with the IMU less
    without, A², rises there (the widening is growth of the unaided offset's variance)."""
    geo = true_geometry(True)
    odo = read_odometry(path)
    inc = odo.increments(geo, repair)[0]
    f = SplitFilter(FilterNoise.default())
    var = [f.step(f.start(odo.t_s[0], pods=geo), FrameChunk(odo.t_s[1:], inc, None, imu))[1]
           .var[:, 2] for imu in (odo.imu_dtheta, None)]  # fmt: skip
    return np.diff(var[0] - var[1]) > 1e-9


def _inside(path: Path, repair: bool) -> tuple[np.ndarray, np.ndarray]:
    """Scenario times (s) of the truth samples the replay spans and whether each axis's
    truth lies inside its stated 2σ there (n, 3)."""
    rp = replay_session(path, true_geometry(True), FilterNoise.default(), reference="truth",
                        repair=repair)  # fmt: skip
    with Session(path) as s:
        rows = s.truth_rows("pose", "t_ns", "x_y_yaw")
    r = rp.result
    t = (rows["t_ns"] - rp.t0_ns) * 1e-9
    ok = (t >= r.t_s[0]) & (t <= r.t_s[-1])
    est = np.column_stack([np.interp(t[ok], r.t_s, r.pose[:, j]) for j in range(3)])
    var = np.column_stack([np.interp(t[ok], r.t_s, r.var[:, j]) for j in range(3)])
    err = est - rows["x_y_yaw"][ok]
    err[:, 2] = (err[:, 2] + np.pi) % (2 * np.pi) - np.pi
    t_sc = (rows["t_ns"][ok] - rows["t_ns"][0]) * 1e-9
    return t_sc, np.abs(err) <= 2 * np.sqrt(var)


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_widened_the_pose_holds_the_truth_through_the_fault_and_after(sessions, name) -> None:
    # live's path (no bounce repair); unwidened: 0.1-1.1 % per axis in the fault window
    start, end = FAULTS[name]
    for seed in SEEDS:
        t, inside = _inside(sessions[(name, seed)], repair=False)
        for sel in ((t >= start) & (t < end), t >= end):
            assert np.all(np.mean(inside[sel], axis=0) >= 0.9), (seed, inside[sel].mean(0))


@pytest.mark.parametrize("repair", [False, True], ids=["live", "repaired"])
def test_a_clean_drive_is_widened_only_where_a_wheel_bounced(sessions, repair) -> None:
    for seed in SEEDS:
        path = sessions[("forward", seed)]
        widened = _widened(path, repair)
        with Session(path) as s:  # the wheels' own error per frame, from the simulator
            err = np.diff(s.truth("pods/measured_distance_m") - s.truth("pods/true_distance_m"),
                          axis=0)  # fmt: skip
        assert widened.size == err.shape[0]  # one replayed step per frame: none dropped
        bounce = np.convolve(np.abs(err).max(axis=1) > 2e-4, np.ones(5), "same") > 0
        assert not np.any(widened & ~bounce), (seed, np.flatnonzero(widened & ~bounce))
        assert np.count_nonzero(widened) <= (np.count_nonzero(bounce) if not repair else 3)


@pytest.mark.xfail(strict=True, reason="bounce repair rebuilds a lifted or slipping pod's "
                   "frames from the IMU, whose bias the stated covariance omits, and leaves "
                   "the slow frames' slip inside the widening's bound: x in 2σ through the "
                   "fault 38.9 % (lift, seed 7) and 7.0 % (slip, seed 6), θ 74 % (slip)")
def test_repaired_the_pose_holds_the_truth_through_the_fault(sessions) -> None:
    for name, (start, end) in FAULTS.items():
        for seed in SEEDS:
            t, inside = _inside(sessions[(name, seed)], repair=True)
            sel = (t >= start) & (t < end)
            assert np.all(np.mean(inside[sel], axis=0) >= 0.9), (name, seed)
