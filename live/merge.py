"""The front/rear lidar merge as turns arrive: one thread, ``live-merge``.

The two lidars' turns are pushed in arrival order into the
:class:`~sensorbench.fusion.scan_merge.StreamingMerger`, the code of ``sensorbench
merge`` chunked, so the session's ``merged`` stream is what ``merge`` writes from the
recorded streams (docs/LIVE.md, "Live is replay").
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from sensorbench.fusion.scan_merge import MergeSetup, StreamingMerger
from sensorbench.fusion.scan_merge_session import MERGED_STREAM
from sensorbench.logs import LidarTurns, SessionWriter

_STOP = object()


def merged_stream_attrs(front: str, rear: str, setup: MergeSetup) -> dict[str, Any]:
    """The ``merged`` stream's attributes (those of ``sensorbench merge``'s output that
    are known before the first turn)."""
    return {
        "model": "merged",
        "frame": "base_link",
        "mount_xy_yaw": [0.0, 0.0, 0.0],
        "sources": [front, rear],
        "max_dt_s": setup.max_dt_s,
        "pose_source": "",
        "footprint_removed": setup.footprint is not None,
        "recorded_by": "sensorbench live",
    }


class MergeWorker:
    """The ``live-merge`` thread (module docstring).

    Args:
        front, rear: the two lidar stream names.
        setup: mounts, footprint and pairing window (as ``merge`` builds it).
        publish: called with each batch of merged turns; must not block.
    """

    def __init__(self, front: str, rear: str, setup: MergeSetup,
                 publish: Callable[[LidarTurns], None]) -> None:  # fmt: skip
        self.sides = {front: "front", rear: "rear"}
        self.front, self.rear = front, rear
        self.setup = setup
        self.publish = publish
        self.merger = StreamingMerger(setup)
        self.writer: SessionWriter | None = None
        self.merged = 0
        self.errors = 0
        self.last_error: str | None = None
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def turns(self, name: str, turns: LidarTurns) -> None:
        """A lidar's new turns (any thread)."""
        if name in self.sides:
            self._inbox.put((self.sides[name], turns))

    def start(self, writer: SessionWriter) -> None:
        """Start the thread; merged turns go to ``writer``."""
        self.writer = writer
        self._thread = threading.Thread(target=self._run, name="live-merge", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Merge what is queued and every pair still pending, then stop."""
        self._inbox.put(_STOP)
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                self.last_error = f"live-merge did not stop within {timeout_s:g} s"

    def _run(self) -> None:
        while True:
            item = self._inbox.get()
            try:
                if item is _STOP:
                    self._emit(self.merger.flush())
                    return
                self._emit(self.merger.push(*item))
            except Exception as exc:  # report, keep running: the recording goes on
                self.errors += 1
                self.last_error = f"live-merge: {exc!r}"

    def _emit(self, merged: LidarTurns) -> None:
        if merged.n_turns == 0:
            return
        self.merged += merged.n_turns
        if self.writer is not None:
            self.writer.append_turns(MERGED_STREAM, merged)
        self.publish(merged)


def unpaired(worker: MergeWorker) -> dict[str, int]:
    """Turns of each lidar left without a partner so far."""
    return {worker.front: worker.merger.unpaired["front"],
            worker.rear: worker.merger.unpaired["rear"]}  # fmt: skip
