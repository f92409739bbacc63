"""Scenario files: TOML descriptions of a simulated run, validated against a schema
(defaults and campaigns: docs/SIMULATION.md); a bad value raises :class:`SimError`
naming the file and the dotted key."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sensorbench.drivers.device_kinds import get_kind
from sensorbench.errors import ModelFileError, SimError
from sensorbench.logs import toml_schema
from sensorbench.logs.model_file import dumps_toml, read_model
from sensorbench.logs.model_keys import POSE_AXES, POSE_ERROR_KEYS
from sensorbench.logs.toml_schema import FL, B, F, I, KeyPath, S, SchemaError, Table, Tables

SCENARIO_DIR = Path(str(resources.files("sensorbench.sim") / "scenarios"))


_OBSTACLE_FIELDS = {
    "name": S(""),
    "kind": S("box", ("box", "pillar", "polygon")),
    "center_m": FL([0.0, 0.0], n=2),
    "size_m": FL([0.5, 0.5], n=2, lo=0.0),
    "yaw_deg": F(0.0),
    "radius_m": F(0.1, lo=0.0, lo_open=True),
    "vertices_m": FL([], inner=2),
}
_OBSTACLE_KEYS = {
    "box": {"name", "kind", "center_m", "size_m", "yaw_deg"},
    "pillar": {"name", "kind", "center_m", "radius_m"},
    "polygon": {"name", "kind", "vertices_m"},
}


def _check_obstacle(value: Any, path: KeyPath) -> dict:
    out = Table(_OBSTACLE_FIELDS, required=("kind",)).check(value, path)
    for k in value:
        if k not in _OBSTACLE_KEYS[out["kind"]]:
            raise SchemaError((*path, k), f"does not apply to kind {out['kind']!r}")
    if out["kind"] == "polygon" and len(out["vertices_m"]) < 3:
        raise SchemaError((*path, "vertices_m"), "a polygon needs at least 3 vertices")
    return {k: v for k, v in out.items() if k in _OBSTACLE_KEYS[out["kind"]]}


DEFAULT_OBSTACLES: list[dict[str, Any]] = [
    {"name": name, "kind": "box", "center_m": centre, "size_m": size, "yaw_deg": yaw}
    for name, centre, size, yaw in (
        ("cabinet", [3.4, 2.4], [1.0, 0.6], 0.0),
        ("table", [-2.9, 1.9], [1.2, 0.8], 15.0),
        ("crate", [2.7, -2.0], [0.5, 0.5], 30.0),
    )
] + [
    {"name": "pillar_sw", "kind": "pillar", "center_m": [-2.6, -2.1], "radius_m": 0.15},
    {"name": "pillar_ne", "kind": "pillar", "center_m": [1.9, 2.3], "radius_m": 0.10},
]
"""The lab's furniture when a scenario lists no ``[[world.obstacles]]``."""

WORLD = Table({
    "size_m": FL([8.0, 6.0], n=2, lo=0.5),
    "mocap_volume_m": FL([-3.0, -2.2, 3.0, 2.2], n=4),
    "obstacles": Tables(_check_obstacle, DEFAULT_OBSTACLES),
})  # fmt: skip

ROBOT = Table({
    "start_xy_m": FL([-1.0, -1.0], n=2),
    "start_yaw_deg": F(0.0),
    "footprint_m": toml_schema.Polygon([[-0.225, -0.225], [0.225, -0.225], [0.225, 0.225],
                                        [-0.225, 0.225]]),
    "occluders": Tables(_check_obstacle),
})  # fmt: skip

