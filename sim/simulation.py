"""A simulated run: world, trajectory and every sensor model, deterministic per seed, each
sensor on its own random stream, written to a session with its ``/truth`` (docs/SIMULATION.md)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from sensorbench import __version__
from sensorbench.errors import SessionError, SimError
from sensorbench.logs.model_file import dumps_toml
from sensorbench.sim.scenario import Scenario, load_scenario
from sensorbench.sim.sensor_lidar import LidarSamples, simulate_lidar
from sensorbench.sim.sensor_pods import PodSamples, simulate_pods
from sensorbench.sim.sensor_pose import PoseSamples, simulate_mocap, simulate_pose_sensor
from sensorbench.sim.trajectory import Trajectory, build_trajectory
from sensorbench.sim.world import World, build_obstacles, build_world

if TYPE_CHECKING:
    from sensorbench.logs import LidarTurns, SessionWriter

SIM_T0_NS = 1_000_000_000_000
"""Host time (ns) of simulated time 0 in sessions written by :func:`simulate_to_session`."""

_T = TypeVar("_T")
TRUTH_RATE_HZ = 500.0
"""Rate of the true pose and twist stored in ``/truth/pose`` (Hz)."""
MODEL_MB_PER_S = {"lidar": 1.0, "pods": 0.3, "mocap": 0.02, "pose_sensor": 0.01}
"""Peak memory while one model builds its run (MB per simulated second; measured peaks on
``square``: an LD19 0.85, the pods 0.29, mocap 0.018, the pose sensor 0.008)."""
MODEL_MAX_MB = 1800.0
"""Largest run a model builds in memory (MB): a lidar takes runs of up to 1 800 s."""
MAX_DURATION_S = MODEL_MAX_MB / min(MODEL_MB_PER_S.values())
"""Longest run any model takes (s): the pose sensor's."""

SENSOR_STREAMS = ("pods", "imu", "mocap", "pose_sensor")


