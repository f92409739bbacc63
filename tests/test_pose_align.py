"""Time/frame alignment, per-axis error and relocalization segmentation against known truth."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pose_util
import pytest
from scipy.spatial.transform import Rotation

from sensorbench.characterize.pose.align import (
    Alignment,
    PoseTrack,
    align_sessions,
    estimate_time_offset,
    pose_errors,
    umeyama,
)
from sensorbench.characterize.pose.reloc_segments import detect_jumps, segment
from sensorbench.errors import FitError

OFFSET = 0.037  # s: reference time = sensor time + OFFSET
R_WORLD = Rotation.from_euler("xyz", [4.0, -3.0, 30.0], degrees=True)
T_WORLD = np.array([0.5, -1.2, 0.3])
BODY = Rotation.from_euler("xyz", [2.0, 1.0, -5.0], degrees=True)


def align(
    sensor: PoseTrack, ref: PoseTrack, mode: str = "se3", offset_s: float | None = None
) -> Alignment:
    """One session aligned on its own at ``offset_s``, else at the offset its angular rates
    give (:func:`estimate_time_offset`, its peak correlation kept)."""
    corr = float("nan")
    if offset_s is None:
        offset_s, corr = estimate_time_offset(sensor, ref)
    return replace(align_sessions([(sensor, ref)], mode, offset_s)[0], rate_correlation=corr)


def _tracks(rng, err: np.ndarray | None = None, planar: bool = False):
    t_ref = np.arange(0.0, 20.0, 0.01)
    p, q = pose_util.reference_motion(t_ref)
    ref = PoseTrack(t_ref, p, q, name="mocap")
    true_t = np.sort(rng.uniform(0.5, 19.5, 560))
    pt, qt = pose_util.reference_motion(true_t)
    n = true_t.size
    e = np.zeros((n, 6)) if err is None else err
    rw = Rotation.from_euler("z", 30.0, degrees=True) if planar else R_WORLD
    body = Rotation.from_euler("z", -5.0, degrees=True) if planar else BODY
    # sensor in its own frame: R_w p_s + t_w = p_ref + e_p ; R_w R_s B = R_ref exp(e_r)
    p_s = (pt + e[:, :3] - T_WORLD) @ rw.as_matrix()
    r_s = rw.inv() * Rotation.from_quat(qt) * Rotation.from_rotvec(e[:, 3:]) * body.inv()
    sensor = PoseTrack(true_t - OFFSET, p_s, r_s.as_quat(), name="cam")
    return sensor, ref, rw, body


def test_alignment_recovers_time_offset_frame_and_body_rotation():
    sensor, ref, rw, body = _tracks(np.random.default_rng(0))
    al = align(sensor, ref, "se3")
    assert al.offset_s == pytest.approx(OFFSET, abs=5e-4)
    ang = (Rotation.from_matrix(al.rotation) * rw.inv()).magnitude()
    assert np.degrees(ang) < 0.01
    np.testing.assert_allclose(al.translation, T_WORLD, atol=1e-4)
    assert np.degrees((Rotation.from_matrix(al.body_rotation) * body.inv()).magnitude()) < 0.01
    _, e, _ = pose_errors(sensor, ref, al)
    assert np.all(np.abs(e[:, :3]) < 2e-4)  # interpolation error of 100 Hz mocap
    assert np.all(np.abs(e[:, 3:]) < 2e-4)


def test_known_error_is_recovered_per_axis():
    """A known error (minus its mean, which the alignment absorbs) comes back per axis."""
    rng = np.random.default_rng(1)
    n = 560
    err = np.zeros((n, 6))
    err[:, 0] = 0.01 * np.sin(np.linspace(0, 20, n))
    err[:, 4] = 0.005 * np.cos(np.linspace(0, 13, n))
    err[:, 5] = 0.004 * rng.standard_normal(n)
    sensor, ref, _, _ = _tracks(rng, err)
    al = align(sensor, ref, "se3", offset_s=OFFSET)
    _, e, idx = pose_errors(sensor, ref, al)
    want = err[idx] - err[idx].mean(axis=0)
    np.testing.assert_allclose(e, want, atol=1.5e-3)
    # the error is mostly where it was put: correlation > 0.95 on the excited axes
    for a in (0, 4, 5):
        assert np.corrcoef(e[:, a], want[:, a])[0, 1] > 0.95


def test_planar_alignment_is_yaw_only():
    sensor, ref, _, _ = _tracks(np.random.default_rng(2), planar=True)
    al = align(sensor, ref, "planar")
    assert al.offset_s == pytest.approx(OFFSET, abs=5e-4)
    rpy = Rotation.from_matrix(al.rotation).as_euler("xyz", degrees=True)
    assert rpy[0] == 0.0 and rpy[1] == 0.0
    assert rpy[2] == pytest.approx(30.0, abs=0.01)


def test_interpolation_slerps_rotation_and_marks_gaps():
    t = np.array([0.0, 1.0, 2.0, 10.0])
    p = np.arange(12.0).reshape(4, 3)
    q = Rotation.from_euler("z", [[0.0], [90.0], [90.0], [0.0]], degrees=True).as_quat()
    ref = PoseTrack(t, p, q)
    pos, quat, inside = ref.interpolator()(np.array([0.5, 1.5, 5.0, 11.0]), max_gap_s=1.5)
    np.testing.assert_allclose(pos[0], [1.5, 2.5, 3.5])
    assert Rotation.from_quat(quat[0]).as_euler("xyz", degrees=True)[2] == pytest.approx(45.0)
    assert inside.tolist() == [True, True, False, False]


def test_umeyama_exact_on_noise_free_points():
    rng = np.random.default_rng(3)
    src = rng.standard_normal((50, 3))
    dst = src @ R_WORLD.as_matrix().T + T_WORLD
    rot, t = umeyama(src, dst)
    np.testing.assert_allclose(rot, R_WORLD.as_matrix(), atol=1e-12)
    np.testing.assert_allclose(t, T_WORLD, atol=1e-12)


def test_no_overlap_is_refused():
    sensor, ref, _, _ = _tracks(np.random.default_rng(4))
    sensor.t_s = sensor.t_s + 1000.0
    with pytest.raises(FitError, match="overlap"):
        align(sensor, ref)


# ------------------------------------------------------------------ segmentation


def _jumpy(rng, jumps=(150, 400, 720)):
    t = np.cumsum(rng.uniform(0.08, 0.12, 1000))
    reloc = np.zeros(t.size, bool)
    e = pose_util.simulate_errors(pose_util.TRUTH * [0, 1, 1, 1], t, reloc, 1, rng)[0]
    for j in jumps:
        e[j:] += rng.normal(0, 1, 6) * pose_util.TRUTH[:, 1] * 4 + np.sign(rng.normal(size=6)) * (
            pose_util.TRUTH[:, 1] * 3
        )
    return t, e


def test_detected_jumps_at_known_places_and_spikes_ignored():
    rng = np.random.default_rng(5)
    t, e = _jumpy(rng)
    e[600] += 10 * pose_util.TRUTH[:, 1]  # a one-sample spike, not a relocalization
    found = np.flatnonzero(detect_jumps(t, e))
    assert found.tolist() == [150, 400, 720]


def test_flags_take_precedence_and_both_are_reported():
    rng = np.random.default_rng(6)
    t, e = _jumpy(rng)
    flags = np.zeros(t.size, np.uint8)
    flags[[150, 400, 720]] = 1
    s = segment(t, e, flags)
    assert s.method == "flags"
    assert np.flatnonzero(s.reloc).tolist() == [0, 150, 400, 720]
    assert s.detected_times_s.size == 3
    s2 = segment(t, e, None)
    assert s2.method == "detected"
    assert np.flatnonzero(s2.reloc).tolist() == [0, 150, 400, 720]
    quiet = pose_util.simulate_errors(pose_util.TRUTH, t, np.zeros(t.size, bool), 1, rng)[0]
    assert segment(t, quiet, np.zeros(t.size, np.uint8)).method == "none"


@pytest.mark.parametrize("seed", [1, 3])
def test_time_offset_on_the_simulated_campaign(seed: int) -> None:
    """The simulator's pose sensor lags the truth by its latency, mocap by its own:
    reference time = sensor time + (mocap latency - sensor latency).

    Tolerance 15 ms: the search resolution is 1 ms; what remains comes from the
    sensor's yaw Gauss-Markov noise (σ 5 mrad, τ 0.8 s) leaking into the 0.2 s
    windowed rates, which moved the estimate by at most 9 ms over seeds 0-4.
    (Differencing raw 240 Hz mocap orientations instead put it 50-370 ms off.)
    """
    from sensorbench.sim.scenario import load_scenario
    from sensorbench.sim.simulation import Simulation

    sim = Simulation(load_scenario("reloc_campaign"), seed=seed)
    mo, ps = sim.mocap(), sim.pose_sensor()
    truth = mo.params["latency_s"] - ps.params["latency_s"]
    ref = PoseTrack(mo.t_s, mo.position, mo.quat_xyzw, mo.valid)
    sensor = PoseTrack(ps.t_s, ps.position, ps.quat_xyzw, ps.valid, ps.flags)
    al = align(sensor, ref, "planar")
    assert al.rate_correlation > 0.9
    assert al.offset_s == pytest.approx(truth, abs=0.015)


def test_one_transform_for_a_campaign_keeps_each_sessions_offset() -> None:
    """Two sessions whose errors are constant offsets +d and -d (one relocalization
    each): aligned one by one, each offset is absorbed into its own translation and
    the error vanishes; aligned together, the errors come back as +d and -d."""
    d = np.array([0.05, -0.03, 0.0, 0.0, 0.0, 0.0])
    rng = np.random.default_rng(7)
    pairs = []
    for sign in (1.0, -1.0):
        sensor, ref, _, _ = _tracks(rng, np.tile(sign * d, (560, 1)))
        pairs.append((sensor, ref))
    joint = align_sessions(pairs, "se3", offset_s=OFFSET)
    alone = [align_sessions([p], "se3", offset_s=OFFSET)[0] for p in pairs]
    for (sensor, ref), al_joint, al_alone, sign in zip(pairs, joint, alone, (1, -1), strict=True):
        _, e_joint, _ = pose_errors(sensor, ref, al_joint)
        _, e_alone, _ = pose_errors(sensor, ref, al_alone)
        np.testing.assert_allclose(e_joint[:, :3].mean(axis=0), sign * d[:3], atol=1e-3)
        assert np.abs(e_alone[:, :3].mean(axis=0)).max() < 1e-3


@pytest.mark.parametrize("dropped_as", ["invalid", "duplicate"])
def test_a_flag_on_a_dropped_sample_moves_to_the_next_kept_one(dropped_as: str) -> None:
    """Each RELOCALIZED flag sits on a sample the fit drops: an invalid pose 1 ms before
    the relocalized one, or a second copy of the pose before it at the same stamp. The
    flag was lost with its sample (segments merged, relocalizations 0); every one
    now starts its segment at the relocalized pose, as the simulation placed it."""
    from sensorbench.characterize.pose.sessions import prepare_campaign

    tracks, names = pose_util.track_campaign(11, n_sessions=2, duration_s=60.0, rate_hz=10.0,
                                             reloc_mean_s=10.0)
    moved, truth = [], []
    for sensor, ref in tracks:
        at = np.flatnonzero(sensor.flags)
        truth.append(sensor.t_s[np.r_[0, at]])
        src = at - 1  # the copy: the pose before the relocalized one
        t_new = sensor.t_s[src] if dropped_as == "duplicate" else sensor.t_s[at] - 1e-3
        i = np.argsort(np.r_[2 * np.arange(sensor.t_s.size), 2 * src + 1], kind="stable")
        valid = np.r_[np.ones(sensor.t_s.size, bool), np.full(at.size, dropped_as != "invalid")]
        flags = np.r_[np.zeros_like(sensor.flags), np.ones(at.size, np.uint8)]
        moved.append((PoseTrack(
            np.r_[sensor.t_s, t_new][i], np.r_[sensor.position, sensor.position[src]][i],
            np.r_[sensor.quat_xyzw, sensor.quat_xyzw[src]][i], valid[i], flags[i], "cam"), ref))
    prepared = prepare_campaign(moved, names, align="none", offset_s=0.0).prepared
    for p, t_true in zip(prepared, truth, strict=True):
        assert p.segmentation.method == "flags"
        np.testing.assert_array_equal(p.series.t_s[p.series.reloc], t_true)
