"""Monte Carlo of the pose-error model along real timestamps, all draws at once.

Simulates ``e = b_s + g + v`` (see :mod:`pose_error`) for B draws × A axes along given
sample times ``t_s`` (s, any spacing, gaps allowed) and relocalization flags: b is
drawn anew at every relocalization, g follows the exact discretization
``g_k = phi_k g_{k-1} + sigma sqrt(1 - phi_k²) w_k`` with ``phi_k = exp(-dt_k/tau)``
(stationary start), v is white. The only loop is over time, vectorised over
draws × axes; time is processed in fixed-length chunks so memory stays bounded and
statistics can be accumulated on the fly (:class:`ErrorStats`) without storing
(B, N, A). Reproducible: the same seed, times and parameters give the same draws.

Statistics per draw and axis (the same code is applied to the real error):

- ``rms``: root mean square (m or rad);
- ``mean``: mean;
- ``max_abs``: max |e|;
- ``lag1``: lag-1 sample autocorrelation (mean removed over the session);
- ``growth``: "does it grow?" — RMS over the last quarter (in time) of every
  relocalization segment divided by the RMS over the first quarter, pooled over
  segments, **without** removing the segment mean (segments with < 8 samples are
  skipped; nan if none qualify).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

STAT_NAMES: tuple[str, ...] = ("rms", "mean", "max_abs", "lag1", "growth")
_MIN_SEGMENT_SAMPLES = 8
_CHUNK_ELEMENTS = 1 << 20


def _chunk_len(rows: int) -> int:
    return int(max(1, min(512, _CHUNK_ELEMENTS // max(rows, 1))))


def draw_params(
    params: np.ndarray, cov_log: np.ndarray, n_draws: int, rng: np.random.Generator
) -> np.ndarray:
    """``(B, A, 4)`` parameters drawn from ``exp(N(ln params, cov_log))``.

    ``params`` is ``(A, 4)``, ``cov_log`` ``(A, 4, 4)`` (zeros = no uncertainty).
    """
    a = params.shape[0]
    out = np.empty((n_draws, a, 4))
    z = rng.standard_normal((n_draws, a, 4))
    for i in range(a):
        cov = np.nan_to_num(cov_log[i])
        ev, vec = np.linalg.eigh(0.5 * (cov + cov.T))
        root = vec * np.sqrt(np.clip(ev, 0.0, None))
        out[:, i, :] = np.exp(np.log(params[i])[None, :] + z[:, i, :] @ root.T)
    return out


def iter_simulated(
    params: np.ndarray,
    t_s: np.ndarray,
    reloc: np.ndarray,
    n_draws: int,
    seed: int | np.random.Generator,
    dtype: type = np.float64,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(k0, chunk)`` with chunk ``(L, B, A)`` = simulated errors at ``t_s[k0:k0+L]``.

    ``params`` is ``(A, 4)`` (the same model for every draw) or ``(B, A, 4)`` (one
    parameter set per draw, e.g. from :func:`draw_params`), columns
    ``sigma_b, sigma, tau_s, sigma_v``.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    t_s = np.asarray(t_s, dtype=np.float64)
    reloc = np.asarray(reloc, dtype=bool).copy()
    reloc[0] = True
    p = np.asarray(params, dtype=np.float64)
    if p.ndim == 2:
        p = p[None]
    a = p.shape[1]
    b_shape = (n_draws, a)
    sb = p[..., 0].astype(dtype)
    sg = p[..., 1]
    inv_tau = 1.0 / p[..., 2]
    sv = p[..., 3].astype(dtype)
    seg = np.cumsum(reloc) - 1
    n_seg = int(seg[-1]) + 1
    offsets = rng.standard_normal((n_seg, *b_shape), dtype=dtype) * sb
    dt = np.diff(t_s, prepend=-np.inf)
    n = t_s.size
    chunk = _chunk_len(n_draws * a)
    g = np.zeros(b_shape, dtype=dtype)
    bounds = np.flatnonzero(reloc)
    for k0 in range(0, n, chunk):
        k1 = min(n, k0 + chunk)
        zg = rng.standard_normal((k1 - k0, *b_shape), dtype=dtype)
        zv = rng.standard_normal((k1 - k0, *b_shape), dtype=dtype)
        phi = np.exp(-dt[k0:k1, None, None] * inv_tau[None])
        zg *= (sg[None] * np.sqrt(1.0 - phi * phi)).astype(dtype)
        phi = phi.astype(dtype)
        out = np.empty((k1 - k0, *b_shape), dtype=dtype)
        prev = g
        for j in range(k1 - k0):
            row = out[j]
            np.multiply(prev, phi[j], out=row)
            row += zg[j]
            prev = row
        g = out[-1].copy()
        # offsets: constant over each segment's run of rows in this chunk
        cuts = np.concatenate([[k0], bounds[(bounds > k0) & (bounds < k1)], [k1]])
        for a, b in itertools.pairwise(cuts):
            out[a - k0 : b - k0] += offsets[seg[a]]
        zv *= sv
        out += zv
        yield k0, out


def simulate_errors(
    params: np.ndarray,
    t_s: np.ndarray,
    reloc: np.ndarray,
    n_draws: int,
    seed: int | np.random.Generator,
    dtype: type = np.float64,
) -> np.ndarray:
    """``(B, N, A)`` simulated error series (materialised; use for small B·N)."""
    parts = [c for _, c in iter_simulated(params, t_s, reloc, n_draws, seed, dtype)]
    return np.ascontiguousarray(np.concatenate(parts, axis=0).transpose(1, 0, 2))


def growth_masks(t_s: np.ndarray, reloc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(early, late)`` bool masks: first / last quarter (in time) of every segment."""
    t_s = np.asarray(t_s, dtype=np.float64)
    reloc = np.asarray(reloc, dtype=bool).copy()
    reloc[0] = True
    seg = np.cumsum(reloc) - 1
    counts = np.bincount(seg)
    t0 = t_s[reloc]
    t_end = np.maximum.reduceat(t_s, np.flatnonzero(reloc))
    dur = t_end - t0
    frac = (t_s - t0[seg]) / np.where(dur > 0, dur, np.inf)[seg]
    ok = (counts >= _MIN_SEGMENT_SAMPLES)[seg] & (dur > 0)[seg]
    return ok & (frac < 0.25), ok & (frac >= 0.75)


