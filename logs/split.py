"""Split one session into consecutive pieces ``[t_start, t_end)`` (docs/FORMAT.md, "Pieces
of a session"): concatenating the pieces' streams gives the original streams back."""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import h5py
import numpy as np

from sensorbench.errors import SessionError
from sensorbench.logs.atomic_output import disk_error, link_no_clobber, make_dir, temp_name
from sensorbench.logs.h5_output import guarded_h5
from sensorbench.logs.importers import file_sha256
from sensorbench.logs.reader import open_h5
from sensorbench.logs.schema import GROUPS, FileStatus
from sensorbench.logs.time_window import span_of

MAX_PIECES = 100
"""Most pieces one split writes: each is a complete session file with its own copy of
the constant truth, so 100 pieces of a simulated session take ~20 s and ~270 MB."""


def piece_bounds(
    start: int, end: int, pieces: int | None, every_s: float | None
) -> list[tuple[int, int]]:
    """``[t0, t1)`` bounds (ns) of the pieces of ``[start, end]``: N equal ones or every S s.

    Raises:
        SessionError: not exactly one of ``pieces`` and ``every_s``, a piece shorter
            than 1 ns, a non-finite ``every_s``, or more than :data:`MAX_PIECES` pieces.
    """
    if (pieces is None) == (every_s is None):
        raise SessionError("give exactly one of --pieces N or --every S")
    span_s = (end - start) / 1e9
    if pieces is not None:
        if not 1 <= pieces <= MAX_PIECES:
            raise SessionError(f"--pieces must be 1 to {MAX_PIECES}, got {pieces}")
        edges = [start + round(k * (end - start) / pieces) for k in range(pieces + 1)]
    elif every_s is not None:
        if not (math.isfinite(every_s) and every_s >= 1e-9):
            raise SessionError(f"--every must be a finite time of at least 1 ns, got {every_s} s")
        if span_s / every_s > MAX_PIECES:
            raise SessionError(
                f"--every {every_s:g} s cuts the session's {span_s:.3f} s into more than "
                f"{MAX_PIECES} pieces; choose a longer interval"
            )
        step = round(min(every_s, span_s + 1.0) * 1e9)  # longer than the session: one piece
        edges = [*range(start, end, step), end] if end > start else [start, end]
    edges[-1] = end + 1  # the last piece holds the last sample too
    return [(edges[k], edges[k + 1]) for k in range(len(edges) - 1)]


def _dataset(dst: h5py.Group, name: str, src: h5py.Dataset, data: np.ndarray) -> None:
    """Write ``data`` as ``name`` with ``src``'s dtype, chunking (resizable) and attributes."""
    kwargs = {}
    if src.chunks is not None:
        kwargs = {"chunks": src.chunks, "maxshape": (None, *src.shape[1:])}
    out = dst.create_dataset(name, data=np.asarray(data, dtype=src.dtype), **kwargs)
    out.attrs.update(src.attrs)


def _renumbered(
    index: np.ndarray, keep: np.ndarray, length: str, n_items: int
) -> tuple[np.ndarray, np.ndarray]:
    """The kept rows of a span index (``offset`` and ``length``) with their offsets
    renumbered from 0, and the mask of the ``n_items`` items (points, bytes) they span."""
    items = np.zeros(n_items, bool)  # the spans follow each other from 0 (open_h5 checks)
    items[: int(index[length].sum())] = np.repeat(keep, index[length])
    new = index[keep].copy()
    new["offset"] = np.concatenate([[0], np.cumsum(new[length][:-1], dtype=np.int64)])[: new.size]
    return new, items


_SPANNED = {"lidar": ("turns", "t_first_ns", "count", "t_ns", ("turns", "turn_receive_ns")),
            "raw": ("chunks", "t_ns", "length", "data", ("chunks",))}  # fmt: skip
"""A stream of spans over flat items: its index, the index's time and length columns, a
dataset of one row per item, and the datasets of one row per index row."""


def _spanned(
    kind: str, src: h5py.Group, dst: h5py.Group, t0: int, t1: int
) -> tuple[np.ndarray, np.ndarray]:
    """Copy the lidar turns (raw chunks) whose time lies in ``[t0, t1)`` with the points
    (bytes) they span; returns both masks."""
    index_name, time, length, items, per_row = _SPANNED[kind]
    index = src[index_name][:]
    keep = (index[time] >= t0) & (index[time] < t1)
    new, spanned = _renumbered(index, keep, length, src[items].shape[0])
    for name, ds in src.items():
        data = new if name == index_name else ds[:][keep if name in per_row else spanned]
        _dataset(dst, name, ds, data)
    return keep, spanned


