"""A reader starved for seconds catches up and never calls its present port unplugged.

The pod MCU emulator streams at real rate on a real pty while the reader thread is held
for 2 s (its protocol's ``consume`` blocks, as a loaded machine or a stopped process
would hold it): ~10 kB pile up in the pty. Afterwards every frame must be there, in
order, with no ``unplug`` event; then the emulator removes its pty and the unplug must
be seen within the link's read wait.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pods_util
import pytest

from sensorbench.drivers.pods_reader import PodProtocol
from sensorbench.drivers.serial_link import LinkConfig, SerialLink
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.sim.emulator_pods import PodEmulator

STARVE_S = 2.0


class _StarvedPods(PodProtocol):
    """The pod protocol whose reader thread is held for ``STARVE_S`` on request."""

    def __init__(self) -> None:
        super().__init__()
        self.starve = threading.Event()
        self.starved = threading.Event()

    def consume(self, t_ns: int, data: bytes) -> int:
        if self.starve.is_set():
            self.starve.clear()
            time.sleep(STARVE_S)
            self.starved.set()
        return super().consume(t_ns, data)


def _run(tmp_path, episodes: int) -> None:
    n = int((episodes * (STARVE_S + 0.7) + 2.0) * 200)
    s = pods_util.make_samples(n=n, step=50, drift=(0, 0, 0), seed=3)
    em = PodEmulator(s, link=str(tmp_path / "pods"))
    em.port.write_timeout_s = 30.0  # the pty fills while starved: wait, lose nothing
    protocol = _StarvedPods()
    sink = pods_util.FrameSink()
    link = SerialLink("pods", em.link, protocol, writer=sink,
                      config=LinkConfig(first_valid_timeout_s=None))  # fmt: skip
    reader = SerialReader(link)
    reader.start()
    em.start()
    try:
        for _ in range(episodes):
            time.sleep(0.5)
            protocol.starve.set()
            assert protocol.starved.wait(STARVE_S + 5.0)
            protocol.starved.clear()
        assert em.finished.wait(30.0)
        deadline = time.monotonic() + 5.0
        while protocol.parser.stats.frames < n and time.monotonic() < deadline:
            time.sleep(0.05)
        kinds = [k for _, k, _ in link.events]
        assert "unplug" not in kinds, list(link.events)
        assert link.connected and link.unplugs == 0
        seq = sink.collected().seq
        np.testing.assert_array_equal(seq, np.arange(n))  # caught up: every frame, in order
        em.port.unplug()  # the emulator removes its pty: a real unplug
        deadline = time.monotonic() + 2.0
        while link.unplugs == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert link.unplugs == 1 and not link.connected
    finally:
        reader.stop()
        em.stop()


def test_a_reader_starved_for_2_s_catches_up_without_a_false_unplug(tmp_path) -> None:
    _run(tmp_path, episodes=2)


@pytest.mark.slow
def test_twenty_starvations_no_false_unplug(tmp_path) -> None:
    _run(tmp_path, episodes=20)
