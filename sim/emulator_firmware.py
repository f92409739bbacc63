"""The pod MCU running the real firmware image under simavr, its UART on a pty (pacing,
resets, the latch grid: firmware/README.md, "Running the image without a board")."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.errors import SimError
from sensorbench.logs.atomic_output import file_kind, regular_input
from sensorbench.sim.emulator_base import PtyEmulator
from sensorbench.sim.modem_lines import ModemLineChannel
from sensorbench.sim.pod_trajectory import PodTrajectory
from sensorbench.sim.pty import PtyPort

FIRMWARE_DIR = Path(__file__).resolve().parent.parent / "firmware"
HARNESS_ENV = "SENSORBENCH_POD_HARNESS"
DEFAULT_HARNESS = FIRMWARE_DIR / "build" / "sim" / "pods_harness"
OPTIBOOT_WAIT_S = 1.0  # optiboot's watchdog timeout after an external reset (s)
PERIOD_US = 5000  # the default build's latch period (200 Hz), µs
TAIL_US = 20_000  # without loop: how long the MCU runs after the last row (µs)
_STOP_TIMEOUT_S = 5.0


EM_AVR = 83
"""ELF ``e_machine`` of an AVR image (little-endian at byte 18 of the file)."""


@dataclass(frozen=True)
class Boot:
    """One start of the firmware (``index`` 0 at power-on, +1 per reset): the simulated CPU
    ``cycle`` and trajectory time ``traj_us`` (µs) at which its clock started (t_us = 0),
    and the counts the pins showed when it read its initial state, ``base`` (int64[N]):
    its counters are the trajectory's counts minus these."""

    index: int
    cycle: int
    traj_us: int
    base: np.ndarray


@dataclass(frozen=True)
class Injected:
    """How the harness drives the MCU's pins and reset line besides the trajectory: resets
    at trajectory times ``reset_at_us`` (µs) besides DTR's; ``double_edges`` ``(pod,
    t_us)``: that pod's first edge at or after ``t_us`` moves both its lines at once (the
    firmware must count one lost edge pair); ``phase_deg``, the quadrature phase between
    an A edge and the next B edge (90: ideal; 45 < phase < 135)."""

    reset_at_us: tuple[int, ...] = ()
    double_edges: tuple[tuple[int, int], ...] = ()
    phase_deg: float = 90.0


