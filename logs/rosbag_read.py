"""Reading ROS bags with ``rosbags``: open, list, and read topics connection by connection.

Each connection is read on its own (rosbags merging several re-decompresses a ROS 1
chunk per message) and a topic's connections are merged by receive time afterwards.
Messages are reduced to plain values at once, with the cyclic garbage collector paused
while they pile up (they hold no cycles).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError

Extract = Callable[[int, Any], Any]
"""``extract(receive ns, message)``: the plain values kept of one message."""

Progress = Callable[[int, int], None]
"""``progress(done, total)``: messages read so far of ``total``."""


def open_bag(bag: Path) -> Any:
    """An open ``rosbags.highlevel.AnyReader`` of ``bag``.

    Raises:
        ImportFormatError: no such path, or not a bag rosbags can read.
    """
    from rosbags.highlevel import AnyReader, AnyReaderError

    if not bag.exists():
        raise ImportFormatError(f"{bag}: no such bag")
    if bag.is_dir() and not (bag / "metadata.yaml").is_file():
        raise ImportFormatError(
            f"{bag} is a directory without metadata.yaml: neither a session file nor a "
            "rosbag2 bag"
        )
    try:
        reader = AnyReader([bag])
        reader.open()
    except AnyReaderError as exc:
        raise ImportFormatError(f"{bag}: not a readable ROS bag ({exc})") from None
    except Exception as exc:  # rosbags on a damaged file: AssertionError, struct.error, ...
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ImportFormatError(f"{bag}: not a readable ROS bag ({what})") from None
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
    """Topics (type, message count), time span (s) and format of a bag; every message is
    decoded, so a damaged bag is reported as the import would report it.

    Raises:
        ImportFormatError: not a bag, or a damaged record or message (named).
    """
    bag = Path(path)
    reader = open_bag(bag)
    try:
        counts: dict[str, int] = {}
        for c in reader.connections:
            counts[c.topic] = counts.get(c.topic, 0) + int(c.msgcount)
        types = topic_types(bag, reader)
        read_topics(bag, reader, [(t, lambda _recv, _msg: None) for t in types])
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


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off inside, restored after (see the module)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_topics(
    bag: Path,
    reader: Any,
    uses: list[tuple[str, Extract]],
    progress: Progress | None = None,
) -> list[list[Any]]:
    """For each use ``(topic, extract)``, ``extract(receive ns, message)`` of every message
    of the topic, in receive order (each message deserialized once).

    Raises:
        ImportFormatError: a message rosbags cannot deserialize (naming ``BAG:TOPIC:N``).
    """
    by_topic: dict[str, list[int]] = {}
    for k, (topic, _) in enumerate(uses):
        by_topic.setdefault(topic, []).append(k)
    conns = [c for c in reader.connections if c.topic in by_topic]
    total = sum(int(c.msgcount) for c in conns)
    out: list[list[Any]] = [[] for _ in uses]
    parts: dict[str, list[tuple[list[int], list[list[Any]]]]] = {t: [] for t in by_topic}
    done = 0
    with collector_paused():
        for conn in conns:
            fns = [uses[k][1] for k in by_topic[conn.topic]]
            tick = None if progress is None else (lambda n, at=done: progress(at + n, total))
            recv, rows = _read_connection(bag, reader, conn, fns, tick)
            parts[conn.topic].append((recv, rows))
            done += len(recv)
    if progress is not None:
        progress(done, total)
    for topic, ks in by_topic.items():
        if len(parts[topic]) == 1:
            columns = parts[topic][0][1]
        elif parts[topic]:  # several publishers: merged by receive time, ties in order
            order = np.argsort(np.concatenate([p[0] for p in parts[topic]]), kind="stable")
            joined = [[x for p in parts[topic] for x in p[1][j]] for j in range(len(ks))]
            columns = [[rows[i] for i in order] for rows in joined]
        else:
            continue
        for k, rows in zip(ks, columns, strict=True):
            out[k] = rows
    return out


_TICK = 4096
"""Messages between two progress reports."""


def _deserializer(reader: Any, msgtype: str) -> Callable[[Any], Any]:
    """``deserialize(raw)`` for one message type: rosbags' generated function for it,
    called directly (its ``deserialize`` looks the type up again for every message)."""
    store = reader.typestore
    try:
        msgdef = store.get_msgdef(msgtype)
        cls = msgdef.cls
        if reader.is2:
            le, be = msgdef.deserialize_cdr_le, msgdef.deserialize_cdr_be
        else:
            ros1 = msgdef.deserialize_ros1
    except (AttributeError, KeyError):  # another rosbags: its public call
        return lambda raw: reader.deserialize(raw, msgtype)
    if reader.is2:

        def cdr(raw: Any) -> Any:
            if raw[0] != 0 or raw[1] not in (0, 1):
                raise ValueError("invalid or unsupported CDR encapsulation")
            return (le if raw[1] else be)(raw[4:], 0, cls, store)[0]

        return cdr
    return lambda raw: ros1(raw, 0, cls, store)[0]


def _read_connection(
    bag: Path, reader: Any, conn: Any, fns: list[Extract], tick: Callable[[int], None] | None
) -> tuple[list[int], list[list[Any]]]:
    """Receive times and, per extract function, its value of every message of ``conn``;
    ``tick(messages read)`` every :data:`_TICK` messages."""
    deserialize = _deserializer(reader, conn.msgtype)
    recv: list[int] = []
    rows: list[list[Any]] = [[] for _ in fns]
    messages = reader.messages(connections=[conn])
    try:
        while True:  # batches of _TICK messages, a progress report after each
            before = len(recv)
            for _, t, raw in islice(messages, _TICK):
                recv.append(t)
                msg = deserialize(raw)
                for fn, r in zip(fns, rows, strict=True):
                    r.append(fn(t, msg))
            if len(recv) == before:
                break
            if tick is not None:
                tick(len(recv))
    except ImportFormatError:
        raise
    except Exception as exc:  # rosbags raises assorted types on a corrupt message
        raise ImportFormatError(
            f"{bag}:{conn.topic}:{len(recv) + 1}: cannot read the message "
            f"({type(exc).__name__}: {exc})"
        ) from None
    return recv, rows
