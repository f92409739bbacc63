"""From session files (or two pose tracks) to aligned, segmented pose-error series
(docs/POSE_ERROR.md, "Time offset and frame")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation
from scipy.stats import chi2

from sensorbench.characterize.pose.align import (
    ERROR_FRAME,
    Alignment,
    PoseTrack,
    TrajectoryError,
    align_sessions,
    carry_flags,
    estimate_time_offset,
    offset_at_limit,
    pose_errors,
    rate_window_s,
    trajectory_error,
)
from sensorbench.characterize.pose.error_model import (
    GroupFits,
    PoseErrorModel,
    Progress,
    fit_groups,
    fit_pose_error,
    name_wrong,
)
from sensorbench.characterize.pose.frames import (
    FRAME_ALPHA,
    FrameCheck,
    frame_statistics,
    loo_frame_statistics,
    mean_variance,
)
from sensorbench.characterize.pose.gls_align import (
    Frame,
    GroupFit,
    OffsetDrift,
    offset_pieces,
    refine,
    reset_mask,
)
from sensorbench.characterize.pose.reloc_segments import (
    Segmentation,
    detect_jumps,
    segment,
    unstable_detections,
)
from sensorbench.characterize.pose.series import POSE_AXES, ErrorSeries
from sensorbench.characterize.pose.validate import Fold
from sensorbench.errors import FitError, SessionError
from sensorbench.logs.model_file import file_sha256

TIME_ORIGIN = "s from the session start (its earliest sample of any stream)"
"""The origin of every time in the fit's JSON, model file and figures."""
MEAN_AXES = {"se3": POSE_AXES, "planar": ("x", "y", "z", "yaw"), "none": ()}
"""Axes whose mean error an alignment of each mode absorbs (its translation; its body
rotation about all axes, or about z only when planar)."""


@dataclass
class PreparedSession:
    """One session ready for the fit, with how it was prepared."""

    series: ErrorSeries
    alignment: Alignment
    segmentation: Segmentation
    source: str
    sensor_position: np.ndarray | None = None  # (N, 3) m, sensor frame, at the series' samples
    trajectory: TrajectoryError | None = None
    """ATE and RPE as evo computes them (:func:`align.trajectory_error`)."""
    alignment_scope: str = "session"
    """``session`` (its own transform), ``campaign`` (one for all sessions) or ``none``."""
    campaign_sessions: int = 1
    """Sessions the transform was fitted to."""

    def alignment_used(self) -> str:
        """The alignment in words, e.g. ``se3, one transform for 3 sessions (campaign)``."""
        al = self.alignment
        if al.mode == "none":
            return "none (the sensor reports in the reference frame)"
        if self.alignment_scope == "campaign":
            return f"{al.mode}, one transform for {self.campaign_sessions} session(s) (campaign)"
        return f"{al.mode}, this session's own transform"

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
                "sigma_s": float(al.offset_se_s),
                "method": al.time_offset_method,
                "rate_window_s": al.rate_window_s,
                "reference_max_gap_s": al.max_gap_s,
            },
            "trajectory_error": None if self.trajectory is None else self.trajectory.to_dict(),
            "segmentation": self.segmentation.to_dict(),
            "error_frame": ERROR_FRAME,
            "time_origin": TIME_ORIGIN,
        }