class Simulation:
    """One simulated run of a scenario (a :class:`Scenario`, a shipped name or a path) at
    ``seed`` (same scenario and seed: identical streams) and campaign ``session`` (default
    ``seed % n_sessions``). SimError: a bad seed or session, or a trajectory that drives
    the footprint into an obstacle or through a wall."""

    def __init__(
        self, scenario: Scenario | str | Path, seed: int = 0, session: int | None = None
    ) -> None:
        sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise SimError(f"seed must be a non-negative integer, got {seed!r}")
        if sc.n_sessions and sc.session is None:
            sc = sc.for_session(int(seed) % sc.n_sessions if session is None else session)
        elif session is not None and session != sc.session:
            raise SimError(f"scenario {sc.name!r} is not a campaign; drop session={session}")
        self.scenario = sc
        self.seed = int(seed)
        self.world: World = build_world(sc.world)
        r = sc.robot
        self.start_pose = (r["start_xy_m"][0], r["start_xy_m"][1], np.deg2rad(r["start_yaw_deg"]))
        self.trajectory: Trajectory = build_trajectory(sc.trajectory, self.start_pose)
        self.duration_s: float = float(sc.params["duration_s"] or self.trajectory.duration_s)
        if self.duration_s <= 0:
            raise SimError(f"{sc.source}: the run lasts 0 s; set duration_s or a trajectory")
        if not self.duration_s <= MAX_DURATION_S:
            raise SimError(
                f"{sc.source}: the run lasts {self.duration_s:.6g} s; the simulator builds "
                f"runs in memory and takes at most {MAX_DURATION_S:g} s (a lidar at most "
                f"{MODEL_MAX_MB / MODEL_MB_PER_S['lidar']:g} s): split it into shorter scenarios")
        self._check_clearance()
        self.body: World = World(build_obstacles(r["occluders"]))
        for name, p in sc.lidars.items():
            if p["enabled"] and p["sees_robot"]:
                mx, my = p["mount_xy_m"]
                if self.body.contains_obstacle_point([mx], [my])[0]:
                    raise SimError(
                        f"{sc.source}: lidars.{name}.mount_xy_m lies inside a robot.occluders "
                        "entry, so it would see nothing; move it or set sees_robot = false"
                    )
        self._cache: dict[str, object] = {}

    def _check_clearance(self) -> None:
        """SimError at the first 50-ms step whose footprint leaves the lab or enters an
        obstacle (checked 1 000 s at a time: memory stays bounded on long runs)."""
        fp = np.asarray(self.scenario.robot["footprint_m"], float)
        w, d = self.scenario.world["size_m"]
        for t0 in np.arange(0.0, self.duration_s, 1000.0):
            t = np.arange(t0, min(t0 + 1000.0, self.duration_s), 0.05)
            x, y, yaw = self.trajectory.pose(t)
            c, s = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
            px = x[:, None] + c * fp[None, :, 0] - s * fp[None, :, 1]
            py = y[:, None] + s * fp[None, :, 0] + c * fp[None, :, 1]
            outside = (np.abs(px) > w / 2) | (np.abs(py) > d / 2)
            inside = self.world.contains_obstacle_point(px.ravel(), py.ravel()).reshape(px.shape)
            bad = (outside | inside).any(axis=1)
            if bad.any():
                k = int(np.argmax(bad))
                where = "outside the lab walls" if outside[k].any() else "inside an obstacle"
                raise SimError(
                    f"{self.scenario.source}: the robot footprint is {where} at t = {t[k]:.2f} "
                    f"s (pose x = {x[k]:.2f} m, y = {y[k]:.2f} m); move robot.start_xy_m or "
                    "the obstacles, or shorten the trajectory"
                )

    def rng(self, name: str) -> np.random.Generator:
        """A fresh copy of sensor ``name``'s own random stream (seed, scenario, campaign
        session): scenarios simulated at one seed do not share their noise."""
        sc = self.scenario
        key = [self.seed, zlib.crc32(sc.name.encode("utf-8")), zlib.crc32(name.encode("utf-8"))]
        return np.random.default_rng(key if sc.session is None else [*key, int(sc.session)])

    def lidar_names(self) -> list[str]:
        """Names of the enabled lidars, in scenario order."""
        return [n for n, p in self.scenario.lidars.items() if p["enabled"]]

    def pick_lidar(self, models: tuple[str, ...], wanted: str | None) -> str:
        """The enabled lidar ``wanted`` (default: the first) of one of ``models``."""
        names = [n for n in self.lidar_names() if self.scenario.lidars[n]["model"] in models]
        name = wanted or (names[0] if names else "")
        if name not in names:
            raise SimError(
                f"scenario {self.scenario.name!r} has no enabled {'/'.join(models)} lidar "
                f"{name!r}; it has {', '.join(names) or 'none'}"
            )
        return name

    def _lidar_params(self, name: str) -> dict:
        if name not in self.scenario.lidars:
            raise SimError(
                f"no lidar {name!r} in scenario {self.scenario.name!r}; "
                f"lidars: {', '.join(self.scenario.lidars) or 'none'}"
            )
        p = self.scenario.lidars[name]
        if not p["enabled"]:
            raise SimError(f"lidar {name!r} is disabled in scenario {self.scenario.name!r}")
        return p

    def lidar_mount(self, name: str) -> tuple[float, float, float]:
        """Sensor pose in the body frame: x m, y m, yaw rad (CCW)."""
        p = self._lidar_params(name)
        return (p["mount_xy_m"][0], p["mount_xy_m"][1], float(np.deg2rad(p["mount_yaw_deg"])))

    def _cached(self, key: str, make: Callable[..., _T], *args: Any, **kw: Any) -> _T:
        """``make(*args, **kw)``, computed once per ``key``. SimError: the run is longer than
        the model builds in memory (:data:`MODEL_MAX_MB`)."""
        if key not in self._cache:
            kind = key.split(":")[0]
            longest_s = MODEL_MAX_MB / MODEL_MB_PER_S[kind]
            if not self.duration_s <= longest_s:
                raise SimError(
                    f"{self.scenario.source}: the run lasts {self.duration_s:.6g} s; the "
                    f"{kind} model builds it in memory (about {MODEL_MB_PER_S[kind]:g} MB per "
                    f"s) and takes at most {longest_s:g} s: split it into shorter scenarios")
            self._cache[key] = make(*args, **kw)
        return self._cache[key]  # type: ignore[return-value]

    def lidar(self, name: str, samples_per_s: float | None = None) -> LidarSamples:
        """Device-native samples of lidar ``name`` over the whole run; at
        ``samples_per_s`` (Hz) instead of the scenario's when given (an A1's express
        scan: the same turns and scene, sampled twice as often)."""
        key = f"lidar:{name}" if samples_per_s is None else f"lidar:{name}@{samples_per_s:g}"
        p = self._lidar_params(name)
        if samples_per_s is not None:
            p = {**p, "samples_per_s": float(samples_per_s)}
        args = (p, self.trajectory, self.world, self.duration_s, self.rng(f"lidar:{name}"))
        return self._cached(key, simulate_lidar, *args, body=self.body)

    def enabled(self, sensor: str) -> bool:
        """Whether ``pods``, ``imu``, ``mocap`` or ``pose_sensor`` (or a lidar) is enabled."""
        if sensor in SENSOR_STREAMS:
            return bool(self.scenario.params[sensor]["enabled"])
        return sensor in self.lidar_names()

    def _require(self, sensor: str) -> None:
        if not self.scenario.params[sensor]["enabled"]:
            raise SimError(f"{sensor} is disabled in scenario {self.scenario.name!r}")

    def pods(self) -> PodSamples:
        """The pod MCU's frames (with the IMU's yaw and yaw rate, nan if the IMU is off)."""
        self._require("pods")
        sc, tr, dur = self.scenario, self.trajectory, self.duration_s
        rngs = (self.rng("pods"), self.rng("imu"))
        return self._cached("pods", simulate_pods, sc.pods, sc.imu, tr, dur, *rngs)

    def mocap(self) -> PoseSamples:
        """Motion capture samples (occlusion gaps have ``valid`` False and nan poses)."""
        self._require("mocap")
        args = (self.trajectory, self.world.in_mocap_volume, self.duration_s, self.rng("mocap"))
        return self._cached("mocap", simulate_mocap, self.scenario.mocap, *args)

    def pose_sensor(self) -> PoseSamples:
        """Pose sensor samples with their true error and relocalization times."""
        self._require("pose_sensor")
        args = (self.trajectory, self.duration_s, self.rng("pose_sensor"))
        return self._cached("pose_sensor", simulate_pose_sensor, self.scenario.pose_sensor, *args)


