"""Import ROS bags (rosbag2 sqlite3 or MCAP, ROS 1 ``.bag``) into sessions, via ``rosbags``:
each ``--topic`` one stream, each ``--tf`` a pose stream composed from ``/tf`` and
``/tf_static`` (docs/FORMAT.md, "ROS bags"); errors name ``BAG:TOPIC:N`` (1-based).

Each connection is read on its own (rosbags merging several re-decompresses a ROS 1
chunk per message) and a topic's connections are merged by receive time afterwards.
Messages of one layout are decoded as numpy columns (:mod:`~sensorbench.logs.bag_columns`),
the rest one by one and reduced to plain values at once, with the cyclic garbage collector
paused while they pile up (they hold no cycles).
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.errors import ImportFormatError
from sensorbench.logs import rosbag_streams as rs
from sensorbench.logs.atomic_output import regular_input
from sensorbench.logs.bag_columns import Batched, columns
from sensorbench.logs.batches import EncoderBatch, Event, LidarTurns, PoseBatch
from sensorbench.logs.importers import (
    MAX_ABS_POSITION_M,
    file_sha256,
    refuse_impossible,
    session_writer,
)
from sensorbench.logs.ros2_cdr import BODY_FRAME
from sensorbench.logs.rosbag_streams import (
    COUNTS_TYPE,
    DIAGNOSTICS_TYPE,
    IMPORTABLE,
    LOG_TYPES,
    SCAN_TYPE,
    TF_TOPICS,
    TF_TYPES,
    TIME_REFERENCE_TYPE,
    BagStream,
    Extract,
    Progress,
    TfSpec,
    TopicSpec,
)
from sensorbench.logs.schema import PoseFlag
from sensorbench.logs.tf_tree import TfCollector, TfTree

__all__ = ["BagImport", "BagStream", "TfSpec", "TopicSpec", "bag_info", "import_rosbag",
           "read_rosbag"]  # fmt: skip


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
    if not bag.is_dir():  # a FIFO or a device: rosbags' open would wait for a writer forever
        regular_input(bag, ImportFormatError, "ROS bag")
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
    at = 1  # the message being read or decoded (1-based), for errors
    try:
        while True:  # batches of _TICK messages, a progress report after each
            before, raws = len(recv), []
            for _, t, raw in islice(messages, _TICK):
                recv.append(t)
                raws.append(raw)
                at += 1
            if len(recv) == before:
                break
            batch = recv[before:]
            out, rest = _batched(reader, conn.msgtype, deserialize, fns, batch, raws)
            for i in rest:
                at = before + i + 1
                msg = deserialize(raws[i])
                for fn, o in zip(fns, out, strict=True):
                    o[i] = fn(batch[i], msg)
            for r, o in zip(rows, out, strict=True):
                r += o
            at = len(recv) + 1
            if tick is not None:
                tick(len(recv))
    except ImportFormatError:
        raise
    except Exception as exc:  # rosbags raises assorted types on a corrupt message
        raise ImportFormatError(
            f"{bag}:{conn.topic}:{at}: cannot read the message ({type(exc).__name__}: {exc})"
        ) from None
    return recv, rows


def _batched(
    reader: Any, msgtype: str, deserialize: Callable[[Any], Any], fns: list[Extract],
    recv: list[int], raws: list[bytes],
) -> tuple[list[list[Any]], list[int]]:  # fmt: skip
    """Per extract, its values of the messages ``raws`` that share a layout with others of
    their length (:mod:`~sensorbench.logs.bag_columns`), when every extract is
    :class:`Batched`; and the indices of the messages left to decode one by one."""
    out: list[list[Any]] = [[None] * len(raws) for _ in fns]
    if not all(isinstance(fn, Batched) for fn in fns):
        return out, list(range(len(raws)))
    lengths = np.fromiter(map(len, raws), np.int64, len(raws))
    rest: list[int] = []
    for length in np.unique(lengths):
        group = np.flatnonzero(lengths == length)
        cols = columns(reader, msgtype, [raws[i] for i in group], deserialize)
        if cols is None:
            rest += group.tolist()
            continue
        t = np.array(recv, np.int64)[group]
        for fn, o in zip(fns, out, strict=True):
            for i, value in zip(group.tolist(), fn.many(t, cols), strict=True):  # type: ignore[attr-defined]
                o[i] = value
    return out, sorted(rest)


@dataclass
class BagImport:
    """Every stream parsed from one bag, the relocalization stamps and the events."""

    streams: list[BagStream] = field(default_factory=list)
    reloc_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    events: list[Event] = field(default_factory=list)


_Companion = tuple[str, str, Extract, Callable[[Path, str, list, BagStream], None], str]
_COMPANIONS: tuple[_Companion, ...] = (
    ("time_reference", TIME_REFERENCE_TYPE, rs.time_reference_extract, rs.apply_time_reference,
     "pose"),
    ("flags", DIAGNOSTICS_TYPE, rs.flags_extract, rs.apply_flags, "encoder"),
)  # fmt: skip
"""Topics ``/PREFIX/LEAF`` read beside a ``--topic /PREFIX/...``: leaf, message type,
extract, how it applies to the stream, and the kind of stream it does not apply to."""


def _companions(types: dict[str, str], spec: TopicSpec) -> list[tuple[str, _Companion]]:
    """The :data:`_COMPANIONS` the bag has beside ``spec``'s topic, each with its topic."""
    prefix = spec.topic.rsplit("/", 1)[0]
    found = [(f"{prefix}/{c[0]}", c) for c in _COMPANIONS if prefix]
    return [(t, c) for t, c in found if t != spec.topic and types.get(t) == c[1]]


