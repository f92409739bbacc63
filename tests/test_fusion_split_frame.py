"""The live per-frame stepper (:class:`FrameStepper`) gives SplitFilter's numbers to the
last bit, in any chunks, and its state is the one SplitFilter.step would hold.

The drive is :func:`split_drive_util.hard_drive` without its aiding (the stepper takes
none): rejections and forced resets, nan frames, a coasting gap, slip law, calibration
error, rounding profile and correlation, acceleration fed forward.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from split_drive_util import GATE, POSE0, VAR0, HardDrive, hard_drive

from sensorbench.errors import FusionError
from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.odometry_drift import OdometryDrift
from sensorbench.fusion.split_filter import FrameChunk, SplitFilter, SplitResult
from sensorbench.fusion.split_frame import OUT, FrameStepper
from sensorbench.logs.model_keys import AXES


@functools.cache
def drive() -> HardDrive:
    return hard_drive()


@functools.cache
def whole() -> SplitResult:
    d = drive()
    filt = SplitFilter(d.noise, gate=GATE)
    return filt.step(filt.start(d.t_s[0], POSE0, VAR0, d.pods),
                     FrameChunk(d.t_s[1:], d.inc, imu_dtheta=d.imu))[1]  # fmt: skip


def outputs(res: SplitResult) -> np.ndarray:
    """A result's frames (index 0, the start, left out) as the stepper's rows."""
    tracks = [res.tracks[a] for a in AXES]
    return np.column_stack(
        [res.pose[1:], res.velocity[1:], res.var[1:], *(t.var_v[1:] for t in tracks),
         *(t.nis_chi2 for t in tracks), np.diff(res.t_s), res.imu_check]
    )  # fmt: skip


def stepped(bounds: list[int]) -> tuple[np.ndarray, FrameStepper]:
    """The drive through the stepper in chunks of frames ``bounds[i] + 1 .. bounds[i + 1]``."""
    d = drive()
    filt = SplitFilter(d.noise, gate=GATE)
    stepper = FrameStepper(filt, filt.start(d.t_s[0], POSE0, VAR0, d.pods))
    rows = [stepper.step(d.t_s[lo + 1 : hi + 1], d.inc[lo:hi], d.imu[lo:hi])
            for lo, hi in itertools.pairwise(bounds)]  # fmt: skip
    return np.concatenate(rows), stepper


def test_the_drive_takes_the_paths_the_stepper_must_follow() -> None:
    res = whole()
    assert all(t.rejected > 10 and t.resets > 0 for t in res.tracks.values())
    assert res.coasting.sum() == 1 and np.isnan(res.tracks["x"].nis).sum() == 3
    d = drive()
    state = SplitFilter(d.noise, gate=GATE).start(d.t_s[0], POSE0, VAR0, d.pods)
    assert state.model.calibration is not None and state.model.rounding is not None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 590), max_size=60))
def test_any_chunks_give_the_numbers_of_one_run(cuts: list[int]) -> None:
    k_n = drive().inc.shape[0]
    rows, _ = stepped([0, *sorted(c for c in cuts if c < k_n), k_n])
    assert rows.shape == (k_n, OUT)
    np.testing.assert_array_equal(rows, outputs(whole()))


def test_its_state_is_the_one_split_filter_step_holds() -> None:
    d = drive()
    k_n = d.inc.shape[0]
    half = k_n // 2
    filt = SplitFilter(d.noise, gate=GATE)
    want = filt.start(d.t_s[0], POSE0, VAR0, d.pods)
    want, _ = filt.step(want, FrameChunk(d.t_s[1 : half + 1], d.inc[:half], None, d.imu[:half]))
    _, stepper = stepped([0, 7, half])
    got = stepper.state()
    assert (got.t_s, got.frames) == (want.t_s, want.frames)
    for a in AXES:
        np.testing.assert_array_equal(got.axis(a).carry, want.axis(a).carry)
        np.testing.assert_array_equal(got.axis(a).history, want.axis(a).history)
    for name in ("pose_error", "calibration_var"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    assert got.calibration is not None and want.calibration is not None
    for g, w in zip(got.calibration, want.calibration, strict=True):
        np.testing.assert_array_equal(g, w)
    # SplitFilter.step goes on from the stepper's state as from its own
    _, a = filt.step(got, FrameChunk(d.t_s[half + 1 :], d.inc[half:], None, d.imu[half:]))
    _, b = filt.step(want, FrameChunk(d.t_s[half + 1 :], d.inc[half:], None, d.imu[half:]))
    np.testing.assert_array_equal(outputs(a), outputs(b))


def test_without_pods_or_slip_law_the_same_numbers() -> None:
    d = drive()
    filt = SplitFilter(FilterNoise.default(), gate=GATE)
    want = filt.run(d.t_s, d.inc, POSE0, VAR0)
    stepper = FrameStepper(filt, filt.start(d.t_s[0], POSE0, VAR0))
    np.testing.assert_array_equal(stepper.step(d.t_s[1:], d.inc), outputs(want))


def test_aiding_and_given_step_covariances_are_refused_and_bad_frames_named() -> None:
    d = drive()
    aided = SplitFilter(d.noise, gate=GATE, aid_model=d.aid_model)
    state = aided.start(d.t_s[0], POSE0, VAR0, d.pods, 0.05)
    assert not FrameStepper.takes(aided, state)
    with pytest.raises(FusionError, match="no pose aiding"):
        FrameStepper(aided, state)
    n = FilterNoise.default()
    drift = OdometryDrift(np.diag([4e-5, 2e-5, 1e-4]))
    given_cov = SplitFilter(FilterNoise(n.x, n.y, n.theta, drift))
    state = given_cov.start(0.0)
    assert isinstance(state.model.drift, OdometryDrift)
    with pytest.raises(FusionError, match="no OdometryDrift"):
        FrameStepper(given_cov, state)
    filt = SplitFilter(d.noise, gate=GATE)
    stepper = FrameStepper(filt, filt.start(d.t_s[0], POSE0, VAR0, d.pods))
    with pytest.raises(FusionError, match="strictly increasing"):
        stepper.step(np.array([d.t_s[0]]), d.inc[:1])
    with pytest.raises(FusionError, match="K times"):
        stepper.step(d.t_s[1:3], d.inc[:1])
