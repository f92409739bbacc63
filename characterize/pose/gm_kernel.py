"""Compiled kernels of the pose-error Monte Carlo (numba): draws, recursion, statistics.

The kernels draw, simulate and reduce in one pass, vectorised over *lanes* (one lane
= one draw of one axis with its own parameters) in L1-sized blocks, never storing the
series. Each lane runs its own SplitMix64 stream; normals by Box–Muller in float32
with series ``ln`` and ``sin``/``cos`` written here (vectorisable, unlike libm); the
recursion and the statistics run in float64. Why and the accuracy of each part:
docs/POSE_ERROR.md ("Monte Carlo")."""

from __future__ import annotations

import math

import numba
import numpy as np

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
