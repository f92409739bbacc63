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


def test_a_too_large_stretch_raises_the_flag_and_rest_drops_it() -> None:
    x = _series(1)
    mon = NisMonitorStream(GATE, 50, 0.999)
    d, onsets, clears = mon.push(x)
    assert any(d[340:380]) and not any(d[:250])
    assert onsets and clears and clears[-1] > onsets[0]
