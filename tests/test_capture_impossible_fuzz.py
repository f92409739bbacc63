"""Fuzzing the capture path: an emulated LD19 on a pty sends, for more than 60 s of
emulated time, packets with a good CRC and an impossible field (timestamp >= 30000,
speed, angle, span) among random byte corruption and loss, ranges beyond the
datasheet's 12 m, and ``sensorbench capture`` (``run_capture``, the real reader)
records it.

What must hold: the reader never stops (no failure, no gap in the turns, the capture
is ok); no impossible value reaches the session (angles in [0, 2π), ranges finite and
at most 12 m, or inf for no return, or nan for beyond the limit; time strictly
increasing; speeds possible); the counts match the injected faults exactly: every
impossible packet the emulator sent whose bytes arrived intact is counted by its
field, nothing else is, and CRC failures equal those of the independent reference
parser over the bytes the session recorded.
"""

from __future__ import annotations

import re

import numpy as np
from capture_util import damaged
from ld19_util import ref_decode

from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.drivers.ld19_parser import MAX_SPEED_DEG_S, PACKET_SIZE
from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.drivers.serial_link import LinkConfig
from sensorbench.logs import Session
from sensorbench.sim.emulator_ld19 import (
    IMPOSSIBLE_FIELDS,
    LD19Emulator,
    LD19Quirks,
    SyntheticLD19Samples,
    encode_packets,
)
from sensorbench.sim.pty import Faults

SPEED = 10.0  # emulated seconds per host second
RECORD_S = 6.5  # host seconds of recording: 65 s of emulated time

CONFIG = """
[robot]
name = "fuzz"
footprint_m = [[-0.2, -0.2], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]]

[powerup]
order = ["ld19"]
gap_s = 0.0
timeout_s = 10.0

[[devices]]
name = "ld19"
kind = "ld19"
port = "{port}"
baud = 230400
mount = {{x_m = 0.1, y_m = 0.0, yaw_deg = 0.0}}
"""


def _note_counts(session: Session) -> dict[str, int]:
    """The reader's final note: ``name=count`` pairs of what it skipped."""
    notes = [e.message for e in session.events() if e.source == "ld19" and e.kind == "note"]
    final = [m for m in notes if m.startswith("decoded ")]
    assert len(final) == 1, notes
    counts = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", final[0])}
    counts["decoded"] = int(re.match(r"decoded (\d+) packets", final[0]).group(1))
    return counts


def test_capture_survives_impossible_packets_and_corruption(tmp_path):
    # a large room, so that part of each turn lies beyond the 12 m limit
    samples = SyntheticLD19Samples.generate(
        duration_s=20.0, width=30.0, depth=30.0, x=5.0, y=5.0, seed=7
    )
    faults = Faults(corrupt_rate=2e-4, drop_rate=2e-5)
    port = tmp_path / "ld19"
    (tmp_path / "robot.toml").write_text(CONFIG.format(port=port))
    config = load_robot_config(tmp_path / "robot.toml")
    out = tmp_path / "fuzz.h5"
    with LD19Emulator(
        samples,
        link=str(port),
        speed=SPEED,
        startup_s=0.2,
        faults=faults,
        quirks=LD19Quirks(impossible_rate=0.01),
        seed=7,
    ) as emu:
        result = run_capture(config, out, RECORD_S, CaptureOptions(speed=SPEED))
        truth = emu.truth()
        stats = emu.port.stats

    # the reader never stopped: recorded to the end without a failure
    assert result.ok and result.stopped_by == "duration", result
    (dev,) = result.devices
    assert dev.reader_failures == 0 and not dev.reader_down and dev.unplugs == 0
    with Session(out) as s:
        lidar = s.lidar("ld19").read()
        raw = s.raw("ld19").read_bytes()
        kinds = [e.kind for e in s.events() if e.source == "ld19"]
        counts = _note_counts(s)
        run = {e.kind: e.t_ns for e in s.events() if e.source == "capture"}
    assert "error" not in kinds and "unplug" not in kinds
    # turns from the recording's start to its duration's end, but for one stale period at
    # each end: 65 emulated s on an idle host (RECORD_S at SPEED); on a busy one the
    # recording's own span (turns spanned 5.5 of its 6.5 host s at three busy loops). At
    # the end, up to the last packet the emulator put on the line before the duration was
    # over (beside a second copy of the suite the last turn began 0.52 s before that end:
    # the emulator shares this process and its interpreter lock), and the reader takes
    # what arrived before its stop however late it ran
    stale_ns = LinkConfig().stale_after_s * 1e9
    sent_ns = truth.host_ns[truth.offered]
    first_sent_ns = sent_ns[sent_ns >= run["start"]].min()  # the start: the same, its way
    assert lidar.t_first_ns[0] - first_sent_ns < stale_ns
    last_sent_ns = sent_ns[sent_ns < run["start"] + RECORD_S * 1e9].max()
    assert last_sent_ns - lidar.t_first_ns[-1] < stale_ns  # duration's end
    # turns all along: no gap as long as the link's own stale threshold (host time; at
    # 10x a busy host's 55 ms pause is 5 emulated turns, and is no stop of the reader)
    assert np.diff(lidar.t_first_ns).max() / 1e9 < LinkConfig().stale_after_s

    # no impossible value reached the session
    assert np.all((lidar.angle >= 0) & (lidar.angle < 2 * np.pi))
    finite = np.isfinite(lidar.range)
    assert np.all(lidar.range[finite] <= 12.0) and np.all(lidar.range[finite] > 0)
    beyond = np.isnan(lidar.range)
    assert beyond.sum() == counts["ranges_beyond_limit"] > 1000
    assert np.all(np.diff(lidar.t_ns) > 0)  # per-point time strictly increasing
    assert np.all(np.diff(lidar.device_ns) > 0)
    assert np.all((lidar.speed_hz > 0) & (lidar.speed_hz <= MAX_SPEED_DEG_S / 360))

    # the counts match the injected faults: every impossible packet the emulator
    # offered whose 47 bytes arrived intact and in the recorded raw stream ...
    bad = truth.select((truth.impossible > 0) & truth.offered)
    lost = stats.corrupted_offsets + stats.dropped_offsets
    intact = ~damaged(bad.offset, PACKET_SIZE, bad.offered, lost)
    wire = encode_packets(
        bad.speed, bad.start, bad.end, bad.distance_mm, bad.intensity, bad.timestamp
    )
    recorded = np.array(
        [raw.find(wire[i * PACKET_SIZE : (i + 1) * PACKET_SIZE]) >= 0 for i in range(len(bad))],
        dtype=bool,
    )
    seen = intact & recorded
    assert recorded[~intact].sum() == 0  # a damaged packet is not found intact
    expected = {
        name: int(np.count_nonzero(seen & (bad.impossible == code)))
        for code, name in IMPOSSIBLE_FIELDS.items()
    }
    assert min(expected.values()) >= 20  # every kind of fault was exercised
    # ... is counted by its field, and nothing else is
    assert counts["timestamp_failures"] == expected["timestamp"]
    assert counts["speed_failures"] == expected["speed"]
    assert counts["span_failures"] == expected["angle"] + expected["span"]
    assert counts["packets_rejected"] == 0  # the assembler never saw one
    # the corruption: the same counts as the independent reference parser over the
    # recorded bytes, which skips exactly the injected impossible packets
    ref = ref_decode(raw)
    assert counts["crc_failures"] == ref.crc_failures > 0
    assert len(ref.rejected) == int(seen.sum())
    assert counts["decoded"] == len(ref.packets)
