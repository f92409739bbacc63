"""The reference's own noise in the claimed-vs-actual comparison (``reference_noise``).

A reference path with known white noise (generated here: a smooth curve sampled at
120 Hz with gaps, plus Gaussian noise) must give back its σ per axis; the comparison
against it must then state that noise beside the filter's own variance.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sensorbench.fusion.odometry_replay import (
    reference_consistency,
    reference_noise,
    reference_noise_tails,
    replay_session,
)

SIGMA = (5e-4, 3e-4, 2e-3)


def _path(rng: np.random.Generator, n: int = 6000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    t = np.arange(n) / 120.0
    t = np.delete(t, np.arange(1000, 1040))  # an occlusion
    true = np.column_stack(
        [0.8 * np.sin(0.3 * t), 0.5 * np.cos(0.2 * t), np.unwrap(0.9 * np.sin(0.25 * t))]
    )
    noisy = true + rng.standard_normal(true.shape) * np.asarray(SIGMA)
    return t, true, noisy


def test_white_noise_of_a_reference_is_recovered_per_axis() -> None:
    t, _, noisy = _path(np.random.default_rng(3))
    got = np.sqrt(reference_noise(t, noisy))
    # MAD-based σ over ~6000 triples: relative sd ≈ 1.1/√n·√(correlation 3) ≈ 2.5 %;
    # 4 sd, plus the smooth motion's own second difference (< 1e-5 m here)
    np.testing.assert_allclose(got, SIGMA, rtol=0.1)


def test_comparison_states_the_reference_noise_beside_the_filter_variance() -> None:
    rng = np.random.default_rng(4)
    t, true, noisy = _path(rng)
    est_var = np.full((t.size, 3), 1e-12)  # a filter that claims to be exact
    est = true.copy()
    without = reference_consistency(t, est, est_var, t, noisy)
    with_noise = reference_consistency(t, est, est_var, t, noisy, reference_noise(t, noisy))
    # judged against the noisy reference alone, an exact estimate looks wildly wrong;
    # with the reference's noise stated it is inside 2σ at the nominal rate: 4 binomial sd,
    # plus 0.01 for the estimated σ's own error (2.5 % in σ moves the 2σ coverage ≈ 0.5 %)
    assert without["x"].coverage[1] < 0.01
    for a in ("x", "y", "theta"):
        assert abs(with_noise[a].coverage[1] - 0.954) < 4 * math.sqrt(0.954 * 0.046 / t.size) + 0.01


def test_a_reference_with_heading_bursts_is_named_heavy_tailed() -> None:
    # OptiTrack on a real robot jumped its heading by up to 90 mrad between samples 6 ms
    # apart (7-13 % of samples) while the MAD-based noise said 1.7 mrad: the bursts then
    # count as the filter's error and flag it (docs/PODS.md, the mecanum robot). White
    # Gaussian noise gives a mean-square ratio of 1 (over ~6000 triples within a few %);
    # bursts of 20 σ in 7 % of samples give ~1 + 0.07·400 = 29 on heading alone.
    rng = np.random.default_rng(5)
    t, _, noisy = _path(rng)
    assert reference_noise_tails(t, noisy)[1] == {}
    burst = rng.random(t.size) < 0.07
    noisy[burst, 2] += 20 * SIGMA[2] * rng.choice([-1.0, 1.0], burst.sum())
    tails = reference_noise_tails(t, noisy)[1]
    assert list(tails) == ["theta"] and tails["theta"] > 10, tails


def test_a_replay_against_bursty_mocap_warns_on_that_axis(tmp_path) -> None:
    import h5py
    from pods_sim_util import simulate

    from sensorbench.characterize.pods.display import replay_text
    from sensorbench.fusion.filter_noise import load_noise_model
    from sensorbench.fusion.pod_kinematics import load_pod_model

    models = Path(__file__).parents[1] / "examples" / "models"
    path = simulate(tmp_path, "square", 2)
    geometry = load_pod_model(models / "pods-emulated.toml")
    noise = load_noise_model(models / "noise-emulated.toml")
    assert replay_session(path, geometry, noise).info["reference_heavy_tailed"] == {}
    rng = np.random.default_rng(6)
    with h5py.File(path, "r+") as f:  # heading bursts of ±40 mrad in 7 % of samples
        q = f["pose/mocap/quat_xyzw"][...]
        yaw = 2 * np.arctan2(q[:, 2], q[:, 3])
        burst = rng.random(yaw.size) < 0.07
        yaw[burst] += 0.04 * rng.choice([-1.0, 1.0], burst.sum())
        q[:, :2], q[:, 2], q[:, 3] = 0.0, np.sin(yaw / 2), np.cos(yaw / 2)
        f["pose/mocap/quat_xyzw"][...] = q
    rp = replay_session(path, geometry, noise)
    assert list(rp.info["reference_heavy_tailed"]) == ["theta"], rp.info
    text = replay_text(rp.summary(), "s", "mocap")
    assert "WARNING, the mocap's theta noise is heavy-tailed" in text, text
