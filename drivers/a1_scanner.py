"""The A1 protocol on the shared serial link: a standard or express scan as complete turns.

:class:`A1Scanner` is the A1's protocol object on the shared serial transport
(:class:`~sensorbench.drivers.serial_link.SerialLink`, as every device): the link
reads, stamps, records raw bytes and decides silence, overruns, unplug and reconnect
backoff (:class:`~sensorbench.drivers.link_watch.LinkWatch`); the scanner uses
:class:`~sensorbench.drivers.a1_lidar.A1Lidar` for the request/response part
(identify, health, sample rate, reset, start scan) on the open port and turns node
bytes into :class:`~sensorbench.logs.LidarTurns` (angle rad CCW, range m with ``inf``
for no return, quality, host time, device time) with
:class:`~sensorbench.drivers.a1_turns.A1Turns`. The live session reader
(:mod:`sensorbench.drivers.a1_reader`) runs its link on the shared reader thread;
the power-up sequencer and tests step it without a thread (:meth:`A1Scanner.poll`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

import serial

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_clock import describe as describe_clock
from sensorbench.drivers.a1_lidar import POLL_S, A1Lidar
from sensorbench.drivers.a1_protocol import A1Health, A1Info, A1SampleRate
from sensorbench.drivers.a1_turns import A1Turns
from sensorbench.drivers.device_protocol import DeviceProtocol
from sensorbench.drivers.serial_link import EventSink, LinkConfig, SerialLink
from sensorbench.errors import DeviceUnplugged, DriverError
from sensorbench.logs import LidarTurns, TurnFlag

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter


PREAMBLE_MAX_BYTES = 1 << 20
"""Bytes kept from before a session (about 90 s of express scan) for its raw stream."""


class A1Scanner(DeviceProtocol):
    """A scan on one A1, as complete turns: the A1 protocol on its serial link.

    The transport (:attr:`link`, a :class:`~sensorbench.drivers.serial_link.SerialLink`
    the scanner makes for itself) reads, stamps, records raw bytes and handles
    silence, overruns, unplug and reconnect with backoff, as for every device; this
    class supplies the A1's hooks: the port is opened by :class:`A1Lidar` (DTR at the
    motor's state) and each (re)open identifies the unit, checks its health and
    starts the scan with rplidar-roboticia's request/response calls (``open_port``),
    a long silence stops, clears, reconnects and restarts the scan (``restart``), and
    the node stream is decoded into turns (``consume``).
    :func:`~sensorbench.drivers.a1_reader.a1_reader` runs the link on the shared
    reader thread; the power-up sequencer and tests step it with :meth:`poll`.
    :class:`A1Lidar` may reopen the port by itself (``recover`` after a descriptor
    error or a stall), so the link reads, asks and closes through the lidar's current
    port (:class:`_LidarPort`).

    Args:
        port: device path; a stable name (udev symlink, emulator link) survives replugs.
        read_timeout_s: deadline of each request/answer (s).
        stale_after_s: silence while scanning before a ``stale`` event (s).
        restart_after_s: silence while scanning before stop, clear, reconnect, restart (s).
        reconnect_backoff_s: first wait between reopen attempts after an unplug (s),
            doubled up to 1 s.
        reconnect_probe_s: deadline of the first request after a reopen (s); a unit
            still booting is retried after it.
        on_event: ``sink(t_ns, kind, message)`` for unplug/reconnect/stale/overrun/error.
        name: device name (event source, stream names); the reader sets it.
        scan_mode: ``typical`` (robot.toml's default, as the SDK's: the mode the unit
            calls typical) or a mode's name as the unit gives it (``Standard``,
            ``Express``; case does not matter; default ``standard``). Firmware >= 1.24
            is asked its modes (GET_LIDAR_CONF) and the express request carries the
            chosen mode's id; older firmware has Standard and, from 1.17, Express by the
            legacy request; ``typical`` on it is Standard, said in a ``note`` event and
            the stream's ``scan_mode_note``. :attr:`mode` is the mode that runs,
            :attr:`scan_mode_used` its format (``standard`` nodes, ``express`` capsules).

    Use :meth:`open` (connect, identify, health), :meth:`start`, then call :meth:`poll`
    in a loop; it returns within ``max_wait_s`` while data flows, and within the
    request deadlines of one restart or reconnect attempt otherwise.
    """

    kind = "a1"
    wire = "rplidar"
    baud = proto.BAUD
    valid_item = "complete turn"
    backlog_limit = 3000  # rplidar-roboticia's max_buf_meas; counted, never flushed

    def __init__(
        self,
        port: str,
        read_timeout_s: float = 1.0,
        stale_after_s: float = 0.5,
        restart_after_s: float = 3.0,
        reconnect_backoff_s: float = 0.05,
        reconnect_probe_s: float = 0.25,
        on_event: EventSink | None = None,
        name: str = "a1",
        scan_mode: str = "standard",
    ) -> None:
        self.scan_mode = scan_mode
        self.scan_mode_used = "standard"
        self.mode: proto.ScanMode | None = None
        self.modes: list[proto.ScanMode] = []
        self.mode_note = ""  # why the mode is not the one asked for, if it is not
        self.request_timeout_s = read_timeout_s
        self.reconnect_probe_s = reconnect_probe_s
        self.attrs: dict[str, object] = {}
        self.lidar: A1Lidar | None = None
        self.info: A1Info | None = None
        self.health: A1Health | None = None
        self.sample_rate: A1SampleRate | None = None
        self.assembler = A1Turns("standard")
        self.turns_total = 0
        self.points_total = 0
        self.crc_turns = 0
        self._node_bytes = 0  # the node bytes at the end of the chunk being consumed
        self._out: list[LidarTurns] | None = None  # turns completed by the current poll()
        self._skipped_reported = 0
        self._preamble: list[tuple[int, bytes]] = []
        self._preamble_bytes = 0
        self._skip_reported_ns = 0
        self._scanning = False
        self._count_lock = threading.Lock()
        self._port = _LidarPort(self)
        SerialLink(
            name,
            port,
            self,
            config=LinkConfig(
                read_timeout_s=POLL_S,
                first_valid_timeout_s=5.0,
                stale_after_s=stale_after_s,
                backoff_s=reconnect_backoff_s,
                backoff_max_s=1.0,
                restart_after_s=restart_after_s,
            ),
            on_event=on_event,
        )

    # -- the synchronous API (bring-up, tests) ---------------------------------------

    @property
    def connected(self) -> bool:
        """True while the link holds the port."""
        return self.link.connected

    def connect(self) -> None:
        """Open the port if it is not open; a first open asserts DTR (the motor stops).

        Raises:
            DeviceUnavailable: the port cannot be opened.
        """
        if not self.link.connected:
            self.link.attach(self._connect())

    def park(self) -> None:
        """Hold the unit still with its port open: scan stopped, motor stopped (DTR set).

        The only way to keep an A1's motor stopped: releasing the port (:meth:`close`)
        starts it.

        Raises:
            DriverError: the port cannot be opened, or went away.
        """
        self.connect()
        lidar = self._lidar()
        if self._scanning or lidar.scanning[0]:
            lidar.stop()
        self._scanning = False
        lidar.stop_motor()

    @property
    def motor_running(self) -> bool:
        """True while this driver holds the motor spinning (DTR cleared on an open port),
        False while it holds it stopped; a closed port spins it whatever this says."""
        return bool(self.lidar is not None and self.lidar.motor_running)

    def open(self, check_health: bool = True) -> A1Info:
        """Connect, read GET_INFO and (by default) check health, resetting once on error.

        Raises:
            DriverError: cannot open, silent, not an A1, or in error after a reset.
        """
        self.connect()
        return self._identify(check_health)

    def check_health(self) -> A1Health:
        """GET_HEALTH; on ``error`` reset once and ask again (DriverError if still error)."""
        if self.lidar is None:
            raise DriverError(f"A1 {self.link.port}: open() before check_health()")
        self.health = self.lidar.ensure_healthy()
        return self.health

    def start(self) -> None:
        """Start the scan of ``scan_mode`` (motor through DTR where the port has it)."""
        if self.lidar is None or not self.link.connected:
            raise DriverError(f"A1 {self.link.port}: open() before start()")
        self._start_scan()
        self.link.attach(self._port)

    def poll(self, max_wait_s: float = 0.05) -> tuple[int, bytes, LidarTurns]:
        """One step of the link (up to ``max_wait_s`` s): ``(t_ns, raw_chunk, turns)``.

        ``raw_chunk`` is every byte received in the step (answers and descriptor
        included); ``turns`` holds the turns it completed. After an unplug, the turn
        in progress is returned flagged ``PACKET_LOSS`` and later calls try to
        reconnect; the first turn after a reconnect carries ``AFTER_RECONNECT``.
        """
        if not self._scanning:
            raise DriverError(f"A1 {self.link.port}: start() before poll()")
        self._out = []
        try:
            t_ns, data = self.link.poll(max_wait_s)
            turns = LidarTurns.concat(self._out) if self._out else LidarTurns.empty()
        finally:
            self._out = None
        return t_ns, data, turns

    def close(self) -> None:
        """Stop the scan (best effort) and release the port.

        Releasing the port releases DTR, so the motor spins from then on (docs/A1.md,
        Motor): the motor is not stopped first, which would only make the release
        start it again. To keep a motor stopped, keep its port: :meth:`park`.
        """
        if self.lidar is None:
            return
        self.link.close()
        self._release()
        self._scanning = False

    # -- protocol hooks ---------------------------------------------------------------

    def open_port(self, reopen: bool) -> _LidarPort:
        """Open the port through :class:`A1Lidar` (DTR at the motor's state), identify the
        unit, check its health and start the scan.

        After a reopen the identification has a short deadline (a unit still booting
        is retried later) and the next turn is ``AFTER_RECONNECT``.
        """
        port = self._connect()
        try:
            if reopen:
                lidar = self._lidar()
                lidar.read_timeout_s = min(self.request_timeout_s, self.reconnect_probe_s)
                try:
                    self.info = lidar.get_info()
                finally:
                    lidar.read_timeout_s = self.request_timeout_s
                self.health = lidar.ensure_healthy()
            else:
                self._identify(check_health=True)
            self._start_scan()
        except BaseException:
            self._release()
            raise
        if reopen:
            self.assembler.mark(TurnFlag.AFTER_RECONNECT)
        return port

    def consume(self, t_ns: int, data: bytes) -> int:
        """Decode the scan bytes at the end of ``data`` into turns; returns the complete
        valid turns."""
        if self.link.writer is None and self._preamble_bytes < PREAMBLE_MAX_BYTES:
            self._preamble.append((t_ns, data))  # read before a session: kept for it
            self._preamble_bytes += len(data)
        n, self._node_bytes = self._node_bytes, 0
        asm = self.assembler
        done = self._emit_turns(asm.feed(t_ns, data[len(data) - n :])) if n else 0
        unreported = asm.bytes_skipped - self._skipped_reported
        if unreported and t_ns - self._skip_reported_ns >= 1_000_000_000:
            self.link.event(
                t_ns,
                "crc_burst",
                f"{unreported} bytes skipped re-aligning {self._unit()} (corruption or "
                f"loss on the link) since the last report; {asm.bytes_skipped} in all",
            )
            self._skipped_reported = asm.bytes_skipped
            self._skip_reported_ns = t_ns
        return done

    @property
    def nodes_total(self) -> int:
        """Nodes decoded since the scanner was made."""
        return self.assembler.nodes_total

    @property
    def bytes_skipped(self) -> int:
        """Bytes skipped re-aligning since the scanner was made."""
        return self.assembler.bytes_skipped

    def take_preamble(self) -> list[tuple[int, bytes]]:
        """The chunks read before a session's writer was attached (the bring-up's
        identification, scan request and first turns), so that the session's raw stream
        starts with the scan's descriptor and ``decode a1`` reproduces its turns."""
        out, self._preamble = self._preamble, []
        self._preamble_bytes = PREAMBLE_MAX_BYTES
        return out

    def on_lost(self) -> None:
        """Record the bytes read before the loss; emit the cut turn (``PACKET_LOSS``)."""
        rest = self._lidar().take_received()
        if rest:
            self.link.received(time.monotonic_ns(), rest)
        self._emit_turns(self.assembler.flush())

    def reset(self) -> None:
        """Drop the node tail, the turn in progress and the device clock."""
        self._restarted()

    def restart(self) -> None:
        """Stop, clear input, reconnect, restart the scan (the cure for a stalled unit)."""
        try:
            self._lidar().recover(restart=True)
        finally:
            self._restarted()

    def start_note(self) -> str | None:
        """Model, firmware, hardware and serial of the unit, for the ``start`` event."""
        info = self.info
        if info is None:
            return None
        return (
            f"A1 model {info.model} firmware {info.firmware[0]}.{info.firmware[1]:02d} "
            f"hardware {info.hardware} serial {info.serial} on {self.link.port}"
            + (f"; scan mode {self.mode.describe()}" if self.mode is not None else "")
        )

    def reopen_note(self) -> str:
        """The serial of the unit that answered, for the ``reconnect`` event."""
        serial_no = self.info.serial if self.info is not None else "?"
        return f"reopened {self.link.port} (serial {serial_no}); scanning"

    def diagnose(self) -> str:
        """Bytes and nodes since opening, with the likely cause."""
        return (
            f"{self.link.bytes_since_open} bytes, {self.nodes_total} nodes: is the motor "
            "spinning (DTR) and the supply strong enough?"
        )

    def counters(self) -> tuple[int, int, int, int]:
        """(turns with skipped bytes, nodes lost re-aligning, points, turns) since start."""
        return (self.crc_turns, self.assembler.samples_estimated_lost, self.points_total,
                self.turns_total)  # fmt: skip

    def final_note(self) -> str:
        """Nodes decoded and what was skipped, recorded at stop."""
        asm = self.assembler
        return (
            f"decoded {self.nodes_total} nodes ({self.scan_mode_used} scan); skipped: "
            f"bytes_skipped={self.bytes_skipped} "
            f"nodes_dropped={asm.nodes_dropped} (angle >= 360 deg); "
            f"ranges_beyond_limit={asm.ranges_beyond_limit} (stored as nan)"
        )

    def declare_streams(self, writer: SessionWriter) -> None:
        """Add ``lidar/<name>``: the unit's identity where known, and how it is timed."""
        info = self.info
        device = {}
        if info is not None:
            device = {
                "serial": info.serial,
                "firmware": f"{info.firmware[0]}.{info.firmware[1]:02d}",
                "hardware": info.hardware,
                "model_id": info.model,
            }
        mode = self.scan_mode_used
        used = self.mode
        device_time = (
            describe_clock(self.sample_rate, mode)
            if info is not None
            else f"sample index x {mode} sample duration (GET_SAMPLERATE) where the unit "
            "reports it (turns with device_ns), else none"
        )
        writer.add_lidar(
            self.link.name,
            attrs={
                "model": "A1",
                "port_path": self.link.port,
                "intensity": "quality 0..63"
                + (
                    " (express: 47 for a return, 0 for none; capsules carry no quality)"
                    if mode == "express"
                    else ""
                ),
                "scan_mode": used.name if used is not None else mode,
                "scan_mode_id": used.id if used is not None else -1,
                "scan_modes": "; ".join(m.describe() for m in self.modes),
                "scan_format": mode,
                "scan_mode_note": self.mode_note,
                "device_time": device_time,
                "time_base": "host monotonic_ns at receive, spread over each read's nodes",
                "native_units": "angle q6 degrees clockwise, distance q2 mm (converted once)",
                **device,
                **self.attrs,
            },
        )

    # -- internals ------------------------------------------------------------------

    def _lidar(self) -> A1Lidar:
        if self.lidar is None:
            raise DriverError(f"A1 {self.link.port}: open() first")
        return self.lidar

    def _connect(self) -> _LidarPort:
        """Open the port through the lidar (creating it on the first open)."""
        if self.lidar is None:
            lidar = A1Lidar(self.link.port, self.request_timeout_s, on_event=self.link.event)
            lidar.record_raw = True
            self.lidar = lidar
        else:
            self.lidar.connect()
        return self._port

    def _release(self) -> None:
        """Stop the scan (best effort) and release the port (the motor spins from then on)."""
        lidar = self.lidar
        if lidar is None:
            return
        if lidar.connected:
            with contextlib.suppress(DriverError, serial.SerialException, OSError, TypeError):
                lidar.stop()
        lidar.disconnect()

    def _identify(self, check_health: bool) -> A1Info:
        """Reset what a previous host left (STOP, drain until quiet, clear input: a
        program killed while scanning leaves the unit scanning, and with DTR set at this
        open the head stops, so no byte says so while every request is ignored), then
        GET_INFO, the sample duration where the firmware has it and (optionally) health."""
        self._lidar().stop()
        info = self._lidar().get_info()
        self.info = info
        self._read_sample_rate(info)
        if check_health:
            self.check_health()
        return info

    def _read_sample_rate(self, info: A1Info) -> None:
        """Ask the sample durations (device-side turn timing) where the firmware has them."""
        if self.sample_rate is not None or info.firmware < proto.SAMPLERATE_MIN_FIRMWARE:
            return
        try:
            self.sample_rate = self._lidar().get_sample_rate()
        except DeviceUnplugged:
            raise
        except DriverError as err:
            self.link.event(
                time.monotonic_ns(),
                "note",
                f"no sample duration ({err}); turn times from the host clock",
            )

    def _start_scan(self) -> None:
        """The scan from a clean state (no tail, no turn, no clock anchor) in the mode
        chosen once per scanner (:meth:`_choose_mode`)."""
        lidar = self._lidar()
        if self.mode is None:
            self.mode = self._choose_mode()
        mode = self.mode
        fmt = mode.format or "standard"
        if fmt == "express":
            lidar.start("express", working_mode=mode.id if self._has_conf() else 0)
        else:
            lidar.start("normal")
        self.scan_mode_used = fmt
        self.mode_label = mode.name
        self._scanning = True
        self._restarted()

    def _has_conf(self) -> bool:
        """True for firmware with the configuration commands (GET_LIDAR_CONF, >= 1.24)."""
        return self.info is not None and self.info.firmware >= proto.CONF_MIN_FIRMWARE

    def _choose_mode(self) -> proto.ScanMode:
        """The scan mode to run: ``scan_mode`` among the unit's modes (asked with
        GET_LIDAR_CONF on firmware >= 1.24, the SDK's legacy list below it).

        Raises:
            DriverError: a mode name the unit does not offer, or one whose answer
                sensorbench does not decode (the message lists the unit's modes).
        """
        info = self.info
        firmware = info.firmware if info is not None else (0, 0)
        want = self.scan_mode.lower()
        if self._has_conf() and want == "standard":  # SDK startScanNormal: mode 0 only
            self.modes, typical = [self._lidar().scan_mode(proto.STANDARD_MODE_ID)], -1
        elif self._has_conf():
            self.modes, typical = self._lidar().scan_modes()
        else:
            self.modes, typical = proto.legacy_modes(self.sample_rate, firmware), 0
        if want == proto.TYPICAL:
            chosen = next((m for m in self.modes if m.id == typical), None)
            if chosen is not None and chosen.format is None:
                self._note(f"typical mode {chosen.describe()} is not decoded here")
                decoded = [m for m in self.modes if m.format]
                decoded.sort(key=lambda m: m.format != "express")
                chosen = decoded[0] if decoded else None  # Express, else Standard
            if not self._has_conf():
                self._note(
                    f"firmware {firmware[0]}.{firmware[1]:02d} has no configuration commands "
                    "(GET_LIDAR_CONF, firmware >= 1.24): scanning Standard"
                )
        else:
            chosen = next((m for m in self.modes if m.name.lower() == want), None)
        if chosen is None or chosen.format is None:
            offered = "; ".join(m.describe() for m in self.modes)
            why = "is not offered" if chosen is None else "answers a format not decoded here"
            raise DriverError(
                f"A1 {self.link.port}: scan mode {self.scan_mode!r} {why} (firmware "
                f"{firmware[0]}.{firmware[1]:02d}; modes: {offered}); set scan_mode to "
                "'typical' or to a Standard or Express mode's name"
            )
        return chosen

    def _note(self, text: str) -> None:
        """A ``note`` event and the stream's ``scan_mode_note`` (the bring-up has no session)."""
        self.mode_note = text
        self.link.event(time.monotonic_ns(), "note", f"{self.link.port}: {text}")

    def _unit(self) -> str:
        return "capsules" if self.scan_mode_used == "express" else "nodes"

    def _restarted(self) -> None:
        """A new scan (start, restart, reconnect): no tail, no turn, no clock anchor."""
        rate = self.sample_rate
        mode = self.scan_mode_used
        self.assembler.reset(mode=mode, sample_us=0 if rate is None else rate.sample_us(mode))

    def _emit_turns(self, turns: LidarTurns) -> int:
        """Store turns (session, the current :meth:`poll`'s result, counters); returns
        the complete ones without loss."""
        if not turns.n_turns:
            return 0
        writer = self.link.writer
        if writer is not None:
            writer.append_turns(self.link.name, turns)
        if self._out is not None:
            self._out.append(turns)
        with self._count_lock:
            self.turns_total += turns.n_turns
            self.points_total += turns.n_points
        self.crc_turns += int(((turns.flags & TurnFlag.CRC_ERRORS) > 0).sum())
        return int(((turns.flags & TurnFlag.PACKET_LOSS) == 0).sum())


class _LidarPort:
    """The link's port of an A1: read, asked and closed through the lidar's current
    serial port, which the lidar may have reopened by itself (``recover``)."""

    def __init__(self, scanner: A1Scanner) -> None:
        self._scanner = scanner

    def read(self, max_wait_s: float) -> bytes:
        """What arrived (waiting up to ``max_wait_s`` s for the first byte), preceded by
        the answers the requests read since the last read."""
        lidar = self._scanner._lidar()
        nodes = lidar.read_available(max_wait_s)
        self._scanner._node_bytes = len(nodes)
        return lidar.take_received()

    def waiting(self) -> int:
        """Bytes waiting in the lidar's current port."""
        return self._scanner._lidar().in_waiting()

    def close(self) -> None:
        """Stop the scan (best effort) and release the port (the motor spins from then on)."""
        self._scanner._release()