def _ns(t_s: np.ndarray) -> np.ndarray:
    return SIM_T0_NS + np.round(np.asarray(t_s, float) * 1e9).astype(np.int64)


def complete_turns_mask(samples: LidarSamples, duration_s: float) -> np.ndarray:
    """Samples of turns that started at or after 0 and ended by ``duration_s`` (s):
    sessions store only complete turns, as drivers do."""
    k = samples.turn
    start = samples.turn_t_start_s[k]
    end = start + samples.turn_period_s[k]
    return (start >= 0.0) & (end <= duration_s)


def lidar_turns(samples: LidarSamples, mask: np.ndarray | None = None) -> LidarTurns:
    """Group device-native samples (those selected by ``mask``) into stored turns.

    Stored conventions: angle rad CCW in [0, 2π), range m with ``inf`` for no return,
    host times int64 ns. A turn next to a skipped one lost the packets that straddled
    into it and is flagged ``PACKET_LOSS``, as a driver flags a device-time gap.
    """
    from sensorbench.logs import NO_DEVICE_TIME, LidarTurns, TurnFlag

    sel = np.ones(samples.t_s.size, bool) if mask is None else np.asarray(mask, bool)
    turn = samples.turn[sel]
    if turn.size == 0:
        return LidarTurns.empty()
    t_s = samples.t_s[sel]
    starts = np.flatnonzero(np.r_[True, turn[1:] != turn[:-1]])
    count = np.diff(np.r_[starts, turn.size])
    angle = np.mod(-np.deg2rad(samples.angle_deg_cw[sel]), 2 * np.pi).astype(np.float32)
    angle[angle >= np.float32(2 * np.pi)] = 0.0
    rng_m = np.where(samples.range_m[sel] > 0, samples.range_m[sel], np.inf).astype(np.float32)
    t_ns = _ns(t_s)
    if samples.model == "ld19":
        device = np.floor(t_s[starts] * 1e3).astype(np.int64) * 1_000_000
        speed = np.round(samples.speed_deg_s[sel][starts]) / 360.0
    else:
        device = np.full(starts.size, NO_DEVICE_TIME, np.int64)
        speed = np.full(starts.size, np.nan)
    skipped = samples.turn_skipped
    k = turn[starts]
    near_skip = skipped[np.maximum(k - 1, 0)] | skipped[np.minimum(k + 1, skipped.size - 1)]
    flags = np.where(near_skip, int(TurnFlag.PACKET_LOSS), 0).astype(np.uint16)
    return LidarTurns(t_first_ns=t_ns[starts], device_ns=device, speed_hz=speed, count=count,
        flags=flags, angle=angle, range=rng_m, intensity=samples.intensity[sel].astype(np.uint16),
        t_ns=t_ns)  # fmt: skip


