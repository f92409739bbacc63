"""Session summaries: streams, counts, rates, time span, gaps and device metadata."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.logs.reader import Session
from sensorbench.logs.values import Problem, encoder_problems, lidar_problems, pose_problems


def _timing(t_ns: np.ndarray) -> dict[str, Any]:
    """Span, mean rate and gaps of a sorted host-time array (ns)."""
    out: dict[str, Any] = {"count": int(t_ns.size)}
    if t_ns.size == 0:
        return out
    span = float(t_ns[-1] - t_ns[0]) / 1e9
    out.update(t_first_ns=int(t_ns[0]), t_last_ns=int(t_ns[-1]), span_s=span)
    if t_ns.size >= 2:
        dt = np.diff(t_ns).astype(np.float64) / 1e9
        median = float(np.median(dt))
        out["rate_hz"] = (t_ns.size - 1) / span if span > 0 else float("inf")
        out["max_gap_s"] = float(dt.max())
        out["gaps_over_3x_median"] = int(np.count_nonzero(dt > 3 * median)) if median > 0 else 0
    return out


def session_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Everything ``sensorbench info`` shows, as a JSON-ready dict; ``problems`` lists the
    impossible samples of every stream, so a span or rate from a bad stamp is flagged.

    Raises:
        SessionError: not a session, or its layout is damaged (the file and datasets named).
    """
    path = Path(path)
    problems: list[Problem] = []
    with Session(path) as s:
        root = s.attrs
        info: dict[str, Any] = {
            "path": str(path),
            "size_bytes": path.stat().st_size,
            "status": s.status.name.lower(),
            "label": s.label,
            "schema_version": int(root["schema_version"]),
            "software_version": root.get("software_version"),
            "created_utc": root.get("created_utc"),
            "streams": [],
        }
        def add(kind: str, name: str, st: Any, t_ns: np.ndarray, rows: str, **extra: Any) -> None:
            """A stream's entry: its timing, ``rows`` its count of stamps, then ``extra``."""
            entry = {"kind": kind, "name": name, **_timing(t_ns)}
            entry[rows] = entry.pop("count")
            info["streams"].append({**entry, **extra, "attrs": st.attrs})

        for name in s.lidar_names():
            st = s.lidar(name)
            index = st.read_index()
            problems += lidar_problems(f"lidar/{name}", st.read(validate=False))[0]
            per_turn = {}
            if len(index):  # the median of no turns is nan and a numpy warning
                per_turn["points_per_turn_median"] = float(np.median(index["count"]))
            add("lidar", name, st, index["t_first_ns"], "turns", points=st.n_points, **per_turn)
        for name in s.raw_names():
            st = s.raw(name)
            add("raw", name, st, st.chunk_times_ns, "chunks", bytes=st.n_bytes)
        for name in s.encoder_names():
            st = s.encoder(name)
            batch = st.read(validate=False)
            problems += encoder_problems(f"encoders/{name}", batch)[0]
            add("encoder", name, st, batch.host_ns, "count", counters=st.n_counts,
                has_imu=bool(np.isfinite(batch.yaw_rate).any()))  # fmt: skip
        for name in s.pose_names():
            st = s.pose(name)
            batch = st.read(validate=False)
            problems += pose_problems(f"pose/{name}", batch)[0]
            valid = float(batch.valid.mean()) if len(batch) else 0.0
            relocs = int(np.count_nonzero(batch.flags & 1))
            add("pose", name, st, batch.t_ns, "count", valid_fraction=valid, relocalizations=relocs)
        events = s.events()
        info["events"] = dict(Counter(e.kind for e in events))
        info["truth"] = s.truth_names()
    info["problems"] = [str(p) for p in problems]
    return info
