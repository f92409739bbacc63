"""A session's time origin, its **start** (the earliest sample time of any stream), and the
``--t-start/--t-end`` windows (s) measured from it."""

from __future__ import annotations

import os

import h5py
import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.reader import open_h5
from sensorbench.logs.values import stamp_problems


def span_of(f: h5py.File) -> tuple[int, int]:
    """(first, last) sample time (ns) over every stream of an open session file."""
    times = [g["t_ns"] for g in f["lidar"].values()]
    times += [g["host_ns"] for g in f["encoders"].values()]
    times += [g["t_ns"] for g in f["pose"].values()]
    every = [g["chunks"][:]["t_ns"] for g in f["raw"].values()]
    for ds in times:
        every.append(ds[:])
        problems = stamp_problems(ds.name.lstrip("/"), every[-1])[0]
        if problems:
            raise SessionError(
                f"{f.filename}: {problems[0]}; the session has no usable time span "
                f"(`sensorbench check {f.filename}` lists every problem)"
            )
    ends = np.array([(t.min(), t.max()) for t in every if t.size], np.int64).reshape(-1, 2)
    if not ends.size:
        raise SessionError(f"{f.filename}: no samples in any stream")
    return int(ends[:, 0].min()), int(ends[:, 1].max())


def session_span_ns(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(start, end) of a session: its earliest and latest sample time (ns)."""
    with open_h5(path) as f:
        return span_of(f)


def window_ns(
    path: str | os.PathLike[str], t_start_s: float | None, t_end_s: float | None
) -> tuple[int | None, int | None]:
    """``[t0, t1)`` in the session's own ns for a window in s from its start (None: open).

    Raises:
        SessionError: a non-finite bound, an end not after the start, or a window
            that holds none of the session (naming its length).
    """
    if t_start_s is None and t_end_s is None:
        return None, None
    for name, v in (("--t-start", t_start_s), ("--t-end", t_end_s)):
        if v is not None and not np.isfinite(v):
            raise SessionError(f"{name} must be finite, got {v}")
    if t_start_s is not None and t_end_s is not None and t_end_s <= t_start_s:
        raise SessionError(f"--t-end {t_end_s} s must be after --t-start {t_start_s} s")
    start, end = session_span_ns(path)
    t0 = None if t_start_s is None else start + round(t_start_s * 1e9)
    t1 = None if t_end_s is None else start + round(t_end_s * 1e9)
    if (t0 is not None and t0 > end) or (t1 is not None and t1 <= start):
        raise SessionError(
            f"{path}: the window [{t_start_s}, {t_end_s}] s holds no data; the session runs "
            f"{(end - start) / 1e9:.3f} s from its start"
        )
    return t0, t1