TRAJECTORY_KINDS = ("forward", "sideways", "spin", "square", "figure8", "hold", "waypoints")
TRAJECTORY = Table({
    "kind": S("hold", TRAJECTORY_KINDS),
    "lead_in_s": F(1.0, lo=0.0),
    "lead_out_s": F(1.0, lo=0.0),
    "max_speed_m_s": F(0.5, lo=0.0, lo_open=True),
    "max_accel_m_s2": F(0.5, lo=0.0, lo_open=True),
    "max_yaw_rate_deg_s": F(90.0, lo=0.0, lo_open=True),
    "max_yaw_accel_deg_s2": F(180.0, lo=0.0, lo_open=True),
    "pause_s": F(0.5, lo=0.0),
    "repeats": I(1, lo=1, hi=1000),
    "distance_m": F(2.0),
    "return": B(True),
    "angle_deg": F(360.0),
    "side_m": F(2.0, lo=0.0, lo_open=True),
    "turn_at_corners": B(False),
    "size_m": F(3.0, lo=0.0, lo_open=True),
    "heading": S("tangent", ("tangent", "fixed")),
    "hold_s": F(30.0, lo=0.0),
    "waypoints": FL([], inner=3),
})  # fmt: skip

PODS = Table({
    "enabled": B(True),
    "rate_hz": F(200.0, lo=1.0, hi=5000.0),
    "substeps": I(5, lo=1, hi=100),
    "counter_bits": I(16, choices=(16, 32)),
    "positions_m": FL([[0.0, 0.16], [0.0, -0.16], [-0.12, 0.0]], inner=2, n=3),
    "rolling_angles_deg": FL([0.0, 0.0, 90.0], n=3),
    "wheel_radius_m": FL([0.024, 0.024, 0.024], n=3, lo=0.001),
    "counts_per_rev": FL([2000.0, 2000.0, 2000.0], n=3, lo=1.0),
    "initial_counts": FL([0.0, 0.0, 0.0], n=3),
    "slip_sigma_m_per_sqrt_m": F(0.0005, lo=0.0),
    "scrub_sigma_m_per_sqrt_m": F(0.001, lo=0.0),
    "bounce_rate_hz": F(0.05, lo=0.0),
    "bounce_duration_s": F(0.02, lo=0.0),
    "lift_windows": FL([], inner=3),
    "slip_windows": FL([], inner=4),
    "mcu_clock_drift_ppm": F(40.0, lo=-1000.0, hi=1000.0),
    "mcu_clock_offset_us": I(1_000_000, lo=0),
})  # fmt: skip

IMU = Table({
    "enabled": B(True),
    "bias_rad_s": F(0.002),
    "bias_walk_rad_s_sqrt_s": F(0.0001, lo=0.0),
    "rate_noise_rad_s": F(0.003, lo=0.0),
    "yaw_noise_rad": F(0.0, lo=0.0),
})  # fmt: skip

MOCAP = Table({
    "enabled": B(True),
    "rate_hz": F(120.0, lo=1.0, hi=1000.0),
    "noise_m": F(0.0005, lo=0.0),
    "noise_rad": F(0.002, lo=0.0),
    "latency_s": F(0.004, lo=0.0),
    "occlusion_rate_hz": F(0.05, lo=0.0),
    "occlusion_mean_s": F(0.3, lo=0.0),
    "marker_height_m": F(0.30),
})  # fmt: skip

POSE_SENSOR = Table({
    "enabled": B(True),
    "rate_hz": F(30.0, lo=0.1, hi=1000.0),
    "rate_jitter_s": F(0.002, lo=0.0),
    "latency_s": F(0.03, lo=0.0),
    "height_m": F(0.25),
    "mount_xy_m": FL([0.0, 0.0], n=2),
    "mount_yaw_deg": F(0.0),
    "map_xy_m": FL([0.0, 0.0], n=2),
    "map_yaw_deg": F(0.0),
    "reloc_times_s": FL([], lo=0.0),
    "reloc_sigma": FL([0.05, 0.05, 0.02, 0.005, 0.005, 0.02], n=6, lo=0.0),
    "gm_sigma": FL([0.02, 0.02, 0.01, 0.003, 0.003, 0.005], n=6, lo=0.0),
    "gm_tau_s": FL([5.0, 5.0, 10.0, 20.0, 20.0, 8.0], n=6, lo=1e-6),
    "white_sigma": FL([0.002, 0.002, 0.002, 0.0005, 0.0005, 0.0005], n=6, lo=0.0),
    "covered_s": FL([], inner=2, lo=0.0),
    "reloc_after_cover": B(True),
    "wrong_reloc_prob": F(0.02, lo=0.0, hi=1.0),
    "wrong_reloc_sigma": FL([0.8, 0.8, 0.05, 0.02, 0.02, 0.5], n=6, lo=0.0),
})  # fmt: skip

