"""Two pods + the IMU's heading (docs/PODS.md § "Any wheel layout"): the IMU as a row
(0, 0, 1) of W below two pods; the model file, the refusals naming what is missing, the
kinematics against the two-pods-plus-IMU solution, and fit → replay against the
simulator's truth (its sessions with one pod's counter left out)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from pods_sim_util import DRIVES, true_geometry
from pods_two_util import simulate_two

from sensorbench.errors import FusionError, ModelFileError
from sensorbench.fusion.odometry_drift import PodSlip
from sensorbench.fusion.odometry_replay import read_odometry
from sensorbench.fusion.pod_kinematics import (
    PodGeometry,
    body_increments,
    body_increments_two_pods_imu,
    bridged_yaw_steps,
    condition_number,
    imu_bias_variance,
    imu_heading_steps,
    imu_rest_rate_variance,
    load_pod_model,
    save_pod_model,
)

KEEP = [0, 2]
AXES = ("x", "y", "theta")


def two_pods(imu_rate_var: float | None = 1e-7) -> PodGeometry:
    """The simulator's pods 0 and 2 (a parallel and the perpendicular one)."""
    g = true_geometry(True)
    return PodGeometry(g.c[KEEP], g.phi[KEEP], g.lever[KEEP], ("l", "p"), slip=g.slip,
                       imu_rate_var=imu_rate_var)  # fmt: skip


def test_two_counters_without_imu_yaw_are_refused_naming_what_is_missing(tmp_path) -> None:
    path = simulate_two(tmp_path, "forward", 1, imu=False)
    with pytest.raises(FusionError, match=r"2 counters and no IMU yaw.*third pod or the IMU"):
        read_odometry(path)
    assert read_odometry(simulate_two(tmp_path, "forward", 1)).dn.shape[1] == 2


def test_a_two_pod_model_needs_its_imu_table(tmp_path) -> None:
    save_pod_model(tmp_path / "with.toml", two_pods(2.5e-7), {"source": "test"})
    assert load_pod_model(tmp_path / "with.toml").imu_rate_var == 2.5e-7
    save_pod_model(tmp_path / "without.toml", two_pods(None), {"source": "test"})
    with pytest.raises(ModelFileError, match=r"2 and an \[imu\] table.*found 2 and no \[imu\]"):
        load_pod_model(tmp_path / "without.toml")


def test_fit_pods_on_two_pods_without_imu_fits_the_geometry_and_says_what_is_missing(
    tmp_path,
) -> None:
    from sensorbench.characterize.pods.display import pod_table
    from sensorbench.characterize.pods.geometry_fit import fit_pods
    from sensorbench.fusion.pod_drive import load_drive

    drives = [load_drive(simulate_two(tmp_path, n, 40 + i, imu=False))
              for i, n in enumerate(DRIVES)]  # fmt: skip
    fit = fit_pods(drives)
    assert fit.complete and fit.imu_rate_var is None and fit.slip is None
    assert "IMU's yaw" in fit.imu_note["not_fitted"] and "IMU yaw" in fit.slip_note
    assert f"heading: {fit.imu_note['not_fitted']}" in pod_table(fit)
    fit.save(tmp_path / "pods.toml", {"source": "test"})
    with pytest.raises(ModelFileError, match=r"no \[imu\] table"):
        load_pod_model(tmp_path / "pods.toml")


def test_live_says_it_does_not_run_two_pods_yet(tmp_path) -> None:
    from sensorbench.live.odometry import OdometryModels

    save_pod_model(tmp_path / "two.toml", two_pods(), {"source": "test"})
    with pytest.raises(ModelFileError, match="live` does not run this layout"):
        OdometryModels.from_files(tmp_path / "two.toml")


def test_the_imu_row_gives_the_two_pods_plus_imu_increments() -> None:
    g = two_pods()
    rng = np.random.default_rng(3)
    dn = rng.integers(-300, 300, size=(2000, 2)).astype(float)
    dtheta = rng.normal(0.0, 0.05, 2000)
    ref = body_increments_two_pods_imu(g.W[:2], dn, dtheta)
    got = body_increments(g.W, np.column_stack([dn, dtheta]))
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-15)
    # the length scale of the heading column is the pods' (the IMU's row has none)
    assert np.isfinite(condition_number(g.W)) and condition_number(g.W) < 100