class ErrorStats:
    """Streaming per-(draw, axis) statistics of error chunks ``(L, B, A)`` in time order."""

    def __init__(self, t_s: np.ndarray, reloc: np.ndarray, shape: tuple[int, int]) -> None:
        early, late = growth_masks(t_s, reloc)
        self._early = early
        self._late = late
        self.n = 0
        self.s1 = np.zeros(shape)
        self.s2 = np.zeros(shape)
        self.max_abs = np.zeros(shape)
        self.s_lag = np.zeros(shape)
        self.first: np.ndarray | None = None
        self.last: np.ndarray | None = None
        self.ss_early = np.zeros(shape)
        self.ss_late = np.zeros(shape)

    def add(self, k0: int, chunk: np.ndarray) -> None:
        """Accumulate samples ``k0 .. k0 + len(chunk)`` (must follow the previous chunk)."""
        if k0 != self.n:
            raise ValueError("chunks must be added in time order")
        # arithmetic in the chunk's dtype, sums accumulated in float64
        c = chunk
        f8 = np.float64
        sq = c * c
        self.s1 += c.sum(axis=0, dtype=f8)
        self.s2 += sq.sum(axis=0, dtype=f8)
        mx = np.maximum(c.max(axis=0), -c.min(axis=0))
        np.maximum(self.max_abs, mx, out=self.max_abs)
        self.s_lag += (c[1:] * c[:-1]).sum(axis=0, dtype=f8)
        if self.last is not None:
            self.s_lag += self.last * c[0]
        if self.first is None:
            self.first = c[0].astype(f8)
        self.last = c[-1].astype(f8)
        k1 = k0 + c.shape[0]
        for mask, acc in ((self._early, self.ss_early), (self._late, self.ss_late)):
            rows = np.flatnonzero(mask[k0:k1])
            if rows.size:
                acc += sq[rows].sum(axis=0, dtype=f8)
        self.n = k1

    def result(self) -> dict[str, np.ndarray]:
        """``{stat: (B, A)}`` for :data:`STAT_NAMES`."""
        n = self.n
        mean = self.s1 / n
        var = self.s2 / n - mean**2
        lag = (
            self.s_lag
            - mean * (self.s1 - self.first)
            - mean * (self.s1 - self.last)
            + (n - 1) * mean**2
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            lag1 = lag / (n * var)
            ne, nl = self._early.sum(), self._late.sum()
            growth = np.sqrt((self.ss_late / nl) / (self.ss_early / ne))
        return {
            "rms": np.sqrt(self.s2 / n),
            "mean": mean,
            "max_abs": self.max_abs,
            "lag1": lag1,
            "growth": growth,
        }


def error_statistics(
    t_s: np.ndarray, reloc: np.ndarray, error: np.ndarray
) -> dict[str, np.ndarray]:
    """Statistics of one real error series ``(N, A)`` -> ``{stat: (A,)}``."""
    acc = ErrorStats(t_s, reloc, (1, error.shape[1]))
    acc.add(0, error[:, None, :])
    return {k: v[0] for k, v in acc.result().items()}


def simulate_statistics(
    params: np.ndarray,
    t_s: np.ndarray,
    reloc: np.ndarray,
    n_draws: int,
    seed: int | np.random.Generator,
    dtype: type = np.float64,
) -> dict[str, np.ndarray]:
    """``{stat: (B, A)}`` of B simulated draws, without storing the series."""
    p = np.asarray(params)
    acc = ErrorStats(t_s, reloc, (n_draws, p.shape[-2]))
    for k0, chunk in iter_simulated(params, t_s, reloc, n_draws, seed, dtype):
        acc.add(k0, chunk)
    return acc.result()
