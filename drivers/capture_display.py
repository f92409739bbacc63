"""How a capture is shown on the command line: status line, bring-up table, summary
(text only; the commands print). Times in s, rates per second, sizes in bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sensorbench.drivers.capture import BringupResult, CaptureResult
    from sensorbench.drivers.reader_base import ReaderStatus


def format_status_parts(
    elapsed_s: float, duration_s: float, statuses: list[ReaderStatus]
) -> list[str]:
    """The elapsed time, then one short text per device: its mode (an A1's scan mode),
    points (lidars) or frames (pods) per second, turns per second, kB/s, CRC errors, drops,
    and seconds since its last data (``UNPLUGGED`` while it is away, ``READER DOWN`` when its reader
    thread ended, ``READER FAILED n`` after n reader restarts: data were lost)."""
    total = f"/{duration_s:.0f}" if math.isfinite(duration_s) else ""
    parts = [f"{elapsed_s:6.1f}{total} s"]
    for st in statuses:
        if st.reader_down:
            parts.append(f"{st.name} READER DOWN {st.since_last_data_s:.1f}s")
            continue
        if not st.connected:
            parts.append(f"{st.name} UNPLUGGED {st.since_last_data_s:.1f}s")
            continue
        unit = "fr/s" if st.kind == "pods" else "pt/s"
        turns = f" {st.turns_per_s:.1f}Hz" if st.kind != "pods" else ""
        since = "-" if math.isinf(st.since_last_data_s) else f"{st.since_last_data_s:.1f}s"
        parts.append(
            f"{st.name}{' ' + st.mode if st.mode else ''} {st.items_per_s:.0f}{unit}{turns} "
            f"{st.bytes_per_s / 1000:.1f}kB/s "
            f"crc {st.crc_errors} drop {st.drops} {since}"
            + (f" READER FAILED {st.reader_failures}" if st.reader_failures else ""))
    return parts


def format_bringup(results: list[BringupResult]) -> str:
    """The bring-up table."""
    rows = [("device", "kind", "port", "result", "time", "detail")]
    for r in results:
        rows.append(
            (r.name, r.kind, r.port, "ok" if r.ok else "FAILED", f"{r.seconds:.1f} s", r.message))
    return table(rows)


def format_summary(result: CaptureResult) -> str:
    """The end-of-capture table: what the file holds per device."""
    rows: list[tuple[str, ...]] = [
        ("device", "kind", "bytes", "points/frames", "turns", "crc", "drops", "unplugs")]
    for d in result.devices:
        numbers = (d.bytes, d.items, d.turns, d.crc_errors, d.drops, d.unplugs)
        rows.append((d.name, d.kind, *map(str, numbers)))
    head = f"{result.path}: recorded {result.recorded_s:.1f} s, stopped by {result.stopped_by}"
    lost = [f"DATA LOST: {d.name}: its reader thread failed {d.reader_failures} time(s)"
        + (" and was down at the end" if d.reader_down else ", restarted each time")
        + " (the session's error events say why)" for d in result.devices if d.data_lost]
    return "\n".join([head, table(rows), *lost])


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """``rows`` (the first the header) as text columns padded to their widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)
