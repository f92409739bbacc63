"""``sensorbench demo --live``: the shipped emulated robot at real rate, captured by
``sensorbench live``'s runtime with the models shipped for it (docs/DEMO.md)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sensorbench.drivers.capture import CaptureOptions, CaptureResult, run_capture
from sensorbench.drivers.reader_base import ReaderStatus
from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.errors import SimError
from sensorbench.live.odometry import OdometryModels
from sensorbench.live.runtime import LiveOptions, LiveRuntime
from sensorbench.logs.atomic_output import atomic_output, make_dir
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG, EmulatedRobot

MODELS = DEFAULT_CONFIG.parent / "models"
"""The models shipped for the emulated robot (fitted at real rate)."""


@dataclass
class LiveDemo:
    """A live demo run: the capture's result and the runtime (its counters)."""

    result: CaptureResult
    runtime: LiveRuntime
    session: Path


def firmware_config(out_dir: Path) -> Path:
    """The shipped emulated robot's configuration with its pods entry as the firmware
    image serves it (``imu = false``), written to ``out_dir/robot-firmware.toml``; SimError
    when the shipped configuration has no single pods entry with ``imu = true``."""
    text = DEFAULT_CONFIG.read_text(encoding="utf-8")
    entry = re.compile(r'(name = "pods"\n(?:[^\[\n].*\n|\n)*?)imu = true')
    changed, n = entry.subn(r"\1imu = false", text)
    path = out_dir / "robot-firmware.toml"
    with atomic_output(path, force=True) as tmp:  # never through a link, FIFO or device
        tmp.write_text(changed, encoding="utf-8")
    pods = [d for d in load_robot_config(path, run_dir=out_dir).devices if d.kind == "pods"]
    if n != 1 or len(pods) != 1 or pods[0].imu:
        raise SimError(f"{DEFAULT_CONFIG}: no single pods entry with imu = true to serve")
    return path


def run_live_demo(
    out_dir: Path, foxglove: tuple[str, int] | None, duration_s: float, stop: threading.Event,
    on_status: Callable[[float, list[ReaderStatus], LiveRuntime], None] | None = None,
    pods_firmware: str | os.PathLike[str] | None = None,
) -> LiveDemo:
    """Serve the emulated robot and run it live until ``duration_s`` (s) or ``stop``;
    ``on_status`` gets capture's status ticks and the runtime (its counters);
    ``pods_firmware``: an ATmega328P image to run under simavr as the pod MCU. LiveError
    when the view cannot listen on ``foxglove``, SimError when the firmware cannot run."""
    make_dir(out_dir, "nothing was started")
    session = out_dir / "live.h5"
    n = 2
    while os.path.lexists(session):
        session, n = out_dir / f"live-{n}.h5", n + 1
    config = None if pods_firmware is None else firmware_config(out_dir)
    with EmulatedRobot(
        out_dir / "run", config, speed=1.0, ld19_startup_s=0.5, pods_firmware=pods_firmware
    ) as robot:
        imu = any(d.imu for d in robot.config.devices if d.kind == "pods")
        pods, noise = MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml"
        models = OdometryModels.from_files(pods, noise, imu=imu)
        attrs = {"pods_model": "pods-emulated.toml (shipped)", "noise_model": "noise-emulated.toml"}
        runtime = LiveRuntime(robot.config, models, LiveOptions(foxglove, estimate_attrs=attrs))
        try:  # closed on every path: a capture that fails early leaves no server listening
            runtime.open()  # the filters compiled, the view listening: before the devices start

            def status(elapsed_s: float, statuses: list[ReaderStatus]) -> None:
                if on_status is not None:
                    on_status(elapsed_s, statuses, runtime)

            options = CaptureOptions(label="live demo", note="sensorbench demo --live")
            result = run_capture(robot.config, session, duration_s, options, on_status=status,
                stop=stop, consumer=runtime)
        finally:
            runtime.close()
    return LiveDemo(result, runtime, session)