# rate, sample rate and range limits: the device kind's emulator defaults (one source)
LIDAR_DEFAULTS: dict[str, dict[str, Any]] = {
    "ld19": {
        **get_kind("ld19").sim_defaults,
        "period_jitter_s": 0.004,
        "skip_prob": 0.015,
        "range_resolution_m": 0.001,
        "noise_band_edges_m": [0.0, 1.0, 2.0, 3.0, 5.0, 12.0],
        "noise_band_sigma_m": [0.004, 0.0045, 0.0085, 0.015, 0.02],
        "edge_outlier_prob": 0.35,
        "edge_min_jump_m": 0.15,
        "false_point_prob": 0.001,
        "intensity_at_1m": 220.0,
        "intensity_falloff_per_m": 12.0,
        "intensity_noise": 6.0,
        "intensity_max": 255,
    },
    "a1": {
        **get_kind("a1").sim_defaults,
        "period_jitter_s": 0.002,
        "skip_prob": 0.0,
        "range_resolution_m": 0.00025,
        "noise_band_edges_m": [0.0, 1.0, 3.0, 5.0, 12.0],
        "noise_band_sigma_m": [0.005, 0.01, 0.02, 0.03],
        "edge_outlier_prob": 0.3,
        "edge_min_jump_m": 0.15,
        "false_point_prob": 0.0005,
        "intensity_at_1m": 47.0,
        "intensity_falloff_per_m": 1.0,
        "intensity_noise": 1.5,
        "intensity_max": 63,
    },
}


def _lidar_table(model: str) -> Table:
    d = LIDAR_DEFAULTS[model]
    return Table({
        "model": S(model, tuple(LIDAR_DEFAULTS)),
        "enabled": B(True),
        "mount_xy_m": FL([0.0, 0.0], n=2),
        "mount_yaw_deg": F(0.0),
        "sees_robot": B(True),
        "rate_hz": F(d["rate_hz"], lo=0.5, hi=50.0),
        "samples_per_s": F(d["samples_per_s"], lo=10.0, hi=100000.0),
        "period_jitter_s": F(d["period_jitter_s"], lo=0.0),
        "skip_prob": F(d["skip_prob"], lo=0.0, hi=1.0, hi_open=True),
        "range_min_m": F(d["range_min_m"], lo=0.0),
        "range_max_m": F(d["range_max_m"], lo=0.0, lo_open=True),
        "range_resolution_m": F(d["range_resolution_m"], lo=0.0),
        "noise_band_edges_m": FL(d["noise_band_edges_m"], lo=0.0),
        "noise_band_sigma_m": FL(d["noise_band_sigma_m"], lo=0.0),
        "edge_outlier_prob": F(d["edge_outlier_prob"], lo=0.0, hi=1.0),
        "edge_min_jump_m": F(d["edge_min_jump_m"], lo=0.0),
        "false_point_prob": F(d["false_point_prob"], lo=0.0, hi=1.0, hi_open=True),
        "intensity_at_1m": F(d["intensity_at_1m"], lo=0.0),
        "intensity_falloff_per_m": F(d["intensity_falloff_per_m"]),
        "intensity_noise": F(d["intensity_noise"], lo=0.0),
        "intensity_max": I(d["intensity_max"], lo=1, hi=255),
    })  # fmt: skip


