"""Live cost: frame-to-publish latency and CPU per device with a viewer connected, and the
filter step's rate against the pods' line rate.

The emulated robot (LD19, two A1s, pod MCU) runs in another process (``sensorbench
emulate robot``) at real rate, so only the live run's work is measured. The live run
(capture + filters + merge + Foxglove server + UDP) runs in this process; a Foxglove
protocol client subscribed to every channel (reading, decoding nothing) and a UDP
socket receiving the datagrams run in a third.

- **Latency**: from a pod batch's arrival (the driver hands the decoded frames over) to
  the UDP datagram of the step that filtered it being sent, per batch; p50 and p99 per
  window of the recording, reported as the median over the windows. The first step
  (the frame clock's one-second warm-up) is not counted. A frame also waits in the port
  for up to one read of the pod reader (50 ms) before it is decoded; that is the
  capture's read window, not counted here (it is the same with or without live).
- **CPU**: each thread's CPU time (``/proc/self/task/*/stat``, 10 ms ticks) over
  consecutive windows of the recording: per device its reader thread, the runtime's
  threads, and the whole process (``time.process_time``; the viewer and the UDP receiver
  run in a process of their own); % of one core, median over the windows.
- **Step rate**: frames per CPU second of :meth:`SplitFilter.step` on 10-frame chunks
  (one 50 ms pod read) of a recorded drive, over the pods' 200 frames/s, in rounds.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sensorbench.benchmarks import BenchResult, Round, interleave
from sensorbench.drivers.capture import CaptureOptions, run_capture
from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of every thread of this process, by kernel name."""
    out: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (task / "stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat.rsplit(")", 1)[1].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) * TICK_S
    return out


_VIEWER = """
import asyncio, json, socket, sys, time
import websockets
port, udp_port, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.bind(("127.0.0.1", udp_port))
rx.setblocking(False)
got = {"udp": 0, "ws": 0}
async def main():
    loop = asyncio.get_running_loop()
    async def udp():
        while True:
            try:
                await loop.sock_recv(rx, 4096)
                got["udp"] += 1
            except OSError:
                await asyncio.sleep(0.01)
    asyncio.ensure_future(udp())
    async with websockets.connect(f"ws://127.0.0.1:{port}", subprotocols=["foxglove.sdk.v1"],
                                  max_size=None) as ws:
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                msg = await asyncio.wait_for(ws.recv(), 0.5)
            except asyncio.TimeoutError:
                continue
            if isinstance(msg, str):
                doc = json.loads(msg)
                if doc.get("op") == "advertise":
                    subs = [{"id": n + i + 1, "channelId": c["id"]}
                            for i, c in enumerate(doc["channels"])]
                    n += len(subs)
                    await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
            else:
                got["ws"] += 1
try:
    asyncio.run(main())
except Exception:  # the server went away: the live run ended
    pass
print(json.dumps(got))
"""
"""A Foxglove client subscribed to every channel and a UDP receiver, in a process of
their own (``python -c _VIEWER PORT UDP_PORT SECONDS``; prints what it received)."""


