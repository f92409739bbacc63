"""Active probing: tell an LD19, an RPLIDAR A1 and the pod MCU apart behind identical bridges.

All three sit behind the same kind of USB-UART bridge, so only their bytes tell
them apart. :func:`probe_port` tries, in this order, each with its own deadline:

1. **LD19** (listen only, 230400 baud): it streams from power-on; CRC-8-valid
   47-byte packets (:mod:`sensorbench.drivers.ld19_parser`) identify it.
2. **pod MCU** (listen only, 115200 baud): it streams from power-on;
   CRC-16-valid ``AA 55`` frames (:mod:`sensorbench.drivers.pods_parser`) or
   consecutive CSV lines ``seq,t_us,c0,...`` identify it.
3. **A1** (115200 baud, the only probe that writes): STOP ``A5 25``, then
   GET_INFO ``A5 50``; an answer with the info descriptor ``A5 5A 14 00 00 00 04``
   and 20 bytes identifies it (model, firmware, hardware, serial).

Listening first means a probe never writes to a device that might act on the
bytes, and the A1's requests are harmless to the two one-way devices. Opening a
port raises DTR, which stops an A1's motor: do not probe a device that is being
recorded (the port is opened exclusively, so a capture that holds it makes the
probe report ``busy``).
"""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field

import serial

from sensorbench.drivers import a1_protocol, pods_protocol
from sensorbench.drivers.ld19_parser import LD19Parser
from sensorbench.drivers.pods_parser import PodStreamParser
from sensorbench.errors import UdevError

LD19_BAUD = 230400
A1_BAUD = a1_protocol.BAUD
PODS_BAUD = pods_protocol.DEFAULT_BAUD
KINDS = ("ld19", "pods", "a1")

LD19_MIN_PACKETS = 3  # 375 packets/s: 0.3 s of listening sees ~110
PODS_MIN_FRAMES = 3
A1_STOP_SETTLE_S = 0.02  # the A1 needs >= 1 ms after STOP before the next request
_READ_SLICE_S = 0.02
_READ_CHUNK = 4096
_CSV_LINE = re.compile(rb"^(\d{1,5}),(\d{1,10})((?:,-?\d{1,11})+)(?:,[-+0-9.eEnaif]+){0,2}\r?$")


@dataclass
class ProbeResult:
    """What a probe found on one port.

    Attributes:
        node: the port probed.
        kind: ``ld19``, ``pods``, ``a1``, ``unknown`` (nothing recognised within
            the deadlines), ``busy`` (held by another program) or ``error``.
        detail: a human sentence saying what was seen.
        elapsed_s: wall time the probe took (s).
        info: kind-specific facts (A1: model, firmware, hardware, serial; LD19:
            packets, speed_hz; pods: frames, variant).
    """

    node: str
    kind: str
    detail: str
    elapsed_s: float
    info: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """A JSON-ready dict."""
        return {
            "node": self.node,
            "kind": self.kind,
            "detail": self.detail,
            "elapsed_s": round(self.elapsed_s, 4),
            "info": self.info,
        }


def _read_for(port: serial.Serial, seconds: float, enough: int | None = None) -> bytes:
    """Read whatever arrives for ``seconds`` (s), or until ``enough`` bytes came.

    Reads in short timed slices instead of asking ``in_waiting`` (an ioctl that
    some tty drivers, and umockdev's emulated ttys, do not support).
    """
    deadline = time.monotonic() + seconds
    chunks = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (enough is not None and len(chunks) >= enough):
            return bytes(chunks)
        port.timeout = min(_READ_SLICE_S, remaining)
        want = _READ_CHUNK if enough is None else min(_READ_CHUNK, enough - len(chunks))
        chunks += port.read(want)


def check_ld19(data: bytes) -> dict | None:
    """Facts about an LD19 stream if ``data`` holds enough CRC-valid packets, else None."""
    parser = LD19Parser()
    packets = parser.feed(data)
    count = parser.counters.packets
    if count < LD19_MIN_PACKETS:
        return None
    return {
        "packets": int(count),
        "crc_failures": int(parser.counters.crc_failures),
        "speed_hz": round(float(packets.speed_deg_s[-1]) / 360.0, 3),
    }


def check_pods(data: bytes) -> dict | None:
    """Facts about a pod-MCU stream (binary frames or CSV lines) in ``data``, else None."""
    parser = PodStreamParser(variant="binary")
    parser.feed(data)
    frames = parser.stats.frames + parser.stats.layout_mismatch
    if frames >= PODS_MIN_FRAMES:
        return {"variant": "binary", "frames": int(frames)}
    seqs = []
    for line in data.split(b"\n")[1:-1]:  # the first and last may be cut
        match = _CSV_LINE.match(line)
        seqs.append(int(match[1]) if match else None)
    best = run = 0
    for prev, cur in itertools.pairwise(seqs):
        run = run + 1 if prev is not None and cur == (prev + 1) % 65536 else 0
        best = max(best, run)
    if best + 1 >= PODS_MIN_FRAMES:
        return {"variant": "csv", "frames": best + 1}
    return None