def _check_request(
    bag: Path,
    types: dict[str, str],
    topics: list[TopicSpec],
    tfs: list[TfSpec],
    reloc_topic: str | None,
    events_topic: str | None,
) -> None:
    if not topics and not tfs:
        raise ImportFormatError(f"{bag}: name at least one --topic TOPIC=NAME or --tf")
    names = [s.name for s in topics] + [s.name for s in tfs]
    if len(set(names)) != len(names):
        raise ImportFormatError(f"--topic/--tf: stream names must differ, got {names}")
    wanted = [s.topic for s in topics] + [t for t in (reloc_topic, events_topic) if t]
    for topic in wanted:
        if topic not in types:
            raise ImportFormatError(
                f"{bag}: no topic {topic!r} (topics: {', '.join(sorted(types)) or 'none'})"
            )
    for s in topics:
        if types[s.topic] not in IMPORTABLE:
            raise ImportFormatError(
                f"{bag}: topic {s.topic!r} has type {types[s.topic]!r}, which cannot be "
                f"imported (supported: {', '.join(IMPORTABLE)})"
            )
        if types[s.topic] == "tf2_msgs/msg/TFMessage" and not s.child_frame:
            raise ImportFormatError(
                f"{bag}: topic {s.topic!r} is a TF topic: name the child frame, "
                f"--topic '{s.topic}[CHILD_FRAME]={s.name}', or compose a chain with "
                "--tf PARENT:CHILD=NAME"
            )
        if s.kind is not None and types[s.topic] in (SCAN_TYPE, COUNTS_TYPE):
            raise ImportFormatError(
                f"{bag}: --topic {s.topic}={s.name}:{s.kind}: {s.topic!r} has type "
                f"{types[s.topic]!r}, not a pose: it becomes a lidar or encoder stream, "
                "which has no pose kind (drop ':KIND')"
            )
    if events_topic and types[events_topic] not in (DIAGNOSTICS_TYPE, *LOG_TYPES):
        raise ImportFormatError(
            f"{bag}: --events topic {events_topic!r} has type {types[events_topic]!r} "
            f"(events come from {', '.join((DIAGNOSTICS_TYPE, *LOG_TYPES))})"
        )
    if tfs and not any(types.get(t) in TF_TYPES for t in TF_TOPICS):
        raise ImportFormatError(
            f"{bag}: --tf needs /tf or /tf_static, and the bag has neither "
            f"(topics: {', '.join(sorted(types)) or 'none'})"
        )


def _mount_from_tf(tree: TfTree, stream: BagStream) -> None:
    """``mount_xy_yaw`` of a lidar whose frame is fixed to the body in ``/tf_static``."""
    from scipy.spatial.transform import Rotation

    frame = str(stream.imported.attrs.get("frame", ""))
    pose = tree.static_pose(BODY_FRAME, frame) if frame else None
    if pose is None:
        return
    p, q = pose
    yaw = float(Rotation.from_quat(q).as_euler("ZYX")[0])
    stream.imported.attrs["mount_xy_yaw"] = [float(p[0]), float(p[1]), yaw]
    stream.imported.attrs["ros_mount_xyz_xyzw"] = [*map(float, p), *map(float, q)]
    stream.imported.attrs["mount_units"] = f"m, m, rad (CCW), from /tf_static {BODY_FRAME}->{frame}"