def _live_run(duration_s: float, windows: int) -> list[BenchResult]:
    from sensorbench.live.odometry import OdometryModels
    from sensorbench.live.runtime import LiveOptions, LiveRuntime, live_summary

    with tempfile.TemporaryDirectory(prefix="sensorbench-bench-") as tmp:
        run = Path(tmp) / "run"
        emu = subprocess.Popen(
            [sys.executable, "-c", "from sensorbench.cli import main; main()", "emulate",
             "robot", "--run-dir", str(run), "--duration", str(duration_s + 90)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.bind(("127.0.0.1", 0))
        udp_port = probe.getsockname()[1]
        probe.close()  # the viewer process binds it
        viewer: list[subprocess.Popen] = []

        config = load_robot_config(DEFAULT_CONFIG, run_dir=run)
        models = OdometryModels.from_files(
            MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml", imu=True
        )
        runtime = LiveRuntime(
            config, models, LiveOptions(foxglove=("127.0.0.1", 0), udp=("127.0.0.1", udp_port))
        )
        port: list[int] = []
        ticks: list[tuple[float, float, dict[str, float], int]] = []

        def on_status(t: float, statuses: list) -> None:
            st = runtime.on_status(t, statuses)
            if not port and st.port is not None:
                port.append(st.port)
                viewer.append(subprocess.Popen(
                    [sys.executable, "-c", _VIEWER, str(st.port), str(udp_port),
                     str(duration_s + 5)], stdout=subprocess.PIPE, text=True,
                ))  # fmt: skip
            lat = runtime.odometry.counters.latencies_ns if runtime.odometry else []
            ticks.append((time.monotonic(), time.process_time(), _thread_cpu(), len(lat)))

        try:
            if emu.stdout is None:
                raise RuntimeError("emulate robot: no stdout pipe")
            for _ in range(4):
                emu.stdout.readline()
            result = run_capture(config, Path(tmp) / "bench.h5", duration_s, CaptureOptions(),
                                 on_status=on_status, consumer=runtime)  # fmt: skip
        finally:
            emu.terminate()
            emu.wait(10)
            received = {"udp": 0, "ws": 0}
            for v in viewer:  # it ends when the server goes away
                try:
                    out_text = v.communicate(timeout=30)[0]
                    received = json.loads(out_text.strip().splitlines()[-1])
                except (subprocess.TimeoutExpired, ValueError, IndexError):
                    v.kill()
                    v.wait(10)
    summary = live_summary(runtime)
    if not result.ok or len(ticks) < windows + 3:
        return [BenchResult("live", "live run", float("nan"), "", None, False,
                            f"live run failed: {result.error or summary['errors']}")]  # fmt: skip
    # windows over the recording after the viewer connected and the filters started
    ticks = ticks[2:]
    edges = [round(k * (len(ticks) - 1) / windows) for k in range(windows + 1)]
    lat = np.asarray(runtime.odometry.counters.latencies_ns if runtime.odometry else [], float)
    rounds_p50, rounds_p99, cpu_total = [], [], []
    per_thread: dict[str, list[Round]] = {}
    for a, b in itertools.pairwise(edges):
        (w0, c0, th0, n0), (w1, c1, th1, n1) = ticks[a], ticks[b]
        wall = w1 - w0
        chunk = lat[n0:n1] / 1e6
        if chunk.size:
            rounds_p50.append(Round(None, None, float(np.percentile(chunk, 50))))
            rounds_p99.append(Round(None, None, float(np.percentile(chunk, 99))))
        cpu_total.append(Round(c1 - c0, None, 100.0 * (c1 - c0) / wall))
        for name, cpu in th1.items():
            used = cpu - th0.get(name, 0.0)
            per_thread.setdefault(name, []).append(Round(used, None, 100.0 * used / wall))
    devices = [d.name for d in config.devices]
    out = [
        BenchResult.from_rounds("live", "pod frame arrival → UDP pose, p50", rounds_p50, "ms",
                                None, False, f"{lat.size} batches, 4 devices at real rate, "
                                "a Foxglove client subscribed to every channel"),
        BenchResult.from_rounds("live", "pod frame arrival → UDP pose, p99", rounds_p99, "ms",
                                2.0, False, "median over windows of each window's p99"),
        BenchResult.from_rounds("live", "live run CPU, whole process", cpu_total,
                                "% of one core", 25.0, False,
                                f"{summary['filter_steps']} filter steps, "
                                f"{summary['merged_scans']} merged scans, view published "
                                f"{sum((summary['view'] or {}).get('published', {}).values())}"
                                f" messages (dropped {(summary['view'] or {}).get('dropped')}),"
                                f" the viewer (another process) read {received['ws']} and "
                                f"{received['udp']} datagrams"),
    ]  # fmt: skip
    for name in devices:
        rounds = per_thread.get(name[:15])
        if rounds:
            lidar = config.device(name).kind != "pods"
            out.append(BenchResult.from_rounds(
                "live", f"CPU of reader {name}", rounds, "% of one core",
                5.0 if lidar else None, False, "its reader thread (decoding, recording hand-off)",
            ))  # fmt: skip
    for name in ("live-odometry", "live-merge", "live-view", "writer"):
        rounds = per_thread.get(name)
        if rounds:
            out.append(BenchResult.from_rounds("live", f"CPU of {name}", rounds,
                                               "% of one core", None, False, "thread"))  # fmt: skip
    return out


def _step_rate(rounds: int) -> BenchResult:
    """Frames per CPU second of the filter step on 10-frame chunks, / 200 frames/s."""
    from sensorbench.fusion.pod_kinematics import body_increments
    from sensorbench.fusion.split_filter import FrameChunk, SplitFilter
    from sensorbench.live.odometry import OdometryModels

    models = OdometryModels.from_files(
        MODELS / "pods-emulated.toml", MODELS / "noise-emulated.toml"
    )
    rng = np.random.default_rng(0)
    n = 400
    t = np.arange(n + 1) * 0.005
    dn = np.round(rng.normal(20, 3, size=(n, 3)))
    inc = body_increments(models.geometry.W, dn)
    filt = SplitFilter(models.noise)

    def steps() -> None:
        state = filt.start(t[0], pods=models.geometry)
        for k in range(0, n, 10):
            state, _ = filt.step(state, FrameChunk(t[k + 1 : k + 11], inc[k : k + 10]))

    timing = interleave(steps, rounds=rounds)
    return BenchResult.from_rounds(
        "live", "filter step (10-frame chunks) vs pod line rate",
        timing.rounds(lambda o, _: n / o / 200.0), "x", 4.0, True,
        f"{n / timing.ours_median_s:.0f} frames per CPU s in 10-frame steps (median) / 200 /s",
    )  # fmt: skip


def run(quick: bool) -> list[BenchResult]:
    """Latency and CPU of a live run (quick: 12 s, else 40 s) and the step rate."""
    results = [_step_rate(3 if quick else 7)]
    if sys.platform.startswith("linux"):
        results = _live_run(12.0 if quick else 40.0, 4 if quick else 8) + results
    return results
