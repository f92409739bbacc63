"""Offline decoding of LD19 byte captures (bare files or raw streams of sessions) with
the live reader's parser, turn assembly and device clock (docs/LD19.md).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import h5py

from sensorbench.drivers.device_protocol import pick_raw_stream
from sensorbench.drivers.ld19_parser import BAUD
from sensorbench.drivers.ld19_reader import LD19Protocol
from sensorbench.drivers.ld19_turns import TurnAssembler, ld19_clock
from sensorbench.drivers.serial_link import SerialLink
from sensorbench.errors import DriverError
from sensorbench.logs import Session, SessionWriter
from sensorbench.logs.raw_file import read_raw_recording

CHUNK = 1 << 16  # bytes per parse step of a bare capture
TIME_BASE_HOST = "host monotonic_ns via device clock (lower envelope of receive times)"
TIME_BASE_DEVICE = "device: unwrapped LD19 ms timestamps (bare capture, no receive times)"


def decode_ld19(source: str | os.PathLike[str], output: str | os.PathLike[str],
        device: str | None = None, name: str | None = None, near_filter: bool = False,
        overwrite: bool = False) -> dict[str, Any]:
    """Decode ``source`` into a new session ``output``: a bare byte capture (host-timed
    with its ``.chunks`` sidecar) or a session's raw stream ``device`` (default: its only
    LD19 one), to lidar stream ``name`` (default ``device`` or ``ld19``); ``near_filter``
    marks the points the SDK near filter rejects as nan. Returns the parser counters,
    turns and points written, the time base and ``impossible_offsets``. DriverError: no
    valid LD19 packet; SessionError: unreadable source or unwritable output.
    """
    src = Path(source)
    is_session = h5py.is_hdf5(src)
    if is_session:
        with Session(src) as s:
            device = pick_raw_stream(s, device, "ld19", "--device")
            chunks = list(s.raw(device).iter_chunks())
            raw_attrs = dict(s.raw(device).attrs)
            reconnects = sorted(
                e.t_ns for e in s.events() if e.source == device and e.kind == "reconnect")
            # the live reader records the clock slope it assumed (1/N for an N× emulator)
            slope = s.lidar(device).attrs.get("clock_slope") if device in s.lidar_names() else None
    else:
        rec = read_raw_recording(src)
        data = rec.data
        if rec.offsets is not None:  # record-raw's sidecar: host times per read
            chunks = rec.chunks()
            raw_attrs = {"source_file": str(src), "chunk_times": "; ".join(rec.comments)}
            is_session = True  # host receive times, as in a session's raw stream
        else:
            chunks = [(0, data[i : i + CHUNK]) for i in range(0, len(data), CHUNK)]
            raw_attrs = {"source_file": str(src), "chunk_times": "unknown (bare capture)"}
        reconnects = []
        slope = None
    name = (device or "ld19") if name is None else name
    # the bytes go through the live reader's protocol, reset at each reconnect as it was;
    # without a recorded slope the device clock fits one from the arrivals
    protocol = LD19Protocol(near_filter=near_filter)
    clock = ld19_clock(None if slope is None else float(slope))
    protocol.assembler = assembler = TurnAssembler(clock, is_session)
    parser = protocol.parser
    time_base = TIME_BASE_HOST if is_session else TIME_BASE_DEVICE
    with SessionWriter(output, label=f"decoded {src.name}", swmr=False, overwrite=overwrite,
        attrs={"decoded_from": str(src)}) as w:  # atomic: on DriverError nothing is written
        w.add_raw(name, attrs={**raw_attrs, "protocol": "ld19", "baud": BAUD})
        w.add_lidar(name,
            attrs={"model": "LD19", "time_base": time_base, "near_filter": near_filter,
                "native": "clockwise 0.01 deg, mm, ms timestamps wrapping at 30000"})
        link = SerialLink(name, str(src), protocol, w)  # never opened: stores and consumes
        pending = list(reconnects)
        for t_ns, data in chunks:
            while pending and t_ns >= pending[0]:
                pending.pop(0)
                protocol.reset()  # the unit power-cycled
            link.received(t_ns, data)
        c = parser.counters
        if c.packets == 0:
            raise DriverError(
                f"no valid LD19 packet in {src}: {c.bytes} bytes, {protocol.candidates_seen} "
                "candidate headers, 0 valid: not an LD19 capture, or captured at the wrong "
                "baud rate?")
        summary = {"source": str(src), "output": str(output), "device": name, **asdict(c),
            "impossible_packets": c.impossible_packets,
            "impossible_offsets": [{"offset": o, "reason": r} for o, r in parser.rejected],
            "ranges_beyond_limit": assembler.ranges_beyond_limit,
            "turns": assembler.turns_out, "points": assembler.points_out,
            "partial_turns_dropped": assembler.partial_dropped, "time_base": time_base}
        w.event(0, name, "note", "decoded: "
            + ", ".join(f"{k}={v}" for k, v in summary.items() if k != "impossible_offsets"))
    return summary