def _segmented(
    sensor: PoseTrack, reference: PoseTrack, al: Alignment, name: str, max_gap_s: float | None,
    source: str, seg: Segmentation | None = None, starts: np.ndarray | None = None,
    mean_group: str | None = None, nuisance: tuple[GroupFit, int, str] | None = None,
    trajectory: Alignment | None = None,
) -> PreparedSession:
    """The session's error under ``al``, segmented.

    ``seg`` with ``starts`` (segment start times, s): carried over to the samples kept;
    ``seg`` alone: reused when the samples are the same; else segmented anew.
    ``mean_group``: the sessions sharing ``al``; ``nuisance``: (offset-and-frame fit, this
    session's index in it, its label); ``trajectory``: also ATE and RPE under it."""
    t, e, idx = pose_errors(sensor, reference, al, max_gap_s)
    if t.size < 10:
        raise FitError(f"{name}: only {t.size} sensor poses overlap the reference")
    valid = sensor.only_valid()
    flags = None if valid.flags is None else carry_flags(valid.flags, idx)
    if seg is not None and starts is not None:
        seg = replace(seg, reloc=reset_mask(t, starts))
    elif seg is None or seg.reloc.size != t.size:
        seg = segment(t, e, flags)
    meta: dict = {}
    if mean_group is not None and MEAN_AXES[al.mode]:
        meta = {"mean_group": mean_group, "mean_axes": MEAN_AXES[al.mode]}
    if nuisance is not None and nuisance[0].cov.size:
        jt, jac = nuisance[0].jacobian(nuisance[1], (sensor, reference), max_gap_s)
        if jt.shape == t.shape and np.allclose(jt, t):
            meta |= {"nuisance_jacobian": jac, "nuisance_group": nuisance[2]}
    series = ErrorSeries(t, e, seg.reloc, name=name, meta=meta)
    al = replace(
        al, residual_rms_m=float(np.sqrt(np.mean(np.sum(e[:, :3] ** 2, axis=1)))),
        n_pairs=int(t.size), n_dropped=int(valid.t_s.size - t.size),
    )
    te = None if trajectory is None else trajectory_error(sensor, reference, trajectory, max_gap_s)
    return PreparedSession(series, al, seg, source, valid.position[idx], te)


def load_tracks(
    path: str | Path, sensor: str, reference: str = "mocap", t_start_s: float | None = None,
    t_end_s: float | None = None,
) -> tuple[PoseTrack, PoseTrack]:
    """Read the sensor and reference pose streams of a session file, times in s from the
    session start, only samples inside ``[t_start_s, t_end_s)`` (None: open). SessionError:
    a stream missing or with fewer than 3 valid samples, or a reference that flags
    relocalizations while the sensor flags none (the two roles swapped)."""
    from sensorbench.logs import PoseFlag, Session
    from sensorbench.logs.time_window import session_span_ns, window_ns

    w0, w1 = window_ns(path, t_start_s, t_end_s)
    t0 = session_span_ns(path)[0]
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
    counts = [int(np.count_nonzero(b.valid)) for b in (bs, br)]
    if min(counts) < 3:
        window = "" if w0 is None and w1 is None else " in the --t-start/--t-end window"
        raise SessionError(
            f"{path}: pose streams {sensor!r}/{reference!r} have {counts[0]}/{counts[1]} valid "
            f"samples{window}, fewer than 3"
        )
    reloc = [bool(np.any(b.flags & PoseFlag.RELOCALIZED)) for b in (bs, br)]
    if reloc == [False, True]:  # the reference's jumps would become the sensor's error
        raise SessionError(
            f"{path}: the reference {reference!r} flags relocalizations, as a pose sensor "
            f"does, and the sensor {sensor!r} none: the roles look swapped (--sensor "
            f"{reference} --reference {sensor})")
    ref = PoseTrack((br.t_ns - t0) * 1e-9, br.position, br.quat_xyzw, br.valid, br.flags, reference)
    sen = PoseTrack((bs.t_ns - t0) * 1e-9, bs.position, bs.quat_xyzw, bs.valid, bs.flags, sensor)
    return sen, ref


def prepare_sessions(
    paths: list[str | Path], sensor: str, reference: str = "mocap", align: str = "auto"
) -> PreparedCampaign:
    """Prepare the campaign of session files (:func:`prepare_campaign`, SE(3), offsets
    estimated), every session kept: ``align="campaign"`` leaves no session out (the
    caller's frame check names those in another map). Names: :func:`session_names`."""
    tracks = [load_tracks(p, sensor, reference) for p in paths]
    frame_alpha = FRAME_ALPHA if align == "auto" else 0.0
    return prepare_campaign(
        tracks, session_names(paths), [str(p) for p in paths], align, frame_alpha=frame_alpha
    )


def session_names(paths: list[str | Path]) -> list[str]:
    """Session names: the file stems, made unique with ``#i`` where two collide."""
    stems = [Path(p).stem for p in paths]
    return [f"{s}#{i}" if stems.count(s) > 1 else s for i, s in enumerate(stems)]


