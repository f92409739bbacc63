"""Live end to end: from a pod frame's bytes written to the pty to its pose datagram
received, every frame, against a minimal reference (pyserial, the same 2×2 Kalman step
per axis in plain Python) on the same feed, in interleaved rounds; and the CPU of a
live run of the whole emulated robot. The method and what each figure means:
docs/LIVE.md, "Cost".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.benchmarks import BenchResult, Round
from sensorbench.sim.emulated_robot import DEFAULT_CONFIG
from sensorbench.sim.emulator_pods import encode_binary
from sensorbench.sim.pty import PtyPort

MODELS = Path(__file__).resolve().parent.parent / "examples" / "models"
PODS = MODELS / "pods-emulated.toml"
NOISE = MODELS / "noise-emulated.toml"
PERIOD_NS = 5_000_000
"""The pod MCU's frame period (ns): 200 frames/s."""
WARMUP_S = 2.0
"""Datagrams of the first seconds are not counted (the frame clock's one-second warm-up
goes out at once)."""
WARM_FRAMES = 1000
"""Pod frames (5 s) run before the in-process path is counted: the device clock's
envelope fit takes over only once two 1 s windows have closed (~3 s), and the frame
clock's warm-up is 1 s."""
START_S = 300.0
"""Longest start-up of a child the bench waits through (s; ``live``, the reference, ``emulate
robot``): the first run after an install compiles the kernels before bring-up (~75 s on a
loaded machine, more at load 15). Past it the child is ended and the run is a failed one."""
END_S = 30.0
"""Longest wait (s) for a ``live`` run to end after its feed stopped; past it it is ended
and the run is a failed one."""
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

_REFERENCE = r"""
import binascii, json, math, select, socket, struct, sys
import serial
port, udp_port, W = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
ser = serial.Serial(port, 115200, timeout=0)
fd = ser.fileno()
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
Q, R, buf, last = 1e-3, 1e-6, b"", None
state = [[0.0, 0.0, 1e-6, 0.0, 1e-6] for _ in range(3)]  # p, v, Ppp, Ppv, Pvv per axis
print("ready", flush=True)
while True:
    if not select.select([fd], [], [], 1.0)[0]:
        continue
    data = ser.read(ser.in_waiting or 1)
    if not data:
        break
    buf += data
    while len(buf) >= 26:
        i = buf.find(b"\xaa\x55")
        if i < 0:
            buf = buf[-1:]
            break
        if len(buf) < i + 26:
            buf = buf[i:]
            break
        f = buf[i : i + 26]
        if binascii.crc_hqx(f[2:24], 0xFFFF) != struct.unpack_from("<H", f, 24)[0]:
            buf = buf[i + 1 :]
            continue
        buf = buf[i + 26 :]
        seq, t_us, c0, c1, c2 = struct.unpack_from("<HIhhh", f, 4)
        if last is None:
            last = (t_us, (c0, c1, c2))
            continue
        dt = ((t_us - last[0]) & 0xFFFFFFFF) * 1e-6
        dn = [((c - p + 32768) & 0xFFFF) - 32768 for c, p in zip((c0, c1, c2), last[1])]
        last = (t_us, (c0, c1, c2))
        out = []
        for a, s in enumerate(state):
            z = s[0] + sum(W[a][j] * dn[j] for j in range(3))  # the odometry's position
            p, v = s[0] + s[1] * dt, s[1]
            ppp = s[2] + 2 * dt * s[3] + dt * dt * s[4] + Q * dt**3 / 3
            ppv, pvv = s[3] + dt * s[4] + Q * dt * dt / 2, s[4] + Q * dt
            k0, k1 = ppp / (ppp + R), ppv / (ppp + R)
            e = z - p
            s[:] = [p + k0 * e, v + k1 * e, (1 - k0) * ppp, (1 - k0) * ppv, pvv - k1 * ppv]
            out += [s[0], s[1], s[2]]
        tx.sendto(struct.pack("<I9d", seq, *out), ("127.0.0.1", udp_port))
"""
"""The minimal reference (``python -c _REFERENCE PORT UDP_PORT W_JSON``); it ends when
the feed's pty goes away."""


