"""Monte Carlo of the pose-error model along real timestamps, all draws at once.

Simulates ``e = b_s + g + v`` (:mod:`error_model`) for B draws × A axes along sample
times ``t_s`` (s, spacings taken to 1 ns) and relocalization flags, reduced to
:data:`STAT_NAMES` (the same kernel reduces the real error); the same seed, times and
parameters give the same draws whichever function is asked. Compiled kernels over
*lanes* (one draw of one axis), each its own SplitMix64 stream, Box–Muller in float32,
recursion and statistics in float64: docs/POSE_ERROR.md ("Monte Carlo")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numba
import numpy as np
from scipy.special import ndtr

from sensorbench.characterize.pose.whiten import filter_gains

BLOCK_LANES = 128  # lanes per block: ~16 state arrays × 128 × 8 B stay in L1
N_ACC = 10
# accumulator rows of the (N_ACC, lanes) statistics array
(
    ACC_SUM, ACC_SUMSQ, ACC_MAXABS, ACC_LAG, ACC_FIRST, ACC_LAST, ACC_EARLY, ACC_LATE, ACC_Z2,
    ACC_Z4,
) = range(N_ACC)

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_S27 = np.uint64(27)
_S30 = np.uint64(30)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_F = np.float32
_FAST = {"contract", "reassoc", "nsz", "arcp"}
"""LLVM fast-math flags of the kernels: fused multiply-adds, reassociation (the lanes'
sums), no signed zeros, reciprocals. Not ``nnan``/``ninf`` (a nan must stay visible) and
not ``afn`` (no approximate sqrt): float32 rounding is what the tests check against."""
_MANTISSA = np.int32((1 << 23) - 1)
_EXP_ONE = np.int32(127 << 23)
_EXP_SHIFT = np.int32(23)
_EXP_BIAS = np.int32(127)
_LN2 = _F(math.log(2.0))
_SQRT2 = _F(math.sqrt(2.0))
_HALF_PI = _F(0.5 * math.pi)
_TWO_M32 = _F(2.0**-32)
_TWO_M30 = _F(2.0**-30)
_HALF = _F(0.5)
_ONE = _F(1.0)
_TWO = _F(2.0)
_LN_COEF = tuple(_F(1.0 / n) for n in (9, 7, 5, 3))  # atanh series, |s| <= 0.172
_SIN_COEF = tuple(_F(1.0 / math.factorial(n)) for n in (11, 9, 7, 5, 3))
_COS_COEF = tuple(_F(1.0 / math.factorial(n)) for n in (12, 10, 8, 6, 4, 2))


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _splitmix(state: np.ndarray, word: np.ndarray) -> None:
    """Advance every lane's stream once; ``word`` gets the 64-bit outputs."""
    for j in range(state.size):
        s = state[j] + _GAMMA
        state[j] = s
        z = (s ^ (s >> _S30)) * _MIX1
        z = (z ^ (z >> _S27)) * _MIX2
        word[j] = z ^ (z >> _S31)


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _ln_series(mantissa: np.float32, exponent: np.float32) -> np.float32:
    """``ln(mantissa · 2**exponent)`` in float32 for ``mantissa`` in [1, 2)."""
    big = mantissa > _SQRT2
    m = mantissa * _HALF if big else mantissa
    e = exponent + _ONE if big else exponent
    s = (m - _ONE) / (m + _ONE)  # ln m = 2 atanh s; next term 2 s^11 / 11 < 3e-9
    s2 = s * s
    p = _LN_COEF[0]
    p = _LN_COEF[1] + s2 * p
    p = _LN_COEF[2] + s2 * p
    p = _LN_COEF[3] + s2 * p
    p = _ONE + s2 * p
    return e * _LN2 + _TWO * s * p


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _sin_cos_quarter(x: np.float32) -> tuple[np.float32, np.float32]:
    """``(sin x, cos x)`` in float32 for x in [0, π/2): Taylor to x¹³ and x¹⁴ (< 4e-9)."""
    x2 = x * x
    sp = _SIN_COEF[0]
    sp = _SIN_COEF[1] - x2 * sp
    sp = _SIN_COEF[2] - x2 * sp
    sp = _SIN_COEF[3] - x2 * sp
    sp = _SIN_COEF[4] - x2 * sp
    cp = _COS_COEF[0]
    cp = _COS_COEF[1] - x2 * cp
    cp = _COS_COEF[2] - x2 * cp
    cp = _COS_COEF[3] - x2 * cp
    cp = _COS_COEF[4] - x2 * cp
    cp = _COS_COEF[5] - x2 * cp
    return x - x * x2 * sp, _ONE - x2 * cp


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _normal_pairs(
    state: np.ndarray, word: np.ndarray, uf: np.ndarray, ui: np.ndarray, z1: np.ndarray,
    z2: np.ndarray,
) -> None:
    """One pair of independent standard normals per lane into ``z1``, ``z2`` (float32).

    ``uf`` (float32) and ``ui`` (int32) are views of the same scratch buffer: the
    float's exponent and mantissa are read through the integer view."""
    _splitmix(state, word)
    for j in range(state.size):
        w = word[j]
        uf[j] = (_F(w >> _S32) + _HALF) * _TWO_M32  # u in (0, 1)
        z2[j] = _F(w & _LOW32) * _TWO_M30  # in [0, 4): quarter turns
    for j in range(state.size):
        bits = ui[j]
        z1[j] = _F((bits >> _EXP_SHIFT) - _EXP_BIAS)
        ui[j] = (bits & _MANTISSA) | _EXP_ONE
    for j in range(state.size):
        r = math.sqrt(-_TWO * _ln_series(uf[j], z1[j]))
        q = z2[j]
        quadrant = np.int32(q)
        sin, cos = _sin_cos_quarter((q - _F(quadrant)) * _HALF_PI)
        odd = (quadrant & 1) == 1
        c = sin if odd else cos
        s = cos if odd else sin
        c = -c if (quadrant == 1 or quadrant == 2) else c
        s = -s if quadrant >= 2 else s
        z1[j] = r * c
        z2[j] = r * s


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _accumulate(acc: np.ndarray, e: np.ndarray, k: int, early: bool, late: bool) -> None:
    """Add sample ``k`` of every lane, values ``e`` ``(lanes,)``, to ``acc``.

    Written as short loops over few arrays each: the compiler vectorises a loop only
    when it can check at run time that its arrays do not overlap, for a few arrays."""
    s1 = acc[ACC_SUM]
    s2 = acc[ACC_SUMSQ]
    for j in range(e.size):
        s1[j] += e[j]
        s2[j] += e[j] * e[j]
    mx = acc[ACC_MAXABS]
    for j in range(e.size):
        mx[j] = max(mx[j], abs(e[j]))
    lag = acc[ACC_LAG]
    last = acc[ACC_LAST]
    for j in range(e.size):
        lag[j] += e[j] * last[j]  # the last value is 0 before the first sample
        last[j] = e[j]
    if early or late:
        ss = acc[ACC_EARLY] if early else acc[ACC_LATE]
        for j in range(e.size):
            ss[j] += e[j] * e[j]
    if k == 0:
        acc[ACC_FIRST, :] = e


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def accumulate_series(
    series: np.ndarray, early: np.ndarray, late: np.ndarray, acc: np.ndarray
) -> None:
    """Accumulate given ``(N, lanes)`` series into ``acc`` ``(N_ACC, lanes)`` (zeroed)."""
    for k in range(series.shape[0]):
        _accumulate(acc, series[k], k, early[k], late[k])


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def _whiten_step(
    acc: np.ndarray, e: np.ndarray, k: int, reset: bool, gains: np.ndarray, lane_axis: np.ndarray,
    mb: np.ndarray, mg: np.ndarray,
) -> None:
    """One step of the whitening filter of every lane (:mod:`whiten`); adds z², z⁴."""
    z2 = acc[ACC_Z2]
    z4 = acc[ACC_Z4]
    for j in range(e.size):
        a = lane_axis[j]
        mg[j] *= gains[0, k, a]
        if reset:
            mb[j] = 0.0
        nu = e[j] - mb[j] - mg[j]
        z = nu * gains[3, k, a]
        mb[j] += gains[1, k, a] * nu
        mg[j] += gains[2, k, a] * nu
        z2[j] += z * z
        z4[j] += z * z * z * z


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def accumulate_innovations(
    series: np.ndarray, reloc: np.ndarray, gains: np.ndarray, lane_axis: np.ndarray, acc: np.ndarray
) -> None:
    """Add the z², z⁴ of given ``(N, lanes)`` series' standardized innovations to ``acc``."""
    lanes = series.shape[1]
    mb = np.zeros(lanes)
    mg = np.zeros(lanes)
    for k in range(series.shape[0]):
        _whiten_step(acc, series[k], k, reloc[k], gains, lane_axis, mb, mg)


