"""The one reconnect machine (LinkWatch), with plain host times in ns."""

from __future__ import annotations

from sensorbench.drivers.link_watch import LinkWatch, Silence

S = 1_000_000_000


def test_stale_once_per_silence_then_resumed() -> None:
    w = LinkWatch(stale_after_s=0.5)
    w.opened(0)
    assert w.silence(int(0.49 * S)) is Silence.NONE
    assert w.silence(int(0.5 * S)) is Silence.STALE
    assert w.silence(int(2.0 * S)) is Silence.NONE  # reported once
    assert w.data(int(2.1 * S)) is True  # resumed
    assert w.data(int(2.2 * S)) is False
    assert w.silence(int(2.6 * S)) is Silence.NONE
    assert w.silence(int(2.7 * S)) is Silence.STALE


def test_restart_at_most_once_per_restart_interval() -> None:
    w = LinkWatch(stale_after_s=0.5, restart_after_s=3.0)
    w.opened(0)
    verdicts = [w.silence(t * S // 10) for t in range(1, 91)]  # 0.1 .. 9.0 s of silence
    restarts = [i + 1 for i, v in enumerate(verdicts) if v is Silence.RESTART]
    assert restarts == [30, 60, 90]  # every 3.0 s of continued silence
    assert verdicts.count(Silence.STALE) == 1


def test_backoff_doubles_to_its_cap_and_resets_on_reopen() -> None:
    w = LinkWatch(backoff_s=0.05, backoff_max_s=0.3)
    w.lost(10 * S)
    assert w.attempt_due(10 * S)  # the first attempt is immediate
    t = 10 * S
    waits = []
    for _ in range(6):
        w.attempt_failed(t)
        waits.append(round(w.wait_s(t), 3))
        assert not w.attempt_due(t)
        t = w.next_attempt_ns
        assert w.attempt_due(t)
    assert waits == [0.05, 0.1, 0.2, 0.3, 0.3, 0.3]
    w.opened(t)
    w.lost(t + S)
    w.attempt_failed(t + S)
    assert w.wait_s(t + S) == 0.05
