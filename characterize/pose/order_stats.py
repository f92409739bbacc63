"""Quantiles of |e| per simulated series, compiled (numba): the requirement verdict's inner loop.

:func:`abs_quantile` returns exactly what ``np.quantile(np.abs(e[:, :, column]), q,
axis=1)`` returns (numpy's default "linear" method: the order statistics at
``floor((N - 1) q)`` and the next, interpolated as numpy's ``_lerp`` does; nan for a
series holding a nan), without the copies numpy makes of a strided column: each
series is gathered into a small buffer and the order statistic found by quickselect.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True)
def _select(buf: np.ndarray, k: int) -> None:
    """Reorder ``buf`` so that ``buf[k]`` is its k-th smallest, nothing larger before it
    and nothing smaller after it (Hoare quickselect, median-of-three pivot)."""
    lo, hi = 0, buf.size - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        a, b, c = buf[lo], buf[mid], buf[hi]
        if a > b:
            a, b = b, a
        if b > c:
            b = c
        pivot = max(a, b)
        i, j = lo, hi
        while i <= j:
            while buf[i] < pivot:
                i += 1
            while buf[j] > pivot:
                j -= 1
            if i <= j:
                buf[i], buf[j] = buf[j], buf[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


@numba.njit(cache=True)
def _abs_quantile(e: np.ndarray, column: int, q: float) -> np.ndarray:
    b, n = e.shape[0], e.shape[1]
    out = np.empty(b)
    virtual = (n - 1) * q
    prev = min(max(math.floor(virtual), 0), n - 1)
    nxt = min(prev + 1, n - 1)
    gamma = virtual - prev
    buf = np.empty(n)
    for r in range(b):
        has_nan = False
        for j in range(n):
            v = abs(e[r, j, column])
            has_nan |= v != v
            buf[j] = v
        if has_nan:
            out[r] = np.nan
            continue
        _select(buf, prev)
        lo = buf[prev]
        hi = lo
        if nxt > prev:
            hi = buf[prev + 1]
            for j in range(prev + 2, n):
                hi = min(hi, buf[j])
        diff = hi - lo
        out[r] = hi - diff * (1.0 - gamma) if gamma >= 0.5 else lo + diff * gamma
    return out


def abs_quantile(e: np.ndarray, column: int, q: float) -> np.ndarray:
    """``(B,)`` the ``q`` quantile of ``|e[b, :, column]|`` for every series b of ``(B, N, A)``."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level must be in [0, 1], got {q}")
    return _abs_quantile(np.asarray(e, dtype=np.float64), int(column), float(q))