@dataclass
class Run:
    """What one run on the feed gave.

    Attributes:
        latency_ms: per matched frame, written → datagram received (ms).
        per_frame: datagrams per frame written over the counted window.
        cpu_pct: the program's CPU over the counted window (% of one core).
        startup_cpu_s: its CPU (s) from the spawn to the counted window.
        threads_pct: per thread name, its CPU over the counted window (% of one core) and
            its wake-ups (voluntary context switches) per second.
        inside_ms: ``live``'s own p50 and p99 (ms) from a pod batch decoded to its
            datagrams sent (its ``--json`` summary, the whole run after the warm-up).
        error: why the run failed, or None.
    """

    latency_ms: np.ndarray
    per_frame: float
    cpu_pct: float
    startup_cpu_s: float = float("nan")
    threads_pct: dict[str, tuple[float, float]] = field(default_factory=dict)
    inside_ms: tuple[float, float] = (float("nan"), float("nan"))
    error: str | None = None


Cpu = tuple[float, dict[str, tuple[float, int]]]
"""(process CPU s, {thread "name/tid": (CPU s, voluntary context switches)}): user + system,
from ``/proc``."""


def _stat_cpu(path: Path) -> tuple[str, float]:
    """(comm, user + system CPU s) of a ``/proc/.../stat`` file."""
    text = path.read_text()
    fields = text.rsplit(")", 1)[1].split()
    comm = text[text.index("(") + 1 : text.rindex(")")]
    return comm, (int(fields[11]) + int(fields[12])) * TICK_S


def _cpu(pid: int) -> Cpu:
    """The CPU of process ``pid`` and of each of its threads now; nan once it is gone."""
    try:
        total = _stat_cpu(Path(f"/proc/{pid}/stat"))[1]
    except OSError:
        return float("nan"), {}
    threads: dict[str, tuple[float, int]] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            comm, s = _stat_cpu(task / "stat")
            status = (task / "status").read_text()
            woken = int(status.split("\nvoluntary_ctxt_switches:")[1].split()[0])
            threads[f"{comm}/{task.name}"] = (s, woken)
    return total, threads


def _frame(k: int) -> bytes:
    """Pod frame ``k``: a steady drive forward (counts +20, +20, 0 per frame)."""
    counts = np.array([[20 * k, 20 * k, 0]]) & 0xFFFF
    return encode_binary(np.array([k & 0xFFFF]), np.array([(k * 5000) & 0xFFFFFFFF]), counts,
                         16, np.zeros(1), np.zeros(1))[0]  # fmt: skip


def _feed(proc: subprocess.Popen, pty: PtyPort, rx: socket.socket, seconds: float) -> tuple:
    """Write a frame every 5 ms and receive datagrams until ``proc`` ends or ``seconds``.

    Returns (write times ns, [(receive ns, datagram)], [(t ns, :data:`Cpu` of proc)]).
    """
    writes: list[int] = []
    got: list[tuple[int, bytes]] = []
    cpu: list[tuple[int, Cpu]] = []
    start = time.monotonic_ns()
    due, sample, end = start, start, start + int(seconds * 1e9)
    while proc.poll() is None and time.monotonic_ns() < end:
        wait = max(0.0, (due - time.monotonic_ns()) / 1e9)
        if select.select([rx], [], [], wait)[0]:
            with contextlib.suppress(BlockingIOError):
                while True:
                    data = rx.recv(256)
                    got.append((time.monotonic_ns(), data))
        now = time.monotonic_ns()
        if now >= due:
            writes.append(time.monotonic_ns())
            pty.send(_frame(len(writes) - 1))
            due += PERIOD_NS
        if now >= sample:
            cpu.append((now, _cpu(proc.pid)))
            sample = now + 500_000_000
    return np.array(writes, np.int64), got, cpu


