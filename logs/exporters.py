"""Export session streams to plain files: TUM trajectories and CSV tables."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sensorbench.errors import SessionError

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
    """Write stream ``name`` of ``session`` to ``out``.

    Pose streams export to ``tum`` (``t x y z qx qy qz qw``, t in s exact to the ns, values
    as the shortest decimals that read back as the same float64, invalid samples skipped)
    or ``csv`` (every sample with ``valid`` and ``flags``); encoder streams, lidar streams
    (one row per point) and ``events`` export to ``csv``. A stream with
    impossible samples (:mod:`sensorbench.logs.values`: non-finite values in valid
    samples, times stepping back, impossible stamps) is refused, or with
    ``skip_invalid`` exported without them.

    Raises:
        SessionError: no such stream, a format the stream cannot take, or impossible
            samples (without ``skip_invalid``).
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
        kinds = [
            kind
            for kind, names in (
                ("pose", s.pose_names()),
                ("encoder", s.encoder_names()),
                ("lidar", s.lidar_names()),
            )
            if name in names
        ]
        if not kinds:
            streams = s.pose_names() + s.encoder_names() + s.lidar_names() + ["events"]
            raise SessionError(f"{session}: no stream {name!r} (have: {', '.join(streams)})")
        if len(kinds) > 1:
            raise SessionError(
                f"{session}: {' and '.join(kinds)} streams are both called {name!r} "
                "(a file written before names were unique across kinds); export cannot tell "
                "which one you mean"
            )
        if name in s.pose_names():
            batch, skipped = exportable(
                str(session), f"pose/{name}", s.pose(name).read(validate=False),
                skip_invalid=skip_invalid,
            )  # fmt: skip
            if fmt == "tum":
                keep = batch.valid
                header = f"# exported by sensorbench from {Path(session).name}:{name}\n"
                header += "# timestamp tx ty tz qx qy qz qw\n"
                with open(out, "w") as fh:
                    fh.write(header)
                    values = np.hstack([batch.position[keep], batch.quat_xyzw[keep]])
                    for t, row in zip(batch.t_ns[keep].tolist(), values.tolist(), strict=True):
                        sec, ns = divmod(t, 1_000_000_000)
                        # repr: the shortest text that reads back as the same float64, so
                        # UTM-size (georeferenced) coordinates keep every digit
                        fh.write(f"{sec}.{ns:09d} {' '.join(map(repr, row))}\n")
                return Exported(int(keep.sum()), skipped)
            cols = ["t_ns", "x", "y", "z", "qx", "qy", "qz", "qw", "valid", "flags"]
            rows = zip(
                batch.t_ns.tolist(),
                *batch.position.T.tolist(),
                *batch.quat_xyzw.T.tolist(),
                batch.valid.astype(int).tolist(),
                batch.flags.tolist(),
                strict=True,
            )
            return Exported(_write_csv(out, cols, rows), skipped)
        if fmt != "csv":
            raise SessionError(f"stream {name!r} exports to csv only (tum is for pose streams)")
        if name in s.encoder_names():
            b, skipped = exportable(
                str(session), f"encoders/{name}", s.encoder(name).read(validate=False),
                skip_invalid=skip_invalid,
            )  # fmt: skip
            counters = [f"c{k}" for k in range(b.counts.shape[1])]
            cols = ["host_ns", "device_ns", "seq", *counters, "yaw", "yaw_rate"]
            rows = zip(
                b.host_ns.tolist(),
                b.device_ns.tolist(),
                b.seq.tolist(),
                *b.counts.T.tolist(),
                b.yaw.tolist(),
                b.yaw_rate.tolist(),
                strict=True,
            )
            return Exported(_write_csv(out, cols, rows), skipped)
        # the only kind left: lidar
        t, skipped = exportable(
            str(session), f"lidar/{name}", s.lidar(name).read(validate=False),
            skip_invalid=skip_invalid,
        )  # fmt: skip
        turn = np.repeat(np.arange(t.n_turns), t.count)
        cols = ["turn", "t_ns", "angle_rad", "range_m", "intensity"]
        rows = zip(
            turn.tolist(),
            t.t_ns.tolist(),
            t.angle.tolist(),
            t.range.tolist(),
            t.intensity.tolist(),
            strict=True,
        )
        return Exported(_write_csv(out, cols, rows), skipped)


def _write_csv(out: Path, cols: list[str], rows: Iterable[Sequence[object]]) -> int:
    n = 0
    with open(out, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(cols)
        for row in rows:
            writer.writerow(row)
            n += 1
    return n
