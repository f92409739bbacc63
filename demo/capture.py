"""Capture one simulated scenario through the real capture path, then add its ``/truth``
on the file's host-clock time base (``emulation_speed``, ``t0_ns``)."""

from __future__ import annotations

import math
import os
import threading
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sensorbench.drivers.capture import BringupResult, CaptureOptions, CaptureResult, run_capture
from sensorbench.drivers.kernels import warm_up as warm_up_kernels
from sensorbench.errors import SimError
from sensorbench.logs import SessionWriter
from sensorbench.logs.atomic_output import atomic_output, make_dir
from sensorbench.logs.model_file import dumps_toml
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG, EmulatedRobot
from sensorbench.sim.pose_source import SimPoseSource
from sensorbench.sim.scenario import Scenario
from sensorbench.sim.simulation import write_common_truth

END_MARGIN_S = 0.5
"""Simulated seconds before the scenario's end at which the capture stops (s)."""


@dataclass(frozen=True)
class CapturedSession:
    """One captured demo session: ``label`` the scenario name (``#i`` for campaign
    sessions), ``sim_bringup_s`` the simulated time recording started (s; below the
    lead-in ``lead_in_s`` added to the scenario, the motion was recorded whole), ``host_s``
    the host seconds the capture took, bring-up included."""

    path: Path
    label: str
    capture: CaptureResult
    sim_bringup_s: float
    lead_in_s: float
    host_s: float


def subset_config_text(text: str, devices: list[str]) -> str:
    """The robot configuration ``text`` keeping only ``devices`` (and their power-up order)."""
    doc = tomllib.loads(text)
    names = {d["name"] for d in doc.get("devices", [])}
    missing = sorted(set(devices) - names)
    if missing:
        raise SimError(f"the robot configuration has no device {', '.join(missing)}")
    doc["devices"] = [d for d in doc["devices"] if d["name"] in devices]
    if "powerup" in doc and "order" in doc["powerup"]:
        doc["powerup"]["order"] = [n for n in doc["powerup"]["order"] if n in devices]
    return f"# sensorbench demo: {', '.join(devices)} of the emulated robot\n" + dumps_toml(doc)


def capture_scenario(
    scenario: Scenario, seed: int, output: str | os.PathLike[str], run_dir: str | os.PathLike[str],
    devices: list[str], pose_streams: tuple[str, ...] = (), speed: float = 10.0,
    bringup_budget_s: float = 4.0, label: str | None = None,
) -> CapturedSession:
    """Emulate ``devices`` of the robot ``examples/robot-emulated.toml`` driven by
    ``scenario`` at ``speed`` (simulated s per host s), with ``pose_streams`` (``mocap``,
    ``pose_sensor``) from the emulated pose source, and capture them into ``output`` after
    a lead-in hold of ``bringup_budget_s`` host seconds. SimError: unknown devices or
    streams, or the capture failed."""
    t_start = time.monotonic()
    warm_up_kernels()  # before the emulators and readers start: a compile stalls them all
    run_dir = Path(run_dir)
    make_dir(run_dir, "nothing was captured")
    label = label or scenario.name
    cfg_path = run_dir / f"robot-{''.join(c if c.isalnum() else '_' for c in label)}.toml"
    with atomic_output(cfg_path, force=True) as tmp:  # never through a link, FIFO or device
        tmp.write_text(subset_config_text(DEFAULT_CONFIG.read_text(), devices))
    lead_in, sc_lead_in = bringup_budget_s * speed, scenario.trajectory["lead_in_s"]
    sc = scenario.with_overrides({"trajectory": {"lead_in_s": sc_lead_in + lead_in}})
    robot = EmulatedRobot(
        run_dir, config=cfg_path, scenario=sc, seed=seed, speed=speed, ld19_startup_s=0.3,
        faults=False,
    )  # fmt: skip
    result, bringup_at = _record(robot, Path(output), pose_streams, label)
    if not result.ok:
        failed = "; ".join(f"{b.name}: {b.message}" for b in result.bringup if not b.ok)
        raise SimError(
            f"capture of {label} failed (stopped by {result.stopped_by}): {result.error or failed}"
        )
    sim, clock = robot.sim, robot.clock  # the truth (docs/SIMULATION.md) on clock's time base
    with SessionWriter.add_to(Path(output)) as w:
        time_base = ("host monotonic ns; simulated seconds run emulation_speed times faster "
            "than host seconds (host_ns = t0_ns + t_sim / emulation_speed * 1e9)")
        attrs = {"emulation_speed": clock.speed, "time_base": time_base}
        write_common_truth(w, sim, clock.host_ns, clock.t0_ns, attrs)
        for name in sim.lidar_names():
            g = f"lidar/{name}"
            w.set_truth(f"{g}/mount_xy_yaw", np.asarray(sim.lidar_mount(name), float))
            w.set_truth_attrs({"params_toml": dumps_toml(sim.scenario.lidars[name])}, g)
    host_s = time.monotonic() - t_start
    return CapturedSession(Path(output), label, result, bringup_at, lead_in, host_s)


def _record(
    robot: EmulatedRobot, output: Path, pose_streams: tuple[str, ...], label: str
) -> tuple[CaptureResult, float]:
    """Run the emulated robot and capture it into ``output`` until the scenario's end;
    returns the capture's result and the simulated time (s) at which the bring-up was
    done (nan if it never was)."""
    sim, speed = robot.sim, robot.speed
    streams = {name: (name, getattr(sim, name)()) for name in pose_streams}
    bringup_at: list[float] = []
    stop = threading.Event()
    end_s = sim.duration_s - END_MARGIN_S

    def on_bringup(_: BringupResult) -> None:
        if not bringup_at:
            bringup_at.append(robot.clock.now())

    def stop_at_end() -> None:
        robot.clock.sleep_until(end_s, stop)
        stop.set()

    try:
        robot.start()
        attrs = {"scenario": sim.scenario.name}
        source = [SimPoseSource(streams, robot.clock, attrs=attrs)] if streams else []
        threading.Thread(target=stop_at_end, name="demo-end", daemon=True).start()
        note = f"sensorbench demo: scenario {sim.scenario.name}, emulated at {speed:g}x"
        options = CaptureOptions(label=label, note=note, speed=speed)
        result = run_capture(robot.config, output, end_s / speed + 30.0, options,
            on_bringup=on_bringup, stop=stop, extra_readers=source)
    finally:
        stop.set()
        robot.stop()
    return result, bringup_at[0] if bringup_at else math.nan

