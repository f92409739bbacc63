"""Serving emulators from the command line: until Ctrl-C or a deadline, with timed faults
(emulators are created inside :func:`stop_on_signals`, so a Ctrl-C stops them cleanly)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sensorbench.errors import SimError

if TYPE_CHECKING:
    from sensorbench.sim.emulator_base import SimClock

POLL_S = 0.05  # host seconds between checks of the stop event, deadline and schedule


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by SIGINT, SIGTERM or SIGHUP (a dropped SSH session to the robot) while
    the block runs (off the main thread: only by the caller); the previous handlers are
    restored on exit."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    for sig in old:
        signal.signal(sig, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def serve_until_stopped(
    stop: threading.Event,
    duration_s: float | None = None,
    *,
    clock: SimClock | None = None,
    schedule: Sequence[tuple[float, str, float]] = (),
    on_fault: Callable[[float, str, float], None] | None = None,
    until: threading.Event | None = None,
) -> None:
    """Block until ``stop`` (or ``until``: the emulator ended) is set or ``duration_s``
    host seconds (s) have passed, handing each ``(t_s, action, arg)`` row of ``schedule``
    to ``on_fault`` once ``clock.now()`` (simulated s) reaches ``t_s``."""
    pending = list(schedule)
    if pending and (clock is None or on_fault is None):
        raise SimError("serve_until_stopped: a fault schedule needs a clock and on_fault")
    t_end = None if duration_s is None else time.monotonic() + duration_s
    while not stop.is_set() and not (until is not None and until.is_set()):
        if pending:
            assert clock is not None and on_fault is not None  # checked above
            while pending and clock.now() >= pending[0][0]:
                on_fault(*pending.pop(0))
        wait = POLL_S if t_end is None else min(POLL_S, t_end - time.monotonic())
        if wait <= 0:
            return
        stop.wait(wait)


def speed_shortfall(speed: float, achieved: float) -> str:
    """A warning when an emulator served less than 0.9 of the simulated time asked for
    (it sent as fast as it could: the host, its pump or an absent reader held it back);
    "" when it kept up. ``speed``, ``achieved``: simulated s per host s, asked and served."""
    if achieved >= 0.9 * speed:
        return ""
    return (
        f"warning: ran at {achieved:.3g}x, not the asked {speed:g}x: the emulator "
        "served as fast as it could"
    )
