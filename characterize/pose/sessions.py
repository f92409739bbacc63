"""From session files (or two pose tracks) to aligned, segmented pose-error series.

``load_tracks(path, sensor, reference)`` reads two pose streams of a session through
:class:`sensorbench.logs.Session` (times converted from int64 ns to s relative to the
reference's first sample; flags kept). ``error_series(sensor, reference, ...)``
runs time/frame alignment (:mod:`align`), computes the per-axis error and
segments it at relocalizations (:mod:`reloc_segments`); a RELOCALIZED flag on a
sample dropped by the association moves to the next kept sample.
``prepare_sessions(paths, ...)`` does the same for a campaign, with one frame
transform for all of its sessions; ``fit_prepared`` fits the error model over them
and records where every input came from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from sensorbench.characterize.pose.align import (
    ERROR_FRAME,
    Alignment,
    PoseTrack,
    align_sessions,
    estimate_time_offset,
    pose_errors,
)
from sensorbench.characterize.pose.error_model import (
    FitOptions,
    PoseErrorModel,
    Progress,
    fit_pose_error,
)
from sensorbench.characterize.pose.frames import (
    FRAME_ALPHA,
    FrameCheck,
    frame_statistics,
    loo_frame_statistics,
    mean_variance,
)
from sensorbench.characterize.pose.reloc_segments import (
    RELOCALIZED_FLAG,
    Segmentation,
    detect_jumps,
    segment,
    unstable_detections,
)
from sensorbench.characterize.pose.series import ErrorSeries
from sensorbench.characterize.pose.trajectory_error import TrajectoryError, trajectory_error
from sensorbench.errors import FitError, SessionError
from sensorbench.logs.model_file import file_sha256

TIME_ORIGIN = "s from the session start (its earliest sample of any stream)"
"""The origin of every time in the fit's JSON, model file and figures."""


@dataclass
class PreparedSession:
    """One session ready for the fit, with how it was prepared."""

    series: ErrorSeries
    alignment: Alignment
    segmentation: Segmentation
    source: str
    sensor_position: np.ndarray | None = None  # (N, 3) m, sensor frame, at the series' samples
    trajectory: TrajectoryError | None = None
    """ATE and RPE as evo computes them (:mod:`trajectory_error`)."""
    alignment_scope: str = "session"
    """``session`` (its own transform), ``campaign`` (one for all sessions) or ``none``."""
    campaign_sessions: int = 1
    """Sessions the transform was fitted to."""

    @property
    def offset_sigma_s(self) -> float:
        """The time offset's standard error (s) where it was estimated, else nan."""
        return float(self.segmentation.offset_sigma_s)

    def alignment_used(self) -> str:
        """The alignment in words, e.g. ``se3, one transform for 3 sessions (campaign)``."""
        al = self.alignment
        if al.mode == "none":
            return "none (the sensor reports in the reference frame)"
        if self.alignment_scope == "campaign":
            scope = f"one transform for {self.campaign_sessions} session(s) (campaign)"
        else:
            scope = "this session's own transform"
        return f"{al.mode}, {scope}"

    def to_dict(self) -> dict:
        """JSON-ready description (alignment, time offset, ATE/RPE, segmentation, sizes)."""
        al = self.alignment
        return {
            "name": self.series.name,
            "source": self.source,
            "n_samples": self.series.n,
            "duration_s": self.series.duration_s,
            "alignment": al.to_dict(),
            "alignment_used": self.alignment_used(),
            "time_offset": {
                "offset_s": al.offset_s,
                "sigma_s": self.offset_sigma_s,
                "method": al.time_offset_method,
                "rate_window_s": al.rate_window_s,
                "reference_max_gap_s": al.max_gap_s,
            },
            "trajectory_error": None if self.trajectory is None else self.trajectory.to_dict(),
            "segmentation": self.segmentation.to_dict(),
            "error_frame": ERROR_FRAME,
            "time_origin": TIME_ORIGIN,
        }


