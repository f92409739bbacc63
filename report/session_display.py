"""What the session-file commands (``info``, ``check``, ``import``, ``export``) print:
text lines and JSON from the library's results (spans and gaps in s, rates in Hz)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_META = ("model", "serial", "port_path", "firmware")
"""Stream attributes ``info`` shows beside each stream."""


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
        keys = ("span_s", "rate_hz", "max_gap_s")
        spans = ("-" if st.get(k) is None else f"{st[k]:.3f}" for k in keys)
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
        head + f"{info['duration_s']:.3f} s", f"{'topic':<32} {'type':<44} {'count':>8}",
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


def _listed(n: int, what: str, places: list[str]) -> str:
    return f"{n} {what}: " + ", ".join(places)


def import_lines(res: Any, file: Path, session: Path, duplicates: str) -> list[str]:
    """``import mocap|pose|pods``: what was imported, the lines dropped for a repeated
    stamp and the poses flagged RELOCALIZED (each as ``FILE:LINE``)."""
    out = [f"imported {res.samples} samples from {file} into {session} as stream {res.name!r}"]
    if res.dropped_lines:
        what = f"line(s) repeating a timestamp (--duplicates {duplicates})"
        places = [f"{file}:{n}" for n in res.dropped_lines]
        out.append("dropped " + _listed(len(res.dropped_lines), what, places))
    if res.relocalized_lines:
        what = "pose(s) that replaced a different pose at the same stamp"
        places = [f"{file}:{n}" for n in res.relocalized_lines]
        out.append("flagged RELOCALIZED " + _listed(len(res.relocalized_lines), what, places))
    return out


def rosbag_lines(
    parsed: Any, bag: Path, session: Path, duplicates: str, reloc: str | None, events: str | None
) -> list[str]:
    """``import rosbag``: per stream what was imported (scans or samples), its TF chain
    and the messages dropped for a repeated stamp; then the relocalizations and events."""
    out = []
    for b in parsed.streams:
        imp, topic = b.imported, b.spec.topic
        n_turns = getattr(imp.batch, "n_turns", None)
        what = f"{n_turns} scans" if n_turns is not None else f"{len(imp.batch)} samples"
        out.append(f"imported {what} from {topic} into {session} as stream {b.spec.name!r}")
        if imp.attrs.get("ros_tf_chain"):
            skipped = imp.attrs["ros_tf_stamps_skipped"]
            out.append(
                f"  chain {imp.attrs['ros_tf_chain']}, at the stamps of "
                f"{imp.attrs['ros_tf_stamps_from']}"
                + (f" ({skipped} outside another link's samples skipped)" if skipped else "")
            )
        if imp.dropped_lines:
            what = f"message(s) repeating a stamp (--duplicates {duplicates})"
            places = [f"{bag}:{topic}:{n}" for n in imp.dropped_lines]
            out.append("  dropped " + _listed(len(imp.dropped_lines), what, places))
    if reloc:
        out.append(f"{len(parsed.reloc_ns)} relocalization(s) from {reloc}")
    if events:
        out.append(f"{len(parsed.events) - len(parsed.reloc_ns)} event(s) from {events}")
    return out


def mcap_lines(done: Any, output: Path) -> list[str]:
    """``export --format mcap``: messages per topic, rays per lidar turn (and points left
    out), the stamps' offset (ns) and the invalid samples skipped."""
    counts = done.messages
    topics = ", ".join(f"{t} {n}" for t, n in sorted(counts.items()))
    out = [f"wrote {sum(counts.values())} messages to {output}" + (f": {topics}" if topics else
                                                                  " (the streams hold no rows)")]
    for lidar, bins in done.bins.items():
        dropped = done.points_dropped[lidar]
        note = f", {dropped} point(s) sharing a ray with a nearer one not written"
        out.append(f"  {lidar}: {bins} rays per turn{note if dropped else ''}")
    if done.time_offset_ns:
        anchor = f"session times + {done.time_offset_ns} ns (the session's clock anchor)"
        out.append(f"  stamps: {anchor}")
    out += [
        f"skipped {n} invalid {'turns' if key.startswith('lidar') else 'samples'} of /{key} "
        "(--skip-invalid)"
        for key, n in done.skipped.items()
    ]
    return out
