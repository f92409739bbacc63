"""``sensorbench demo --live``: the emulated robot, live, with the view in Foxglove.

The emulated robot (:class:`~sensorbench.sim.emulated_robot.EmulatedRobot`: LD19, two
A1s and the pod MCU on pseudo-terminals, the shipped ``robot-emulated.toml`` and its
square scenario, looped) runs in this process at real rate, and ``sensorbench
live``'s runtime (:class:`~sensorbench.live.runtime.LiveRuntime`) captures it through
the real drivers with the models shipped for it (``examples/models/pods-emulated.toml``
and ``noise-emulated.toml``: fitted by ``sensorbench demo --quick --speed 1`` on this
emulated robot, so no fit has to run first). The session goes to ``OUT/live.h5`` (or
``live-2.h5``, ... when that exists: nothing is overwritten).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sensorbench.drivers.capture import CaptureOptions, CaptureResult, run_capture
from sensorbench.drivers.reader_base import ReaderStatus
from sensorbench.live.odometry import OdometryModels
from sensorbench.live.runtime import LiveOptions, LiveRuntime
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG, EmulatedRobot

MODELS = DEFAULT_CONFIG.parent / "models"
"""The models shipped for the emulated robot (fitted at real rate)."""


@dataclass
class LiveDemo:
    """A live demo run: the capture's result and the runtime (its counters)."""

    result: CaptureResult
    runtime: LiveRuntime
    session: Path


def live_runtime(robot: EmulatedRobot, foxglove: tuple[str, int] | None) -> LiveRuntime:
    """The live runtime for the emulated robot with the shipped models."""
    models = OdometryModels.from_files(
        MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml", imu=True
    )
    attrs = {"pods_model": "pods-emulated.toml (shipped)", "noise_model": "noise-emulated.toml"}
    return LiveRuntime(robot.config, models, LiveOptions(foxglove=foxglove, estimate_attrs=attrs))


def run_live_demo(
    out_dir: Path,
    foxglove: tuple[str, int] | None,
    duration_s: float,
    stop: threading.Event,
    on_status: Callable[[float, list[ReaderStatus], LiveRuntime], None] | None = None,
) -> LiveDemo:
    """Serve the emulated robot and run it live until ``duration_s`` (s) or ``stop``;
    ``on_status`` gets capture's status ticks and the runtime (its counters).

    Raises:
        LiveError: the view cannot listen on ``foxglove``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    session = out_dir / "live.h5"
    n = 2
    while session.exists():
        session, n = out_dir / f"live-{n}.h5", n + 1
    with EmulatedRobot(out_dir / "run", speed=1.0, ld19_startup_s=0.5) as robot:
        runtime = live_runtime(robot, foxglove)

        def status(elapsed_s: float, statuses: list[ReaderStatus]) -> None:
            if on_status is not None:
                on_status(elapsed_s, statuses, runtime)

        result = run_capture(
            robot.config,
            session,
            duration_s,
            CaptureOptions(label="live demo", note="sensorbench demo --live"),
            on_status=status,
            stop=stop,
            consumer=runtime,
        )
    return LiveDemo(result, runtime, session)
