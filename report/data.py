"""The report's content, computed: one dataclass per section (``compute_x(inputs)``, None
when the inputs hold nothing for it), figures as PNG bytes, no HTML; simulated truth
beside each value on the file's time base (τ ÷ emulation speed, rate × speed)."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from sensorbench.errors import FitError, SessionError
from sensorbench.logs import Session
from sensorbench.logs.model_keys import POSE_AXES

if TYPE_CHECKING:
    from sensorbench.characterize.pose.error_model import PoseErrorModel
    from sensorbench.characterize.pose.series import ErrorSeries
    from sensorbench.characterize.pose.sessions import PreparedCampaign, PreparedSession
    from sensorbench.characterize.pose.validate import ValidationReport
    from sensorbench.characterize.pose.verdict import Verdict
    from sensorbench.fusion.filter_noise import FilterNoise

ProgressFn = Callable[[str], None]
StepFn = Callable[[int, int], None]
"""``steps(done, total)``: how far the report is."""
POSE_PARAMS = ("sigma_b", "sigma", "tau_s", "sigma_v")
Z_999 = 3.2905267314919255
"""Normal quantile of the central 99.9 % intervals given in the JSON beside the 95 % ones."""


@dataclass(frozen=True)
class ReportOptions:
    """Knobs of the report's analyses: the validation's Monte Carlo ``draws`` per session,
    ``seed`` and family-wise ``alpha``; ``static_s``, the shortest static lidar stretch (s of
    simulated time); ``align``, the pose frame alignment (docs/POSE_ERROR.md)."""

    draws: int = 1000
    seed: int = 0
    alpha: float = 0.05
    sensor: str = "pose_sensor"
    reference: str = "mocap"
    static_s: float = 3.0
    align: str = "auto"


@dataclass(frozen=True)
class ReportInputs:
    """What every section's compute function gets; ``models`` is the directory of
    ``pods.toml``, ``noise.toml``, ``pose_error.toml`` or None, ``within`` how far the
    current section is (a fraction in [0, 1])."""

    sessions: list[Path]
    models: Path | None
    options: ReportOptions
    figdir: Path
    say: ProgressFn
    within: Callable[[float], None] = field(default=lambda _f: None)


class Section(Protocol):
    """A computed section: its part of the report's data."""

    def as_dict(self) -> dict[str, Any]:
        """Top-level keys of ``Report.data`` (JSON-ready after ``json_ready``)."""
        ...


@dataclass(frozen=True)
class Figure:
    """A figure of the report: its PNG bytes and its caption."""

    png: bytes = field(repr=False)
    caption: str

    @classmethod
    def read(cls, path: str | Path, caption: str) -> Figure:
        """The PNG a plot function wrote at ``path``."""
        return cls(Path(path).read_bytes(), caption)


# ------------------------------------------------------------------ truth of simulated sessions


def truth_doc(path: Path) -> tuple[dict | None, float]:
    """(resolved scenario of a simulated session or None, emulation speed).

    Raises:
        SessionError: the recorded scenario is not TOML tables, or the emulation speed is
            not a finite number > 0 (a damaged file: the truth cannot be trusted)."""
    with Session(path) as s:
        if not s.truth_names():
            return None, 1.0
        attrs = s.truth_attrs()
    damaged = f"{path}: /truth is damaged: "
    text = attrs.get("scenario_toml")
    if text is not None and not isinstance(text, str):
        raise SessionError(damaged + f"scenario_toml is {type(text).__name__}, not TOML text")
    try:
        doc = tomllib.loads(text) if text else None
    except tomllib.TOMLDecodeError as exc:
        raise SessionError(damaged + f"scenario_toml is not valid TOML ({exc})") from None
    for key in ("pose_sensor", "mocap", "lidars"):
        if doc is not None and not isinstance(doc.get(key, {}), dict):
            raise SessionError(damaged + f"scenario_toml: {key} is not a table")
    speed = attrs.get("emulation_speed", 1.0)
    try:
        speed = float(speed)
    except (TypeError, ValueError):
        speed = math.nan
    if not (math.isfinite(speed) and speed > 0):
        raise SessionError(
            damaged + f"emulation_speed {attrs.get('emulation_speed')!r} is not a number > 0"
        )
    return doc, speed


