"""Time order of imported samples: no step back, none forward over :data:`MAX_STEP_S`,
repeated stamps by ``--duplicates`` policy, and the RELOCALIZED flag of a kept pose that
corrects the one it replaces (docs/FORMAT.md, "Repeated timestamps")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.errors import ImportFormatError

DUPLICATE_POLICIES = ("error", "first", "last")
"""Values of ``--duplicates``."""

MAX_LISTED = 20
"""Most offending lines an error names (the count is always given)."""

FALSE_FLAG_PROBABILITY = 1e-3
"""Chance that a re-measured pose differing by noise alone is flagged RELOCALIZED."""

NOISE_FLOOR = 1e-6
"""Smallest noise σ assumed per axis (m, rad): below any real sensor's noise."""

MAX_STEP_S = 86_400.0
"""Longest forward step between two samples of one file (s)."""

_MIN_TRIPLES = 10


@dataclass
class TimeOrder:
    """Which samples to keep and what was dropped or flagged (indices into the file's rows)."""

    keep: np.ndarray
    """bool mask of the samples kept."""
    dropped_lines: list[int]
    """File lines of the samples dropped because their stamp repeats."""


def _listed(path: Path, lines: np.ndarray) -> str:
    shown = ", ".join(f"{path}:{int(n)}" for n in lines[:MAX_LISTED])
    more = f" and {lines.size - MAX_LISTED} more" if lines.size > MAX_LISTED else ""
    return shown + more


def order_times(path: Path, lines: np.ndarray, t_ns: np.ndarray, policy: str) -> TimeOrder:
    """Check time order of ``t_ns`` (ns, file order; ``lines``: each sample's file line)
    and resolve repeated stamps by ``policy`` (one of :data:`DUPLICATE_POLICIES`).

    Raises:
        ImportFormatError: a backwards step (every offending line named, up to
            :data:`MAX_LISTED`), a forward step over :data:`MAX_STEP_S`, or a repeated
            stamp under policy ``error``.
    """
    if policy not in DUPLICATE_POLICIES:
        raise ImportFormatError(
            f"unknown duplicates policy {policy!r} (one of {', '.join(DUPLICATE_POLICIES)})"
        )
    dt = np.diff(t_ns)
    back = np.flatnonzero(dt < 0) + 1
    if back.size:
        detail = "; ".join(
            f"line {int(lines[k])} is {(t_ns[k - 1] - t_ns[k]) / 1e9:.9g} s before line "
            f"{int(lines[k - 1])}"
            for k in back[:MAX_LISTED]
        )
        raise ImportFormatError(
            f"{path}:{int(lines[back[0]])}: {back.size} backwards timestamp step(s), at "
            f"{_listed(path, lines[back])} ({detail}); timestamps must not decrease"
        )
    jump = np.flatnonzero(dt > MAX_STEP_S * 1e9) + 1
    if jump.size:
        k = int(jump[0])
        raise ImportFormatError(
            f"{path}:{int(lines[k])}: the timestamp jumps {dt[k - 1] / 86_400e9:.6g} days "
            f"forward from line {int(lines[k - 1])} ({jump.size} such step(s)); one "
            f"recording steps at most {MAX_STEP_S / 86_400:g} day (a stamp in another epoch "
            "or unit?)"
        )
    repeat = np.flatnonzero(dt == 0) + 1
    if repeat.size and policy == "error":
        raise ImportFormatError(
            f"{path}:{int(lines[repeat[0]])}: {repeat.size} duplicate timestamp(s), at "
            f"{_listed(path, lines[repeat])}; use --duplicates first|last to keep one "
            "sample per stamp"
        )
    starts = np.r_[True, dt != 0]
    ends = np.r_[dt != 0, True]
    keep = starts if policy == "first" else ends
    return TimeOrder(keep, [int(n) for n in lines[~keep]])


def _noise_sigma(t_ns: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per-axis noise σ of a sampled signal (N, 3) from its scaled second differences."""
    t = (t_ns - t_ns[0]) / 1e9
    d0, d1 = np.diff(t)[:-1], np.diff(t)[1:]
    ok = (d0 > 0) & (d1 > 0) & np.isfinite(values[:-2]).all(1) & np.isfinite(values[2:]).all(1)
    ok &= np.isfinite(values[1:-1]).all(1)
    if ok.sum() < _MIN_TRIPLES:
        return np.full(values.shape[1], NOISE_FLOOR)
    r = (d1 / d0)[ok]
    # v[k+1] - v[k] - r (v[k] - v[k-1]): zero for linear motion, noise variance (1 + (1+r)² + r²)σ²
    second = (values[2:] - values[1:-1])[ok] - r[:, None] * (values[1:-1] - values[:-2])[ok]
    scaled = second / np.sqrt(1.0 + (1.0 + r) ** 2 + r**2)[:, None]
    med = np.median(scaled, axis=0)
    sigma = 1.4826 * np.median(np.abs(scaled - med), axis=0)
    return np.maximum(sigma, NOISE_FLOOR)


def flag_corrections(
    order: TimeOrder, t_ns: np.ndarray, pos: np.ndarray, quat: np.ndarray, valid: np.ndarray
) -> np.ndarray:
    """Mask of kept poses (policy ``last``) that differ from a pose they replace beyond noise.

    Args:
        order: the result of :func:`order_times` with policy ``last``.
        t_ns, pos, quat, valid: all rows of the file (m, xyzw).
    """
    n = t_ns.size
    flagged = np.zeros(n, dtype=bool)
    dropped = np.flatnonzero(~order.keep)
    if dropped.size == 0:
        return flagged
    kept = np.flatnonzero(order.keep & valid)
    ends = np.flatnonzero(order.keep)
    # the sample that replaces dropped row i is the end of its run: the next kept row
    target = ends[np.searchsorted(ends, dropped)]
    both = valid[dropped] & valid[target]
    dropped, target = dropped[both], target[both]
    if dropped.size == 0:
        return flagged
    # scipy loads only here, where it is used: an import without corrections never pays for it
    from scipy.spatial.transform import Rotation
    from scipy.stats import chi2

    sig_p = _noise_sigma(t_ns[kept], pos[kept])
    rot = Rotation.from_quat(quat[kept])
    steps = (rot[:-1].inv() * rot[1:]).as_rotvec()
    # integrated body-frame increments: their second differences are the rotation noise
    sig_r = _noise_sigma(t_ns[kept], np.vstack([np.zeros(3), np.cumsum(steps, axis=0)]))
    d_p = (pos[target] - pos[dropped]) / (np.sqrt(2.0) * sig_p)
    d_r = (
        Rotation.from_quat(quat[dropped]).inv() * Rotation.from_quat(quat[target])
    ).as_rotvec() / (np.sqrt(2.0) * sig_r)
    limit = chi2.ppf(1.0 - FALSE_FLAG_PROBABILITY, 3)
    beyond = (np.sum(d_p**2, axis=1) > limit) | (np.sum(d_r**2, axis=1) > limit)
    flagged[target[beyond]] = True
    return flagged
