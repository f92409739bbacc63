"""Messages of one bag connection decoded as numpy columns, not one by one.

Messages of equal length whose bytes agree everywhere but in their numbers (length
prefixes, strings, padding) share one layout: every number lies at the same offset in
each. The layout is walked once, from the first message (ROS 1, or CDR of either byte
order), and checked against rosbags' own decoding of it (every number, the end); the
other messages' non-number bytes are then compared with the first's at once. Values
are the bytes rosbags would read, so nothing differs from decoding one by one; a
group that does not qualify returns None and is decoded message by message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_DTYPES = {"bool": "u1", "byte": "u1", "char": "u1", "int8": "i1", "uint8": "u1",
           "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4", "int64": "i8",
           "uint64": "u8", "float32": "f4", "float64": "f8"}  # fmt: skip
_MIN_GROUP = 16
"""Fewer messages of one length are decoded one by one (a layout costs a decode)."""


class _Walk:
    """The number fields of one message: path -> (offset, dtype, count; None: scalar)."""

    def __init__(self, store: Any, body: bytes, start: int, cdr: str | None) -> None:
        self.store, self.body, self.start, self.cdr = store, body, start, cdr
        self.pos = start
        self.leaves: dict[str, tuple[int, np.dtype, int | None]] = {}

    def _align(self, size: int) -> None:
        if self.cdr:
            self.pos += -(self.pos - self.start) % size

    def _u32(self) -> int:
        self._align(4)
        self.pos += 4
        return int(np.frombuffer(self.body, f"{self.cdr or '<'}u4", 1, self.pos - 4)[0])

    def _node(self, path: str, node: tuple, count: int | None = None) -> None:
        kind, desc = int(node[0]), node[1]  # rosbags' Nodetype: BASE 1, NAME 2, ARRAY 3, SEQUENCE 4
        if kind == 2:  # a message
            for k in range(count or 1):
                self.message(desc, f"{path}.{k}." if count is not None else f"{path}.")
        elif kind in (3, 4):  # a fixed array, a sequence
            sub, n = desc
            self._node(path, sub, n if kind == 3 else self._u32())
        elif desc[0] == "string":
            for _ in range(count or 1):
                size = self._u32()
                self.pos += size
        else:
            dtype = np.dtype(f"{self.cdr or '<'}{_DTYPES[desc[0]]}")
            if count != 0:
                self._align(dtype.itemsize)
            self.leaves[path] = (self.pos, dtype, count)
            self.pos += dtype.itemsize * (count if count is not None else 1)

    def message(self, msgtype: str, prefix: str) -> None:
        """Walk the fields of one ``msgtype`` from the current position."""
        for name, node in self.store.get_msgdef(msgtype).fields:
            self._node(prefix + name, node)


def value(msg: Any, path: str) -> Any:
    """The field of a decoded message at ``path`` (``transforms.0.child_frame_id``)."""
    for part in path.split("."):
        msg = msg[int(part)] if part.isdigit() else getattr(msg, part)
    return msg


class Columns:
    """The messages of one layout: ``self(path)`` a number field as an (n,) column (an
    (n, k) table for an array), ``first`` the first message as rosbags decodes it (its
    strings and sequence lengths hold for every message)."""

    def __init__(self, table: np.ndarray, leaves: dict, first: Any) -> None:
        self.table, self.leaves, self.first = table, leaves, first

    def __call__(self, path: str) -> np.ndarray:
        """The field at ``path`` (``pose.position.x``; ``transforms.0.…`` in a sequence)."""
        at, dtype, count = self.leaves[path]
        size = dtype.itemsize * (1 if count is None else count)
        values = np.ascontiguousarray(self.table[:, at : at + size]).view(dtype)
        return values[:, 0] if count is None else values

    def stamp(self, path: str) -> np.ndarray:
        """A ``builtin_interfaces/Time`` field as int64 ns."""
        sec = self(f"{path}.sec").astype(np.int64)
        return sec * 1_000_000_000 + self(f"{path}.nanosec").astype(np.int64)


def columns(
    reader: Any, msgtype: str, raws: list[bytes], deserialize: Callable[[Any], Any]
) -> Columns | None:
    """The messages ``raws`` (all of one length) of ``msgtype`` as columns, or None when
    they do not share one layout (then decode them one by one)."""
    if len(raws) < _MIN_GROUP:
        return None
    first = raws[0]
    try:
        msg = deserialize(first)
        cdr = None if not reader.is2 else ("<" if first[1] else ">")
        walk = _Walk(reader.typestore, first, 4 if cdr else 0, cdr)
        walk.message(msgtype, "")
        if walk.pos > len(first) or any(v for v in first[walk.pos :]):
            return None
        for path, (at, dtype, count) in walk.leaves.items():
            ours = np.frombuffer(first, dtype, 1 if count is None else count, at)
            if np.asarray(value(msg, path)).astype(dtype).tobytes() != ours.tobytes():
                return None
    except Exception:  # a damaged first message, a type the walk does not know, a wrong walk
        return None
    table = np.frombuffer(b"".join(raws), np.uint8).reshape(len(raws), len(first))
    fixed = np.ones(len(first), bool)
    for at, dtype, count in walk.leaves.values():
        fixed[at : at + dtype.itemsize * (1 if count is None else count)] = False
    if not (table[:, fixed] == table[0, fixed]).all():
        return None
    return Columns(table, walk.leaves, msg)


@dataclass(frozen=True)
class Batched:
    """A bag import's extract ``one(receive ns, message)`` and its twin ``many(receive ns
    (n,), columns)``: the values ``one`` keeps of each of the messages, all at once."""

    one: Callable[[int, Any], Any]
    many: Callable[[np.ndarray, Columns], list]

    def __call__(self, recv: int, m: Any) -> Any:
        return self.one(recv, m)
