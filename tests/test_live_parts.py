"""The live runtime's parts on their own: UDP datagrams, the view server, queues, thread names.

The view is tested through :mod:`foxglove_client` (the Foxglove WebSocket protocol,
schemas from the server's advertisement), never by mocking the server.
"""

from __future__ import annotations

import json
import math
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import foxglove
import numpy as np
import pytest
from foxglove_client import collect, stamp_ns

from sensorbench.drivers.robot_config import load_robot_config
from sensorbench.errors import LiveError
from sensorbench.fusion.estimate_stream import estimate_flags, estimate_times_ns
from sensorbench.fusion.scan_merge import MergeSetup, Mount
from sensorbench.live import ws_gate
from sensorbench.live.foxglove_view import PATH_POSES, PATH_STEP_NS, FoxgloveView
from sensorbench.live.odometry import estimate_rows
from sensorbench.live.runtime import LiveOptions, LiveRuntime, MergeWorker, live_failures
from sensorbench.live.threads import DropQueue, name_os_threads, os_thread_name
from sensorbench.live.udp import FORMAT, SIZE, PoseDatagram, UdpPublisher, parse_address, unpack
from sensorbench.logs import LidarTurns
from sensorbench.logs.scan_bins import ScanGrid, bin_turn


def _datagram(seq: int = 0) -> PoseDatagram:
    return PoseDatagram(4, 10, seq, 123_456_789, 1_700_000_000_000_000_000, (1.5, -2.25, 3.0),
                        (0.5, 0.0, -0.1), (1e-4, 1e-6, 0.0, 2e-4, 0.0, 3e-5))  # fmt: skip


def _pose(t_ns: int, pose: tuple[float, float, float]) -> PoseDatagram:
    """A pose for the view at host time ``t_ns`` (ns): x, y (m), yaw (rad)."""
    return PoseDatagram(0, 1, 0, t_ns, t_ns, pose, (0.0, 0.0, 0.0), (1e-4, 0, 0, 1e-4, 0, 1e-5))


def test_the_datagram_layout_is_the_documented_one() -> None:
    assert SIZE == 124 and FORMAT.startswith("<")
    data = _datagram(7).pack()
    # field by field at the documented offsets (docs/FORMAT.md), little-endian
    assert data[:4] == b"SBLP" and data[4] == 1 and data[5] == 4
    assert struct.unpack_from("<H", data, 6)[0] == 10 and struct.unpack_from("<I", data, 8)[0] == 7
    assert struct.unpack_from("<q", data, 12)[0] == 123_456_789
    assert struct.unpack_from("<3d", data, 28) == (1.5, -2.25, 3.0)
    assert struct.unpack_from("<6d", data, 76)[3] == 2e-4
    assert unpack(data) == _datagram(7)
    with pytest.raises(LiveError, match="not a sensorbench"):
        unpack(data[:-1])
    with pytest.raises(LiveError, match="version 2"):
        unpack(data[:4] + bytes([2]) + data[5:])


def test_datagrams_go_over_loopback_in_sequence_and_a_receiver_may_start_late() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    pub = UdpPublisher(*rx.getsockname())
    for _ in range(50):
        pub.send(_datagram(seq=999))  # the publisher numbers them
    got = [unpack(rx.recv(4096)) for _ in range(50)]
    assert [d.seq for d in got] == list(range(50)) and pub.sent == 50
    assert got[0].pose == (1.5, -2.25, 3.0)
    port = rx.getsockname()[1]
    rx.close()
    late = UdpPublisher("127.0.0.1", port)
    for _ in range(5):  # nobody listens yet: not seen by the sender, no failure (FORMAT.md)
        late.send(_datagram())
        time.sleep(0.01)  # the ICMP port unreachable of each comes back meanwhile
    assert (late.sent, late.dropped, late.last_error) == (5, 0, None)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", port))  # the robot's stack starts after live
    rx.settimeout(5)
    late.send(_datagram())
    assert unpack(rx.recv(4096)).seq == 5  # the gap says 5 were lost
    pub.close()
    late.close()
    rx.close()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("9000", ("127.0.0.1", 9000)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:5", ("::1", 5))],
)
def test_addresses(text, expected) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["host:port", "70000", "h:-1"])
def test_bad_addresses_are_refused(text) -> None:
    with pytest.raises(LiveError, match="HOST:PORT"):
        parse_address(text)


