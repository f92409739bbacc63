"""``sensorbench report``: one self-contained HTML page with every table and figure.

:func:`build_report` reads session files (and, optionally, the model files of a
models directory: ``pods.toml``, ``noise.toml``, ``pose_error.toml``) and writes
``report.html`` into the output directory, figures embedded as base64 PNG (matplotlib
Agg), no external assets. Sections, each present when the inputs allow it:

* **Lidars** – a datasheet per lidar stream of each session (rate, period, jitter,
  points per turn, skipped turns, gaps; range noise by band and outlier fractions
  from static stretches), with the figures of :mod:`~sensorbench.characterize.lidar_plots`;
* **Pods** – the fitted geometry with 1σ uncertainties (``pods.toml``), the
  filter noise (``noise.toml``), and each session with pods and mocap replayed through
  the split filters (error table and plots);
* **Pose-error model** – the fitted parameters with 95 % intervals (``pose_error.toml``,
  or fitted here from the sessions holding ``pose_sensor`` and ``mocap``) and the Allan
  plot; the leave-one-session-out validation: verdicts, percentile tables, error-in-band
  plots and the rank histogram (:mod:`~sensorbench.characterize.pose_plots`);
* **Provenance** – per session: software version, SHA-256, label, streams and the
  device metadata of every stream.

Simulated sessions (a ``/truth`` group) get the simulated truth beside each recovered
value. Sessions captured from the emulated robot run ``emulation_speed`` times faster
than simulated time (``/truth`` attribute); truth values with time in their unit are
put on the file's time base (τ ÷ speed, rate × speed) and say so.

The library returns the report's content as :class:`Report` ``.data`` (plain dicts,
SI units) for callers such as ``sensorbench demo``; it never prints.
"""

from __future__ import annotations

import base64
import html
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench import __version__
from sensorbench.errors import FitError, SensorbenchError
from sensorbench.logs import Session

ProgressFn = Callable[[str], None]
POSE_AXES = ("x", "y", "z", "roll", "pitch", "yaw")
POSE_PARAMS = ("sigma_b", "sigma", "tau_s", "sigma_v")
Z_999 = 3.2905267314919255
"""Normal quantile of the central 99.9 % intervals given in the JSON beside the 95 % ones."""


@dataclass(frozen=True)
class ReportOptions:
    """Knobs of the analyses the report runs.

    Attributes:
        draws: Monte Carlo draws per session of the validation.
        seed: Monte Carlo seed.
        alpha: family-wise level of the validation.
        sensor, reference: pose streams of the pose-error sections.
        static_s: shortest static lidar stretch, in simulated-equivalent seconds
            (divided by the session's emulation speed) (s).
    """

    draws: int = 1000
    seed: int = 0
    alpha: float = 0.05
    sensor: str = "pose_sensor"
    reference: str = "mocap"
    static_s: float = 3.0


@dataclass
class Report:
    """The written page and its content (see the module docstring)."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ small helpers


def json_ready(obj: Any) -> Any:
    """``obj`` with numpy values as Python ones, paths as text and nan/inf as None."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return json_ready(obj.tolist())
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def _esc(v: Any) -> str:
    return html.escape(str(v))


def _num(v: Any, fmt: str = "{:.4g}") -> str:
    if v is None:
        return "–"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return _esc(v)
    return "–" if not math.isfinite(f) else fmt.format(f)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> str:
    cap = f"<caption>{_esc(caption)}</caption>" if caption else ""
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if isinstance(c, _Raw) else _esc(c)}</td>" for c in r) + "</tr>"
        for r in rows
    )
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class _Raw(str):
    """Cell content that is already HTML."""


def _img(path: str | os.PathLike[str], alt: str) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return (
        f'<figure><img alt="{_esc(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_esc(alt)}</figcaption></figure>"
    )


def _truth_doc(path: Path) -> tuple[dict | None, float]:
    """(resolved scenario of a simulated session or None, emulation speed)."""
    with Session(path) as s:
        if not s.truth_names():
            return None, 1.0
        attrs = s.truth_attrs()
    text = attrs.get("scenario_toml")
    doc = tomllib.loads(text) if text else None
    return doc, float(attrs.get("emulation_speed", 1.0))


