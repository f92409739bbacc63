"""From session files (or two pose tracks) to aligned, segmented pose-error series.

``load_tracks(path, sensor, reference)`` reads two pose streams of a session through
:class:`sensorbench.logs.Session` (times converted from int64 ns to s relative to the
reference's first sample; flags kept). ``error_series(sensor, reference, ...)``
runs time/frame alignment (:mod:`pose_align`), computes the per-axis error and
segments it at relocalizations (:mod:`reloc_segments`); a RELOCALIZED flag on a
sample dropped by the association moves to the next kept sample.
``prepare_sessions(paths, ...)`` does the same for a campaign, with one frame
transform for all of its sessions; ``fit_prepared`` fits the error model over them
and records where every input came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.characterize.pose_align import (
    ERROR_FRAME,
    Alignment,
    PoseTrack,
    align_sessions,
    pose_errors,
)
from sensorbench.characterize.pose_error import (
    FitOptions,
    PoseErrorModel,
    file_sha256,
    fit_pose_error,
)
from sensorbench.characterize.pose_series import ErrorSeries
from sensorbench.characterize.reloc_segments import RELOCALIZED_FLAG, Segmentation, segment
from sensorbench.errors import FitError, SessionError


@dataclass
class PreparedSession:
    """One session ready for the fit, with how it was prepared."""

    series: ErrorSeries
    alignment: Alignment
    segmentation: Segmentation
    source: str

    def to_dict(self) -> dict:
        """JSON-ready description (alignment, segmentation, sizes)."""
        return {
            "name": self.series.name,
            "source": self.source,
            "n_samples": self.series.n,
            "duration_s": self.series.duration_s,
            "alignment": self.alignment.to_dict(),
            "segmentation": self.segmentation.to_dict(),
            "error_frame": ERROR_FRAME,
        }


def error_series(
    sensor: PoseTrack,
    reference: PoseTrack,
    name: str = "session",
    mode: str = "se3",
    offset_s: float | None = None,
    max_offset_s: float = 0.5,
    max_gap_s: float = 0.1,
    source: str = "",
) -> PreparedSession:
    """Align ``sensor`` to ``reference``, compute the error and segment it."""
    al = align_sessions([(sensor, reference)], mode, offset_s, max_offset_s, max_gap_s)[0]
    return _segmented(sensor, reference, al, name, max_gap_s, source)


def _segmented(
    sensor: PoseTrack,
    reference: PoseTrack,
    al: Alignment,
    name: str,
    max_gap_s: float,
    source: str,
) -> PreparedSession:
    t, e, idx = pose_errors(sensor, reference, al, max_gap_s)
    if t.size < 10:
        raise FitError(f"{name}: only {t.size} sensor poses overlap the reference")
    flags = None
    valid = sensor.only_valid()
    if valid.flags is not None:
        seg_all = np.cumsum((valid.flags & RELOCALIZED_FLAG) > 0)
        kept = seg_all[idx]
        flags = np.zeros(idx.size, dtype=np.uint8)
        flags[1:][np.diff(kept) > 0] = RELOCALIZED_FLAG
    seg = segment(t, e, flags)
    series = ErrorSeries(t, e, seg.reloc, name=name)
    return PreparedSession(series, al, seg, source)


def load_tracks(
    path: str | Path, sensor: str, reference: str = "mocap"
) -> tuple[PoseTrack, PoseTrack]:
    """Read the sensor and reference pose streams of a session file."""
    from sensorbench.logs import Session

    with Session(path) as s:
        names = s.pose_names()
        for n in (sensor, reference):
            if n not in names:
                raise SessionError(
                    f"{path}: no pose stream {n!r} (streams: {', '.join(names) or 'none'}); "
                    "use --sensor/--reference with one of them"
                )
        bs = s.pose(sensor).read()
        br = s.pose(reference).read()
    if len(br.t_ns) < 3 or len(bs.t_ns) < 3:
        raise SessionError(f"{path}: pose streams {sensor!r}/{reference!r} have < 3 samples")
    t0 = int(br.t_ns[0])
    ref = PoseTrack((br.t_ns - t0) * 1e-9, br.position, br.quat_xyzw, br.valid, br.flags, reference)
    sen = PoseTrack((bs.t_ns - t0) * 1e-9, bs.position, bs.quat_xyzw, bs.valid, bs.flags, sensor)
    return sen, ref


def prepare_sessions(
    paths: list[str | Path],
    sensor: str,
    reference: str = "mocap",
    mode: str = "se3",
    max_offset_s: float = 0.5,
    offset_s: float | None = None,
    joint: bool = True,
    max_gap_s: float = 0.1,
) -> list[PreparedSession]:
    """Prepare a campaign: one frame transform for all sessions (``joint``), or one each.

    Session names are the file stems, made unique with ``#i`` where two collide.
    """
    tracks = [load_tracks(p, sensor, reference) for p in paths]
    if joint:
        alignments = align_sessions(tracks, mode, offset_s, max_offset_s, max_gap_s)
    else:
        alignments = [
            align_sessions([tr], mode, offset_s, max_offset_s, max_gap_s)[0] for tr in tracks
        ]
    stems = [Path(p).stem for p in paths]
    names = [f"{s}#{i}" if stems.count(s) > 1 else s for i, s in enumerate(stems)]
    return [
        _segmented(sen, ref, al, name, max_gap_s, str(p))
        for (sen, ref), al, name, p in zip(tracks, alignments, names, paths, strict=True)
    ]


def fit_prepared(
    prepared: list[PreparedSession],
    sensor: str,
    reference: str,
    options: FitOptions | None = None,
) -> PoseErrorModel:
    """Fit the pose-error model over prepared sessions (:func:`fit_pose_error`).

    The model's provenance records every input file (resolved path, SHA-256, samples
    used) and each session's alignment and segmentation.
    """
    return fit_pose_error(
        [ps.series for ps in prepared],
        options or FitOptions(),
        sensor=sensor,
        reference=reference,
        frame=ERROR_FRAME,
        inputs=[
            {
                "path": str(Path(ps.source).resolve()),
                "sha256": file_sha256(ps.source),
                "n_samples": ps.series.n,
            }
            for ps in prepared
        ],
        extra_provenance={
            "alignment": {ps.series.name: ps.alignment.to_dict() for ps in prepared},
            "segmentation": {ps.series.name: ps.segmentation.to_dict() for ps in prepared},
        },
    )
