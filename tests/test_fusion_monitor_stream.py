"""The NIS monitor flags, in any chunks and whole, the frames its definition flags."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sensorbench.fusion.consistency import window_threshold
from sensorbench.fusion.monitor_stream import NisMonitorStream, nis_monitor

GATE = 6.63


def _series(seed: int, n: int = 900) -> np.ndarray:
    """χ²₁ NIS with a stretch 4× too large, frames without an update, a long rest."""
    rng = np.random.default_rng(seed)
    x = rng.chisquare(1, n)
    x[300:380] *= 4.0
    x[rng.random(n) < 0.2] = np.nan
    x[600:700] = np.nan  # at rest: no update for longer than a window
    return x


def _by_definition(x: np.ndarray, window: int, threshold: float) -> np.ndarray:
    """Each frame's flag from the definition, frame by frame: the mean clipped NIS of the
    ``window`` updates ending at the latest update at or before the frame is above
    ``threshold``, and that update is fewer than ``window`` frames back."""
    upd = np.flatnonzero(np.isfinite(x))
    vals = np.minimum(x[upd], GATE)
    out = np.zeros(x.size, dtype=bool)
    for k in range(x.size):
        j = int(np.searchsorted(upd, k, side="right")) - 1
        if j >= window - 1 and k - upd[j] < window:
            out[k] = vals[j - window + 1 : j + 1].mean() > threshold
    return out


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 1000),
    window=st.sampled_from([2, 5, 50]),
    cuts=st.lists(st.integers(0, 900), max_size=15),
)
def test_streamed_and_whole_flags_follow_the_definition(seed, window, cuts) -> None:
    x = _series(seed)
    whole = nis_monitor(x, GATE, window, 0.999)
    want = _by_definition(x, window, window_threshold(GATE, window, 0.999))
    rise = np.diff(np.concatenate([[False], want]).astype(np.int8))
    np.testing.assert_array_equal(whole.degraded, want)
    assert whole.onsets.tolist() == np.flatnonzero(rise == 1).tolist()
    assert whole.clears.tolist() == np.flatnonzero(rise == -1).tolist()
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
