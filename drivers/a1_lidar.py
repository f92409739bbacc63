"""The RPLIDAR A1 on top of ``rplidar-roboticia``, with its flaws fixed at the boundary.

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
express angles one node late, no quality, no     express decoded from the vendor SDK's
resync (a bad capsule ends the iterator)           arithmetic with byte-wise re-alignment
                                                   (:mod:`~sensorbench.drivers.a1_kernels`)
``max_buf_meas`` silently stops and restarts the    backlog counted in :attr:`A1Lidar.overruns`,
scan (data lost)                                   logged, reported as an event; no data dropped
descriptor errors after stale bytes                 :meth:`A1Lidar.recover`: stop, clear
                                                   input, reconnect, restart
``setDTR`` raises on a port without modem lines     reported once (event + log), not raised
``connect`` opens with DTR asserted (motor stops)   the port opens with DTR at the motor's
and ``disconnect`` releases it (motor spins)        current state; ``A1Scanner.close``
                                                   never toggles it (``docs/A1.md``, Motor)
=================================================  =====================================

The port is opened by the one transport function,
:func:`~sensorbench.drivers.serial_port.open_serial`; the errors are the typed device
errors of :mod:`sensorbench.errors`.

**Motor (DTR).** The A1's motor-control line follows the adapter's DTR: asserted =
stopped, cleared = spinning, and a closed or never-opened port leaves it cleared, so
the motor spins whenever no program holds the port. The first open of an
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import rplidar
import serial

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_kernels import decode_nodes
from sensorbench.drivers.a1_protocol import A1Health, A1Info, A1SampleRate, Nodes
from sensorbench.drivers.link_watch import Backlog
from sensorbench.drivers.serial_link import EventSink
from sensorbench.drivers.serial_port import GONE_ERRNOS, ModemSerial, open_serial
from sensorbench.errors import DeviceProtocolError, DeviceSilent, DeviceUnplugged, DriverError

log = logging.getLogger("sensorbench.a1")

_T = TypeVar("_T")

POLL_S = 0.02
"""The serial timeout of one low-level read (s); every deadline loops over it."""
MAX_ANSWER_LEN = 256
"""Longest answer of variable length taken as one (GET_LIDAR_CONF: 4 bytes of type and
a value of at most a mode name's); a longer descriptor is damaged, not waited for."""


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
        self.working_mode = 0  # the express request's mode id of the last scan started
        self._serial: ModemSerial | None = None
        super().__init__(os.fspath(port), baudrate=baudrate, timeout=POLL_S, logger=logger or log)

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
            timeout_s=POLL_S,
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

    def _io(self, op: Callable[[ModemSerial], _T], what: str) -> _T:
        """Run one pyserial call on the open port, turning OS-level failures into driver
        errors."""
        ser = self._serial
        if ser is None:
            raise DeviceUnplugged(f"A1 {self.port} is not connected; call connect() or reconnect()")
        try:
            return op(ser)
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
        return int(self._io(lambda s: s.in_waiting, "polling the input buffer"))

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
        data = bytes(self._io(lambda s: s.read(n), "reading"))
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
        self._io(lambda _: super(A1Lidar, self)._send_cmd(cmd), f"sending command {cmd.hex()}")

    def _request(self, request: bytes, length: int | None, dtype: int, what: str) -> bytes:
        """Send ``request`` and return its single answer's payload (``length`` bytes, or
        up to :data:`MAX_ANSWER_LEN` when None); clears stale bytes first, retries once."""
        for attempt in (1, 2):
            self.quiesce()
            self._io(lambda s: s.write(request), f"sending {what}")
            try:
                got_len, single, got_type = self._read_descriptor()
                if not single or got_type != dtype or got_len != (length or got_len) or (
                    length is None and got_len > MAX_ANSWER_LEN
                ):
                    raise DeviceProtocolError(
                        f"A1 {self.port} answered {what} with length {got_len}, "
                        f"{'single' if single else 'multi'} mode, type 0x{got_type:02x} "
                        f"(expected {length or 'any'}, single, 0x{dtype:02x}): is this an RPLIDAR?"
                    )
            except DeviceProtocolError:
                if attempt == 2:
                    raise
                continue  # stale bytes that happened to look like a descriptor: once more
            return self._read_response(got_len)
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
        self._io(lambda s: s.reset_input_buffer(), "clearing input")
        self.scanning = [False, 0, "normal"]
        self.stale_bytes_discarded += discarded
        self.logger.info("%s: discarded %d stale bytes before a request", self.port, discarded)
        return discarded

    def get_info(self) -> A1Info:
        """Model, firmware, hardware and serial number (raises instead of returning a string)."""
        raw = self._request(_cmd(proto.CMD_GET_INFO), proto.INFO_LEN, proto.TYPE_INFO, "GET_INFO")
        return A1Info.from_payload(raw)

    def get_health(self) -> A1Health:
        """Health status and error code (little-endian, unlike the library)."""
        raw = self._request(
            _cmd(proto.CMD_GET_HEALTH), proto.HEALTH_LEN, proto.TYPE_HEALTH, "GET_HEALTH"
        )
        try:
            return A1Health.from_payload(raw)
        except ValueError as err:
            raise DeviceProtocolError(
                f"A1 {self.port}: bad health answer {raw.hex(' ')}: {err}"
            ) from err

    def get_sample_rate(self) -> A1SampleRate:
        """GET_SAMPLERATE: standard and express sample durations (µs; firmware >= 1.17)."""
        raw = self._request(
            _cmd(proto.CMD_GET_SAMPLERATE),
            proto.SAMPLERATE_LEN,
            proto.TYPE_SAMPLE_RATE,
            "GET_SAMPLERATE",
        )
        try:
            return A1SampleRate.from_payload(raw)
        except ValueError as err:
            raise DeviceProtocolError(
                f"A1 {self.port}: bad sample-rate answer {raw.hex(' ')}: {err}"
            ) from err

    def get_conf(self, conf_type: int, mode_id: int | None = None) -> bytes:
        """GET_LIDAR_CONF (firmware >= 1.24): the value of ``conf_type`` (of scan mode
        ``mode_id`` where the entry is per mode)."""
        what = f"GET_LIDAR_CONF 0x{conf_type:02x}" + ("" if mode_id is None else f" mode {mode_id}")
        request = proto.conf_request(conf_type, mode_id)
        for attempt in (1, 2):
            raw = self._request(request, None, proto.TYPE_GET_LIDAR_CONF, what)
            try:
                return proto.conf_value(conf_type, raw)
            except ValueError as err:  # a damaged answer: once more
                if attempt == 2:
                    raise DeviceProtocolError(f"A1 {self.port}: {err}") from err
        raise AssertionError("unreachable")

    def scan_mode(self, mode_id: int) -> proto.ScanMode:
        """One scan mode's name, sample duration, maximum distance and answer type, asked
        as the SDK does (firmware >= 1.24)."""

        def u32(conf: int) -> int:
            value = self.get_conf(conf, mode_id)
            if len(value) < 4:
                raise DeviceProtocolError(f"A1 {self.port}: conf 0x{conf:02x} is {value.hex()}")
            return int.from_bytes(value[:4], "little")

        name = self.get_conf(proto.CONF_SCAN_MODE_NAME, mode_id).split(b"\0")[0]
        return proto.ScanMode(
            mode_id,
            name.decode("ascii"),
            u32(proto.CONF_SCAN_MODE_US_PER_SAMPLE) / 256.0,
            float(u32(proto.CONF_SCAN_MODE_MAX_DISTANCE) >> 8),
            self.get_conf(proto.CONF_SCAN_MODE_ANS_TYPE, mode_id)[:1][0],
        )

    def scan_modes(self) -> tuple[list[proto.ScanMode], int]:
        """Every scan mode and the typical one's id, asked as the SDK does
        (``getAllSupportedScanModes``, ``getTypicalScanMode``; firmware >= 1.24)."""
        count = int.from_bytes(self.get_conf(proto.CONF_SCAN_MODE_COUNT)[:2], "little")
        modes = [self.scan_mode(i) for i in range(count)]
        typical = int.from_bytes(self.get_conf(proto.CONF_SCAN_MODE_TYPICAL)[:2], "little")
        return modes, typical

    def clean_input(self) -> None:
        """Discard received bytes, also while scanning (the library refuses with a string)."""
        self._io(lambda s: s.reset_input_buffer(), "clearing input")

    # -- motor (DTR) ----------------------------------------------------------------

    def _set_dtr(self, level: bool) -> None:
        try:
            self._io(lambda s: setattr(s, "dtr", level), "setting DTR")
        except DeviceSilent as err:  # a write timeout cannot happen on an ioctl
            raise DeviceUnplugged(str(err)) from err
        reached = self._io(lambda s: s.modem_lines, "reading the modem lines") is not None
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

    def start(self, scan_type: str = "normal", working_mode: int = 0) -> None:
        """Start a standard (``normal``), forced (``force``) or ``express`` scan.

        Express (firmware >= 1.17) sends EXPRESS_SCAN with ``working_mode`` (the scan
        mode's id; 0, ``A5 82 05 00 00 00 00 00 22``, is the legacy form) and expects
        84-byte capsules (descriptor ``A5 5A 54 00 00 40 82``). Unlike the library, no
        health check is hidden here (see :meth:`ensure_healthy`).

        Raises:
            DeviceSilent: no descriptor within the deadline (for ``express``: a unit
                without express scan stays silent).
            DriverError: an unknown scan type, or a descriptor that is not the scan's
                after one recovery.
        """
        expected = {
            "normal": (proto.CMD_SCAN, proto.NODE_LEN, proto.TYPE_SCAN),
            "force": (proto.CMD_FORCE_SCAN, proto.NODE_LEN, proto.TYPE_SCAN),
            "express": (proto.CMD_EXPRESS_SCAN, proto.CAPSULE_LEN, proto.TYPE_EXPRESS),
        }
        if scan_type not in expected:
            raise DriverError(
                f"unknown scan type {scan_type!r}: use 'normal', 'force' or 'express'"
            )
        cmd, size, answer = expected[scan_type]
        express = scan_type == "express"
        request = proto.express_request(working_mode) if express else _cmd(cmd)
        for attempt in (1, 2):
            self.quiesce()
            self.start_motor()
            self._io(lambda s: s.write(request), f"sending the {scan_type} scan request")
            try:
                try:
                    length, single, dtype = self._read_descriptor()
                except DeviceSilent as err:
                    raise DeviceSilent(f"no answer to the {scan_type} scan request: {err}") from err
                if (length, single, dtype) != (size, False, answer):
                    raise DeviceProtocolError(
                        f"A1 {self.port} answered the {scan_type} scan request with length "
                        f"{length}, type 0x{dtype:02x} (expected {size}, 0x{answer:02x})"
                    )
            except DeviceProtocolError as err:
                if attempt == 2:
                    raise
                self.logger.warning("%s; recovering", err)
                self._emit("error", f"{err}; recovering (stop, clear input, reconnect)")
                self.recover(restart=False)
                continue
            self.scanning = [True, size, scan_type]
            self.working_mode = working_mode
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
        scan_type = str(self.scanning[2])
        with contextlib.suppress(DeviceUnplugged):
            self._send_cmd(proto.CMD_STOP.to_bytes(1, "little"))
        time.sleep(0.05)
        if self._serial is not None:
            self._io(lambda s: s.reset_input_buffer(), "clearing input")
        self.connect()
        if restart:
            self.start(scan_type, self.working_mode)

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
        nodes, used, skipped = decode_nodes(buf)
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
        """The library's measure iterator without its silent restart (standard scan).

        Yields ``(new_scan, quality, angle_deg_cw, distance_mm)`` as the library does. A
        backlog beyond ``max_buf_meas`` bytes is counted and logged, never flushed; a
        silent device raises :class:`DeviceSilent` after ``read_timeout_s``. Express
        turns come from :class:`~sensorbench.drivers.a1_scanner.A1Scanner`.
        """
        if scan_type == "express":
            raise DriverError("iter_measures reads standard scans; use A1Scanner for express")
        self.start_motor()
        if not self.scanning[0]:
            self.start(scan_type)
        tail = b""
        last_data = time.monotonic()
        while True:
            if max_buf_meas:
                self._check_backlog(int(max_buf_meas))
            chunk = self.read_available(POLL_S)
            if chunk:
                last_data = time.monotonic()
            elif time.monotonic() - last_data > self.read_timeout_s:
                raise DeviceSilent(
                    f"A1 {self.port} sent nothing for {self.read_timeout_s:.2f} s while scanning"
                )
            nodes, used, _ = decode_nodes(tail + chunk)
            tail = (tail + chunk)[used:]
            for s, q, a, d in zip(
                nodes.start.tolist(),
                nodes.quality.tolist(),
                nodes.angle_q6.tolist(),
                nodes.dist_q2.tolist(),
                strict=True,
            ):
                yield s, q, a / 64.0, d / 4.0


def _cmd(cmd: int) -> bytes:
    """A request without payload: ``A5 cmd``."""
    return bytes([proto.SYNC, cmd])