def pauses(s: Session, sensor: str) -> tuple[int, float]:
    """The sensor's pauses in a session (PAUSED-flagged runs, e.g. while covered): their
    number and their summed length (s, from a run's first flagged sample to the next one
    not flagged, or to the stream's end)."""
    from sensorbench.logs.schema import PoseFlag

    b = s.pose(sensor).read(validate=False)
    paused = (np.asarray(b.flags) & PoseFlag.PAUSED).astype(bool)
    edges = np.diff(np.concatenate([[0], paused.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    t = np.asarray(b.t_ns, np.int64)
    t_end = t[np.minimum(ends, t.size - 1)]
    return int(starts.size), float(np.sum(t_end - t[starts]) * 1e-9)


def simulated_wrong(path: Path, sensor: str) -> list[dict[str, Any]] | None:
    """The gross wrong relocalizations the simulator put in a session: session, t_s (s
    from the session start, the fit's time origin), jump (6: m, rad); None: not simulated.
    A gross offset at the session's first sample is listed too (the fit names it under a
    frame shared with other sessions, not under the session's own)."""
    from sensorbench.logs.time_window import session_span_ns

    with Session(path) as s:
        names = s.truth_names()
        if f"{sensor}/reloc_wrong" not in names:
            return None
        rows = s.truth_rows(sensor, "reloc_t_ns", "reloc_offset")
        wrong, t_ns = rows["reloc_wrong"].astype(bool), rows["reloc_t_ns"]
        jump = rows["reloc_offset"]
    origin = session_span_ns(path)[0]
    return [
        {"session": path.stem, "t_s": (int(t) - origin) * 1e-9, "jump": list(j)}
        for t, j in zip(t_ns[wrong], jump[wrong], strict=True)
    ]


def validation_document(report: ValidationReport, wrong: Sequence[int | None]) -> dict[str, Any]:
    """The one JSON schema of a validation (``validate``, ``report`` and ``demo --json``):
    ``report.to_dict()`` with each session's ``simulated_wrong_relocalizations`` (None: real)."""
    doc = report.to_dict()
    for s, w in zip(doc["sessions"], wrong, strict=True):
        s["simulated_wrong_relocalizations"] = w
    return doc


def _rate_truth(tp: dict | None, speed: float, clock: str) -> float | None:
    """The simulated scan rate on the time base of the stream's turn times (Hz).

    Device clocks count simulated time; host stamps run ``speed`` times faster."""
    if tp is None:
        return None
    return float(tp["rate_hz"]) * (speed if clock == "host" else 1.0)


def _band_truth(tp: dict | None, lo: float, hi: float) -> float | None:
    """The simulated σ (m) when the band lies inside one simulated band, else None."""
    if tp is None:
        return None
    edges = tp["noise_band_edges_m"]
    for j, s in enumerate(tp["noise_band_sigma_m"]):
        if edges[j] <= lo and hi <= edges[j + 1]:
            return float(s)
    return None


def _pods_truth(sessions: list[Path]) -> np.ndarray | None:
    for p in sessions:
        with Session(p) as s:
            if "pods/geometry" in s.truth_names():
                return s.truth("pods/geometry")
    return None


def _pose_truth(sessions: list[Path]) -> tuple[np.ndarray | None, float]:
    """(6, 4) simulated parameters on the file's time base, and the speed."""
    for p in sessions:
        doc, speed = truth_doc(p)
        if doc is None or "pose_sensor" not in doc:
            continue
        ps, mo = doc["pose_sensor"], doc.get("mocap", {})
        mocap_white = [mo.get("noise_m", 0.0)] * 3 + [mo.get("noise_rad", 0.0)] * 3
        white = np.hypot(np.asarray(ps["white_sigma"], float), mocap_white)
        tau = np.asarray(ps["gm_tau_s"], float) / speed
        return np.column_stack([ps["reloc_sigma"], ps["gm_sigma"], tau, white]), speed
    return None, 1.0


# ------------------------------------------------------------------ lidars


@dataclass
class LidarStream:
    """One lidar stream's datasheet: the statistics' ``as_dict`` (SI units; ``noise`` None
    when timing only) and the simulated truth (None for a real lidar): rates in Hz on the
    turn times' and the host clock's time base, σ (m) per noise band."""

    name: str
    model: str
    timing: dict[str, Any]
    noise: dict[str, Any] | None
    timing_only_because: str
    truth: dict[str, Any] | None
    speed: float
    rate_se_hz: float
    rate_truth_hz: float | None
    host_rate_truth_hz: float | None
    band_truth_sigma_m: list[float | None]
    figures: list[Figure]

    def as_dict(self) -> dict[str, Any]:
        """The stream's entry of ``data["lidar"][session]``."""
        entry: dict[str, Any] = {
            "timing_only_because": self.timing_only_because or None,
            "model": self.model,
            "timing": self.timing,
            "rate_hz": self.timing["rate_hz"],
            "rate_se_hz": self.rate_se_hz,
            "rate_truth_hz": self.rate_truth_hz,
            "noise_bands": [],
        }
        if self.noise is not None:
            entry["false_point_pct"] = self.noise["false_point_pct"]
            entry["noise_bands"] = [
                {**b, "truth_sigma_m": t}
                for b, t in zip(self.noise["bands"], self.band_truth_sigma_m, strict=True)
            ]
        return entry


@dataclass
class LidarSession:
    """The lidar streams of one session."""

    label: str
    file_name: str
    streams: list[LidarStream]


@dataclass
class LidarSection:
    """Every session's lidar datasheets (empty when no session has a lidar)."""

    sessions: list[LidarSession]

    def as_dict(self) -> dict[str, Any]:
        """``{"lidar": {session label: {stream: entry}}}``."""
        out: dict[str, dict[str, Any]] = {}
        for ses in self.sessions:
            for st in ses.streams:
                out.setdefault(ses.label, {})[st.name] = st.as_dict()
        return {"lidar": out}


def compute_lidar(inputs: ReportInputs) -> LidarSection:
    """A datasheet per lidar stream of each session, with its plots."""
    from sensorbench.characterize.lidar.plots import write_plots
    from sensorbench.characterize.lidar.stats import StaticOptions, characterize_session

    opts, say = inputs.options, inputs.say
    sessions = []
    for path in inputs.sessions:
        with Session(path) as s:
            names = s.lidar_names()
        if not names:
            continue
        truth, speed = truth_doc(path)
        label = path.stem
        streams = []
        for name in names:
            say(f"characterizing lidar {name} of {label}")
            static = StaticOptions(lag_s=1.0 / speed, min_static_s=opts.static_s / speed)
            why = ""
            try:
                r = characterize_session(path, name, options=static)
            except FitError as exc:  # no static stretch: the timing still stands
                why = str(exc)
                r = characterize_session(path, name, timing_only=True, options=static)
            doc = r.as_dict()
            t = doc["timing"]
            tp = (truth or {}).get("lidars", {}).get(name)
            n_per = max(int(t.get("n_single_periods") or 0), 1)
            noise = doc.get("noise")
            bands = [] if noise is None else noise["bands"]
            streams.append(LidarStream(
                name=name,
                model=r.model,
                timing=t,
                noise=noise,
                timing_only_because=why,
                truth=tp,
                speed=speed,
                rate_se_hz=t["rate_hz"] ** 2 * t["jitter_std_s"] / math.sqrt(n_per),
                rate_truth_hz=_rate_truth(tp, speed, t["clock"]),
                host_rate_truth_hz=_rate_truth(tp, speed, "host"),
                band_truth_sigma_m=[_band_truth(tp, b["lo_m"], b["hi_m"]) for b in bands],
                figures=[
                    Figure.read(p, f"{label} {name}: {Path(p).stem.replace('_', ' ')}")
                    for p in write_plots(r, inputs.figdir / f"{path.stem}_{name}")
                ],
            ))
        sessions.append(LidarSession(label, path.name, streams))
    return LidarSection(sessions)


# ------------------------------------------------------------------ pods and replay


@dataclass(frozen=True)
class PodParam:
    """One fitted pod parameter (SI: m, rad) with its 1σ and the simulated truth."""

    pod: int
    name: str
    param: str
    value: float
    sigma: float | None
    truth: float | None

    def as_dict(self) -> dict[str, Any]:
        """An entry of ``data["pods"]``."""
        return {k: getattr(self, k) for k in ("pod", "param", "value", "sigma", "truth")}


@dataclass
class ReplayRow:
    """One session replayed through the split filters against mocap: position (m) and
    heading (rad) ``errors``, gate rejections per axis, and ``honesty`` (``replay --json``'s
    ``consistency``, ``rejection_rate``, ``monitor`` and ``nis``)."""

    label: str
    errors: dict[str, Any]
    rejected: dict[str, int]
    frames: int
    figures: list[Figure]
    honesty: dict[str, Any] = field(default_factory=dict)


@dataclass
class PodsSection:
    """The fitted pod geometry, the filter noise and the replays."""

    params: list[PodParam]
    noise: FilterNoise | None
    replay: list[ReplayRow]

    def as_dict(self) -> dict[str, Any]:
        """``{"pods": [...], "replay": [...]}``."""
        return {
            "pods": [p.as_dict() for p in self.params],
            "replay": [{"session": r.label, **r.errors, **r.honesty} for r in self.replay],
        }


def compute_pods(inputs: ReportInputs) -> PodsSection | None:
    """Pod geometry (``pods.toml``) with the simulated truth, noise and replays."""
    models = inputs.models
    if models is None or not (models / "pods.toml").exists():
        return None
    from sensorbench.fusion.filter_noise import load_noise_model
    from sensorbench.fusion.pod_kinematics import (
        POD_MODEL_KIND,
        POD_MODEL_UNITS,
        POD_MODEL_VERSION,
        load_pod_model,
    )
    from sensorbench.logs.model_file import read_model

    doc = read_model(models / "pods.toml", POD_MODEL_KIND, POD_MODEL_VERSION, POD_MODEL_UNITS)
    truth = _pods_truth(inputs.sessions)
    params = []
    for i, p in enumerate(doc["pod"]):
        t_c = t_phi = t_lever = t_r = None
        if truth is not None:
            x, y, phi, radius, _, mpc = truth[i]
            t_c, t_phi, t_r = mpc, phi, radius
            t_lever = x * math.sin(phi) - y * math.cos(phi)
        truths = (("distance_per_tick", t_c), ("wheel_radius", t_r), ("rolling_angle", t_phi),
                  ("lever_arm", t_lever))  # fmt: skip
        for key, tv in truths:
            if key in p:
                params.append(
                    PodParam(i, p.get("name", f"pod{i}"), key, p[key], p.get(f"sigma_{key}"), tv)
                )
    noise = load_noise_model(models / "noise.toml") if (models / "noise.toml").exists() else None
    geometry = load_pod_model(models / "pods.toml")
    return PodsSection(params, noise, _replay(inputs, geometry, noise))


def _replay(inputs: ReportInputs, geometry: Any, noise: FilterNoise | None) -> list[ReplayRow]:
    from sensorbench.fusion.filter_noise import FilterNoise
    from sensorbench.fusion.odometry_replay import replay_session
    from sensorbench.fusion.replay_plots import replay_plots

    rows = []
    for path in inputs.sessions:
        with Session(path) as s:
            has = bool(s.encoder_names()) and any(
                s.pose(n).attrs.get("kind") == "mocap" for n in s.pose_names()
            )
        label = path.stem
        if not has:
            continue
        inputs.say(f"replaying {label} through the split filters")
        _, speed = truth_doc(path)
        noise_used = noise or FilterNoise.default()
        rp = replay_session(path, geometry, noise_used, align_interval_s=0.5 / speed)
        summary = rp.summary()
        figures = [
            Figure.read(p, f"{label}: {Path(p).stem.replace('_', ' ')}")
            for p in replay_plots(inputs.figdir / f"replay_{path.stem}", rp)
        ]
        honesty = {k: summary.get(k) for k in ("consistency", "rejection_rate", "monitor", "nis")}
        rows.append(ReplayRow(
            label, dict(summary["errors"] or {}), dict(rp.result.rejected),
            rp.result.t_s.size - 1, figures, honesty,
        ))  # fmt: skip
    return rows


# ------------------------------------------------------------------ pose error and validation


@dataclass(frozen=True)
class PoseParam:
    """One pose-error parameter in its ``unit`` (m, rad or s) with its 95 % and 99.9 %
    intervals and the simulated truth on the file's time base (None for real data)."""

    axis: str
    param: str
    unit: str
    value: float
    ci95: tuple[float, float]
    ci999: tuple[float, float]
    identified: bool
    truth: float | None
    converged: bool = True  # the axis' fit converged (else no interval, not identified)

    def as_dict(self) -> dict[str, Any]:
        """An entry of ``data["pose_error"]["params"]``."""
        return {"axis": self.axis, "param": self.param, "value": self.value,
                "ci95": list(self.ci95), "ci99.9": list(self.ci999),
                "identified": self.identified, "truth": self.truth,
                "converged": self.converged}  # fmt: skip


@dataclass
class ValidationSection:
    """The leave-one-session-out validation of the pose-error model: per held-out session
    (``report.sessions`` order) its prepared session and the simulator's wrong
    relocalizations (None: not simulated)."""

    report: ValidationReport
    prepared: list[PreparedSession]
    wrong: list[int | None]
    figures: list[Figure]

    def as_dict(self) -> dict[str, Any]:
        """``data["validation"]``: :func:`validation_document`."""
        return {"validation": validation_document(self.report, self.wrong)}


@dataclass
class PoseSection:
    """The pose-error model of the sessions with both pose streams, and its validation.

    ``truth_speed``: the emulation speed of simulated sessions, else None; ``figures``:
    the Allan plot, then each session's band plots; ``validation`` None under two sessions."""

    sensor: str
    reference: str
    source: str
    params: list[PoseParam]
    truth_speed: float | None
    figures: list[Figure]
    validation: ValidationSection | None = None
    verdict: Verdict | None = None
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    """Per session: name, file, time offset (s) and its standard error, the alignment
    used and ATE/RPE as evo computes them (``PreparedSession.to_dict`` keys)."""
    alignment: str = ""
    """Which frame alignment the sessions got, and why (``PreparedCampaign.decision``)."""
    wrong: dict[str, Any] = field(default_factory=dict)
    """The model's wrong relocalizations (:meth:`error_model.WrongRelocs.to_dict`)."""
    simulated_wrong: list[dict[str, Any]] | None = None
    """The simulator's (:func:`simulated_wrong` of every session; None: real sessions)."""
    pauses: tuple[int, float] = (0, 0.0)
    """The sensor's pauses over all sessions: their number and summed length (s)."""
    warnings: list[str] = field(default_factory=list)
    """What ``fit pose-error`` warns of (:func:`pose_display.fit_warnings`)."""
    given: bool = False
    """True when the model is the model file's (validated as it is; its own wrong
    relocalizations are those of the sessions it was fitted on), not fitted here."""

    def summary(self) -> str:
        """One line for the top of the report: the verdict, x and yaw sigma_b with their
        95 % intervals, and what the nav stack must handle."""
        v = self.verdict
        if v is None:
            state = "no verdict"
        elif v.model_ok:
            state = "the model holds" if v.validated else "the model is not validated"
        else:
            codes = sorted({f"{r.code} {r.subject}" for r in v.reasons()})
            state = (
                "the model FAILS (" + ", ".join(codes[:4]) + (", …" if len(codes) > 4 else "") + ")"
            )
        figures = []
        for p in self.params:
            if p.param == "sigma_b" and p.axis in ("x", "yaw"):
                k, unit = (1000.0, "mm") if p.unit == "m" else (57.29577951308232, "deg")
                ci = (
                    f"[{k * p.ci95[0]:.3g}, {k * p.ci95[1]:.3g}]"
                    if p.identified
                    else "(not identified)" if p.converged else "(fit not converged)"
                )
                figures.append(f"{p.axis} offset σ_b {k * p.value:.3g} {unit} {ci}")
        parts = [f"{self.sensor}: {state}", *figures]
        if v is not None and v.wrong:
            parts.append(v.wrong_line() + (" (the model file's fit)" if self.given else ""))
        n, seconds = self.pauses
        if n:
            parts.append(f"pauses when covered ({n} pauses, {seconds:.3g} s in all)")
        if self.alignment:
            parts.append(f"frames: {self.alignment}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """``{"pose_error": {...}}``, ``"pose_verdict"`` and, when validated, ``"validation"``."""
        out: dict[str, Any] = {"pose_error": {
            "source": self.source,
            "params": [p.as_dict() for p in self.params],
            "sessions": self.trajectories,
            "alignment": self.alignment,
            "warnings": self.warnings,
            "wrong_relocalizations": self.wrong,
            "simulated_wrong_relocalizations": self.simulated_wrong,
        }}
        if self.validation is not None:
            out.update(self.validation.as_dict())
        if self.verdict is not None:
            out["pose_verdict"] = self.verdict.to_dict()
        return out


def pose_left_out(inputs: ReportInputs) -> str:
    """Why there is no pose section though a session holds the pose sensor ("" if none)."""
    lacking = []
    for path in inputs.sessions:
        with Session(path) as s:
            names = s.pose_names()
        if inputs.options.sensor in names and inputs.options.reference not in names:
            lacking.append(path.name)
    if not lacking:
        return ""
    return (
        f"{', '.join(lacking)} holds {inputs.options.sensor!r} but no reference pose stream "
        f"{inputs.options.reference!r}: the pose sensor is not assessed"
    )


def compute_pose(inputs: ReportInputs) -> PoseSection | None:
    """The pose-error model (from ``pose_error.toml`` or fitted here) and its validation."""
    from sensorbench.characterize.pose.error_model import PoseErrorModel, fit_pose_error
    from sensorbench.characterize.pose.sessions import prepare_sessions
    from sensorbench.report.pose_display import fit_warnings

    opts, say, figdir, models = inputs.options, inputs.say, inputs.figdir, inputs.models
    use, found, paused = [], [], []
    for path in inputs.sessions:
        with Session(path) as s:
            names = s.pose_names()
            if opts.sensor not in names or opts.reference not in names:
                continue
            paused.append(pauses(s, opts.sensor))
        use.append(path)
        found.append(simulated_wrong(path, opts.sensor))
    wrong = [None if f is None else len(f) for f in found]
    if not use:
        return None
    say(f"aligning {len(use)} pose-sensor sessions with {opts.reference}")
    campaign = prepare_sessions(use, opts.sensor, opts.reference, align=opts.align)
    prepared, series = campaign.prepared, campaign.series
    model_file = None if models is None else models / "pose_error.toml"
    loaded = None
    if model_file is not None and model_file.exists():
        loaded = PoseErrorModel.load(model_file, sensor=opts.sensor)
    share = 0.5 if len(series) >= 2 else 1.0  # the validation takes the rest

    def fitting(done: int, total: int) -> None:
        inputs.within(share * done / total)

    def refit() -> PoseErrorModel:
        say("fitting the pose-error model")
        return fit_pose_error(series, opts.sensor, opts.reference, progress=fitting)

    fit: PoseErrorModel | None = None
    if loaded is None:
        model = refit()
    else:  # a file of other series is judged as it is: no refit to compare it with
        model = loaded
        fit = refit() if _may_be_their_fit(loaded, series) else None
    source, given = "fitted for this report", False
    if model_file is not None and loaded is not None:
        # the file's model is judged; leave-one-session-out only when it is this fit itself
        given = fit is None or not np.allclose(
            loaded.params_array(), fit.params_array(), rtol=1e-6, atol=0
        )
        how = "the given model, validated as it is" if given else "the fit of these sessions"
        source = f"{model_file.name} ({how})"
    truth, speed = _pose_truth(use)
    out = pose_params(model, truth)
    figures = _pose_figures(prepared, model.params_array(), figdir)
    section = PoseSection(
        opts.sensor, opts.reference, source, out, None if truth is None else speed, figures
    )
    keys = ("name", "source", "n_samples", "alignment_used", "time_offset", "trajectory_error")
    section.trajectories = [{k: v for k, v in ps.to_dict().items() if k in keys} for ps in prepared]
    section.wrong, section.given = model.wrong_relocalizations, given
    section.pauses = (sum(n for n, _ in paused), sum(t for _, t in paused))
    section.alignment = campaign.decision or campaign.align
    section.warnings = fit_warnings(campaign, model)
    if any(w is not None for w in wrong):
        section.simulated_wrong = [x for f in found for x in f or []]
    if len(series) >= 2 or given:
        section.validation = _validation(inputs, campaign, wrong, model if given else None)
    section.verdict = compute_pose_verdict(
        campaign, model, None if section.validation is None else section.validation.report
    )
    return section


def _may_be_their_fit(model: PoseErrorModel, series: list[ErrorSeries]) -> bool:
    """False when ``model``'s provenance shows it was fitted to other series than ``series``
    (its inputs' sample counts differ), so that a refit of ``series`` cannot give its
    parameters; True when it may be (or the provenance does not say)."""
    recorded = model.provenance.get("inputs") or []
    counts = [i.get("n_samples") for i in recorded if isinstance(i, dict)]
    if not counts or len(counts) != len(recorded) or None in counts:
        return True
    return sorted(int(n) for n in counts) == sorted(s.n for s in series)


def compute_pose_verdict(
    campaign: PreparedCampaign, model: PoseErrorModel, validation: ValidationReport | None
) -> Verdict:
    """The two-part verdict (no requirements) on the report's prepared sessions.

    Sessions aligned each on its own get no frame check (every session's mean error is
    absorbed); under one transform, the campaign's check at :data:`FRAME_ALPHA` (the
    report keeps every session, so it judges them here)."""
    from sensorbench.characterize.pose.frames import FRAME_ALPHA, frame_statistics
    from sensorbench.characterize.pose.verdict import assess

    prepared = campaign.prepared
    frames = None
    if campaign.align == "campaign" and len(prepared) >= 2:
        check = campaign.frames or frame_statistics([p.series for p in prepared])
        frames = replace(check, level=FRAME_ALPHA / len(prepared))
    return assess(prepared, model, validation, frames, campaign.align)


def pose_params(model: Any, truth: np.ndarray | None = None) -> list[PoseParam]:
    """Every axis' fitted parameters with their 95 and 99.9 % intervals and the truth."""
    from sensorbench.characterize.pose.series import param_unit

    params = model.params_array()
    out = []
    for i, a in enumerate(POSE_AXES):
        f = model.axes[a]
        ci = f.ci()
        ci999 = f.ci(Z_999)
        for j, p in enumerate(POSE_PARAMS):
            out.append(PoseParam(
                a, p, param_unit(a, p), float(params[i, j]),
                ci95=(float(ci[j, 0]), float(ci[j, 1])),
                ci999=(float(ci999[j, 0]), float(ci999[j, 1])), identified=bool(f.identified[j]),
                truth=None if truth is None else float(truth[i, j]), converged=f.converged,
            ))  # fmt: skip
    return out


def _pose_figures(prepared: list, params: np.ndarray, figdir: Path) -> list[Figure]:
    """The Allan plot, and per session its error in the model's bands and its path overlay."""
    from sensorbench.characterize.pose.allan import allan_cross_check
    from sensorbench.characterize.pose.plots import (
        plot_allan,
        plot_error_bands,
        plot_trajectory_overlay,
    )
    from sensorbench.characterize.pose.verdict import scale_inputs

    allan = allan_cross_check([ps.series for ps in prepared], params)
    allan_png = plot_allan(allan, figdir / "allan.png")
    figures = [Figure.read(allan_png, "Allan deviation: data vs model")]
    for ps in prepared:
        figures.append(Figure.read(
            plot_error_bands(ps.series, params, figdir / f"{ps.series.name}_error.png"),
            f"{ps.series.name}: error with the model's bands",
        ))
        for name, _, _, ref in scale_inputs([ps]):
            figures.append(Figure.read(
                plot_trajectory_overlay(
                    name, ref[:, :2], ps.series.error[:, :2], figdir / f"{name}_path.png"
                ),
                f"{name}: reference and aligned estimate, |error| colour-mapped",
            ))
    return figures


def _validation(
    inputs: ReportInputs, campaign: Any, wrong: list[int | None], model: PoseErrorModel | None
) -> ValidationSection:
    """Every session against ``model`` (the model file), else leave-one-session-out."""
    from sensorbench.characterize.pose.plots import plot_error_bands, plot_rank_histogram
    from sensorbench.characterize.pose.validate import validate_sessions

    opts, figdir = inputs.options, inputs.figdir
    prepared, series = campaign.prepared, campaign.series
    mode = "leave-one-session-out" if model is None else "given-model"
    inputs.say(f"{mode} validation ({opts.draws} draws per session)")

    def validating(done: int, total: int) -> None:
        inputs.within(0.5 + 0.5 * done / total)

    rep = validate_sessions(
        series, n_draws=opts.draws, seed=opts.seed, model=model, alpha=opts.alpha,
        folds=campaign.folds, progress=validating,
    )  # fmt: skip
    whose = "the model refitted without it" if model is None else "the given model"
    figures = [
        Figure.read(
            plot_error_bands(s, chk.params, figdir / f"{s.name}_validate.png"),
            f"{s.name}: error in the bands of {whose}",
        )
        for s, chk in zip(series, rep.sessions, strict=True)
    ]
    rank = plot_rank_histogram(rep, figdir / "rank_histogram.png")
    figures.append(Figure.read(rank, "rank histogram"))
    return ValidationSection(rep, prepared, wrong, figures)


# ------------------------------------------------------------------ provenance


@dataclass(frozen=True)
class ModelFileRow:
    """One model file: its envelope ("?" when absent), SHA-256, and how many of its inputs
    are sessions of this report (``n_inputs_here``, matched by SHA-256)."""

    name: str
    kind: str
    software: str
    created_utc: str
    sha256: str
    n_inputs: int
    n_inputs_here: int


@dataclass
class SessionProvenance:
    """One session's ``session_info``, SHA-256 and emulation speed (None: real)."""

    path: Path
    sha256: str
    info: dict[str, Any]
    emulation_speed: float | None


@dataclass
class ProvenanceSection:
    """The model files and, per session, software, hash, label, streams and metadata."""

    models: list[ModelFileRow]
    sessions: list[SessionProvenance]

    def as_dict(self) -> dict[str, Any]:
        """``{"provenance": [{path, sha256, label}]}``."""
        return {"provenance": [
            {"path": str(s.path), "sha256": s.sha256, "label": s.info.get("label")}
            for s in self.sessions
        ]}


def _model_files(models: Path | None, hashes: set[str]) -> list[ModelFileRow]:
    """One row per model file: kind, software, date, its inputs and whether they are here."""
    if models is None:
        return []
    from sensorbench.logs.model_file import file_sha256, load_document

    rows = []
    for path in sorted(models.glob("*.toml")):
        doc = load_document(path)
        model, prov = doc.get("model", {}), doc.get("provenance", {})
        inputs = prov.get("inputs", [])
        rows.append(ModelFileRow(
            path.name, model.get("kind", "?"),
            software=model.get("software") or prov.get("software", "?"),
            created_utc=model.get("created_utc") or prov.get("created_utc", "?"),
            sha256=file_sha256(path), n_inputs=len(inputs),
            n_inputs_here=sum(1 for i in inputs if i.get("sha256") in hashes),
        ))  # fmt: skip
    return rows


def compute_provenance(inputs: ReportInputs) -> ProvenanceSection:
    """Model files and each session's provenance."""
    from sensorbench.logs.info import session_info
    from sensorbench.logs.model_file import file_sha256

    hashes = [file_sha256(p) for p in inputs.sessions]
    sessions = []
    for path, sha in zip(inputs.sessions, hashes, strict=True):
        truth, speed = truth_doc(path)
        sessions.append(
            SessionProvenance(path, sha, session_info(path), None if truth is None else speed)
        )
    return ProvenanceSection(_model_files(inputs.models, set(hashes)), sessions)

