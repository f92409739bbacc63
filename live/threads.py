"""Threads named after what they serve, and bounded queues that drop instead of waiting.

Every thread of a live run has a name that says what it does: the device readers
``reader-<device>``, the session writer, the runtime's ``live-odometry``,
``live-merge`` and ``live-view``. Python names a thread for itself only; the kernel's
name (what ``top -H`` and ``ps -L`` show, 15 bytes) is set by :func:`name_os_threads`
through ``pthread_setname_np`` (glibc), with the device's name first: ``lidar_front``,
not ``reader-lidar_fr``.

:class:`DropQueue` is how a producer hands work to a consumer that may fall behind (a
viewer): bounded, never blocking the producer; when it is full the oldest item goes
and is counted.
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import sys
import threading
from typing import Any

OS_NAME_BYTES = 15
"""Longest kernel thread name (bytes, without the terminating NUL)."""

_libc: Any = None


def os_thread_name(name: str) -> str:
    """The kernel name for a Python thread name: ``reader-<device>`` → ``<device>``,
    ``session-writer:FILE`` → ``writer``, cut to :data:`OS_NAME_BYTES` bytes."""
    if name.startswith("reader-"):
        name = name[len("reader-") :]
    elif name.startswith("session-writer"):
        name = "writer"
    return name.encode()[:OS_NAME_BYTES].decode(errors="ignore")


def _pthread_setname() -> Any:
    global _libc
    if _libc is None:
        path = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(path) if path else False
    fn = getattr(_libc, "pthread_setname_np", None) if _libc else None
    if fn is not None:
        fn.argtypes = [ctypes.c_ulong, ctypes.c_char_p]
        fn.restype = ctypes.c_int
    return fn


def name_os_threads() -> int:
    """Give every live Python thread its kernel name (Linux; elsewhere nothing).

    Returns:
        Threads named (0 where the platform has no ``pthread_setname_np``).
    """
    if not sys.platform.startswith("linux"):
        return 0
    fn = _pthread_setname()
    if fn is None:
        return 0
    done = 0
    for t in threading.enumerate():
        if t.ident is None or t is threading.main_thread():
            continue
        if fn(t.ident, os_thread_name(t.name).encode()) == 0:
            done += 1
    return done


class DropQueue:
    """A bounded queue that never blocks its producer: full, it drops the oldest item.

    Args:
        capacity: items kept at most.

    Attributes:
        dropped: items dropped so far.
    """

    def __init__(self, capacity: int) -> None:
        self._items: collections.deque[Any] = collections.deque()
        self._capacity = int(capacity)
        self._cond = threading.Condition()
        self.dropped = 0

    def put(self, item: Any) -> None:
        """Add ``item``; drop the oldest when full."""
        with self._cond:
            if len(self._items) >= self._capacity:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout_s: float) -> Any:
        """The oldest item, waiting at most ``timeout_s`` (s); None when none came."""
        with self._cond:
            if not self._items:
                self._cond.wait(timeout_s)
            return self._items.popleft() if self._items else None

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)