def _check_lidar(value: Any, path: KeyPath) -> dict:
    if not isinstance(value, dict):
        raise SchemaError(path, f"must be a table, got {value!r}")
    if "model" not in value:
        raise SchemaError((*path, "model"), f"is required: one of {list(LIDAR_DEFAULTS)}")
    model = S("ld19", tuple(LIDAR_DEFAULTS)).check(value["model"], (*path, "model"))
    out = _lidar_table(model).check(value, path)
    edges, sig = out["noise_band_edges_m"], out["noise_band_sigma_m"]
    if len(edges) < 2 or any(b <= a for a, b in itertools.pairwise(edges)):
        raise SchemaError(
            (*path, "noise_band_edges_m"), "must be >= 2 strictly increasing ranges (m)"
        )
    if len(sig) != len(edges) - 1:
        raise SchemaError(
            (*path, "noise_band_sigma_m"),
            f"must have one σ per band: {len(edges) - 1} values, got {len(sig)}",
        )
    if out["range_min_m"] >= out["range_max_m"]:
        raise SchemaError((*path, "range_min_m"), "must be below range_max_m")
    return out


FAULTS = Table({
    "corrupt_rate": F(0.0, lo=0.0, hi=1.0, hi_open=True),
    "drop_rate": F(0.0, lo=0.0, hi=1.0, hi_open=True),
    "slow_start_s": F(0.0, lo=0.0),
    "stall_at_s": FL([], lo=0.0),
    "stall_s": F(0.0, lo=0.0),
    "unplug_at_s": FL([], lo=0.0),
    "replug_after_s": F(1.0, lo=0.0),
    "health": S("good", ("good", "warning", "error")),
    "health_error_code": I(0, lo=0, hi=65535),
    "brownout": B(False),
    "brownout_window_s": F(2.0, lo=0.0),
})  # fmt: skip


DEFAULT_LIDARS = {
    "ld19": {"model": "ld19", "mount_xy_m": [0.10, 0.0], "mount_yaw_deg": 0.0},
    "lidar_front": {"model": "a1", "mount_xy_m": [0.20, 0.0], "mount_yaw_deg": 0.0},
    "lidar_rear": {"model": "a1", "mount_xy_m": [-0.20, 0.0], "mount_yaw_deg": 180.0},
}

_TOP = Table({
    "name": S(""),
    "description": S(""),
    "duration_s": F(0.0, lo=0.0),
    "world": WORLD,
    "robot": ROBOT,
    "trajectory": TRAJECTORY,
    "pods": PODS,
    "imu": IMU,
    "mocap": MOCAP,
    "pose_sensor": POSE_SENSOR,
    "lidars": Tables(_check_lidar, {}, named=True),
    "faults": Tables(FAULTS.check, {}, named=True),
})  # fmt: skip


def _resolve(raw: dict, source: str) -> dict:
    raw = {k: v for k, v in raw.items() if k != "campaign"}
    lidars = raw.get("lidars", {})
    if isinstance(lidars, dict):
        # The robot carries the default lidars; [lidars.<name>] tables change them or add
        # new ones (enabled = false takes one out of the run).
        raw["lidars"] = _deep_merge(DEFAULT_LIDARS, lidars)
    try:
        out = _TOP.check(raw, ())
        for dev in out["faults"]:
            if dev not in out["lidars"] and dev != "pods":
                raise SchemaError(("faults", dev), "names no device: use a lidar name or 'pods'")
        if out["trajectory"]["kind"] == "waypoints" and not out["trajectory"]["waypoints"]:
            raise SchemaError(
                ("trajectory", "waypoints"), "kind 'waypoints' needs [[x, y, yaw_deg], ...]"
            )
        for i, c in enumerate(out["pods"]["initial_counts"]):
            if c != int(c):
                raise SchemaError(("pods", "initial_counts", i), f"must be a whole number, got {c}")
        x0, y0, x1, y1 = out["world"]["mocap_volume_m"]
        if not (x0 < x1 and y0 < y1):  # else no sample is inside: mocap invalid all run
            raise SchemaError(("world", "mocap_volume_m"), f"must be [xmin, ymin, xmax, ymax] "
                f"with xmin < xmax and ymin < ymax (m), got {[x0, y0, x1, y1]}")
        _check_pod_windows(out["pods"])
        for i, (a, b) in enumerate(out["pose_sensor"]["covered_s"]):
            if b <= a:
                raise SchemaError(
                    ("pose_sensor", "covered_s", i), f"end {b} s must follow start {a} s"
                )
    except SchemaError as exc:
        raise SimError(f"{source}: {exc}") from None
    return out


