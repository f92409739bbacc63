"""Wall-clock bounds in tests.

A test of a deadline checks two things: the wait is not cut short (a lower bound,
exact) and it ends (an upper bound). On a shared, loaded machine scheduling alone
can add seconds to any wait, so upper bounds carry :data:`SLACK_S`: they still catch a
wait that hangs or retries without end, not a slow scheduler. How fast things are is
measured by ``sensorbench bench``, not asserted here.
"""

import time
from collections.abc import Callable

SLACK_S = 2.0
"""Scheduling allowance added to every upper bound on elapsed wall time (s)."""


def wait_until(cond: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``cond`` every 10 ms until it holds; fail the test after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)
