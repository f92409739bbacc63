"""Split filters: consistency on correctly specified data, gating, coasting, aiding, noise fit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from odometry_util import nis_bounds

from sensorbench.benchmarks.joint_filter import JointFilter
from sensorbench.characterize.pods.noise_fit import fit_axis
from sensorbench.errors import FusionError
from sensorbench.fusion.aid_queue import Aiding, PoseAidModel
from sensorbench.fusion.axis_loop import predict_pv
from sensorbench.fusion.axis_step import AxisInput, run_axis
from sensorbench.fusion.consistency import (
    clipped_chi2_moments,
    nis_consistency,
    whiteness,
)
from sensorbench.fusion.filter_noise import AxisNoise, FilterNoise
from sensorbench.fusion.odometry_motion import FEEDFORWARD_FRAMES
from sensorbench.fusion.pod_kinematics import integrate_path
from sensorbench.fusion.split_filter import SplitFilter

H = 0.005  # s, 200 Hz frames
Q = 0.01  # m²/s³
R = 1e-8  # m²
INF_GATE = math.inf


def model_series(seed: int, k: int = 4000, q: float = Q, r: float = R):
    """Data drawn from the filter's own model: white odometry error on a velocity that
    takes the acceleration the odometry has shown (fed forward, as the filter predicts it:
    :func:`~sensorbench.fusion.odometry_motion.observed_accel` of the increments before
    each step) and a random walk of intensity q, stepped as ``predict_pv`` states it.

    Returns (dt, odometry increments, true positions p_0..p_K).
    """
    rng = np.random.default_rng(seed)
    m = FEEDFORWARD_FRAMES
    w = rng.normal(0.0, math.sqrt(q * H), k)
    e = rng.normal(0.0, math.sqrt(r), k + 1)
    e[0] = 0.0
    p, y, z = np.zeros(k + 1), np.zeros(k + 1), np.zeros(k)
    v = 0.0
    for j in range(k):
        u = 0.0
        if j >= 2 * m:
            u = (z[j - m : j].sum() - z[j - 2 * m : j - m].sum()) / (m * H) ** 2
        p[j + 1] = p[j] + v * H + 0.5 * u * H * H + w[j] * H
        v += u * H + w[j]
        y[j + 1] = p[j + 1] + e[j + 1]
        z[j] = y[j + 1] - y[j]
    return np.full(k, H), z, p


def test_average_nis_inside_its_95_percent_bounds_on_correct_data() -> None:
    # without a gate the NIS of a correct model averages to χ²(K)/K; each seed passes a
    # correct filter 95 % of the time; over 4 seeds we allow one miss (P(≥2) = 1.4 %).
    # With the default gate about 1 % of correct innovations exceed 6.63; a rejected
    # step is kept in the odometry but not in the state, so the innovations after it
    # still hold what was rejected and rejections come in short runs (measured
    # 1.18 ± 0.23 % over 40 seeds): the filter's own bar, at most twice the nominal
    # rate (80 of 4000), is 3.6 sd above that.
    misses_free = 0
    for seed in range(4):
        dt, z, _ = model_series(seed)
        free = run_axis(AxisInput(dt, z), AxisNoise(Q, R), INF_GATE)
        lo, hi = nis_bounds(free.nis.size)
        misses_free += not lo <= free.nis.mean() <= hi
        gated = run_axis(AxisInput(dt, z), AxisNoise(Q, R))
        assert nis_consistency(gated.nis, 6.63).rejections_ok, gated.rejected
    assert misses_free <= 1


@pytest.mark.xfail(
    strict=True,
    reason="the gated filter's mean clipped NIS on its own model is 1.012 ± 0.004 (40 seeds; "
    "0.982 expected): an innovation after a rejected step holds the step the state did "
    "not take, which S does not state",
)
def test_gated_mean_clipped_nis_on_correct_data_is_its_expectation() -> None:
    """The mean of min(NIS, gate) over 40 seeds of the filter's own model, against the
    clipped χ²₁ mean within ± 1.96 of its standard error over the seeds (a correct
    filter misses it 5 % of the time)."""
    means = []
    for seed in range(40):
        dt, z, _ = model_series(seed)
        means.append(nis_consistency(run_axis(AxisInput(dt, z), AxisNoise(Q, R)).nis, 6.63).mean)
    expected = clipped_chi2_moments(6.63)[0]
    se = np.std(means, ddof=1) / np.sqrt(len(means))
    assert abs(np.mean(means) - expected) <= 1.96 * se, (np.mean(means), expected, se)


def test_innovations_are_white_on_correct_data() -> None:
    dt, z, _ = model_series(11, k=6000)
    tr = run_axis(AxisInput(dt, z), AxisNoise(Q, R), INF_GATE)
    rho, bound = whiteness(tr.innovation / np.sqrt(tr.s), max_lag=10)
    # each lag is outside ±1.96/√K with probability 5 %: ≥ 4 of 10 happens 0.1 % of the time
    assert np.count_nonzero(np.abs(rho) > bound) <= 3
    # a filter with q 100× too small is visibly coloured
    slow = run_axis(AxisInput(dt, z), AxisNoise(Q / 100, R), INF_GATE)
    rho_slow, _ = whiteness(slow.innovation / np.sqrt(slow.s), max_lag=10)
    assert np.count_nonzero(np.abs(rho_slow) > bound) >= 5


def test_gross_measurement_is_rejected_counted_and_never_applied() -> None:
    dt, z, p = model_series(3)
    bad = z.copy()
    k = 2000
    bad[k] += 0.5  # a 0.5 m jump in one frame's odometry (e.g. a corrupted count)
    clean = run_axis(AxisInput(dt, z), AxisNoise(Q, R))
    hit = run_axis(AxisInput(dt, bad), AxisNoise(Q, R))
    assert not hit.accepted[k]
    assert hit.nis[k] > 1e6
    assert hit.rejected == clean.rejected + 1 or (hit.rejected >= 1 and not hit.accepted[k])
    # never applied: once the corrupt increment has left the windows of the fed-forward
    # acceleration (which takes the increments as they came, for 3·FEEDFORWARD_FRAMES
    # steps), the estimate is back on the truth, not 0.5 m off
    after = slice(k + 1 + 3 * FEEDFORWARD_FRAMES, None)
    assert np.max(np.abs(hit.p[after] - p[after])) < 0.01
    ungated = run_axis(AxisInput(dt, bad), AxisNoise(Q, R), INF_GATE)
    assert np.median(np.abs(ungated.p[after] - p[after])) > 0.4


def test_streak_of_rejections_recovers_when_the_model_is_wrong() -> None:
    # the velocity jumps by 2 m/s at once (a collision): the model calls it impossible,
    # the gate rejects a few frames, then the odometry of the streak is restored
    k = 2000
    dt = np.full(k, H)
    v = np.where(np.arange(k) < 1000, 0.5, 2.5)
    z = v * H
    tr = run_axis(AxisInput(dt, z), AxisNoise(Q, 1e-10))
    assert tr.resets >= 1
    np.testing.assert_allclose(tr.p[-1], np.sum(z), atol=1e-3)


def test_coasting_variance_grows_and_gaps_are_flagged() -> None:
    var = [predict_pv(0.0, 1.0, 1e-6, 0.0, 1e-4, Q, h)[2] for h in (0.0, 0.1, 0.5, 1.0)]
    assert np.all(np.diff(var) > 0)
    t = np.concatenate([np.arange(0, 1, H), 1.5 + np.arange(0, 1, H)])
    inc = np.zeros((t.size - 1, 3))
    inc[:, 0] = 0.2 * np.diff(t)  # 0.2 m/s forward, straight
    res = SplitFilter(FilterNoise.default()).run(t, inc)
    assert np.count_nonzero(res.coasting) == 1
    gap = np.flatnonzero(res.coasting)[0]
    # the innovation variance of the frame after the 0.5 s gap holds the coasted growth
    s = res.tracks["x"].s
    assert s[gap] > 10 * s[gap - 1]
    np.testing.assert_allclose(res.pose[-1, 0], 0.2 * (t[-1] - t[0]), rtol=1e-3)


def test_split_filter_follows_exact_arcs_and_matches_the_joint_filter() -> None:
    # noise-free body increments of a 1 m/s, 1.2 rad/s circle at 200 Hz
    k = 2000
    t = np.arange(k + 1) * H
    inc = np.tile([1.0 * H, 0.0, 1.2 * H], (k, 1))
    truth = integrate_path(inc, (0.3, -0.2, 0.5))
    noise = FilterNoise(AxisNoise(1.0, 1e-10), AxisNoise(1.0, 1e-10), AxisNoise(1.0, 1e-10))
    split = SplitFilter(noise).run(t, inc, pose0=(0.3, -0.2, 0.5))
    joint = JointFilter(noise).run(t, inc, pose0=(0.3, -0.2, 0.5))
    assert np.max(np.hypot(*(split.pose[:, :2] - truth[:, :2]).T)) < 1e-3
    assert np.max(np.hypot(*(joint.pose[:, :2] - truth[:, :2]).T)) < 1e-3
    assert np.max(np.abs(split.pose[:, 2] - truth[:, 2])) < 1e-4


def test_pose_aiding_corrects_a_wrong_start_and_gates_a_wrong_relocalization() -> None:
    rng = np.random.default_rng(5)
    k = 6000
    t = np.arange(k + 1) * H
    inc = np.tile([0.4 * H, 0.0, 0.3 * H], (k, 1))
    truth = integrate_path(inc)
    ta = np.arange(0.0, t[-1], 1 / 30)
    pose = np.column_stack([np.interp(ta, t, truth[:, j]) for j in range(3)])
    pose[:, :2] += rng.normal(0, 0.01, (ta.size, 2))
    wrong = (ta > 20.0) & (ta < 20.5)
    pose[wrong, 0] += 2.0  # a gross, confident lie from the pose sensor
    aid = Aiding(ta, pose, np.ones(ta.size, bool), np.zeros(ta.size, bool))
    model = PoseAidModel.from_dict(
        {a: {"sigma_b": 1e-3, "sigma": 1e-3, "tau_s": 1.0, "sigma_v": 0.01} for a in "xy"}
        | {"yaw": {"sigma_b": 1e-3, "sigma": 1e-3, "tau_s": 1.0, "sigma_v": 0.005}}
    )
    noise = FilterNoise(AxisNoise(0.01, 1e-8), AxisNoise(0.01, 1e-8), AxisNoise(0.01, 1e-8))
    start, var0 = (0.5, -0.4, 0.0), (1.0, 1.0, 1e-6)  # 0.64 m off, and it knows it
    plain = SplitFilter(noise).run(t, inc, pose0=start, var0=var0)
    aided = SplitFilter(noise, aid_model=model).run(t, inc, pose0=start, var0=var0, aiding=aid)
    err_plain = np.hypot(*(plain.pose[:, :2] - truth[:, :2]).T)
    err_aided = np.hypot(*(aided.pose[:, :2] - truth[:, :2]).T)
    assert err_plain[-1] > 0.6
    assert err_aided[-1] < 0.05
    # the 2 m jump is rejected and counted, and never moves the estimate
    assert aided.aid_rejected["x"] >= np.count_nonzero(wrong)
    assert np.max(err_aided[(t > 20.0) & (t < 21.0)]) < 0.05
    with pytest.raises(FusionError, match="pose-error model"):
        SplitFilter(noise).run(t, inc, aiding=aid)


def test_noise_fit_recovers_q_and_r_on_model_data() -> None:
    series = [AxisInput(*model_series(20 + s)[:2]) for s in range(3)]
    fit = fit_axis("x", series, r_min=1e-12, max_frames=3000)
    # 9000 frames: the ML standard errors are a few % (q) and ~2 % (r), the grid's
    # final step 5 %; ±25 % is several standard errors wide
    assert fit.noise.q == pytest.approx(Q, rel=0.25)
    assert fit.noise.r == pytest.approx(R, rel=0.25)
    # the NIS is near its band (the gate's clipping of the 1 % rejected innovations biases
    # it by a few %) with rejections near nominal
    assert fit.nis.band[0] - 0.05 <= fit.nis.mean <= fit.nis.band[1] + 0.05, fit.as_dict()
    assert fit.nis.rejections_ok, fit.as_dict()
