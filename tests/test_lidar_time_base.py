"""Every timing figure names its time base as it is: the device clock, a nominal rate
(invented times), header stamps, or host receive times, and only the last has a host
clock to call reliable or not."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from sensorbench.characterize.lidar.stats import characterize_turns
from sensorbench.cli import cli
from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_turns import decode_capture
from sensorbench.sim.a1_samples import REAL_NODES_PER_TURN, REAL_SAMPLE_US, RoomSamples
from sensorbench.sim.emulator_a1 import encode_nodes

SAMPLE_RATE = (
    proto.SAMPLERATE_DESCRIPTOR + (508).to_bytes(2, "little") + (254).to_bytes(2, "little")
)


def _a1_capture(with_sample_rate: bool) -> bytes:
    """A bare standard-scan capture of the emulator's room: descriptor and nodes, with or
    without the unit's GET_SAMPLERATE answer before them."""
    s = RoomSamples.generate(duration_s=6.0, seed=3)
    nodes = encode_nodes(
        np.r_[True, np.diff(s.turn) != 0],
        s.intensity,
        np.round(s.angle_deg_cw * 64).astype(np.int64) % 23040,
        np.round(s.range_m * 4000).astype(np.int64),
    )
    return (SAMPLE_RATE if with_sample_rate else b"") + proto.SCAN_DESCRIPTOR + nodes


def _timing(tmp_path, raw: bytes) -> dict:
    """``characterize lidar --timing-only`` of ``decode a1`` of ``raw``: its timing."""
    src, out = tmp_path / "a1.bin", tmp_path / "a1.h5"
    src.write_bytes(raw)
    r = CliRunner().invoke(cli, ["decode", "a1", str(src), "-o", str(out), "--force"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(
        cli, ["characterize", "lidar", str(out), "--device", "a1", "--timing-only", "--json"]
    )
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["timing"]


def test_a_bare_a1_capture_with_its_sample_duration_is_timed_on_the_device_clock(tmp_path):
    t = _timing(tmp_path, _a1_capture(True))
    assert t["clock"] == "device" and "508 us" in t["clock_source"]
    # 317 nodes of 508 us: 6.21 Hz, not the 6.31 a nominal 2000 nodes/s gives
    assert abs(t["rate_hz"] - 1e6 / (REAL_SAMPLE_US * REAL_NODES_PER_TURN)) < 1e-3
    assert t["host_rate_hz"] is None and not t["host_timing_reliable"]
    assert t["host_timing_note"].startswith("no host receive times")


def test_a_bare_a1_capture_without_it_is_said_to_have_invented_times(tmp_path):
    t = _timing(tmp_path, _a1_capture(False))
    assert t["clock"] == "nominal" and "invented" in t["clock_source"]
    assert abs(t["rate_hz"] - 2000.0 / REAL_NODES_PER_TURN) < 1e-3  # what the nominal rate says
    assert not t["host_timing_reliable"] and "nominal" in t["host_timing_note"]
    table = CliRunner().invoke(
        cli, ["characterize", "lidar", str(tmp_path / "a1.h5"), "--device", "a1", "--timing-only"]
    )
    assert "Host clock" in table.stdout and "none (no host receive times" in table.stdout
    assert "reliable" not in table.stdout.split("Host clock", 1)[1].splitlines()[0]


def test_header_stamps_are_not_host_receive_times():
    turns = decode_capture(_a1_capture(False)).turns  # no device time
    ch = characterize_turns(
        turns, model="ROS LaserScan", timing_only=True, time_base="ROS header stamps (ns)"
    )
    t = ch.timing
    assert t.clock == "stamps" and t.clock_source == "header stamps"
    assert not t.host_timing_reliable and "header stamps" in t.host_timing_note
    live = characterize_turns(turns, model="A1", timing_only=True)  # no attribute: receive times
    assert live.timing.clock == "host" and live.timing.clock_source == "host receive time"