@numba.njit(cache=True, error_model="numpy", fastmath=_FAST)
def simulate_block(
    params: np.ndarray, dt: np.ndarray, reloc: np.ndarray, early: np.ndarray, late: np.ndarray,
    state: np.ndarray, acc: np.ndarray, series: np.ndarray, gains: np.ndarray,
    lane_axis: np.ndarray, given: np.ndarray, shift: np.ndarray,
) -> None:
    """Simulate ``e = c + b + g + v + d`` for a block of lanes along all N samples.

    Args:
        params: ``(5, lanes)`` sigma_b, sigma, tau_s, sigma_v per lane (m or rad, s)
            and the sd of c, an offset constant over the whole series (drawn at the
            first sample: the alignment's error for a session it did not see).
        dt: ``(N,)`` sample spacing (s); ``dt[0] = inf`` (stationary start).
        reloc: ``(N,)`` bool, offset redrawn at these samples (``reloc[0]`` true).
        early, late: ``(N,)`` bool growth masks (:func:`gm_montecarlo.growth_masks`).
        state: ``(lanes,)`` uint64 random streams, advanced in place.
        acc: ``(N_ACC, lanes)`` zeroed accumulators, filled.
        series: ``(N, lanes)`` to store the series, or ``(0, lanes)`` not to.
        gains: ``(4, N, A)`` whitening filter (phi, k_b, k_g, 1/sqrt(S) of
            :func:`whiten.filter_gains`) whose standardized innovations fill
            ``ACC_Z2``/``ACC_Z4``, or ``(4, 0, A)`` for none.
        lane_axis: ``(lanes,)`` the axis (column of ``gains``) of every lane.
        given: ``(N,)`` bool, relocalizations whose offset is given in ``shift`` (a
            named wrong relocalization's jump): b is 0 over their segments.
        shift: ``(N, A)`` d, the given offsets over their segments (0 elsewhere)."""
    lanes = state.size
    word = np.empty(lanes, dtype=np.uint64)
    uf = np.empty(lanes, dtype=np.float32)
    ui = uf.view(np.int32)
    z1 = np.empty(lanes, dtype=np.float32)
    z2 = np.empty(lanes, dtype=np.float32)
    phi = np.empty(lanes)
    q = np.empty(lanes)
    g = np.zeros(lanes)
    b = np.zeros(lanes)
    e = np.empty(lanes)
    sigma_b, sigma, tau, sigma_v, sigma_c = params[0], params[1], params[2], params[3], params[4]
    c = np.zeros(lanes)
    store = series.shape[0] > 0
    whiten = gains.shape[1] > 0
    mb = np.zeros(lanes)
    mg = np.zeros(lanes)
    for k in range(dt.size):
        if k == 0 or dt[k] != dt[k - 1]:
            for j in range(lanes):
                phi[j] = math.exp(-dt[k] / tau[j])
                q[j] = sigma[j] * math.sqrt(1.0 - phi[j] * phi[j])
        if reloc[k]:
            _normal_pairs(state, word, uf, ui, z1, z2)
            for j in range(lanes):
                b[j] = 0.0 if given[k] else sigma_b[j] * z1[j]
            if k == 0:
                for j in range(lanes):
                    c[j] = sigma_c[j] * z2[j]
        _normal_pairs(state, word, uf, ui, z1, z2)
        for j in range(lanes):
            g[j] = phi[j] * g[j] + q[j] * z1[j]
            e[j] = c[j] + b[j] + g[j] + sigma_v[j] * z2[j] + shift[k, lane_axis[j]]
        _accumulate(acc, e, k, early[k], late[k])
        if whiten:
            _whiten_step(acc, e, k, reloc[k], gains, lane_axis, mb, mg)
        if store:
            series[k] = e


