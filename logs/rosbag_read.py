"""Reading ROS bags with ``rosbags``: open, list, and read topics connection by connection.

rosbags' ``messages(connections=[...])`` over several connections of a ROS 1 bag
merges their indexes by time and re-reads (and decompresses) a chunk whenever the
next message lies in another one, which on a bag whose chunks do not interleave the
topics costs a decompression per message; one connection at a time reads each chunk
once. So every topic is read on its own and its connections (a topic recorded from
several publishers has several) merged by receive time afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from sensorbench.errors import ImportFormatError

Progress = Callable[[int, int], None]
"""``progress(done, total)``: messages read so far of ``total``."""

PROGRESS_EVERY = 2000
"""Messages between two calls of a progress callback."""


def open_bag(bag: Path) -> Any:
    """An open ``rosbags.highlevel.AnyReader`` of ``bag``.

    Raises:
        ImportFormatError: no such path, or not a bag rosbags can read.
    """
    from rosbags.highlevel import AnyReader, AnyReaderError

    if not bag.exists():
        raise ImportFormatError(f"{bag}: no such bag")
    try:
        reader = AnyReader([bag])
        reader.open()
    except (AnyReaderError, OSError, ValueError, KeyError) as exc:
        raise ImportFormatError(f"{bag}: not a readable ROS bag ({exc})") from None
    return reader


def topic_types(bag: Path, reader: Any) -> dict[str, str]:
    """Topic -> message type; a topic whose connections disagree on the type is an error."""
    types: dict[str, str] = {}
    for c in reader.connections:
        if types.setdefault(c.topic, c.msgtype) != c.msgtype:
            raise ImportFormatError(
                f"{bag}: topic {c.topic!r} carries two message types, {types[c.topic]!r} "
                f"and {c.msgtype!r}"
            )
    return types


def bag_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Topics (type, message count), time span (s) and format of a bag."""
    bag = Path(path)
    reader = open_bag(bag)
    try:
        counts: dict[str, int] = {}
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + int(c.msgcount)
        types = topic_types(bag, reader)
        return {
            "path": str(bag),
            "format": "rosbag2" if reader.is2 else "rosbag1",
            "messages": int(reader.message_count),
            "start_ns": int(reader.start_time) if reader.message_count else None,
            "duration_s": reader.duration / 1e9 if reader.message_count else 0.0,
            "topics": {t: {"type": types[t], "count": counts[t]} for t in sorted(types)},
        }
    finally:
        reader.close()


def read_topics(
    bag: Path, reader: Any, topics: Collection[str], progress: Progress | None = None
) -> dict[str, list[tuple[int, Any]]]:
    """``topic -> [(receive ns, message), ...]`` in receive order, for every named topic.

    Raises:
        ImportFormatError: a message rosbags cannot deserialize (naming ``BAG:TOPIC:N``).
    """
    conns = [c for c in reader.connections if c.topic in topics]
    total = sum(int(c.msgcount) for c in conns)
    out: dict[str, list[tuple[int, Any]]] = {t: [] for t in topics}
    done = 0
    several = {t for t in topics if sum(c.topic == t for c in conns) > 1}
    for conn in conns:
        rows = out[conn.topic]
        deserialize = reader.deserialize
        msgtype = conn.msgtype
        append = rows.append
        try:
            for _, recv_ns, raw in reader.messages(connections=[conn]):
                append((recv_ns, deserialize(raw, msgtype)))
                done += 1
                if progress is not None and done % PROGRESS_EVERY == 0:
                    progress(done, total)
        except Exception as exc:  # rosbags raises assorted types on a corrupt message
            if isinstance(exc, ImportFormatError):
                raise
            raise ImportFormatError(
                f"{bag}:{conn.topic}:{len(rows) + 1}: cannot read the message "
                f"({type(exc).__name__}: {exc})"
            ) from None
    for t in several:
        out[t].sort(key=lambda r: r[0])  # stable: a tie keeps connection order
    if progress is not None:
        progress(done, total)
    return out
