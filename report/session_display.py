"""How the session-file commands show their results (``info``, ``check``): text lines and
JSON documents built from the library's results; the commands print them.

Units: spans, rates' periods and gaps in s, rates in Hz; counts as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_META = ("model", "serial", "port_path", "firmware")
"""Stream attributes ``info`` shows beside each stream."""


def _fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _details(st: dict[str, Any]) -> str:
    """What ``info`` says of a stream beyond the shared columns, and its device metadata."""
    kind = st["kind"]
    if kind == "lidar":
        text = f"{st['points']} points"
    elif kind == "raw":
        text = f"{st['bytes']} bytes"
    elif kind == "encoder":
        text = f"{st['counters']} counters{', IMU' if st['has_imu'] else ''}"
    else:
        text = (
            f"{st['attrs'].get('kind')}, valid {st['valid_fraction']:.1%}, "
            f"{st['relocalizations']} relocalizations"
        )
    meta = " ".join(f"{k}={v}" for k, v in st["attrs"].items() if k in _META)
    return f"{text}  {meta}" if meta else text


def info_lines(info: dict[str, Any], session: Path) -> list[str]:
    """``info SESSION``: the file's facts, a row per stream, events, truth and damage."""
    out = [
        f"{info['path']}  label={info['label']!r}  status={info['status']}  "
        f"schema v{info['schema_version']}  written by sensorbench {info['software_version']}  "
        f"created {info['created_utc']}",
        f"{'kind':<8} {'name':<16} {'count':>10} {'span s':>9} {'rate Hz':>9} "
        f"{'max gap s':>9} {'gaps>3x':>7}  details",
    ]
    for st in info["streams"]:
        count = {"lidar": "turns", "raw": "chunks"}.get(st["kind"], "count")
        spans = (_fmt_s(st.get(k)) for k in ("span_s", "rate_hz", "max_gap_s"))
        out.append(
            f"{st['kind']:<8} {st['name']:<16} {st.get(count, 0):>10} "
            + " ".join(f"{v:>9}" for v in spans)
            + f" {st.get('gaps_over_3x_median', 0):>7}  {_details(st)}"
        )
    if info["events"]:
        out.append("events: " + ", ".join(f"{k}={v}" for k, v in sorted(info["events"].items())))
    if info["truth"]:
        out.append(f"truth: {len(info['truth'])} datasets (simulated session)")
    out += [f"damaged: {p} (spans and rates above include it)" for p in info["problems"]]
    if info["problems"]:
        out.append(f"`sensorbench check {session}` lists every problem")
    return out


def bag_lines(info: dict[str, Any], session: Path) -> list[str]:
    """``info BAG``: its format, message count, span (s) and a row per topic (``session``,
    the bag, is named by ``info["path"]``)."""
    head = f"{info['path']}  {info['format']}  {info['messages']} messages over "
    return [
        head + f"{info['duration_s']:.3f} s",
        f"{'topic':<32} {'type':<44} {'count':>8}",
        *(f"{topic:<32} {t['type']:<44} {t['count']:>8}" for topic, t in info["topics"].items()),
    ]


def check_doc(session: Path, report: Any, recovery: Any) -> dict[str, Any]:
    """``check --json``: the :class:`~sensorbench.logs.check.CheckReport` and the recovery
    (None when none was made)."""
    doc: dict[str, Any] = {
        "path": str(session), "ok": report.ok, "status": report.status.name.lower(),
        "errors": report.errors, "warnings": report.warnings, "rows": report.consistent_rows,
        "point_time_reversals": report.point_time_reversals,
    }  # fmt: skip
    if report.in_use:
        doc["in_use"] = report.in_use
    if report.writer_unknown:
        doc["writer_unknown"] = report.writer_unknown
    if recovery is not None:
        doc["recovered"] = {
            "backup": str(recovery.backup) if recovery.backup else None,
            "kept_rows": recovery.kept_rows,
            "dropped_rows": recovery.dropped_rows,
        }
    return doc


def check_lines(session: Path, report: Any, recovery: Any, unrecovered: bool) -> list[str]:
    """``check``'s text: in use, not recovered (``unrecovered``: another host's writer),
    what a recovery kept, the errors and warnings, and the verdict."""
    out = []
    if report.in_use:
        out.append(f"{session} is in use: {report.in_use}; not touched")
    elif unrecovered:
        out.append(
            f"{session}: {report.writer_unknown}; not recovered (run check on that host, "
            "or pass --force once you know it has stopped)"
        )
    if recovery is not None:
        out.append(
            f"recovered {session}: its writer had died or failed; original kept as "
            f"{recovery.backup}"
        )
        for key, n in recovery.kept_rows.items():
            dropped = recovery.dropped_rows.get(key, 0)
            note = f", dropped {dropped} partly written rows" if dropped else ""
            out.append(f"  {key}: kept {n} rows{note}")
    out += [f"error: {e}" for e in report.errors] + [f"warning: {w}" for w in report.warnings]
    if recovery is None and report.repairable and report.status.name != "WRITING":
        out.append(f"`sensorbench check --recover {session}` keeps the consistent rows")
    state = "in use" if report.in_use else report.status.name.lower()
    out.append(f"{session}: {'OK' if report.ok else 'NOT OK'} ({state})")
    return out
