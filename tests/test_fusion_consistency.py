"""Honest uncertainty: filter kernels against their matrix form, the slip model's
propagation against Monte Carlo and its fit against the simulator's slip, NEES/coverage and
the NIS monitor against data with known truth."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pods_util import propagate_drift

from sensorbench.characterize.pods.drift_fit import DriftFit, fit_drift
from sensorbench.fusion.axis_loop import predict_pv, update_p
from sensorbench.fusion.consistency import (
    axis_consistency,
    clipped_chi2_moments,
    effective_samples,
    expected_coverage,
)
from sensorbench.fusion.filter_noise import AxisNoise
from sensorbench.fusion.monitor_stream import nis_monitor
from sensorbench.fusion.odometry_drift import OdometryDrift, world_step_variances
from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import PodGeometry, integrate_path
from sensorbench.json_doc import to_json
from sensorbench.sim.simulation import Simulation


def test_scalar_kernels_equal_the_matrix_form() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        a = rng.standard_normal((2, 2))
        P = a @ a.T + 0.1 * np.eye(2)
        x = rng.standard_normal(2)
        q, h, r = rng.uniform(0.01, 2), rng.uniform(0.001, 0.2), rng.uniform(1e-4, 1)
        F = np.array([[1.0, h], [0.0, 1.0]])
        Q = q * h * np.array([[h * h, h], [h, 1.0]])
        xp, Pp = F @ x, F @ P @ F.T + Q
        got = predict_pv(x[0], x[1], P[0, 0], P[0, 1], P[1, 1], q, h)
        np.testing.assert_allclose(got, [xp[0], xp[1], Pp[0, 0], Pp[0, 1], Pp[1, 1]], rtol=1e-12)
        # the update against the matrix form: H = [1, 0], R = r
        H = np.array([1.0, 0.0])
        nu = rng.standard_normal()
        S = float(H @ Pp @ H) + r
        K = Pp @ H / S
        xu, Pu = xp + K * nu, (np.eye(2) - np.outer(K, H)) @ Pp
        got = update_p(*got, nu, S)
        want = [xu[0], xu[1], Pu[0, 0], Pu[0, 1], Pu[1, 1]]
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-14)


def test_drift_propagation_matches_monte_carlo_of_the_linearised_model() -> None:
    """Draw body errors from the model, dead-reckon exactly, compare the spread."""
    rng = np.random.default_rng(3)
    k = 400
    t = np.linspace(0, 20, k + 1)
    inc = np.column_stack([0.02 * np.ones(k), 0.004 * np.sin(t[:-1]), 0.01 * np.cos(0.5 * t[:-1])])
    drift = OdometryDrift(np.diag([4e-5, 2e-5, 1e-4]) + 1e-6)
    var0 = (1e-6, 2e-6, 1e-5)
    path = integrate_path(inc)
    pred = propagate_drift(inc, path[:, 2], drift, var0)
    n = 4000
    sd = np.sqrt(np.diagonal(drift.step_covariances(inc), axis1=1, axis2=2))
    finals = np.empty((n, 3))
    for i in range(n):
        noisy = inc + sd * rng.standard_normal(inc.shape)
        start = rng.standard_normal(3) * np.sqrt(var0)
        finals[i] = integrate_path(noisy, tuple(start))[-1] - path[-1]
    # a sample variance of 4000 Gaussian draws has relative se 2.2 %: 4.5 se
    np.testing.assert_allclose(finals.var(axis=0), pred[-1], rtol=0.1)
    # the heading error reaches x and y: without it their variance would be far smaller
    flat = propagate_drift(inc, path[:, 2], OdometryDrift(np.diag([4e-5, 2e-5, 0.0]) + 1e-6))
    assert pred[-1, 1] > 3 * flat[-1, 1]


def _truth_drive(name: str, seed: int, slip: float, scrub: float) -> tuple[Drive, object]:
    """A long simulated drive (9 repeats) read against its noise-free truth, no bounces."""
    sc = Simulation(name, seed).scenario.with_overrides(
        {
            "pods": {
                "slip_sigma_m_per_sqrt_m": slip,
                "scrub_sigma_m_per_sqrt_m": scrub,
                "bounce_rate_hz": 0.0,
                "mcu_clock_drift_ppm": 0.0,
            },
            "trajectory": {"repeats": 9},
        }
    )
    sim = Simulation(sc, seed)
    pods = sim.pods()
    t_ref = np.arange(0.0, sim.duration_s, 1 / 200)
    ref = np.column_stack(sim.trajectory.pose(t_ref))
    return Drive(name, pods.t_s, pods.counts, None, t_ref, ref, max_gap_s=0.05), pods.geometry


def test_a_coefficient_not_identified_has_no_standard_error_in_the_json() -> None:
    # `fit noise --json` printed 0.0 (perfect precision) where the text says "± nan (not
    # excited)"
    se = np.full((3, 3), 1e-4)
    se[0, 1] = np.nan
    fit = DriftFit(OdometryDrift(np.full((3, 3), 1e-3)), se, np.zeros(3), np.zeros(3),
                   np.isfinite(se), 10, np.ones(3))  # fmt: skip
    doc = json.loads(to_json(fit.as_dict()))
    assert doc["standard_errors"]["x"]["per_m_y"] is None
    assert doc["standard_errors"]["x"]["per_m_x"] == 1e-4
    assert doc["identified"]["x"]["per_m_y"] is False


def test_drift_fit_recovers_the_simulators_slip_within_its_standard_errors() -> None:
    """The simulator's slip: σ_slip·√(distance rolled) and σ_scrub·√(distance dragged
    sideways) per pod, added to what the pod counts. Per unit body motion along one axis,
    pod i travels |rolled_i| + |dragged_i|, so the body error variance per unit motion is
    Σ_i (W⁻¹)_{b,i}²·σ²·travel_i / c_i² (σ_slip = σ_scrub here). Over five seeds the
    z-scores of the 9 coefficients had mean −1.35…+0.34 and sd ≤ 1.4 (small-sample ML
    leans low): |z| < 4 holds for each with margin."""
    slip = 0.003
    drives, sim_geo = [], None
    for i, name in enumerate(("forward", "sideways", "spin")):
        d, sim_geo = _truth_drive(name, 300 + i, slip, slip)
        drives.append(d)
    pos, phi, c = sim_geo.position_m, sim_geo.angle_rad, sim_geo.m_per_count
    geometry = PodGeometry.from_mounts(pos[:, 0], pos[:, 1], phi, c)
    fit = fit_drift(drives, geometry, interval_s=1.0)
    w_inv = np.linalg.pinv(geometry.W)  # body increment per tick
    rolled = np.column_stack([np.cos(phi), np.sin(phi), sim_geo.lever_m])
    arm = pos[:, 0] * np.cos(phi) + pos[:, 1] * np.sin(phi)
    dragged = np.column_stack([-np.sin(phi), np.cos(phi), arm])
    expected = (w_inv**2 / c[None, :] ** 2) @ (slip**2 * (np.abs(rolled) + np.abs(dragged)))
    assert np.all(fit.identified)
    z = (fit.drift.coef - expected) / fit.coef_se
    assert np.all(np.abs(z) < 4), (fit.drift.coef, expected, fit.coef_se)


def test_nees_and_coverage_of_an_honest_and_a_dishonest_claim() -> None:
    """Coverage on random-walk errors (an odometry drift); the NEES band on AR(1) errors,
    where the effective sample size is estimated within ~7 % (see effective_samples)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(5)
    n = 20000
    t = np.arange(n) * 0.01
    steps = rng.standard_normal((260, n)) * 1e-3
    var = 1e-6 * (np.arange(n) + 1)
    honest = [axis_consistency(t, np.cumsum(s), var) for s in steps[:200]]
    # pooled 2σ coverage of 200 paths: se ≈ 0.3 % (each path ~3 independent squares)
    assert abs(np.mean([c.coverage[1] for c in honest]) - expected_coverage(2.0)) < 0.02
    small = [axis_consistency(t, np.cumsum(s), var / 4) for s in steps[200:]]
    assert np.mean([c.coverage[1] for c in small]) < 0.75
    phi = 0.99
    ar = lfilter([math.sqrt(1 - phi**2)], [1, -phi], steps / 1e-3, axis=1)  # unit variance
    ones = np.ones(n)
    inside = np.mean([axis_consistency(t, e, ones).nees_consistent for e in ar[:200]])
    assert inside > 0.9  # nominal 0.95; binomial se 1.5 %
    assert np.mean([axis_consistency(t, e, ones / 2).nees_consistent for e in ar[200:]]) < 0.1


