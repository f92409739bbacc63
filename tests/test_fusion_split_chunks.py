"""The split filters run chunk by chunk give the numbers of one run over the whole drive.

:meth:`SplitFilter.step` carries everything a frame depends on from the ones before
(axis states, motion and tick histories, the odometry pose error, the calibration's
sensitivities, the dead-reckoned pose, pose samples waiting for their frame), so any split
of a session into chunks (empty ones too), with each pose sample handed over in any chunk
up to the one holding its frame, must reproduce :meth:`SplitFilter.run` to the last bit:
estimate, variances, NIS, innovations, every flag and count. The drive
(:func:`split_drive_util.hard_drive`) takes every path of the replay: rejections and
forced resets, nan frames, a coasting gap, slip law and calibration error, rounding
profile and correlation, acceleration fed forward, q grown with the jerk, aiding with
relocalizations, an invalid sample, a rejected fix and samples past the last frame.
"""

from __future__ import annotations

import copy
import functools
import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from split_drive_util import GATE, POSE0, VAR0, HardDrive, hard_drive

from sensorbench.errors import FusionError
from sensorbench.fusion.aid_queue import Aiding, aid_interval
from sensorbench.fusion.pod_kinematics import body_increments
from sensorbench.fusion.split_filter import FrameChunk, SplitFilter, SplitResult
from sensorbench.logs.model_keys import AXES

TRACK_FIELDS = (
    "p",
    "v",
    "var_p",
    "var_v",
    "nis",
    "nis_chi2",
    "accepted",
    "aid_nis",
    "aid_accepted",
    "innovation",
    "s",
)


@functools.cache
def drive() -> HardDrive:
    return hard_drive()


def _filter(d: HardDrive) -> SplitFilter:
    return SplitFilter(d.noise, gate=GATE, aid_model=d.aid_model)


@functools.cache
def whole() -> SplitResult:
    d = drive()
    filt, t = _filter(d), d.t_s
    state = filt.start(t[0], POSE0, VAR0, d.pods, aid_interval(d.aiding, t[0], t[-1]))
    return filt.step(state, FrameChunk(t[1:], d.inc, d.aiding, d.imu))[1]


def _subset(a: Aiding, sel: np.ndarray) -> Aiding:
    return Aiding(a.t_s[sel], a.pose[sel], a.valid[sel], a.relocalized[sel])


def chunked(bounds: list[int], lags: list[int]) -> SplitResult:
    """The drive in chunks of frames ``bounds[i] + 1 .. bounds[i + 1]``; pose sample j is
    handed over up to ``lags[j]`` chunks before the chunk holding its frame (at the latest
    in the last chunk, at the earliest in the first, and the samples in time order)."""
    d = drive()
    filt = _filter(d)
    t = d.t_s
    state = filt.start(t[0], POSE0, VAR0, d.pods, aid_interval(d.aiding, t[0], t[-1]))
    frame_of = np.searchsorted(t, d.aiding.t_s, side="left")  # the frame a sample is due at
    chunk_of = np.searchsorted(bounds[1:], np.maximum(frame_of, 1), side="left")
    # in time order: never after its own chunk, never before an earlier sample
    given_in = np.maximum.accumulate(np.clip(chunk_of - np.asarray(lags), 0, len(bounds) - 2))
    parts = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        aid = _subset(d.aiding, given_in == i)
        chunk = FrameChunk(t[lo + 1 : hi + 1], d.inc[lo:hi], aid, d.imu[lo:hi])
        state, res = filt.step(state, chunk)
        parts.append(res)
    assert state.frames == d.inc.shape[0] and state.t_s == t[-1]
    np.testing.assert_array_equal(state.pose, whole().pose[-1])
    return joined(parts)


def joined(parts: list[SplitResult]) -> SplitResult:
    """Consecutive steps' results as one (each part's index 0 is the previous part's last
    frame, kept once)."""

    def frames(get) -> np.ndarray:  # per frame, index 0 the state the part started from
        return np.concatenate([get(parts[0]), *(get(r)[1:] for r in parts[1:])])

    def steps(get) -> np.ndarray:  # per step or per fix
        return np.concatenate([get(r) for r in parts])

    def track(a: str) -> Any:  # the fields an AxisTrack reads out, joined
        per_frame = ("p", "v", "var_p", "var_v")
        return SimpleNamespace(
            **{n: (frames if n in per_frame else steps)(lambda r, n=n: getattr(r.tracks[a], n))
               for n in TRACK_FIELDS},
            resets=sum(r.tracks[a].resets for r in parts),
        )  # fmt: skip

    return SplitResult(
        **{n: frames(lambda r, n=n: getattr(r, n)) for n in ("t_s", "pose", "velocity", "var")},
        tracks={a: track(a) for a in AXES},
        coasting=steps(lambda r: r.coasting),
        gate=parts[0].gate,
        imu_check=steps(lambda r: r.imu_check),
    )


