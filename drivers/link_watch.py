"""The one reconnect machine: silence detection and reopen backoff of a serial link.

Times are host ``time.monotonic_ns()`` values passed in: no clock or thread of its own.
"""

from __future__ import annotations

from enum import Enum


class Silence(Enum):
    """What a silence on the link calls for."""

    NONE = "none"
    STALE = "stale"
    RESTART = "restart"


class LinkWatch:
    """Silence and reopen bookkeeping of one link: ``stale`` once per silence, then
    ``resumed``; ``restart`` at most once per ``restart_after_s``; reopen waits doubling
    from ``backoff_s`` (the first attempt is immediate). Times as :class:`LinkConfig`'s (s).
    """

    def __init__(self, stale_after_s: float = 0.5, backoff_s: float = 0.05,
            backoff_max_s: float = 1.0, restart_after_s: float | None = None) -> None:
        self.stale_after_s = stale_after_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.restart_after_s = restart_after_s
        self.stale = False
        self.silent_from_ns = 0
        self.delay_s = backoff_s
        self.next_attempt_ns = 0

    # -- data ------------------------------------------------------------------------

    def opened(self, t_ns: int) -> None:
        """The port was (re)opened at ``t_ns``: silence counts from now, backoff resets."""
        self.stale = False
        self.silent_from_ns = t_ns
        self.delay_s = self.backoff_s
        self.next_attempt_ns = t_ns

    def data(self, t_ns: int) -> bool:
        """Bytes arrived at ``t_ns``; True if the link was stale until now (resumed)."""
        self.silent_from_ns = t_ns
        was, self.stale = self.stale, False
        return was

    def silent_s(self, t_ns: int) -> float:
        """Seconds without bytes at ``t_ns`` (s)."""
        return (t_ns - self.silent_from_ns) / 1e9

    def silence(self, t_ns: int) -> Silence:
        """A read at ``t_ns`` returned nothing: what to do about it."""
        silent = self.silent_s(t_ns)
        if self.restart_after_s is not None and silent >= self.restart_after_s:
            self.silent_from_ns = t_ns
            return Silence.RESTART
        if silent >= self.stale_after_s and not self.stale:
            self.stale = True
            return Silence.STALE
        return Silence.NONE

    # -- reopening ---------------------------------------------------------------------

    def lost(self, t_ns: int) -> None:
        """The port failed at ``t_ns``: reopen at once, then back off."""
        self.delay_s = self.backoff_s
        self.next_attempt_ns = t_ns

    def attempt_due(self, t_ns: int) -> bool:
        """True when a reopen attempt may be made at ``t_ns``."""
        return t_ns >= self.next_attempt_ns

    def attempt_failed(self, t_ns: int) -> None:
        """A reopen attempt at ``t_ns`` failed: the next after the current delay, doubled."""
        self.next_attempt_ns = t_ns + round(self.delay_s * 1e9)
        self.delay_s = min(2 * self.delay_s, self.backoff_max_s)

    def wait_s(self, t_ns: int) -> float:
        """Seconds from ``t_ns`` until the next attempt is due (0 if due) (s)."""
        return max(0.0, (self.next_attempt_ns - t_ns) / 1e9)

