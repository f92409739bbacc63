"""Threads named after what they serve, and bounded queues that drop instead of waiting.

Python names a thread for itself only; :func:`name_os_threads` sets the kernel's name
too (what ``top -H`` shows, 15 bytes; docs/LIVE.md, "Robust by construction"), the
device's name first: ``lidar_front``, not ``reader-lidar_fr``.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

OS_NAME_BYTES = 15
"""Longest kernel thread name (bytes, without the terminating NUL)."""


def os_thread_name(name: str) -> str:
    """The kernel name for a Python thread name: ``reader-<device>`` → ``<device>``,
    ``session-writer:FILE`` → ``writer``, cut to :data:`OS_NAME_BYTES` bytes."""
    if name.startswith("reader-"):
        name = name[len("reader-") :]
    elif name.startswith("session-writer"):
        name = "writer"
    return name.encode()[:OS_NAME_BYTES].decode(errors="ignore")


def name_os_threads() -> int:
    """Give every live Python thread its kernel name (Linux; elsewhere nothing), through
    ``/proc/self/task/<tid>/comm``: a thread that ended meanwhile is a missing file (its
    ``pthread_t``, what ``pthread_setname_np`` takes, may point to freed memory by then).

    Returns:
        Threads named.
    """
    done = 0
    for t in threading.enumerate():
        if t.native_id is None or t is threading.main_thread():
            continue
        try:
            with open(f"/proc/self/task/{t.native_id}/comm", "w") as comm:
                comm.write(os_thread_name(t.name))
            done += 1
        except OSError:  # ended, or no /proc
            pass
    return done


class DropQueue:
    """A bounded queue that never blocks its producer: full, it drops the oldest item.

    Args:
        capacity: items kept at most.

    Attributes:
        dropped: items dropped so far.
    """

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[Any] = collections.deque(maxlen=int(capacity))
        self._cond = threading.Condition()
        self.dropped = 0

    def put(self, item: Any) -> None:
        """Add ``item``; drop the oldest when full."""
        with self._cond:
            self.dropped += len(self._items) == self._items.maxlen
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout_s: float) -> Any:
        """The oldest item, waiting at most ``timeout_s`` (s); None when none came."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout_s)
            return self._items.popleft() if self._items else None
