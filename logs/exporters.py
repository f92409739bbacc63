"""Export session streams to plain files: TUM trajectories and CSV tables."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from sensorbench.errors import SessionError

if TYPE_CHECKING:
    from sensorbench.logs import EncoderBatch, LidarTurns, PoseBatch
    from sensorbench.logs.reader import Session

FORMATS = ("tum", "csv")


class Exported(NamedTuple):
    """What an export wrote."""

    rows: int
    """Rows written."""
    skipped: int
    """Impossible samples left out (``skip_invalid``; lidar: whole turns)."""


def export_stream(
    session: str | os.PathLike[str],
    name: str,
    fmt: str,
    out: str | os.PathLike[str],
    *,
    skip_invalid: bool = False,
) -> Exported:
    """Write stream ``name`` of ``session`` to ``out``: a pose stream as ``tum`` (valid
    samples; t in s exact to the ns, values as the shortest decimals that read back as the
    same float64) or ``csv``; encoder, lidar (one row per point) and ``events`` as ``csv``.

    Raises:
        SessionError: no such stream, a format the stream cannot take, or impossible
            samples (without ``skip_invalid``, which leaves them out and counts them).
    """
    from sensorbench.logs.reader import Session  # h5py: loaded when a command runs
    from sensorbench.logs.values import exportable

    if fmt not in FORMATS:
        raise SessionError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    out = Path(out)
    with Session(session) as s:
        if name == "events":
            ev = s.events()
            if fmt != "csv":
                raise SessionError("events export to csv only (tum is for pose streams)")
            rows = ((e.t_ns, e.source, e.kind, e.message) for e in ev)
            return Exported(_write_csv(out, ["t_ns", "source", "kind", "message"], rows), 0)
        kind = _stream_kind(s, str(session), name)
        if fmt == "tum" and kind != "pose":
            raise SessionError(f"stream {name!r} exports to csv only (tum is for pose streams)")
        stream: Any = {"pose": s.pose, "encoder": s.encoder, "lidar": s.lidar}[kind](name)
        group = "encoders" if kind == "encoder" else kind
        batch, dropped = exportable(
            str(session), f"{group}/{name}", stream.read(validate=False), skip_invalid=skip_invalid
        )
        skipped = int(dropped.sum())
        if fmt == "tum":
            return Exported(_write_tum(out, f"{Path(session).name}:{name}", batch), skipped)
        table: Any = {"pose": _pose_table, "encoder": _encoder_table, "lidar": _lidar_table}[kind]
        cols, rows = table(batch)
        return Exported(_write_csv(out, cols, rows), skipped)


def _stream_kind(s: Session, session: str, name: str) -> str:
    """``pose``, ``encoder`` or ``lidar``: the kind of stream ``name``; SessionError when
    there is none or more than one of that name."""
    names = {"pose": s.pose_names(), "encoder": s.encoder_names(), "lidar": s.lidar_names()}
    kinds = [kind for kind, have in names.items() if name in have]
    if not kinds:
        streams = [n for have in names.values() for n in have] + ["events"]
        raise SessionError(f"{session}: no stream {name!r} (have: {', '.join(streams)})")
    if len(kinds) > 1:
        raise SessionError(
            f"{session}: {' and '.join(kinds)} streams are both called {name!r} "
            "(a file written before names were unique across kinds); export cannot tell "
            "which one you mean"
        )
    return kinds[0]


def _write_tum(out: Path, source: str, batch: PoseBatch) -> int:
    """The valid poses of ``batch`` as a TUM file; returns the rows written."""
    keep = batch.valid
    with open(out, "w") as fh:
        fh.write(f"# exported by sensorbench from {source}\n# timestamp tx ty tz qx qy qz qw\n")
        values = np.hstack([batch.position[keep], batch.quat_xyzw[keep]])
        for t, row in zip(batch.t_ns[keep].tolist(), values.tolist(), strict=True):
            sec, ns = divmod(abs(t), 1_000_000_000)  # of |t|: divmod floors a negative t
            # repr: the shortest text that reads back as the same float64, so
            # UTM-size (georeferenced) coordinates keep every digit
            fh.write(f"{'-' if t < 0 else ''}{sec}.{ns:09d} {' '.join(map(repr, row))}\n")
    return int(keep.sum())


def _pose_table(b: PoseBatch) -> tuple[list[str], Iterable[Sequence[object]]]:
    cols = ["t_ns", "x", "y", "z", "qx", "qy", "qz", "qw", "valid", "flags"]
    return cols, zip(b.t_ns.tolist(), *b.position.T.tolist(), *b.quat_xyzw.T.tolist(),
                     b.valid.astype(int).tolist(), b.flags.tolist(), strict=True)  # fmt: skip


def _encoder_table(b: EncoderBatch) -> tuple[list[str], Iterable[Sequence[object]]]:
    counters = [f"c{k}" for k in range(b.counts.shape[1])]
    cols = ["host_ns", "device_ns", "seq", *counters, "yaw", "yaw_rate"]
    return cols, zip(b.host_ns.tolist(), b.device_ns.tolist(), b.seq.tolist(), *b.counts.T.tolist(),
                     b.yaw.tolist(), b.yaw_rate.tolist(), strict=True)  # fmt: skip


def _lidar_table(t: LidarTurns) -> tuple[list[str], Iterable[Sequence[object]]]:
    turn = np.repeat(np.arange(t.n_turns), t.count)
    cols = ["turn", "t_ns", "angle_rad", "range_m", "intensity"]
    return cols, zip(
        turn.tolist(), t.t_ns.tolist(), t.angle.tolist(), t.range.tolist(), t.intensity.tolist(),
        strict=True,
    )  # fmt: skip


def _write_csv(out: Path, cols: list[str], rows: Iterable[Sequence[object]]) -> int:
    n = 0
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(cols)
        for row in rows:
            writer.writerow(row)
            n += 1
    return n