def test_rounding_and_imu_noise_against_a_monte_carlo() -> None:
    """Floored counts and the IMU's yaw noise through the two-pods-plus-IMU solution:
    their sample covariance is the stated rounding (1/12 tick² per pod, none for the IMU)
    plus the IMU row's ``imu_var·h`` carried by W⁻¹."""
    imu_var, h = 4e-6, 0.005
    g = two_pods(imu_var)
    law = PodSlip(g.W, 0.0, 0.0, 0.0, imu_var)
    u = np.array([[0.002, 0.001, 0.003]])
    stated = 2 * g.rounding_covariance() + law.step_covariances(u, np.array([h]))[0]
    rng = np.random.default_rng(4)
    n = 200_000
    # a step's count difference errs by the rounding of both its ends
    tick_err = rng.uniform(-0.5, 0.5, (n, 2)) - rng.uniform(-0.5, 0.5, (n, 2))
    yaw_err = rng.normal(0.0, np.sqrt(imu_var * h), n)
    err = body_increments_two_pods_imu(g.W[:2], tick_err, yaw_err)
    sample = np.cov(err.T)
    # each entry's standard error ≈ sqrt((C_jj C_ll + C_jl²)/n)
    se = np.sqrt((np.outer(np.diag(sample), np.diag(sample)) + sample**2) / n)
    assert np.all(np.abs(sample - stated) < 4 * se), (sample, stated)
    still = law.step_covariances(np.zeros((1, 3)), np.array([h]))[0]
    assert np.all(still == 0.0)  # at rest the heading is held


def test_the_imu_heading_holds_at_rest_and_removes_the_bias_the_rests_show() -> None:
    rng = np.random.default_rng(5)
    k, h, bias = 4000, 0.005, 0.002
    dt = np.full(k, h)
    moving = np.arange(k) >= 400  # 2 s at rest, then moving
    dn = np.where(moving[:, None], rng.integers(1, 5, (k, 2)), 0)
    rate = np.where(moving, 0.3, 0.0)
    imu = (rate + bias) * h + rng.normal(0.0, 3e-3 * h, k)
    steps, rest = imu_heading_steps(dn, imu, dt)
    assert not rest[moving].any() and rest[:400].all()
    assert np.all(steps[:400] == 0.0)
    # the bias estimated from 2 s of rest: σ = 3 mrad/s over √400 frames
    err = np.sum(steps[moving]) - np.sum(rate[moving] * h)
    assert abs(err) < 4 * 3e-3 / np.sqrt(400) * 18.0 + 4 * 3e-3 * h * np.sqrt(3600)
    # causal: the first frames alone give the same numbers
    part = imu_heading_steps(dn[:1000], imu[:1000], dt[:1000])[0]
    np.testing.assert_array_equal(part, steps[:1000])


# -- fit → replay against the simulator's truth, several seeds -------------------------

SEEDS = tuple(range(30, 35))
HELD_OUT = (*DRIVES, "figure8")
REPLAY_SEED = 5000


