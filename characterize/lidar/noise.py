"""Range noise by distance band and the outlier classifier, from static stretches: residuals
against the other half of the turns' reference (a point never enters its own), σ their
outlier-clipped standard deviation (m), each return labelled (``LABEL_*``). docs/LIDAR.md
("Noise and the outlier classifier")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.ndimage import maximum_filter1d

from sensorbench.logs import LidarTurns
from sensorbench.logs.scan_bins import TWO_PI, angle_bins, grouped_median, turn_index

DEFAULT_BANDS_M = (0.02, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0)
MAD_TO_SIGMA = 1.482602218505602
CLIP_K = 3.0
"""The band σ is the standard deviation of the residuals within ``CLIP_K`` σ of their mean
(iterated): the MAD collapses on ranges that come in steps comparable to the noise (a
LaserScan's fixed bearings, a sensor's millimetre or coarser resolution); 3 σ leaves out
what the MAD left out (returns a few σ off a surface at grazing faces)."""
CLIP_SD_FACTOR = 0.9865784
"""SD of a normal truncated to ±``CLIP_K`` σ, in σ: sqrt(1 − 2kφ(k) / (2Φ(k) − 1)), k = 3."""
CLIP_MAX_ITER = 100
REF_CLIP_K = 5.0
"""The second pass's reference of a bin is the mean of its samples within this many σ of
the first (wide: the first σ of ranges in coarse steps reads low, and the steps next to
the commonest must stay in)."""
TRIM_VAR = 1.195
"""Variance of the mean of a normal sample's middle half (its 25 % trimmed mean), in σ²/n:
the noise residuals' reference (the median's is π/2; the median of ranges in steps
sits on a step, off their mean by up to half a step, which no σ would remove)."""
MIN_BAND_POINTS = 30
SIGMA_FLOOR_M = 1e-3
MIN_DETECT_P = 0.2
MAX_SLOPE = np.tan(np.radians(85.0))
JUMP_ABS_M = 0.05  # a discontinuity: a step over max(JUMP_ABS_M, JUMP_REL × range) (m)
JUMP_REL = 0.03
EDGE_BINS = 2  # half-width of an edge zone around a discontinuity (bins)
LABEL_UNUSED = -1  # not in a static stretch, or invalid (nan)
LABEL_NORMAL = 0  # a return on a surface, or no return where none is expected
LABEL_EDGE = 1  # edge outlier (mixed pixel)
LABEL_FALSE = 2  # isolated false point
LABEL_TRANSIENT = 3  # off every surface with a neighbour that agrees (something moving)
LABEL_MISSING = 4  # no return where the reference has a surface


@dataclass
class NoiseReport:
    """Range noise and outlier figures of the static stretches.

    ``labels``: per point of the stream, one of the ``LABEL_*`` codes;
    ``noise_band``: per point, the band whose noise it entered (-1: none).
    ``edge_outliers`` counts detected edge outliers, ``edge_outliers_est``
    their Horvitz-Thompson total (docs/LIDAR.md).
    ``bands``: one dict per band with ``lo_m``, ``hi_m``, ``sigma_m`` (nan when
    fewer than 30 points), ``se_m``, ``n_points``, ``n_bins``. Fractions are of
    all non-invalid samples (returns and no-returns) in the static stretches."""

    n_stretches: int
    static_s: float
    n_turns: int
    n_samples: int
    bands: list[dict]
    edge_outliers: int
    edge_outliers_est: float
    edge_outliers_var: float
    false_points: int
    transient_points: int
    missing_returns: int
    outlier_k: float
    labels: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int8))
    noise_band: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int8))
    plot: dict = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict:
        """JSON-ready dict (without plot data)."""
        n = self.n_samples

        def pct_se(count: int) -> float:
            p = count / n
            return 100.0 * float(np.sqrt(max(p * (1 - p), 1.0 / n) / n))

        return {
            "n_stretches": self.n_stretches,
            "static_s": self.static_s,
            "n_turns": self.n_turns,
            "n_samples": n,
            "bands": self.bands,
            "edge_outliers_detected": self.edge_outliers,
            "edge_outlier_detected_pct": 100.0 * self.edge_outliers / n,
            "edge_outlier_pct": 100.0 * self.edge_outliers_est / n,  # the unseen ones counted
            # Poisson, weighted counts
            "edge_outlier_pct_se": 100.0 * float(np.sqrt(max(self.edge_outliers_var, 1.0))) / n,
            "false_points": self.false_points,
            "false_point_pct": 100.0 * self.false_points / n,
            "false_point_pct_se": pct_se(self.false_points),
            "transient_points": self.transient_points,
            "missing_returns": self.missing_returns,
            "missing_return_pct": 100.0 * self.missing_returns / n,
            "outlier_k": self.outlier_k,
        }


def range_noise(
    turns: LidarTurns, stretch: np.ndarray, step_rad: float, period_s: float,
    bands_m: tuple[float, ...] = DEFAULT_BANDS_M, outlier_k: float = 5.0,
) -> NoiseReport:
    """Range noise per band and outlier counts over the static stretches.

    ``stretch``: per turn, static-stretch number or -1 (:func:`detect_static`);
    ``step_rad``: the angular step (rad); ``period_s``: nominal turn period (s), for the
    reported static time; ``bands_m``: band edges (m); ``outlier_k``: outlier threshold (σ)."""
    n_str = int(stretch.max()) + 1
    n_bins = int(np.floor(TWO_PI / step_rad))
    tid_all = turn_index(turns.count)
    sel = (stretch[tid_all] >= 0) & ~np.isnan(turns.range)
    idx = np.flatnonzero(sel)
    r = turns.range[idx].astype(np.float64)
    ang = turns.angle[idx].astype(np.float64)
    g = _grid(ang, stretch[tid_all[idx]], n_str, n_bins)
    sid, b0, f, width = g.sid, g.b0, g.f, g.width
    r_c = _to_bin_centres(r, ang, sid * n_bins + g.bins, (n_str, n_bins))
    ref_flat, cnt = grouped_median(sid * n_bins + g.bins, r_c, n_str * n_bins)
    ref = ref_flat.reshape(n_str, n_bins)
    jump, steep = _discontinuities(ref, width)
    # the edge zones: every bin within EDGE_BINS of a discontinuity, round the circle
    zone = maximum_filter1d(jump | steep, 2 * EDGE_BINS + 1, axis=1, mode="wrap")
    steep |= np.roll(steep, 1, axis=1)
    ref_i = _interpolate(ref, sid, b0, g.b1, f, ref[sid, b0])
    edge = zone[sid, b0]
    bands, sigma_at, quiet, res = _noise_bands(
        r, r_c, g, (tid_all[idx] % 2, stretch), (ref, ref_i), edge | steep[sid, b0], bands_m
    )
    cand, edge_out, p_detect = _classify(r, f, sid, b0, edge, ref, ref_i, jump, outlier_k, sigma_at)
    clustered = _clustered(turns, idx, cand, tid_all, outlier_k * sigma_at(r[cand]))
    false_pt = cand & ~clustered
    missing = ~edge & np.isinf(r) & np.isfinite(ref_i)

    noise_band = np.full(turns.n_points, -1, dtype=np.int8)
    noise_band[idx[quiet]] = np.digitize(ref_i[quiet], bands_m) - 1
    n_turns = int(np.sum(stretch >= 0))
    bin_sigma, _ = grouped_median((sid[quiet] * n_bins + b0[quiet]), np.abs(res), n_str * n_bins)
    plot = {
        "ref_angle": np.arange(n_bins) * width,
        "ref_range": ref[0],
        "bin_range": ref_flat,
        "bin_sigma": MAD_TO_SIGMA * bin_sigma,
        "bin_count": cnt,
        "edge_xy": _xy(r, ang, edge_out & (sid == 0)),
        "false_xy": _xy(r, ang, false_pt & (sid == 0)),
    }
    return NoiseReport(
        n_stretches=n_str, static_s=n_turns * period_s, n_turns=n_turns, n_samples=int(r.size),
        bands=bands, edge_outliers=int(edge_out.sum()),
        edge_outliers_est=float(np.sum(1.0 / p_detect[edge_out])),
        edge_outliers_var=float(np.sum(1.0 / p_detect[edge_out] ** 2)),
        false_points=int(false_pt.sum()), transient_points=int((cand & clustered).sum()),
        missing_returns=int(missing.sum()), outlier_k=outlier_k,
        labels=_labels(turns.n_points, idx, (missing, cand & clustered, false_pt, edge_out)),
        noise_band=noise_band, plot=plot,
    )


@dataclass(frozen=True)
class _Grid:
    """Where each point of the static stretches falls on the bearing grid: its stretch
    ``sid``, its bin ``bins``, the bins ``b0`` and ``b1`` around its bearing and its
    fraction ``f`` of the way from ``b0``; ``n_bins`` bins of ``width`` rad."""

    sid: np.ndarray
    bins: np.ndarray
    b0: np.ndarray
    b1: np.ndarray
    f: np.ndarray
    n_str: int
    n_bins: int
    width: float


def _grid(ang: np.ndarray, sid: np.ndarray, n_str: int, n_bins: int) -> _Grid:
    """The grid places of points at angles ``ang`` (rad) in stretches ``sid``."""
    width = TWO_PI / n_bins
    u = np.mod(ang, TWO_PI) / width
    b0 = np.floor(u).astype(np.int64) % n_bins
    return _Grid(
        sid, angle_bins(ang, n_bins), b0, (b0 + 1) % n_bins, u - np.floor(u), n_str, n_bins, width
    )


def _noise_bands(
    r: np.ndarray, r_c: np.ndarray, g: _Grid, halves: tuple[np.ndarray, np.ndarray],
    refs: tuple[np.ndarray, np.ndarray], excluded: np.ndarray, bands_m: tuple[float, ...],
) -> tuple[list[dict], Callable[[np.ndarray], np.ndarray], np.ndarray, np.ndarray]:
    """Range noise per band from the residuals of the quiet points (not ``excluded``, away
    from kinks) against the reference of the other half of the turns (``halves``: each
    point's turn parity, and the stretch of every turn); ``refs``: the per-bin reference
    (m) and each point's interpolated reference (m). Returns the bands, σ(range), the
    quiet points and their residuals (m)."""
    half, stretch = halves
    ref, ref_i = refs
    n_str, n_bins = g.n_str, g.n_bins
    # noise residuals against a reference built from the other half of the turns
    # (odd turns against even ones and back), so a point never shifts its own reference
    cross_flat = _grouped_trimmed_mean(
        (g.sid * 2 + half) * n_bins + g.bins, r_c, 2 * n_str * n_bins
    )
    other = g.sid * 2 + 1 - half
    cross_i = _interpolate(cross_flat.reshape(n_str * 2, n_bins), other, g.b0, g.b1, g.f, np.nan)
    n_half = np.bincount(
        (stretch * 2 + np.arange(stretch.size) % 2)[stretch >= 0], minlength=2 * n_str
    )[other]
    res_all = r - cross_i
    quiet = ~excluded & np.isfinite(r) & np.isfinite(ref_i) & np.isfinite(cross_i)
    flat0 = g.sid * n_bins + g.b0
    bands = _band_sigmas(res_all, ref_i, quiet, flat0, n_half, bands_m, TRIM_VAR)
    sigma_at = _sigma_lookup(bands, bands_m)
    # second pass: against the mean of the other half's samples within REF_CLIP_K σ of that
    # first reference (the per-bearing mean the noise is about, outliers left out: the
    # middle half's mean of ranges in steps leans to the commonest step), and without
    # points whose interpolation between two bins is off by more than a quarter of σ
    # at a kink (a corner): f(1 − f)·|second difference| of the clipped means
    half_key = (g.sid * 2 + half) * n_bins + g.bins
    cross2 = _grouped_clipped_mean(half_key, r_c, cross_flat, sigma_at)
    cross_i = _interpolate(cross2.reshape(n_str * 2, n_bins), other, g.b0, g.b1, g.f, np.nan)
    res_all = r - cross_i
    quiet &= np.isfinite(cross_i)
    smooth = _grouped_clipped_mean(g.sid * n_bins + g.bins, r_c, ref.ravel(), sigma_at)
    smooth = smooth.reshape(n_str, n_bins)
    with np.errstate(invalid="ignore"):  # inf (no return) bins: nan, no kink
        curv = np.abs(np.roll(smooth, -1, axis=1) - 2 * smooth + np.roll(smooth, 1, axis=1))
        bend = np.fmax(curv[g.sid, g.b0], curv[g.sid, g.b1]) * g.f * (1.0 - g.f)
        kink = bend > 0.25 * sigma_at(np.nan_to_num(ref_i, nan=0.0, posinf=0.0))
    quiet &= ~kink
    bands = _band_sigmas(res_all, ref_i, quiet, flat0, n_half, bands_m, 1.0)
    return bands, _sigma_lookup(bands, bands_m), quiet, res_all[quiet]


def _grouped_clipped_mean(
    keys: np.ndarray, values: np.ndarray, centre: np.ndarray,
    sigma_at: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Per integer key: the mean of its ``values`` (m) within ``REF_CLIP_K`` σ(``centre``) of
    its ``centre`` (m, per key; ``inf`` stays ``inf``), ``nan`` where none is."""
    keys = np.asarray(keys, np.int64)
    c = centre[keys]
    with np.errstate(invalid="ignore"):
        tol = REF_CLIP_K * sigma_at(np.nan_to_num(c, nan=0.0, posinf=0.0))
        near = np.isfinite(values) & np.isfinite(c) & (np.abs(values - c) <= tol)
    n = np.bincount(keys[near], minlength=centre.size)
    total = np.bincount(keys[near], weights=values[near], minlength=centre.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / n
    return np.where(np.isinf(centre), centre, np.where(n > 0, mean, np.nan))


def _grouped_trimmed_mean(keys: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per integer key in ``[0, n_groups)``: the mean of the middle half of its finite
    ``values`` (m; ranks ⌊c/4⌋ to c − ⌊c/4⌋ of c), ``inf`` where the median of all of
    them is ``inf`` (mostly no returns), ``nan`` where empty. ``values`` hold no nan."""
    keys = np.asarray(keys, np.int64)
    v = np.asarray(values, np.float64)
    order = np.lexsort((v, keys))
    v = v[order]  # by key, then value: a group's finite values first, its inf last
    counts = np.bincount(keys, minlength=n_groups)[:n_groups]
    finite = np.bincount(keys, weights=np.isfinite(values), minlength=n_groups)[:n_groups]
    finite = finite.astype(np.int64)
    starts = np.cumsum(counts) - counts
    mid = starts + counts // 2  # the upper median's place: inf there, the median is inf
    cut = finite // 4
    csum = np.concatenate(([0.0], np.cumsum(np.where(np.isfinite(v), v, 0.0))))
    lo, hi = starts + cut, starts + finite - cut
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = (csum[hi] - csum[lo]) / (hi - lo)
    median_inf = np.zeros(n_groups, bool)
    if v.size:
        median_inf = (counts > 0) & ~np.isfinite(v[np.minimum(mid, v.size - 1)])
    return np.where(counts == 0, np.nan, np.where(median_inf, np.inf, mean))


def _labels(n: int, idx: np.ndarray, masks: tuple[np.ndarray, ...]) -> np.ndarray:
    """Every point's label: the points ``idx`` by ``masks`` (missing, transient, false,
    edge; the first that holds), normal otherwise; unused where not in ``idx``."""
    labels = np.full(n, LABEL_UNUSED, dtype=np.int8)
    kinds = [LABEL_MISSING, LABEL_TRANSIENT, LABEL_FALSE, LABEL_EDGE]
    labels[idx] = np.select(list(masks), kinds, LABEL_NORMAL)
    return labels


def _clustered(
    turns: LidarTurns, idx: np.ndarray, cand: np.ndarray, tid: np.ndarray, tol_k: np.ndarray
) -> np.ndarray:
    """Which outlier candidates (``cand`` over the points ``idx``) have a neighbour in the
    same turn that is a candidate too, within ``max(tol_k, 3 %)`` of its range (m):
    a transient object rather than an isolated false point. ``tid`` is every point's
    turn, ``tol_k`` each candidate's ``outlier_k·σ`` at its own range (m)."""
    full_cand = np.zeros(turns.n_points, dtype=bool)
    full_cand[idx] = cand
    rng_full = turns.range.astype(np.float64)
    clustered = np.zeros(idx.size, dtype=bool)
    ci = idx[cand]
    rc = rng_full[ci]
    tol = np.maximum(tol_k, 0.03 * rc)
    for step in (-1, 1):
        nbr = ci + step
        okn = (nbr >= 0) & (nbr < turns.n_points)
        nbr_c = np.clip(nbr, 0, turns.n_points - 1)
        with np.errstate(invalid="ignore"):
            close = np.abs(rng_full[nbr_c] - rc) <= tol
        hit = okn & (tid[nbr_c] == tid[ci]) & full_cand[nbr_c] & close
        clustered[np.flatnonzero(cand)[hit]] = True
    return clustered


def _to_bin_centres(
    r: np.ndarray, ang: np.ndarray, key: np.ndarray, shape: tuple[int, int]
) -> np.ndarray:
    """Ranges (m) moved along their bin's slope to the bin centre, so the medians do
    not depend on where in the bin the samples happened to fall. ``key`` is each
    sample's ``stretch·n_bins + bin``, ``shape`` (stretches, bins)."""
    n_str, n_bins = shape
    width = TWO_PI / n_bins
    ref_flat, _ = grouped_median(key, r, n_str * n_bins)
    ref = ref_flat.reshape(shape)
    jump, _ = _discontinuities(ref, width)
    slope = _slopes(ref, jump, width).ravel()
    bins = key % n_bins
    offset = np.angle(np.exp(1j * (ang - bins * width)))
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(r), r - slope[key] * offset, r)


def _interpolate(
    table: np.ndarray, row: np.ndarray, b0: np.ndarray, b1: np.ndarray, f: np.ndarray,
    fallback: np.ndarray | float,
) -> np.ndarray:
    """``table[row]`` interpolated linearly between bins ``b0`` and ``b1`` at fraction
    ``f``; ``fallback`` where either bin is not finite."""
    a, b = table[row, b0], table[row, b1]
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(a) & np.isfinite(b), a * (1 - f) + b * f, fallback)


