"""How a demo's outcome is shown, as text lines or one JSON document: the recovered values
beside the truth, the filters' honesty, the verdict (SI units; coverages as fractions in
the document, percent in the text)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sensorbench.demo.campaign import DemoResult


def demo_doc(res: DemoResult, warnings: list[str], total_s: float) -> dict[str, Any]:
    """The ``demo --json`` document."""
    pose = res.report_data.get("pose_error") or {}
    return {
        "report": str(res.report),
        "models": {k: str(v) for k, v in res.models.items()},
        "sessions": {k: str(c.path) for k, c in res.sessions.items()},
        "summary": summary_rows(res),
        "validation": res.report_data.get("validation"),
        "wrong_relocalizations": {
            "named": pose.get("wrong_relocalizations"),
            "simulated": pose.get("simulated_wrong_relocalizations"),
        },
        "filter_honesty": _honesty_rows(res.report_data.get("replay") or []),
        "timings_s": res.timings_s,
        "warnings": warnings,
        "total_s": total_s,
    }


def demo_lines(res: DemoResult, total_s: float) -> list[str]:
    """The demo's summary as text lines."""
    from sensorbench.characterize.pose.verdict import wrong_lines

    out = [f"{'quantity':<40} {'recovered':>12} {'±1σ':>10} {'truth':>12}"]
    for r in summary_rows(res):
        out.append(f"{r['name']:<40} {r['value']:12.5g} {r['sigma']:10.2g} {r['truth']:12.5g}")
        if "host clock" in r["name"] and r.get("clock_note", "").startswith("host clock unrel"):
            out.append(f"  ^ {r['clock_note']}")
    honesty = _honesty_rows(res.report_data.get("replay") or [])
    if honesty:
        n = sum(h["n"] for h in honesty)
        pooled = sum(h["in_2sigma"] * h["n"] for h in honesty) / max(n, 1)
        in_band = sum(h["nees_inside_band"] for h in honesty)
        out.append(
            f"split filters against mocap: truth inside the stated 2σ {pooled * 100:.1f} % "
            f"pooled over {len(honesty)} (run, axis) (expected 95.4 %); mean NEES inside its "
            f"95 % band in {in_band} of {len(honesty)}. One run holds few independent "
            "samples (its error is mostly one calibration draw), so single runs scatter:"
        )
        out.append(
            "  "
            + "; ".join(f"{h['session']} {h['axis']} {h['in_2sigma'] * 100:.0f} %" for h in honesty)
        )
    v = res.report_data.get("validation")
    if v is not None:
        verdicts = ", ".join(
            f"{c['name']} {'pass' if c['passed'] else 'FAIL'}"
            + _wrong_note(c.get("simulated_wrong_relocalizations"))
            for c in v["sessions"]
        )
        out.append(
            f"validation ({v['mode']}, {v['n_draws']} draws): "
            f"{'PASSED' if v['passed'] else 'FAILED'} ({verdicts})"
        )
    pose = res.report_data.get("pose_error") or {}
    named = pose.get("wrong_relocalizations") or {}
    out += wrong_lines(named, pose.get("simulated_wrong_relocalizations"))
    out.append(f"done in {total_s:.0f} s; report: {res.report}")
    return out


def summary_rows(res: DemoResult) -> list[dict[str, Any]]:
    """Key recovered values next to the simulated truth, from the report's content: rows
    of ``name``, ``value``, ``sigma`` (1σ; pose-error model: the 95 % interval's width /
    3.92, the intervals as ``ci95``, ``ci99.9``), ``truth``, ``unit`` (SI; τ on the files'
    time base)."""
    data = res.report_data or {}
    rows: list[dict[str, Any]] = []
    units = {"distance_per_tick": "m", "rolling_angle": "rad", "lever_arm": "m"}
    for p in data.get("pods", []):
        if p["param"] in units and p["truth"] is not None:
            unit = units[p["param"]]
            name = f"pod{p['pod']} {p['param']} ({unit})"
            rows.append(_row(name, p["value"], p["sigma"], p["truth"], unit))
    pose = (data.get("pose_error") or {}).get("params", [])
    for p in pose:
        wanted = p["axis"] in ("x", "y", "yaw") and p["param"] in ("sigma_b", "sigma", "tau_s")
        if wanted and p["truth"] is not None:
            unit = "s" if p["param"] == "tau_s" else ("rad" if p["axis"] == "yaw" else "m")
            lo, hi = p["ci95"]
            sigma = (hi - lo) / 3.92 if np.isfinite(hi - lo) else float("nan")
            name = f"pose {p['axis']} {p['param']} ({unit})"
            rows.append(_row(name, p["value"], sigma, p["truth"], unit, ci95=[lo, hi]))
            rows[-1]["ci99.9"] = p["ci99.9"]
    for name, entry in (data.get("lidar") or {}).get("lidar_static", {}).items():
        if entry["rate_truth_hz"] is not None:
            t = entry["timing"]
            rows.append(_row(
                f"{name} scan rate (Hz, {t['clock']} clock)", entry["rate_hz"],
                entry["rate_se_hz"], entry["rate_truth_hz"], "Hz", clock_note=t["host_timing_note"],
            ))  # fmt: skip
        for b in entry["noise_bands"]:
            if b["truth_sigma_m"] is not None and b["sigma_m"] is not None:
                band = f"{name} σ {b['lo_m']:g}-{b['hi_m']:g} m (m)"
                rows.append(_row(band, b["sigma_m"], b["se_m"], b["truth_sigma_m"], "m"))
    return rows


def _row(name: str, value: float, sigma: float, truth: float, unit: str, **extra: Any) -> dict:
    """A row of :func:`summary_rows` (value, 1σ and truth in ``unit``)."""
    return {"name": name, "value": value, "sigma": sigma, "truth": truth, "unit": unit, **extra}


def _honesty_rows(replay: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claimed against actual per replayed session and axis (from the report's replay)."""
    return [
        {
            "session": r["session"],
            "axis": axis,
            "n": c["n"],
            "mean_nees": c["mean_nees"],
            "nees_band95": c["nees_band95"],
            "nees_inside_band": c["nees_band95"][0] <= c["mean_nees"] <= c["nees_band95"][1],
            **{f"in_{k}": c["coverage"][k]["actual"] for k in ("1sigma", "2sigma", "3sigma")},
            "rejected": r["rejection_rate"]["actual"][axis],
            "rejected_nominal": r["rejection_rate"]["nominal"],
            "degraded_fraction": r["monitor"][axis]["degraded_fraction"],
            "nis_mean": ((r.get("nis") or {}).get(axis) or {}).get("mean"),
            "nis_band95": ((r.get("nis") or {}).get(axis) or {}).get("band95"),
        }
        for r in replay
        for axis, c in (r.get("consistency") or {}).items()
    ]


def _wrong_note(n: int | None) -> str:
    """`` (k simulated wrong relocalizations)`` for a session that has any, else empty."""
    return f" ({n} simulated wrong relocalization{'s' if n > 1 else ''})" if n else ""