def _check_pod_windows(pods: dict) -> None:
    """``lift_windows`` ``[pod, start_s, duration_s]`` and ``slip_windows`` (with the
    ``fraction`` the wheel still rolls): a pod 0, 1 or 2, a start >= 0 s, a duration > 0 s
    and a fraction in [0, 1]; SchemaError naming the window (a bad pod was found only when
    the run was built, without the file, and a window of no length did nothing, unsaid)."""
    for key in ("lift_windows", "slip_windows"):
        for i, window in enumerate(pods[key]):
            pod, start, duration = window[:3]
            path = ("pods", key, i)
            if pod not in (0, 1, 2):
                raise SchemaError(path, f"names pod {pod:g}; pods are 0, 1, 2")
            if start < 0 or duration <= 0:
                raise SchemaError(path, f"start_s must be >= 0 and duration_s > 0 (s), got "
                    f"{start:g} and {duration:g}")
            if key == "slip_windows" and not 0.0 <= window[3] <= 1.0:
                raise SchemaError(path, f"fraction (the share of its travel the wheel still "
                    f"rolls) must be in [0, 1], got {window[3]:g}")


def _deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _table(key: str) -> Any:
    """A property: the resolved ``[key]`` table (``lidars``: ``[lidars.<name>]`` by name)."""
    return property(lambda self: self.params[key], doc=f"The resolved ``[{key}]`` table.")


@dataclass
class Scenario:
    """A validated scenario: ``name`` (the file stem unless the file sets one), the file's
    TOML ``text``, ``raw`` (parsed) and ``params`` (every default filled in), the campaign
    ``session`` it is resolved for and the campaign's ``n_sessions`` (None, 0: none)."""

    name: str
    source: str
    text: str
    params: dict
    raw: dict
    session: int | None = None
    n_sessions: int = 0

    world = _table("world")
    robot = _table("robot")
    trajectory = _table("trajectory")
    pods = _table("pods")
    imu = _table("imu")
    mocap = _table("mocap")
    pose_sensor = _table("pose_sensor")
    lidars = _table("lidars")  # by name, disabled ones included

    def faults(self, device: str) -> dict:
        """Fault knobs of ``device`` (``[faults.<device>]``), defaults if the file has none."""
        if device in self.params["faults"]:
            return dict(self.params["faults"][device])
        return FAULTS.default

    def for_session(self, index: int) -> Scenario:
        """This campaign scenario resolved for session ``index`` (0-based)."""
        sessions = self.raw.get("campaign", {}).get("sessions", [])
        if not sessions:
            raise SimError(f"{self.source}: not a campaign (no [[campaign.sessions]])")
        if not 0 <= index < len(sessions):
            raise SimError(f"{self.source}: session {index} out of range 0..{len(sessions) - 1}")
        merged = _deep_merge(self.raw, sessions[index])
        params = _resolve(merged, f"{self.source} (campaign.sessions[{index}])")
        return Scenario(self.name, self.source, self.text, params, self.raw, index, len(sessions))

    def with_overrides(self, overrides: dict) -> Scenario:
        """A copy with ``overrides`` (nested dict, same layout as the file) merged in and
        validated again, e.g. ``{"pods": {"slip_sigma_m_per_sqrt_m": 0.0}}``."""
        raw = _deep_merge(self.raw, overrides)
        text = self.text + "\n# with overrides: " + json.dumps(overrides, sort_keys=True) + "\n"
        sc = _from_raw(raw, text, f"{self.source} (with overrides)", self.name)
        return sc if self.session is None else sc.for_session(self.session)

    def to_toml(self) -> str:
        """The resolved parameters as TOML text (what sessions record)."""
        head = [f"# scenario {self.name!r} from {self.source}"]
        if self.session is not None:
            head.append(f"# campaign session {self.session} of {self.n_sessions}")
        return "\n".join(head) + "\n" + dumps_toml(self.params)