STAT_NAMES: tuple[str, ...] = ("rms", "mean", "max_abs", "lag1", "growth", "nis", "kurtosis")
_MIN_SEGMENT_SAMPLES = 8


def draw_params(
    params: np.ndarray, cov_log: np.ndarray, n_draws: int, rng: np.random.Generator,
    sigma_b_quantile: Sequence[Callable[[np.ndarray], np.ndarray]] | None = None,
) -> np.ndarray:
    """``(B, A, 4)`` parameters drawn from ``exp(N(ln params, cov_log))``.

    ``params`` is ``(A, 4)``, ``cov_log`` ``(A, 4, 4)`` (zeros = no uncertainty).
    ``sigma_b_quantile`` (per axis, probabilities -> sigma_b, e.g. its Q-profile) replaces
    sigma_b's log-normal marginal through a Gaussian copula (an independent uniform when
    its variance in ``cov_log`` is 0; docs/POSE_ERROR.md, "The fit")."""
    a = params.shape[0]
    out = np.empty((n_draws, a, 4))
    z = rng.standard_normal((n_draws, a, 4))
    for i in range(a):
        cov = np.nan_to_num(cov_log[i])
        ev, vec = np.linalg.eigh(0.5 * (cov + cov.T))
        root = vec * np.sqrt(np.clip(ev, 0.0, None))
        dev = z[:, i, :] @ root.T
        out[:, i, :] = np.exp(np.log(params[i])[None, :] + dev)
        if sigma_b_quantile is not None:
            sd = math.sqrt(max(cov[0, 0], 0.0))
            u = ndtr(dev[:, 0] / sd if sd > 0 else z[:, i, 0])
            out[:, i, 0] = sigma_b_quantile[i](u)
    return out