def assert_same(got: SplitResult, want: SplitResult) -> None:
    for name in ("t_s", "pose", "velocity", "var", "coasting", "imu_check"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    for a in AXES:
        for name in TRACK_FIELDS:
            np.testing.assert_array_equal(
                getattr(got.tracks[a], name), getattr(want.tracks[a], name), err_msg=a + name
            )
        assert got.tracks[a].resets == want.tracks[a].resets


@st.composite
def splits(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    k_n = drive().inc.shape[0]
    cuts = draw(st.lists(st.integers(0, k_n), max_size=60))  # repeats: empty chunks
    m = drive().aiding.t_s.size
    lags = draw(st.lists(st.integers(0, 3), min_size=m, max_size=m))
    return [0, *sorted(cuts), k_n], lags


def test_the_drive_takes_every_path() -> None:
    res = whole()
    assert all(t.rejected > 10 and t.resets > 0 for t in res.tracks.values())
    # widened where pod 0 stops by what the heading took: θ refuses none of its fixes
    # (bounces summed as independent errors, it refused 37)
    assert all(t.aid_nis.size > 40 for t in res.tracks.values())
    rejected = {a: t.aid_rejected for a, t in res.tracks.items()}
    assert rejected["x"] <= 1 and rejected["y"] <= 1 and rejected["theta"] <= 5, rejected
    assert res.tracks["x"].aid_rejected == 1 and res.coasting.sum() == 1
    assert np.isnan(res.tracks["x"].nis).sum() == 3
    # the stopped pod and the bounces disagree with the IMU: the pose is widened
    assert np.count_nonzero(res.imu_check > 16) > 5 and np.isnan(res.imu_check[100:103]).all()
    assert drive().aiding.t_s[-1] > res.t_s[-1]  # samples left waiting at the end


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(splits())
def test_any_chunks_give_the_numbers_of_one_run(split: tuple[list[int], list[int]]) -> None:
    bounds, lags = split
    assert_same(chunked(bounds, lags), whole())


def test_one_frame_at_a_time_gives_the_numbers_of_one_run() -> None:
    k_n = drive().inc.shape[0]
    assert_same(chunked(list(range(k_n + 1)), [0] * drive().aiding.t_s.size), whole())


@settings(max_examples=25, deadline=None)
@given(st.sets(st.integers(1, 499), max_size=40))
def test_counts_turn_into_the_same_increments_frame_by_frame_or_all_at_once(cuts) -> None:
    d = drive()
    dn = np.random.default_rng(0).integers(-300, 300, (500, 3)).astype(float)
    all_at_once = body_increments(d.pods.W, dn)
    bounds = [0, *sorted(cuts), 500]
    parts = [body_increments(d.pods.W, dn[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    np.testing.assert_array_equal(np.vstack(parts), all_at_once)


def test_a_step_leaves_its_state_as_it_was() -> None:
    d = drive()
    filt = _filter(d)
    state = filt.start(d.t_s[0], POSE0, VAR0, d.pods, 0.1)
    state, _ = filt.step(state, FrameChunk(d.t_s[1:200], d.inc[:199], d.aiding))
    before = copy.deepcopy(state)
    again = [filt.step(state, FrameChunk(d.t_s[200:300], d.inc[199:299]))[1] for _ in range(2)]
    assert_same(again[0], again[1])
    assert state.frames == before.frames == 199
    np.testing.assert_array_equal(state.theta.carry, before.theta.carry)
    np.testing.assert_array_equal(state.theta.history, before.theta.history)
    assert state.aid is not None and before.aid is not None and state.aid.t_s.size > 0
    np.testing.assert_array_equal(state.aid.t_s, before.aid.t_s)


def test_a_late_pose_sample_is_dropped_and_counted_and_disorder_is_refused() -> None:
    d = drive()
    filt = _filter(d)
    state = filt.start(d.t_s[0], POSE0, VAR0, d.pods, 0.1)
    state, _ = filt.step(state, FrameChunk(d.t_s[1:300], d.inc[:299]))
    late = _subset(d.aiding, np.arange(d.aiding.t_s.size) < 10)  # all before t_s[299]
    state, res = filt.step(state, FrameChunk(d.t_s[300:310], d.inc[299:309], late))
    assert state.aid is not None and state.aid.late == np.count_nonzero(late.valid)
    assert res.tracks["x"].aid_nis.size == 0
    backwards = _subset(d.aiding, np.array([40, 39]))
    with pytest.raises(FusionError, match="time order"):
        filt.step(state, FrameChunk(d.t_s[310:320], d.inc[309:319], backwards))


def test_bad_chunks_are_refused_with_a_reason() -> None:
    d = drive()
    filt = _filter(d)
    state = filt.start(d.t_s[0], POSE0, VAR0, d.pods)
    with pytest.raises(FusionError, match="strictly increasing"):
        filt.step(state, FrameChunk(d.t_s[:5], d.inc[:5]))  # the first is the state's time
    with pytest.raises(FusionError, match=r"\(K, 3\)"):
        filt.step(state, FrameChunk(d.t_s[1:5], d.inc[:5]))
    with pytest.raises(FusionError, match="period"):
        filt.step(state, FrameChunk(d.t_s[1:5], d.inc[:4], d.aiding))
    with pytest.raises(FusionError, match="pose-error model"):
        SplitFilter(d.noise).step(state, FrameChunk(d.t_s[1:5], d.inc[:4], d.aiding))