def test_a_destination_port_0_is_refused() -> None:
    """``--udp HOST:0`` was accepted and every datagram then dropped (EINVAL)."""
    with pytest.raises(LiveError, match=r"the port in 1\.\.65535"):
        parse_address("127.0.0.1:0", lowest=1)


def test_poses_reach_a_broadcast_address() -> None:
    """A LAN broadcast destination needs SO_BROADCAST: without it every datagram was
    dropped (EACCES)."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("0.0.0.0", 0))
    rx.settimeout(5.0)
    pub = UdpPublisher("255.255.255.255", rx.getsockname()[1])
    pub.send(PoseDatagram(0, 1, 0, 1, 2, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0,) * 6))
    if pub.dropped and "unreachable" in str(pub.last_error):
        pytest.skip(f"this host has no route for a LAN broadcast: {pub.last_error}")
    assert (pub.sent, pub.dropped) == (1, 0), pub.last_error
    assert len(rx.recv(256)) == SIZE
    pub.close()
    rx.close()


def test_a_full_drop_queue_drops_the_oldest_and_never_blocks() -> None:
    q = DropQueue(3)
    t0 = time.monotonic()
    for i in range(1000):
        q.put(i)
    assert time.monotonic() - t0 < 5  # no waiting (a generous bound on a busy machine)
    assert q.dropped == 997 and [q.get(0.1) for _ in range(3)] == [997, 998, 999]
    assert q.get(0.01) is None


def test_threads_get_kernel_names_after_their_device() -> None:
    assert os_thread_name("reader-lidar_front") == "lidar_front"
    assert os_thread_name("session-writer:s.h5") == "writer"
    assert len(os_thread_name("live-odometry-and-more")) == 15
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="reader-pods", daemon=True)
    t.start()
    try:
        assert name_os_threads() >= 1
        comm = Path(f"/proc/self/task/{t.native_id}/comm")
        if comm.exists():
            assert comm.read_text().strip() == "pods"
    finally:
        stop.set()
        t.join(5)


_CHURN = """
import threading, time
from sensorbench.live.threads import name_os_threads
stop = threading.Event()
def churn():
    while not stop.is_set():
        ts = [threading.Thread(target=time.sleep, args=(0.001 * (i % 3),)) for i in range(20)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
for _ in range(3):
    threading.Thread(target=churn, daemon=True).start()
end = time.monotonic() + 3.0
while time.monotonic() < end:
    name_os_threads()
stop.set()
"""


def test_naming_threads_while_others_end_never_crashes() -> None:
    """``pthread_setname_np`` on the handle of a thread that ended meanwhile read freed
    memory: with threads ending around it (the view's client threads, capture's stop
    threads) the process died of SIGSEGV, in 0.01-0.03 s of this churn in 5 of 5 runs."""
    done = subprocess.run([sys.executable, "-c", _CHURN], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


def _turn(n: int, t0: int, rng) -> LidarTurns:
    angle = np.mod(-np.linspace(0, 2 * np.pi, n, endpoint=False), 2 * np.pi).astype(np.float32)
    rng_m = rng.uniform(0.5, 6.0, n).astype(np.float32)
    rng_m[::17] = np.inf
    t = t0 + np.arange(n, dtype=np.int64) * 100_000
    return LidarTurns([t0], [0], [10.0], [n], [0], angle, rng_m, np.full(n, 100, np.uint16), t)


def test_the_view_serves_scans_transforms_and_poses_to_a_protocol_client() -> None:
    rng = np.random.default_rng(0)
    mounts = {"front": Mount(0.2, 0.0, 0.0), "rear": Mount(-0.2, 0.0, math.pi)}
    view = FoxgloveView("127.0.0.1", 0, mounts, (1_700_000_000_000_000_000, 0))
    view.start()
    turn = _turn(400, 1_000_000_000, rng)
    stop = threading.Event()

    def feed() -> None:
        k = 0
        while not stop.is_set():
            view.scan("front", turn)
            view.pose(_pose(2_000_000_000 + k * 50_000_000, (0.1 * k, 0.0, 0.05 * k)),
                      (time.monotonic_ns(),))
            view.event(3_000_000_000, "lidar_rear", "unplug", "gone")
            k += 1
            time.sleep(0.05)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        topics = ("/lidar/front", "/tf", "/pose", "/events")
        got = collect(
            f"ws://127.0.0.1:{view.port}",
            15.0,
            until=lambda r: all(len(r.messages.get(t, ())) >= 3 for t in topics),
        )
    finally:
        stop.set()
        feeder.join(5)
        view.stop()
    scan = got.messages["/lidar/front"][0]
    grid = ScanGrid.for_stream(turn.angle, turn.count)
    b = bin_turn(grid, turn.angle, turn.range, turn.intensity, turn.t_ns)
    # the turn's own time, on the wall clock
    assert stamp_ns(scan["timestamp"]) == 1_700_000_000_000_000_000 + 1_000_000_000
    ranges = np.array([float(r) for r in scan["ranges"]])
    np.testing.assert_array_equal(np.isnan(ranges), np.isnan(b.ranges))
    np.testing.assert_allclose(ranges[~np.isnan(ranges)], b.ranges[~np.isnan(b.ranges)])
    assert scan["start_angle"] == pytest.approx(float(b.angle_min))
    assert scan["frame_id"] == "front"
    tf = {(t["parent_frame_id"], t["child_frame_id"]) for t in got.messages["/tf"][0]["transforms"]}
    assert tf == {("odom", "base_link"), ("base_link", "front"), ("base_link", "rear")}
    log = got.messages["/events"][0]
    assert log["level"] == "WARNING" and log["name"] == "lidar_rear" and "unplug" in log["message"]
    assert view.dropped == 0 and view.latencies.n > 0


def _recorded(view: FoxgloveView, path: Path) -> foxglove.mcap.MCAPWriter:
    """A viewer of every channel of ``view`` (started): an MCAP recording of its context."""
    return foxglove.open_mcap(path, context=view._ctx)


def test_the_path_keeps_coming_twice_a_second_after_it_holds_its_last_2000_poses(
    tmp_path,
) -> None:
    # 250 s of poses at the path's 0.1 s: 500 more than PATH_POSES; docs/LIVE.md: the path
    # twice a second (every 5th path pose), so 2 per second of data over the whole run
    n = PATH_POSES + 500
    view = FoxgloveView("127.0.0.1", 0, {}, (1_700_000_000_000_000_000, 0), queue_size=n + 10)
    view.start()
    viewer = _recorded(view, tmp_path / "view.mcap")
    for k in range(n):
        view.pose(_pose(k * PATH_STEP_NS, (0.01 * k, 0.0, 0.0)))
    view.stop(timeout_s=60.0)
    viewer.close()
    assert view.dropped == 0 and view.last_error is None
    assert view.published["/pose"] == n
    assert view.published["/path"] == 2 * n * PATH_STEP_NS // 10**9


@pytest.mark.parametrize("offered", [["foxglove.websocket.v1"], ["foxglove.sdk.v1"]])
def test_a_client_offering_either_name_of_the_protocol_is_served(offered) -> None:
    """The protocol's published name alone (``foxglove.websocket.v1``) is accepted as
    well as the SDK's; the client is another process, speaking the protocol."""
    view = FoxgloveView("127.0.0.1", 0, {}, (1_700_000_000_000_000_000, 0))
    view.start()
    stop = threading.Event()

    def feed() -> None:
        k = 0
        while not stop.is_set():
            view.pose(_pose(2_000_000_000 + k, (1.5, -0.25, 0.0)))
            k += 1
            time.sleep(0.05)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        client = Path(__file__).with_name("foxglove_client.py")
        done = subprocess.run([sys.executable, str(client), f"ws://127.0.0.1:{view.port}", "15",
                               *offered], capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        stop.set()
        feeder.join(5)
        view.stop()
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["subprotocol"] == offered[0]
    position = got["pose"][0]["pose"]["position"]
    assert (position["x"], position["y"]) == (1.5, -0.25)


def _eof_after(c: socket.socket, limit_s: float, trickle_s: float = math.inf) -> float:
    """Seconds until the gate ends ``c`` (EOF or reset), sending a header byte every
    ``trickle_s``; inf if it is still open after ``limit_s``."""
    t0 = time.monotonic()
    while (left := limit_s - (time.monotonic() - t0)) > 0:
        c.settimeout(min(trickle_s, left))
        try:
            if c.recv(1) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            c.send(b"a")
        except OSError:
            return time.monotonic() - t0
    return math.inf


def test_the_gate_ends_a_slow_handshake_at_its_deadline_and_at_close(monkeypatch) -> None:
    """A slow-loris client (a header byte every tenth of the deadline, so no single
    read waits long) is closed when the whole handshake's deadline has passed; close()
    ends a handshake in progress; past MAX_CONNECTIONS (32, docs/LIVE.md) a connection
    is closed at once."""
    deadline_s = 1.0
    monkeypatch.setattr(ws_gate, "_HANDSHAKE_S", deadline_s)
    inner = socket.create_server(("127.0.0.1", 0))  # a server that never answers
    gate = ws_gate.SubprotocolGate("127.0.0.1", 0, inner.getsockname()[1])
    clients = []
    try:
        connecting = time.monotonic()  # the gate's accept, and its deadline, start after
        c = socket.create_connection(("127.0.0.1", gate.port), timeout=5)
        clients.append(c)
        c.send(b"GET / HTTP/1.1\r\nX: ")
        start = time.monotonic()
        took = start - connecting + _eof_after(c, 3 * deadline_s, trickle_s=deadline_s / 10)
        # never before the deadline (the kernel may finish the connection, and the gate
        # accept it, before create_connection returns here); a margin of half
        assert deadline_s <= took <= 1.5 * deadline_s
        monkeypatch.setattr(ws_gate, "_HANDSHAKE_S", 60.0)
        clients += [socket.create_connection(("127.0.0.1", gate.port), timeout=5)
                    for _ in range(33)]  # fmt: skip
        for c in clients[1:]:
            c.send(b"GET / HTTP/1.1\r\n")
        assert _eof_after(clients[-1], 5.0) < 5.0  # the 33rd: closed at once
        assert _eof_after(clients[1], 0.5) == math.inf  # the others wait for their heads
    finally:
        gate.close()
    assert all(_eof_after(c, 5.0) < 5.0 for c in clients[1:-1])  # close() ended them
    for c in clients:
        c.close()
    inner.close()


def test_the_view_on_every_ipv6_address_serves_ipv4_too_and_is_announced_in_brackets() -> None:
    """``--foxglove [::]:PORT`` served IPv6 only (an IPv4 laptop was refused) and was
    announced as ``ws://:::PORT``."""
    inner = socket.create_server(("127.0.0.1", 0))
    gate = ws_gate.SubprotocolGate("::", 0, inner.getsockname()[1])
    try:
        for host in ("127.0.0.1", "::1"):
            socket.create_connection((host, gate.port), timeout=5).close()
    finally:
        gate.close()
        inner.close()
    assert ws_gate.ws_url("::", 8765) == "ws://[::]:8765"
    assert ws_gate.ws_url("0.0.0.0", 8765) == "ws://0.0.0.0:8765"

def test_a_viewer_that_stops_reading_never_holds_the_producers() -> None:
    """A client subscribes and then reads nothing: the producers go on at full speed and
    the view's queue drops (counted) instead of waiting."""
    rng = np.random.default_rng(1)
    view = FoxgloveView("127.0.0.1", 0, {"front": Mount(0, 0, 0)}, (0, 0), queue_size=4)
    view.start()
    try:
        import asyncio
        import json

        import websockets

        async def stalled_client() -> None:
            async with websockets.connect(
                f"ws://127.0.0.1:{view.port}", subprotocols=["foxglove.sdk.v1"],
                max_size=None, max_queue=1,
            ) as ws:  # fmt: skip
                await ws.recv()
                adv = json.loads(await ws.recv())
                subs = [{"id": i + 1, "channelId": c["id"]} for i, c in enumerate(adv["channels"])]
                await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
                t0 = time.monotonic()
                big = _turn(2000, 10**9, rng)
                for k in range(3000):  # far more than the viewer can take in
                    view.scan("front", big)
                    view.pose(_pose(k, (0.0, 0.0, 0.0)))
                took = time.monotonic() - t0
                assert took < 30, took  # producers never waited on the viewer

        asyncio.run(asyncio.wait_for(stalled_client(), 120))
    finally:
        view.stop()
    assert view.dropped > 0


def test_an_item_the_view_fails_on_is_counted_and_reported_and_the_view_goes_on(
    tmp_path,
) -> None:
    """The view thread survives an item it cannot publish; the failure is counted and its
    text kept (``LiveRuntime.status`` puts it among the errors the status line shows)."""
    view = FoxgloveView("127.0.0.1", 0, {}, (0, 0))
    view.start()
    viewer = _recorded(view, tmp_path / "view.mcap")
    try:
        view.status({"elapsed_s": object()})  # not JSON, not a float
        view.status({"elapsed_s": 1.0})
        deadline = time.monotonic() + 10
        while view.published.get("/status", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.published.get("errors") == 1 and view.published.get("/status") == 1
        assert view.last_error is not None and view.last_error.startswith("live-view: status:")
    finally:
        view.stop()
        viewer.close()


def test_the_view_builds_nothing_nobody_subscribes_to_and_keeps_what_a_later_viewer_sees(
    tmp_path,
) -> None:
    """No viewer: no message is built (the view costs no CPU worth its name), but the path,
    the events' history and each lidar's grid (its first turn's) are kept; a viewer that
    comes later gets the scans on that grid and the path of the whole run."""
    rng = np.random.default_rng(2)
    view = FoxgloveView("127.0.0.1", 0, {"front": Mount(0.2, 0.0, 0.0)}, (0, 0))
    view.start()
    first, other = _turn(400, 10**9, rng), _turn(300, 2 * 10**9, rng)  # other step: 1.2°
    try:
        view.scan("front", first)
        for k in range(40):
            view.scan("front", other)
            view.merged(other)
            view.pose(_pose((k + 1) * PATH_STEP_NS, (0.1 * k, 0.0, 0.0)), (time.monotonic_ns(),))
            deadline = time.monotonic() + 10
            while len(view._path) < k + 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            # between two of the path's poses: nobody sees it, it is not even queued
            view.pose(_pose((k + 1) * PATH_STEP_NS + PATH_STEP_NS // 2, (0.0, 0.0, 0.0)),
                      (time.monotonic_ns(),))  # fmt: skip
            view.event(k, "front", "note", "n")
            view.status({"elapsed_s": 1.0})
        deadline = time.monotonic() + 10
        while len(view._events) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.published == {} and view.dropped == 0 and view.last_error is None
        assert len(view._path) == 40 and len(view._events) == 40 and view.latencies.n == 40
        viewer = _recorded(view, tmp_path / "view.mcap")
        view.scan("front", other)
        view.pose(_pose(41 * PATH_STEP_NS, (4.0, 0.0, 0.0)))  # the 41st path pose: sent
        deadline = time.monotonic() + 10
        while len(view.published) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        viewer.close()
    finally:
        view.stop()
    assert view.published == {"/lidar/front": 1, "/tf": 1, "/pose": 1, "/path": 1}
    assert view._grids["front"] == ScanGrid.for_stream(first.angle, first.count)


def test_a_steps_estimate_rows_in_scalars_are_the_vectorised_ones_bit_for_bit() -> None:
    """The live step's sample times and flags equal estimate_times_ns and estimate_flags
    on many frames: halves of a nanosecond (ties to even), negative times, long sessions."""
    rng = np.random.default_rng(3)
    n = 20_000
    t_s = np.concatenate([rng.uniform(-1.0, 1e5, n), (np.arange(-500, 500) + 0.5) * 1e-9,
                          np.arange(n) * 0.005])  # fmt: skip
    degraded, coasting = rng.random(t_s.size) < 0.3, rng.random(t_s.size) < 0.3
    t0_ns = 1_234_567_890_123_456
    t_ns, flags = estimate_rows(t0_ns, t_s.tolist(), degraded.tolist(), coasting.tolist())
    assert t_ns == estimate_times_ns(t0_ns, t_s).tolist()
    assert flags == estimate_flags(degraded, coasting).tolist()
    assert set(flags) == {0, 4, 8, 4 | 8}


def test_udp_without_a_pod_model_is_a_usage_error(tmp_path) -> None:
    """Without --pods no filter runs: ``live --udp`` ran and sent nothing, without a word."""
    from click.testing import CliRunner

    from sensorbench.cli import cli

    config = Path(__file__).parents[1] / "examples" / "robot.toml"
    args = ["live", "--config", str(config), "--allow-missing", "--udp", "127.0.0.1:9870",
            "-o", str(tmp_path / "s.h5")]
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 2 and "--udp sends the filters' poses" in done.output, done.output
    assert not (tmp_path / "s.h5").exists()


def test_a_merge_that_fails_is_an_event_and_makes_live_exit_1() -> None:
    # it was a status-line "LIVE ERROR" only: the session had no trace, live exited 0
    class Writer:
        def __init__(self) -> None:
            self.error = None
            self.events: list[tuple[str, str, str]] = []

        def event(self, t_ns: int, source: str, kind: str, message: str = "") -> None:
            self.events.append((source, kind, message))

    class Broken:
        def push(self, which: str, turns: LidarTurns) -> LidarTurns:
            raise ValueError("a turn it cannot take")

        def flush(self) -> LidarTurns:
            return LidarTurns.empty()

    worker = MergeWorker("front", "rear", MergeSetup(Mount(0, 0, 0), Mount(0, 0, 0)), print)
    worker.merger = Broken()  # type: ignore[assignment]
    writer = Writer()
    worker.start(writer)  # type: ignore[arg-type]
    worker.turns("front", LidarTurns.empty())
    worker.stop()
    assert writer.events == [("live", "error", "live merge failed on a push: "
                              "ValueError('a turn it cannot take')")]  # fmt: skip
    result = SimpleNamespace(error=None, devices=[], exit_code=0)
    config = load_robot_config(Path(__file__).parents[1] / "examples" / "robot.toml")
    runtime = LiveRuntime(config, None, LiveOptions())
    runtime.merge = worker
    assert live_failures(result, runtime) == (  # type: ignore[arg-type]
        1, ["live-merge: ValueError('a turn it cannot take')"])


def test_a_merge_that_fails_at_its_final_flush_still_stops_at_once() -> None:
    """The flush at the stop raising (the writer failed: a full disk) left the thread
    waiting on its inbox for good: the stop took its whole deadline and reported a hang
    instead of the failure."""

    class FailingFlush:
        def flush(self) -> LidarTurns:
            raise OSError(28, "No space left on device")

    worker = MergeWorker("front", "rear", MergeSetup(Mount(0, 0, 0), Mount(0, 0, 0)), print)
    worker.merger = FailingFlush()  # type: ignore[assignment]
    worker.start(None)  # type: ignore[arg-type]
    t0 = time.monotonic()
    worker.stop(timeout_s=5.0)
    assert time.monotonic() - t0 < 2.5  # half the deadline: the join, not the timeout
    assert worker.last_error == "live-merge: OSError(28, 'No space left on device')"
