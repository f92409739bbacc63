"""The live RPLIDAR A1: the request/response client (:class:`A1Lidar`), its protocol
object on the shared serial link (:class:`A1Scanner`) and the capture reader (docs/A1.md, Shape).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import serial

from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_protocol import A1Health, A1Info, A1SampleRate, describe_clock
from sensorbench.drivers.a1_turns import A1Turns
from sensorbench.drivers.device_protocol import DeviceProtocol
from sensorbench.drivers.kernels import warm_up
from sensorbench.drivers.serial_link import EventSink, LinkConfig, SerialLink, read_waiting
from sensorbench.drivers.serial_port import GONE_ERRNOS, ModemSerial, open_serial
from sensorbench.drivers.serial_reader import SerialReader
from sensorbench.errors import DeviceProtocolError, DeviceSilent, DeviceUnplugged, DriverError
from sensorbench.logs import LidarTurns, TurnFlag

if TYPE_CHECKING:
    from sensorbench.logs import SessionWriter

log = logging.getLogger("sensorbench.a1")

_T = TypeVar("_T")

POLL_S = 0.02
"""The serial timeout of one low-level read (s); every deadline loops over it."""
BOOT_TIMEOUT_S = 2.0  # longest wait for the boot banner after RESET (s)
MAX_ANSWER_LEN = 256
"""Longest answer of variable length taken as one (GET_LIDAR_CONF: 4 bytes of type and
a value of at most a mode name's); a longer descriptor is damaged, not waited for."""


class A1Lidar:
    """One RPLIDAR A1 on serial port ``port``, opened here (DeviceUnavailable, saying why,
    if it cannot be); every read that waits for an answer has ``read_timeout_s`` (s).
    ``on_event`` receives ``(t_ns, kind, message)`` events."""

    def __init__(self, port: str, read_timeout_s: float = 1.0,
            on_event: EventSink | None = None) -> None:
        self.read_timeout_s = float(read_timeout_s)
        self.on_event = on_event
        self.has_modem_lines: bool | None = None
        self.record_raw = False
        self._received = bytearray()
        self.stale_bytes_discarded = 0
        self.last_read = 0  # bytes the last read() waited for (a scan's nodes)
        self.scanning = False  # a scan started and not stopped since
        self.express_mode: int | None = None  # the last scan's express mode id (None: standard)
        self._serial: ModemSerial | None = None
        self._rdev = 0  # the open port's device number (a read tells a replaced port)
        self.port = os.fspath(port)
        self.motor_running = False
        self.connect()

    # -- connection -----------------------------------------------------------------

    def connect(self) -> None:
        """Open the port (closing a previous one; DeviceUnavailable with a hint) with DTR at
        the motor's state: a first open stops the motor, a reopen keeps a started one
        spinning (docs/A1.md, Motor)."""
        self.disconnect()
        self._serial = open_serial(self.port, proto.BAUD, timeout_s=POLL_S,
            write_timeout_s=self.read_timeout_s, dtr=not self.motor_running)
        fd = self._serial.fileno()
        os.set_blocking(fd, False)  # as pyserial opened it; reads wait in select
        self._rdev = os.fstat(fd).st_rdev

    def disconnect(self) -> None:
        """Close the port; never raises. Closing releases DTR: the motor spins from then on."""
        ser, self._serial = self._serial, None
        self.scanning = False
        if ser is not None:
            try:
                ser.close()
            except (serial.SerialException, OSError) as err:
                log.debug("closing %s: %s", self.port, err)

    def close(self) -> None:
        """Stop the scan (best effort) and release the port (the motor spins from then on)."""
        if self._serial is not None:
            with contextlib.suppress(DriverError, serial.SerialException, OSError, TypeError):
                self.stop()
        self.disconnect()

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
                f"{what} (hardware flow control on? another program holding it?)") from err
        except OSError as err:
            raise self._os_error(err, what) from err

    def _os_error(self, err: OSError, what: str) -> DriverError:
        """The driver error of an OS-level failure while ``what``: the port gone
        (DeviceUnplugged) or another I/O error."""
        lib = isinstance(err, serial.SerialException)  # an OSError without an errno
        if not lib and err.errno not in GONE_ERRNOS:
            return DriverError(f"A1 {self.port}: I/O error while {what}: {err}")
        cause = err if lib else f"errno {err.errno}: {err.strerror}"
        return DeviceUnplugged(f"A1 {self.port} went away while {what} ({cause}); check the "
            "USB cable, then reconnect")

    def _write(self, request: bytes, what: str) -> None:
        self._io(lambda s: s.write(request), f"sending {what}")

    def waiting(self) -> int:
        """Bytes received and not yet read."""
        return int(self._io(lambda s: s.in_waiting, "polling the input buffer"))

    def read_available(self, max_wait_s: float) -> bytes:
        """Everything already received, or wait up to ``max_wait_s`` (s) for the first byte
        (one ``select`` and one read: :func:`~sensorbench.drivers.serial_link.read_waiting`)."""
        data = self._io(lambda s: read_waiting(s.fd, self.port, self._rdev, max_wait_s),
                        "reading")  # fmt: skip
        if data and self.record_raw:
            self._received += data
        return data

    def read(self, max_wait_s: float) -> bytes:
        """The link's read (:class:`~sensorbench.drivers.serial_link.Port`): every byte read
        since the last call, the requests' answers first, waiting up to ``max_wait_s`` (s)
        for a new one; :attr:`last_read` counts the new ones."""
        ser = self._serial
        if ser is None or not self.record_raw or self._received:  # requests' answers first
            self.last_read = len(self.read_available(max_wait_s))
            return self.take_received()
        try:  # a scan's read: nothing received before it, no copies (the reader's wake-ups)
            data = read_waiting(ser.fd, self.port, self._rdev, max_wait_s)
        except OSError as err:
            raise self._os_error(err, "reading") from err
        self.last_read = len(data)
        return data

    def _read_now(self, n: int) -> bytes:
        """One pyserial read of up to ``n`` bytes (returns within the poll timeout)."""
        data = bytes(self._io(lambda s: s.read(n), "reading"))
        if data and self.record_raw:
            self._received += data
        return data

    def take_received(self) -> bytes:
        """Every byte read since the last call (answers, stale bytes, nodes), in order,
        while :attr:`record_raw` is True (a session's raw stream)."""
        data = bytes(self._received)
        self._received.clear()
        return data

    def _read_exact(self, size: int, what: str) -> bytes:
        """``size`` bytes within the read deadline (the library waits forever)."""
        deadline = time.monotonic() + self.read_timeout_s
        buf = bytearray()
        while len(buf) < size:
            buf += self._read_now(size - len(buf))
            if len(buf) < size and time.monotonic() >= deadline:
                raise DeviceSilent(
                    f"A1 {self.port} sent {len(buf)} of {size} bytes of {what} within "
                    f"{self.read_timeout_s:.2f} s. Is it powered, on this port and at "
                    f"{proto.BAUD} baud? A device that is still booting answers after "
                    "about 1 s.")
        return bytes(buf)

    # -- requests: reads with deadlines, real exceptions ------------------------------

    def _ask(self, request: bytes, what: str, length: int | None, single: bool, dtype: int) -> int:
        """Send ``request`` (stale bytes cleared first) and read its answer's descriptor,
        which must say answer mode ``single``, type ``dtype`` and ``length`` bytes (None:
        up to :data:`MAX_ANSWER_LEN`); returns that length. A wrong descriptor is asked
        again once (a scan request after :meth:`recover`).

        Raises:
            DeviceSilent: no descriptor within the deadline.
            DeviceProtocolError: not the expected descriptor, twice.
        """
        for attempt in (1, 2):
            if self.waiting():  # a scan left running, a boot banner: stop, discard
                discarded = self.stop(0.05)
                self.stale_bytes_discarded += discarded
                log.info("%s: discarded %d stale bytes before a request", self.port, discarded)
            if not single:
                self.start_motor()
            self._write(request, what)
            try:
                raw = self._read_exact(proto.DESCRIPTOR_LEN, f"a response descriptor to {what}")
                try:
                    got_len, mode, got_type = proto.parse_descriptor(raw)
                except ValueError as err:
                    raise DeviceProtocolError(
                        f"A1 {self.port} answered {raw.hex(' ')} instead of a descriptor "
                        "(A5 5A ...): stale scan bytes, a boot banner, or not an RPLIDAR at "
                        "this baud rate; recover() stops, clears and reconnects") from err
                got_single = mode == proto.MODE_SINGLE
                if (got_single, got_type) != (single, dtype) or not (got_len == length
                        or (length is None and got_len <= MAX_ANSWER_LEN)):
                    raise DeviceProtocolError(
                        f"A1 {self.port} answered {what} with length {got_len}, "
                        f"{'single' if got_single else 'multi'} mode, type 0x{got_type:02x} "
                        f"(expected {length or 'any'}, {'single' if single else 'multi'}, "
                        f"0x{dtype:02x}): is this an RPLIDAR?")
                return got_len
            except DeviceProtocolError as err:
                if attempt == 2:
                    raise
                if not single:
                    log.warning("%s; recovering", err)
                    self._emit("error", f"{err}; recovering (stop, clear input, reconnect)")
                    self.recover(restart=False)
        raise AssertionError("unreachable")

    def _request(self, request: bytes, what: str, length: int | None, dtype: int,
            parse: Callable[[bytes], _T], tries: int = 1) -> _T:
        """Send ``request`` and parse its single answer's payload (``length`` bytes, or up
        to :data:`MAX_ANSWER_LEN` when None); a malformed one (ValueError) is asked for
        again up to ``tries`` times in all, then raised as a DeviceProtocolError."""
        attempt = 1
        while True:
            size = self._ask(request, what, length, True, dtype)
            raw = self._read_exact(size, f"a {size}-byte response")
            try:
                return parse(raw)
            except ValueError as err:
                if attempt >= tries:
                    msg = f"A1 {self.port}: bad {what} answer {raw.hex(' ')}: {err}"
                    raise DeviceProtocolError(msg) from err
            attempt += 1

    def get_info(self) -> A1Info:
        """Model, firmware, hardware and serial number (raises instead of returning a string)."""
        return self._request(_cmd(proto.CMD_GET_INFO), "GET_INFO", proto.INFO_LEN,
            proto.TYPE_INFO, A1Info.from_payload)

    def get_health(self) -> A1Health:
        """Health status and error code (little-endian, unlike the library)."""
        return self._request(_cmd(proto.CMD_GET_HEALTH), "GET_HEALTH", proto.HEALTH_LEN,
            proto.TYPE_HEALTH, A1Health.from_payload)

    def get_sample_rate(self) -> A1SampleRate:
        """GET_SAMPLERATE: standard and express sample durations (µs; firmware >= 1.17)."""
        return self._request(_cmd(proto.CMD_GET_SAMPLERATE), "GET_SAMPLERATE",
            proto.SAMPLERATE_LEN, proto.TYPE_SAMPLE_RATE, A1SampleRate.from_payload)

    def get_conf(self, conf_type: int, mode_id: int | None = None) -> bytes:
        """GET_LIDAR_CONF (firmware >= 1.24): the value of ``conf_type`` (of scan mode
        ``mode_id`` where the entry is per mode)."""
        what = f"GET_LIDAR_CONF 0x{conf_type:02x}" + ("" if mode_id is None else f" mode {mode_id}")
        return self._request(proto.conf_request(conf_type, mode_id), what, None,
            proto.TYPE_GET_LIDAR_CONF, lambda raw: proto.conf_value(conf_type, raw), tries=2)

    def scan_mode(self, mode_id: int) -> proto.ScanMode:
        """One scan mode's name, sample duration, maximum distance and answer type, asked
        as the SDK does (firmware >= 1.24)."""

        def u32(conf: int) -> int:
            return int.from_bytes(self.get_conf(conf, mode_id)[:4], "little")

        name = self.get_conf(proto.CONF_SCAN_MODE_NAME, mode_id)
        return proto.ScanMode(mode_id, name.decode("ascii"),
            u32(proto.CONF_SCAN_MODE_US_PER_SAMPLE) / 256.0,
            float(u32(proto.CONF_SCAN_MODE_MAX_DISTANCE) >> 8),
            self.get_conf(proto.CONF_SCAN_MODE_ANS_TYPE, mode_id)[:1][0])

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
            msg = (f"{self.port} has no modem lines (a pty without an emulator's modem-line "
                "channel, or an adapter without DTR): the A1 motor cannot be switched here")
            log.info(msg)
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

    def stop(self, quiet_s: float = 0.02) -> int:
        """Send STOP, discard what still arrives until the line has been quiet for
        ``quiet_s`` (s) or the read deadline passes, clear input; returns the bytes read."""
        self._write(_cmd(proto.CMD_STOP), "STOP")
        self.scanning = False
        discarded = 0
        deadline = time.monotonic() + self.read_timeout_s
        while time.monotonic() < deadline and (chunk := self.read_available(quiet_s)):
            discarded += len(chunk)
        self.clean_input()
        return discarded

    def reset(self) -> str:
        """Reboot the core; waits for the boot banner (at most :data:`BOOT_TIMEOUT_S`) and
        returns it."""
        self._write(_cmd(proto.CMD_RESET), "RESET")
        self.scanning = False
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        text = b""
        while time.monotonic() < deadline:
            chunk = self.read_available(0.1 if text else 0.05)
            if text and not chunk:
                break
            text += chunk
        self.clean_input()
        banner = text.decode("ascii", "replace").strip()
        self._emit("note", f"reset; banner: {banner!r}" if banner else "reset; no banner")
        return banner

    def start(self, express_mode: int | None = None) -> None:
        """Start a standard scan, or with ``express_mode`` (a scan mode's id) an express one
        (84-byte capsules, firmware >= 1.17); no health check (:meth:`ensure_healthy`).
        DeviceSilent: no descriptor in time (a unit without express scan stays silent);
        DriverError: a descriptor that is not the scan's after one recovery."""
        if express_mode is None:
            self._ask(_cmd(proto.CMD_SCAN), "the standard scan request", proto.NODE_LEN,
                      False, proto.TYPE_SCAN)  # fmt: skip
        else:
            request = proto.express_request(express_mode)
            self._ask(request, "the express scan request", proto.CAPSULE_LEN, False,
                      proto.TYPE_EXPRESS)  # fmt: skip
        self.scanning = True
        self.express_mode = express_mode

    def ensure_healthy(self) -> A1Health:
        """Health check; on ``error`` reset once and check again (DriverError, with the
        code, if still in error)."""
        health = self.get_health()
        if health.status == "error":
            log.warning("%s: health error 0x%04x, resetting", self.port, health.error_code)
            self._emit("error", f"health error code 0x{health.error_code:04x}; resetting once")
            self.reset()
            health = self.get_health()
            if health.status == "error":
                raise DriverError(
                    f"A1 {self.port} reports a hardware error (code 0x{health.error_code:04x}) "
                    "even after a reset: power-cycle it; if it persists, the unit is faulty "
                    "or its supply too weak (start lidars one after another)")
        elif health.status == "warning":
            self._emit("note", f"health warning code 0x{health.error_code:04x}")
        return health

    def recover(self, restart: bool = True) -> None:
        """The known cure for descriptor errors: stop, clear input, reconnect (and restart
        the last scan started)."""
        with contextlib.suppress(DeviceUnplugged):
            self._write(_cmd(proto.CMD_STOP), "STOP")
        time.sleep(0.05)
        if self._serial is not None:
            self.clean_input()
        self.connect()
        if restart:
            self.start(self.express_mode)