def _discontinuities(ref: np.ndarray, width: float) -> tuple[np.ndarray, np.ndarray]:
    """Per bin pair (b, b+1) of a (stretches, bins) reference: (discontinuity, steep) masks."""
    nxt = np.roll(ref, -1, axis=1)
    fin_a, fin_b = np.isfinite(ref), np.isfinite(nxt)
    prv, nxt2 = np.roll(ref, 1, axis=1), np.roll(ref, -2, axis=1)
    with np.errstate(invalid="ignore"):
        tol = np.maximum(JUMP_ABS_M, JUMP_REL * np.minimum(ref, nxt))
        steep = np.abs(nxt - ref) > tol
        smooth = (np.abs(nxt - (2 * ref - prv)) <= tol) | (np.abs(ref - (2 * nxt - nxt2)) <= tol)
        smooth &= np.abs(nxt - ref) <= MAX_SLOPE * width * 0.5 * (ref + nxt)
    jump = (fin_a != fin_b) | np.isnan(ref) | np.isnan(nxt) | (fin_a & fin_b & steep & ~smooth)
    return jump, steep


def _slopes(ref: np.ndarray, jump: np.ndarray, width: float) -> np.ndarray:
    """dr/dθ (m/rad) per bin from its unsplit neighbours (central, one-sided or 0)."""
    prv, nxt = np.roll(ref, 1, axis=1), np.roll(ref, -1, axis=1)
    left_ok, right_ok = ~np.roll(jump, 1, axis=1), ~jump
    with np.errstate(invalid="ignore"):
        out = np.where(
            left_ok & right_ok, (nxt - prv) / (2 * width),
            np.where(right_ok, (nxt - ref) / width, np.where(left_ok, (ref - prv) / width, 0.0)),
        )
    return np.where(np.isfinite(out), out, 0.0)


