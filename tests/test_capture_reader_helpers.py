"""The status and event helpers every device reader shares (drivers/reader_base.py)."""

from __future__ import annotations

import collections
import time

import pytest
from timing_util import SLACK_S

from sensorbench.drivers.reader_base import RateMeter, join_thread, record_event, seconds_since
from sensorbench.errors import SessionError


class _Writer:
    """A session writer stand-in recording events, or failing like a full disk."""

    def __init__(self, fail: bool = False, error: BaseException | None = None) -> None:
        self.fail = fail
        self.error = error
        self.written: list[tuple[int, str, str, str]] = []

    def event(self, t_ns: int, source: str, kind: str, message: str) -> None:
        if self.fail:
            raise SessionError("disk full")
        self.written.append((t_ns, source, kind, message))


def test_record_event_writes_and_keeps() -> None:
    events: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=2)
    w = _Writer()
    for i in range(3):
        assert record_event(events, w, "lidar", i, "note", f"m{i}") is None
    assert w.written == [(i, "lidar", "note", f"m{i}") for i in range(3)]
    assert list(events) == [(1, "note", "m1"), (2, "note", "m2")]  # the most recent maxlen


def test_record_event_survives_a_failed_writer() -> None:
    events: collections.deque[tuple[int, str, str]] = collections.deque()
    exc = record_event(events, _Writer(fail=True), "pods", 5, "unplug", "gone")
    assert isinstance(exc, SessionError)
    assert list(events) == [(5, "unplug", "gone")]
    # a writer whose thread already failed is not asked again, the event is still kept
    dead = _Writer(fail=True, error=OSError("disk full"))
    assert record_event(events, dead, "pods", 6, "note", "x") is None
    assert list(events)[-1] == (6, "note", "x")
    assert record_event(events, None, "pods", 7, "note", "y") is None
    assert len(events) == 3


def test_rate_meter() -> None:
    clock = iter([10.0, 10.5, 10.5, 12.5])
    meter = RateMeter(clock=lambda: next(clock))
    assert meter.rates(100, 7) == (0.0, 0.0)  # no earlier snapshot
    assert meter.rates(600, 8) == pytest.approx((1000.0, 2.0))  # 500 B and 1 item in 0.5 s
    assert meter.rates(700, 8) == (0.0, 0.0)  # no host time passed
    assert meter.rates(700, 9) == pytest.approx((0.0, 0.5))  # from the 10.5 s snapshot


def test_seconds_since() -> None:
    assert seconds_since(None) == float("inf")
    # 2.5 s ago; the call itself takes far less than the 0.1 s allowed
    assert seconds_since(time.monotonic_ns() - 2_500_000_000) == pytest.approx(2.5, abs=0.1)


def test_join_thread_reports_a_thread_that_will_not_end() -> None:
    import threading

    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(5.0,), daemon=True)
    stuck.start()
    t0 = time.monotonic()
    msg = join_thread(stuck, "pods", 0.2)
    assert 0.2 <= time.monotonic() - t0 < 0.2 + SLACK_S  # its deadline, not the 5 s thread
    assert msg == "pods: reader thread did not stop within 0.2 s"
    release.set()
    assert join_thread(stuck, "pods", 2.0) is None
    assert join_thread(None, "pods", 0.0) is None