def error_series(
    sensor: PoseTrack,
    reference: PoseTrack,
    name: str = "session",
    mode: str = "se3",
    offset_s: float | None = None,
    max_offset_s: float = 0.5,
    max_gap_s: float | None = None,
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
    max_gap_s: float | None,
    source: str,
    seg: Segmentation | None = None,
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
    if seg is None or seg.reloc.size != t.size:
        seg = segment(t, e, flags)
    series = ErrorSeries(t, e, seg.reloc, name=name)
    te = trajectory_error(sensor, reference, al, max_gap_s)
    return PreparedSession(series, al, seg, source, valid.position[idx], te)


def load_tracks(
    path: str | Path,
    sensor: str,
    reference: str = "mocap",
    t_start_s: float | None = None,
    t_end_s: float | None = None,
) -> tuple[PoseTrack, PoseTrack]:
    """Read the sensor and reference pose streams of a session file.

    Track times are in s from the session start (its earliest sample of any stream,
    :mod:`sensorbench.logs.time_window`), the one origin of every output; only
    samples inside ``[t_start_s, t_end_s)`` (s from that start; None: open) are read.
    """
    from sensorbench.logs import Session
    from sensorbench.logs.time_window import session_span_ns, window_ns

    w0, w1 = window_ns(path, t_start_s, t_end_s)
    origin = session_span_ns(path)[0]
    with Session(path) as s:
        names = s.pose_names()
        for n in (sensor, reference):
            if n not in names:
                raise SessionError(
                    f"{path}: no pose stream {n!r} (streams: {', '.join(names) or 'none'}); "
                    "use --sensor/--reference with one of them"
                )
        bs = s.pose(sensor).read(w0, w1)
        br = s.pose(reference).read(w0, w1)
    if len(br.t_ns) < 3 or len(bs.t_ns) < 3:
        window = "" if w0 is None and w1 is None else " in the --t-start/--t-end window"
        raise SessionError(
            f"{path}: pose streams {sensor!r}/{reference!r} have < 3 samples{window}"
        )
    t0 = origin
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
    max_gap_s: float | None = None,
    t_start_s: float | None = None,
    t_end_s: float | None = None,
) -> list[PreparedSession]:
    """Prepare a campaign: one frame transform for all sessions (``joint``), or one each.

    Session names are the file stems, made unique with ``#i`` where two collide; only
    the samples in ``[t_start_s, t_end_s)`` of each session (s from its start) are used.
    """
    tracks = [load_tracks(p, sensor, reference, t_start_s, t_end_s) for p in paths]
    if joint:
        alignments = align_sessions(tracks, mode, offset_s, max_offset_s, max_gap_s)
    else:
        alignments = [
            align_sessions([tr], mode, offset_s, max_offset_s, max_gap_s)[0] for tr in tracks
        ]
    names = session_names(paths)
    scope = "none" if mode == "none" else ("campaign" if joint and len(paths) > 1 else "session")
    return [
        replace(
            _segmented(sen, ref, al, name, max_gap_s, str(p)),
            alignment_scope=scope,
            campaign_sessions=len(paths) if scope == "campaign" else 1,
        )
        for (sen, ref), al, name, p in zip(tracks, alignments, names, paths, strict=True)
    ]


def session_names(paths: list[str | Path]) -> list[str]:
    """Session names: the file stems, made unique with ``#i`` where two collide."""
    stems = [Path(p).stem for p in paths]
    return [f"{s}#{i}" if stems.count(s) > 1 else s for i, s in enumerate(stems)]


def fit_prepared(
    prepared: list[PreparedSession],
    sensor: str,
    reference: str,
    options: FitOptions | None = None,
    progress: Progress | None = None,
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
            "time_origin": TIME_ORIGIN,
        },
        progress=progress,
    )


ALIGN_MODES = ("campaign", "session", "none")
"""``--align``: one transform for all sessions, one per session, or none."""


def prepare_campaign(
    tracks: list[tuple[PoseTrack, PoseTrack]],
    names: list[str],
    sources: list[str] | None = None,
    align: str = "campaign",
    planar: bool = False,
    offset_s: float | None = None,
    max_offset_s: float = 0.5,
    max_gap_s: float | None = None,
    frame_alpha: float = FRAME_ALPHA,
) -> tuple[list[PreparedSession], FrameCheck | None]:
    """Align, compute and segment the error of every session; check their frames.

    ``align``: ``"campaign"`` (one transform for all sessions; then sessions in another
    map are found by :func:`frames.frame_statistics`, removed one at a time, worst
    first, and the rest re-aligned without them), ``"session"`` (one transform each)
    or ``"none"``. Returns the prepared sessions (those in the campaign's map, in
    input order) and the frame check (None unless ``"campaign"`` with ≥ 2 sessions).
    Time offsets are estimated once per session (unless ``offset_s`` is given), and
    relocalizations are segmented on each session's error under its own alignment
    (a session in another map, pulling the shared alignment, must not change where
    the others' steps are found).
    """
    if align not in ALIGN_MODES:
        raise FitError(f"unknown --align {align!r} (campaign, session or none)")
    sources = sources or [""] * len(tracks)
    mode = "none" if align == "none" else ("planar" if planar else "se3")
    own = [align_sessions([tr], mode, offset_s, max_offset_s, max_gap_s)[0] for tr in tracks]
    alone = [
        _segmented(sen, ref, al, n, max_gap_s, src)
        for (sen, ref), al, n, src in zip(tracks, own, names, sources, strict=True)
    ]
    if offset_s is None:
        for (sen, ref), ps in zip(tracks, alone, strict=True):
            _mark_unstable(sen, ref, ps, max_offset_s, max_gap_s)
    if align != "campaign" or len(tracks) < 2:
        scope = "none" if align == "none" else "session"
        return [replace(ps, alignment_scope=scope) for ps in alone], None
    offsets: list[float | None] = [al.offset_s for al in own]
    keep = list(range(len(tracks)))
    excluded: list[str] = []
    while True:
        joint = align_sessions(
            [tracks[i] for i in keep], mode, [offsets[i] for i in keep], max_offset_s, max_gap_s
        )
        joint = [
            replace(
                j,
                time_offset_method=own[i].time_offset_method,
                rate_correlation=own[i].rate_correlation,
                rate_window_s=own[i].rate_window_s,
            )
            for i, j in zip(keep, joint, strict=True)
        ]
        prepared = [
            _segmented(*tracks[i], al, names[i], max_gap_s, sources[i], alone[i].segmentation)
            for i, al in zip(keep, joint, strict=True)
        ]
        check = frame_statistics([p.series for p in prepared], frame_alpha, len(tracks))
        if not check.testable and len(keep) >= 3:
            check = _loo_check(
                tracks, keep, offsets, own, alone, names, mode, max_gap_s, frame_alpha
            )
        if not check.testable or len(keep) <= 2:
            break
        worst = int(np.nanargmax(check.statistic))  # p-values underflow to 0 for gross shifts
        if not check.p_value[worst] < check.level:
            break
        excluded.append(names[keep[worst]])
        keep.pop(worst)
    check.excluded = excluded
    prepared = [
        replace(p, alignment_scope="campaign", campaign_sessions=len(keep)) for p in prepared
    ]
    for i, al in enumerate(own):
        ref_al = joint[0]
        centre = tracks[i][0].only_valid().position.mean(axis=0)
        shift = (al.rotation @ centre + al.translation) - (
            ref_al.rotation @ centre + ref_al.translation
        )
        angle = Rotation.from_matrix(al.rotation @ ref_al.rotation.T).magnitude()
        check.own_alignment[names[i]] = {
            "translation_m": float(np.linalg.norm(shift)),
            "rotation_deg": float(np.degrees(angle)),
        }
    return prepared, check


