"""How ``decode ld19`` and ``decode a1`` show their summaries on the command line (text
only; the commands print). Counts are of bytes, packets, nodes, turns and points; ranges
beyond the unit's limit (m) are stored as nan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SHOWN_OFFSETS = 20
"""Byte offsets listed before the rest is elided ("...")."""

LD19_COUNTS = (
    "bytes", "packets", "crc_failures", "bytes_skipped", "unknown_packets", "span_failures",
    "timestamp_failures", "speed_failures", "lost_packets", "ranges_beyond_limit",
)  # fmt: skip


def _offsets(items: list[Any]) -> tuple[str, str]:
    """The first :data:`SHOWN_OFFSETS` items joined, and " ..." when there are more."""
    shown = ", ".join(str(i) for i in items[:SHOWN_OFFSETS])
    return shown, " ..." if len(items) > SHOWN_OFFSETS else ""


def ld19_decode_lines(summary: dict[str, Any]) -> list[str]:
    """``decode ld19``'s summary: turns and points, each counter, the impossible packets
    skipped (byte offsets and why), the time base."""
    lines = [f"{summary['output']}: {summary['turns']} turns, {summary['points']} points"]
    lines += [f"  {key:16s} {summary[key]}" for key in LD19_COUNTS]
    bad = summary["impossible_offsets"]
    if bad:
        shown, more = _offsets([f"{b['offset']} ({b['reason']})" for b in bad])
        lines.append(f"  skipped impossible packets at byte offsets {shown}{more}")
    lines.append(f"  time base        {summary['time_base']}")
    return lines


def a1_decode_lines(output: Path, summary: dict[str, Any]) -> list[str]:
    """``decode a1``'s summary: turns, points, bytes, scan starts and bytes skipped, the time
    base; then the nodes dropped for an impossible angle and the ranges beyond 12 m."""
    lines = [
        f"{output}: {summary['turns']} turns, {summary['points']} points from "
        f"{summary['bytes']} bytes ({summary['scans']} scan starts, "
        f"{summary['bytes_skipped']} bytes skipped); times: {summary['time_base']}"
    ]
    dropped = summary["nodes_dropped_offsets"]
    if dropped or summary["ranges_beyond_limit"]:
        shown, more = _offsets(dropped)
        lines.append(
            f"  {len(dropped)} nodes dropped for an impossible angle (>= 360 deg)"
            + (f" at byte offsets {shown}{more}" if shown else "")
            + f"; {summary['ranges_beyond_limit']} ranges beyond 12 m stored as nan"
        )
    return lines
