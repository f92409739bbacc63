"""Simulated LD19 and A1 against their parameters, measured from the sample stream the
way a characterization would (angle wraps, gaps), not from the simulator's labels where
avoidable. Tolerances: 4 standard errors, stated at each check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from sensorbench.errors import SimError
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.sensor_lidar import KIND_EDGE, KIND_FALSE, KIND_NORMAL, band_sigma
from sensorbench.sim.simulation import Simulation


def _static(seed: int, hold_s: float = 60.0, **ld19: object) -> Simulation:
    over = {
        "trajectory": {"hold_s": hold_s},
        "pods": {"enabled": False},
        "mocap": {"enabled": False},
        "pose_sensor": {"enabled": False},
    }
    if ld19:
        over["lidars"] = {"ld19": {"model": "ld19", **ld19}}
    return Simulation(load_scenario("lidar_static").with_overrides(over), seed)


def _wraps(t: np.ndarray, a: np.ndarray, fs: float) -> tuple[np.ndarray, np.ndarray]:
    """Interpolated times where the clockwise angle wraps 360 -> 0, and the gaps (s)."""
    da = np.diff(a)
    dt = np.diff(t)
    contiguous = dt < 1.5 / fs
    wrap = (da < -180.0) & contiguous
    j = np.flatnonzero(wrap)
    frac = (360.0 - a[j]) / (360.0 - a[j] + a[j + 1])
    gaps = dt[~contiguous]
    return t[j] + frac * dt[j], gaps


def _skips_and_periods(ls, rate_hz: float, fs: float) -> tuple[int, np.ndarray, int]:
    w, gaps = _wraps(ls.t_s, ls.angle_deg_cw, fs)
    T = 1.0 / rate_hz
    # A skipped turn leaves a silence of about one period (plus the partial packets
    # dropped around it); count turns missing by rounding each gap to whole periods.
    skipped = int(np.round(gaps / T).sum())
    d = np.diff(w)
    periods = d[d < 1.5 * T]  # consecutive wraps with no skipped turn between them
    n_turns = int(np.round((ls.t_s[-1] - ls.t_s[0]) / T))
    return skipped, periods, n_turns


def test_ld19_stream_shape_and_conventions() -> None:
    sim = _static(1, hold_s=10.0)
    ls = sim.lidar("ld19")
    assert ls.model == "ld19" and ls.samples_per_packet == 12 and len(ls) % 12 == 0
    assert np.all((ls.angle_deg_cw >= 0) & (ls.angle_deg_cw < 360))
    pk = ls.angle_deg_cw.reshape(-1, 12)
    step = np.mod(pk[:, -1] - pk[:, 0], 360.0) / 11
    lin = np.mod(pk[:, 0][:, None] + step[:, None] * np.arange(12), 360.0)
    d = np.abs(np.angle(np.exp(1j * np.deg2rad(lin - pk))))
    assert d.max() < 1e-9  # angles are linear within a packet (start/end encoding)
    assert np.all(np.diff(ls.t_s) > 0)
    per_turn = np.bincount(ls.turn - ls.turn.min())
    full = per_turn[1:-1][per_turn[1:-1] > 0]
    assert abs(np.median(full) - 454.5) <= 25  # 4545 samples/s at 10 Hz
    ret = ls.range_m > 0
    assert np.all(ls.intensity[~ret] == 0) and np.all(ls.intensity[ret] >= 1)
    assert np.all((ls.range_m[ret] >= 0.02) & (ls.range_m[ret] <= 12.0))
    np.testing.assert_allclose(
        ls.range_m[ret] * 1000, np.round(ls.range_m[ret] * 1000), atol=1e-6
    )  # millimetres, as the LD19 sends them


def test_ld19_skip_rate_and_period_jitter_match_the_scenario() -> None:
    p_skip, jitter = 0.1, 0.004
    sim = _static(2, skip_prob=p_skip, period_jitter_s=jitter)
    ls = sim.lidar("ld19")
    skipped, periods, n = _skips_and_periods(ls, 10.0, 4545.0)
    # Skips are Bernoulli(p) per turn: SE √(n p (1-p)) ≈ 7.3 turns of 60 expected.
    assert abs(skipped - n * p_skip) < 4 * np.sqrt(n * p_skip * (1 - p_skip))
    # And it agrees with the schedule (a skip at the very start or end leaves no gap).
    assert abs(skipped - int(ls.turn_skipped.sum())) <= 2
    _check_period_percentiles(periods, 0.1, jitter)


def _check_period_percentiles(periods: np.ndarray, T: float, sigma: float) -> None:
    n = periods.size
    for p in (0.05, 0.5, 0.95):
        expect = T + sigma * norm.ppf(p)
        # SE of a sample quantile: √(p(1-p)/n) / f(x_p); plus the wrap-time
        # interpolation error (< one sample interval, 0.22 ms, halved by differencing).
        se = np.sqrt(p * (1 - p) / n) / (norm.pdf(norm.ppf(p)) / sigma)
        assert abs(np.quantile(periods, p) - expect) < 4 * se + 1e-4, p


def test_ld19_range_noise_by_band() -> None:
    sim = _static(3)
    ls = sim.lidar("ld19")
    p = ls.params
    ok = (ls.kind == KIND_NORMAL) & (ls.range_m > 0)
    res = (ls.range_m - ls.true_range_m)[ok]
    r = ls.true_range_m[ok]
    edges = p["noise_band_edges_m"]
    tested = 0
    for lo, hi, sig in zip(edges[:-1], edges[1:], p["noise_band_sigma_m"], strict=True):
        m = (r >= lo) & (r < hi)
        n = int(m.sum())
        if n < 500:
            continue
        tested += 1
        # Millimetre rounding adds (1 mm)²/12 to the variance.
        s_eff = np.sqrt(sig**2 + 0.001**2 / 12)
        assert abs(res[m].std() - s_eff) < 4 * s_eff / np.sqrt(2 * n), (lo, hi)
        assert abs(res[m].mean()) < 4 * s_eff / np.sqrt(n), (lo, hi)
    assert tested >= 3
    np.testing.assert_allclose(
        band_sigma(p, np.array([0.5, 1.5, 2.5, 4.0, 11.0])), p["noise_band_sigma_m"]
    )


def test_ld19_edge_outliers_and_false_points() -> None:
    sim = _static(4)
    ls = sim.lidar("ld19")
    p = ls.params
    tr = ls.true_range_m
    same = np.diff(ls.turn) == 0
    jump = np.zeros(len(ls))
    with np.errstate(invalid="ignore"):
        j = np.where(same, np.abs(np.diff(tr)), 0.0)
    j = np.nan_to_num(j)
    jump[:-1] = np.maximum(jump[:-1], j)
    jump[1:] = np.maximum(jump[1:], j)
    cand = jump > p["edge_min_jump_m"]
    not_false = ls.kind != KIND_FALSE
    n = int((cand & not_false).sum())
    assert n > 2000
    frac = np.mean(ls.kind[cand & not_false] == KIND_EDGE)
    q = p["edge_outlier_prob"]
    assert abs(frac - q) < 4 * np.sqrt(q * (1 - q) / n)
    assert not np.any(ls.kind[~cand] == KIND_EDGE)  # mixed pixels only at depth edges
    # Overall outlier share in this scene, for comparison with the measured 1-2.4 %.
    share = np.mean(ls.kind == KIND_EDGE)
    assert 0.005 < share < 0.04
    # A mixed pixel lies between the two surfaces it straddles.
    e = np.flatnonzero(ls.kind == KIND_EDGE)
    e = e[(e > 0) & (e < len(ls) - 1)]
    lo = np.minimum.reduce([tr[e - 1], tr[e], tr[e + 1]]) - 0.001
    hi = np.maximum.reduce([tr[e - 1], tr[e], tr[e + 1]]) + 0.001
    rng_e = ls.range_m[e]
    assert np.all((rng_e >= lo) & (rng_e <= hi) | (rng_e == 0))
    # Isolated false points: Bernoulli(false_point_prob) per sample.
    nf = int((ls.kind == KIND_FALSE).sum())
    pf = p["false_point_prob"]
    assert abs(nf - pf * len(ls)) < 4 * np.sqrt(pf * (1 - pf) * len(ls))
    f = ls.kind == KIND_FALSE
    assert np.all(ls.range_m[f] <= np.minimum(tr[f], 12.0) + 0.001)


def test_a1_rate_quality_and_limits() -> None:
    sim = _static(5, hold_s=20.0)
    for name in ("lidar_front", "lidar_rear"):
        ls = sim.lidar(name)
        assert ls.model == "a1" and ls.samples_per_packet == 1
        ret = ls.range_m > 0
        assert ls.intensity.max() <= 63 and np.all(ls.intensity[~ret] == 0)
        assert np.all((ls.range_m[ret] >= 0.15) & (ls.range_m[ret] <= 12.0))
        _, periods, _ = _skips_and_periods(ls, 5.5, 2000.0)
        assert abs(np.median(periods) - 1 / 5.5) < 0.002
        assert abs(len(ls) / 20.0 - 2000) < 1


def test_rays_start_at_the_mount_and_follow_the_robot() -> None:
    sim = Simulation(
        load_scenario("spin").with_overrides(
            {
                "lidars": {
                    "lidar_rear": {
                        "model": "a1",
                        "mount_xy_m": [-0.2, 0.0],
                        "mount_yaw_deg": 180.0,
                        "period_jitter_s": 0.0,
                    }
                }
            }
        ),
        6,
    )
    ls = sim.lidar("lidar_rear")
    x, y, yaw = sim.trajectory.pose(ls.t_s)
    mx, my, myaw = sim.lidar_mount("lidar_rear")
    ox = x + np.cos(yaw) * mx - np.sin(yaw) * my
    oy = y + np.sin(yaw) * mx + np.cos(yaw) * my
    bearing = yaw + myaw - np.deg2rad(ls.angle_deg_cw)
    k = np.arange(0, len(ls), 97)
    expect = sim.world.raycast(np.column_stack([ox[k], oy[k]]), bearing[k])
    np.testing.assert_allclose(ls.true_range_m[k], expect, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_ld19_default_skip_rate_and_jitter_long_run() -> None:
    sim = _static(7, hold_s=1200.0)
    ls = sim.lidar("ld19")
    p = ls.params
    skipped, periods, n = _skips_and_periods(ls, p["rate_hz"], p["samples_per_s"])
    q = p["skip_prob"]
    # 12000 turns at 1.5 %: 180 expected, SE ≈ 13.3.
    assert abs(skipped - n * q) < 4 * np.sqrt(n * q * (1 - q))
    _check_period_percentiles(periods, 1 / p["rate_hz"], p["period_jitter_s"])


def test_robot_occluders_move_with_the_robot_and_cast_self_returns() -> None:
    # A 4 cm mast at the body origin, seen by the front A1 at (0.2, 0) facing forward:
    # rays within asin(0.04 / 0.2) = 11.54° of straight back (native 180°) hit it at
    # 0.16–0.20 m whatever the robot's heading (a spin); the LD19 on top ignores it.
    sc = load_scenario("spin").with_overrides(
        {
            "trajectory": {"repeats": 1},
            "robot": {"occluders": [{"kind": "pillar", "center_m": [0.0, 0.0], "radius_m": 0.04}]},
            "lidars": {
                "lidar_front": {"model": "a1", "mount_xy_m": [0.2, 0.0], "mount_yaw_deg": 0.0},
                "ld19": {"model": "ld19", "mount_xy_m": [0.1, 0.0], "sees_robot": False},
            },
        }
    )
    sim = Simulation(sc, 2)
    ls = sim.lidar("lidar_front")
    off = np.abs(ls.angle_deg_cw - 180.0)
    inside, outside = off < 11.4, off > 11.7
    assert inside.sum() > 100
    assert np.all((ls.true_range_m[inside] >= 0.16 - 1e-9) & (ls.true_range_m[inside] <= 0.2))
    assert np.all(ls.true_range_m[outside] > 0.5)
    ld = sim.lidar("ld19")
    assert ld.true_range_m.min() > 0.5
    bad = load_scenario("spin").with_overrides(
        {"robot": {"occluders": [{"kind": "box", "center_m": [0.2, 0.0], "size_m": [0.1, 0.1]}]}}
    )
    with pytest.raises(SimError, match=r"lidars\.lidar_front\.mount_xy_m lies inside"):
        Simulation(bad, 0)