def _truth(
    src: h5py.Group, dst: h5py.Group, t0: int, t1: int, masks: dict[str, np.ndarray]
) -> None:
    """Slice the simulator's truth (docs/SIMULATION.md) like the streams it describes."""

    def walk(name: str, obj: h5py.HLObject) -> None:
        if isinstance(obj, h5py.Group):
            dst.require_group(name).attrs.update(obj.attrs)
            return
        data = obj[()]
        parent, _, leaf = name.rpartition("/")
        keep, clock = None, None  # clock: the times (ns) of its rows
        if parent == "pose":
            clock = "pose/t_ns"
        elif parent.startswith("lidar/") and leaf.startswith("turn_") and leaf != "turn_index":
            clock = f"{parent}/turn_t_start_ns"
        elif parent.startswith("lidar/"):
            stream = parent.split("/", 1)[1]
            keep = masks.get(f"lidar/{stream}/{'turns' if leaf == 'turn_index' else 'points'}")
        elif parent == "pods" and leaf in ("true_distance_m", "measured_distance_m",
                                           "gyro_bias_rad_s"):  # fmt: skip
            keep = masks.get("encoders/pods")
        elif parent == "pose_sensor" and leaf in ("error", "gm"):
            keep = masks.get("pose_sensor")
        elif parent == "pose_sensor":
            clock = "pose_sensor/reloc_t_ns"
        elif name == "mocap/occlusion_ns":
            keep = (data[:, 1] > t0) & (data[:, 0] < t1) if data.size else np.zeros(0, bool)
        if clock is not None:
            t = src[clock][()]
            keep = (t >= t0) & (t < t1)
        if keep is not None and (np.ndim(data) == 0 or len(keep) != len(data)):
            raise SessionError(f"truth {name!r}: {np.shape(data)} does not match its stream")
        out = dst.require_group(parent) if parent else dst
        _dataset(out, leaf, obj, data if keep is None else data[keep])

    src.visititems(walk)


def split_session(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    pieces: int | None = None,
    every_s: float | None = None,
) -> list[Path]:
    """Write the pieces of session ``path`` into ``out_dir`` as ``STEM_pieceK.h5``, all of
    them or (a full disk) none.

    Raises:
        SessionError: the session is still being written (check it first), an output
            exists, or the request is malformed.
        OutputError: a piece cannot be written (full or read-only disk).
    """
    src_path = Path(path)
    out_dir = Path(out_dir)
    temps: list[Path] = []
    try:
        return _split(src_path, out_dir, pieces, every_s, temps)
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)


def _split(
    src_path: Path, out_dir: Path, pieces: int | None, every_s: float | None, temps: list[Path]
) -> list[Path]:
    with open_h5(src_path) as f:
        status = int(f["_status"][0])
        if status == FileStatus.WRITING:
            raise SessionError(
                f"{src_path}: still open for writing (or its writer died); run check first"
            )
        start, end = span_of(f)
        bounds = piece_bounds(start, end, pieces, every_s)
        names = [out_dir / f"{src_path.stem}_piece{k + 1}.h5" for k in range(len(bounds))]
        for n in names:
            if os.path.lexists(n):  # a dangling link too: never replaced
                raise SessionError(f"{n} exists; choose another directory or remove it")
        make_dir(out_dir, "nothing was written")  # once the session is known to be one
        digest = file_sha256(src_path)
        pose_sensor = [n for n, g in f["pose"].items() if g.attrs.get("kind") == "pose_sensor"]
        for k, ((b0, b1), dst_path) in enumerate(zip(bounds, names, strict=True)):
            # what lies outside the streams' span (a stop event, truth beyond the last
            # sample) goes to the first or last piece
            t0 = b0 if k > 0 else int(np.iinfo(np.int64).min)
            t1 = b1 if k < len(bounds) - 1 else int(np.iinfo(np.int64).max)
            temps.append(temp_name(dst_path))
            with guarded_h5(temps[-1], shown=dst_path) as g:
                g.attrs.update(f.attrs)
                g.attrs.update(split_source=src_path.name, split_source_sha256=digest,
                               split_piece=k + 1, split_pieces=len(bounds), split_t_start_ns=b0,
                               split_t_end_ns=b1)  # fmt: skip
                g.create_dataset("_status", data=np.array([FileStatus.CLOSED], "u1"))
                ev = f["events"][:]
                _dataset(g, "events", f["events"], ev[(ev["t_ns"] >= t0) & (ev["t_ns"] < t1)])
                masks: dict[str, np.ndarray] = {}
                for group in GROUPS.values():
                    out = g.create_group(group)
                    out.attrs.update(f[group].attrs)
                    for name, s in f[group].items():
                        d = out.create_group(name)
                        d.attrs.update(s.attrs)
                        if group in _SPANNED:  # the masks of a lidar's turns and points
                            spans = _spanned(group, s, d, t0, t1)
                            masks[f"{group}/{name}/turns"], masks[f"{group}/{name}/points"] = spans
                        else:
                            t = s["host_ns" if group == "encoders" else "t_ns"][:]
                            keep = (t >= t0) & (t < t1)
                            for col, ds in s.items():
                                _dataset(d, col, ds, ds[:][keep])
                            masks[f"{group}/{name}"] = keep
                            if name in pose_sensor[:1]:
                                masks["pose_sensor"] = keep
                truth = g.create_group("truth")
                truth.attrs.update(f["truth"].attrs)
                _truth(f["truth"], truth, t0, t1, masks)
    written: list[Path] = []
    try:
        for tmp, dst_path in zip(temps, names, strict=True):
            link_no_clobber(tmp, dst_path)
            written.append(dst_path)
    except BaseException as exc:
        for done in written:  # ours, made a moment ago: all pieces or none
            with contextlib.suppress(OSError):
                done.unlink()
        raise disk_error(exc, out_dir, "no piece was written") from exc
    return written
