"""The streamed NIS monitor flags the frames the whole-series monitor flags, in any chunks."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sensorbench.fusion.consistency import nis_monitor
from sensorbench.fusion.monitor_stream import NisMonitorStream

GATE = 6.63


def _series(seed: int, n: int = 900) -> np.ndarray:
    """χ²₁ NIS with a stretch 4× too large, frames without an update, a long rest."""
    rng = np.random.default_rng(seed)
    x = rng.chisquare(1, n)
    x[300:380] *= 4.0
    x[rng.random(n) < 0.2] = np.nan
    x[600:700] = np.nan  # at rest: no update for longer than a window
    return x


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 1000),
    window=st.sampled_from([2, 5, 50]),
    cuts=st.lists(st.integers(0, 900), max_size=15),
)
def test_streamed_flags_equal_the_whole_series_monitor(seed, window, cuts) -> None:
    x = _series(seed)
    whole = nis_monitor(x, GATE, window, 0.999)
    mon = NisMonitorStream(GATE, window, 0.999)
    parts, onsets, clears = [], [], []
    bounds = [0, *sorted(cuts), x.size]
    for a, b in itertools.pairwise(bounds):
        d, on, off = mon.push(x[a:b])
        parts.append(d)
        onsets += on
        clears += off
    np.testing.assert_array_equal(np.concatenate(parts), whole.degraded)
    assert onsets == whole.onsets.tolist() and clears == whole.clears.tolist()
    assert mon.threshold == whole.threshold


def test_frame_by_frame_equals_the_whole_series_monitor() -> None:
    """Live pushes one frame at a time, or a few (the scalar path): the same flags and sums."""
    x = _series(7)
    whole = nis_monitor(x, GATE, 50, 0.999)
    mon, chunked = NisMonitorStream(GATE, 50, 0.999), NisMonitorStream(GATE, 50, 0.999)
    out = [mon.push(x[i : i + 1]) for i in range(x.size)]
    few = NisMonitorStream(GATE, 50, 0.999)  # live steps of a few frames: scalar too
    cuts = np.cumsum(np.resize([1, 3, 2, 8, 5], x.size))
    part = [few.push(x[a:b]) for a, b in itertools.pairwise([0, *cuts[cuts < x.size], x.size])]
    for got in (out, part):
        np.testing.assert_array_equal(np.concatenate([d for d, _, _ in got]), whole.degraded)
        assert [i for _, on, _ in got for i in on] == whole.onsets.tolist()
        assert [i for _, _, off in got for i in off] == whole.clears.tolist()
    chunked.push(x[:450])
    chunked.push(x[450:])
    np.testing.assert_array_equal(mon._sums, chunked._sums)  # bit for bit
    np.testing.assert_array_equal(few._sums, chunked._sums)
    assert whole.onsets.size > 0 and whole.clears.size > 0


def test_a_too_large_stretch_raises_the_flag_and_rest_drops_it() -> None:
    x = _series(1)
    mon = NisMonitorStream(GATE, 50, 0.999)
    d, onsets, clears = mon.push(x)
    assert d[340:380].any() and not d[:250].any()
    assert onsets and clears and clears[-1] > onsets[0]
