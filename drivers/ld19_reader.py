"""The live LD19 protocol: serial bytes → complete turns in the session (docs/LD19.md)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sensorbench.drivers.device_protocol import DeviceProtocol
from sensorbench.drivers.ld19_near_filter import near_filter_turns
from sensorbench.drivers.ld19_parser import BAUD, HEADER, VER_LEN, LD19Parser
from sensorbench.drivers.ld19_turns import TurnAssembler, ld19_clock

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


MIN_BYTES_TO_JUDGE = 4 * 47
"""Bytes from which a stream without a valid LD19 packet points at the wrong baud rate
or device: four packets' worth holds at least three headers at the right baud rate."""
_CANDIDATE = bytes((HEADER, VER_LEN))
MAX_HELD = 64
"""Packets left in the parser at most before they are assembled even without a turn's
end among them."""


class LD19Protocol(DeviceProtocol):
    """Decodes one LD19's bytes into turns (the link records the raw bytes), with extra
    lidar stream ``attrs``; ``near_filter`` marks the points the SDK's near filter rejects
    as nan. ``clock_slope``: host s per
    device s until the clock fit exists (about 1 s): 1.0 for hardware, ``1/N`` at N×.
    """

    kind = "ld19"
    wire = "ld19"
    baud = BAUD

    def __init__(self, *, attrs: dict[str, Any] | None = None, near_filter: bool = False,
            clock_slope: float = 1.0) -> None:
        self.attrs = dict(attrs or {})
        self.near_filter = near_filter
        self.clock_slope = float(clock_slope)
        self.parser = LD19Parser()
        self.assembler = TurnAssembler(clock=ld19_clock(clock_slope))
        self.candidates_seen = 0
        self._at_open = (0, 0, 0, 0)  # candidates, packets, CRC and field failures at open
        self._tail_byte = -1

    # -- hooks -------------------------------------------------------------------------

    def declare_streams(self, writer: SessionWriter) -> None:
        """Add the lidar stream (angles rad CCW, ranges m, times ns)."""
        attrs = {"model": "LD19", "port_path": self.link.port, "baud": BAUD,
            "near_filter": self.near_filter, "clock_slope": self.clock_slope,
            "time_base": "host monotonic_ns via device clock (lower envelope of receive times)",
            "native": "clockwise 0.01 deg, mm, ms timestamps wrapping at 30000", **self.attrs}
        writer.add_lidar(self.link.name, attrs=attrs)

    def consume(self, t_ns: int, data: bytes) -> int:
        """Parse a chunk, store the turns it completes; return packets decoded.

        The packets stay in the parser until a read brings the end of a turn (the native
        angle steps back) or :data:`MAX_HELD` of them wait: the turn's assembly runs on
        that read, once per turn (a 3-packet read costs as much as a 40-packet one), and
        the reads in between only parse.
        """
        # ``54 2C`` header pairs, for the diagnosis only (one may span two chunks)
        self.candidates_seen += data.count(_CANDIDATE)
        if self._tail_byte == HEADER and data[:1] == _CANDIDATE[1:]:
            self.candidates_seen += 1
        self._tail_byte = data[-1] if data else self._tail_byte
        parser = self.parser
        k = parser.scan(data, t_ns)
        if k and (parser.stepped_back or parser.unread >= MAX_HELD):
            turns = self.assembler.push(parser.take())
            if turns.n_turns:
                if self.near_filter:
                    turns = near_filter_turns(turns)
                writer = self.link.writer
                if writer is not None:
                    writer.append_turns(self.link.name, turns)
        return k

    def reset(self) -> None:
        """The unit power-cycled: drop the parser tail and the packets it holds, the turn
        in progress, the clock."""
        self.parser.resync()
        self.assembler.reset(after_reconnect=True)
        self._tail_byte = -1
        c = self.parser.counters
        self._at_open = (self.candidates_seen, c.packets, c.crc_failures, c.impossible_packets)

    def diagnose(self) -> str:
        """Bytes, candidate headers and valid packets seen since (re)opening, and the cause.

        A wrong baud rate is only suspected from bytes the parser has judged, and enough
        of them to hold headers (:data:`MIN_BYTES_TO_JUDGE`): fewer come from a device
        still starting, and bytes not judged yet (counted, their chunk still being
        parsed at the deadline) from a reader this machine did not schedule in time.
        """
        c = self.parser.counters
        cand0, packets0, crc0, impossible0 = self._at_open
        n_bytes = self.link.bytes_since_open
        cand = self.candidates_seen - cand0
        crc = c.crc_failures - crc0
        impossible = c.impossible_packets - impossible0
        elapsed_s = (time.monotonic_ns() - self.link.opened_ns) / 1e9
        late = (f"the line carries {self.link.baud // 10} B/s and {elapsed_s:.1f} s passed, so the "
            "device is still starting or this machine was too busy to read it in time")
        if n_bytes == 0:
            cause = "the device sends nothing: is it powered, and is this its port?"
        elif n_bytes < MIN_BYTES_TO_JUDGE and c.packets == packets0:
            cause = f"too few to tell a wrong baud rate from a slow start: {late}"
        elif cand and not crc and not impossible:
            cause = f"headers not parsed yet when the wait ended: {late}"
        elif cand == 0:
            cause = "no 54 2C header at all: wrong baud rate or not an LD19?"
        elif not crc:
            cause = (f"{impossible} packets with a valid CRC but impossible angles, timestamp "
                "or speed: not an LD19, or firmware this parser does not know")
        else:
            cause = "headers but no valid CRC: wrong baud rate or not an LD19?"
        return (f"{n_bytes} bytes, {cand} candidate headers, {c.packets - packets0} valid "
            f"({crc} CRC failures): {cause}")

    def counters(self) -> tuple[int, int, int, int]:
        """(packets failing their CRC or with an impossible field, packets lost, points
        decoded, turns) since start."""
        c = self.parser.counters
        checks = c.crc_failures + c.impossible_packets + self.assembler.packets_rejected
        return (checks, c.lost_packets, 12 * c.packets, self.assembler.turns_out)

    def final_note(self) -> str:
        """Packets decoded and what was skipped: CRC failures, impossible packets by
        field, ranges beyond 12 m (stored as nan)."""
        c = self.parser.counters
        return (f"decoded {c.packets} packets; skipped: crc_failures={c.crc_failures} "
            f"span_failures={c.span_failures} timestamp_failures={c.timestamp_failures} "
            f"speed_failures={c.speed_failures} "
            f"packets_rejected={self.assembler.packets_rejected}; "
            f"ranges_beyond_limit={self.assembler.ranges_beyond_limit} (stored as nan)")