def clipped_sigma(x: np.ndarray) -> tuple[float, float]:
    """σ (same unit as ``x``) and its standard error of values ``x``: the standard
    deviation of those within :data:`CLIP_K` σ of their mean, iterated from a robust
    start until the kept values no longer change, divided by :data:`CLIP_SD_FACTOR` (a
    normal's truncation). Unlike 1.4826·MAD it holds for values on a lattice (ranges
    in steps of 1 mm to a few cm), where the MAD falls to a lattice step or to 0; the
    values far out (outliers) are left out as the MAD leaves them out. The standard
    error is the SD's, σ·sqrt((κ − 1) / 4N) with κ the kept values' kurtosis."""
    x = np.asarray(x, dtype=np.float64)
    keep = np.ones(x.size, dtype=bool)
    centre = float(np.median(x))
    # from a robust start that values in steps do not collapse: the MAD, else the half
    # width of the middle 68 %, else a quarter of the middle 95.4 % (a step holding more
    # than half, or 68 %, of the values makes the narrower ones 0), else the SD
    p = np.percentile(x, [2.275, 15.866, 84.134, 97.725])
    sigma = max(MAD_TO_SIGMA * float(np.median(np.abs(x - centre))), 0.5 * float(p[2] - p[1]))
    sigma = sigma or 0.25 * float(p[3] - p[0]) or float(np.std(x))
    for _ in range(CLIP_MAX_ITER):
        new = np.abs(x - centre) <= CLIP_K * sigma
        if new.sum() < 2:
            break
        changed = bool(np.any(new != keep))
        keep = new
        centre = float(np.mean(x[keep]))
        sigma = float(np.std(x[keep], ddof=1)) / CLIP_SD_FACTOR
        if not changed:
            break
    kept = x[keep]
    dev = kept - np.mean(kept)
    m2 = float(np.mean(dev**2))
    kurt = float(np.mean(dev**4)) / m2**2 if m2 > 0 else 3.0
    return sigma, sigma * float(np.sqrt(max(kurt - 1.0, 0.0) / (4.0 * kept.size)))