@collector_paused()  # the messages are held until the streams are built
def read_rosbag(
    path: str | os.PathLike[str],
    topics: list[TopicSpec],
    reloc_topic: str | None = None,
    max_position_m: float = MAX_ABS_POSITION_M,
    duplicates: str = "last",
    *,
    tfs: list[TfSpec] | None = None,
    events_topic: str | None = None,
    progress: Progress | None = None,
) -> BagImport:
    """Parse the named topics and TF chains of a bag; ``progress`` is called with (messages
    read, messages to read).

    Raises:
        ImportFormatError: a missing topic or frame (listing what the bag has), an
            unsupported message type, a TF topic without the child frame, or a bad value.
    """
    bag, tfs = Path(path), tfs or []
    uses: list[tuple[str, Extract]] = []

    def use(topic: str, extract: Extract) -> int:
        uses.append((topic, extract))
        return len(uses) - 1

    reader = open_bag(bag)
    collector = TfCollector()
    try:
        types = topic_types(bag, reader)
        _check_request(bag, types, topics, tfs, reloc_topic, events_topic)
        main = [use(s.topic, rs.topic_extract(types[s.topic], s.child_frame)) for s in topics]
        beside = [[(t, c, use(t, c[2])) for t, c in _companions(types, s)] for s in topics]
        reloc = use(reloc_topic, rs.message_time) if reloc_topic else None
        events = None
        if events_topic:
            events = use(events_topic, rs.events_extract(events_topic, types[events_topic]))
        scans = any(types[s.topic] == SCAN_TYPE for s in topics)
        # chains need /tf and /tf_static, the lidars' mounts /tf_static
        tf_uses = [
            use(topic, collector.extract(static=topic == "/tf_static"))
            for topic in (TF_TOPICS if tfs else ("/tf_static",) if scans else ())
            if types.get(topic) in TF_TYPES
        ]
        rows = read_topics(bag, reader, uses, progress)
    finally:
        reader.close()
    for k in tf_uses:
        collector.add(rows[k])
    tree = collector.tree(str(bag))
    out = BagImport()
    for s, k, extra in zip(topics, main, beside, strict=True):
        stream = _topic_stream(bag, s, types[s.topic], rows[k], tree, max_position_m, duplicates)
        for topic, (*_, apply, skipped_kind), j in extra:
            if stream.kind != skipped_kind:
                apply(bag, topic, rows[j], stream)
        out.streams.append(stream)
    out.streams += [rs.tf_stream(bag, spec, tree, max_position_m) for spec in tfs]
    if events is not None:
        out.events = [e for message in rows[events] for e in message]
    if reloc_topic and reloc is not None:
        out.reloc_ns = np.array(rows[reloc], dtype=np.int64)
        _flag_relocalizations(bag, reloc_topic, out)
        out.events += [
            Event(int(t), reloc_topic, "relocalization", f"{reloc_topic} message")
            for t in out.reloc_ns.tolist()
        ]
    return out


def _topic_stream(
    bag: Path, spec: TopicSpec, msgtype: str, rows: list, tree: TfTree, max_position_m: float,
    duplicates: str,
) -> BagStream:  # fmt: skip
    """The stream of one ``--topic`` from the rows its extract gave (one per message)."""
    if not rows:
        raise ImportFormatError(f"{bag}: topic {spec.topic!r} has no messages")
    if msgtype == SCAN_TYPE:
        stream = rs.scan_stream(bag, spec, rows, duplicates)
        _mount_from_tf(tree, stream)
        return stream
    if msgtype == COUNTS_TYPE:
        return rs.count_stream(bag, spec, rows, duplicates)
    return rs.pose_stream(bag, spec, rows, max_position_m, duplicates)


def _flag_relocalizations(bag: Path, topic: str, out: BagImport) -> None:
    """Flag RELOCALIZED on each pose-sensor stream's first sample at or after each stamp."""
    targets = [
        (b, b.imported.batch)
        for b in out.streams
        if isinstance(b.imported.batch, PoseBatch) and rs.pose_kind(b.spec) == "pose_sensor"
    ]
    if not targets:
        raise ImportFormatError(
            f"{bag}: --reloc-topic {topic!r} needs a pose-sensor stream to flag "
            "(a --topic whose kind is pose_sensor)"
        )
    for b, batch in targets:
        k = np.searchsorted(batch.t_ns, out.reloc_ns, side="left")
        k = k[k < len(batch)]
        batch.flags[k] |= np.uint8(PoseFlag.RELOCALIZED)
        b.imported.attrs["ros_reloc_topic"] = topic


def import_rosbag(bag: Path, parsed: BagImport, session: str | os.PathLike[str]) -> None:
    """Add the streams and events :func:`read_rosbag` parsed from ``bag`` to ``session``
    (created if missing), all at once (:func:`~sensorbench.logs.importers.session_writer`)."""
    for b in parsed.streams:
        refuse_impossible(Path(f"{bag}:{b.spec.topic}"), b.spec.name, b.imported.batch)
    source = {"source_file": bag.name}
    if bag.is_file():
        source["source_sha256"] = file_sha256(bag)
    with session_writer(session) as writer:
        for b in parsed.streams:
            attrs = {**b.imported.attrs, **source}
            batch = b.imported.batch
            if isinstance(batch, LidarTurns):
                writer.add_lidar(b.spec.name, attrs=attrs)
                writer.append_turns(b.spec.name, batch)
            elif isinstance(batch, EncoderBatch):
                writer.add_encoder(b.spec.name, n_counts=batch.counts.shape[1], attrs=attrs)
                writer.append_encoder(b.spec.name, batch)
            else:
                writer.add_pose(b.spec.name, kind=rs.pose_kind(b.spec), attrs=attrs)
                writer.append_pose(b.spec.name, batch)
            writer.add_columns(b.kind, b.spec.name, b.columns())
        for e in parsed.events:
            writer.event(e.t_ns, e.source, e.kind, e.message)