def check_a1_info(data: bytes) -> dict | None:
    """Decode a GET_INFO answer (descriptor + 20 bytes) found in ``data``, else None."""
    at = data.find(a1_protocol.INFO_DESCRIPTOR)
    if at < 0:
        return None
    payload = data[at + a1_protocol.DESCRIPTOR_LEN : at + a1_protocol.DESCRIPTOR_LEN + 20]
    if len(payload) != a1_protocol.INFO_LEN:
        return None
    info = a1_protocol.A1Info.from_payload(payload)
    return {
        "model": info.model,
        "firmware": f"{info.firmware[0]}.{info.firmware[1]:02d}",
        "hardware": info.hardware,
        "serial": info.serial,
    }


def probe_port(
    node: str,
    kinds: tuple[str, ...] = KINDS,
    listen_s: float = 0.35,
    a1_timeout_s: float = 0.5,
) -> ProbeResult:
    """Find out which device answers on ``node``; never takes much longer than the deadlines.

    Args:
        node: the tty to probe (``/dev/ttyUSB0`` or a udev symlink).
        kinds: which probes to run, in order (subset of ``ld19``, ``pods``, ``a1``).
        listen_s: how long each listen-only probe listens (s).
        a1_timeout_s: how long to wait for the A1's GET_INFO answer (s).

    Returns:
        A :class:`ProbeResult`; ``kind`` is ``unknown`` when nothing answered,
        ``busy`` or ``error`` when the port could not be used.

    Raises:
        UdevError: an unknown probe kind.
    """
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise UdevError(f"unknown probe kind(s) {unknown}: choose from {', '.join(KINDS)}")
    t0 = time.monotonic()

    def done(kind: str, detail: str, info: dict | None = None) -> ProbeResult:
        return ProbeResult(node, kind, detail, time.monotonic() - t0, info or {})

    try:
        port = serial.Serial(node, baudrate=LD19_BAUD, timeout=_READ_SLICE_S, exclusive=True)
    except serial.SerialException as exc:
        text = str(exc)
        if "exclusively" in text or "Resource temporarily unavailable" in text:
            return done("busy", f"{node} is held by another program (a capture?)")
        return done("error", f"cannot open {node}: {text}")
    try:
        for kind in kinds:
            result = _PROBES[kind](port, listen_s, a1_timeout_s)
            if result is not None:
                return done(kind, *result)
    except (serial.SerialException, OSError) as exc:
        return done("error", f"{node} failed while probing ({exc}); was it unplugged?")
    finally:
        port.close()
    tried = ", ".join(kinds)
    return done("unknown", f"no {tried} answered on {node} within the deadlines")


def _probe_ld19(port: serial.Serial, listen_s: float, _a1: float) -> tuple[str, dict] | None:
    port.baudrate = LD19_BAUD
    port.reset_input_buffer()
    info = check_ld19(_read_for(port, listen_s))
    if info is None:
        return None
    return f"LD19: {info['packets']} CRC-valid packets at {LD19_BAUD} baud", info


def _probe_pods(port: serial.Serial, listen_s: float, _a1: float) -> tuple[str, dict] | None:
    port.baudrate = PODS_BAUD
    port.reset_input_buffer()
    info = check_pods(_read_for(port, listen_s))
    if info is None:
        return None
    return f"pod MCU: {info['frames']} valid {info['variant']} frames at {PODS_BAUD} baud", info


def _probe_a1(port: serial.Serial, _listen: float, timeout_s: float) -> tuple[str, dict] | None:
    port.baudrate = A1_BAUD
    port.write(bytes([a1_protocol.SYNC, a1_protocol.CMD_STOP]))
    port.flush()
    time.sleep(A1_STOP_SETTLE_S)
    port.reset_input_buffer()
    port.write(bytes([a1_protocol.SYNC, a1_protocol.CMD_GET_INFO]))
    port.flush()
    want = a1_protocol.DESCRIPTOR_LEN + a1_protocol.INFO_LEN
    data = _read_for(port, timeout_s, enough=want)
    info = check_a1_info(data)
    if info is None:
        # A slow reply may arrive after the first bytes: a short second look.
        info = check_a1_info(data + _read_for(port, min(0.05, timeout_s), enough=want))
    if info is None:
        return None
    return (
        f"RPLIDAR A1: model {info['model']:#04x}, firmware {info['firmware']}, "
        f"hardware {info['hardware']}, serial {info['serial']}",
        info,
    )


_PROBES = {"ld19": _probe_ld19, "pods": _probe_pods, "a1": _probe_a1}