def robot_config_toml(sc: Scenario) -> str:
    """A ``robot.toml`` (the format of ``examples/robot.toml``) describing the simulated robot."""
    devices = [
        {"name": name, "kind": p["model"], "port": f"sim:{name}",
         "baud": 230400 if p["model"] == "ld19" else 115200,
         "mount": {"x_m": p["mount_xy_m"][0], "y_m": p["mount_xy_m"][1],
                   "yaw_deg": p["mount_yaw_deg"]}}
        for name, p in sc.lidars.items()
        if p["enabled"]
    ]  # fmt: skip
    pods = sc.pods
    doc: dict = {"robot": {"name": f"sim-{sc.name}", "footprint_m": sc.robot["footprint_m"]}}
    doc["devices"] = devices
    if pods["enabled"]:
        devices.append({"name": "pods", "kind": "pods", "port": "sim:pods", "baud": 115200,
            "protocol": "binary", "counter_bits": pods["counter_bits"], "n_pods": 3,
            "imu": bool(sc.imu["enabled"])})  # fmt: skip
        doc["pods"] = {
            "wheel_radius_m": pods["wheel_radius_m"][0],
            "counts_per_rev": int(pods["counts_per_rev"][0]),
            "wheels": [
                {"x_m": xy[0], "y_m": xy[1], "angle_deg": a}
                for xy, a in zip(pods["positions_m"], pods["rolling_angles_deg"], strict=False)
            ],
        }
    head = (
        "# simulated robot: the scenario's true mounts and pod geometry (robot.toml holds one\n"
        "# wheel radius and counts/rev, pod 0's; per-pod values are in /truth/pods/geometry)\n"
    )
    return head + dumps_toml(doc)


def simulate_to_session(
    sc: Scenario | str | Path, seed: int, path: str | Path, *, session: int | None = None,
    overwrite: bool = False,
) -> Path:  # fmt: skip
    """Simulate ``sc`` at ``seed`` and write every enabled stream plus ``/truth`` to ``path``
    (host times ``SIM_T0_NS + t_s·1e9`` ns); returns ``path``. SimError: invalid scenario
    or seed; SessionError: the file cannot be written."""
    from sensorbench.logs import SessionWriter

    path = Path(path)
    if path.exists() and not overwrite:
        raise SessionError(f"{path} exists; choose another name or remove it first")
    sim = Simulation(sc, seed, session)
    scn = sim.scenario
    attrs = {"simulated": True, "scenario": scn.name, "seed": sim.seed, "sim_t0_ns": SIM_T0_NS,
        "duration_s": sim.duration_s}  # fmt: skip
    if scn.session is not None:
        attrs["campaign_session"] = scn.session
    for name in sim.lidar_names():  # every model runs (and is cached) before the file exists
        sim.lidar(name)
    for name in ("pods", "mocap", "pose_sensor"):
        if sim.enabled(name):
            getattr(sim, name)()
    config = robot_config_toml(scn)
    with SessionWriter(
        path, label=scn.name, config_text=config, swmr=False, attrs=attrs, overwrite=overwrite
    ) as w:
        _write_truth(w, sim)
        _declare_streams(w, sim)  # all before the first append starts the writer
        w.event(SIM_T0_NS, "simulate", "start", f"scenario {scn.name} seed {sim.seed}")
        _append_streams(w, sim)
        w.event(int(_ns(sim.duration_s)), "simulate", "stop", "end of scenario")
    return path


