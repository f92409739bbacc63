"""Active probing against the byte-exact emulators on real pseudo-terminals.

Each emulator knows what it is; the probe must say the same, must not write to
the one-way devices, and must give up on a silent port within its deadlines.
"""

from __future__ import annotations

import time
import types

import numpy as np
import pytest
import serial
from ld19_util import MANUAL_PACKET_10HZ
from timing_util import SLACK_S

from sensorbench.drivers import a1_protocol
from sensorbench.drivers.a1_kind import STOP_SETTLE_S as A1_STOP_SETTLE_S
from sensorbench.drivers.a1_kind import check_info as check_a1_info
from sensorbench.drivers.ld19_kind import check_packets as check_ld19
from sensorbench.errors import UdevError
from sensorbench.sim.emulator_a1 import A1Emulator, A1Unit
from sensorbench.sim.emulator_ld19 import LD19Emulator
from sensorbench.sim.emulator_pods import PodEmulator
from sensorbench.sim.pty import PtyPort
from sensorbench.udev.probe import probe_port

LISTEN_S = 0.3
A1_TIMEOUT_S = 0.4
# Worst case of a probe that finds nothing: two listens, the STOP settle time and
# the A1 answer deadline plus its 50 ms second look, plus scheduling slack.
SILENT_BOUND_S = 2 * LISTEN_S + A1_STOP_SETTLE_S + A1_TIMEOUT_S + 0.05 + SLACK_S


def pod_samples(n: int = 3000, dt: float = 0.01) -> types.SimpleNamespace:
    t = np.arange(n) * dt
    counts = np.cumsum(np.ones((n, 3), np.int64) * [3, -2, 5], axis=0)
    return types.SimpleNamespace(t_s=t, mcu_time_us=(t * 1e6).astype(np.int64), counts=counts)


def test_ld19_check_accepts_the_manual_packet_and_rejects_a_corrupt_one():
    # the manual's packet at 10 Hz (as printed, at 2152 deg/s, the SDK's span rule drops it)
    info = check_ld19(MANUAL_PACKET_10HZ * 3)
    assert info == {"packets": 3, "crc_failures": 0, "speed_hz": 10.0}
    corrupt = bytearray(MANUAL_PACKET_10HZ * 3)
    corrupt[47 + 10] ^= 0x01  # one bit in the second packet's payload
    assert check_ld19(bytes(corrupt)) is None  # only 2 valid packets left


def test_a1_info_check_needs_the_info_descriptor_and_20_bytes():
    payload = bytes([0x18, 29, 1, 7]) + bytes(range(16))
    info = check_a1_info(b"\x00junk" + a1_protocol.INFO_DESCRIPTOR + payload)
    assert info == {
        "model": 0x18,
        "firmware": "1.29",
        "hardware": 7,
        "serial": bytes(range(16)).hex().upper(),
    }
    assert check_a1_info(a1_protocol.INFO_DESCRIPTOR + payload[:-1]) is None
    assert check_a1_info(a1_protocol.HEALTH_DESCRIPTOR + payload) is None


def test_probe_finds_an_ld19_without_writing_to_it():
    with LD19Emulator(startup_s=0.0) as emu:
        result = probe_port(emu.path, listen_s=LISTEN_S, a1_timeout_s=A1_TIMEOUT_S)
        assert result.kind == "ld19", result
        assert result.info["packets"] >= 3
        assert result.elapsed_s < LISTEN_S + SLACK_S  # listened, then stopped
        assert emu.port.recv(0.05) == b""  # the probe sent nothing


@pytest.mark.parametrize("variant", ["binary", "csv"])
def test_probe_finds_the_pod_mcu_without_writing_to_it(variant):
    with PodEmulator(pod_samples(), variant=variant).start() as emu:
        result = probe_port(emu.port.path, listen_s=LISTEN_S, a1_timeout_s=A1_TIMEOUT_S)
        assert result.kind == "pods", result
        assert result.info["variant"] == variant
        assert emu.port.recv(0.05) == b""


def test_probe_finds_an_a1_and_reads_its_serial():
    serial_hex = "00112233445566778899AABBCCDDEEFF"
    with A1Emulator(unit=A1Unit(serial=serial_hex)) as emu:
        result = probe_port(emu.path, listen_s=LISTEN_S, a1_timeout_s=A1_TIMEOUT_S)
        assert result.kind == "a1", result
        assert result.info["serial"] == serial_hex
        assert result.info["firmware"] == "1.29"
        # Only the A1 probe writes: STOP, then GET_INFO.
        assert emu.requests == [a1_protocol.CMD_STOP, a1_protocol.CMD_GET_INFO]


def test_a_silent_port_is_unknown_within_the_deadlines():
    port = PtyPort()
    try:
        t0 = time.monotonic()
        result = probe_port(port.path, listen_s=LISTEN_S, a1_timeout_s=A1_TIMEOUT_S)
        elapsed = time.monotonic() - t0
        assert result.kind == "unknown"
        assert 2 * LISTEN_S + A1_TIMEOUT_S <= elapsed < SILENT_BOUND_S
        # The A1 probe was the only writer.
        assert port.recv(0.2) == bytes([0xA5, 0x25, 0xA5, 0x50])
    finally:
        port.close()


def test_a_port_held_by_a_capture_is_busy_and_a_missing_one_is_an_error(tmp_path):
    port = PtyPort()
    try:
        with serial.Serial(port.path, exclusive=True):
            result = probe_port(port.path, listen_s=LISTEN_S)
        assert result.kind == "busy"
    finally:
        port.close()
    result = probe_port(str(tmp_path / "ttyUSB9"), listen_s=LISTEN_S)
    assert result.kind == "error" and "cannot open" in result.detail


def test_unknown_probe_kind_is_refused():
    with pytest.raises(UdevError, match="unknown probe kind"):
        probe_port("/dev/null", kinds=("ld19", "gps"))


def test_probe_stops_a_scanning_a1_before_asking_for_its_info():
    with A1Emulator(unit=A1Unit(spinup_s=0.0)) as emu:
        with serial.Serial(emu.path, a1_protocol.BAUD, timeout=0.5) as host:
            host.write(bytes([a1_protocol.SYNC, a1_protocol.CMD_SCAN]))
            first = host.read(a1_protocol.DESCRIPTOR_LEN + 50)
        assert first.startswith(a1_protocol.SCAN_DESCRIPTOR)  # it is streaming nodes
        result = probe_port(emu.path, listen_s=LISTEN_S, a1_timeout_s=A1_TIMEOUT_S)
        assert result.kind == "a1", result
        assert emu.requests[-2:] == [a1_protocol.CMD_STOP, a1_protocol.CMD_GET_INFO]
