"""The split filters' motion input (observed jerk, its noise), the encoder rounding's fresh
share and its frame-to-frame correlation (Schmidt), and the noise model's new keys —
each against a truth computed a different way (Monte Carlo, closed forms, a filter
run on data drawn from the stated law)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sensorbench.errors import ModelFileError
from sensorbench.fusion.axis_step import AxisInput, AxisOptions, run_axis
from sensorbench.fusion.odometry_drift import PodSlip
from sensorbench.fusion.odometry_motion import jerk_noise_gains, observed_jerk
from sensorbench.fusion.split_filter import (
    AxisNoise,
    FilterNoise,
    load_noise_model,
    rounding_correlation,
    save_noise_model,
)
from sensorbench.fusion.tick_rounding import expected_frac_variance, rounding_share


def test_jerk_noise_gains_bound_the_noise_of_the_observed_jerk() -> None:
    # pure noise, no motion: white rounding R at each frame end plus slip S per step
    rng = np.random.default_rng(3)
    k, n = 400, 400
    dt = np.full(k, 0.005)
    r_var, s_var = 4e-10, 2e-9
    sq = []
    for _ in range(n):
        e = rng.normal(0.0, math.sqrt(r_var), k + 1)
        z = np.diff(e) + rng.normal(0.0, math.sqrt(s_var), k)
        sq.append(observed_jerk(dt, z)[-100:] ** 2)
    measured = float(np.mean(sq))
    gains = float(jerk_noise_gains(dt, np.full(k, r_var), np.full(k, s_var))[-1])
    # 40 000 correlated squares (100 per run, the windows 60 frames long): the Monte
    # Carlo mean is known to about 4 %; ignoring the windows' shared ends would state 2/3
    assert gains == pytest.approx(measured, rel=0.1), (measured, gains)
    # and they are linear in each input (the noise fit relies on it)
    twice = jerk_noise_gains(dt, np.full(k, 2 * r_var), np.full(k, 2 * s_var))[-1]
    assert twice == pytest.approx(2 * gains, rel=1e-12)


def test_expected_fractional_variance_matches_monte_carlo_and_its_limits() -> None:
    rng = np.random.default_rng(4)
    for mu, sd in ((0.3, 0.2), (16.5, 0.05), (2.0, 0.0), (7.1, 1.0)):
        d = rng.normal(mu, sd, 400_000) if sd > 0 else np.full(10, mu)
        f = d - np.floor(d)
        mc = float(np.mean(f * (1 - f)))
        got = float(expected_frac_variance(np.array([mu]), np.array([sd * sd]))[0])
        # Monte Carlo standard error < 2e-4; the series' truncation < 3e-3 at σ = 0
        assert got == pytest.approx(mc, abs=3e-3), (mu, sd, got, mc)


def test_expected_fractional_variance_of_a_long_replay_stays_near_its_input_size() -> None:
    # an hour at 200 Hz is 720 000 frames × 3 pods; built as one (frames, pods, terms)
    # array the series took 40× the input at once. Here 100 000 × 3 (2.4 MB per array)
    # must peak under 10× that
    import tracemalloc

    rng = np.random.default_rng(3)
    mu = rng.uniform(0.0, 60.0, (100_000, 3))
    s2 = rng.exponential(0.02, (100_000, 3))
    tracemalloc.start()
    expected_frac_variance(mu, s2)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 * mu.nbytes, peak / mu.nbytes


def test_rounding_share_of_a_still_a_steady_and_a_random_wheel() -> None:
    k = 300
    still = np.zeros(k)
    steady = np.full(k, 16.5)  # half a tick left over every frame: e alternates
    rng = np.random.default_rng(5)
    random = rng.integers(10, 60, k).astype(float)
    share = rounding_share(np.column_stack([still, steady, random]))
    tail = share[40:]
    assert np.all(tail[:, 0] < 0.05)  # nothing fresh: the rounding stays what it was
    assert tail[:, 1] == pytest.approx(1.5, abs=0.05)  # f(1 − f) = 1/4 against 1/6
    # counts jumping by tens of ticks: the extrapolated travel knows nothing of the
    # fraction, the rounding is a fresh uniform draw
    assert np.mean(tail[:, 2]) == pytest.approx(1.0, abs=0.1)
    # the pods' shares become each axis's correlation: a still robot's is 1
    W = np.array([[13000.0, 0.0, -2100.0], [13000.0, 0.0, 2100.0], [0.0, 13000.0, -1600.0]])
    rho = rounding_correlation(W, np.zeros(k), np.zeros((k, 3)))
    assert np.allclose(rho["x"], 1.0) and np.allclose(rho["theta"], 1.0)


def test_correlated_rounding_stated_keeps_the_nis_honest() -> None:
    # a position random walk measured with an AR(1) error (ρ = 0.8, the rounding of a
    # slowly turning wheel): stating ρ keeps the mean NIS at 1, white rounding does not
    rng = np.random.default_rng(6)
    k, r, s, rho = 20_000, 1e-8, 2e-9, 0.8
    walk = np.cumsum(rng.normal(0.0, math.sqrt(s), k + 1))
    e = np.empty(k + 1)
    e[0] = rng.normal(0.0, math.sqrt(r))
    eta = rng.normal(0.0, math.sqrt(r * (1 - rho**2)), k + 1)
    for i in range(1, k + 1):
        e[i] = rho * e[i - 1] + eta[i]
    z = np.diff(walk + e)
    dt = np.full(k, 0.005)
    noise = AxisNoise(1e-12, r)
    slip = np.full(k, s)
    means = {}
    for label, corr in (("stated", np.full(k, rho)), ("white", None)):
        tr = run_axis(AxisInput(dt, z, slip=slip, r_corr=corr), noise, AxisOptions(gate=math.inf))
        means[label] = float(np.mean(tr.nis[200:]))
    # 20 000 correlated innovations: the mean's standard error is about 0.015
    assert means["stated"] == pytest.approx(1.0, abs=0.06), means
    assert means["white"] < 0.8, means


def test_slip_parts_add_up_and_the_new_noise_keys_round_trip(tmp_path) -> None:
    W = np.array([[13000.0, 0.0, -2100.0], [13000.0, 0.0, 2100.0], [0.0, 13000.0, -1600.0]])
    slip = PodSlip(W, 2.5e-7, 1e-6)
    inc = np.array([[0.002, 0.0005, 0.01], [0.0, 0.002, -0.02]])
    roll, drag = slip.step_covariance_parts(inc)
    np.testing.assert_allclose(roll + drag, slip.step_covariances(inc), rtol=1e-12)
    noise = FilterNoise(
        AxisNoise(1e-6, 4e-10, q_jerk=2e-3, slip_scale=0.9, drag_scale=1.1, feedforward=True),
        AxisNoise(2e-6, 5e-10, q_jerk=3e-3, slip_scale=1.2, feedforward=True),
        AxisNoise(3e-5, 9e-9),
    )
    save_noise_model(tmp_path / "n.toml", noise, {})
    assert load_noise_model(tmp_path / "n.toml") == noise
    # a format-1 file whose q grew with the acceleration was fitted for another filter
    old = (tmp_path / "n.toml").read_text().replace("q_jerk", "q_acc")
    (tmp_path / "old.toml").write_text(old.replace("format_version = 2", "format_version = 1"))
    with pytest.raises(ModelFileError, match="refit"):
        load_noise_model(tmp_path / "old.toml")
