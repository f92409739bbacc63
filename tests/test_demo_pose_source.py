"""The emulated network pose source and the demo's capture of one scenario.

Known truth: the simulation's own mocap and pose-sensor samples, and the emulation
clock that maps simulated time onto the host clock.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from sensorbench.demo.capture import capture_scenario, subset_config_text
from sensorbench.drivers.reader_base import DeviceReader
from sensorbench.errors import DriverError, SimError
from sensorbench.logs import PoseFlag, Session, SessionWriter
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG
from sensorbench.sim.emulator_base import SimClock
from sensorbench.sim.pose_source import SimPoseSource
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import Simulation

SPEED = 50.0


def _short_reloc() -> Simulation:
    sc = load_scenario("reloc_campaign").for_session(0)
    sc = sc.with_overrides({"trajectory": {"repeats": 1}, "pose_sensor": {"reloc_times_s": [5.0]}})
    return Simulation(sc, seed=3)


def test_pose_source_streams_every_sample_on_the_host_clock(tmp_path: Path) -> None:
    sim = _short_reloc()
    mocap, pose = sim.mocap(), sim.pose_sensor()
    clock = SimClock(SPEED)
    src = SimPoseSource({"mocap": ("mocap", mocap), "pose_sensor": ("pose_sensor", pose)}, clock)
    assert isinstance(src, DeviceReader)
    path = tmp_path / "s.h5"
    with SessionWriter(path, label="pose") as w:
        src.declare(w)
        w.start()
        src.start()
        deadline = time.monotonic() + sim.duration_s / SPEED + 10.0
        while clock.now() < sim.duration_s + 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        st = src.status()
        src.stop()
    assert st.connected and st.last_error is None
    with Session(path) as s:
        assert s.pose("mocap").attrs["kind"] == "mocap"
        assert s.pose("pose_sensor").attrs["emulated"]
        got_m, got_p = s.pose("mocap").read(), s.pose("pose_sensor").read()
        relocs = [e for e in s.events() if e.kind == "relocalization"]
    # every sample, in order, bit-exact, stamped t0 + t_sim / speed (rounded to 1 ns)
    assert clock.host_ns(np.array([0.0, SPEED])).tolist() == [clock.t0_ns, clock.t0_ns + 10**9]
    assert len(got_m) == mocap.t_s.size and len(got_p) == pose.t_s.size
    np.testing.assert_array_equal(got_m.t_ns, clock.host_ns(mocap.t_s))
    np.testing.assert_array_equal(got_p.t_ns, clock.host_ns(pose.t_s))
    np.testing.assert_array_equal(got_p.position, pose.position)
    np.testing.assert_array_equal(got_m.valid, mocap.valid)
    np.testing.assert_array_equal(got_p.flags, pose.flags)
    assert np.count_nonzero(got_p.flags & PoseFlag.RELOCALIZED) == pose.reloc_t_s.size
    assert [e.t_ns for e in relocs] == clock.host_ns(pose.reloc_t_s).tolist()


def test_pose_source_refuses_bad_streams_and_start_before_declare() -> None:
    sim = _short_reloc()
    with pytest.raises(DriverError, match="kind"):
        SimPoseSource({"m": ("lidar", sim.mocap())}, SimClock(1.0))
    with pytest.raises(DriverError, match="at least one"):
        SimPoseSource({}, SimClock(1.0))
    src = SimPoseSource({"mocap": ("mocap", sim.mocap())}, SimClock(1.0))
    with pytest.raises(DriverError, match="declare"):
        src.start()


def test_pose_source_stops_and_reports_when_the_writer_is_gone(tmp_path: Path) -> None:
    sim = _short_reloc()
    clock = SimClock(5.0)  # slow enough that samples are still due after the close
    src = SimPoseSource({"mocap": ("mocap", sim.mocap())}, clock)
    w = SessionWriter(tmp_path / "s.h5", label="pose")
    src.declare(w)
    w.start()
    src.start()
    time.sleep(0.2)
    w.close()
    deadline = time.monotonic() + 5.0
    while src.status().last_error is None and time.monotonic() < deadline:
        time.sleep(0.05)
    st = src.status()
    assert st.last_error is not None and "closed" in st.last_error
    assert not st.connected
    src.stop(timeout_s=2.0)
    assert src._thread is not None and not src._thread.is_alive()


def test_subset_config_keeps_devices_and_power_up_order() -> None:
    text = subset_config_text(DEFAULT_CONFIG.read_text(), ["ld19", "pods"])
    assert "lidar_front" not in text and 'order = ["ld19", "pods"]' in text
    with pytest.raises(SimError, match="no device"):
        subset_config_text(DEFAULT_CONFIG.read_text(), ["lidar_middle"])


def test_capture_scenario_records_pods_and_mocap_with_truth(tmp_path: Path, warm_readers) -> None:
    # kernels loaded before: their load (~1 s at load 9) is no part of the 1-s bring-up budget
    speed = 20.0
    sc = load_scenario("spin").with_overrides({"trajectory": {"repeats": 1}})
    out = tmp_path / "spin.h5"
    c = capture_scenario(
        sc, 2, out, tmp_path / "run", ["pods"], ("mocap",), speed=speed, bringup_budget_s=1.0
    )
    assert c.capture.ok
    # the bring-up ended inside the lead-in hold: the motion was recorded whole
    assert c.sim_bringup_s < c.lead_in_s
    with Session(out) as s:
        assert s.encoder_names() == ["pods"] and s.pose_names() == ["mocap"]
        assert s.lidar_names() == []
        attrs = s.truth_attrs()
        assert attrs["emulation_speed"] == speed
        geometry = s.truth("pods/geometry")
        mocap = s.pose("mocap").read()
        truth_t = s.truth("pose/t_ns")
        truth_xyy = s.truth("pose/x_y_yaw")
    sim = Simulation(sc.with_overrides({"trajectory": {"lead_in_s": 1.0 + c.lead_in_s}}), 2)
    np.testing.assert_allclose(geometry, sim.pods().geometry.as_array())
    # mocap on the truth's time base: its yaw follows the true yaw (noise 2 mrad,
    # latency 4 ms simulated at ≤ 90°/s: ≤ 6.3 mrad) far from its occlusions
    ok = mocap.valid
    q = mocap.quat_xyzw[ok]
    yaw = np.unwrap(np.arctan2(2 * (q[:, 3] * q[:, 2]), 1 - 2 * q[:, 2] ** 2))
    true_yaw = np.interp(mocap.t_ns[ok], truth_t, truth_xyy[:, 2])
    d = np.angle(np.exp(1j * (yaw - true_yaw)))
    assert np.median(np.abs(d)) < 0.01