def _loo_check(
    tracks: list[tuple[PoseTrack, PoseTrack]],
    keep: list[int],
    offsets: list[float | None],
    own: list[Alignment],
    alone: list[PreparedSession],
    names: list[str],
    mode: str,
    max_gap_s: float | None,
    frame_alpha: float,
) -> FrameCheck:
    """Frame check with each kept session held out of the alignment (``loo_frame_statistics``)."""
    params = fit_pose_error([alone[i].series for i in keep]).params_array()
    held, allowed = [], []
    for i in keep:
        rest = [j for j in keep if j != i]
        joint = align_sessions(
            [tracks[j] for j in rest], mode, [offsets[j] for j in rest], max_gap_s=max_gap_s
        )
        al_i = replace(joint[0], offset_s=own[i].offset_s)
        held.append(
            _segmented(*tracks[i], al_i, names[i], max_gap_s, "", alone[i].segmentation).series
        )
        allowed.append(mean_variance(alone[i].series, params) * (1.0 + 1.0 / len(rest)))
    return loo_frame_statistics(held, np.array(allowed), frame_alpha, len(tracks))


def offset_sigma(sensor: PoseTrack, reference: PoseTrack, max_offset_s: float) -> float:
    """Standard error (s) of the time offset: from the estimates on the two halves.

    The halves' estimates differ by ``√2 σ_half`` on average and the whole recording's
    has ``σ_half / √2``, so ``σ ≈ |o₁ − o₂| / 2`` (one degree of freedom: a rough
    figure, floored at the 1-ms search step).
    """
    s = sensor.only_valid()
    mid = 0.5 * (s.t_s[0] + s.t_s[-1])
    halves = []
    for keep in (s.t_s <= mid, s.t_s > mid):
        part = PoseTrack(
            s.t_s[keep],
            s.position[keep],
            s.quat_xyzw[keep],
            None,
            None if s.flags is None else s.flags[keep],
            s.name,
        )
        try:
            halves.append(estimate_time_offset(part, reference, max_offset_s)[0])
        except FitError:
            return float("nan")
    return max(abs(halves[0] - halves[1]) / 2.0, 1e-3)


def _mark_unstable(
    sensor: PoseTrack,
    reference: PoseTrack,
    ps: PreparedSession,
    max_offset_s: float,
    max_gap_s: float | None,
) -> None:
    """Record in ``ps.segmentation`` the detections that move when the offset moves by ±2σ."""
    seg = ps.segmentation
    if seg.method == "flags":
        return
    sigma = offset_sigma(sensor, reference, max_offset_s)
    seg.offset_sigma_s = sigma
    if not np.isfinite(sigma):
        return
    shifted = []
    for sign in (-2.0, 2.0):
        al = replace(ps.alignment, offset_s=ps.alignment.offset_s + sign * sigma)
        t, e, _ = pose_errors(sensor, reference, al, max_gap_s)
        shifted.append(t[1:][detect_jumps(t, e)[1:]])
    period = float(np.median(np.diff(ps.series.t_s)))
    seg.unstable_times_s = unstable_detections(
        seg.detected_times_s, shifted, max(2.0 * period, 2.0 * sigma)
    )