def fit_prepared(
    prepared: list[PreparedSession], sensor: str, reference: str,
    time_offset: TimeOffset | None = None, progress: Progress | None = None,
) -> PoseErrorModel:
    """Fit the pose-error model over prepared sessions (:func:`fit_pose_error`), recording
    every input file, alignment, segmentation and ``time_offset`` in its provenance."""
    inputs = [
        {"path": str(Path(ps.source).resolve()), "sha256": file_sha256(ps.source),
         "n_samples": ps.series.n}
        for ps in prepared
    ]  # fmt: skip
    extra = {
        "alignment": {ps.series.name: ps.alignment.to_dict() for ps in prepared},
        "segmentation": {ps.series.name: ps.segmentation.to_dict() for ps in prepared},
        "time_origin": TIME_ORIGIN,
        **({} if time_offset is None else {"time_offset": time_offset.to_dict()}),
    }
    series = [ps.series for ps in prepared]
    return fit_pose_error(series, sensor, reference, ERROR_FRAME, inputs, extra, progress)


ALIGN_MODES = ("auto", "campaign", "session", "none")
"""``--align``: one transform for all sessions, one per session, or none."""
XCORR_STEP_S = 0.01
"""Grid and lag step of the rate cross-correlation that starts the offset's GLS (s)."""
REFIT_SE = 10.0
"""A session's GLS offset this many se (or more) from where it started: its weighting model
was fitted to errors that offset far off, and is fitted anew (:func:`_own_alignment`). An
offset k se off adds a whitened energy k² to its 6 N residuals: ≤ 100/6N (< 2 % from
N = 1000) when not refitted."""
OWN_REFITS = 3
"""Refits (:data:`REFIT_SE`) of a session's own GLS at most; each GLS moves the offset by up
to MAX_GLS_ITER × MAX_OFFSET_STEP_S (0.6 s)."""
OFFSET_CONSISTENCY_ALPHA = 0.01
"""Sessions' own time offsets that differ at this level are not pooled (:class:`TimeOffset`)."""


@dataclass
class TimeOffset:
    """The campaign's time offset (reference time = sensor time + offset, s); when the
    sessions' own offsets disagree (χ² p < :data:`OFFSET_CONSISTENCY_ALPHA`) each keeps
    its own (``pooled`` False)."""

    method: str  # "given" or "gls"
    offset_s: float  # the campaign's offset (nan when every session keeps its own)
    se_s: float
    pooled: bool
    consistency_p: float
    sessions: dict[str, dict[str, Any]]  # own offset_s, se_s, xcorr_offset_s, rate_correlation,
    # converged (its own GLS), pieces (:class:`gls_align.OffsetDrift`)
    converged: bool = True
    """False: a GLS behind the stated offset (a session's own, pooled or kept, or the
    campaign's) stopped at its iteration cap, so the offset is not the optimum's and its se
    means nothing (e.g. the truth beyond the GLS's reach from its start)."""

    def to_dict(self) -> dict:
        """JSON/TOML-ready."""
        return asdict(self)


