"""Reading ROS bags with ``rosbags``: open and list them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sensorbench.errors import ImportFormatError


def open_bag(bag: Path) -> Any:
    """An open ``rosbags.highlevel.AnyReader`` of ``bag``; ImportFormatError if it is none."""
    from rosbags.highlevel import AnyReader, AnyReaderError

    if not bag.exists():
        raise ImportFormatError(f"{bag}: no such bag")
    try:
        reader = AnyReader([bag])
        reader.open()
    except (AnyReaderError, OSError, ValueError, KeyError) as exc:
        raise ImportFormatError(f"{bag}: not a readable ROS bag ({exc})") from None
    return reader


def bag_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Topics (type, message count), time span (s) and format of a bag."""
    bag = Path(path)
    reader = open_bag(bag)
    try:
        topics = {
            name: {"type": info.msgtype, "count": int(info.msgcount)}
            for name, info in sorted(reader.topics.items())
        }
        return {
            "path": str(bag),
            "format": "rosbag2" if reader.is2 else "rosbag1",
            "messages": int(reader.message_count),
            "start_ns": int(reader.start_time) if reader.message_count else None,
            "duration_s": reader.duration / 1e9 if reader.message_count else 0.0,
            "topics": topics,
        }
    finally:
        reader.close()