def _prepare(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    session_sd: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Lane parameters ``(5, B·A)`` (lane = draw·A + axis), spacings, flags, axes."""
    p = np.asarray(params, dtype=np.float64)
    if p.ndim == 2:
        p = p[None]
    a = p.shape[1]
    p = np.broadcast_to(p, (n_draws, a, 4))
    sd = np.zeros(a) if session_sd is None else np.asarray(session_sd, dtype=np.float64)
    p5 = np.concatenate([p, np.broadcast_to(sd[None, :, None], (n_draws, a, 1))], axis=2)
    lanes = np.ascontiguousarray(p5.reshape(-1, 5).T)
    t_s = np.asarray(t_s, dtype=np.float64)
    dt = np.empty(t_s.size)
    dt[0] = np.inf
    dt[1:] = np.round(np.diff(t_s) * 1e9) * 1e-9
    flags = np.asarray(reloc, dtype=bool).copy()
    flags[0] = True
    return lanes, dt, flags, a


def _gains(
    dt: np.ndarray, flags: np.ndarray, whiten: np.ndarray | None, a: int,
    wrong: np.ndarray | None = None,
) -> np.ndarray:
    """``(4, N, A)`` whitening gains of the model ``whiten`` (A, 4), or ``(4, 0, A)``.

    ``wrong`` (N,) bool: resets of named wrong relocalizations (their offset unknown
    to the filter, :func:`whiten.filter_gains`)."""
    if whiten is None:
        return np.zeros((4, 0, a))
    w = np.asarray(whiten, float)
    return np.ascontiguousarray(np.stack(filter_gains(dt, flags, w, wrong)))


def _simulate(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    seed: int | np.random.Generator, store: bool, whiten: np.ndarray | None = None,
    session_sd: np.ndarray | None = None, streams: np.ndarray | None = None,
    wrong: np.ndarray | None = None, shift: np.ndarray | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray | None, int]:
    """Run the kernel block by block: statistics ``{stat: (B·A,)}``, series, axes."""
    lanes, dt, flags, a = _prepare(params, t_s, reloc, n_draws, session_sd)
    early, late = growth_masks(t_s, flags)
    m = lanes.shape[1]
    given, d = np.zeros(dt.size, bool), np.zeros((dt.size, a))  # no given offsets
    if wrong is not None and shift is not None:
        given, d = np.asarray(wrong, bool), np.ascontiguousarray(shift, dtype=np.float64)
    gains = _gains(dt, flags, whiten, a, given)
    lane_axis = np.arange(m) % a
    if streams is None:
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        top = np.iinfo(np.uint64).max
        state = np.asarray(rng.integers(top, size=m, dtype=np.uint64, endpoint=True))
    else:
        state = np.array(streams, dtype=np.uint64).reshape(m)
    acc = np.zeros((N_ACC, m))
    series = np.empty((dt.size if store else 0, m))
    for j0 in range(0, m, BLOCK_LANES):
        j1 = min(m, j0 + BLOCK_LANES)
        block_acc = np.zeros((N_ACC, j1 - j0))
        block_series = np.empty((series.shape[0], j1 - j0))
        simulate_block(
            np.ascontiguousarray(lanes[:, j0:j1]), dt, flags, early, late, state[j0:j1], block_acc,
            block_series, gains, lane_axis[j0:j1], given, d,
        )
        acc[:, j0:j1] = block_acc
        series[:, j0:j1] = block_series
    return _finish(acc, dt.size, early, late, whiten is not None), (series if store else None), a


def simulate_errors(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    seed: int | np.random.Generator, session_sd: np.ndarray | None = None,
    streams: np.ndarray | None = None,
) -> np.ndarray:
    """``(B, N, A)`` simulated error series (materialised; use for small B·N).

    ``params``: ``(A, 4)`` or ``(B, A, 4)`` (one set per draw), columns sigma_b, sigma,
    tau_s, sigma_v (m or rad, s); ``session_sd`` ``(A,)``: sd of an offset constant over
    the series; ``streams`` ``(B, A)`` uint64: each lane's random stream instead of
    ``seed``'s (equal streams, equal normals)."""
    _, series, a = _simulate(params, t_s, reloc, n_draws, seed, True, None, session_sd, streams)
    return np.ascontiguousarray(series.reshape(-1, n_draws, a).transpose(1, 0, 2))


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


def _finish(acc: np.ndarray, n: int, early: np.ndarray, late: np.ndarray, white: bool) -> dict:
    """``{stat: (lanes,)}`` from the kernel's accumulators over ``n`` samples."""
    s1, s2 = acc[ACC_SUM], acc[ACC_SUMSQ]
    mean = s1 / n
    var = s2 / n - mean**2
    lag = (acc[ACC_LAG] - mean * (s1 - acc[ACC_FIRST]) - mean * (s1 - acc[ACC_LAST])
           + (n - 1) * mean**2)  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore"):
        lag1 = lag / (n * var)
        growth = np.sqrt((acc[ACC_LATE] / late.sum()) / (acc[ACC_EARLY] / early.sum()))
        nis = acc[ACC_Z2] / n if white else np.full(acc.shape[1], np.nan)
        kurtosis = (acc[ACC_Z4] / n) / nis**2
    return {
        "rms": np.sqrt(s2 / n),
        "mean": mean,
        "max_abs": acc[ACC_MAXABS].copy(),
        "lag1": lag1,
        "growth": growth,
        "nis": nis,
        "kurtosis": kurtosis,
    }


def error_statistics(
    t_s: np.ndarray, reloc: np.ndarray, error: np.ndarray, whiten: np.ndarray | None = None,
    wrong: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Statistics of error series ``(N, L)`` (e.g. one real error, L = axes) -> ``{stat: (L,)}``.

    ``whiten``: ``(A, 4)`` model whose standardized innovations give ``nis`` and
    ``kurtosis`` (column l is whitened by axis ``l % A``), else those are nan;
    ``wrong`` (N,) bool: named wrong relocalizations, whose offsets it does not know."""
    e = np.ascontiguousarray(error, dtype=np.float64)
    early, late = growth_masks(t_s, reloc)
    acc = np.zeros((N_ACC, e.shape[1]))
    accumulate_series(e, early, late, acc)
    if whiten is not None:
        _, dt, flags, a = _prepare(whiten, t_s, reloc, 1)
        lane_axis = np.arange(e.shape[1]) % a
        gains = _gains(dt, flags, whiten, a, wrong)
        accumulate_innovations(e, flags, gains, lane_axis, acc)
    return _finish(acc, e.shape[0], early, late, whiten is not None)


def simulate_statistics(
    params: np.ndarray, t_s: np.ndarray, reloc: np.ndarray, n_draws: int,
    seed: int | np.random.Generator, whiten: np.ndarray | None = None,
    session_sd: np.ndarray | None = None, wrong: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """``{stat: (B, A)}`` of B simulated draws (:func:`simulate_errors`), unstored;
    ``wrong`` (N,) and ``shift`` (N, A): named wrong relocalizations' jumps, given, not drawn."""
    stats, _, a = _simulate(
        params, t_s, reloc, n_draws, seed, False, whiten, session_sd, None, wrong, shift
    )
    return {k: v.reshape(n_draws, a) for k, v in stats.items()}
