"""Array arithmetic whose result for a row does not depend on the other rows, so a
session filtered in one go (replay) or chunk by chunk (live) gives the same numbers to
the last bit.

Elementwise ufuncs and sequential ``np.cumsum`` are such; a BLAS/LAPACK matrix product of
many rows (``x @ M.T``, ``np.linalg.solve``) rounds one row differently from the same row
in a block, and a windowed sum taken as ``c[k] − c[k−m]`` depends on where the running sum
started. These helpers replace them: products summed term by term in a fixed order, and
windowed sums added up each on its own (a fixed tree of partial sums).
"""

from __future__ import annotations

from functools import lru_cache

import numba
import numpy as np


def rows_dot(x: np.ndarray, mat: np.ndarray) -> np.ndarray:
    """``x @ mat.T`` (K, P) for x (K, N) and mat (P, N), each row's terms summed in the
    order 0..N−1."""
    x = np.asarray(x, dtype=float)
    mat = np.asarray(mat, dtype=float)
    out = x[:, :1] * mat[:, 0]
    for j in range(1, mat.shape[1]):
        out = out + x[:, j : j + 1] * mat[:, j]
    return out


@numba.njit(cache=True)
def window_sum(x: np.ndarray, k: int, m: int, buf: np.ndarray) -> float:
    """``x[k−m] + … + x[k−1]`` (k ≥ m) added up as a fixed tree of partial sums: pairs,
    fours, eights, …, joined by the binary digits of m from the lowest, each power's
    block after the blocks of the lower ones. It depends on its m entries only, not on
    where ``x`` starts: a chunk prefixed with m entries of history gives the whole
    series' sums. ``buf``: scratch of at least m entries, overwritten (one per caller,
    not one per sum: a live frame takes some twenty sums an axis)."""
    lo = k - m
    acc = 0.0
    width = 0  # entries acc covers
    span = 1
    while span <= m:
        if m & span:
            for j in range(span):
                buf[j] = x[lo + width + j]
            n = span
            while n > 1:  # pairwise: the sums of 2, 4, … consecutive entries
                n //= 2
                for j in range(n):
                    buf[j] = buf[2 * j] + buf[2 * j + 1]
            acc = buf[0] if width == 0 else acc + buf[0]
            width += span
        span *= 2
    return acc


@lru_cache(maxsize=16)
def _pinv(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    out = np.linalg.pinv(np.frombuffer(data, dtype=np.float64).reshape(shape))
    out.setflags(write=False)
    return out


def pinv_cached(mat: np.ndarray) -> np.ndarray:
    """``np.linalg.pinv(mat)`` (read-only), computed once per distinct matrix: the filters
    ask for the pod matrix's pseudo-inverse several times in every step, and a live run
    steps twenty times a second."""
    m = np.ascontiguousarray(mat, dtype=np.float64)
    return _pinv(m.tobytes(), m.shape)