def _band_sigmas(
    res: np.ndarray, ref_i: np.ndarray, use: np.ndarray, keys: np.ndarray, n_turns: np.ndarray,
    bands_m: tuple[float, ...], ref_var: float,
) -> list[dict]:
    """σ (m, :func:`clipped_sigma`) of the residuals ``res[use]`` per band of reference
    range, corrected for the noise of the reference (``n_turns``: the turns of each
    point's other half; ``ref_var``: the reference's variance in σ²/n at a bin)."""
    band = np.digitize(ref_i[use], bands_m) - 1
    res, keys, n_turns = res[use], keys[use], n_turns[use]
    out: list[dict] = []
    for j in range(len(bands_m) - 1):
        in_band = band == j
        rj = res[in_band]
        sigma = se = float("nan")
        if rj.size >= MIN_BAND_POINTS:
            n_eff = float(np.median(n_turns[in_band]))
            ref_factor = np.sqrt(1.0 + 2.0 * ref_var / (3.0 * n_eff))
            sigma, se = (v / ref_factor for v in clipped_sigma(rj))
        out.append({
            "lo_m": float(bands_m[j]),
            "hi_m": float(bands_m[j + 1]),
            "sigma_m": sigma,
            "se_m": se,
            "n_points": int(rj.size),
            "n_bins": int(np.unique(keys[in_band]).size),
        })
    return out