def test_effective_samples_against_the_monte_carlo_truth() -> None:
    """The truth is the N_eff whose χ²(N_eff)/N_eff has the variance the mean of z² has:
    2 / Var(mean z²) over M = 600 series of n = 1000. Its relative standard error is
    √(2/(M − 1)) ≈ 5.8 % for normal means (the sample variance's), more for the skewed
    means of a random walk; the median estimate must lie within 3 of those standard errors
    (17 %) for the stationary series (white, AR(1) φ = 0.9 and 0.99, and white with a
    tenth of its variance AR(1) φ = 0.99). For a random walk one path holds ~2 independent
    squares and no estimate from one path can resolve less than one pair of lags: within a
    factor 2. A fixed lag cutoff without truncation fails white noise (0.77·N)."""
    from scipy.signal import lfilter

    rng = np.random.default_rng(11)
    m, n = 600, 1000
    e = rng.standard_normal((m, n))
    series = {"white": e, "walk": np.cumsum(e, axis=1) / np.sqrt(np.arange(1, n + 1))}
    for phi in (0.9, 0.99):
        x = lfilter([math.sqrt(1 - phi**2)], [1.0, -phi], e, axis=1)
        # start in the stationary law: the first sample unit variance
        x = x + np.outer(rng.standard_normal(m), phi ** np.arange(1, n + 1))
        series[f"ar{phi}"] = x
    # white with a weak slow component (a tenth of the variance): Geyer's rule on the
    # squares never stopped and its monotone minimum cut the sum at a noise dip (+38 %;
    # within z's own window +9 %)
    series["white+slow"] = math.sqrt(0.9) * rng.standard_normal((m, n)) + math.sqrt(0.1) * x
    for name, zs in series.items():
        truth = 2.0 / np.var(np.mean(zs**2, axis=1), ddof=1)
        est = float(np.median([effective_samples(z) for z in zs]))
        if name == "walk":
            assert truth / 2 < est < 2 * truth, (name, est, truth)
        else:
            assert abs(est / min(truth, n) - 1) < 0.17, (name, est, truth)