@dataclass
class PreparedCampaign:
    """A campaign aligned and segmented, and what its leave-one-out folds need.

    ``prepared``: the sessions in the campaign's map (input order) under its offset and
    frame; ``frames``: the frame check (None unless ``align="campaign"`` with ≥ 2 sessions)."""

    prepared: list[PreparedSession]
    frames: FrameCheck | None
    time_offset: TimeOffset
    tracks: list[tuple[PoseTrack, PoseTrack]]
    kept: list[int]  # index into tracks of every prepared session
    alone: list[PreparedSession]  # every session under its own offset and frame
    align: str
    mode: str
    max_gap_s: float | None
    own_fits: list[GroupFit] = field(default_factory=list)  # each session's own GLS
    fit: GroupFit | None = None  # the campaign's offset and frame estimate
    decision: str = ""
    """With ``align="auto"``: which alignment was used, and why."""

    @property
    def series(self) -> list[ErrorSeries]:
        """The prepared sessions' error series."""
        return [p.series for p in self.prepared]

    def folds(self, targets: list[int], excluded: frozenset[int] = frozenset()) -> list[Fold]:
        """Folds holding out ``targets`` (indices into :attr:`prepared`): offset, frame and
        GLS weights from the others not in ``excluded`` (docs/POSE_ERROR.md, "Validation")."""
        n = len(self.prepared)
        trains = [[self.kept[j] for j in range(n) if j != i and j not in excluded] for i in targets]
        if any(not t for t in trains):
            raise FitError("leave-one-session-out needs another session to train on")
        weights = fit_groups([a.series for a in self.alone], trains)
        out = []
        for i, train, w in zip(targets, trains, weights, strict=True):
            held = self.kept[i]
            aligned, g = self._fold_alignments(train, held, w)
            inherited = (
                np.zeros(len(POSE_AXES))
                if g is None
                else g.induced_variance(self.tracks[held], aligned[held].offset_s, self.max_gap_s)
            )
            label = f"without {held}"
            training = [
                self._series(j, aligned[j], label, self._nuisance(g, train, j, label))
                for j in train
            ]
            held_out = self._series(held, aligned[held], None)  # its mean absorbed by none
            out.append(Fold(held_out, training, inherited, g is None or g.converged))
        return out

    def _nuisance(
        self, fit: GroupFit | None, members: list[int], j: int, label: str
    ) -> tuple[GroupFit, int, str] | None:
        """What session ``j``'s alignment was fitted with: the group's fit (campaign), its own."""
        if self.align == "campaign" and fit is not None:
            return fit, members.index(j), label
        if self.align == "session":
            return self.own_fits[j], 0, f"own {j}"
        return None

    def _fold_alignments(
        self, train: list[int], held: int, weights: GroupFits
    ) -> tuple[dict[int, Alignment], GroupFit | None]:
        """Alignments of ``train`` and ``held`` from ``train``'s offsets and frame (GLS weighted
        by ``weights``), and the estimate whose error ``held`` inherits (None: none)."""
        own = {j: self.alone[j].alignment for j in [*train, held]}
        pooled = self.time_offset.method == "gls" and self.time_offset.pooled
        off = {j: own[j].offset_s for j in own}
        se = {j: own[j].offset_se_s for j in own}
        if pooled:
            o, s = _weighted_mean([off[j] for j in train], [se[j] for j in train])
            off, se = dict.fromkeys(own, o), dict.fromkeys(own, s)
        if self.align != "campaign":
            aligned = {
                j: _with_frame(own[j], off[j], _frame_of(own[j], self.mode), se[j]) for j in own
            }
            done = all(self.own_fits[j].converged for j in train) if self.own_fits else True
            return aligned, (_offset_only(aligned[held], done) if pooled else None)
        g = self._group_gls(train, [off[j] for j in train], weights, pooled)
        if pooled:
            off = dict.fromkeys(own, float(g.offsets_s[0]))
            se = dict.fromkeys(own, g.offset_se_s(0))
        return {j: _with_frame(own[j], off[j], g.frame, se[j]) for j in own}, g

    def _group_gls(
        self, members: list[int], offsets: list[float], weights: GroupFits, estimate_offset: bool,
        series: list[ErrorSeries] | None = None,
    ) -> GroupFit:
        """One GLS frame (and offset, when estimated) for sessions ``members`` at ``offsets``
        (s), from their Umeyama frame, weighted by the model ``weights`` fitted to ``series``
        (default: each member under its own alignment)."""
        pairs = [self.tracks[j] for j in members]
        start = align_sessions(pairs, self.mode, offsets, max_gap_s=self.max_gap_s)
        series = series or [self.alone[j].series for j in members]
        return refine(
            pairs, offsets, _frame_of(start[0], self.mode), [s.reloc_times_s() for s in series],
            np.stack([weights[a].values for a in POSE_AXES]), estimate_offset=estimate_offset,
            max_gap_s=self.max_gap_s,
            wrong=[s.t_s[m] for s, m in zip(series, weights.wrong.masks, strict=True)],
        )

    def future_variance(self) -> np.ndarray:
        """``(6,)`` variance (units²) a new session's error inherits from this campaign's
        offset and frame: :meth:`GroupFit.induced_variance` averaged over the sessions."""
        if self.fit is None:
            return np.zeros(len(POSE_AXES))
        return np.mean([
            self.fit.induced_variance(self.tracks[j], p.alignment.offset_s, self.max_gap_s)
            for j, p in zip(self.kept, self.prepared, strict=True)
        ], axis=0)  # fmt: skip

    def _series(
        self, j: int, al: Alignment, group: str | None,
        nuisance: tuple[GroupFit, int, str] | None = None,
    ) -> ErrorSeries:
        a = self.alone[j]
        group = a.series.name if self.align == "session" else group
        return _carried(self.tracks[j], a, al, self.max_gap_s, group, nuisance).series


