"""End to end: the emulated robot (LD19, two A1s, pod MCU) on ptys, captured into one
file, compared with what the emulators sent: every point, every turn, every pod count.
"""

from __future__ import annotations

import time

import capture_util as cu
import numpy as np
import pytest

from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.logs import Session
from sensorbench.logs.check import check_session
from sensorbench.sim.emulated_robot import EmulatedRobot

SPEED = 4.0
DURATION_S = 2.0


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    run = tmp_path_factory.mktemp("robot")
    statuses = []
    with EmulatedRobot(run, speed=SPEED, ld19_startup_s=0.3) as robot:
        result = run_capture(
            robot.config,
            run / "session.h5",
            DURATION_S,
            CaptureOptions(label="e2e", note="end-to-end test", speed=SPEED),
            on_status=lambda t, s: statuses.append((t, s)),
        )
        time.sleep(0.1)
    truths = {name: em.truth() for name, em in robot.devices.items()}
    return result, truths, statuses, robot.config


def test_capture_ran_and_file_is_clean(captured) -> None:
    result, _, statuses, config = captured
    assert result.ok and result.stopped_by == "duration", result
    assert [b.name for b in result.bringup] == ["lidar_front", "lidar_rear", "ld19", "pods"]
    assert DURATION_S - 0.1 < result.recorded_s < DURATION_S + 1.0
    report = check_session(result.path)
    assert report.ok, report.errors
    with Session(result.path) as s:
        assert s.label == "e2e" and s.attrs["note"] == "end-to-end test"
        assert s.config_text == config.text
        assert sorted(s.lidar_names()) == ["ld19", "lidar_front", "lidar_rear"]
        assert s.encoder_names() == ["pods"] and sorted(s.raw_names()) == sorted(
            ["ld19", "lidar_front", "lidar_rear", "pods"]
        )
        front = s.lidar("lidar_front").attrs
        assert front["serial"] == config.device("lidar_front").serial.upper()
        assert s.lidar("lidar_rear").attrs["serial"] == config.device("lidar_rear").serial.upper()
        assert np.allclose(s.lidar("lidar_rear").attrs["mount_xy_yaw"], [-0.2, 0, np.pi])
        geometry = s.encoder("pods").attrs["nominal_geometry"]
        assert geometry["counts_per_rev"] == 2000 and len(geometry["wheels"]) == 3
    # about twice a second, every device reporting data
    assert 2 * DURATION_S - 1 <= len(statuses) <= 2 * DURATION_S + 2
    last = statuses[-1][1]
    assert {st.name for st in last} == {"lidar_front", "lidar_rear", "ld19", "pods"}
    assert all(st.connected and st.items_per_s > 0 for st in last)
    line = cu.status_line(statuses[-1][0], DURATION_S, last)
    assert "pods" in line and "fr/s" in line and "crc 0" in line


@pytest.mark.parametrize("name", ["ld19", "lidar_front", "lidar_rear"])
def test_every_lidar_point_and_turn_matches_the_emulator(captured, name: str) -> None:
    result, truths, _, _ = captured
    with Session(result.path) as s:
        turns = s.lidar(name).read()
    expected = cu.ld19_points(truths[name]) if name == "ld19" else cu.a1_points(truths[name])
    scale = 1000.0 if name == "ld19" else 4000.0
    native = np.where(np.isinf(turns.range), 0, np.rint(turns.range.astype(np.float64) * scale))
    native = native.astype(np.int64)
    assert turns.n_turns >= (15 if name == "ld19" else 8)
    off = cu.find_block(expected, native, turns.intensity)
    block = slice(off, off + turns.n_points)
    # every decoded point, in order, nothing missing in between
    np.testing.assert_array_equal(native, expected.native[block])
    np.testing.assert_array_equal(turns.intensity, expected.intensity[block])
    assert cu.angle_diff(turns.angle.astype(np.float64), expected.angle_ccw[block]).max() < 2e-5
    # every turn starts where the device started one
    starts = np.flatnonzero(expected.turn_start[block])
    np.testing.assert_array_equal(turns.offset, starts)
    assert turns.n_turns == starts.size
    # host times increase; the LD19's come from its device clock, whose fit needs two
    # 1-s windows of device time before it knows the emulation speed
    settled = 25 if name == "ld19" else 0
    assert np.all(np.diff(turns.t_first_ns[settled:]) > 0)


def test_every_pod_frame_matches_the_emulator(captured) -> None:
    result, truths, _, _ = captured
    with Session(result.path) as s:
        b = s.encoder("pods").read()
    truth = truths["pods"]
    assert len(b) > DURATION_S * 200 * SPEED * 0.9
    np.testing.assert_array_equal(b.seq, np.arange(b.seq[0], b.seq[0] + len(b)))  # no gap
    i = np.searchsorted(truth.index, b.seq)
    np.testing.assert_array_equal(truth.index[i], b.seq)
    np.testing.assert_array_equal(b.counts, truth.counts[i] - _first_read_offset(truth, i[0]))
    np.testing.assert_array_equal(b.device_ns, truth.mcu_time_us[i] * 1000)
    np.testing.assert_allclose(b.yaw_rate, truth.yaw_rate[i], rtol=1e-6)


def _first_read_offset(truth, i0: int) -> np.ndarray:
    """The host reads its first frame's counters as signed 16-bit (PROTOCOLS.md)."""
    raw = truth.counts_raw[i0]
    signed = np.where(raw >= 2**15, raw - 2**16, raw)
    return truth.counts[i0] - signed