def test_nis_band_follows_the_squares_own_correlation() -> None:
    """Innovations that are white but whose variance is stated well in some stretches and
    badly in others (a slowly varying scale, as a motion model's fit changes with the
    motion) give NIS terms correlated as squares, not as signs: the Gaussian ρ² sees
    τ = 1. The truth is τ = k·Var(mean)/E[var] over M = 300 series of k = 4000 (relative
    s.e. √(2/299) = 8 %); Geyer's truncation stops where the pairs' noise (√2/√k)
    reaches a weak slow correlation's level and drops its tail (−20 % here), so the
    estimate must lie in 0.7–1.15 of the truth; the ρ² estimate (τ = 1.0 against 2.0) lies
    outside."""
    from scipy.signal import lfilter

    from sensorbench.fusion.consistency import nis_consistency

    rng = np.random.default_rng(7)
    m, k, gate, phi, sd = 300, 4000, 6.63, 0.9, 0.4
    a = lfilter([math.sqrt(1 - phi**2)], [1, -phi], rng.standard_normal((m, k + 200)), axis=1)
    scale = np.exp(sd * a[:, 200:] - sd * sd / 2)
    nis = rng.standard_normal((m, k)) ** 2 * scale
    c = np.minimum(nis, gate)
    truth = k * np.var(c.mean(axis=1), ddof=1) / np.mean(c.var(axis=1))
    est = float(np.median([k / nis_consistency(x, gate).k_eff for x in nis]))
    assert 0.7 < est / truth < 1.15, (est, truth)
    assert truth > 1.5  # ρ² (τ = 1) would be outside


def test_clipped_chi2_moments_match_sampling() -> None:
    x = np.minimum(np.random.default_rng(4).chisquare(1, 400_000), 6.63)
    m, v = clipped_chi2_moments(6.63)
    assert abs(x.mean() - m) < 4 * math.sqrt(v / x.size)
    assert abs(x.var() / v - 1) < 0.02


def test_window_threshold_is_the_exact_quantile_of_the_clipped_sum() -> None:
    # 200 000 independent windows of 50 clipped χ²₁ terms: at 99.9 % the threshold is
    # exceeded by 200 ± 14 of them (binomial); the normal approximation's threshold (0.075
    # lower) by ≈ 580, so 4 standard deviations separate the two
    from scipy.stats import norm

    from sensorbench.fusion.consistency import window_mean_quantile

    n, window, level = 200_000, 50, 0.999
    means = np.minimum(np.random.default_rng(8).chisquare(1, (n, window)), 6.63).mean(axis=1)
    expected = n * (1 - level)
    sd = math.sqrt(expected * level)
    over = np.count_nonzero(means > window_mean_quantile(6.63, window, level))
    assert abs(over - expected) < 4 * sd, over
    m, v = clipped_chi2_moments(6.63)
    normal = m + norm.ppf(level) * math.sqrt(v / window)
    assert np.count_nonzero(means > normal) > expected + 8 * sd


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_nis_monitor_false_alarms_and_detection(scale: float) -> None:
    rng = np.random.default_rng(6)
    nis = rng.chisquare(1, 20000)
    nis[5000:5200] *= scale * 3  # a stretch where S is 3x (or 9x) too small
    nis[100] = 1e4  # one bounce: clipped, no alarm
    mon = nis_monitor(nis, 6.63, window=50, level=0.999)
    quiet = np.r_[0:5000, 5300:20000]
    assert mon.degraded[quiet].mean() < 0.003
    assert not mon.degraded[100:150].any()
    # raised within one window of the onset, cleared within one window after the end
    assert mon.degraded[5050:5200].mean() > 0.9
    assert mon.onsets.size >= 1 and 5000 <= mon.onsets[0] <= 5050
    assert not mon.degraded[5250:5300].any()


