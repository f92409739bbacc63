"""The report's HTML: one render function per section dataclass of
:mod:`~sensorbench.report.data` (computing nothing), and the page around them. Figures are
embedded as base64 PNG; ``<h2>`` starts a section (the contents list is built from them)."""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sensorbench import __version__
from sensorbench.characterize.lidar import display as disp
from sensorbench.report.data import (
    POSE_AXES,
    Figure,
    LidarSection,
    LidarStream,
    PodsSection,
    PoseSection,
    ProvenanceSection,
    ReplayRow,
    ValidationSection,
)

if TYPE_CHECKING:
    from sensorbench.characterize.pose.verdict import Verdict

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{border-bottom:2px solid #444}h2{margin-top:2em;border-bottom:1px solid #aaa}
.summary{background:#f3f6fa;border-left:4px solid #3a6ea5;padding:.2em 1em;margin:1em 0}
table{border-collapse:collapse;margin:.8em 0;font-size:.9em}
td,th{border:1px solid #bbb;padding:.25em .6em;text-align:right}
th{background:#eee}td:first-child,th:first-child{text-align:left}
caption{text-align:left;font-weight:bold;padding:.3em 0}
figure{display:inline-block;vertical-align:top;margin:.5em}
img{max-width:520px;border:1px solid #ddd}.figures{display:block}
figure.wide{display:block}figure.wide img{max-width:100%}
.pass{color:#060;font-weight:bold}.fail{color:#b00;font-weight:bold}.note{color:#555}"""


# ------------------------------------------------------------------ small helpers


def esc(v: Any) -> str:
    """HTML-escaped text of ``v``."""
    return html.escape(str(v))


def num(v: Any, fmt: str = "{:.4g}") -> str:
    """A number formatted with ``fmt``; "–" for None or non-finite, escaped text otherwise."""
    if v is None:
        return "–"
    try:
        f = float(v)
    except (TypeError, ValueError):
        return esc(v)
    return "–" if not math.isfinite(f) else fmt.format(f)


class Raw(str):
    """Cell content that is already HTML."""


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> str:
    """A table; cells are escaped unless they are :class:`Raw`."""
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{c if isinstance(c, Raw) else esc(c)}</td>" for c in r) + "</tr>"
        for r in rows
    )
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


WIDE_PX = 800
"""A figure wider than this (px, e.g. the Allan plot's six panels) gets the page's full
width instead of the 520-px column the others share."""


def img(fig: Figure) -> str:
    """A figure with its PNG embedded and its caption (full width when wide)."""
    data = base64.b64encode(fig.png).decode("ascii")
    wide = fig.png[12:16] == b"IHDR" and int.from_bytes(fig.png[16:20], "big") > WIDE_PX
    cls = " class='wide'" if wide else ""
    return (
        f'<figure{cls}><img alt="{esc(fig.caption)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(fig.caption)}</figcaption></figure>"
    )


def verdict_span(ok: bool, yes: str, no: str) -> Raw:
    """``yes`` marked passed (class ``pass``) when ``ok``, else ``no`` marked failed."""
    return Raw(f"<span class='pass'>{yes}</span>" if ok else f"<span class='fail'>{no}</span>")


# ------------------------------------------------------------------ lidars


def _rate_cell(truth: float | None, speed: float, clock: str) -> str:
    if truth is None:
        return ""
    if speed == 1.0:
        return num(truth)
    return f"{num(truth)} ({clock} clock; emulated at {speed:g}×)"


def _lidar_stream(st: LidarStream) -> str:
    t = st.timing
    parts = [table(
        ["figure", "measured", "simulated truth"], _lidar_rows(st),
        f"{st.name} ({st.model}) datasheet; timing on the {t['clock']} clock "
        f"({t['clock_source']})",
    )]
    if st.timing_only_because:
        parts.append(
            f"<p class='note'>{esc(st.name)}: timing only: {esc(st.timing_only_because)}</p>"
        )
    if st.noise is not None:
        parts.append(_band_table(st, st.noise))
    parts.extend(img(f) for f in st.figures)
    return "".join(parts)


def _host_meaning(t: dict[str, Any]) -> str:
    """A host clock that fell behind: why, and what it means for the figures shown."""
    if t["clock"] == "device":
        what = ("this row times the turns by their arrival; the rate above and the other "
                "figures use the device clock and are not affected")
    else:
        what = ("the figures marked (!) time the turns by their arrival, so they show the "
                "host's delays (an emulation faster than real time on a busy host), not the "
                "device's")
    return f"{t['host_timing_note']}: {what}"


def _lidar_rows(st: LidarStream) -> list[tuple]:
    """The datasheet rows of one lidar stream: figure, measured, simulated truth."""
    t, n, tp = st.timing, st.noise, st.truth
    # figures on a host clock that fell behind say so where they are shown
    suspect = "" if t["clock"] == "device" or t["host_timing_reliable"] else " (!)"
    rows = [(
        disp.RATE.heading(), f"{num(t['rate_hz'])} ± {num(st.rate_se_hz, '{:.2g}')}{suspect}",
        _rate_cell(st.rate_truth_hz, st.speed, t["clock"]),
    )]
    if t["clock"] == "device" or suspect:
        rows.append((
            disp.RATE.heading(", host clock"),
            num(t["host_rate_hz"])
            + ("" if t["host_timing_reliable"] else f" (UNRELIABLE: {_host_meaning(t)})"),
            _rate_cell(st.host_rate_truth_hz, st.speed, "host"),
        ))
    rows += [
        (disp.PERIOD.heading(" p50"), num(disp.PERIOD.value(t["period_percentiles_s"]["p50"])), ""),
        (disp.JITTER.heading(" σ"), num(disp.JITTER.value(t.get("jitter_std_s", 0))), ""),
        (disp.POINTS.heading(" (median)"), num(t["points_per_turn"]["median"]), ""),
        (disp.ANGULAR_STEP.heading(), num(t.get("angular_step_deg")), ""),
        (disp.SKIPPED.heading(), num(t.get("skipped_pct")) + suspect,
         "" if tp is None else num(100 * tp.get("skip_prob", 0.0))),
        (disp.LONGEST_GAP.heading(), num(disp.LONGEST_GAP.value(t.get("longest_gap_s", 0))), ""),
    ]
    if n is not None:
        rows += [
            (disp.EDGE_OUTLIERS.heading(),
             f"{num(n['edge_outlier_pct'])} ± {num(n['edge_outlier_pct_se'])}", ""),
            (disp.FALSE_POINTS.heading(),
             f"{num(n['false_point_pct'])} ± {num(n['false_point_pct_se'])}",
             "" if tp is None else num(100 * tp.get("false_point_prob", 0.0))),
        ]
    return rows


def _band_table(st: LidarStream, n: dict) -> str:
    """Range noise by band (static stretches) of one lidar stream, beside the truth."""
    sig = disp.BAND_SIGMA

    def sigma_cell(v: float | None) -> str:
        return num(None if v is None else sig.value(v), sig.fmt)

    brows = [
        (disp.band_label(b["lo_m"], b["hi_m"]), sigma_cell(b["sigma_m"]), sigma_cell(b["se_m"]),
         b["n_points"], sigma_cell(ts))
        for b, ts in zip(n["bands"], st.band_truth_sigma_m, strict=True)
    ]  # fmt: skip
    head = ["range band", sig.heading(), f"±1{sig.heading()}", "points"]
    return table(
        [*head, f"simulated {sig.heading()}"], brows,
        f"{st.name} range noise by band (static stretches)",
    )


def render_lidar(section: LidarSection) -> str:
    """Lidar datasheets, noise bands and plots; empty without a lidar."""
    parts = []
    for ses in section.sessions:
        parts.append(f"<h3>{esc(ses.label)} <span class='note'>({esc(ses.file_name)})</span></h3>")
        parts.extend(_lidar_stream(st) for st in ses.streams)
    if not parts:
        return ""
    return "<h2>Lidars</h2>" + "".join(parts)


# ------------------------------------------------------------------ pods and replay


_POD_UNITS = {
    "distance_per_tick": ("µm", 1e6),
    "wheel_radius": ("mm", 1e3),
    "rolling_angle": ("°", 180 / math.pi),
    "lever_arm": ("mm", 1e3),
}


def render_pods(section: PodsSection) -> str:
    """Pod geometry against the truth, filter noise and the replays."""
    from sensorbench.logs.model_keys import AXES

    rows = []
    for p in section.params:
        unit, scale = _POD_UNITS[p.param]
        sig, tv = p.sigma, p.truth
        rows.append((
            p.name, f"{p.param.replace('_', ' ')} ({unit})", num(p.value * scale, "{:.5g}"),
            num(None if sig is None else sig * scale, "{:.2g}"),
            num(None if tv is None else tv * scale, "{:.5g}"),
            num(None if tv is None or not sig else (p.value - tv) / sig, "{:+.2f}"),
        ))  # fmt: skip
    head = ["pod", "parameter", "fitted", "±1σ", "simulated truth", "z"]
    parts = ["<h2>Pods</h2>", table(head, rows, "pod geometry (pods.toml); z = (fitted − truth)/σ")]
    if section.noise is not None:
        noise = section.noise
        nrows = [(a, num(noise.axis(a).q), num(noise.axis(a).r)) for a in AXES]
        parts.append(table(
            ["axis", "q (m²/s³, rad²/s³)", "r (m², rad²)"], nrows, "filter noise (noise.toml)"
        ))
    parts.append(_render_replay(section.replay))
    return "".join(parts)


_REPLAY_M = ("rms_m", "max_m", "final_m")
"""The replay's position errors (m) shown in cm."""


def _render_replay(replay: list[ReplayRow]) -> str:
    if not replay:
        return ""
    rows = [
        (r.label, *(num(r.errors.get(k, math.nan) * 100, "{:.2f}") for k in _REPLAY_M),
         num(math.degrees(r.errors.get("heading_rms_rad", math.nan)), "{:.3f}"),
         ", ".join(f"{k} {v}" for k, v in r.rejected.items()), r.frames)
        for r in replay
    ]  # fmt: skip
    return (
        "<h3>Replay through the split filters</h3>"
        + table(
            ["session", "RMS (cm)", "max (cm)", "final (cm)", "heading RMS (°)",
             "gate rejections", "frames"],
            rows, "position and heading error against mocap",
        )
        + _render_honesty(replay)
        + "".join(img(f) for r in replay for f in r.figures)
    )


def _render_honesty(replay: list[ReplayRow]) -> str:
    """Claimed against actual: per session and axis, the truth inside the stated bounds."""
    rows = []
    for r in replay:
        cons = r.honesty.get("consistency") or {}
        rates = r.honesty.get("rejection_rate") or {"actual": {}, "nominal": math.nan}
        nis = r.honesty.get("nis") or {}
        monitor = r.honesty.get("monitor") or {}
        for axis, c in cons.items():
            cov = [c["coverage"][k]["actual"] * 100 for k in ("1sigma", "2sigma", "3sigma")]
            lo, hi = c["nees_band95"]
            n = nis.get(axis)
            rows.append((
                r.label, axis, _in_band(c["mean_nees"], [lo, hi]), *(num(v, "{:.1f}") for v in cov),
                "–" if n is None else _in_band(n["mean"], n["band95"]),
                num(rates["actual"].get(axis, math.nan) * 100, "{:.2f}"),
                num(monitor[axis]["degraded_fraction"] * 100, "{:.1f}"),
            ))  # fmt: skip
        if "pods_vs_imu" in monitor:
            frac = monitor["pods_vs_imu"]["degraded_fraction"] * 100
            rows.append((r.label, "pods vs IMU", "", "", "", "", "", "", num(frac, "{:.1f}")))
    if not rows:
        return ""
    nominal = r.honesty.get("rejection_rate", {}).get("nominal", math.nan) * 100
    return table(
        ["session", "axis", "mean NEES [95 % band]", "in 1σ (%)", "in 2σ (%)", "in 3σ (%)",
         "NIS [95 % band]", "rejected (%)", "degraded (%)"],
        rows,
        "is the filters' stated uncertainty honest? Truth inside the stated bounds should be "
        f"68.3 / 95.4 / 99.7 %, the mean NEES and the mean NIS (calibrated to χ²₁ through the "
        f"fitted innovation law) inside their bands, rejections near {nominal:.1f} % (the "
        "gate's nominal rate), and the consistency monitor quiet; 'pods vs IMU' is the "
        "heading cross-check that sees a lifted or slipping wheel. A session the monitor "
        "flags for long is one the fitted model does not describe (e.g. bouncing wheels)",
    )  # fmt: skip


def _in_band(value: float, band: list[float]) -> Raw:
    """``value [lo, hi]`` (two decimals), the value marked out of band (class ``fail``)
    when outside it."""
    shown = esc(num(value, "{:.2f}"))
    if not band[0] <= value <= band[1]:
        shown = f"<span class='fail' title='outside its 95 % band'>{shown} (out)</span>"
    return Raw(f"{shown} [{band[0]:.2f}, {band[1]:.2f}]")


# ------------------------------------------------------------------ pose error and validation


def _shown(value: float | None, unit: str) -> str:
    """A model value in its display unit (mm, deg, s), as ``fit pose-error`` prints it."""
    from sensorbench.characterize.pose.series import DISPLAY_UNITS

    k, _, fmt = DISPLAY_UNITS[unit]
    return num(None if value is None else k * value, fmt).strip()


def _trajectory_table(sessions: list[dict[str, Any]]) -> str:
    """Per session: time offset ± σ, alignment, ATE and RPE (mm, deg) as evo states them."""
    rows = []
    for s in sessions:
        te, off = s.get("trajectory_error"), s["time_offset"]
        sigma = off.get("sigma_s")
        offset = f"{1000 * off['offset_s']:+.2f}" + (
            f" ± {1000 * sigma:.2f}" if sigma is not None and math.isfinite(sigma) else ""
        )
        if te is None:
            rows.append((s["name"], offset, s["alignment_used"], *(["–"] * 7)))
            continue
        ate, rpe_t, rpe_r = te["ate_translation_m"], te["rpe_translation_m"], te["rpe_rotation_deg"]
        rows.append((
            s["name"], offset, s["alignment_used"], ate["n"],
            *(num(1000 * ate[k], "{:.2f}") for k in ("rmse", "mean", "median", "max")),
            f"{te['rpe_delta_frames']} ({te['rpe_delta_s']:.2f} s)",
            num(1000 * rpe_t["rmse"], "{:.2f}"), num(rpe_r["rmse"], "{:.3f}"),
        ))  # fmt: skip
    return table(
        ["session", "time offset (ms)", "alignment", "pairs", "ATE RMSE (mm)", "mean (mm)",
         "median (mm)", "max (mm)", "RPE Δ (frames)", "RPE RMSE (mm)", "RPE RMSE (deg)"],
        rows,
        "trajectory error: ATE = evo_ape (translation, after the alignment); RPE = evo_rpe "
        "(delta in frames, pairs every Δ frames)",
    )  # fmt: skip


def _wrong_table(found: dict[str, Any], simulated: list[dict[str, Any]] | None) -> str:
    """The wrong relocalizations the fit named beside the simulator's (:func:`wrong_lines`)."""
    from sensorbench.characterize.pose.verdict import wrong_lines

    text = esc("\n".join(wrong_lines(found, simulated)))
    return (
        f"<pre>{text}</pre><p class='note'>A wrong relocalization puts the sensor in the "
        "wrong place of its map: its offset is no draw of N(0, σ_b²). The fit names each one "
        "whose offset the usual spread cannot explain and leaves its offset free; σ_b, τ and "
        "σ come from the others, the validation gives every draw the named jumps, and the "
        "requirements are judged between them.</p>"
    )


def render_pose(section: PoseSection) -> str:
    """The pose-error model's parameters, Allan and band plots, then the validation."""
    from sensorbench.characterize.pose.series import DISPLAY_UNITS

    rows = []
    for p in section.params:
        ci = f"[{_shown(p.ci95[0], p.unit)}, {_shown(p.ci95[1], p.unit)}]"
        rows.append((
            p.axis, p.param, _shown(p.value, p.unit),
            ci if p.identified else ("not identified" if p.converged else "fit not converged"),
            DISPLAY_UNITS[p.unit][1], _shown(p.truth, p.unit),
        ))
    note = ""
    if (speed := section.truth_speed) is not None:
        note = (
            "<p class='note'>Simulated truth: σ_b = relocalization offset σ, σ and τ = the "
            "Gauss-Markov part, σ_v = the pose sensor's white noise combined with mocap's. "
        )
        if speed != 1.0:
            note += f"τ is divided by the emulation speed ({speed:g}×): the files run that much "
            note += "faster than simulated time."
        note += "</p>"
    parts = [
        "<a id='pose-sensor'></a><h2>Pose-error model</h2>",
        f"<p>{esc(section.sensor)} against {esc(section.reference)}, model: "
        f"{esc(section.source)}; "
        "error = offset per relocalization (σ_b) + Gauss-Markov (σ, τ) + white (σ_v).</p>",
        table(
            ["axis", "parameter", "fitted", "95 % interval", "unit", "simulated truth"], rows,
            "pose-error model",
        ),
        note,
    ]
    if section.alignment:
        parts.append(f"<p>Frame alignment: {esc(section.alignment)}.</p>")
    parts += [f"<p class='note'>warning: {esc(w)}</p>" for w in section.warnings]
    if section.trajectories:
        parts.append(_trajectory_table(section.trajectories))
    if section.wrong:
        whose = "<p>Named by the model file's fit, on its sessions:</p>" if section.given else ""
        parts.append(whose + _wrong_table(section.wrong, section.simulated_wrong))
    # the Allan figure on its own row, the sessions' band plots side by side below it
    allan, bands = section.figures[:1], section.figures[1:]
    parts.append("<div class='figures'>" + "".join(img(f) for f in allan) + "</div>")
    parts.append("<div class='figures'>" + "".join(img(f) for f in bands) + "</div>")
    if section.validation is not None:
        parts.append(render_validation(section.validation))
    if section.verdict is not None:
        parts.append(render_pose_verdict(section.verdict))
    return "".join(parts)


def render_validation(v: ValidationSection) -> str:
    """Verdict per session, upper-tail p tables, band plots and rank histogram."""
    from sensorbench.characterize.pose.gm_montecarlo import STAT_NAMES

    simulated = any(w is not None for w in v.wrong)
    vrows = []
    for chk, ps, w in zip(v.report.sessions, v.prepared, v.wrong, strict=True):
        failed = ", ".join(f"{f['axis']} {f['statistic']}" for f in chk.failures()) or "–"
        n = ps.series.n_segments - 1
        relocs = f"{n} detected breaks" if ps.segmentation.method == "detected" else n
        row = (chk.name, verdict_span(chk.passed, "PASS", "FAIL"), num(chk.p_joint), ps.series.n)
        vrows.append((*row, relocs, *(["–" if w is None else w] if simulated else []), failed))
    overall = verdict_span(v.report.passed, "PASSED", "FAILED")
    parts = [
        f"<h2>Monte Carlo validation</h2><p>{esc(v.report.mode)}, {v.report.n_draws} "
        f"draws, family-wise α {v.report.alpha}: {overall}</p>",
        *(f"<p class='note'>warning: {esc(w)}</p>" for w in v.report.warnings),
    ]
    head = ["session", "verdict", "joint p", "samples", "relocalizations (flagged)"]
    if simulated:
        head.append("simulated wrong relocalizations")
    parts.append(table([*head, "failed checks"], vrows, "verdict per session"))
    for chk in v.report.sessions:
        prow = [
            [a, *(f"{100 * p:.1f}{' *' if bad else ''}" for p, bad in zip(*rows, strict=True))]
            for a, *rows in zip(POSE_AXES, chk.percentile, chk.failed, strict=True)
        ]
        parts.append(table(
            ["axis", *STAT_NAMES], prow,
            f"{chk.name}: upper-tail p of the real statistic (% of draws at or above it), "
            "* failed",
        ))
    parts.extend(img(f) for f in v.figures)
    return "".join(parts)


def render_pose_verdict(v: Verdict) -> str:
    """HTML: the two-part verdict as ``validate`` prints it (:meth:`Verdict.lines`)."""
    text = html.escape("\n".join(v.lines()))
    return (
        "<h2>Pose-sensor verdict</h2>"
        "<p>Part 1 asks whether the model describes the errors, Part 2 whether they are "
        "small enough. Part 1 fails with a named reason: DRIFT (τ not inside the "
        "relocalization segments the data has, or a consistent trend within them), SCALE "
        "(similarity scale beyond tolerance), FRAME (a session not in the campaign's map), "
        "MISFIT (the Monte Carlo validation). Part 2 needs a requirement "
        "(<code>sensorbench validate --require</code>).</p>"
        f"<pre>{text}</pre>"
    )


# ------------------------------------------------------------------ provenance


def _flat(attrs: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted key, value)`` rows of nested metadata, numbers with 6 significant digits."""
    out: list[tuple[str, str]] = []
    for k, v in attrs.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out += _flat(v, f"{key}.")
        elif isinstance(v, float):
            out.append((key, f"{v:.6g}"))
        elif isinstance(v, list | tuple):
            out.append((key, ", ".join(f"{x:.6g}" if isinstance(x, float) else str(x) for x in v)))
        else:
            out.append((key, str(v)))
    return out


def render_provenance(section: ProvenanceSection) -> str:
    """Model files, then per session its file facts and streams."""
    parts = ["<h2>Provenance</h2>"]
    if section.models:
        mrows = [
            (m.name, m.kind, m.software, m.created_utc, m.sha256,
             f"{m.n_inputs} ({m.n_inputs_here} in this report, matched by SHA-256)")
            for m in section.models
        ]  # fmt: skip
        head = ["model file", "kind", "software", "created (UTC)", "SHA-256", "inputs"]
        parts.append(table(head, mrows, "model files"))
    for s in section.sessions:
        info = s.info
        keys = ("label", "software_version", "created_utc", "schema_version", "size_bytes",
                "status")
        shown = {"created_utc": "created (UTC)", "size_bytes": "size (bytes)"}
        rows: list[tuple[str, Any]] = [("file", s.path.name), ("SHA-256", s.sha256)] + [
            (shown.get(k, k.replace("_", " ")), info.get(k)) for k in keys
        ]  # fmt: skip
        if s.emulation_speed is not None:
            rows.append(("simulated", f"yes; emulation speed {s.emulation_speed:g}×"))
        srows = []
        for st in info.get("streams", []):
            attrs = {k: v for k, v in (st.get("attrs") or {}).items() if k != "config_line"}
            lines = [f"<code>{esc(k)}</code> {esc(v)}" for k, v in _flat(attrs)]
            srows.append((st.get("name"), st.get("kind"), Raw("<br>".join(lines) or "–")))
        parts.append(table(["field", "value"], rows, f"session {s.path.stem}"))
        if srows:
            parts.append(table(["stream", "kind", "device metadata"], srows, "streams"))
    return "".join(parts)


# ------------------------------------------------------------------ the page


def _contents(body: str) -> tuple[str, str]:
    """(a list of links to the sections, the body with an id on every section heading)."""
    titles: list[str] = []

    def number(m: re.Match[str]) -> str:
        titles.append(m.group(1))
        return f"<h2 id='section-{len(titles)}'>{m.group(1)}</h2>"

    body = re.sub(r"<h2>(.*?)</h2>", number, body)
    links = "".join(f"<li><a href='#section-{i}'>{t}</a></li>" for i, t in enumerate(titles, 1))
    return f"<nav><ul>{links}</ul></nav>", body


def render_page(body: str, n_sessions: int, summaries: Sequence[str] = ()) -> str:
    """The whole page around the sections' HTML ``body``: title, one line per sensor
    (``summaries``, each linked to its section), contents list, style."""
    contents, sections = _contents(body)
    if summaries:
        lines = "".join(f"<li><a href='#pose-sensor'>{esc(s)}</a></li>" for s in summaries)
        contents = f"<div class='summary'><ul>{lines}</ul></div>" + contents
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>sensorbench report</title><style>{_CSS}</style></head><body>"
        f"<h1>sensorbench report</h1><p class='note'>sensorbench {esc(__version__)}, "
        f"{n_sessions} sessions. Units: SI unless a column says otherwise.</p>"
        + contents + sections + "</body></html>"
    )