def _declare_streams(w: SessionWriter, sim: Simulation) -> None:
    """Declare the simulated lidar, pod, mocap and pose-sensor streams with their attributes."""
    scn = sim.scenario
    for name in sim.lidar_names():
        model = "LD19" if scn.lidars[name]["model"] == "ld19" else "A1"
        w.add_lidar(name, attrs={"model": model, "port_path": f"sim:{name}", "serial": "",
            "frame": name, "mount_xy_yaw": list(sim.lidar_mount(name)), "simulated": True})
    if sim.enabled("pods"):
        w.add_encoder("pods", n_counts=3, attrs={"counter_bits": scn.pods["counter_bits"],
            "imu": bool(scn.imu["enabled"]), "device_clock": "MCU microseconds (ns in device_ns)",
            "simulated": True})  # fmt: skip
    frames = {"mocap": "world", "pose_sensor": "sensor map"}
    for name, frame in frames.items():
        if sim.enabled(name):
            rate = getattr(scn, name)["rate_hz"]
            w.add_pose(name, kind=name, attrs={"rate_hz": rate, "frame": frame, "simulated": True})


def _append_streams(w: SessionWriter, sim: Simulation) -> None:
    """Write the simulated samples: complete lidar turns, pod frames, poses, and the pose
    sensor's relocalizations as events."""
    from sensorbench.logs import EncoderBatch, PoseBatch

    for name in sim.lidar_names():
        ls = sim.lidar(name)
        w.append_turns(name, lidar_turns(ls, complete_turns_mask(ls, sim.duration_s)))
    if sim.enabled("pods"):
        pods = sim.pods()
        seq = np.arange(pods.t_s.size, dtype=np.int64)
        w.append_encoder("pods", EncoderBatch(host_ns=_ns(pods.t_s),
            device_ns=pods.mcu_time_us * 1000, seq=seq, counts=pods.counts, yaw=pods.yaw_rad,
            yaw_rate=pods.yaw_rate_rad_s))  # fmt: skip
    for name in ("mocap", "pose_sensor"):
        if sim.enabled(name):
            ps = getattr(sim, name)()
            w.append_pose(
                name, PoseBatch(_ns(ps.t_s), ps.position, ps.quat_xyzw, ps.valid, ps.flags)
            )
    if sim.enabled("pose_sensor"):
        ps = sim.pose_sensor()
        for t, wrong in zip(ps.reloc_t_s, ps.reloc_wrong, strict=False):
            what = "wrong relocalization (gross offset)" if wrong else "relocalized"
            w.event(int(_ns(t)), "pose_sensor", "relocalization", what)


def write_common_truth(
    w: SessionWriter, sim: Simulation, to_ns: Callable[[np.ndarray], np.ndarray], t0_ns: int,
    attrs: dict[str, Any],
) -> None:  # fmt: skip
    """The truth every simulated session carries (docs/SIMULATION.md): its attributes
    plus ``attrs``, the body pose, the pods' geometry and gyro bias, the relocalizations;
    ``to_ns`` maps simulated seconds to the session's int64 ns."""
    scn = sim.scenario
    w.set_truth_attrs({
        "scenario_name": scn.name, "scenario_toml": scn.to_toml(), "seed": sim.seed,
        "campaign_session": -1 if scn.session is None else scn.session,
        "duration_s": sim.duration_s, "t0_ns": int(t0_ns), "software_version": __version__,
        **attrs,
    })  # fmt: skip
    t = np.arange(0.0, sim.duration_s, 1.0 / TRUTH_RATE_HZ)
    x, y, yaw = sim.trajectory.pose(t)
    w.set_truth("pose/t_ns", to_ns(t))
    w.set_truth("pose/x_y_yaw", np.column_stack([x, y, yaw]),
        {"units": "m, m, rad (yaw unwrapped)", "frame": "world"})  # fmt: skip
    if sim.enabled("pods"):
        pods = sim.pods()
        w.set_truth("pods/geometry", pods.geometry.as_array(),
            {"columns": "x_m y_m angle_rad radius_m counts_per_rev m_per_count"})  # fmt: skip
        w.set_truth("pods/gyro_bias_rad_s", pods.true_gyro_bias_rad_s)
    if sim.enabled("pose_sensor"):
        ps = sim.pose_sensor()
        w.set_truth("pose_sensor/reloc_t_ns", to_ns(ps.reloc_t_s))
        axes = {"columns": "x y z roll pitch yaw"}
        w.set_truth("pose_sensor/reloc_offset", ps.reloc_offset, axes)
        w.set_truth("pose_sensor/reloc_wrong", ps.reloc_wrong)


