"""Detect brltty, the Braille display daemon that takes CP2102 adapters away (docs/UDEV.md)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROC = Path("/proc")
RULES_DIRS = (Path("/etc/udev/rules.d"), Path("/run/udev/rules.d"), Path("/usr/lib/udev/rules.d"),
    Path("/lib/udev/rules.d"))
KERNEL_PATTERN = re.compile(
    r"usbfs: interface \d+ claimed by (?P<driver>\S+) while 'brltty' sets config")
_CP2102 = re.compile(r"10c4/ea60", re.IGNORECASE)  # ENV{PRODUCT}=="10c4/ea60/*"
_LOG_TIMEOUT_S = 3.0

FIX = ("brltty (a Braille display daemon) claims CP2102 adapters (10c4:ea60) and their "
    "/dev/ttyUSB* node disappears. Fix: `sudo systemctl stop brltty-udev.service "
    "brltty.service && sudo systemctl mask brltty-udev.service brltty.service`, mask its "
    "udev rule (`sudo ln -s /dev/null /etc/udev/rules.d/85-brltty.rules && sudo udevadm "
    "control --reload-rules`) or remove the package (`sudo apt remove brltty`), then "
    "unplug and replug the adapters (docs/UDEV.md)")


@dataclass
class BrlttyFinding:
    """The traces of brltty found on this machine.

    Attributes:
        pids: running brltty processes.
        rules: active udev rule files of brltty that match ``10c4:ea60``.
        kernel_lines: kernel log lines where brltty took an interface from a driver.
        kernel_log: where the kernel log came from, or why it could not be read.
    """

    pids: list[int] = field(default_factory=list)
    rules: list[Path] = field(default_factory=list)
    kernel_lines: list[str] = field(default_factory=list)
    kernel_log: str = ""

    @property
    def found(self) -> bool:
        """True if any trace of brltty was found."""
        return bool(self.pids or self.rules or self.kernel_lines)

    def message(self) -> str:
        """What was found and the fix ('' when nothing was)."""
        if not self.found:
            return ""
        seen = []
        if self.pids:
            seen.append(f"brltty is running (pid {', '.join(map(str, self.pids))})")
        if self.rules:
            seen.append(f"its udev rule matches 10c4:ea60 ({', '.join(map(str, self.rules))})")
        if self.kernel_lines:
            seen.append(f"the kernel log shows it took {len(self.kernel_lines)} interface(s): "
                f"{self.kernel_lines[-1].strip()!r}")
        return "; ".join(seen) + ". " + FIX

    def as_dict(self) -> dict:
        """The finding with ``found`` and the message, for :func:`~sensorbench.json_doc.to_json`."""
        return {"found": self.found, **asdict(self), "message": self.message()}


def brltty_pids(proc: Path) -> list[int]:
    """PIDs whose command name (``/proc/PID/comm``) is ``brltty``."""
    pids = []
    for comm in proc.glob("*/comm"):
        with contextlib.suppress(OSError):  # the process ended, or is not ours to read
            if comm.parent.name.isdigit() and comm.read_text(errors="replace").strip() == "brltty":
                pids.append(int(comm.parent.name))
    return sorted(pids)


def brltty_rules(dirs: tuple[Path, ...]) -> list[Path]:
    """Active udev rule files of brltty with an uncommented rule matching ``10c4/ea60``.

    udev reads one file per name, the first in ``dirs`` order (``/etc`` before
    ``/run`` before ``/usr/lib``); a name masked there hides the later ones.
    """
    chosen: dict[str, Path] = {}
    for d in dirs:
        try:
            files = sorted(p for p in d.iterdir() if p.name.endswith(".rules"))
        except OSError:
            continue
        for p in files:
            chosen.setdefault(p.name, p)
    found = []
    for p in chosen.values():
        try:  # a link to /dev/null or an empty file masks the name
            if (p.is_symlink() and os.readlink(p) == "/dev/null") or p.stat().st_size == 0:
                continue
            text = p.read_text(errors="replace")
        except OSError:
            continue
        active = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
        mentions = "brltty" in p.name or any("brltty" in ln.lower() for ln in active)
        if mentions and any(_CP2102.search(ln) for ln in active):
            found.append(p)
    return sorted(found)


def read_kernel_log() -> tuple[str | None, str]:
    """The kernel log text (``dmesg``, else ``journalctl -k``) and where it came from."""
    why = []
    for cmd in (["dmesg"], ["journalctl", "-k", "-q", "--no-pager", "-o", "cat", "-n", "5000"]):
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_LOG_TIMEOUT_S,
                check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            why.append(f"{cmd[0]}: {err}")
            continue
        if proc.returncode == 0 and proc.stdout:
            return proc.stdout, " ".join(cmd[:2])
        why.append(f"{cmd[0]}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return None, "kernel log unreadable (" + "; ".join(why) + ")"


def check_brltty(proc: Path | None = None, rules_dirs: tuple[Path, ...] | None = None,
        kernel_log: str | None = None) -> BrlttyFinding:
    """Look for brltty's process (in ``proc``, default :data:`PROC`), its CP2102 udev rule
    (``rules_dirs``, highest priority first) and its trace in ``kernel_log`` (None: read)."""
    source = "given"
    if kernel_log is None:
        kernel_log, source = read_kernel_log()
    lines = [ln for ln in (kernel_log or "").splitlines() if KERNEL_PATTERN.search(ln)]
    return BrlttyFinding(brltty_pids(PROC if proc is None else proc),
        brltty_rules(RULES_DIRS if rules_dirs is None else rules_dirs), lines, source)