def _cmd(cmd: int) -> bytes:
    """A request without payload: ``A5 cmd``."""
    return bytes([proto.SYNC, cmd])


RECONNECT_PROBE_S = 0.25  # deadline of the first request after a reopen (s)
PREAMBLE_MAX_BYTES = 1 << 20
"""Bytes kept from before a session (about 90 s of express scan) for its raw stream."""


class A1Scanner(DeviceProtocol):
    """A scan on one A1, as complete turns: the A1's protocol object on its serial link
    (made here), reading through the lidar's current port (:meth:`A1Lidar.recover` may
    reopen it). Use :meth:`open`, :meth:`start`, then :meth:`poll` in a loop.

    Args (times in s): ``read_timeout_s`` each request/answer; ``stale_after_s`` and
    ``restart_after_s`` silence while scanning before a ``stale`` event and before stop,
    clear, reconnect, restart; reopens back off as every link's (:class:`LinkConfig`),
    the first request after one waits :data:`RECONNECT_PROBE_S` (a unit still
    booting is retried). ``scan_mode``: ``typical`` or a mode's name, any case
    (docs/A1.md, Scan modes); :attr:`mode` is the mode that runs.
    """

    kind = "a1"
    wire = "rplidar"
    baud = proto.BAUD
    valid_item = "complete turn"
    backlog_limit = 3000  # bytes (rplidar-roboticia's max_buf_meas); counted, never flushed

    def __init__(self, port: str, read_timeout_s: float = 1.0, stale_after_s: float = 0.5,
            restart_after_s: float = 3.0, on_event: EventSink | None = None,
            scan_mode: str = "standard") -> None:
        self.scan_mode = scan_mode
        self.scan_mode_used = "standard"
        self.mode: proto.ScanMode | None = None
        self.modes: list[proto.ScanMode] = []
        self.mode_note = ""  # why the mode is not the one asked for, if it is not
        self.request_timeout_s = read_timeout_s
        self.attrs: dict[str, object] = {}
        self.lidar: A1Lidar | None = None
        self.info: A1Info | None = None
        self.health: A1Health | None = None
        self.sample_rate: A1SampleRate | None = None
        self.assembler = A1Turns("standard")
        self.turns_total = 0
        self.points_total = 0
        self.crc_turns = 0
        self._out: list[LidarTurns] | None = None  # turns completed by the current poll()
        self._skipped_reported = 0
        self._skip_unreported = False  # bytes skipped since the last crc_burst event
        self._preamble: list[tuple[int, bytes]] = []
        self._preamble_bytes = 0
        self._skip_reported_ns = 0
        self._scanning = False
        config = LinkConfig(read_timeout_s=POLL_S, first_valid_timeout_s=5.0,
            stale_after_s=stale_after_s, restart_after_s=restart_after_s)
        SerialLink("a1", port, self, config=config, on_event=on_event)

    # -- the synchronous API (bring-up, tests) ---------------------------------------

    def connect(self) -> None:
        """Open the port if it is not open (DeviceUnavailable if it cannot be); a first
        open asserts DTR (the motor stops)."""
        if not self.link.connected:
            self.link.attach(self._connect())

    def park(self) -> None:
        """Hold the unit still with its port open: scan and motor stopped (DTR set); the only
        way to keep an A1's motor stopped, as releasing the port (:meth:`close`) starts it;
        DriverError if the port cannot be opened or went away."""
        self.connect()
        lidar = self._lidar()
        if self._scanning or lidar.scanning:
            lidar.stop()
        self._scanning = False
        lidar.stop_motor()

    @property
    def motor_running(self) -> bool:
        """True while this driver holds the motor spinning (DTR cleared on an open port),
        False while it holds it stopped; a closed port spins it whatever this says."""
        return bool(self.lidar is not None and self.lidar.motor_running)

    def open(self, check_health: bool = True) -> A1Info:
        """Connect, read GET_INFO and (by default) check health, resetting once on error;
        DriverError when it cannot open, is silent, not an A1, or in error after a reset."""
        self.connect()
        return self._identify(check_health)

    def check_health(self) -> A1Health:
        """GET_HEALTH; on ``error`` reset once and ask again (DriverError if still error)."""
        self.health = self._lidar().ensure_healthy()
        return self.health

    def start(self) -> None:
        """Start the scan of ``scan_mode`` (motor through DTR where the port has it)."""
        if self.lidar is None or not self.link.connected:
            raise DriverError(f"A1 {self.link.port}: open() before start()")
        self._start_scan()
        self.link.attach(self.lidar)

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
        """Stop the scan (best effort) and release the port: the motor spins from then on
        (docs/A1.md, Motor); to keep it stopped, keep the port (:meth:`park`)."""
        if self.lidar is None:
            return
        self.link.close()
        self.lidar.close()
        self._scanning = False

    # -- protocol hooks ---------------------------------------------------------------

    def open_port(self, reopen: bool) -> A1Lidar:
        """Open the port through :class:`A1Lidar`, identify the unit, check its health and
        start the scan; after a reopen with a short deadline, the next turn flagged
        ``AFTER_RECONNECT``. A reopen that finds another unit (serial) on the port raises
        DriverError: its turns would be recorded as this lidar's, placed by its mount."""
        lidar = self._connect()
        try:
            if reopen:
                lidar.read_timeout_s = min(self.request_timeout_s, RECONNECT_PROBE_S)
                try:
                    info = lidar.get_info()
                finally:
                    lidar.read_timeout_s = self.request_timeout_s
                if self.info is not None and info.serial != self.info.serial:
                    raise DriverError(f"A1 {self.link.port}: serial {info.serial} answers "
                        f"after the unplug, not {self.info.serial}: another unit (front and "
                        "rear swapped?); plug this lidar back into its own port")
                self.info = info
                self.health = lidar.ensure_healthy()
            else:
                self._identify(check_health=True)
            self._start_scan()
        except BaseException:
            lidar.close()
            raise
        if reopen:
            self.assembler.mark(TurnFlag.AFTER_RECONNECT)
        return lidar

    def consume(self, t_ns: int, data: bytes) -> int:
        """Decode the scan bytes at the end of ``data`` into turns; returns the complete
        valid turns."""
        if self.link.writer is None and self._preamble_bytes < PREAMBLE_MAX_BYTES:
            self._preamble.append((t_ns, data))  # read before a session: kept for it
            self._preamble_bytes += len(data)
        lidar = self._lidar()
        n, lidar.last_read = lidar.last_read, 0
        asm = self.assembler
        done = 0
        if n:
            turns = asm.feed(t_ns, data if n == len(data) else data[len(data) - n :])
            done = self._emit_turns(turns) if turns.n_turns else 0
            self._skip_unreported = self._skip_unreported or asm.last_skipped > 0
        if self._skip_unreported and t_ns - self._skip_reported_ns >= 1_000_000_000:
            unreported = asm.bytes_skipped - self._skipped_reported
            self.link.event(t_ns, "crc_burst",
                f"{unreported} bytes skipped re-aligning "
                f"{'capsules' if self.scan_mode_used == 'express' else 'nodes'} (corruption or "
                f"loss on the link) since the last report; {asm.bytes_skipped} in all")
            self._skipped_reported = asm.bytes_skipped
            self._skip_reported_ns = t_ns
            self._skip_unreported = False
        return done

    def take_preamble(self) -> list[tuple[int, bytes]]:
        """The chunks read before a session's writer was attached, so that the session's
        raw stream starts with the scan's descriptor and ``decode a1`` reproduces its turns."""
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
        """A new scan (start, restart, reconnect): no node tail, no turn in progress, no
        device-clock anchor."""
        rate = self.sample_rate
        mode = self.scan_mode_used
        self.assembler.reset(mode=mode, sample_us=0 if rate is None else rate.sample_us(mode))

    def restart(self) -> None:
        """Stop, clear input, reconnect, check health, restart the scan (the cure for a
        stalled unit): a unit browned out into health error (protection stop) ignores SCAN
        until a RESET, which the health check sends. Once the new scan runs, the turn the
        stall cut is emitted (``PACKET_LOSS``), as at an unplug; until then nodes that
        still come continue it."""
        lidar = self._lidar()
        lidar.recover(restart=False)
        self.health = lidar.ensure_healthy()
        lidar.start(lidar.express_mode)
        self._emit_turns(self.assembler.flush())
        self.reset()

    def start_note(self) -> str | None:
        """Model, firmware, hardware and serial of the unit, for the ``start`` event."""
        info = self.info
        if info is None:
            return None
        return (f"A1 model {info.model} firmware {info.firmware[0]}.{info.firmware[1]:02d} "
            f"hardware {info.hardware} serial {info.serial} on {self.link.port}"
            + (f"; scan mode {self.mode.describe()}" if self.mode is not None else ""))

    def reopen_note(self) -> str:
        """The serial of the unit that answered, for the ``reconnect`` event."""
        serial_no = self.info.serial if self.info is not None else "?"
        return f"reopened {self.link.port} (serial {serial_no}); scanning"

    def diagnose(self) -> str:
        """Bytes and nodes since opening, with the likely cause."""
        return (f"{self.link.bytes_since_open} bytes, {self.assembler.nodes_total} nodes: is "
            "the motor spinning (DTR) and the supply strong enough?")

    def counters(self) -> tuple[int, int, int, int]:
        """(turns with skipped bytes, nodes lost re-aligning, points, turns) since start."""
        return (self.crc_turns, self.assembler.samples_estimated_lost, self.points_total,
                self.turns_total)  # fmt: skip

    def final_note(self) -> str:
        """Nodes decoded and what was skipped, recorded at stop."""
        asm = self.assembler
        return (f"decoded {asm.nodes_total} nodes ({self.scan_mode_used} scan); skipped: "
            f"bytes_skipped={asm.bytes_skipped} "
            f"nodes_dropped={asm.nodes_dropped} (angle >= 360 deg); "
            f"ranges_beyond_limit={asm.ranges_beyond_limit} (stored as nan)")

    def declare_streams(self, writer: SessionWriter) -> None:
        """Add ``lidar/<name>``: the unit's identity where known, and how it is timed."""
        info, mode, used = self.info, self.scan_mode_used, self.mode
        device = {} if info is None else {"serial": info.serial,
            "firmware": f"{info.firmware[0]}.{info.firmware[1]:02d}", "hardware": info.hardware,
            "model_id": info.model, "device_time": describe_clock(self.sample_rate, mode)}
        express = " (express: 47 for a return, 0 for none; capsules carry no quality)"
        writer.add_lidar(self.link.name,
            attrs={"model": "A1", "port_path": self.link.port,
                "intensity": "quality 0..63" + (express if mode == "express" else ""),
                "scan_mode": used.name if used is not None else mode,
                "scan_mode_id": used.id if used is not None else -1,
                "scan_modes": "; ".join(m.describe() for m in self.modes), "scan_format": mode,
                "scan_mode_note": self.mode_note,
                "device_time": f"sample index x {mode} sample duration (GET_SAMPLERATE) where "
                "the unit reports it (turns with device_ns), else none",
                "time_base": "host monotonic_ns at receive, spread over each read's nodes",
                "native_units": "angle q6 degrees clockwise, distance q2 mm (converted once)",
                **device, **self.attrs})

    # -- internals ------------------------------------------------------------------

    def _lidar(self) -> A1Lidar:
        if self.lidar is None:
            raise DriverError(f"A1 {self.link.port}: open() first")
        return self.lidar

    def _connect(self) -> A1Lidar:
        """Open the port through the lidar (creating it on the first open); the link reads
        through it."""
        if self.lidar is None:
            self.lidar = A1Lidar(self.link.port, self.request_timeout_s, on_event=self.link.event)
            self.lidar.record_raw = True
        else:
            self.lidar.connect()
        return self.lidar

    def _identify(self, check_health: bool) -> A1Info:
        """STOP and drain what a previous host left scanning (no byte says so while the
        head stands), then GET_INFO, the sample durations where the firmware has them
        (device-side turn timing, asked once) and (optionally) health."""
        lidar = self._lidar()
        lidar.stop()
        self.info = info = lidar.get_info()
        if self.sample_rate is None and info.firmware >= proto.SAMPLERATE_MIN_FIRMWARE:
            try:
                self.sample_rate = lidar.get_sample_rate()
            except DeviceUnplugged:
                raise
            except DriverError as err:
                self.link.event(time.monotonic_ns(), "note",
                    f"no sample duration ({err}); turn times from the host clock")
        if check_health:
            self.check_health()
        return info

    def _start_scan(self) -> None:
        """The scan from a clean state (no tail, no turn, no clock anchor) in the mode
        chosen once per scanner (:meth:`_choose_mode`)."""
        lidar = self._lidar()
        if self.mode is None:
            self.mode = self._choose_mode()
        mode = self.mode
        fmt = mode.format or "standard"
        lidar.start(None if fmt == "standard" else mode.id if self._has_conf() else 0)
        self.scan_mode_used = fmt
        self.mode_label = mode.name
        self._scanning = True
        self.reset()

    def _has_conf(self) -> bool:
        """True for firmware with the configuration commands (GET_LIDAR_CONF, >= 1.24)."""
        return self.info is not None and self.info.firmware >= proto.CONF_MIN_FIRMWARE

    def _choose_mode(self) -> proto.ScanMode:
        """The scan mode to run: ``scan_mode`` among the unit's modes (asked with
        GET_LIDAR_CONF on firmware >= 1.24, the SDK's legacy list below it); DriverError,
        listing the unit's modes, for a name it does not offer or an answer not decoded."""
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
                    "(GET_LIDAR_CONF, firmware >= 1.24): scanning Standard")
        else:
            chosen = next((m for m in self.modes if m.name.lower() == want), None)
        if chosen is None or chosen.format is None:
            offered = "; ".join(m.describe() for m in self.modes)
            why = "is not offered" if chosen is None else "answers a format not decoded here"
            raise DriverError(f"A1 {self.link.port}: scan mode {self.scan_mode!r} {why} (firmware "
                f"{firmware[0]}.{firmware[1]:02d}; modes: {offered}); set scan_mode to "
                "'typical' or to a Standard or Express mode's name")
        return chosen

    def _note(self, text: str) -> None:
        """A ``note`` event and the stream's ``scan_mode_note`` (the bring-up has no session)."""
        self.mode_note = text
        self.link.event(time.monotonic_ns(), "note", f"{self.link.port}: {text}")

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
        self.turns_total += turns.n_turns
        self.points_total += turns.n_points
        self.crc_turns += int(((turns.flags & TurnFlag.CRC_ERRORS) > 0).sum())
        return int(((turns.flags & TurnFlag.PACKET_LOSS) == 0).sum())


READER_POLL_S = 0.05
"""Longest wait of one step of the reader thread (s)."""


def a1_reader(name: str, port: str, attrs: dict[str, Any] | None = None,
        scanner: A1Scanner | None = None, read_timeout_s: float = 1.0,
        first_turn_timeout_s: float | None = 5.0, scan_mode: str = "standard") -> SerialReader:
    """The reader of device ``name`` (an A1) in a capture session (its protocol:
    ``reader.protocol``; its session: :meth:`SerialReader.declare`) with extra lidar stream
    ``attrs``. ``scanner``: an already started scanner to take over (from the sequencer),
    else one made from ``port``, ``read_timeout_s`` and ``scan_mode`` as :class:`A1Scanner`
    takes them. ``first_turn_timeout_s``: deadline of the first complete turn in ``start``
    (s; None: no check)."""
    warm_up()
    scanner = scanner or A1Scanner(str(port), read_timeout_s=read_timeout_s, scan_mode=scan_mode)
    link = scanner.link
    link.name = name
    link.first_valid_timeout_s = first_turn_timeout_s
    scanner.attrs = dict(attrs or {})
    return SerialReader(link, READER_POLL_S)