def _sigma_lookup(
    bands: list[dict], bands_m: tuple[float, ...]
) -> Callable[[np.ndarray], np.ndarray]:
    """σ(range) as a step function of the bands; empty bands take the nearest measured one."""
    sig = np.array([b["sigma_m"] for b in bands])
    good = np.flatnonzero(np.isfinite(sig))
    if good.size == 0:
        sig = np.full(sig.size, SIGMA_FLOOR_M)
    else:
        idx = np.arange(sig.size)
        nearest = good[np.argmin(np.abs(idx[:, None] - good[None, :]), axis=1)]
        sig = sig[nearest]
    edges = np.asarray(bands_m, dtype=float)

    def sigma_at(x: np.ndarray) -> np.ndarray:
        j = np.clip(np.digitize(x, edges) - 1, 0, sig.size - 1)
        return np.maximum(sig[j], SIGMA_FLOOR_M)

    return sigma_at


def _classify(
    r: np.ndarray, f: np.ndarray, sid: np.ndarray, b0: np.ndarray, edge: np.ndarray,
    ref: np.ndarray, ref_i: np.ndarray, jump: np.ndarray, outlier_k: float,
    sigma_at: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """False-point candidates, edge outliers and each edge outlier's detection probability."""
    n_bins = ref.shape[1]
    cand = np.zeros(r.size, dtype=bool)
    edge_out = np.zeros(r.size, dtype=bool)
    # on the interpolated surface between two unsplit bins: normal, no further test
    with np.errstate(invalid="ignore"):
        plain = ~jump[sid, b0] & (np.abs(r - ref_i) <= outlier_k * sigma_at(np.nan_to_num(ref_i)))
    e = np.flatnonzero(np.isfinite(r) & ~plain)
    offs = np.arange(-EDGE_BINS, EDGE_BINS + 2)
    cols = (b0[e, None] + offs[None, :]) % n_bins
    nb = ref[sid[e, None], cols]
    # a bin cut off from both neighbours may hold a mix of two surfaces: not a surface
    lone = jump[sid[e, None], cols] & jump[sid[e, None], (cols - 1) % n_bins]
    nb_surf = np.where(lone, np.nan, nb)
    re = r[e, None]
    fe = f[e]
    c = EDGE_BINS  # column of b0 in nb
    se_, b0e = sid[e], b0[e]
    cols_s = [nb_surf, np.where(jump[se_, b0e], np.nan, ref_i[e])]
    for j in range(min(2, EDGE_BINS)):
        # line through bins (b0-j-1, b0-j) and through (b1+j, b1+j+1), evaluated at the point
        # (inf - inf of two no-return bins is nan: those pairs are split, not used)
        lo, hi = nb[:, c - j - 1], nb[:, c - j]
        with np.errstate(invalid="ignore"):
            cols_s.append(
                np.where(jump[se_, (b0e - j - 1) % n_bins], np.nan, hi + (j + fe) * (hi - lo))
            )
            lo, hi = nb[:, c + 1 + j], nb[:, c + 2 + j]
            cols_s.append(
                np.where(jump[se_, (b0e + 1 + j) % n_bins], np.nan, lo - (j + 1 - fe) * (hi - lo))
            )
    surfaces = np.column_stack(cols_s)
    with np.errstate(invalid="ignore"):
        tol = outlier_k * sigma_at(np.nan_to_num(surfaces, nan=0.0, posinf=0.0, neginf=0.0))
        on_surface = np.any(np.abs(re - surfaces) <= tol, axis=1)
    near = np.min(np.where(np.isfinite(nb), nb, np.inf), axis=1)
    far = np.max(np.where(np.isnan(nb), -np.inf, nb), axis=1)
    between = edge[e] & (re[:, 0] > near) & (re[:, 0] < far)
    edge_out[e] = ~on_surface & between
    cand[e] = ~on_surface & ~between
    # probability that a mixed pixel falling uniformly between the two surfaces
    # lands farther than k σ from both (Horvitz-Thompson weight = 1 / that)
    # between the two zone surfaces that bracket the return (the pair it mixed)
    p_detect = np.ones(r.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        below = np.max(np.where(nb_surf <= re, nb_surf, -np.inf), axis=1)
        above = np.min(np.where(nb_surf >= re, nb_surf, np.inf), axis=1)
        gap = above - below
        tol = sigma_at(np.where(np.isfinite(below), below, 0))
        tol = outlier_k * (tol + sigma_at(np.where(np.isfinite(above), above, 0)))
        p = 1.0 - tol / gap
    p = np.where(np.isfinite(gap), np.clip(p, MIN_DETECT_P, 1.0), 1.0)
    p_detect[e] = p
    return cand, edge_out, p_detect


def _xy(r: np.ndarray, ang: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.column_stack([r[mask] * np.cos(ang[mask]), r[mask] * np.sin(ang[mask])])
