"""The live pod-MCU protocol: serial bytes → encoder frames in the session
(fields, count losses, restarts: docs/PROTOCOLS.md; clocks: docs/PODS.md).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import numpy as np

from sensorbench.drivers import pods_protocol as proto
from sensorbench.drivers.device_clock import DeviceClock
from sensorbench.drivers.device_protocol import DeviceProtocol
from sensorbench.drivers.pods_parser import PodFrames, PodStreamParser
from sensorbench.logs import EncoderBatch

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


MAX_CLOCK_DRIFT = 0.01
"""How far the MCU clock may run from ``clock_slope`` in the stamps (a fraction): 100×
the ±100 ppm the analysis assumes of its crystal (``encoder_host_seconds``)."""
RESTART_TOLERANCE_NS = 10_000_000_000
"""How much further than the host's clock (ns) the MCU's may seem to have run since the last
frame before a frame counts as a restart: the host time of that frame may be this late."""


class PodProtocol(DeviceProtocol):
    """Decodes the pod MCU's bytes (the frame layout as :class:`PodStreamParser`'s) into
    encoder frames (the link records the raw bytes), with extra stream ``attrs``.
    ``clock_slope``: host s per device s
    before the clock fit converges (1.0 for hardware, 1/speed for an emulator); the fit
    stays within :data:`MAX_CLOCK_DRIFT` of it.
    """

    kind = "pods"
    baud = proto.DEFAULT_BAUD

    def __init__(
        self,
        *,
        n_pods: int = 3,
        counter_bits: int = 16,
        protocol: str = "binary",
        attrs: dict[str, Any] | None = None,
        clock_slope: float = 1.0,
    ) -> None:
        self.parser = PodStreamParser(n_pods, counter_bits, protocol)
        self.wire = f"pods-{self.parser.variant}"
        self.clock = DeviceClock(
            modulus=None, tick_ns=1, nominal_slope=clock_slope, max_drift=MAX_CLOCK_DRIFT
        )
        self.attrs = dict(attrs or {})
        self._last_host_ns = np.iinfo(np.int64).min
        self._last_device_ns: int | None = None
        self._slope = clock_slope
        self._lost = np.zeros(n_pods + 1, np.int64)  # cumulative errors + overruns reported

    # -- hooks -------------------------------------------------------------------------

    def declare_streams(self, writer: SessionWriter) -> None:
        """Add the encoder stream (counts in ticks, yaw rad, yaw rate rad/s, times ns)."""
        p = self.parser
        attrs = {
            "model": "pod-mcu",
            "port_path": self.link.port,
            "baud": self.link.baud,
            "protocol": p.variant,
            "counter_bits": p.counter_bits,
            "n_pods": p.n_pods,
            "units": "counts: encoder ticks (cumulative, unwrapped); yaw: rad; yaw_rate: rad/s",
            "time_base": "host monotonic_ns via device clock (lower envelope of receive times), "
            "capped at the receive time; device_ns = MCU t_us * 1000, unwrapped",
            "clock_nominal_slope": self.clock.nominal_slope or 1.0,
            **self.attrs,
        }
        writer.add_encoder(self.link.name, n_counts=p.n_pods, attrs=attrs)

    def consume(self, t_ns: int, data: bytes) -> int:
        """Parse a chunk, store complete frames; return frames decoded."""
        resets_before, latest = self.parser.stats.resets, None
        if self._last_device_ns is not None:  # where the MCU's clock can be by now
            ran_ns = (t_ns - self._last_host_ns + RESTART_TOLERANCE_NS) / self._slope
            latest = self._last_device_ns + int(ran_ns * (1 + MAX_CLOCK_DRIFT))
        frames = self.parser.feed(data, latest)
        n = len(frames)
        if n == 0:
            return 0
        host = self._host_times(t_ns, frames)
        self._last_device_ns = int(frames.device_ns[-1])
        batch = EncoderBatch.decoded(
            host, frames.device_ns, frames.seq, frames.counts, frames.yaw, frames.yaw_rate
        )
        self._report_losses(frames, host)
        writer = self.link.writer
        if writer is not None:
            writer.append_encoder(self.link.name, batch)
            if self.parser.stats.resets > resets_before:
                self.link.event(t_ns, "note", "pod MCU restarted (its clock went backwards)")
        return n

    def reset(self) -> None:
        """Drop the partial frame; the MCU's counters and clock carry on."""
        self.parser.reset_tail()

    def diagnose(self) -> str:
        """Bytes, rejected frames and valid frames seen, with the likely cause."""
        st = self.parser.stats
        n_bytes = self.link.bytes_total
        if n_bytes == 0:
            cause = "the MCU sends nothing: is it powered, flashed, and is this its port?"
        elif st.layout_mismatch:
            cause = (
                f"{st.layout_mismatch} valid frames with another pod count or counter width: "
                "fix n_pods/counter_bits in robot.toml"
            )
        else:
            cause = (
                f"no valid {self.parser.variant} frame: wrong baud rate, wrong protocol "
                "variant, or not the pod MCU?"
            )
        return f"{n_bytes} bytes, {st.crc_errors} bad frames/lines, {st.frames} valid: {cause}"

    def counters(self) -> tuple[int, int, int, int]:
        """(bad frames or lines — CRC, layout or non-finite IMU values —, lost frames +
        counts the MCU lost + its overruns, frames decoded, 0) since start."""
        st = self.parser.stats
        lost = st.lost_frames + st.quad_errors + st.overruns
        return (st.crc_errors + st.layout_mismatch + st.non_finite, lost, st.frames, 0)

    def _report_losses(self, frames: PodFrames, host: np.ndarray) -> None:
        """One ``count_loss`` event for the losses the MCU reported in these frames."""
        last = [*frames.quad_errors[-1].tolist(), int(frames.overruns[-1])]
        if last == self._lost.tolist():  # cumulative, never decreasing: no new loss
            return
        lost = np.concatenate([frames.quad_errors, frames.overruns[:, None]], axis=1)
        step = np.diff(lost, axis=0, prepend=self._lost[None, :])
        self._lost = lost[-1].copy()
        rows = np.flatnonzero(step.any(axis=1))  # one at least: the last row changed
        total = step.sum(axis=0)
        per_pod = ", ".join(f"pod {k}: {int(n)}" for k, n in enumerate(total[:-1]))
        self.link.event(
            int(host[rows[0]]),
            "count_loss",
            f"the MCU lost {int(total[:-1].sum())} counts ({per_pod}; both lines changed "
            f"between two looks) and {int(total[-1])} latches (queue full) in device time "
            f"{frames.device_ns[rows[0]] / 1e9:.6f}..{frames.device_ns[rows[-1]] / 1e9:.6f} s",
        )

    # -- helpers -----------------------------------------------------------------------

    def _host_times(self, t_ns: int, frames: PodFrames) -> np.ndarray:
        """Device-clock host times, capped at the receive time, non-decreasing."""
        host, last = [], self._last_host_ns
        dev = frames.device_ns.tolist()
        new = frames.new_epoch.tolist()
        for a, b in itertools.pairwise([0, *(i for i, r in enumerate(new) if r), len(dev)]):
            if a == b:
                continue
            if new[a]:
                self.clock.reset()
            for h in self.clock.update_few(t_ns, dev[a:b]):
                last = max(min(h, t_ns), last)
                host.append(last)
        self._last_host_ns = last
        return np.array(host, np.int64)
