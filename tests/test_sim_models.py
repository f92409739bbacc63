"""Sensor models against their own parameters: determinism, independent streams, exact
pod kinematics, IMU, mocap occlusion and latency, pose-sensor Gauss-Markov noise.

Statistical tolerances are stated at each check (4 standard errors unless noted).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sensorbench.errors import SimError
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.sensor_pose import PAUSED, RELOCALIZED
from sensorbench.sim.simulation import Simulation

NO_LIDARS = {"lidars": {n: {"enabled": False} for n in ("ld19", "lidar_front", "lidar_rear")}}
QUIET_PODS = {
    "slip_sigma_m_per_sqrt_m": 0.0,
    "scrub_sigma_m_per_sqrt_m": 0.0,
    "bounce_rate_hz": 0.0,
}


def _arrays(sim: Simulation) -> dict[str, np.ndarray]:
    out = {}
    for name in sim.lidar_names():
        ls = sim.lidar(name)
        for f in ("t_s", "angle_deg_cw", "range_m", "intensity", "turn", "kind"):
            out[f"{name}.{f}"] = getattr(ls, f)
    pods = sim.pods()
    out |= {"pods.counts": pods.counts, "pods.yaw": pods.yaw_rad, "pods.rate": pods.yaw_rate_rad_s}
    mo = sim.mocap()
    out |= {"mocap.pos": mo.position, "mocap.valid": mo.valid}
    ps = sim.pose_sensor()
    out |= {"pose.t": ps.t_s, "pose.err": ps.error, "pose.pos": ps.position}
    return out


def test_same_scenario_and_seed_give_identical_streams() -> None:
    a = _arrays(Simulation("square", seed=5))
    b = _arrays(Simulation("square", seed=5))
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    c = _arrays(Simulation("square", seed=6))
    assert not np.array_equal(a["ld19.range_m"], c["ld19.range_m"])
    assert not np.array_equal(a["pose.err"], c["pose.err"])


def test_switching_one_sensor_off_leaves_the_others_noise_unchanged() -> None:
    sc = load_scenario("square")
    full = Simulation(sc, seed=11)
    no_ld19 = Simulation(sc.with_overrides({"lidars": {"ld19": {"enabled": False}}}), seed=11)
    assert "ld19" not in no_ld19.lidar_names()
    np.testing.assert_array_equal(full.pods().counts, no_ld19.pods().counts)
    np.testing.assert_array_equal(full.pods().yaw_rad, no_ld19.pods().yaw_rad)
    np.testing.assert_array_equal(full.pose_sensor().error, no_ld19.pose_sensor().error)
    np.testing.assert_array_equal(full.mocap().position, no_ld19.mocap().position)
    np.testing.assert_array_equal(
        full.lidar("lidar_front").range_m, no_ld19.lidar("lidar_front").range_m
    )
    # Occluding the mocap more, covering the pose sensor, or removing the IMU changes
    # nothing else either.
    other = Simulation(
        sc.with_overrides(
            {
                "mocap": {"occlusion_rate_hz": 2.0},
                "imu": {"enabled": False},
                "pose_sensor": {"covered_s": [[30.0, 33.0]]},
            }
        ),
        seed=11,
    )
    np.testing.assert_array_equal(full.pods().counts, other.pods().counts)
    np.testing.assert_array_equal(full.lidar("ld19").range_m, other.lidar("ld19").range_m)
    assert np.isnan(other.pods().yaw_rad).all()
    assert other.mocap().valid.mean() < full.mocap().valid.mean()


def test_bad_seed_and_disabled_sensor_requests_are_errors() -> None:
    with pytest.raises(SimError, match="seed"):
        Simulation("square", seed=-1)
    sim = Simulation(load_scenario("hold").with_overrides({"mocap": {"enabled": False}}), 0)
    with pytest.raises(SimError, match="mocap is disabled"):
        sim.mocap()
    with pytest.raises(SimError, match="no lidar 'nope'"):
        sim.lidar("nope")


def test_footprint_collisions_are_refused() -> None:
    sc = load_scenario("forward").with_overrides({"trajectory": {"distance_m": 6.0}})
    with pytest.raises(SimError, match="outside the lab walls at t = "):
        Simulation(sc, 0)


@pytest.mark.parametrize("name", ["forward", "spin"])
def test_pod_counts_follow_the_exact_kinematics_when_noise_is_off(name: str) -> None:
    sc = load_scenario(name).with_overrides({"pods": QUIET_PODS} | NO_LIDARS)
    sim = Simulation(sc, seed=1)
    pods = sim.pods()
    geo = pods.geometry
    x, y, yaw = sim.trajectory.pose(pods.t_s)
    # Straight drives and spins in place have closed forms from the true pose alone:
    # body increments are (dx, dy, 0) at constant yaw, or (0, 0, dθ) at a fixed point.
    c0, s0 = np.cos(yaw[0]), np.sin(yaw[0])
    dxb = c0 * (x - x[0]) + s0 * (y - y[0])
    dyb = -s0 * (x - x[0]) + c0 * (y - y[0])
    d = (
        np.cos(geo.angle_rad) * dxb[:, None]
        + np.sin(geo.angle_rad) * dyb[:, None]
        + geo.lever_m * (yaw - yaw[0])[:, None]
    )
    ticks = d / geo.m_per_count
    expect = np.floor(ticks + 1e-9).astype(np.int64)
    # Integration error (trapezoid on 1 ms steps) is < 1e-7 m = 0.002 counts; only ticks
    # that close to an integer may round the other way.
    near = np.abs(ticks - np.round(ticks)) < 0.01
    np.testing.assert_array_equal(pods.counts[~near], expect[~near])
    assert np.abs(pods.counts[near] - expect[near]).max(initial=0) <= 1
    assert np.abs(pods.counts).max() > 1000


def test_pod_counts_along_a_curved_path_match_fine_integration() -> None:
    sc = load_scenario("figure8").with_overrides({"pods": QUIET_PODS} | NO_LIDARS)
    sim = Simulation(sc, seed=1)
    pods = sim.pods()
    geo = pods.geometry
    # Independent integral: Simpson on a 20 kHz grid of the contact points' rolling speed.
    tf = np.linspace(0.0, pods.t_s[-1], 20 * 1000 * int(np.ceil(pods.t_s[-1])) + 1)
    vx, vy, wz = sim.trajectory.twist_body(tf)
    along = (
        np.cos(geo.angle_rad) * vx[:, None]
        + np.sin(geo.angle_rad) * vy[:, None]
        + geo.lever_m * wz[:, None]
    )
    from scipy.integrate import cumulative_trapezoid

    d = cumulative_trapezoid(along, tf, axis=0, initial=0.0)
    idx = np.searchsorted(tf, pods.t_s)
    idx = np.clip(idx, 0, tf.size - 1)
    # Frame times fall between grid points: interpolate linearly (error < v*dt = 2.5e-5 m).
    dd = np.array([np.interp(pods.t_s, tf, d[:, i]) for i in range(3)]).T
    ticks = dd / geo.m_per_count
    # Both integrals are accurate to well under 0.5 count (75 µm): allow ±1 at rounding.
    assert np.abs(pods.counts - np.floor(ticks)).max() <= 1
    assert np.mean(pods.counts == np.floor(ticks)) > 0.99


@pytest.mark.parametrize(("drive", "key"), [("forward", "slip"), ("sideways", "scrub")])
def test_pod_slip_and_scrub_random_walks_match_their_sigma(drive: str, key: str) -> None:
    # forward: the parallel pods roll, the perpendicular one is dragged sideways and
    # vice versa; over a run the count error is N(0, σ_slip² D_rolled + σ_scrub² D_dragged).
    sig = 0.003
    other = "scrub" if key == "slip" else "slip"
    sc = load_scenario(drive).with_overrides(
        NO_LIDARS
        | {
            "imu": {"enabled": False},
            "pods": {
                f"{key}_sigma_m_per_sqrt_m": sig,
                f"{other}_sigma_m_per_sqrt_m": 0.0,
                "bounce_rate_hz": 0.0,
            },
        }
    )
    errs, dists = [], []
    for seed in range(60):
        pods = Simulation(sc, seed).pods()
        if key == "slip":
            rolled = np.abs(np.diff(pods.true_distance_m, axis=0)).sum(axis=0)
        else:
            # sideways travel of a pod = the other axis's rolled distance here (pure
            # translation): the parallel pods (0, 1) are dragged when driving sideways.
            rolled = np.abs(np.diff(pods.true_distance_m[:, [2, 2, 0]], axis=0)).sum(axis=0)
        err = pods.measured_distance_m[-1] - pods.true_distance_m[-1]
        pick = [0, 1] if (key == "slip") == (drive == "forward") else [2]
        errs.append(err[pick])
        dists.append(rolled[pick])
    z = np.concatenate(errs) / (sig * np.sqrt(np.concatenate(dists)))
    n = z.size
    # z ~ N(0, 1): variance within 4·√(2/n) (n = 120 or 60 runs).
    assert abs(z.var() - 1) < 4 * np.sqrt(2 / n)
    assert abs(z.mean()) < 4 / np.sqrt(n)


def test_pod_noise_bounce_and_mcu_clock() -> None:
    sc = load_scenario("forward").with_overrides(
        {
            "pods": {
                "slip_sigma_m_per_sqrt_m": 0.0,
                "scrub_sigma_m_per_sqrt_m": 0.0,
                "bounce_rate_hz": 2.0,
                "bounce_duration_s": 0.05,
                "mcu_clock_drift_ppm": 100.0,
                "rate_hz": 250.0,
            }
        }
        | NO_LIDARS
    )
    pods = Simulation(sc, seed=3).pods()
    # A wheel off the floor rolls nothing: without slip and scrub no frame measures
    # more than the wheel rolled, and frames that measure less are bounce frames. (The
    # total lost can have either sign: a bounce may fall while the wheel rolls back.)
    d_meas = np.diff(pods.measured_distance_m[:, :2], axis=0)
    d_true = np.diff(pods.true_distance_m[:, :2], axis=0)
    assert np.all(np.abs(d_meas) <= np.abs(d_true) + 1e-12)
    assert np.any(np.abs(d_meas) < np.abs(d_true) - 1e-9)
    moving = np.abs(np.diff(pods.true_distance_m[:, 0])) > 1e-5
    stuck = np.diff(pods.measured_distance_m[:, 0]) == 0
    # Expected stuck fraction ≈ 1 - exp(-rate·duration) = 0.095 of moving frames
    # (Poisson onsets; SE over ~20 s of motion ≈ 0.03 from ~40 events).
    assert 0.095 - 4 * 0.03 < np.mean(stuck[moving]) < 0.095 + 4 * 0.03
    # MCU: frames every 4000 µs of its own clock, which runs 100 ppm fast.
    assert set(np.diff(pods.mcu_time_us)) <= {3999, 4000, 4001}
    slope = np.polyfit(pods.t_s, pods.mcu_time_us * 1e-6, 1)[0]
    assert slope == pytest.approx(1.0001, abs=1e-9)
    assert pods.counter_bits == 16


def test_imu_rate_noise_and_bias() -> None:
    sc = load_scenario("hold").with_overrides(
        NO_LIDARS
        | {"imu": {"bias_rad_s": 0.01, "bias_walk_rad_s_sqrt_s": 0.0, "rate_noise_rad_s": 0.003}}
    )
    sim = Simulation(sc, seed=4)
    pods = sim.pods()
    resid = pods.yaw_rate_rad_s - 0.01
    n = resid.size
    # Mean within 4 SE of 0.01 (σ/√n), std within 4 SE of 0.003 (σ/√(2n)).
    assert abs(resid.mean()) < 4 * 0.003 / np.sqrt(n)
    assert abs(resid.std() - 0.003) < 4 * 0.003 / np.sqrt(2 * n)
    # Yaw integrates the rate: at 0.01 rad/s over 120 s the robot "turns" 1.2 rad,
    # plus an angle random walk σ·dt·√n ≈ 0.003·0.005·155 = 0.002 rad.
    assert pods.yaw_rad[-1] == pytest.approx(0.01 * pods.t_s[-1], abs=0.01)


def test_mocap_latency_noise_and_occlusion_gaps() -> None:
    sc = load_scenario("square").with_overrides(
        NO_LIDARS
        | {
            "mocap": {
                "rate_hz": 240.0,
                "latency_s": 0.02,
                "noise_m": 0.001,
                "occlusion_rate_hz": 0.5,
                "occlusion_mean_s": 0.2,
            }
        }
    )
    sim = Simulation(sc, seed=8)
    mo = sim.mocap()
    x, y, _ = sim.trajectory.pose(mo.t_s - 0.02)
    v = mo.valid
    err = mo.position[v, 0] - x[v]
    n = err.size
    assert abs(err.std() - 0.001) < 4 * 0.001 / np.sqrt(2 * n)
    assert np.isnan(mo.position[~v]).all() and np.isnan(mo.quat_xyzw[~v]).all()
    q = mo.quat_xyzw[v]
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
    # Every invalid sample inside the volume lies in a recorded occlusion interval and
    # no valid one does.
    occ = np.asarray(mo.params["occlusion_intervals_s"]).reshape(-1, 2)
    inside = np.zeros(mo.t_s.size, bool)
    for a, b in occ:
        inside |= (mo.t_s >= a) & (mo.t_s < b)
    in_vol = sim.world.in_mocap_volume(x, y)
    np.testing.assert_array_equal(~v[in_vol], inside[in_vol])
    # Onsets are Poisson(rate·T): 23 expected over 46 s, SE √23 ≈ 4.8.
    lam = 0.5 * sim.duration_s
    assert abs(len(occ) - lam) < 4 * np.sqrt(lam)


@pytest.mark.slow
def test_mocap_occlusion_statistics_long_run() -> None:
    sc = _hold(2000.0, mocap={"occlusion_rate_hz": 1.0, "occlusion_mean_s": 0.2})
    mo = Simulation(sc, seed=9).mocap()
    occ = np.asarray(mo.params["occlusion_intervals_s"])
    lengths = occ[:, 1] - occ[:, 0]
    n = lengths.size
    assert abs(n - 2000) < 4 * np.sqrt(2000)
    assert abs(lengths.mean() - 0.2) < 4 * 0.2 / np.sqrt(n)  # exponential: SE = mean/√n
    # Fraction of time occluded, M/G/∞ busy probability 1 - exp(-λ·E[D]) = 0.181. Busy
    # periods (≈ λT·e^{-ρ} ≈ 1640 of them) have CV below 2, so SE < 2·0.181/√1640 = 0.009.
    assert abs((~mo.valid).mean() - (1 - np.exp(-0.2))) < 4 * 0.009


def _hold(hold_s: float, **tables: dict) -> object:
    """The ``hold`` scenario for ``hold_s`` s without lidars, ``tables`` overridden."""
    return load_scenario("hold").with_overrides(
        NO_LIDARS | {"trajectory": {"hold_s": hold_s}} | tables
    )


def _gm_scenario(hold_s: float, jitter_s: float = 0.004, **gm: list[float]) -> object:
    """A pose sensor of Gauss-Markov error only at 30 Hz (``gm_sigma``, ``gm_tau_s``)."""
    gm = gm or {
        "gm_sigma": [0.02, 0.03, 0.01, 0.004, 0.005, 0.006],
        "gm_tau_s": [0.5, 1.0, 2.0, 0.5, 1.0, 2.0],
    }
    only_gm = {"reloc_sigma": [0.0] * 6, "white_sigma": [0.0] * 6, "wrong_reloc_prob": 0.0}
    return _hold(
        hold_s, pose_sensor={"rate_hz": 30.0, "rate_jitter_s": jitter_s, **only_gm, **gm}
    )


def _gm_run(hold_s: float, seed: int) -> tuple[Any, np.ndarray, np.ndarray]:
    """The pose sensor of :func:`_gm_scenario` and its GM σ and τ (s) per axis."""
    sc = _gm_scenario(hold_s)
    p = sc.pose_sensor
    return Simulation(sc, seed).pose_sensor(), np.array(p["gm_sigma"]), np.array(p["gm_tau_s"])


def test_pose_sensor_gauss_markov_uses_the_exact_discretization() -> None:
    ps, sig, tau = _gm_run(120.0, seed=12)
    g = ps.error
    np.testing.assert_array_equal(g, ps.gm)
    dt = np.diff(ps.t_s)
    assert dt.std() > 0.002  # irregular sampling, as the model must handle
    phi = np.exp(-dt[:, None] / tau)
    z = (g[1:] - phi * g[:-1]) / (sig * np.sqrt(1 - phi**2))
    n = z.shape[0]
    # Standardized innovations are N(0, 1) and white: var within 4·√(2/n), lag-1
    # correlation within 4/√n, per axis.
    assert np.all(np.abs(z.var(axis=0) - 1) < 4 * np.sqrt(2 / n))
    r1 = np.sum(z[1:] * z[:-1], axis=0) / np.sum(z * z, axis=0)
    assert np.all(np.abs(r1) < 4 / np.sqrt(n))


@pytest.mark.slow
def test_pose_sensor_gauss_markov_sigma_and_tau_recovered_long_run() -> None:
    ps, sig, tau = _gm_run(3000.0, seed=13)
    g = ps.error
    T = ps.t_s[-1]
    dt = np.diff(ps.t_s).mean()
    # σ̂: relative SE of σ̂² for a GM process ≈ √(2τ/T), so of σ̂ ≈ √(τ/(2T)).
    rel = np.sqrt(tau / (2 * T))
    assert np.all(np.abs(g.std(axis=0) / sig - 1) < 4 * rel)
    # τ̂ = -Δt / ln ρ̂ with ρ̂ the lag-1 regression; SE(ρ̂) = √((1-ρ²)/n), propagated.
    rho_hat = np.sum(g[1:] * g[:-1], axis=0) / np.sum(g[:-1] ** 2, axis=0)
    tau_hat = -dt / np.log(rho_hat)
    rho = np.exp(-dt / tau)
    se_tau = np.sqrt((1 - rho**2) / g.shape[0]) * dt / (rho * np.log(rho) ** 2)
    assert np.all(np.abs(tau_hat - tau) < 4 * se_tau)


def test_pose_sensor_relocalizations_pauses_and_wrong_relocs() -> None:
    sc = load_scenario("hold").with_overrides(
        NO_LIDARS
        | {
            "pose_sensor": {
                "reloc_times_s": [float(t) for t in np.arange(0.5, 120.0, 0.5)],
                "gm_sigma": [0.0] * 6,
                "white_sigma": [0.0] * 6,
                "reloc_sigma": [0.05, 0.05, 0.02, 0.005, 0.005, 0.02],
                "wrong_reloc_prob": 0.1,
                "wrong_reloc_sigma": [1.0] * 6,
                "covered_s": [[30.0, 32.0]],
                "latency_s": 0.03,
            }
        }
    )
    sim = Simulation(sc, seed=21)
    ps = sim.pose_sensor()
    n_s = ps.reloc_t_s.size
    assert n_s == 240  # first sample + 239 listed (32.0 is also a listed time)
    good = ps.reloc_offset[~ps.reloc_wrong]
    # 10 % wrong relocalizations: SE √(0.09·240) ≈ 4.6 of 24 expected.
    assert abs(ps.reloc_wrong.sum() - 24) < 4 * np.sqrt(0.09 * 240)
    sig = np.array(sc.pose_sensor["reloc_sigma"])
    assert np.all(np.abs(good.std(axis=0) / sig - 1) < 4 / np.sqrt(2 * len(good)))
    # Flags: RELOCALIZED at the first sample at or after each relocalization time.
    first = np.searchsorted(ps.t_s, ps.reloc_t_s)
    assert np.all(ps.flags[first] & RELOCALIZED)
    assert (ps.flags & RELOCALIZED > 0).sum() == n_s
    covered = (ps.t_s >= 30.0) & (ps.t_s < 32.0)
    assert np.all(ps.flags[covered] & PAUSED) and not ps.valid[covered].any()
    assert np.isnan(ps.error[covered]).all()
    held = ps.position[np.argmax(covered) - 1]
    np.testing.assert_array_equal(ps.position[covered], np.broadcast_to(held, (covered.sum(), 3)))
    # Outside pauses the reported pose is truth(t - latency) + error, exactly.
    ok = ~covered
    x, y, yaw = sim.trajectory.pose(ps.t_s[ok] - 0.03)
    np.testing.assert_allclose(ps.position[ok, 0] - x, ps.error[ok, 0], atol=1e-12)
    np.testing.assert_allclose(ps.position[ok, 1] - y, ps.error[ok, 1], atol=1e-12)
    # Orientation: ZYX Euler angles of the reported quaternion minus the truth's.
    from scipy.spatial.transform import Rotation

    ypr = Rotation.from_quat(ps.quat_xyzw[ok]).as_euler("ZYX")
    # (Wrong relocalizations here have 1 rad pitch σ: beyond ±90° the Euler triple flips,
    # so only segments of normal relocalizations are compared.)
    good = ~ps.reloc_wrong[np.searchsorted(ps.reloc_t_s, ps.t_s[ok], side="right") - 1]
    wrap = np.angle(np.exp(1j * (ypr[:, 0] - yaw - ps.error[ok, 5])))
    np.testing.assert_allclose(wrap[good], 0.0, atol=1e-9)
    np.testing.assert_allclose(ypr[good, 1], ps.error[ok, 4][good], atol=1e-9)
    np.testing.assert_allclose(ypr[good, 2], ps.error[ok, 3][good], atol=1e-9)


def test_duration_overrides_the_trajectory_and_session_selection() -> None:
    base = Simulation("forward", 0)
    short = Simulation(load_scenario("forward").with_overrides({"duration_s": 10.0}), 0)
    long = Simulation(load_scenario("forward").with_overrides({"duration_s": 60.0}), 0)
    assert short.duration_s == 10.0 and long.duration_s == 60.0 > base.duration_s
    assert short.mocap().t_s[-1] < 10.0 <= short.mocap().t_s[-1] + 1 / 120 + 1e-9
    # Past the trajectory's end the robot holds its last pose.
    t = np.array([base.duration_s, 59.0])
    x, y, _ = long.trajectory.pose(t)
    assert x[0] == x[1] and y[0] == y[1]
    np.testing.assert_array_equal(np.array(long.trajectory.twist_body(t))[:, 1], 0.0)
    with pytest.raises(SimError, match="not a campaign"):
        Simulation("forward", 0, session=1)
    camp = Simulation("reloc_campaign", seed=7, session=1)
    assert camp.scenario.session == 1
    assert Simulation("reloc_campaign", seed=7).scenario.session == 7 % 5


@pytest.mark.slow
def test_pose_sensor_gm_allan_deviation_matches_theory() -> None:
    # Independent check of the GM generator: overlapping Allan variance of a GM process
    # is (σ²τ²/T²)(2T/τ − 3 + 4e^{−T/τ} − e^{−2T/τ}) (peak ≈ 0.62 σ at T ≈ 1.89 τ).
    sc = _gm_scenario(3000.0, jitter_s=0.0, gm_sigma=[1.0] * 6, gm_tau_s=[1.0] * 6)
    ps = Simulation(sc, seed=14).pose_sensor()
    g = ps.error
    dt = 1 / 30.0
    c = np.vstack([np.zeros((1, 6)), np.cumsum(g, axis=0)]) * dt
    for m in (15, 57, 150):  # T = 0.5, 1.9, 5 s
        T = m * dt
        avar = np.mean((c[2 * m :] - 2 * c[m:-m] + c[: -2 * m]) ** 2, axis=0) / (2 * T**2)
        x = T / 1.0
        theory = (2 * x - 3 + 4 * np.exp(-x) - np.exp(-2 * x)) / x**2
        # ~3000/T independent blocks per axis, six axes pooled: relative SE of the pooled
        # ADEV ≈ 1/√(2·6·3000/(2T)) ≤ 2 % at T = 5 s; allow 4 SE + 1 % discretization.
        rel = np.sqrt(avar.mean() / theory) - 1
        se = 1 / np.sqrt(2 * 6 * 3000 / (2 * T))
        assert abs(rel) < 4 * se + 0.01, (T, rel)


def _se2(x: float, y: float, a: float) -> np.ndarray:
    return np.array([[np.cos(a), -np.sin(a), x], [np.sin(a), np.cos(a), y], [0, 0, 1.0]])


def test_pose_sensor_reports_its_own_pose_in_its_map_frame() -> None:
    # Noise off; the sensor 0.1 m ahead and 0.05 m left, turned 30°, its map 1 m, -0.5 m
    # and 40° from the world: reported = T_WM⁻¹ · T_WB(t - latency) · T_BS, exactly.
    zero = [0.0] * 6
    sc = load_scenario("figure8").with_overrides(
        NO_LIDARS
        | {
            "pose_sensor": {
                "reloc_sigma": zero,
                "gm_sigma": zero,
                "white_sigma": zero,
                "wrong_reloc_prob": 0.0,
                "mount_xy_m": [0.1, 0.05],
                "mount_yaw_deg": 30.0,
                "map_xy_m": [1.0, -0.5],
                "map_yaw_deg": 40.0,
                "latency_s": 0.02,
            }
        }
    )
    sim = Simulation(sc, 1)
    ps = sim.pose_sensor()
    x, y, yaw = sim.trajectory.pose(ps.t_s - 0.02)
    T_wm_inv = np.linalg.inv(_se2(1.0, -0.5, np.deg2rad(40.0)))
    T_bs = _se2(0.1, 0.05, np.deg2rad(30.0))
    from scipy.spatial.transform import Rotation

    rep_yaw = Rotation.from_quat(ps.quat_xyzw).as_euler("ZYX")[:, 0]
    for k in range(0, ps.t_s.size, 97):
        T = T_wm_inv @ _se2(x[k], y[k], yaw[k]) @ T_bs
        np.testing.assert_allclose(ps.position[k, :2], T[:2, 2], atol=1e-12)
        d = np.angle(np.exp(1j * (rep_yaw[k] - np.arctan2(T[1, 0], T[0, 0]))))
        assert abs(d) < 1e-12
    np.testing.assert_allclose(ps.position[:, 2], 0.25)


def test_campaign_sessions_at_one_seed_draw_independent_noise() -> None:
    a = Simulation("reloc_campaign", seed=3, session=0).pose_sensor()
    b = Simulation("reloc_campaign", seed=3, session=1).pose_sensor()
    n = min(a.gm.shape[0], b.gm.shape[0])
    # Same seed, different sessions: the GM series must not repeat (correlation ~ 0,
    # |r| < 4/√(n/τ-ish) generously bounded by 0.5 here; identical streams give 1).
    r = np.corrcoef(a.gm[:n, 0], b.gm[:n, 0])[0, 1]
    assert abs(r) < 0.5
    again = Simulation("reloc_campaign", seed=3, session=1).pose_sensor()
    np.testing.assert_array_equal(b.gm, again.gm)