def _carried(
    tr: tuple[PoseTrack, PoseTrack], ps: PreparedSession, al: Alignment, max_gap_s: float | None,
    mean_group: str | None = None, nuisance: tuple[GroupFit, int, str] | None = None,
    trajectory: Alignment | None = None,
) -> PreparedSession:
    """Session ``ps`` under alignment ``al``, its segmentation carried over (:func:`_segmented`)."""
    return _segmented(
        *tr, al, ps.series.name, max_gap_s, ps.source, ps.segmentation,
        ps.series.reloc_times_s(), mean_group, nuisance, trajectory,
    )  # fmt: skip


def _auto_alignment(prepare: Callable[[str], PreparedCampaign], n: int) -> PreparedCampaign:
    """:func:`prepare_campaign` of ``n`` sessions with ``align="auto"``, ``prepare(align)``
    preparing them with one alignment."""
    if n < 2:
        camp = prepare("session")
        camp.decision = "its own transform (one session)"
        return camp
    joint = prepare("campaign")
    check = joint.frames
    if check is not None and check.testable and not check.excluded:
        joint.decision = (
            f"one transform for all {n} sessions: the FRAME check finds them in one map"
        )
        return joint
    own = prepare("session")
    own.decision = "one transform per session: " + (
        f"the FRAME check finds {', '.join(check.excluded)} not in the others' map"
        if check is not None and check.excluded
        else "whether they share one map cannot be checked (too few relocalizations)"
    )
    return own


def _offset_only(al: Alignment, converged: bool = True) -> GroupFit:
    """The estimate of a pooled offset alone (frame not from the others), for its variance;
    ``converged``: every GLS offset it pools converged."""
    return GroupFit(
        np.array([al.offset_s]), _frame_of(al, "none"), np.array([[al.offset_se_s**2]]),
        np.array([0]), np.zeros(3), fit_frame=False, converged=converged,
    )


def _weighted_mean(values: list[float], se: list[float]) -> tuple[float, float]:
    """Inverse-variance weighted mean and its standard error (plain mean without se)."""
    v, s = np.asarray(values, float), np.asarray(se, float)
    if not np.all(np.isfinite(s) & (s > 0)):
        return float(np.mean(v)), float("nan")
    w = 1.0 / s**2
    return float(np.sum(w * v) / np.sum(w)), float(1.0 / np.sqrt(np.sum(w)))


def _frame_of(al: Alignment, mode: str) -> Frame:
    return Frame(al.rotation, al.translation, al.body_rotation, mode)


def _with_frame(al: Alignment, offset_s: float, frame: Frame, se_s: float) -> Alignment:
    return replace(
        al, offset_s=float(offset_s), rotation=frame.rotation, translation=frame.translation,
        body_rotation=frame.body_rotation, offset_se_s=float(se_s),
    )


