"""An emulated network pose source: a simulation's mocap and pose-sensor samples, live,
each stamped with the host time it was due (docs/DEMO.md, "Emulated mocap and pose sensor")."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from sensorbench.drivers.reader_base import RateMeter, ReaderStatus, seconds_since
from sensorbench.errors import DriverError, SensorbenchError
from sensorbench.logs import PoseBatch

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter
    from sensorbench.sim.emulator_base import SimClock
    from sensorbench.sim.sensor_pose import PoseSamples

POSE_KINDS = ("mocap", "pose_sensor")
PERIOD_S = 0.02  # host seconds between releases


class SimPoseSource:
    """Streams pose samples of a simulation (``streams``: name → (kind ``mocap`` or
    ``pose_sensor``, samples)) into a session on the emulation ``clock``, every
    :data:`PERIOD_S`, each stamped with the clock's host time of its simulated time;
    ``attrs`` go on every pose stream."""

    kind = "pose"
    name = "pose_source"

    def __init__(
        self,
        streams: Mapping[str, tuple[str, PoseSamples]],
        clock: SimClock,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        for stream, (kind, _) in streams.items():
            if kind not in POSE_KINDS:
                raise DriverError(f"pose stream {stream!r}: kind must be one of {POSE_KINDS}")
        if not streams:
            raise DriverError("the emulated pose source needs at least one stream")
        self.streams = dict(streams)
        self.clock = clock
        self.attrs = dict(attrs or {})
        self._next = dict.fromkeys(self.streams, 0)
        self._reloc_next = dict.fromkeys(self.streams, 0)
        self._writer: SessionWriter | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._sent = 0
        self._rates = RateMeter()
        self._rates.rates(0)  # the first status: the rate since construction
        self._last_data_ns: int | None = None
        self._error: str | None = None

    def declare(self, writer: SessionWriter) -> None:
        """Add one pose stream per configured stream."""
        self._writer = writer
        for stream, (kind, samples) in self.streams.items():
            writer.add_pose(stream, kind=kind, attrs={
                **self.attrs,
                "rate_hz": float(samples.params.get("rate_hz", float("nan"))),
                "frame": "world" if kind == "mocap" else "sensor map",
                "emulated": True,
                "source": "sensorbench emulated network pose source (simulation samples)",
                "emulation_speed": self.clock.speed,
            })  # fmt: skip

    def start(self) -> None:
        """Start releasing samples (those already due are released at once)."""
        if self._writer is None:
            raise DriverError(f"{self.name}: declare() the streams on a writer before start()")
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"pose-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Release what is due, then stop the thread, within ``timeout_s`` (s)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def status(self) -> ReaderStatus:
        """Samples per second released over the last status interval."""
        with self._lock:
            sent, last = self._sent, self._last_data_ns
        connected = self._thread is not None and self._error is None
        return ReaderStatus(self.name, self.kind, "emulated network source", connected,
            bytes_per_s=0.0, items_per_s=self._rates.rates(sent)[0], turns_per_s=0.0,
            crc_errors=0, drops=0, since_last_data_s=seconds_since(last), reconnects=0,
            last_error=self._error)

    def _run(self) -> None:
        stopping = False
        while True:  # once more after stop(): what fell due while starved is not lost
            try:
                self._release(self.clock.now())
            except SensorbenchError as exc:  # the writer failed or closed: say so, stop
                self._error = str(exc)
                return
            if stopping:
                return
            stopping = self._stop.wait(PERIOD_S)

    def _release(self, now_s: float) -> None:
        assert self._writer is not None
        for stream, (_, s) in self.streams.items():
            i = self._next[stream]
            j = int(np.searchsorted(s.t_s, now_s, side="right"))
            if j <= i:
                continue
            flags = s.flags[i:j] if s.flags.size else np.zeros(j - i, np.uint8)
            batch = PoseBatch(self.clock.host_ns(s.t_s[i:j]), s.position[i:j], s.quat_xyzw[i:j],
                s.valid[i:j], flags)  # fmt: skip
            self._writer.append_pose(stream, batch)
            self._next[stream] = j
            with self._lock:
                self._sent += j - i
                self._last_data_ns = time.monotonic_ns()
        for stream, (kind, s) in self.streams.items():
            if kind != "pose_sensor":
                continue
            k = self._reloc_next[stream]
            m = int(np.searchsorted(s.reloc_t_s, now_s, side="right"))
            for t, wrong in zip(s.reloc_t_s[k:m], s.reloc_wrong[k:m], strict=False):
                message = "wrong relocalization (gross offset)" if wrong else "relocalized"
                self._writer.event(int(self.clock.host_ns(t)), stream, "relocalization", message)
            self._reloc_next[stream] = m
