"""Active probing: tell the registered device kinds apart behind identical bridges
(docs/UDEV.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from sensorbench.drivers.device_kind import DeviceKind
from sensorbench.drivers.device_kinds import all_kinds
from sensorbench.drivers.serial_port import open_serial
from sensorbench.errors import DeviceUnavailable, UdevError


def probe_kinds() -> tuple[DeviceKind, ...]:
    """One kind per protocol (the first registered), listen-only probes first."""
    first: dict[str, DeviceKind] = {}
    for kind in all_kinds():
        first.setdefault(kind.protocol, kind)
    return tuple(sorted(first.values(), key=lambda k: k.probe_writes))


KINDS = tuple(k.name for k in probe_kinds())
"""Kind names :func:`probe_port` tries by default, in order (``ld19``, ``pods``, ``a1``)."""


@dataclass
class ProbeResult:
    """What a probe found on port ``node`` in ``elapsed_s`` (s), said in ``detail``.

    Attributes:
        kind: the registered kind whose probe answered (``ld19`` for the LD19
            protocol, ``pods``, ``a1``), ``unknown`` (nothing recognised within
            the deadlines), ``busy`` (held by another program) or ``error``.
        info: kind-specific facts (A1: model, firmware, hardware, serial; LD19:
            packets, speed_hz, kinds; pods: frames, variant).
    """

    node: str
    kind: str
    detail: str
    elapsed_s: float
    info: dict = field(default_factory=dict)


def probe_port(node: str, kinds: tuple[str, ...] = KINDS, listen_s: float = 0.35,
        a1_timeout_s: float = 0.5) -> ProbeResult:
    """Find out which device answers on ``node``; never takes much longer than the deadlines.

    ``kinds``: the probes to run, in order (of ``ld19``, ``pods``, ``a1``); ``listen_s``:
    each listen-only probe's listening time (s); ``a1_timeout_s``: the wait for the A1's
    GET_INFO answer (s). The result's ``kind`` is ``unknown``, ``busy`` or ``error`` when
    nothing answered or the port could not be used.

    Raises:
        UdevError: an unknown probe kind.
    """
    known = {k.name: k for k in all_kinds()}
    unknown = [k for k in kinds if k not in known]
    if unknown:
        raise UdevError(f"unknown probe kind(s) {unknown}: choose from {', '.join(known)}")
    t0 = time.monotonic()

    def done(kind: str, detail: str, info: dict | None = None) -> ProbeResult:
        return ProbeResult(node, kind, detail, time.monotonic() - t0, info or {})

    first = known[kinds[0]] if kinds else None
    try:
        port = open_serial(node, first.baud if first else 115200, timeout_s=0.02)
    except DeviceUnavailable as exc:
        text = str(exc.__cause__ or exc)
        if "exclusively" in text or "Resource temporarily unavailable" in text:
            return done("busy", f"{node} is held by another program (a capture?)")
        return done("error", f"cannot open {node}: {text}")
    try:
        for name in kinds:
            kind = known[name]
            result = kind.run_probe(port, listen_s, a1_timeout_s)
            if result is not None:
                return done(name, *result)
    except OSError as exc:  # serial.SerialException is an OSError
        return done("error", f"{node} failed while probing ({exc}); was it unplugged?")
    finally:
        port.close()
    tried = ", ".join(kinds)
    return done("unknown", f"no {tried} answered on {node} within the deadlines")