def _write_truth(w: SessionWriter, sim: Simulation) -> None:
    scn = sim.scenario
    write_common_truth(w, sim, _ns, SIM_T0_NS, {"scenario_source_text": scn.text})
    t = np.arange(0.0, sim.duration_s, 1.0 / TRUTH_RATE_HZ)
    seg, circ, body = {"columns": "x0 y0 x1 y1"}, {"columns": "cx cy r"}, {"frame": "body"}
    for key, value, attrs in (
        ("pose/twist_body", np.column_stack(sim.trajectory.twist_body(t)),
         {"units": "m/s, m/s, rad/s", "frame": "body"}),
        ("world/segments", sim.world.segments, {"units": "m", **seg}),
        ("world/circles", sim.world.circles, {"units": "m", **circ}),
        ("robot/occluder_segments", sim.body.segments, {"units": "m", **body, **seg}),
        ("robot/occluder_circles", sim.body.circles, {"units": "m", **body, **circ}),
        ("robot/footprint_m", np.asarray(scn.robot["footprint_m"], float), {"units": "m", **body}),
    ):  # fmt: skip
        w.set_truth(key, value, attrs)
    w.set_truth_attrs({"mocap_volume_m": list(sim.world.mocap_volume)}, "world")
    for name in sim.lidar_names():  # turn schedule (ns, s), the turns stored, their points
        ls, g = sim.lidar(name), f"lidar/{name}"
        w.set_truth(f"{g}/turn_t_start_ns", _ns(ls.turn_t_start_s))
        w.set_truth(f"{g}/turn_period_s", ls.turn_period_s)
        w.set_truth(f"{g}/turn_skipped", ls.turn_skipped)
        keep = complete_turns_mask(ls, sim.duration_s)
        w.set_truth(f"{g}/turn_index", np.unique(ls.turn[keep]),
            {"meaning": "turn index of each stored turn (into turn_* arrays)"})  # fmt: skip
        kinds = {"meaning": "0 normal/no return, 1 edge, 2 false"}
        w.set_truth(f"{g}/kind", ls.kind[keep], kinds)
        w.set_truth(f"{g}/true_range_m", ls.true_range_m[keep].astype(np.float32))
        mount = list(sim.lidar_mount(name))
        w.set_truth_attrs({"params_toml": dumps_toml(ls.params), "mount_xy_yaw": mount}, g)
    if sim.enabled("pods"):
        pods = sim.pods()
        w.set_truth("pods/kinematic_matrix", pods.geometry.kinematic_matrix(),
            {"meaning": "dn = W (dx, dy, dtheta), counts per m / per rad"})  # fmt: skip
        w.set_truth("pods/true_distance_m", pods.true_distance_m)
        w.set_truth("pods/measured_distance_m", pods.measured_distance_m)
        w.set_truth_attrs({"params_toml": dumps_toml(pods.params)}, "pods")
    if sim.enabled("mocap"):
        occ = np.asarray(sim.mocap().params["occlusion_intervals_s"], float).reshape(-1, 2)
        w.set_truth("mocap/occlusion_ns", _ns(occ) if occ.size else np.zeros((0, 2), np.int64))
    if sim.enabled("pose_sensor"):
        ps = sim.pose_sensor()
        w.set_truth("pose_sensor/error", ps.error, {"columns": "x y z roll pitch yaw",
            "units": "m m m rad rad rad", "meaning": "reported minus truth; nan while paused"})
        w.set_truth("pose_sensor/gm", ps.gm, {"columns": "x y z roll pitch yaw"})
