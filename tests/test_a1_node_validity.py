"""A1 node validity: a node at 360.00 deg (q6 23040, sent by real units now and then)
or with a range beyond the datasheet's 12 m is dropped / made invalid and counted, not
a reason to call its turn corrupt; bring-up accepts such a device."""

from __future__ import annotations

import json

import numpy as np
from a1_util import decode_nodes
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.drivers import a1_protocol as proto
from sensorbench.drivers.a1_turns import A1Turns, decode_capture
from sensorbench.drivers.powerup import DeviceSpec, PowerUpSequencer
from sensorbench.logs import TurnFlag
from sensorbench.sim.a1_samples import RoomSamples
from sensorbench.sim.emulator_a1 import A1Emulator, encode_nodes

SPEED = 4.0


def _turns(n_turns: int = 4, per_turn: int = 360) -> dict[str, np.ndarray]:
    """Node fields of ``n_turns`` turns of ``per_turn`` evenly spaced nodes, 2 m."""
    n = n_turns * per_turn
    angle = np.tile(np.arange(per_turn) * (360 * 64 // per_turn), n_turns)
    return {
        "start": (np.arange(n) % per_turn) == 0,
        "quality": np.full(n, 15),
        "angle_q6": angle,
        "dist_q2": np.full(n, 8000),
    }


def _encode(f: dict[str, np.ndarray]) -> bytes:
    return encode_nodes(f["start"], f["quality"], f["angle_q6"], f["dist_q2"])


def test_a_node_at_360_deg_is_dropped_and_counted_not_a_corrupt_turn():
    f = _turns()
    f["angle_q6"][360 + 359] = 23040  # the last node of turn 1 reads 360.00 deg
    f["angle_q6"][720] = 23040  # the first node of turn 2 (the start flag) too
    f["dist_q2"][1080 + 10] = 12 * 4000 + 1  # 12.00025 m in turn 3
    f["dist_q2"][1080 + 11] = 16 * 4000  # 16 m
    data = _encode(f)
    nodes, consumed, skipped = decode_nodes(data)
    assert skipped == 0 and consumed == len(data) and len(nodes) == 4 * 360  # framed
    asm = A1Turns(sample_us=500)
    turns = asm.feed(0, data)
    turns = type(turns).concat([turns, asm.flush()])
    assert asm.nodes_dropped == 2 and asm.ranges_beyond_limit == 2
    # turns 0..2 complete (the start flag of the dropped node passed to the next one),
    # turn 3 cut by the flush; none is flagged corrupt
    assert turns.count.tolist() == [360, 359, 359, 360]
    assert not np.any(turns.flags[:3] & TurnFlag.CRC_ERRORS)
    assert np.all((turns.angle >= 0) & (turns.angle < 2 * np.pi))
    assert int(np.isnan(turns.range).sum()) == 2
    assert np.nanmax(turns.range) <= 12.0


def test_decode_a1_reports_the_dropped_nodes_with_their_offsets(tmp_path):
    f = _turns()
    f["angle_q6"][100] = 23040
    f["angle_q6"][500] = 23040 + 64 * 5  # 365 deg
    raw = tmp_path / "a1.bin"
    raw.write_bytes(proto.SCAN_DESCRIPTOR + _encode(f))
    res = decode_capture(raw.read_bytes())
    assert res.decoder.bytes_skipped == 0
    assert res.decoder.dropped_offsets == [7 + 5 * 100, 7 + 5 * 500]
    out = CliRunner().invoke(
        cli, ["decode", "a1", str(raw), "-o", str(tmp_path / "d.h5"), "--json"]
    )
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert summary["nodes_dropped"] == 2
    assert summary["nodes_dropped_offsets"] == [507, 2507]
    assert summary["bytes_skipped"] == 0


def test_bringup_accepts_an_a1_that_sends_360_deg_in_every_turn():
    """Through the emulator on a pty: the last node of every turn reads 360.00 deg (the
    real A1M8 capture pattern); bring-up is ready, and those nodes are dropped."""
    s = RoomSamples.generate(duration_s=20.0, seed=3)
    last = np.flatnonzero(np.diff(s.turn) != 0)  # the last sample of each turn
    s.angle_deg_cw[last] = 360.0
    with A1Emulator(s, speed=SPEED) as emu:
        spec = DeviceSpec(
            "lidar_front",
            "a1",
            emu.path,
            read_timeout_s=0.5,
            ready_timeout_s=3,
            options={"scan_mode": "standard"},  # 360.00 deg is a standard-scan node
        )
        seq = PowerUpSequencer([spec], retries=0)
        (r,) = seq.run(keep=True)
        try:
            assert r.ready, r.why
            scanner = seq.handles["lidar_front"]
            got = []
            while len(got) < 6:
                got.append(scanner.poll(0.1)[2])
            turns = type(got[0]).concat(got)
        finally:
            seq.close()
    assert turns.n_turns >= 1
    assert scanner.assembler.bytes_skipped == 0
    assert not np.any(turns.flags & TurnFlag.CRC_ERRORS)
    assert scanner.assembler.nodes_dropped >= turns.n_turns


def test_ranges_beyond_12_m_from_the_emulator_are_nan():
    """A 40 m hall seen by the emulated A1 (beams up to 20 m): stored as nan, counted."""
    s = RoomSamples.generate(
        duration_s=10.0, width=40.0, depth=40.0, x=8.0, y=8.0, max_range_m=20.0, seed=5
    )
    data = encode_nodes(
        np.r_[True, np.diff(s.turn) != 0],
        s.intensity,
        np.round(s.angle_deg_cw * 64).astype(np.int64) % 23040,
        np.round(s.range_m * 4000).astype(np.int64),
    )
    res = decode_capture(data, require_descriptor=False)
    far = s.range_m > 12.0 + 1 / 8000  # beyond the limit after rounding to 1/4 mm
    assert res.decoder.ranges_beyond_limit > 100
    r = res.turns.range
    assert np.all(r[np.isfinite(r)] <= 12.0)
    assert int(np.isnan(r).sum()) == res.decoder.ranges_beyond_limit
    # every node in a stored turn: those beyond 12 m in the samples are the nan ones
    assert res.decoder.ranges_beyond_limit <= int(far.sum())
