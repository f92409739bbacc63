"""Who is writing a session: the writer record in the ``/_status`` attributes (pid, host,
boot id, process start ticks: a recycled pid or a reboot is told apart), read by
:func:`writer_alive` (docs/FORMAT.md, "A file in use is never touched")."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def _start_ticks(pid: int) -> int:
    """Start time of process ``pid`` in clock ticks since boot; -1 if unknown, -2 if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return -2
    except OSError:
        return -1
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 else -1


def writer_record() -> dict[str, Any]:
    """The attributes identifying this process as a file's writer."""
    pid = os.getpid()
    return {
        "writer_pid": pid,
        "writer_host": socket.gethostname(),
        "writer_boot_id": _boot_id(),
        "writer_start_ticks": _start_ticks(pid),
        "writer_started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


@dataclass(frozen=True)
class WriterState:
    """Whether a file's recorded writer is still running.

    ``alive`` is True (running), False (gone) or None (cannot be told from here,
    e.g. the file was written on another host). ``text`` says which process it is.
    """

    alive: bool | None
    text: str


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def writer_alive(attrs: Any) -> WriterState:
    """Judge the writer record in ``attrs`` (the ``/_status`` attributes)."""
    if "writer_pid" not in attrs:
        return WriterState(False, "no writer record (the file predates writer records)")
    pid = int(attrs["writer_pid"])
    host = _text(attrs.get("writer_host", ""))
    started = _text(attrs.get("writer_started_utc", "?"))
    who = f"pid {pid} on host {host}, started {started}"
    if host != socket.gethostname():
        return WriterState(None, who)
    boot = _text(attrs.get("writer_boot_id", ""))
    if boot and _boot_id() and boot != _boot_id():
        return WriterState(False, who + " (before the last reboot)")
    ticks = _start_ticks(pid)
    if ticks == -2:
        return WriterState(False, who)
    recorded = int(attrs.get("writer_start_ticks", -1))
    if ticks >= 0 and recorded >= 0:
        return WriterState(ticks == recorded, who)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return WriterState(False, who)
    except PermissionError:
        pass
    return WriterState(True, who)
