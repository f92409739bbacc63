"""A session writer's stand-in for a reader's link, shared by the LD19 and pod tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

B = TypeVar("B")


class WriterSink(Generic[B]):
    """Keeps the batches a protocol hands its writer (readable while the reader runs) and
    drops the raw bytes and the events; ``join`` makes one batch of the kept ones."""

    error = None

    def __init__(self, join: Callable[[list[B]], B]) -> None:
        self.batches: list[B] = []
        self._join = join
        self._lock = threading.Lock()

    def keep(self, name: str, batch: B) -> None:
        with self._lock:
            self.batches.append(batch)

    append_turns = append_encoder = keep

    def append_raw(self, *_: object) -> None:
        pass

    def event(self, *_: object) -> None:
        pass

    def collected(self) -> B:
        """Every batch so far, as one."""
        with self._lock:
            return self._join(list(self.batches))