def prepare_campaign(
    tracks: list[tuple[PoseTrack, PoseTrack]], names: list[str], sources: list[str] | None = None,
    align: str = "campaign", planar: bool = False, offset_s: float | None = None,
    max_offset_s: float = 0.5, max_gap_s: float | None = None, frame_alpha: float = FRAME_ALPHA,
) -> PreparedCampaign:
    """Align, compute and segment the error of every session; check their frames.

    ``align``: :data:`ALIGN_MODES` (docs/POSE_ERROR.md, "Time offset and frame")."""
    if align not in ALIGN_MODES:
        raise FitError(f"unknown --align {align!r} (auto, campaign, session or none)")
    if align == "auto":
        prepare = partial(
            prepare_campaign, tracks, names, sources, planar=planar, offset_s=offset_s,
            max_offset_s=max_offset_s, max_gap_s=max_gap_s, frame_alpha=frame_alpha or FRAME_ALPHA,
        )  # fmt: skip
        return _auto_alignment(prepare, len(tracks))
    sources = sources or [""] * len(tracks)
    mode = "none" if align == "none" else ("planar" if planar else "se3")
    estimate = offset_s is None
    xcorr = [
        estimate_time_offset(sen, ref, max_offset_s, step_s=XCORR_STEP_S, max_gap_s=max_gap_s)
        if estimate
        else (float(offset_s or 0.0), float("nan"))
        for sen, ref in tracks
    ]
    first = [
        align_sessions([tr], mode, off, max_gap_s)[0]
        for tr, (off, _) in zip(tracks, xcorr, strict=True)
    ]
    start = [
        _segmented(*tr, al, n, max_gap_s, src, mean_group=n)
        for tr, al, n, src in zip(tracks, first, names, sources, strict=True)
    ]
    own_models = fit_groups([p.series for p in start], [[i] for i in range(len(tracks))])
    search = max_offset_s if estimate else None
    own = [
        _own_alignment(tracks[i], start[i], own_models[i], mode, xcorr[i], search, max_gap_s)
        for i in range(len(tracks))
    ]
    alone = [
        _carried(tr, ps, al, max_gap_s, names[i], (g, 0, f"own {i}"))
        for i, (tr, (al, _, g, ps)) in enumerate(zip(tracks, own, strict=True))
    ]
    offset = _campaign_offset(
        alone, xcorr, [d for _, d, *_ in own], [g.converged for *_, g, _ in own], estimate
    )
    kept, check = list(range(len(tracks))), None
    if align == "campaign" and len(tracks) >= 2:
        # the map check needs no error model: rate-correlated offsets, Umeyama frames
        kept, check = _frame_loop(
            tracks, names, [al.offset_s for al in first], start, mode, max_gap_s, frame_alpha
        )
    camp = PreparedCampaign(
        [], check, offset, tracks, kept, alone, align, mode, max_gap_s, [g for _, _, g, _ in own]
    )
    alignments = _kept_alignments(camp, estimate)
    evo = _evo_alignments(tracks, kept, alignments, mode, align, max_gap_s)
    joint_scope = align == "campaign" and len(kept) > 1
    scope = "none" if align == "none" else ("campaign" if joint_scope else "session")
    for j in kept:
        group = "campaign" if align == "campaign" else names[j]
        nuisance = camp._nuisance(camp.fit, kept, j, "campaign")
        ps = _carried(tracks[j], alone[j], alignments[j], max_gap_s, group, nuisance, evo[j])
        n_joint = len(kept) if joint_scope else 1
        camp.prepared.append(replace(ps, alignment_scope=scope, campaign_sessions=n_joint))
    if check is not None:
        _own_alignment_shift(check, tracks, names, alone, camp.prepared[0].alignment)
    return camp


def _own_alignment(
    tr: tuple[PoseTrack, PoseTrack], ps: PreparedSession, fit: GroupFits, mode: str,
    xcorr: tuple[float, float], max_offset_s: float | None, max_gap_s: float | None,
) -> tuple[Alignment, OffsetDrift | None, GroupFit, PreparedSession]:
    """A session's own offset and frame by GLS from its cross-correlation peak, weighted by
    its own model ``fit``; while the offset moves more than :data:`REFIT_SE` se, or the GLS
    stops unconverged, the session is segmented and its model fitted anew at the GLS
    estimate and the GLS goes on from there (:data:`OWN_REFITS` times at most).

    ``max_offset_s``: the offset search's bound (s) when the offset is estimated, None when
    given. Returns the alignment (se inflated by drift), that drift, the GLS fit and the
    session as last segmented."""
    al, name = ps.alignment, ps.series.name
    for k in range(OWN_REFITS + 1):
        params = np.stack([fit[a].values for a in POSE_AXES])
        starts = ps.series.reloc_times_s()
        g = refine(
            [tr], [al.offset_s], _frame_of(al, mode), [starts], params,
            estimate_offset=max_offset_s is not None, max_gap_s=max_gap_s,
            wrong=[ps.series.t_s[fit.wrong.masks[0]]],
        )
        moved = abs(float(g.offsets_s[0]) - al.offset_s)
        if max_offset_s is None or k == OWN_REFITS or (
            g.converged and moved <= REFIT_SE * g.offset_se_s(0)
        ):
            break
        # the model weighting the GLS, fitted to the errors at the new offset
        al = _with_frame(al, float(g.offsets_s[0]), g.frame, g.offset_se_s(0))
        ps = _segmented(*tr, al, name, max_gap_s, ps.source, mean_group=name)
        fit = fit_groups([ps.series], [[0]])[0]
    se = g.offset_se_s(0)
    own = _with_frame(al, float(g.offsets_s[0]), g.frame, se)
    if max_offset_s is None:
        return own, None, g, ps
    drift = offset_pieces(tr, float(g.offsets_s[0]), g.frame, starts, params, max_gap_s)
    se *= 1.0 if drift is None else drift.inflation
    own = replace(
        own, offset_se_s=float(se),
        time_offset_method="GLS under the error model, from an angular-rate xcorr",
        rate_correlation=xcorr[1], offset_at_search_limit=offset_at_limit(xcorr[0], max_offset_s),
        max_offset_s=max_offset_s, rate_window_s=rate_window_s(*tr),
    )
    _mark_unstable(*tr, ps, se, max_gap_s)
    return own, drift, g, ps


