"""RPLIDAR A1 driver on top of ``rplidar-roboticia`` with its flaws fixed at the boundary.

:class:`A1Lidar` subclasses :class:`rplidar.RPLidar` and keeps the library's request
framing (``_send_cmd``, ``_send_payload_cmd``) and its connection bookkeeping. It
replaces what the library gets wrong (``docs/A1.md``, Protocol and the flaws table):

=================================================  =====================================
library (0.9.5)                                    here
=================================================  =====================================
``_read_response`` busy-waits on ``inWaiting()``   every read has a deadline
forever; unplug raises a bare ``OSError``           (``read_timeout_s``) and raises
                                                   :class:`DeviceSilent`; EIO raises
                                                   :class:`DeviceUnplugged`
``get_info``/``get_health`` return a string when    stale bytes are stopped and cleared,
bytes are buffered                                 then the request is made; failures
                                                   raise :class:`~sensorbench.errors.DriverError`
health error code byte-swapped                     little-endian, as on the wire
express scan decoding wrong                        standard scan only; express refused
``max_buf_meas`` silently stops and restarts the    backlog counted in :attr:`A1Lidar.overruns`,
scan (data lost)                                   logged, reported as an event; no data dropped
descriptor errors after stale bytes                 :meth:`A1Lidar.recover`: stop, clear
                                                   input, reconnect, restart
``setDTR`` raises on a port without modem lines     reported once (event + log), not raised
``connect`` opens with DTR asserted (motor stops)   the port opens with DTR at the motor's
and ``disconnect`` releases it (motor spins)        current state; :meth:`A1Scanner.close`
                                                   never toggles it (``docs/A1.md``, Motor)
=================================================  =====================================

The port is opened by the one transport function,
:func:`~sensorbench.drivers.serial_port.open_serial`; the errors are the typed device
errors of :mod:`sensorbench.errors`.

**Motor (DTR).** The A1's motor-control line follows the adapter's DTR: asserted =
stopped, cleared = spinning, and a closed or never-opened port leaves it cleared, so
the motor spins whenever no program holds the port. The first open of an
:class:`A1Lidar` asserts DTR (the motor stops from that moment); later reopens keep the
motor in the state the driver last set (:attr:`A1Lidar.motor_running`).

:class:`A1Scanner` is the A1 protocol on the shared serial transport
(:class:`~sensorbench.drivers.serial_link.SerialLink`, as every device): the link
reads, stamps, records raw bytes and decides silence, overruns, unplug and reconnect
backoff (:class:`~sensorbench.drivers.link_watch.LinkWatch`); the scanner uses
:class:`A1Lidar` for the request/response part (identify, health, sample rate, reset,
start scan) on the open port and turns node bytes into
:class:`~sensorbench.logs.LidarTurns` (angle rad CCW, range m with ``inf`` for no
return, quality, host time). The live session reader
(:mod:`sensorbench.drivers.a1_reader`) runs it on the shared reader thread.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import rplidar
import serial

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_clock import NodeClock
from sensorbench.drivers.a1_clock import describe as describe_clock
from sensorbench.drivers.a1_protocol import (
    MAX_RANGE_Q2,
    A1Health,
    A1Info,
    A1SampleRate,
    Nodes,
    possible_nodes,
)
from sensorbench.drivers.link_watch import Backlog
from sensorbench.drivers.serial_link import EventSink, SerialLink
from sensorbench.drivers.serial_port import GONE_ERRNOS, open_serial
from sensorbench.errors import DeviceProtocolError, DeviceSilent, DeviceUnplugged, DriverError
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, TurnFlag

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter

log = logging.getLogger("sensorbench.a1")

_POLL_S = 0.02  # the serial timeout of one low-level read (s); deadlines loop over it


class A1Lidar(rplidar.RPLidar):
    """One RPLIDAR A1 on a serial port, with deadlines and real exceptions.

    Args:
        port: device path (``/dev/ttyUSB0``, a udev name, or an emulator's pty/link).
        read_timeout_s: deadline of every read that waits for an answer (s).
        baudrate: 115200 for the A1.
        on_event: optional sink for ``(t_ns, kind, message)`` events (unplug, overrun...).
        logger: logger (``sensorbench.a1`` by default).

    Raises:
        DeviceUnavailable: the port cannot be opened (the message says why and what to do).
    """

    def __init__(
        self,
        port: str,
        read_timeout_s: float = 1.0,
        baudrate: int = proto.BAUD,
        on_event: EventSink | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.read_timeout_s = float(read_timeout_s)
        self.on_event = on_event
        self.has_modem_lines: bool | None = None
        self.backlog = Backlog(None)
        self.record_raw = False
        self._received = bytearray()
        self.stale_bytes_discarded = 0
        super().__init__(os.fspath(port), baudrate=baudrate, timeout=_POLL_S, logger=logger or log)

    # -- connection -----------------------------------------------------------------

    def connect(self) -> None:
        """Open the port (closing a previous one) with DTR at the motor's state.

        The first open asserts DTR: the motor stops from the open on. A reopen keeps
        it spinning if the driver had started it (the kernel pulses DTR for the
        instant of the open; the motor's inertia rides it out).

        Raises:
            DeviceUnavailable: with a hint (missing, permission, busy).
        """
        self.disconnect()
        self._serial = open_serial(
            self.port,
            self.baudrate,
            timeout_s=_POLL_S,
            write_timeout_s=self.read_timeout_s,
            dtr=not self.motor_running,
        )
        self.scanning = [False, 0, "normal"]

    def disconnect(self) -> None:
        """Close the port; never raises (an unplugged port may fail to close).

        Closing releases DTR: the motor spins from then on (until the port is opened
        again or the unit loses power), whatever it did before.
        """
        ser, self._serial = self._serial, None
        if ser is not None:
            try:
                ser.close()
            except (serial.SerialException, OSError) as err:
                self.logger.debug("closing %s: %s", self.port, err)
        self.scanning = [False, 0, "normal"]

    @property
    def connected(self) -> bool:
        """True while the port is open."""
        return self._serial is not None

    def _emit(self, kind: str, message: str) -> None:
        if self.on_event is not None:
            self.on_event(time.monotonic_ns(), kind, message)

    def _io(self, op: Callable[[], object], what: str) -> object:
        """Run one pyserial call, turning OS-level failures into driver errors."""
        if self._serial is None:
            raise DeviceUnplugged(f"A1 {self.port} is not connected; call connect() or reconnect()")
        try:
            return op()
        except serial.SerialTimeoutException as err:
            raise DeviceSilent(
                f"A1 {self.port}: the port blocked for {self.read_timeout_s:.2f} s while "
                f"{what} (hardware flow control on? another program holding it?)"
            ) from err
        except serial.SerialException as err:
            raise DeviceUnplugged(
                f"A1 {self.port} went away while {what} ({err}); check the USB cable, "
                "then reconnect"
            ) from err
        except OSError as err:
            if err.errno in GONE_ERRNOS:
                raise DeviceUnplugged(
                    f"A1 {self.port} went away while {what} (errno {err.errno}: "
                    f"{err.strerror}); check the USB cable, then reconnect"
                ) from err
            raise DriverError(f"A1 {self.port}: I/O error while {what}: {err}") from err

    def in_waiting(self) -> int:
        """Bytes received and not yet read."""
        return int(self._io(lambda: self._serial.in_waiting, "polling the input buffer"))

    def read_available(self, max_wait_s: float) -> bytes:
        """Everything already received, or wait up to ``max_wait_s`` (s) for the first byte."""
        n = self.in_waiting()
        if n:
            return self._read_now(n)
        deadline = time.monotonic() + max_wait_s
        while True:
            data = self._read_now(1)
            if data:
                more = self.in_waiting()
                return data + self._read_now(more) if more else data
            if time.monotonic() >= deadline:
                return b""

    def _read_now(self, n: int) -> bytes:
        """One pyserial read of up to ``n`` bytes (returns within the poll timeout)."""
        data = bytes(self._io(lambda: self._serial.read(n), "reading"))
        if data and self.record_raw:
            self._received += data
        return data

    def take_received(self) -> bytes:
        """Every byte read since the last call (answers, stale bytes, nodes), in order.

        Only recorded while :attr:`record_raw` is True (a session's raw stream).
        """
        data = bytes(self._received)
        self._received.clear()
        return data

    def _read_exact(self, size: int, what: str) -> bytes:
        deadline = time.monotonic() + self.read_timeout_s
        buf = bytearray()
        while len(buf) < size:
            buf += self._read_now(size - len(buf))
            if len(buf) < size and time.monotonic() >= deadline:
                raise DeviceSilent(
                    f"A1 {self.port} sent {len(buf)} of {size} bytes of {what} within "
                    f"{self.read_timeout_s:.2f} s. Is it powered, on this port and at "
                    f"{self.baudrate} baud? A device that is still booting answers after "
                    "about 1 s."
                )
        return bytes(buf)

    # -- library overrides: reads with deadlines, real exceptions ---------------------

    def _read_descriptor(self) -> tuple[int, bool, int]:
        """Read a descriptor within the deadline: ``(length, is_single, type)``."""
        raw = self._read_exact(proto.DESCRIPTOR_LEN, "a response descriptor")
        try:
            length, mode, dtype = proto.parse_descriptor(raw)
        except ValueError as err:
            raise DeviceProtocolError(
                f"A1 {self.port} answered {raw.hex(' ')} instead of a descriptor (A5 5A ...): "
                "stale scan bytes, a boot banner, or not an RPLIDAR at this baud rate; "
                "recover() stops, clears and reconnects"
            ) from err
        return length, mode == proto.MODE_SINGLE, dtype

    def _read_response(self, dsize: int) -> bytes:
        """Read a ``dsize``-byte payload within the deadline (the library waits forever)."""
        return self._read_exact(dsize, f"a {dsize}-byte response")

    def _send_cmd(self, cmd: bytes) -> None:
        self._io(lambda: super(A1Lidar, self)._send_cmd(cmd), f"sending command {cmd.hex()}")

    def _request(self, cmd: int, length: int, dtype: int, what: str) -> bytes:
        """Send ``cmd`` and return its payload; clears stale bytes first, retries once."""
        for attempt in (1, 2):
            self.quiesce()
            self._send_cmd(bytes([cmd]))
            try:
                got_len, single, got_type = self._read_descriptor()
                if (got_len, single, got_type) != (length, True, dtype):
                    raise DeviceProtocolError(
                        f"A1 {self.port} answered {what} with length {got_len}, "
                        f"{'single' if single else 'multi'} mode, type 0x{got_type:02x} "
                        f"(expected {length}, single, 0x{dtype:02x}): is this an RPLIDAR?"
                    )
            except DeviceProtocolError:
                if attempt == 2:
                    raise
                continue  # stale bytes that happened to look like a descriptor: once more
            return self._read_response(length)
        raise AssertionError("unreachable")

    def quiesce(self, quiet_s: float = 0.05) -> int:
        """If bytes are arriving (a scan left running, a boot banner), stop and discard them.

        Sends STOP, then reads until the line has been quiet for ``quiet_s`` (s) or the
        read deadline passes. Returns the number of bytes discarded.
        """
        if not self.in_waiting():
            return 0
        self._send_cmd(proto.CMD_STOP.to_bytes(1, "little"))
        discarded = 0
        deadline = time.monotonic() + self.read_timeout_s
        while time.monotonic() < deadline:
            chunk = self.read_available(quiet_s)
            if not chunk:
                break
            discarded += len(chunk)
        self._io(self._serial.reset_input_buffer, "clearing input")
        self.scanning = [False, 0, "normal"]
        self.stale_bytes_discarded += discarded
        self.logger.info("%s: discarded %d stale bytes before a request", self.port, discarded)
        return discarded

    def get_info(self) -> A1Info:  # type: ignore[override]
        """Model, firmware, hardware and serial number (raises instead of returning a string)."""
        raw = self._request(proto.CMD_GET_INFO, proto.INFO_LEN, proto.TYPE_INFO, "GET_INFO")
        return A1Info.from_payload(raw)

    def get_health(self) -> A1Health:  # type: ignore[override]
        """Health status and error code (little-endian, unlike the library)."""
        raw = self._request(proto.CMD_GET_HEALTH, proto.HEALTH_LEN, proto.TYPE_HEALTH, "GET_HEALTH")
        try:
            return A1Health.from_payload(raw)
        except ValueError as err:
            raise DeviceProtocolError(
                f"A1 {self.port}: bad health answer {raw.hex(' ')}: {err}"
            ) from err

    def get_sample_rate(self) -> A1SampleRate:
        """GET_SAMPLERATE: standard and express sample durations (µs; firmware >= 1.17)."""
        raw = self._request(
            proto.CMD_GET_SAMPLERATE, proto.SAMPLERATE_LEN, proto.TYPE_SAMPLE_RATE, "GET_SAMPLERATE"
        )
        try:
            return A1SampleRate.from_payload(raw)
        except ValueError as err:
            raise DeviceProtocolError(
                f"A1 {self.port}: bad sample-rate answer {raw.hex(' ')}: {err}"
            ) from err

    def clean_input(self) -> None:
        """Discard received bytes, also while scanning (the library refuses with a string)."""
        self._io(self._serial.reset_input_buffer, "clearing input")

    # -- motor (DTR) ----------------------------------------------------------------

    def _set_dtr(self, level: bool) -> None:
        try:
            self._io(lambda: setattr(self._serial, "dtr", level), "setting DTR")
        except DeviceSilent as err:  # a write timeout cannot happen on an ioctl
            raise DeviceUnplugged(str(err)) from err
        reached = self._serial.modem_lines is not None
        if not reached and self.has_modem_lines is not False:
            msg = (
                f"{self.port} has no modem lines (a pty without an emulator's modem-line "
                "channel, or an adapter without DTR): the A1 motor cannot be switched here"
            )
            self.logger.info(msg)
            self._emit("note", msg)
        self.has_modem_lines = reached

    def start_motor(self) -> None:
        """Spin the motor: DTR cleared. No PWM command (the A1 has none)."""
        self._set_dtr(False)
        self.motor_running = True

    def stop_motor(self) -> None:
        """Stop the motor: DTR asserted (only while the port stays open)."""
        self._set_dtr(True)
        self.motor_running = False

    # -- scanning -------------------------------------------------------------------

    def stop(self) -> None:
        """Stop scanning and discard what is still arriving."""
        self._send_cmd(proto.CMD_STOP.to_bytes(1, "little"))
        self.scanning = [False, 0, "normal"]
        deadline = time.monotonic() + self.read_timeout_s
        while time.monotonic() < deadline and self.read_available(0.02):
            pass
        self.clean_input()

    def reset(self, boot_timeout_s: float = 2.0) -> str:
        """Reboot the core; waits for the boot banner (or ``boot_timeout_s``) and returns it."""
        self._send_cmd(proto.CMD_RESET.to_bytes(1, "little"))
        self.scanning = [False, 0, "normal"]
        deadline = time.monotonic() + boot_timeout_s
        text = b""
        while time.monotonic() < deadline:
            chunk = self.read_available(0.1 if text else 0.05)
            if chunk:
                text += chunk
            elif text:
                break
        self.clean_input()
        banner = text.decode("ascii", "replace").strip()
        self._emit("note", f"reset; banner: {banner!r}" if banner else "reset; no banner")
        return banner

    def start(self, scan_type: str = "normal") -> None:
        """Start a standard scan (``normal``) or forced scan (``force``).

        Unlike the library, no health check is hidden here (see :meth:`ensure_healthy`).

        Raises:
            DriverError: for ``express`` (its decoding in rplidar-roboticia is wrong),
                or when the descriptor is not a scan descriptor after one recovery.
        """
        if scan_type == "express":
            raise DriverError(
                "express scan is not supported: rplidar-roboticia 0.9.5 decodes its angles "
                "wrongly; use the standard scan (about 2000 samples/s on an A1)"
            )
        if scan_type not in ("normal", "force"):
            raise DriverError(f"unknown scan type {scan_type!r}: use 'normal' or 'force'")
        cmd = proto.CMD_SCAN if scan_type == "normal" else proto.CMD_FORCE_SCAN
        for attempt in (1, 2):
            self.quiesce()
            self.start_motor()
            self._send_cmd(bytes([cmd]))
            try:
                length, single, dtype = self._read_descriptor()
                if (length, single, dtype) != (proto.NODE_LEN, False, proto.TYPE_SCAN):
                    raise DeviceProtocolError(
                        f"A1 {self.port} answered the scan request with length {length}, "
                        f"type 0x{dtype:02x}: not a standard-scan stream"
                    )
            except DeviceProtocolError as err:
                if attempt == 2:
                    raise
                self.logger.warning("%s; recovering", err)
                self._emit("error", f"{err}; recovering (stop, clear input, reconnect)")
                self.recover(restart=False)
                continue
            self.scanning = [True, proto.NODE_LEN, scan_type]
            return

    def ensure_healthy(self) -> A1Health:
        """Health check; on ``error`` reset once and check again.

        Raises:
            DriverError: still in error after a reset (the code is in the message).
        """
        health = self.get_health()
        if health.status == "error":
            self.logger.warning("%s: health error 0x%04x, resetting", self.port, health.error_code)
            self._emit("error", f"health error code 0x{health.error_code:04x}; resetting once")
            self.reset()
            health = self.get_health()
            if health.status == "error":
                raise DriverError(
                    f"A1 {self.port} reports a hardware error (code 0x{health.error_code:04x}) "
                    "even after a reset: power-cycle it; if it persists, the unit is faulty "
                    "or its supply too weak (start lidars one after another)"
                )
        elif health.status == "warning":
            self._emit("note", f"health warning code 0x{health.error_code:04x}")
        return health

    def recover(self, restart: bool = True) -> None:
        """The known cure for descriptor errors: stop, clear input, reconnect (restart scan)."""
        scan_type = self.scanning[2]
        with contextlib.suppress(DeviceUnplugged):
            self._send_cmd(proto.CMD_STOP.to_bytes(1, "little"))
        time.sleep(0.05)
        if self._serial is not None:
            self._io(self._serial.reset_input_buffer, "clearing input")
        self.connect()
        if restart:
            self.start(scan_type)

    def read_nodes(self, max_wait_s: float, tail: bytes = b"") -> tuple[bytes, Nodes, bytes, int]:
        """Read what arrived (waiting up to ``max_wait_s`` s) and decode whole nodes.

        ``tail`` is the undecoded remainder of the previous call. Returns
        ``(chunk, nodes, new_tail, skipped_bytes)``; ``chunk`` is what was read now
        (preceded, when :attr:`record_raw` is set, by the bytes read since the last
        :meth:`take_received`, e.g. a scan descriptor).
        A backlog larger than 3000 bytes (the library's ``max_buf_meas``) is counted in
        :attr:`overruns` and logged; nothing is discarded.
        """
        self._check_backlog(3000)
        chunk = self.read_available(max_wait_s)
        buf = tail + chunk
        nodes, used, skipped = proto.decode_nodes(buf)
        return (self.take_received() if self.record_raw else chunk), nodes, buf[used:], skipped

    @property
    def overruns(self) -> int:
        """Backlogs counted by :meth:`read_nodes` and :meth:`iter_measures` (nothing dropped)."""
        return self.backlog.overruns

    def _check_backlog(self, limit: int) -> None:
        """Count (once per episode) a backlog beyond ``limit`` bytes; nothing is dropped."""
        self.backlog.limit = limit
        backlog = self.in_waiting()
        if self.backlog.check(backlog):
            msg = f"host fell behind: {backlog} bytes waiting on {self.port} (kept, not flushed)"
            self.logger.warning(msg)
            self._emit("overrun", msg)

    def iter_measures(
        self, scan_type: str = "normal", max_buf_meas: int | bool = 3000
    ) -> Iterator[tuple[bool, int, float, float]]:
        """The library's measure iterator without its silent restart.

        Yields ``(new_scan, quality, angle_deg_cw, distance_mm)`` as the library does. A
        backlog beyond ``max_buf_meas`` bytes is counted and logged, never flushed; a
        silent device raises :class:`DeviceSilent` after ``read_timeout_s``.
        """
        self.start_motor()
        if not self.scanning[0]:
            self.start(scan_type)
        tail = b""
        last_data = time.monotonic()
        while True:
            if max_buf_meas:
                self._check_backlog(int(max_buf_meas))
            chunk = self.read_available(_POLL_S)
            if chunk:
                last_data = time.monotonic()
            elif time.monotonic() - last_data > self.read_timeout_s:
                raise DeviceSilent(
                    f"A1 {self.port} sent nothing for {self.read_timeout_s:.2f} s while scanning"
                )
            nodes, used, _ = proto.decode_nodes(tail + chunk)
            tail = (tail + chunk)[used:]
            for s, q, a, d in zip(
                nodes.start.tolist(),
                nodes.quality.tolist(),
                nodes.angle_q6.tolist(),
                nodes.dist_q2.tolist(),
                strict=True,
            ):
                yield s, q, a / 64.0, d / 4.0


class TurnAssembler:
    """Cuts a node stream into turns at the start flags; keeps all per-instance state.

    Nodes before the first start flag (the head starts mid-turn) are counted in
    :attr:`leading_nodes_skipped` and not stored. A turn is emitted when the next
    turn's start flag arrives, or by :meth:`flush` (flagged ``PACKET_LOSS``).
    Nodes with an impossible angle are dropped and counted in :attr:`nodes_dropped`
    (a start flag they carry passes to the next node kept); distances beyond 12 m
    are stored as ``nan`` and counted in :attr:`ranges_beyond_limit`.
    """

    def __init__(self) -> None:
        self.leading_nodes_skipped = 0
        self.turns_emitted = 0
        self.nodes_dropped = 0
        self.ranges_beyond_limit = 0
        self._carry_start = False
        self._parts: list[tuple[Nodes, np.ndarray, np.ndarray | None]] = []
        self._started = False
        self._flags = 0

    def mark(self, flag: TurnFlag) -> None:
        """Set ``flag`` on the turn being assembled."""
        self._flags |= int(flag)

    def reset(self) -> None:
        """Forget the turn in progress and wait for a new start flag (after a restart)."""
        self._parts = []
        self._started = False
        self._flags = 0
        self._carry_start = False

    def _drop_impossible(
        self, nodes: Nodes, t_ns: np.ndarray, dev_ns: np.ndarray | None
    ) -> tuple[Nodes, np.ndarray, np.ndarray | None]:
        """The nodes with a possible angle, with their host and device times; a start
        flag on a dropped node moves to the next node kept (in this call or the next)."""
        keep = possible_nodes(nodes)
        start = nodes.start.copy()
        if self._carry_start and start.size:
            start[0] = True
        turn = np.cumsum(start)
        kept_turn = turn[keep]
        last_kept = int(kept_turn[-1]) if kept_turn.size else 0
        self._carry_start = bool(start.size) and int(turn[-1]) > last_kept
        if keep.all() and not start[0] ^ nodes.start[0]:
            return nodes, t_ns, dev_ns
        self.nodes_dropped += int(np.count_nonzero(~keep))
        new_start = np.diff(np.concatenate(([0], kept_turn))) > 0
        kept = Nodes(
            new_start, nodes.quality[keep], nodes.angle_q6[keep], nodes.dist_q2[keep],
            nodes.pos[keep],
        )  # fmt: skip
        return kept, t_ns[keep], None if dev_ns is None else dev_ns[keep]

    def feed(self, nodes: Nodes, t_ns: np.ndarray, dev_ns: np.ndarray | None = None) -> LidarTurns:
        """Add nodes stamped ``t_ns`` (host, int64 ns each) and optionally ``dev_ns``
        (device time, :mod:`~sensorbench.drivers.a1_clock`); returns the turns completed.

        A turn's ``device_ns`` is its first node's device time when every node of the
        turn has one, else ``NO_DEVICE_TIME``.
        """
        if len(nodes) == 0:
            return LidarTurns.empty()
        nodes, t_ns, dev_ns = self._drop_impossible(nodes, t_ns, dev_ns)
        if len(nodes) == 0:
            return LidarTurns.empty()
        self.ranges_beyond_limit += int(np.count_nonzero(nodes.dist_q2 > MAX_RANGE_Q2))
        starts = np.flatnonzero(nodes.start)
        if not self._started:
            if starts.size == 0:
                self.leading_nodes_skipped += len(nodes)
                return LidarTurns.empty()
            self.leading_nodes_skipped += int(starts[0])
            nodes, t_ns = _slice(nodes, int(starts[0]), len(nodes)), t_ns[starts[0] :]
            dev_ns = None if dev_ns is None else dev_ns[starts[0] :]
            starts = starts - starts[0]
            self._started = True
        out: list[LidarTurns] = []
        prev = 0
        for cut in [*starts.tolist(), len(nodes)]:
            if cut > prev:
                dev = None if dev_ns is None else dev_ns[prev:cut]
                self._parts.append((_slice(nodes, prev, cut), t_ns[prev:cut], dev))
            if cut < len(nodes):
                done = self._close(0)
                if done is not None:
                    out.append(done)
            prev = cut
        return LidarTurns.concat(out)

    def flush(self) -> LidarTurns:
        """Emit the turn in progress, flagged ``PACKET_LOSS`` (it is incomplete)."""
        done = self._close(int(TurnFlag.PACKET_LOSS))
        self._started = False
        return done if done is not None else LidarTurns.empty()

    def _close(self, extra_flags: int) -> LidarTurns | None:
        parts, self._parts = self._parts, []
        n = sum(len(p[0]) for p in parts)
        if n == 0:
            return None
        flags, self._flags = self._flags | extra_flags, 0
        nodes = Nodes(
            *(
                np.concatenate([getattr(p[0], f) for p in parts])
                for f in ("start", "quality", "angle_q6", "dist_q2", "pos")
            )
        )
        t_ns = np.concatenate([p[1] for p in parts])
        have_dev = all(p[2] is not None for p in parts)
        self.turns_emitted += 1
        return LidarTurns(
            t_first_ns=[t_ns[0]],
            device_ns=[parts[0][2][0] if have_dev else NO_DEVICE_TIME],
            speed_hz=[np.nan],
            count=[n],
            flags=[flags],
            angle=nodes.angle_ccw_rad,
            range=nodes.range_m,
            intensity=nodes.quality,
            t_ns=t_ns,
        )


def _slice(nodes: Nodes, lo: int, hi: int) -> Nodes:
    return Nodes(
        nodes.start[lo:hi],
        nodes.quality[lo:hi],
        nodes.angle_q6[lo:hi],
        nodes.dist_q2[lo:hi],
        nodes.pos[lo:hi],
    )


def spread_times(
    t_prev_ns: int | None, t_ns: int, k: int, max_node_ns: int = 1_000_000
) -> np.ndarray:
    """Host times of ``k`` nodes received in one chunk at ``t_ns``.

    The nodes arrived between the previous chunk (``t_prev_ns``) and this one; they are
    spread evenly over that interval, which is clamped to ``max_node_ns`` per node so
    a pause before the chunk does not stretch it.
    """
    if k == 0:
        return np.empty(0, dtype=np.int64)
    span = k * max_node_ns if t_prev_ns is None else min(t_ns - t_prev_ns, k * max_node_ns)
    step = span / k
    return t_ns - np.round(step * np.arange(k - 1, -1, -1)).astype(np.int64)


class A1Scanner(SerialLink):
    """A standard scan on one A1, as complete turns: the A1 protocol on the serial link.

    The transport (:class:`~sensorbench.drivers.serial_link.SerialLink`) reads, stamps,
    records raw bytes and handles silence, overruns, unplug and reconnect with
    backoff, as for every device; this class supplies the A1's hooks: the port is
    opened by :class:`A1Lidar` (DTR at the motor's state), a reopen identifies the
    unit, checks its health and starts the scan with rplidar-roboticia's
    request/response calls (``on_open``), a long silence stops, clears, reconnects and
    restarts the scan (``restart``), and the node stream is decoded into turns
    (``consume``). :class:`~sensorbench.drivers.a1_reader.A1Reader` runs it on the
    shared reader thread; the power-up sequencer and tests step it with :meth:`poll`.
    :class:`A1Lidar` may reopen the port by itself (``recover`` after a descriptor
    error or a stall), so the A1's hooks read, ask and close through the lidar's
    current port, not the one the link was handed.

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

    Use :meth:`open` (connect, identify, health), :meth:`start`, then call :meth:`poll`
    in a loop; it returns within ``max_wait_s`` while data flows, and within the
    request deadlines of one restart or reconnect attempt otherwise.
    """

    kind = "a1"
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
    ) -> None:
        super().__init__(
            name,
            port,
            proto.BAUD,
            read_timeout_s=_POLL_S,
            first_valid_timeout_s=5.0,
            stale_after_s=stale_after_s,
            backoff_s=reconnect_backoff_s,
            backoff_max_s=1.0,
            restart_after_s=restart_after_s,
            on_event=on_event,
        )
        self.request_timeout_s = read_timeout_s
        self.reconnect_probe_s = reconnect_probe_s
        self.attrs: dict[str, object] = {}
        self.lidar: A1Lidar | None = None
        self.info: A1Info | None = None
        self.health: A1Health | None = None
        self.sample_rate: A1SampleRate | None = None
        self.node_clock: NodeClock | None = None
        self.assembler = TurnAssembler()
        self.nodes_total = 0
        self.bytes_skipped = 0
        self.turns_total = 0
        self.points_total = 0
        self.crc_turns = 0
        self._tail = b""
        self._node_bytes = 0  # the node bytes at the end of the chunk being consumed
        self._out: list[LidarTurns] = []  # turns completed by the current poll
        self._skipped_unreported = 0
        self._skip_reported_ns = 0
        self._t_prev: int | None = None
        self._scanning = False

    # -- the synchronous API (bring-up, tests) ---------------------------------------

    def connect(self) -> None:
        """Open the port if it is not open; a first open asserts DTR (the motor stops).

        Raises:
            DeviceUnavailable: the port cannot be opened.
        """
        if not self.connected:
            self.attach(self.open_port())

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
        info = self._lidar().get_info()
        self.info = info
        self._read_sample_rate(info)
        if check_health:
            self.check_health()
        return info

    def _read_sample_rate(self, info: A1Info) -> None:
        """Ask the sample duration (device-side turn timing) where the firmware has it."""
        if self.sample_rate is not None or info.firmware < proto.SAMPLERATE_MIN_FIRMWARE:
            return
        try:
            self.sample_rate = self._lidar().get_sample_rate()
        except DeviceUnplugged:
            raise
        except DriverError as err:
            self._event(
                time.monotonic_ns(),
                "note",
                f"no sample duration ({err}); turn times from the host clock",
            )
            return
        self.node_clock = NodeClock(self.sample_rate.standard_us)

    def check_health(self) -> A1Health:
        """GET_HEALTH; on ``error`` reset once and ask again (DriverError if still error)."""
        if self.lidar is None:
            raise DriverError(f"A1 {self.port}: open() before check_health()")
        self.health = self.lidar.ensure_healthy()
        return self.health

    def start(self) -> None:
        """Start the standard scan (motor through DTR where the port has it)."""
        if self.lidar is None or self._ser is None:
            raise DriverError(f"A1 {self.port}: open() before start()")
        self.lidar.start("normal")
        self._scanning = True
        self._restarted()
        self.attach(self._ser)

    # the link's step, returning the turns too (the reader thread ignores the result)
    def poll(self, max_wait_s: float = 0.05) -> tuple[int, bytes, LidarTurns]:  # type: ignore[override]
        """One step of the link (up to ``max_wait_s`` s): ``(t_ns, raw_chunk, turns)``.

        ``raw_chunk`` is every byte received in the step (answers and descriptor
        included); ``turns`` holds the turns it completed. After an unplug, the turn
        in progress is returned flagged ``PACKET_LOSS`` and later calls try to
        reconnect; the first turn after a reconnect carries ``AFTER_RECONNECT``.
        """
        if not self._scanning:
            raise DriverError(f"A1 {self.port}: start() before poll()")
        self._out = []
        t_ns, data = super().poll(max_wait_s)
        turns = LidarTurns.concat(self._out) if self._out else LidarTurns.empty()
        self._out = []
        return t_ns, data, turns

    def close(self) -> None:
        """Stop the scan (best effort) and release the port.

        Releasing the port releases DTR, so the motor spins from then on (docs/A1.md,
        Motor): the motor is not stopped first, which would only make the release
        start it again. To keep a motor stopped, keep its port: :meth:`park`.
        """
        if self.lidar is None:
            return
        if self.lidar.connected:
            with contextlib.suppress(DriverError):
                self.lidar.stop()
        super().close()
        self.lidar.disconnect()
        self._scanning = False

    # -- link hooks -----------------------------------------------------------------

    def open_link(self) -> None:
        """Open, identify, check health, emit ``start``, start the scan (a reader's start).

        Raises:
            DriverError: the device cannot be opened, is silent, or unhealthy after a reset.
        """
        self.open()
        self._event(time.monotonic_ns(), "start", self.start_note())
        self.start()

    def open_port(self) -> serial.Serial:
        """Open the port through :class:`A1Lidar` (DTR at the motor's state)."""
        if self.lidar is None:
            lidar = A1Lidar(self.port, self.request_timeout_s, on_event=self._event)
            lidar.record_raw = True
            self.lidar = lidar
        else:
            self.lidar.connect()
        return self.lidar._serial

    def close_port(self, ser: serial.Serial) -> None:
        """Release the port (the motor spins from then on)."""
        self._lidar().disconnect()

    def on_open(self, ser: serial.Serial) -> None:
        """After a reopen: identify (a short deadline: a unit still booting is retried
        later), check health, restart the scan; the next turn is ``AFTER_RECONNECT``."""
        lidar = self._lidar()
        lidar.read_timeout_s = min(self.request_timeout_s, self.reconnect_probe_s)
        try:
            self.info = lidar.get_info()
        finally:
            lidar.read_timeout_s = self.request_timeout_s
        self.health = lidar.ensure_healthy()
        lidar.start("normal")
        self._restarted()
        self.assembler.mark(TurnFlag.AFTER_RECONNECT)

    def waiting(self, ser: serial.Serial) -> int:
        """Bytes waiting in the lidar's current port (a recovery may have reopened it)."""
        return self._lidar().in_waiting()

    def read_chunk(self, ser: serial.Serial, max_wait_s: float) -> bytes:
        """What arrived (waiting up to ``max_wait_s`` s for the first byte), preceded by
        the answers the requests read since the last chunk."""
        lidar = self._lidar()
        nodes = lidar.read_available(max_wait_s)
        self._node_bytes = len(nodes)
        return lidar.take_received()

    def consume(self, t_ns: int, data: bytes) -> int:
        """Decode the node bytes of ``data`` into turns; returns the complete valid turns."""
        n, self._node_bytes = self._node_bytes, 0
        buf = self._tail + (data[len(data) - n :] if n else b"")
        nodes, used, skipped = proto.decode_nodes(buf)
        self._tail = buf[used:]
        if skipped:
            self.bytes_skipped += skipped
            self.assembler.mark(TurnFlag.CRC_ERRORS)
            self._skipped_unreported += skipped
        if self._skipped_unreported and t_ns - self._skip_reported_ns >= 1_000_000_000:
            self._event(
                t_ns,
                "crc_burst",
                f"{self._skipped_unreported} bytes skipped re-aligning nodes (corruption or "
                f"loss on the link) since the last report; {self.bytes_skipped} in all",
            )
            self._skipped_unreported = 0
            self._skip_reported_ns = t_ns
        if not len(nodes):
            return 0
        self.nodes_total += len(nodes)
        t_nodes = spread_times(self._t_prev, t_ns, len(nodes))
        self._t_prev = t_ns
        dev = None if self.node_clock is None else self.node_clock.stamp(len(nodes), t_ns, skipped)
        return self._emit_turns(self.assembler.feed(nodes, t_nodes, dev))

    def on_lost(self) -> None:
        """Record the bytes read before the loss; emit the cut turn (``PACKET_LOSS``)."""
        rest = self._lidar().take_received()
        if rest:
            self._received(time.monotonic_ns(), rest)
        self._emit_turns(self.assembler.flush())
        self._tail = b""

    def on_reconnect(self) -> None:
        """Drop the node tail, the turn in progress and the device clock."""
        self._restarted()

    def restart(self, ser: serial.Serial) -> serial.Serial:
        """Stop, clear input, reconnect, restart the scan (the cure for a stalled unit)."""
        lidar = self._lidar()
        try:
            lidar.recover(restart=True)
        finally:
            self._restarted()
        return lidar._serial

    def start_note(self) -> str:
        """Model, firmware, hardware and serial of the unit, for the ``start`` event."""
        info = self.info
        if info is None:
            return super().start_note()
        return (
            f"A1 model {info.model} firmware {info.firmware[0]}.{info.firmware[1]:02d} "
            f"hardware {info.hardware} serial {info.serial} on {self.port}"
        )

    def reopen_note(self) -> str:
        """The serial of the unit that answered, for the ``reconnect`` event."""
        serial_no = self.info.serial if self.info is not None else "?"
        return f"reopened {self.port} (serial {serial_no}); scanning"

    def diagnose(self) -> str:
        """Bytes and nodes since opening, with the likely cause."""
        n = self.bytes_total - self.bytes_at_open
        return (
            f"{n} bytes, {self.nodes_total} nodes: is the motor spinning (DTR) and the "
            "supply strong enough?"
        )

    def counters(self) -> tuple[int, int, int, int]:
        """(turns with skipped bytes, nodes lost re-aligning, points, turns) since start."""
        return (self.crc_turns, self.bytes_skipped // proto.NODE_LEN, self.points_total,
                self.turns_total)  # fmt: skip

    def final_note(self) -> str:
        """Nodes decoded and what was skipped, recorded at stop."""
        asm = self.assembler
        return (
            f"decoded {self.nodes_total} nodes; skipped: "
            f"bytes_skipped={self.bytes_skipped} "
            f"nodes_dropped={asm.nodes_dropped} (angle >= 360 deg); "
            f"ranges_beyond_limit={asm.ranges_beyond_limit} (stored as nan)"
        )

    def raw_attrs(self) -> dict[str, Any]:
        """Raw stream attributes: port, baud, kind and the protocol."""
        return {**super().raw_attrs(), "protocol": "rplidar"}

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
        device_time = (
            describe_clock(self.sample_rate)
            if info is not None
            else "node count x standard sample duration (GET_SAMPLERATE) where the unit "
            "reports it (turns with device_ns), else none"
        )
        writer.add_lidar(
            self.name,
            attrs={
                "model": "A1",
                "port_path": self.port,
                "intensity": "quality 0..63",
                "device_time": device_time,
                "native_units": "angle q6 degrees clockwise, distance q2 mm (converted once)",
                **device,
                **self.attrs,
            },
        )

    # -- internals ------------------------------------------------------------------

    def _lidar(self) -> A1Lidar:
        if self.lidar is None:
            raise DriverError(f"A1 {self.port}: open() first")
        return self.lidar

    def _restarted(self) -> None:
        """A new scan (start, restart, reconnect): no tail, no turn, no clock anchor."""
        self._tail = b""
        self._t_prev = None
        self.assembler.reset()
        if self.node_clock is not None:
            self.node_clock.reset()

    def _emit_turns(self, turns: LidarTurns) -> int:
        """Store turns (session, this poll's result, counters); returns the complete
        ones without loss."""
        if not turns.n_turns:
            return 0
        if self.writer is not None:
            self.writer.append_turns(self.name, turns)
        self._out.append(turns)
        with self._lock:
            self.turns_total += turns.n_turns
            self.points_total += turns.n_points
        self.crc_turns += int(((turns.flags & TurnFlag.CRC_ERRORS) > 0).sum())
        return int(((turns.flags & TurnFlag.PACKET_LOSS) == 0).sum())


@dataclass
class CaptureDecode:
    """Result of :func:`decode_capture`.

    Attributes:
        turns: complete turns (and, flagged ``PACKET_LOSS``, the turn cut by each
            scan restart or the end of the capture).
        scans: scan descriptors found (scan starts).
        nodes: nodes decoded.
        bytes_skipped: bytes dropped while re-aligning (corruption, loss).
        bytes_outside_scans: bytes before the first scan descriptor (other answers).
        leading_nodes: nodes before the first start flag of each scan (no turn).
        dropped_offsets: byte offsets in the capture of the nodes dropped for an
            impossible angle (q6 >= 23040).
        ranges_beyond_limit: distances beyond 12 m, stored as ``nan``.
    """

    turns: LidarTurns
    scans: int
    nodes: int
    bytes_skipped: int
    bytes_outside_scans: int
    leading_nodes: int
    dropped_offsets: list[int] = field(default_factory=list)
    ranges_beyond_limit: int = 0


def decode_capture(
    data: bytes,
    chunk_times_ns: tuple[np.ndarray, np.ndarray] | None = None,
    t0_ns: int = 0,
    sample_rate_hz: float = proto.NOMINAL_SAMPLES_PER_S,
    require_descriptor: bool = True,
) -> CaptureDecode:
    """Decode a raw A1 byte capture (scan descriptor + standard-scan nodes) into turns.

    Each scan descriptor ``A5 5A 05 00 00 40 81`` starts a new scan (a restart cuts
    the turn in progress). Point times come from ``chunk_times_ns`` = ``(offsets,
    t_ns)`` (the byte offset where each received chunk starts and its host time, as a
    session's raw stream stores them; nodes of a chunk are spread over the gap to
    the previous chunk) or, without it, from ``t0_ns`` plus the node index at
    ``sample_rate_hz`` (a bare capture has no times; the file's attributes say so).

    Turns get device times (:mod:`~sensorbench.drivers.a1_clock`) when the capture
    holds the unit's GET_SAMPLERATE answer (a session's raw stream does) and chunk
    times: each scan's count starts at its first node, anchored at the host time of
    the chunk that completed it, as the live scanner does.

    Raises:
        DriverError: no scan descriptor while ``require_descriptor`` (not an A1
            standard-scan capture; pass ``require_descriptor=False`` for a bare node
            stream that starts on a node boundary).
    """
    rate = sample_rate_in(data)
    desc = proto.SCAN_DESCRIPTOR
    starts = []
    pos = data.find(desc)
    while pos >= 0:
        starts.append(pos)
        pos = data.find(desc, pos + len(desc))
    if not starts:
        if require_descriptor:
            raise DriverError(
                f"no A1 scan descriptor ({desc.hex(' ')}) in {len(data)} bytes: not an A1 "
                "standard-scan capture (for a bare node stream, decode without descriptor)"
            )
        segments = [(0, len(data))]
        outside = 0
    else:
        bounds = [*starts, len(data)]
        segments = [(a + len(desc), b) for a, b in itertools.pairwise(bounds)]
        outside = starts[0]
    asm = TurnAssembler()
    out: list[LidarTurns] = []
    n_nodes = 0
    skipped_total = 0
    dropped: list[int] = []
    for lo, hi in segments:
        nodes, _, skipped = proto.decode_nodes(data[lo:hi])
        skipped_total += skipped
        pos_abs = nodes.pos + lo
        dropped.extend(pos_abs[~possible_nodes(nodes)].tolist())
        if chunk_times_ns is None:
            t_ns = t0_ns + np.round((n_nodes + np.arange(len(nodes))) * 1e9 / sample_rate_hz)
            t_ns = t_ns.astype(np.int64)
        else:
            t_ns = _times_from_chunks(pos_abs, *chunk_times_ns)
        dev = None
        if rate is not None and chunk_times_ns is not None and len(nodes):
            dev = _device_times(pos_abs, rate.standard_us, *chunk_times_ns)
        n_nodes += len(nodes)
        asm.reset()
        if skipped:
            asm.mark(TurnFlag.CRC_ERRORS)
        out.append(asm.feed(nodes, t_ns, dev))
        out.append(asm.flush())
    return CaptureDecode(
        LidarTurns.concat(out),
        len(starts),
        n_nodes,
        skipped_total,
        outside,
        asm.leading_nodes_skipped,
        dropped,
        asm.ranges_beyond_limit,
    )


def sample_rate_in(data: bytes) -> A1SampleRate | None:
    """The first GET_SAMPLERATE answer in a raw capture, or None."""
    at = data.find(proto.SAMPLERATE_DESCRIPTOR)
    payload = data[at + proto.DESCRIPTOR_LEN : at + proto.DESCRIPTOR_LEN + proto.SAMPLERATE_LEN]
    if at < 0 or len(payload) < proto.SAMPLERATE_LEN:
        return None
    try:
        return A1SampleRate.from_payload(payload)
    except ValueError:
        return None


def _device_times(
    pos: np.ndarray, sample_us: int, offsets: np.ndarray, t_ns: np.ndarray
) -> np.ndarray:
    """Device times of one scan's nodes at byte offsets ``pos`` (as :class:`NodeClock`)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    first_chunk = np.searchsorted(offsets, pos[0] + proto.NODE_LEN - 1, side="right") - 1
    gaps = np.diff(pos) - proto.NODE_LEN  # bytes skipped between consecutive nodes
    idx = np.concatenate(([0], np.cumsum(1 + np.round(gaps / proto.NODE_LEN)))).astype(np.int64)
    return int(np.asarray(t_ns)[first_chunk]) + idx * int(sample_us) * 1000


def _times_from_chunks(pos: np.ndarray, offsets: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
    """Host time of nodes at byte offsets ``pos`` from chunk start offsets and times."""
    offsets = np.asarray(offsets, dtype=np.int64)
    t_ns = np.asarray(t_ns, dtype=np.int64)
    end = pos + proto.NODE_LEN - 1  # a node is complete when its last byte arrived
    chunk = np.searchsorted(offsets, end, side="right") - 1
    out = np.empty(pos.size, dtype=np.int64)
    for c in np.unique(chunk):
        sel = np.flatnonzero(chunk == c)
        prev = int(t_ns[c - 1]) if c > 0 else None
        out[sel] = spread_times(prev, int(t_ns[c]), sel.size)
    return out
