"""The live run's latency log: bounded memory, percentiles within its 1 % bins."""

from __future__ import annotations

import math

import numpy as np

from sensorbench.live.latency import LatencyLog


def test_percentiles_within_one_percent_of_exact_and_memory_bounded() -> None:
    rng = np.random.default_rng(7)
    # a lognormal body around 0.4 ms with a tail into tens of ms, as live's latencies are
    samples = np.exp(rng.normal(math.log(4e5), 0.8, 200_000)).astype(np.int64)
    samples[::500] *= 40
    log = LatencyLog()
    bins = len(log.counts)
    for chunk in np.array_split(samples, 20_000):
        log.extend(int(x) for x in chunk)
    got = log.summary()
    assert got["n"] == samples.size and len(log.counts) == bins < 2_000
    assert got["max_ms"] == samples.max() / 1e6
    for q in (50, 99):
        exact = np.percentile(samples, q) / 1e6
        # one bin is exp(1/100) wide: its middle is within half a bin of any value in it
        assert abs(got[f"p{q}_ms"] / exact - 1) <= math.exp(0.005) - 1 + 1e-3, (q, got, exact)


def test_extremes_and_empty() -> None:
    log = LatencyLog()
    assert log.n == 0 and math.isnan(log.summary()["p50_ms"])
    log.extend([0, 500, 10**12])
    got = log.summary()
    assert got["n"] == 3 and got["max_ms"] == 1e6 and got["p50_ms"] <= 1e-3