def _kept_alignments(camp: PreparedCampaign, estimate: bool) -> dict[int, Alignment]:
    """The kept sessions' alignments: one GLS frame (and pooled offset) for the campaign,
    the pooled offset in each own frame, or each session's own; sets ``camp.fit``."""
    alone, kept, offset = camp.alone, camp.kept, camp.time_offset
    alignments = {j: alone[j].alignment for j in kept}
    offsets = [offset.offset_s if offset.pooled else a.alignment.offset_s for a in alone]
    if camp.align == "campaign":
        pooled = estimate and offset.pooled
        group = [list(range(len(kept)))]
        weights = fit_groups([alone[j].series for j in kept], group)[0]
        g = camp._group_gls(kept, [offsets[j] for j in kept], weights, pooled)
        # a wrong start hides under its session's own frame: named only under the shared
        # one, where it pulls the frame and inflates the weights; refit without it
        shared = [
            _carried(camp.tracks[j], alone[j], _with_frame(alone[j].alignment, g.offsets_s[k],
                     g.frame, float("nan")), camp.max_gap_s, "campaign").series
            for k, j in enumerate(kept)
        ]  # fmt: skip
        if any(m[0] for m in name_wrong(shared, weights).masks):
            weights = fit_groups(shared, group)[0]
            g = camp._group_gls(kept, [offsets[j] for j in kept], weights, pooled, shared)
        camp.fit = g
        if pooled:
            # the joint GLS's se, or the own offsets' pooled se when drift inflated them
            own_se = _weighted_mean(
                [alone[j].alignment.offset_s for j in kept],
                [alone[j].alignment.offset_se_s for j in kept],
            )[1]
            offset.offset_s = float(g.offsets_s[0])
            offset.se_s = max(g.offset_se_s(0), own_se)
            offset.converged = g.converged  # the offset stated is this GLS's
        for k, j in enumerate(kept):
            se = offset.se_s if pooled else alone[j].alignment.offset_se_s
            alignments[j] = _with_frame(alone[j].alignment, g.offsets_s[k], g.frame, se)
    elif offset.pooled and estimate:
        for j in kept:
            own = alone[j].alignment
            frame = _frame_of(own, camp.mode)
            alignments[j] = _with_frame(own, offset.offset_s, frame, offset.se_s)
        camp.fit = _offset_only(alignments[kept[0]], offset.converged)
    return alignments


def _evo_alignments(
    tracks: list[tuple[PoseTrack, PoseTrack]], kept: list[int], alignments: dict[int, Alignment],
    mode: str, align: str, max_gap_s: float | None,
) -> dict[int, Alignment]:
    """The position-only (Umeyama) fits at the offsets used: what evo aligns the ATE with
    (one for the campaign, else one per session)."""
    out = {}
    for group in [kept] if align == "campaign" else [[j] for j in kept]:
        offsets = [alignments[j].offset_s for j in group]
        fit = align_sessions([tracks[j] for j in group], mode, offsets, max_gap_s=max_gap_s)
        for j, f in zip(group, fit, strict=True):
            out[j] = replace(alignments[j], rotation=f.rotation, translation=f.translation)
    return out