def parse_scenario(text: str, source: str, name: str) -> Scenario:
    """Parse and validate scenario TOML ``text`` (``source`` names it in errors)."""
    text = text.removeprefix("\ufeff")  # a UTF-8 byte-order mark (Windows editors)
    raw = toml_schema.parse_toml(text, source, SimError)
    if not raw:  # every key has a default: an empty file would silently run the square
        raise SimError(f"{source}: no keys: a scenario sets at least one (`simulate --list` "
                       "names the shipped ones; docs/SIMULATION.md lists every key)")
    return _from_raw(raw, text, source, name)


def _from_raw(raw: dict, text: str, source: str, name: str) -> Scenario:
    campaign = raw.get("campaign")
    n_sessions = 0
    if campaign is not None:
        if not isinstance(campaign, dict) or set(campaign) - {"sessions"}:
            raise SimError(f"{source}: campaign: only [[campaign.sessions]] tables are allowed")
        sessions = campaign.get("sessions")
        if not sessions or not isinstance(sessions, list) or not all(
            isinstance(s, dict) for s in sessions
        ):
            raise SimError(
                f"{source}: campaign.sessions: must be one or more [[campaign.sessions]]")
        n_sessions = len(sessions)
    params = _resolve(raw, source)
    name = params["name"] or name
    sc = Scenario(name, source, text, params, raw, None, n_sessions)
    for i in range(n_sessions):
        sc.for_session(i)
    return sc


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load a shipped scenario by name (``"square"``) or any scenario file by path;
    SimError for an unknown name (listing the shipped ones), an unreadable or invalid file."""
    p = Path(name_or_path)
    if p.suffix != ".toml" and not p.exists():
        candidate = SCENARIO_DIR / f"{name_or_path}.toml"
        if not candidate.exists():
            raise SimError(
                f"unknown scenario {str(name_or_path)!r}; shipped: {', '.join(list_scenarios())}"
                " (or give a path to a .toml file)"
            )
        p = candidate
    return parse_scenario(toml_schema.read_text(p, SimError, "scenario"), str(p), p.stem)


def pose_model_overrides(path: str | Path) -> dict:
    """``[pose_sensor]`` overrides from a fitted pose-error model file (``fit pose-error -o``).

    Per axis ``sigma_b``, ``sigma``, ``tau_s`` and ``sigma_v`` become ``reloc_sigma``,
    ``gm_sigma``, ``gm_tau_s`` and ``white_sigma`` (m for x, y, z; rad for the angles).
    Raises ModelFileError for anything but a valid ``pose_error_gm`` model of format 1.
    """
    p = Path(path)
    doc = read_model(p, "pose_error_gm", 1, {}, "pose-error", POSE_ERROR_KEYS)
    keys = {"sigma_b": "reloc_sigma", "sigma": "gm_sigma", "tau_s": "gm_tau_s",
            "sigma_v": "white_sigma"}  # fmt: skip
    out: dict[str, list[float]] = {v: [] for v in keys.values()}
    for axis in POSE_AXES:
        table = doc.get("axes", {}).get(axis)
        if not isinstance(table, dict):
            raise ModelFileError(f"{p}: axes.{axis}: missing")
        for src, dst in keys.items():
            if src not in table:
                raise ModelFileError(f"{p}: axes.{axis}.{src}: missing")
            out[dst].append(float(table[src]))  # finite and > 0: POSE_ERROR_KEYS
    return {"pose_sensor": out}


def list_scenarios() -> list[str]:
    """Names of the shipped scenarios, sorted."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