def test_a_rest_longer_than_a_window_drops_the_flag_and_motion_brings_it_back() -> None:
    # updates with S 9× too small, then 300 frames at rest (no update: nan), then more
    nis = np.random.default_rng(9).chisquare(1, 1000) * 9.0
    nis[400:700] = np.nan
    mon = nis_monitor(nis, 6.63, window=50, level=0.999)
    assert mon.degraded[100:400].all()
    assert mon.degraded[400:449].all()  # held for one window after the last update (399)
    assert not mon.degraded[449:700].any()  # nothing to judge: dropped
    assert mon.degraded[700:].all()  # the first update completes a window still above


def test_observed_acceleration_and_jerk_of_known_motions_and_slip_variances_rotated() -> None:
    from sensorbench.fusion.odometry_motion import observed_accel, observed_jerk

    dt = np.full(400, 0.005)
    t = np.concatenate([[0.0], np.cumsum(dt)])
    pos = 0.5 * 0.7 * t**2  # a constant 0.7 m/s² from rest
    a = observed_accel(dt, np.diff(pos), frames=10)
    assert np.all(a[:20] == 0)
    np.testing.assert_allclose(a[20:], 0.7, rtol=1e-9)
    # causal: a step's own increment does not enter its acceleration
    jump = np.diff(pos)
    jump[200] += 1.0
    np.testing.assert_array_equal(observed_accel(dt, jump, frames=10)[:201], a[:201])
    # a constant jerk of 2 m/s³: the windowed acceleration lags but its change does not
    cubic = 2.0 * t**3 / 6
    j = observed_jerk(dt, np.diff(cubic), frames=10)
    assert np.all(j[:30] == 0)
    np.testing.assert_allclose(j[30:], 2.0, rtol=1e-9)
    drift = OdometryDrift(np.diag([1e-6, 4e-6, 1e-5]))
    inc = np.array([[0.01, 0.0, 0.0], [0.0, 0.01, 0.02]])
    v = world_step_variances(drift.step_covariances(inc), np.array([0.0, np.pi / 2]))
    np.testing.assert_allclose(v["x"], [1e-8, 4e-8], atol=1e-20)
    np.testing.assert_allclose(v["y"], [0.0, 0.0], atol=1e-20)
    np.testing.assert_allclose(v["theta"], [0.0, 2e-7])


def test_frames_at_rest_are_updated_but_not_tested() -> None:
    from sensorbench.fusion.axis_step import AxisInput, run_axis

    rng = np.random.default_rng(3)
    dt = np.full(600, 0.005)
    z = np.where(np.arange(600) % 100 < 60, 0.002 + rng.normal(0, 2e-5, 600), 0.0)
    rest = z == 0
    noise = AxisNoise(1e-2, 1e-10)
    a, b = run_axis(AxisInput(dt, z), noise), run_axis(AxisInput(dt, z, rest=rest), noise)
    np.testing.assert_array_equal(a.p, b.p)
    assert np.all(np.isnan(b.nis_chi2[rest])) and np.all(np.isfinite(b.nis_chi2[~rest]))
    np.testing.assert_array_equal(a.nis_chi2[~rest], b.nis_chi2[~rest])


def test_geyer_tau_of_ar1_and_the_monitor_threshold_it_sets() -> None:
    """AR(1) with φ = 0.5 has τ = (1 + φ)/(1 − φ) = 3. Over 200 series of 2000 the
    estimates' spread is ~10 % each (Geyer's truncation keeps ~10 lags, each with s.e.
    1/√2000), so the mean is within 3 % of 3 (3 standard errors of the mean of 200: 2 %)."""
    from scipy.signal import lfilter

    from sensorbench.fusion.consistency import geyer_tau, window_threshold

    rng = np.random.default_rng(4)
    x = lfilter([1.0], [1.0, -0.5], rng.standard_normal((200, 2000)), axis=1)[:, 100:]
    taus = np.array([geyer_tau(s) for s in x])
    assert abs(taus.mean() / 3.0 - 1) < 0.03, taus.mean()
    assert geyer_tau(rng.standard_normal(5000)) < 1.1
    # a window of 50 updates with τ = 2 is judged as 25 independent ones: a higher bar
    assert window_threshold(6.63, 50, 0.999, 2.0) == window_threshold(6.63, 25, 0.999)
    assert window_threshold(6.63, 50, 0.999, 2.0) > window_threshold(6.63, 50, 0.999)