def _wrong_relocalizations(s: Session, sensor: str) -> int | None:
    """Gross wrong relocalizations the simulator put in a session (None: not simulated)."""
    name = f"{sensor}/reloc_wrong"
    if name not in s.truth_names():
        return None
    return int(np.count_nonzero(s.truth(name)))


def _session_label(path: Path) -> str:
    with Session(path) as s:
        return s.label or path.stem


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{border-bottom:2px solid #444}h2{margin-top:2em;border-bottom:1px solid #aaa}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}
td,th{border:1px solid #bbb;padding:.25em .6em;text-align:right}
th{background:#eee}td:first-child,th:first-child{text-align:left}
caption{text-align:left;font-weight:bold;padding:.3em 0}
figure{display:inline-block;margin:.5em}img{max-width:520px;border:1px solid #ddd}
.pass{color:#060;font-weight:bold}.fail{color:#b00;font-weight:bold}.note{color:#555}
"""


# ------------------------------------------------------------------ sections


def _lidar_section(
    sessions: list[Path], opts: ReportOptions, figdir: Path, data: dict, say: ProgressFn
) -> str:
    from sensorbench.characterize.lidar_plots import write_plots
    from sensorbench.characterize.lidar_stats import StaticOptions, characterize_session

    parts: list[str] = []
    data["lidar"] = {}
    for path in sessions:
        with Session(path) as s:
            names = s.lidar_names()
        if not names:
            continue
        truth, speed = _truth_doc(path)
        label = _session_label(path)
        parts.append(f"<h3>{_esc(label)} <span class='note'>({_esc(path.name)})</span></h3>")
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
            rate_truth = _rate_truth(tp, speed, t["clock"])
            n_per = max(int(t.get("n_single_periods") or 0), 1)
            rate_se = t["rate_hz"] ** 2 * t["jitter_std_s"] / math.sqrt(n_per)
            rows = [
                (
                    "Scan rate (Hz)",
                    f"{_num(t['rate_hz'])} ± {_num(rate_se, '{:.2g}')}",
                    _rate_cell(rate_truth, speed, t["clock"]),
                ),
                ("Turn period p50 (ms)", _num(t["period_percentiles_s"]["p50"] * 1e3), ""),
                ("Period jitter σ (ms)", _num(t.get("jitter_std_s", 0) * 1e3), ""),
                ("Points per turn (median)", _num(t["points_per_turn"]["median"]), ""),
                ("Angular step (°)", _num(t.get("angular_step_deg")), ""),
                (
                    "Skipped turns (%)",
                    _num(t.get("skipped_pct")),
                    "" if tp is None else _num(100 * tp.get("skip_prob", 0.0)),
                ),
                ("Longest gap (ms)", _num(t.get("longest_gap_s", 0) * 1e3), ""),
            ]
            entry: dict[str, Any] = {
                "timing_only_because": why or None,
                "model": r.model,
                "timing": t,
                "rate_hz": t["rate_hz"],
                "rate_se_hz": rate_se,
                "rate_truth_hz": rate_truth,
                "noise_bands": [],
            }
            n = doc.get("noise")
            if n is not None:
                rows.append(
                    (
                        "Edge outliers (%)",
                        f"{_num(n['edge_outlier_pct'])} ± {_num(n['edge_outlier_pct_se'])}",
                        "",
                    )
                )
                rows.append(
                    (
                        "Isolated false points (%)",
                        f"{_num(n['false_point_pct'])} ± {_num(n['false_point_pct_se'])}",
                        "" if tp is None else _num(100 * tp.get("false_point_prob", 0.0)),
                    )
                )
                entry["false_point_pct"] = n["false_point_pct"]
            parts.append(
                _table(
                    ["figure", "measured", "simulated truth"],
                    rows,
                    f"{name} ({r.model}) datasheet",
                )
            )
            if why:
                parts.append(f"<p class='note'>{_esc(name)}: timing only: {_esc(why)}</p>")
            if n is not None:
                brows = []
                for b in n["bands"]:
                    truth_sigma = _band_truth(tp, b["lo_m"], b["hi_m"])
                    entry["noise_bands"].append({**b, "truth_sigma_m": truth_sigma})
                    brows.append(
                        (
                            f"{b['lo_m']:g}–{b['hi_m']:g} m",
                            _num(None if b["sigma_m"] is None else b["sigma_m"] * 1e3, "{:.2f}"),
                            _num(None if b["se_m"] is None else b["se_m"] * 1e3, "{:.2f}"),
                            b["n_points"],
                            _num(None if truth_sigma is None else truth_sigma * 1e3, "{:.2f}"),
                        )
                    )
                parts.append(
                    _table(
                        ["range band", "σ (mm)", "±1σ (mm)", "points", "simulated σ (mm)"],
                        brows,
                        f"{name} range noise by band (static stretches)",
                    )
                )
            for p in write_plots(r, figdir / f"{path.stem}_{name}"):
                parts.append(_img(p, f"{label} {name}: {Path(p).stem.replace('_', ' ')}"))
            data["lidar"].setdefault(label, {})[name] = entry
    if not parts:
        return ""
    return "<h2>Lidars</h2>" + "".join(parts)


def _rate_truth(tp: dict | None, speed: float, clock: str) -> float | None:
    """The simulated scan rate on the time base of the stream's turn times (Hz).

    Device clocks count simulated time; host stamps run ``speed`` times faster.
    """
    if tp is None:
        return None
    return float(tp["rate_hz"]) * (speed if clock == "host" else 1.0)


def _rate_cell(truth: float | None, speed: float, clock: str) -> str:
    if truth is None:
        return ""
    if speed == 1.0:
        return _num(truth)
    return f"{_num(truth)} ({clock} clock; emulated at {speed:g}×)"


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


def _pods_section(
    sessions: list[Path], models: Path | None, figdir: Path, data: dict, say: ProgressFn
) -> str:
    if models is None or not (models / "pods.toml").exists():
        return ""
    from sensorbench.fusion.model_file import read_model
    from sensorbench.fusion.pod_kinematics import (
        POD_MODEL_KIND,
        POD_MODEL_UNITS,
        POD_MODEL_VERSION,
        load_pod_model,
    )

    doc = read_model(models / "pods.toml", POD_MODEL_KIND, POD_MODEL_VERSION, POD_MODEL_UNITS)
    truth = _pods_truth(sessions)
    rows, out = [], []
    for i, p in enumerate(doc["pod"]):
        t_c = t_phi = t_lever = t_r = None
        if truth is not None:
            x, y, phi, radius, _, mpc = truth[i]
            t_c, t_phi, t_r = mpc, phi, radius
            t_lever = x * math.sin(phi) - y * math.cos(phi)
        for key, unit, scale, tv in (
            ("distance_per_tick", "µm", 1e6, t_c),
            ("wheel_radius", "mm", 1e3, t_r),
            ("rolling_angle", "°", 180 / math.pi, t_phi),
            ("lever_arm", "mm", 1e3, t_lever),
        ):
            if key not in p:
                continue
            sig = p.get(f"sigma_{key}")
            rows.append(
                (
                    p.get("name", f"pod{i}"),
                    f"{key.replace('_', ' ')} ({unit})",
                    _num(p[key] * scale, "{:.5g}"),
                    _num(None if sig is None else sig * scale, "{:.2g}"),
                    _num(None if tv is None else tv * scale, "{:.5g}"),
                    _num(None if tv is None or not sig else (p[key] - tv) / sig, "{:+.2f}"),
                )
            )
            out.append({"pod": i, "param": key, "value": p[key], "sigma": sig, "truth": tv})
    data["pods"] = out
    html_parts = [
        "<h2>Pods</h2>",
        _table(
            ["pod", "parameter", "fitted", "±1σ", "simulated truth", "z"],
            rows,
            "pod geometry (pods.toml); z = (fitted − truth)/σ",
        ),
    ]
    if (models / "noise.toml").exists():
        from sensorbench.fusion.split_filter import AXES, load_noise_model

        noise = load_noise_model(models / "noise.toml")
        nrows = [(a, _num(noise.axis(a).q), _num(noise.axis(a).r)) for a in AXES]
        html_parts.append(
            _table(
                ["axis", "q (m²/s³, rad²/s³)", "r (m², rad²)"], nrows, "filter noise (noise.toml)"
            )
        )
    geometry = load_pod_model(models / "pods.toml")
    noise_model = None
    if (models / "noise.toml").exists():
        from sensorbench.fusion.split_filter import load_noise_model

        noise_model = load_noise_model(models / "noise.toml")
    html_parts.append(_replay_section(sessions, geometry, noise_model, figdir, data, say))
    return "".join(html_parts)


def _replay_section(
    sessions: list[Path], geometry: Any, noise: Any, figdir: Path, data: dict, say: ProgressFn
) -> str:
    from sensorbench.fusion.odometry_replay import replay_session
    from sensorbench.fusion.replay_plots import replay_plots
    from sensorbench.fusion.split_filter import FilterNoise

    rows, figs, out = [], [], []
    for path in sessions:
        with Session(path) as s:
            has = bool(s.encoder_names()) and any(
                s.pose(n).attrs.get("kind") == "mocap" for n in s.pose_names()
            )
            label = s.label or path.stem
        if not has:
            continue
        say(f"replaying {label} through the split filters")
        _, speed = _truth_doc(path)
        rp = replay_session(
            path, geometry, noise or FilterNoise.default(), align_interval_s=0.5 / speed
        )
        e = rp.summary()["errors"] or {}
        rows.append(
            (
                label,
                _num(e.get("rms_m", math.nan) * 100, "{:.2f}"),
                _num(e.get("max_m", math.nan) * 100, "{:.2f}"),
                _num(e.get("final_m", math.nan) * 100, "{:.2f}"),
                _num(math.degrees(e.get("heading_rms_rad", math.nan)), "{:.3f}"),
                ", ".join(f"{k} {v}" for k, v in dict(rp.result.rejected).items()),
                rp.result.t_s.size - 1,
            )
        )
        out.append({"session": label, **{k: v for k, v in e.items()}})
        for p in replay_plots(figdir / f"replay_{path.stem}", rp):
            figs.append(_img(p, f"{label}: {Path(p).stem.replace('_', ' ')}"))
    data["replay"] = out
    if not rows:
        return ""
    return (
        "<h3>Replay through the split filters</h3>"
        + _table(
            [
                "session",
                "RMS (cm)",
                "max (cm)",
                "final (cm)",
                "heading RMS (°)",
                "gate rejections",
                "frames",
            ],
            rows,
            "position and heading error against mocap",
        )
        + "".join(figs)
    )


def _pose_truth(sessions: list[Path], opts: ReportOptions) -> tuple[np.ndarray | None, float]:
    """(6, 4) simulated parameters on the file's time base, and the speed."""
    for p in sessions:
        doc, speed = _truth_doc(p)
        if doc is None or "pose_sensor" not in doc:
            continue
        ps, mo = doc["pose_sensor"], doc.get("mocap", {})
        mocap_white = [mo.get("noise_m", 0.0)] * 3 + [mo.get("noise_rad", 0.0)] * 3
        white = np.hypot(np.asarray(ps["white_sigma"], float), mocap_white)
        return (
            np.column_stack(
                [
                    ps["reloc_sigma"],
                    ps["gm_sigma"],
                    np.asarray(ps["gm_tau_s"], float) / speed,
                    white,
                ]
            ),
            speed,
        )
    return None, 1.0


def _pose_section(
    sessions: list[Path],
    models: Path | None,
    opts: ReportOptions,
    figdir: Path,
    data: dict,
    say: ProgressFn,
) -> str:
    from sensorbench.characterize.allan import allan_cross_check
    from sensorbench.characterize.pose_error import FitOptions, PoseErrorModel, fit_pose_error
    from sensorbench.characterize.pose_plots import (
        plot_allan,
        plot_error_bands,
        plot_rank_histogram,
    )
    from sensorbench.characterize.pose_sessions import prepare_sessions
    from sensorbench.characterize.pose_validate import validate_sessions

    use, wrong = [], []
    for path in sessions:
        with Session(path) as s:
            names = s.pose_names()
            if opts.sensor in names and opts.reference in names:
                use.append(path)
                wrong.append(_wrong_relocalizations(s, opts.sensor))
    if not use:
        return ""
    say(f"aligning {len(use)} pose-sensor sessions with {opts.reference}")
    prepared = prepare_sessions(use, opts.sensor, opts.reference)
    series = [p.series for p in prepared]
    model_file = None if models is None else models / "pose_error.toml"
    if model_file is not None and model_file.exists():
        model = PoseErrorModel.load(model_file)
        source = f"{model_file.name}"
    else:
        say("fitting the pose-error model")
        model = fit_pose_error(series, FitOptions(), sensor=opts.sensor, reference=opts.reference)
        source = "fitted for this report"
    truth, speed = _pose_truth(use, opts)
    params = model.params_array()
    rows, out = [], []
    for i, a in enumerate(POSE_AXES):
        f = model.axes[a]
        ci = f.ci()
        ci999 = f.ci(Z_999)
        unit = "m" if i < 3 else "rad"
        for j, p in enumerate(POSE_PARAMS):
            u = "s" if p == "tau_s" else unit
            tv = None if truth is None else float(truth[i, j])
            rows.append(
                (
                    a,
                    p,
                    _num(params[i, j]),
                    f"[{_num(ci[j, 0])}, {_num(ci[j, 1])}]"
                    if f.identified[j]
                    else "not identified",
                    u,
                    _num(tv),
                )
            )
            out.append(
                {
                    "axis": a,
                    "param": p,
                    "value": float(params[i, j]),
                    "ci95": [float(ci[j, 0]), float(ci[j, 1])],
                    "ci99.9": [float(ci999[j, 0]), float(ci999[j, 1])],
                    "identified": bool(f.identified[j]),
                    "truth": tv,
                }
            )
    data["pose_error"] = {"source": source, "params": out}
    note = ""
    if truth is not None:
        note = (
            "<p class='note'>Simulated truth: σ_b = relocalization offset σ, σ and τ = the "
            "Gauss-Markov part, σ_v = the pose sensor's white noise combined with mocap's. "
            + (
                f"τ is divided by the emulation speed ({speed:g}×): the files run that much "
                "faster than simulated time."
                if speed != 1.0
                else ""
            )
            + "</p>"
        )
    parts = [
        "<h2>Pose-error model</h2>",
        f"<p>{_esc(opts.sensor)} against {_esc(opts.reference)}, model: {_esc(source)}; "
        "error = offset per relocalization (σ_b) + Gauss-Markov (σ, τ) + white (σ_v).</p>",
        _table(
            ["axis", "parameter", "fitted", "95 % interval", "unit", "simulated truth"],
            rows,
            "pose-error model",
        ),
        note,
    ]
    allan = allan_cross_check(series, params)
    parts.append(_img(plot_allan(allan, figdir / "allan.png"), "Allan deviation: data vs model"))
    for ps in prepared:
        parts.append(
            _img(
                plot_error_bands(ps.series, params, figdir / f"{ps.series.name}_error.png"),
                f"{ps.series.name}: error with the model's bands",
            )
        )
    rep = None
    if len(series) >= 2:
        say(f"leave-one-session-out validation ({opts.draws} draws per session)")
        rep = validate_sessions(series, n_draws=opts.draws, seed=opts.seed, alpha=opts.alpha)
        simulated = any(w is not None for w in wrong)
        vrows = []
        for chk, ps, w in zip(rep.sessions, prepared, wrong, strict=True):
            verdict = _Raw(
                "<span class='pass'>PASS</span>" if chk.passed else "<span class='fail'>FAIL</span>"
            )
            failed = ", ".join(f"{f['axis']} {f['statistic']}" for f in chk.failures()) or "–"
            row = (chk.name, verdict, _num(chk.p_joint), ps.series.n, ps.series.n_segments - 1)
            vrows.append((*row, *(["–" if w is None else w] if simulated else []), failed))
        data["validation"] = {
            "passed": rep.passed,
            "sessions": [
                {
                    "name": c.name,
                    "passed": c.passed,
                    "p_joint": c.p_joint,
                    "simulated_wrong_relocalizations": w,
                }
                for c, w in zip(rep.sessions, wrong, strict=True)
            ],
            "draws": opts.draws,
        }
        overall = (
            "<span class='pass'>PASSED</span>" if rep.passed else "<span class='fail'>FAILED</span>"
        )
        parts.append(
            f"<h2>Leave-one-session-out validation</h2><p>{_esc(rep.mode)}, {opts.draws} draws, "
            f"family-wise α {opts.alpha}: {overall}</p>"
        )
        head = ["session", "verdict", "joint p", "samples", "relocalizations"]
        if simulated:
            head.append("simulated wrong relocalizations")
        parts.append(_table([*head, "failed checks"], vrows, "verdict per held-out session"))
        if any(w for w in wrong if w is not None):
            parts.append(
                "<p class='note'>The simulated campaign contains gross <em>wrong</em> "
                "relocalizations (column above), which the model (a Gaussian offset per "
                "relocalization) cannot represent: the fit widens σ_b to cover them, so the "
                "fitted σ_b lies above the simulated one, and validation is expected to "
                "reject the campaign — sessions without a wrong relocalization too, whose "
                "errors are then smaller than the widened model predicts.</p>"
            )
        from sensorbench.characterize.gm_montecarlo import STAT_NAMES

        for chk in rep.sessions:
            prow = []
            for i, a in enumerate(POSE_AXES):
                prow.append(
                    [a]
                    + [
                        f"{100 * chk.percentile[i, j]:.1f}{' *' if chk.failed[i, j] else ''}"
                        for j in range(len(STAT_NAMES))
                    ]
                )
            parts.append(
                _table(
                    ["axis", *STAT_NAMES],
                    prow,
                    f"{chk.name}: percentile of the real statistic (%), * failed",
                )
            )
        for s, chk in zip(series, rep.sessions, strict=True):
            parts.append(
                _img(
                    plot_error_bands(
                        s, chk.params, figdir / f"{s.name}_validate.png", seed=opts.seed
                    ),
                    f"{s.name}: error in the bands of the model refitted without it",
                )
            )
        parts.append(
            _img(plot_rank_histogram(rep, figdir / "rank_histogram.png"), "rank histogram")
        )
    from sensorbench.characterize.report_verdict import pose_verdict_section

    parts.append(pose_verdict_section(prepared, model, rep, data))
    return "".join(parts)


def _models_table(models: Path | None, hashes: dict[str, str]) -> str:
    """One row per model file: kind, software, date, its inputs and whether they are here."""
    if models is None:
        return ""
    from sensorbench.fusion.model_file import file_sha256

    rows = []
    for path in sorted(models.glob("*.toml")):
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise FitError(f"{path}: not a readable model file ({exc})") from exc
        model, prov = doc.get("model", {}), doc.get("provenance", {})
        inputs = prov.get("inputs", [])
        known = sum(1 for i in inputs if i.get("sha256") in hashes)
        rows.append(
            (
                path.name,
                model.get("kind", "?"),
                model.get("software") or prov.get("software", "?"),
                model.get("created_utc") or prov.get("created_utc", "?"),
                file_sha256(path),
                f"{len(inputs)} ({known} in this report, matched by SHA-256)",
            )
        )
    if not rows:
        return ""
    return _table(
        ["model file", "kind", "software", "created (UTC)", "SHA-256", "inputs"],
        rows,
        "model files",
    )


def _provenance_section(sessions: list[Path], models: Path | None, data: dict) -> str:
    from sensorbench.fusion.model_file import file_sha256
    from sensorbench.logs.info import session_info

    parts = ["<h2>Provenance</h2>"]
    data["provenance"] = []
    hashes = {file_sha256(p): str(p) for p in sessions}
    parts.append(_models_table(models, hashes))
    for path in sessions:
        info = session_info(path)
        sha = next(h for h, p in hashes.items() if p == str(path))
        truth, speed = _truth_doc(path)
        rows = [
            ("file", path.name),
            ("SHA-256", sha),
            ("label", info.get("label")),
            ("software version", info.get("software_version")),
            ("created (UTC)", info.get("created_utc")),
            ("schema version", info.get("schema_version")),
            ("size (bytes)", info.get("size_bytes")),
            ("status", info.get("status")),
        ]
        if truth is not None:
            rows.append(("simulated", f"yes; emulation speed {speed:g}×"))
        srows = []
        for st in info.get("streams", []):
            attrs = {k: v for k, v in (st.get("attrs") or {}).items() if k != "config_line"}
            meta = "; ".join(f"{k}={v}" for k, v in attrs.items())
            srows.append((st.get("name"), st.get("kind"), meta[:400] or "–"))
        parts.append(_table(["field", "value"], rows, f"session {info.get('label') or path.stem}"))
        if srows:
            parts.append(_table(["stream", "kind", "device metadata"], srows, "streams"))
        data["provenance"].append({"path": str(path), "sha256": sha, "label": info.get("label")})
    return "".join(parts)


# ------------------------------------------------------------------ entry point


def _contents(body: str) -> tuple[str, str]:
    """(a list of links to the sections, the body with an id on every section heading)."""
    titles: list[str] = []

    def number(m: re.Match[str]) -> str:
        titles.append(m.group(1))
        return f"<h2 id='section-{len(titles)}'>{m.group(1)}</h2>"

    body = re.sub(r"<h2>(.*?)</h2>", number, body)
    links = "".join(
        f"<li><a href='#section-{i}'>{t}</a></li>" for i, t in enumerate(titles, start=1)
    )
    return f"<nav><ul>{links}</ul></nav>", body


def build_report(
    sessions: Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    models_dir: str | os.PathLike[str] | None = None,
    options: ReportOptions | None = None,
    progress: ProgressFn | None = None,
) -> Report:
    """Analyse ``sessions`` (with the models in ``models_dir``) and write ``report.html``.

    Raises:
        SensorbenchError: an unreadable session or model, or an analysis that failed.
    """
    opts = options or ReportOptions()
    say = progress or (lambda _m: None)
    paths = [Path(p) for p in sessions]
    if not paths:
        raise FitError("no sessions to report on")
    for p in paths:
        if not p.is_file():
            raise FitError(f"{p}: no such session file")
    models = None if models_dir is None else Path(models_dir)
    if models is not None and not models.is_dir():
        raise FitError(f"{models}: not a directory of model files")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"sessions": [str(p) for p in paths]}
    with tempfile.TemporaryDirectory(prefix="sensorbench-report-") as tmp:
        figdir = Path(tmp)
        body = [
            _lidar_section(paths, opts, figdir, data, say),
            _pods_section(paths, models, figdir, data, say),
            _pose_section(paths, models, opts, figdir, data, say),
            _provenance_section(paths, models, data),
        ]
    contents, sections = _contents("".join(body))
    page = (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>sensorbench report</title><style>{_CSS}</style></head><body>"
        f"<h1>sensorbench report</h1><p class='note'>sensorbench {_esc(__version__)}, "
        f"{len(paths)} sessions. Units: SI unless a column says otherwise.</p>"
        + contents
        + sections
        + "</body></html>"
    )
    path = out / "report.html"
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise SensorbenchError(f"cannot write {path}: {exc}") from exc
    return Report(path, data)