class FirmwarePodEmulator(PtyEmulator):
    """The AVR pod firmware under simavr, its UART on a pty.

    ``speed``: simulated seconds per wall second (0: as fast as the host allows);
    ``loop``: repeat the trajectory (counts and time continue); ``auto_reset``: DTR
    asserted resets the MCU, which restarts its image ``boot_s`` later (s); ``events``: a
    file the harness's event lines are appended to (firmware/README.md). Resets align to
    the image's latch period :data:`PERIOD_US`, ``boot_s`` rounds to it; the simavr harness
    is ``$SENSORBENCH_POD_HARNESS``, else the one ``make -C firmware`` builds. Without
    ``loop`` the MCU runs :data:`TAIL_US` after the last row.
    """

    def __init__(
        self,
        elf: str | os.PathLike[str],
        trajectory: PodTrajectory,
        *,
        link: str | os.PathLike[str] | None = None,
        speed: float = 1.0,
        loop: bool = False,
        auto_reset: bool = True,
        boot_s: float = OPTIBOOT_WAIT_S,
        inject: Injected | None = None,
        events: str | os.PathLike[str] | None = None,
    ) -> None:
        self.elf = Path(elf)
        if not os.path.lexists(self.elf):
            raise SimError(f"{self.elf}: no such firmware image (build it: make -C firmware)")
        with regular_input(self.elf, SimError, "firmware image").open("rb") as f:
            head = f.read(20)
        if head[:4] != b"\x7fELF" or head[18:20] != EM_AVR.to_bytes(2, "little"):
            raise SimError(f"{self.elf}: not an AVR ELF image (build one: make -C firmware)")
        inject = inject or Injected()
        if min(speed, boot_s) < 0 or not 45 < inject.phase_deg < 135:
            raise SimError("speed and boot_s must be >= 0 and 45 < phase_deg < 135")
        self.harness = Path(os.environ.get(HARNESS_ENV) or DEFAULT_HARNESS)
        if not os.access(self.harness, os.X_OK):
            raise SimError(
                f"{self.harness}: no simavr harness; build it with `make -C {FIRMWARE_DIR}` in a "
                f"clone (needs simavr and libsimavr-dev) or name it in ${HARNESS_ENV}"
            )
        self._events = Path(events) if events is not None else None
        if self._events is not None:
            if os.path.exists(self._events) and not self._events.is_file():
                kind = file_kind(os.stat(self._events).st_mode)  # a FIFO would never open
                raise SimError(f"{events} is {kind}: the events are appended to a regular file")
            try:
                self._events.touch()
            except OSError as exc:
                raise SimError(f"{events}: cannot write the events ({exc})") from exc
        self.trajectory = trajectory
        self.loop = loop
        self.boot_us = round(boot_s * 1e6 / PERIOD_US) * PERIOD_US
        self._args = [
            "--speed", repr(float(speed)),
            "--boot-us", str(self.boot_us),
            "--align-us", str(PERIOD_US),
            "--tail-us", str(TAIL_US),
            "--phase-deg", repr(float(inject.phase_deg)),
            *(a for t in inject.reset_at_us for a in ("--reset-at-us", str(int(t)))),
            *(a for k, t in inject.double_edges for a in ("--double", f"{int(k)}:{int(t)}")),
            *(["--loop"] if loop else []),
        ]  # fmt: skip
        super().__init__(PtyPort(link=link))
        self._dir = tempfile.TemporaryDirectory(prefix="sensorbench-firmware-")
        self._traj_file = Path(self._dir.name) / "trajectory.txt"
        trajectory.write(self._traj_file)
        self.boots: list[Boot] = []
        self.resets: list[int] = []  # trajectory times of the resets applied (µs)
        self.doubles: list[tuple[int, int]] = []  # (pod, trajectory µs) of double edges
        self.finished = threading.Event()
        self.errors: list[str] = []
        # simulated s per wall s the harness ran (its pacing waits, never skips, when the
        # host falls behind): known once it exited
        self.achieved_speed: float | None = None
        self._bases: dict[int, np.ndarray] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._lines: ModemLineChannel | None = None
        if auto_reset:
            self._lines = ModemLineChannel(self.port.path, self._on_dtr)

    def start(self) -> FirmwarePodEmulator:
        """Power on: start the harness (the MCU boots and streams); returns self."""
        with self._lock:
            if self._proc is not None:
                return self
            master = self.port.master_fd
            self._proc = subprocess.Popen(
                [os.fspath(self.harness), "--elf", os.fspath(self.elf),
                 "--trajectory", os.fspath(self._traj_file), "--fd", str(master), *self._args],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                pass_fds=(master,),
            )  # fmt: skip
        threading.Thread(target=self._read_stderr, name="pod-firmware-stderr", daemon=True).start()
        self._start_thread("pod-firmware")
        return self

    def _run(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        with (
            self._events.open("a", encoding="utf-8") if self._events else contextlib.nullcontext()
        ) as log:
            for line in proc.stdout:
                if log is not None:
                    log.write(line)
                    log.flush()
                self._event(line.split())
        if proc.wait() != 0 and not self._stop.is_set():
            self.errors.append(f"the harness exited with status {proc.returncode}")
        self.finished.set()

    def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stderr is not None
        for line in proc.stderr:
            if line.strip():
                self.errors.append(line.strip())

    def _event(self, words: list[str]) -> None:
        if not words:
            return
        kind = words[0]
        if kind == "base":
            self._bases[int(words[1])] = np.array(words[5].split(","), dtype=np.int64)
        elif kind == "epoch":
            index = int(words[1])
            base = self._bases.get(index, np.zeros(self.trajectory.n_pods, np.int64))
            self.boots.append(Boot(index, int(words[3]), int(words[5]), base))
        elif kind == "reset":
            self.resets.append(int(words[5]))
        elif kind == "double":
            self.doubles.append((int(words[1]), int(words[5])))
        elif kind == "end":
            self.finished.set()
        elif kind == "ran":
            self.achieved_speed = int(words[2]) / max(int(words[4]), 1)

    def reset(self) -> None:
        """Pulse RESET (what DTR does on an Uno): takes effect on the next latch grid point."""
        self._command("reset")

    def _command(self, text: str) -> None:
        with self._lock:
            proc = self._proc
            if proc is None or proc.stdin is None or proc.poll() is not None:
                return
            with contextlib.suppress(BrokenPipeError, ValueError):
                proc.stdin.write(text + "\n")
                proc.stdin.flush()

    def _on_dtr(self, asserted: bool) -> None:
        if asserted:  # the falling edge of DTR# pulls RESET low through the capacitor
            self.reset()

    def stop(self, timeout_s: float = _STOP_TIMEOUT_S) -> None:
        """Stop the harness (quit, then kill after ``timeout_s``) and remove the pty."""
        self._stop.set()
        if self._lines is not None:
            self._lines.close()
        with self._lock:
            proc = self._proc
        if proc is not None:
            self._command("quit")
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout_s)
            if proc.stdin is not None:
                proc.stdin.close()
        super().stop(timeout_s)
        self._dir.cleanup()

    def stall(self, *_: object) -> None:
        """Refused, as are :meth:`unplug` and :meth:`replug`: the firmware's link has no faults."""
        raise SimError("the firmware emulator has no link faults")

    unplug = replug = stall