def _window(got: list[tuple[int, bytes]], cpu: list[tuple[int, Cpu]]) -> tuple[int, int, Run]:
    """(first, last receive ns) of the counted datagrams, and a :class:`Run` with the
    CPU over them (steady; per thread) and before them (start-up), no latencies yet."""
    t0 = got[0][0] + int(WARMUP_S * 1e9)
    t1 = got[-1][0]
    inside = [(t, c) for t, c in cpu if t0 <= t <= t1 and np.isfinite(c[0])]
    if len(inside) < 2:
        return t0, t1, Run(np.zeros(0), float("nan"), float("nan"))
    (a, (ca, ta)), (b, (cb, tb)) = inside[0], inside[-1]
    pct = 100.0 / ((b - a) / 1e9)
    threads = {k.split("/")[0]: np.zeros(2) for k in tb}
    for k, (s, n) in tb.items():  # threads of one name summed (the A1 readers...)
        s0, n0 = ta.get(k, (0.0, 0))
        threads[k.split("/")[0]] += pct * np.array([s - s0, (n - n0) / 100])
    per_s = {k: (float(v[0]), float(v[1])) for k, v in threads.items()}
    return t0, t1, Run(np.zeros(0), float("nan"), pct * (cb - ca), ca, per_s)


def _live(config: Path, run_dir: Path | None, seconds: float, tmp: Path, pty: PtyPort,
          extra: Sequence[str] = ()) -> Run:  # fmt: skip
    """One ``sensorbench live`` run (``extra`` options) fed by ``pty``; datagrams matched by
    their stamps."""
    from sensorbench.live.udp import PREDICTED, SIZE, unpack

    rx = _receiver()
    args = ["live", "--config", str(config), "--pods", str(PODS), "--noise", str(NOISE),
            "--udp", f"127.0.0.1:{rx.getsockname()[1]}", "--duration", str(seconds),
            "-o", str(tmp / f"live-{time.monotonic_ns()}.h5"), "--json", *extra]  # fmt: skip
    if run_dir is not None:
        args += ["--run-dir", str(run_dir)]
    cli = [sys.executable, "-c", "from sensorbench.cli import main; main()"]
    proc = subprocess.Popen([*cli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        writes, got, cpu = _feed(proc, pty, rx, seconds + START_S)
        doc, err = proc.communicate(timeout=END_S)
    except subprocess.TimeoutExpired:
        return Run(np.zeros(0), float("nan"), float("nan"), error=f"live did not end "
                   f"{END_S:g} s after its {seconds:g} s run: ended")  # fmt: skip
    finally:
        rx.close()
        _end(proc)
    poses = [(t, unpack(d)) for t, d in got if len(d) == SIZE]
    poses = [(t, d) for t, d in poses if not d.flags & PREDICTED]
    if proc.returncode != 0 or len(poses) < 200:
        return Run(np.zeros(0), float("nan"), float("nan"), error=f"live exit {proc.returncode}: "
                   f"{len(poses)} datagrams; {err[-400:]}")  # fmt: skip
    t0, t1, out = _window([(t, b"") for t, _ in poses], cpu)
    recv = np.array([t for t, _ in poses if t0 <= t <= t1], np.int64)
    stamp = np.array([d.stamp_ns for t, d in poses if t0 <= t <= t1], np.int64)
    k = _frame_index(stamp, writes)
    out.latency_ms, out.per_frame = (recv - writes[k]) / 1e6, len(k) / (k[-1] - k[0] + 1)
    udp = json.loads(doc)["live"]["latency"]["udp"]
    out.inside_ms = (udp["p50_ms"], udp["p99_ms"])
    return out


def _frame_index(stamp: np.ndarray, writes: np.ndarray) -> np.ndarray:
    """The frame each datagram is: the stamps (ns) step by the device clock's 5 ms, so
    their differences count frames; the run is anchored where the stamps sit closest
    to the write times (ns; a late write does not move the device clock)."""
    c = np.concatenate([[0], np.cumsum(np.round(np.diff(stamp) / PERIOD_NS).astype(np.int64))])
    guess = int(np.searchsorted(writes, stamp[0]))
    starts = [k for k in range(max(0, guess - 50), guess + 50) if k + c[-1] < writes.size]
    k0 = min(starts, key=lambda k: float(np.median(np.abs(stamp - writes[k + c]))))
    return k0 + c


def _reference(seconds: float, pty: PtyPort, w: np.ndarray) -> Run:
    """One run of the minimal reference fed by ``pty``; datagrams carry the frame's seq."""
    rx = _receiver()
    proc = subprocess.Popen([sys.executable, "-c", _REFERENCE, pty.name,
                             str(rx.getsockname()[1]), json.dumps(w.tolist())],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        if not _lines(proc, 1, START_S):  # ready: the port is open
            return Run(np.zeros(0), float("nan"), float("nan"),
                       error=f"reference: not ready within {START_S:g} s")  # fmt: skip
        writes, got, cpu = _feed(proc, pty, rx, seconds)
    finally:
        rx.close()
        _end(proc, kill=True)
    if len(got) < 200:
        return Run(np.zeros(0), float("nan"), float("nan"),
                   error=f"reference: {len(got)} datagrams")  # fmt: skip
    t0, t1, out = _window(got, cpu)
    inside = [(t, d) for t, d in got if t0 <= t <= t1]
    seq = np.array([int.from_bytes(d[:4], "little") for _, d in inside], np.int64)
    recv = np.array([t for t, _ in inside], np.int64)
    # the seq wraps at 16 bits: unwrap from the first frame's index (a run is < 5 min)
    first = int(np.searchsorted(writes, recv[0] - 10**9))
    k = first + ((seq - first) & 0xFFFF)
    k = np.clip(k, 0, writes.size - 1)
    out.latency_ms, out.per_frame = (recv - writes[k]) / 1e6, len(k) / (k[-1] - k[0] + 1)
    return out


def _receiver() -> socket.socket:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # the warm-up's burst
    rx.bind(("127.0.0.1", 0))
    rx.setblocking(False)
    return rx


def _configs(tmp: Path, feed: str) -> tuple[Path, Path]:
    """(pods-only, whole robot) configurations with the pod MCU on ``feed``."""
    text = DEFAULT_CONFIG.read_text()
    whole = tmp / "robot.toml"
    whole.write_text(text.replace('port = "{run_dir}/pods"', f'port = "{feed}"'))
    pods_dev = re.search(r"\[\[devices\]\]\nname = \"pods\".*?(?=\n\[)", text, re.S)
    geometry = re.search(r"\n\[pods\].*?(?=\n\[emulation\])", text, re.S)
    assert pods_dev is not None and geometry is not None
    only = tmp / "pods.toml"
    only.write_text(
        '[robot]\nname = "pods-only"\n'
        'footprint_m = [[-0.2, -0.2], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]]\n'
        '[powerup]\norder = ["pods"]\ngap_s = 0.1\ntimeout_s = 10.0\n'
        + pods_dev.group(0).replace('port = "{run_dir}/pods"', f'port = "{feed}"')
        + geometry.group(0) + "\n"
    )  # fmt: skip
    return only, whole


def _pod_frame_cpu(per_read: int, reads: int) -> dict[str, float]:
    """The pod reader's CPU per frame (µs of thread time; medians over ``reads`` reads of
    ``per_read`` of the bench's frames), in this process: the pod protocol's decode and
    host times, the encoder batch to the live worker (the filters' step counted apart)
    and one UDP datagram per frame to a loopback socket; no select, read or writer."""
    from types import SimpleNamespace

    from sensorbench.drivers.pods_reader import PodProtocol
    from sensorbench.live.odometry import OdometryModels, OdometryWorker
    from sensorbench.live.udp import PoseDatagram, UdpPublisher

    models = OdometryModels.from_files(PODS, NOISE)
    models.warm_up()
    rx = _receiver()
    udp = UdpPublisher(*rx.getsockname())
    spent = dict.fromkeys(("decode", "host times", "filters", "UDP"), 0)

    def timed(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            c = time.thread_time_ns()
            try:
                return f(*args)
            finally:
                spent[name] += time.thread_time_ns() - c
        return call

    def publish(datagrams: list[PoseDatagram], *_: Any) -> None:
        for d in datagrams:
            udp.send(d)

    worker = OdometryWorker(models, {"clock_nominal_slope": 1.0}, publish)
    worker._filter = timed("filters", worker._filter)  # type: ignore[method-assign]
    udp.send = timed("UDP", udp.send)  # type: ignore[method-assign]
    proto = PodProtocol(n_pods=3)
    proto.parser.feed = timed("decode", proto.parser.feed)  # type: ignore[method-assign]
    proto._host_times = timed("host times", proto._host_times)  # type: ignore[method-assign]
    writer = SimpleNamespace(append_encoder=lambda _, batch: worker.frames(batch))
    proto.link = SimpleNamespace(writer=writer, name="pods", event=lambda *_: None)  # type: ignore[assignment]
    rows: list[dict[str, float]] = []
    for k in range(0, WARM_FRAMES + reads * per_read, per_read):  # the clocks' warm-up first
        data = b"".join(_frame(j) for j in range(k, k + per_read))
        spent.update(dict.fromkeys(spent, 0))
        c = time.thread_time_ns()
        proto.consume(10**12 + (k + per_read) * PERIOD_NS, data)
        rows.append({"all": time.thread_time_ns() - c, **spent})
        with contextlib.suppress(BlockingIOError):
            while True:
                rx.recv(256)
    rx.close()
    counted = rows[WARM_FRAMES // per_read :]
    return {key: float(np.median([r[key] for r in counted])) / per_read / 1e3 for key in rows[0]}


def _stats(runs: list[Run], q: float) -> list[float]:
    return [float(np.percentile(r.latency_ms, q)) for r in runs]


def _ratios(pairs: list[tuple[float, float]]) -> str:
    return ", ".join(f"{a / b:.2f}" for a, b in pairs)


def run(quick: bool) -> list[BenchResult]:
    """Interleaved rounds of ``live`` (pods only) and the reference, then the whole robot."""
    if not sys.platform.startswith("linux"):
        return []
    from sensorbench.fusion.pod_kinematics import load_pod_model

    rounds, seconds = (2, 12.0) if quick else (4, 20.0)
    w = load_pod_model(PODS).W
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sensorbench-bench-") as name:
        tmp = Path(name)
        pty = PtyPort(link=tmp / "pods_feed", write_timeout_s=0.0)
        only, whole = _configs(tmp, str(pty.link))
        ours: list[Run] = []
        ref: list[Run] = []
        for r in range(rounds):
            for side in ((0, 1) if r % 2 == 0 else (1, 0)):
                if side == 0:
                    ours.append(_live(only, None, seconds, tmp, pty))
                else:
                    ref.append(_reference(seconds, pty, w))
        robot = _robot_run(whole, tmp, pty, seconds)
        ros2 = _robot_run(whole, tmp, pty, seconds, ["--ros2", "--ros2-domain",
                                                     str(200 + os.getpid() % 30)])  # fmt: skip
        pty.close()
    failed = [x.error for x in (*ours, *ref, robot, ros2) if x.error]
    if failed:
        return [BenchResult("live", "end to end", float("nan"), "", None, False,
                            f"a run failed: {failed[0]}")]  # fmt: skip
    p50, p99 = _stats(ours, 50), _stats(ours, 99)
    r50, r99 = _stats(ref, 50), _stats(ref, 99)
    q50, q99 = list(zip(p50, r50, strict=True)), list(zip(p99, r99, strict=True))
    n = sum(x.latency_ms.size for x in ours)
    where = f"{rounds} interleaved rounds of {seconds:g} s, load {load:.1f} at the start"
    return [
        BenchResult.from_rounds("live", "pod frame written → UDP pose received, p50 (live)",
                                [Round(None, None, v) for v in p50], "ms", None, False,
                                f"{n} frames; {where}"),
        BenchResult.from_rounds("live", "pod frame written → UDP pose received, p99 (live)",
                                [Round(None, None, v) for v in p99], "ms", 2.0, False,
                                "target: an idle machine"),
        BenchResult.from_rounds("live", "of that, inside live: pod batch decoded → sent, p99",
                                [Round(None, None, x.inside_ms[1]) for x in ours], "ms", None,
                                False, "p50 " + ", ".join(f"{x.inside_ms[0]:.2f}" for x in ours)
                                + " ms; the rest is the host waking the reader and the receiver"),
        BenchResult.from_rounds("live", "the same, p50 (minimal reference)",
                                [Round(None, None, v) for v in r50], "ms", None, False, where),
        BenchResult.from_rounds("live", "the same, p99 (minimal reference)",
                                [Round(None, None, v) for v in r99], "ms", None, False, where),
        BenchResult.from_rounds("live", "live p50 / (2 × ref p50 + 0.5 ms)",
                                [Round(None, None, a / (2 * b + 0.5)) for a, b in q50], "x",
                                1.0, False, "live/ref p50 per round: " + _ratios(q50)),
        BenchResult.from_rounds("live", "live p99 / (1.5 × ref p99 + 1 ms)",
                                [Round(None, None, a / (1.5 * b + 1)) for a, b in q99], "x",
                                1.0, False, "live/ref p99 per round: " + _ratios(q99)),
        BenchResult.from_rounds("live", "UDP datagrams per pod frame (live)",
                                [Round(None, None, x.per_frame) for x in ours], "x", None, False,
                                "one pose per frame: 1.00"),
        BenchResult.from_rounds("live", "CPU, steady: live (pods only) / minimal reference",
                                [Round(None, None, a.cpu_pct / b.cpu_pct)
                                 for a, b in zip(ours, ref, strict=True)], "x", None, False,
                                "% of one core per round, live / reference: " + ", ".join(
                                    f"{a.cpu_pct:.1f} / {b.cpu_pct:.1f}"
                                    for a, b in zip(ours, ref, strict=True))),
        BenchResult("live", "whole emulated robot: frame → pose p50 / p99",
                    float(np.percentile(robot.latency_ms, 50)), "ms", None, False,
                    f"p99 {np.percentile(robot.latency_ms, 99):.2f} ms over "
                    f"{robot.latency_ms.size} frames (LD19, two A1s, this feed as the pods)"),
        BenchResult("live", "whole emulated robot: live CPU, steady", robot.cpu_pct,
                    "% of one core", 15.0, False,
                    "the live process, user + system, over the latencies' window"),
        BenchResult("live", "whole emulated robot: live start-up CPU", robot.startup_cpu_s,
                    "s", None, False, "spawn → the counted window: imports, numba cache, "
                    f"bring-up, {WARMUP_S:g} s of datagrams after the first"),
        *(BenchResult("live", f"whole emulated robot: thread {k}{what}", v[i], unit, None, False)
          for k, v in sorted(robot.threads_pct.items(), key=lambda kv: -kv[1][0])
          if v[0] >= 0.05 for i, what, unit in ((0, "", "% of one core"), (1, ", wake-ups", "/s"))),
        BenchResult("live", "whole emulated robot, --ros2: live CPU, steady", ros2.cpu_pct,
                    "% of one core", None, False, "a loopback domain, no subscriber"),
        *(BenchResult("live", f"whole emulated robot, --ros2: thread {k}", v[0],
                      "% of one core", None, False)
          for k, v in sorted(ros2.threads_pct.items(), key=lambda kv: -kv[1][0]) if v[0] >= 0.05),
        *(BenchResult("live", f"pod reader per frame, {n} a read: {k}", v, "µs CPU", None,
                      False, "in process; all: the decode, host times, the batch, the live "
                      "worker with the step, UDP" if k == "all" else "in process")
          for n in (1, 2) for k, v in _pod_frame_cpu(n, 2000 if quick else 5000).items()),
    ]  # fmt: skip


def _robot_run(config: Path, tmp: Path, pty: PtyPort, seconds: float,
               extra: Sequence[str] = ()) -> Run:  # fmt: skip
    """``live`` on the whole emulated robot: ``emulate robot``'s lidars, this feed's pods."""
    run_dir = tmp / "run"
    emu = subprocess.Popen([sys.executable, "-c", "from sensorbench.cli import main; main()",
                            "emulate", "robot", "--run-dir", str(run_dir), "--duration",
                            str(seconds + START_S + 60)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    try:
        if not _lines(emu, 4, START_S):  # its devices are up
            return Run(np.zeros(0), float("nan"), float("nan"),
                       error=f"emulate robot: its devices not up within {START_S:g} s")  # fmt: skip
        return _live(config, run_dir, seconds, tmp, pty, extra)
    finally:
        _end(emu)


def _lines(proc: subprocess.Popen, n: int, within_s: float) -> bool:
    """Whether ``proc`` wrote ``n`` lines on its stdout within ``within_s`` s (read on a
    thread: its buffered stdout may hold several lines that select no longer sees)."""
    got: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        while len(got) < n and (line := proc.stdout.readline()):
            got.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(within_s)
    return len(got) == n


def _end(proc: subprocess.Popen, kill: bool = False) -> None:
    """End ``proc`` (terminated, or killed; killed when it outlives 10 s) and reap it."""
    if proc.poll() is None:
        proc.kill() if kill else proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