def _campaign_offset(
    alone: list[PreparedSession], xcorr: list[tuple[float, float]],
    drifts: list[OffsetDrift | None], converged: list[bool], estimate: bool,
) -> TimeOffset:
    """The sessions' own offsets, pooled by inverse variance when they agree; ``converged``:
    whether each session's own GLS converged."""
    own = [a.alignment for a in alone]
    sessions = {
        a.series.name: {
            "offset_s": al.offset_s,
            "se_s": al.offset_se_s,
            "xcorr_offset_s": x[0],
            "rate_correlation": x[1],
            "converged": c,
            **({} if d is None else {"pieces": d.to_dict()}),
        }
        for a, al, x, d, c in zip(alone, own, xcorr, drifts, converged, strict=True)
    }
    if not estimate:
        return TimeOffset("given", own[0].offset_s, float("nan"), True, float("nan"), sessions)
    off, se = _weighted_mean([al.offset_s for al in own], [al.offset_se_s for al in own])
    p = float("nan")
    if len(own) > 1 and np.isfinite(se):
        stat = sum(((al.offset_s - off) / al.offset_se_s) ** 2 for al in own)
        p = float(chi2.sf(stat, len(own) - 1))
    pooled = not p < OFFSET_CONSISTENCY_ALPHA
    return TimeOffset(
        "gls", off if pooled else float("nan"), se if pooled else float("nan"), pooled, p,
        sessions, all(converged),
    )


def _frame_loop(
    tracks: list[tuple[PoseTrack, PoseTrack]], names: list[str], offsets: list[float],
    alone: list[PreparedSession], mode: str, max_gap_s: float | None, frame_alpha: float,
) -> tuple[list[int], FrameCheck]:
    """Sessions in the campaign's map, and the frame check that left the others out."""
    keep = list(range(len(tracks)))
    excluded: list[str] = []
    while True:
        joint = align_sessions(
            [tracks[i] for i in keep], mode, [offsets[i] for i in keep], max_gap_s=max_gap_s
        )
        series = [
            _carried(tracks[i], alone[i], al, max_gap_s).series
            for i, al in zip(keep, joint, strict=True)
        ]
        check = frame_statistics(series, frame_alpha, len(tracks))
        if not check.testable and len(keep) >= 3:
            check = _loo_check(tracks, keep, offsets, alone, mode, max_gap_s, frame_alpha)
        if not check.testable or len(keep) <= 2:
            break
        worst = int(np.nanargmax(check.statistic))  # p-values underflow to 0 for gross shifts
        if not check.p_value[worst] < check.level:
            break
        excluded.append(names[keep[worst]])
        keep.pop(worst)
    check.excluded = excluded
    return keep, check


def _own_alignment_shift(
    check: FrameCheck, tracks: list[tuple[PoseTrack, PoseTrack]], names: list[str],
    alone: list[PreparedSession], campaign: Alignment,
) -> None:
    """How far each session's own alignment is from the campaign's (at its centre)."""
    for i, ps in enumerate(alone):
        al = ps.alignment
        centre = tracks[i][0].only_valid().position.mean(axis=0)
        shift = (al.rotation @ centre + al.translation) - (
            campaign.rotation @ centre + campaign.translation
        )
        angle = Rotation.from_matrix(al.rotation @ campaign.rotation.T).magnitude()
        check.own_alignment[names[i]] = {
            "translation_m": float(np.linalg.norm(shift)),
            "rotation_deg": float(np.degrees(angle)),
        }


def _loo_check(
    tracks: list[tuple[PoseTrack, PoseTrack]], keep: list[int], offsets: list[float],
    alone: list[PreparedSession], mode: str, max_gap_s: float | None, frame_alpha: float,
) -> FrameCheck:
    """Frame check with each kept session held out of the alignment (``loo_frame_statistics``)."""
    params = fit_pose_error([alone[i].series for i in keep]).params_array()
    held, allowed = [], []
    for i in keep:
        rest = [j for j in keep if j != i]
        joint = align_sessions(
            [tracks[j] for j in rest], mode, [offsets[j] for j in rest], max_gap_s=max_gap_s
        )
        al_i = replace(joint[0], offset_s=offsets[i])
        held.append(_carried(tracks[i], alone[i], al_i, max_gap_s).series)
        allowed.append(mean_variance(alone[i].series, params) * (1.0 + 1.0 / len(rest)))
    return loo_frame_statistics(held, np.array(allowed), frame_alpha, len(tracks))


def _mark_unstable(
    sensor: PoseTrack, reference: PoseTrack, ps: PreparedSession, sigma: float,
    max_gap_s: float | None,
) -> None:
    """Record in ``ps.segmentation`` the detections that move when the offset (standard
    error ``sigma``, s) moves by ±2σ."""
    seg = ps.segmentation
    if seg.method == "flags":
        return
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