def _seed_rows(tmp: Path, seed: int) -> list[dict]:
    from sensorbench.characterize.pods.geometry_fit import fit_pods
    from sensorbench.characterize.pods.noise_fit import fit_noise
    from sensorbench.fusion.odometry_replay import replay_session
    from sensorbench.fusion.pod_drive import load_drive

    fitted = [simulate_two(tmp, n, 10 * seed + i) for i, n in enumerate(DRIVES)]
    geometry = fit_pods([load_drive(p) for p in fitted]).geometry()
    noise = fit_noise(fitted, geometry).noise
    small = dataclasses.replace(geometry, imu_rate_var=geometry.imu_rate_var / 9,
                                imu_bias_walk=(geometry.imu_bias_walk or 0.0) / 9)  # fmt: skip
    rows = []
    for i, name in enumerate(HELD_OUT):
        path = simulate_two(tmp, name, 10 * seed + i + REPLAY_SEED)
        for model, g in (("fitted", geometry), ("imu/9", small)):
            c = replay_session(path, g, noise, reference="truth").consistency
            for a in AXES:
                rows.append({"seed": seed, "drive": name, "model": model, "axis": a,
                             "n": c[a].n, "in2": c[a].coverage[1] * c[a].n,
                             "flagged": bool(c[a].overconfident)})  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def two_pod_rows(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("two_pods")
    return [r for s in SEEDS for r in _seed_rows(tmp, s)]


def _coverage(rows: list[dict], axis: str) -> float:
    sel = [r for r in rows if r["axis"] == axis and r["model"] == "fitted"]
    return 100.0 * sum(r["in2"] for r in sel) / sum(r["n"] for r in sel)


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("axis", [
    "x",
    "y",
    pytest.param("theta", marks=pytest.mark.xfail(strict=True, reason=(
        "measured 98.4 %, wide: forward and sideways 100 % (docs/PODS.md, Two pods + IMU: "
        "the bias walk fitted 0.6-2.8x the simulator's on five seeds)"))),
])  # fmt: skip
def test_truth_in_two_sigma_pooled_over_seeds(two_pod_rows, axis) -> None:
    """Per axis, truth inside the stated 2σ in 90–98 % of the samples pooled over seeds
    30–34 and the held-out drives (issue 35's band; a drive's error is mostly one
    calibration and bias draw per seed, so the seeds, not the samples, are the independent
    units and the band is the issue's, not a binomial one)."""
    got = _coverage(two_pod_rows, axis)
    assert 90.0 <= got <= 98.0, f"{axis}: {got:.1f} %"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_imu_noise_nine_times_too_small_is_flagged_more(two_pod_rows) -> None:
    """The check that can fail: the heading stated with the IMU's walks (the yaw's and the
    bias's) ÷ 9 is called overconfident on more replays than the fitted one (measured 16
    against 0 of 25)."""

    def flagged(model: str) -> int:
        return sum(r["flagged"] for r in two_pod_rows
                   if r["axis"] == "theta" and r["model"] == model)  # fmt: skip

    assert flagged("imu/9") > flagged("fitted")


def _gyro(rng: np.random.Generator, n: int, k: int, h: float, rate_sd: float, walk: float):
    """n draws of K steps' IMU yaw errors (rad): a bias walking ``walk`` (rad/s/√s) from
    2 mrad/s and white rate noise ``rate_sd`` (rad/s) per step of ``h`` s."""
    bias = 0.002 + np.cumsum(walk * np.sqrt(h) * rng.standard_normal((n, k)), axis=1)
    return (bias + rate_sd * rng.standard_normal((n, k))) * h


def test_the_stated_heading_variance_is_the_gyro_bias_errors_over_monte_carlo() -> None:
    """Rests of 1 s between 6 s and 30 s of motion: the heading's error (the bias walk
    since the rests that estimated it, integrated) against the stated growth summed
    (imu_bias_variance plus the yaw's own rate_var per second moving), per stretch end, over
    4000 draws; without the walk the 30 s stretch's end is stated 3.4× too narrow."""
    h, rate_sd, walk = 0.01, 0.003, 1e-4
    pattern = [(1.0, 0), (6.0, 1), (1.0, 0), (6.0, 1), (1.0, 0), (30.0, 1)]
    moving = np.concatenate([np.full(round(s / h), m, bool) for s, m in pattern])
    k = moving.size
    dn = np.where(moving[:, None], 1, 0) * np.ones((k, 2))
    dt = np.full(k, h)
    rest = imu_heading_steps(dn, np.zeros(k), dt)[1]
    rate_var = rate_sd**2 * h
    stated = np.cumsum(imu_bias_variance(rest, dt, rate_var, walk**2) + rate_var * h * ~rest)
    rng = np.random.default_rng(6)
    err = np.array([np.cumsum(imu_heading_steps(dn, g, dt)[0])
                    for g in _gyro(rng, 4000, k, h, rate_sd, walk)])  # fmt: skip
    ends = np.flatnonzero(np.diff(rest.astype(int)) == 1)  # the last moving step of each
    ends = np.append(ends, k - 1)
    sample = np.var(err[:, ends], axis=0)
    # a variance of 4000 normal draws: s.e. √(2/4000) = 2.2 %, 4.5 of them
    np.testing.assert_allclose(sample, stated[ends], rtol=0.1)
    walk_free = np.cumsum(imu_bias_variance(rest, dt, rate_var, 0.0) + rate_var * h * ~rest)
    assert stated[-1] > 3 * walk_free[-1]


def test_a_missing_imu_yaw_is_not_read_as_not_turning() -> None:
    """A yaw sample lost mid-turn: the two-pod heading's steps are nan there (the filters
    predict), not zero, and the replay's bridge keeps the rotation across the gap."""
    k, h, rate = 400, 0.01, 0.5
    t = np.arange(k + 1) * h
    yaw = np.angle(np.exp(1j * rate * t))  # wrapped, as recorded
    yaw[200:203] = np.nan
    steps = np.diff(yaw)
    steps = np.angle(np.exp(1j * steps))
    dn = np.ones((k, 2))
    heading, _ = imu_heading_steps(dn, steps, np.full(k, h))
    assert np.all(np.isnan(heading[199:203])) and np.all(np.isfinite(heading[:199]))
    bridged = bridged_yaw_steps(t, yaw, steps)
    np.testing.assert_allclose(np.sum(bridged), rate * t[-1], rtol=1e-12)
    np.testing.assert_array_equal(bridged[:199], steps[:199])
    yaw[:5] = np.nan  # before the first sample: unknown, not still
    assert np.all(np.isnan(bridged_yaw_steps(t, yaw, np.diff(yaw))[:5]))


def test_the_yaw_walk_at_rest_is_the_white_rate_noise() -> None:
    """imu_rest_rate_variance over 10 s of rests split by motion: the white rate noise's
    σ²·h (rad²/s) within its sampling error (97 windows of 0.1 s: 14 %, 4σ), with a lost
    sample every 0.5 s of rest too (78 windows)."""
    rng = np.random.default_rng(7)
    k, h, sd = 4000, 0.005, 0.003
    moving = (np.arange(k) // 500) % 2 == 1
    dn = np.where(moving[:, None], 1.0, 0.0) * np.ones((k, 2))
    imu = (0.002 + sd * rng.standard_normal(k)) * h
    rest = imu_heading_steps(dn, imu, np.full(k, h))[1]
    got = imu_rest_rate_variance(imu, np.full(k, h), rest)
    assert got is not None and abs(got / (sd**2 * h) - 1) < 4 * np.sqrt(2 / 97)
    imu[rest.nonzero()[0][::100]] = np.nan  # a lost sample splits its rest's windows
    again = imu_rest_rate_variance(imu, np.full(k, h), rest)
    assert again is not None and abs(again / (sd**2 * h) - 1) < 4 * np.sqrt(2 / 78)


def test_the_bias_walk_is_stored_and_read_back(tmp_path) -> None:
    g = dataclasses.replace(two_pods(2.5e-7), imu_bias_walk=1e-8)
    save_pod_model(tmp_path / "walk.toml", g, {"source": "test"})
    assert load_pod_model(tmp_path / "walk.toml").imu_bias_walk == 1e-8
    with pytest.raises(FusionError, match="bias walk goes with an IMU"):
        dataclasses.replace(two_pods(None), imu_bias_walk=1e-8)


def test_the_heading_variance_grows_the_stated_heading_chunk_by_chunk() -> None:
    """FrameChunk.heading_var adds to the heading's stated variance step by step, and the
    frames split in two chunks give the numbers of one."""
    from sensorbench.fusion.filter_noise import FilterNoise
    from sensorbench.fusion.split_filter import FrameChunk, SplitFilter

    g = two_pods(1e-7)
    rng = np.random.default_rng(8)
    k = 300
    t = np.arange(1, k + 1) * 0.01
    inc = np.column_stack([np.full(k, 0.003), np.zeros(k), rng.normal(0.0, 1e-3, k)])
    extra = np.full(k, 1e-6)
    filt = SplitFilter(FilterNoise.default())
    start = filt.start(0.0, pods=g)
    base = filt.step(start, FrameChunk(t, inc))[1].var[-1, 2]
    whole = filt.step(start, FrameChunk(t, inc, heading_var=extra))[1]
    assert whole.var[-1, 2] == pytest.approx(base + extra.sum(), rel=1e-6)
    mid = filt.step(start, FrameChunk(t[:100], inc[:100], heading_var=extra[:100]))[0]
    second = filt.step(mid, FrameChunk(t[100:], inc[100:], heading_var=extra[100:]))[1]
    np.testing.assert_array_equal(second.var[1:], whole.var[101:])


def test_a_late_reference_keeps_the_gyro_bias_the_rests_before_it_gave(tmp_path) -> None:
    # mocap invalid until 1 s into the motion: the replay starts there (no start pose
    # before), but the IMU heading's bias is live's, from the rest before it. The
    # increments were recomputed on the trimmed stream, which has no rest before its
    # motion, so the bias was taken as 0 and stated as known: the heading ran 12 mrad
    # off at 5.6 stated σ (seed 3). With the whole stream's increments, 1.0σ.
    import shutil

    import h5py

    from sensorbench.fusion.filter_noise import load_noise_model
    from sensorbench.fusion.odometry_replay import replay_session
    from sensorbench.logs import Session

    late = tmp_path / "late.h5"
    shutil.copy(simulate_two(tmp_path, "forward", 3), late)
    with h5py.File(late, "r+") as f:
        moved = np.any(np.diff(f["encoders/pods/counts"][...], axis=0) != 0, axis=1)
        start_ns = f["encoders/pods/host_ns"][int(np.argmax(moved))] + 1_000_000_000
        g = f["pose/mocap"]
        g["valid"][...] = np.where(g["t_ns"][...] < start_ns, 0, g["valid"][...])
    noise = load_noise_model(Path(__file__).parents[1] / "examples/models/noise-emulated.toml")
    rp = replay_session(late, two_pods(), noise, reference="mocap")
    assert rp.info["skipped_before_reference_s"] > 1.0
    with Session(late) as s:
        truth = s.truth_rows("pose", "t_ns", "x_y_yaw")
    t = (truth["t_ns"] - rp.t0_ns) * 1e-9
    err = np.unwrap(rp.result.pose[:, 2]) - np.interp(rp.result.t_s, t,
                                                      np.unwrap(truth["x_y_yaw"][:, 2]))
    # a few effective samples per replay (docs/PODS.md): beyond 3σ at ~1 % a sample
    assert np.max(np.abs(err) / np.sqrt(rp.result.var[:, 2])) < 3.0


def test_a_drive_moving_before_any_rest_is_warned(tmp_path) -> None:
    # Before its first rest the IMU heading's gyro bias is unmeasured, taken as 0 and
    # stated as known (imu_bias_variance): the replay now says how long, and the CLI
    # page warns. The simulated forward drive stands still for its first second.
    import h5py

    from sensorbench.characterize.pods.display import replay_text
    from sensorbench.fusion.filter_noise import load_noise_model
    from sensorbench.fusion.odometry_replay import replay_session

    noise = load_noise_model(Path(__file__).parents[1] / "examples/models/noise-emulated.toml")
    path = simulate_two(tmp_path, "forward", 3)
    assert replay_session(path, two_pods(), noise).info["moving_before_first_rest_s"] == 0.0
    with h5py.File(path, "r+") as f:  # the frames from 0.5 s into the motion on
        g = f["encoders/pods"]
        moved = np.any(np.diff(g["counts"][...], axis=0) != 0, axis=1)
        first = int(np.argmax(moved)) + int(0.5 / np.median(np.diff(g["host_ns"][:50]) * 1e-9))
        for name in list(g):
            rows = g[name][first:]
            g[name].resize(rows.shape[0], axis=0)
            g[name][...] = rows
    rp = replay_session(path, two_pods(), noise)
    with h5py.File(path) as f:
        t = f["encoders/pods/host_ns"][...] * 1e-9
        moved = np.any(np.diff(f["encoders/pods/counts"][...], axis=0) != 0, axis=1)
    # the motion's length less the rest test's window, at least (it ends standing still)
    still = np.flatnonzero(~moved)
    assert rp.info["moving_before_first_rest_s"] > t[still[0]] - t[0] - 0.01
    assert "the IMU's gyro bias is not measured there" in replay_text(rp.summary(), "s", None)
