"""simulate_to_session and `sensorbench simulate`: identical sessions per seed, stored
conventions, and the documented /truth layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sensorbench.cli import cli
from sensorbench.errors import SimError
from sensorbench.logs import NO_DEVICE_TIME, PoseFlag, Session
from sensorbench.sim.scenario import load_scenario, parse_scenario
from sensorbench.sim.simulation import SIM_T0_NS, Simulation, simulate_to_session

SHORT = {"trajectory": {"repeats": 1}}


def _read_all(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with Session(path) as s:
        for name in s.lidar_names():
            t = s.lidar(name).read()
            for f in (
                "t_first_ns",
                "device_ns",
                "speed_hz",
                "count",
                "angle",
                "range",
                "intensity",
                "t_ns",
            ):
                out[f"lidar.{name}.{f}"] = getattr(t, f)
        for name in s.encoder_names():
            b = s.encoder(name).read()
            for f in ("host_ns", "device_ns", "seq", "counts", "yaw", "yaw_rate"):
                out[f"enc.{name}.{f}"] = getattr(b, f)
        for name in s.pose_names():
            b = s.pose(name).read()
            for f in ("t_ns", "position", "quat_xyzw", "valid", "flags"):
                out[f"pose.{name}.{f}"] = getattr(b, f)
        for name in s.truth_names():
            out[f"truth.{name}"] = s.truth(name)
        out["events"] = np.array([(e.t_ns, e.source, e.kind, e.message) for e in s.events()])
    return out


def test_same_scenario_and_seed_write_identical_sessions(tmp_path: Path) -> None:
    sc = load_scenario("square").with_overrides(SHORT)
    a = _read_all(simulate_to_session(sc, 4, tmp_path / "a.h5"))
    b = _read_all(simulate_to_session(sc, 4, tmp_path / "b.h5"))
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_session_streams_use_the_stored_conventions(tmp_path: Path) -> None:
    sc = load_scenario("square").with_overrides(SHORT)
    path = simulate_to_session(sc, 2, tmp_path / "s.h5")
    sim = Simulation(sc, 2)
    with Session(path) as s:
        assert s.lidar_names() == ["ld19", "lidar_front", "lidar_rear"]
        assert s.attrs["simulated"] and s.attrs["scenario"] == "square"
        for name in s.lidar_names():
            ls = sim.lidar(name)
            turns = s.lidar(name).read()
            # Only whole turns are stored: the one in progress at 0 and the one cut at
            # the end are dropped, like a driver does.
            keep = (ls.turn > ls.turn[0]) & (ls.turn < ls.turn[-1])
            assert turns.n_points == keep.sum()
            assert turns.n_turns == np.unique(ls.turn[keep]).size
            assert np.all((turns.angle >= 0) & (turns.angle < 2 * np.pi))
            # CW degrees -> CCW radians: a = (360° - θ) mod 360°.
            expect = np.mod(-np.deg2rad(ls.angle_deg_cw[keep]), 2 * np.pi)
            d = np.angle(np.exp(1j * (turns.angle.astype(float) - expect)))
            assert np.abs(d).max() < 1e-6
            np.testing.assert_array_equal(np.isinf(turns.range), ls.range_m[keep] == 0)
            assert turns.t_ns[0] == SIM_T0_NS + round(ls.t_s[keep][0] * 1e9)
            assert np.all(turns.count > 0)
            # Turns next to a skipped one lost packets and say so.
            k = np.unique(ls.turn[keep])
            sk = ls.turn_skipped
            np.testing.assert_array_equal(turns.flags > 0, sk[k - 1] | sk[k + 1])
            dev = turns.device_ns
            assert np.all(dev == NO_DEVICE_TIME) if name != "ld19" else np.all(dev >= 0)
        enc = s.encoder("pods").read()
        pods = sim.pods()
        np.testing.assert_array_equal(enc.counts, pods.counts)
        np.testing.assert_array_equal(enc.device_ns, pods.mcu_time_us * 1000)
        ps = s.pose("pose_sensor").read()
        assert s.pose("pose_sensor").attrs["kind"] == "pose_sensor"
        relocs = [e for e in s.events() if e.kind == "relocalization"]
        assert len(relocs) == int((ps.flags & PoseFlag.RELOCALIZED > 0).sum()) == 2
        mo = s.pose("mocap").read()
        assert np.isnan(mo.position[~mo.valid]).all()


def test_truth_group_layout(tmp_path: Path) -> None:
    sc = load_scenario("square").with_overrides(SHORT)
    path = simulate_to_session(sc, 2, tmp_path / "s.h5")
    with Session(path) as s:
        names = set(s.truth_names())
        for need in (
            "pose/t_ns",
            "pose/x_y_yaw",
            "pose/twist_body",
            "pods/geometry",
            "pods/kinematic_matrix",
            "lidar/ld19/turn_t_start_ns",
            "lidar/ld19/turn_period_s",
            "lidar/ld19/turn_skipped",
            "lidar/ld19/kind",
            "pose_sensor/error",
            "pose_sensor/reloc_t_ns",
            "pose_sensor/reloc_offset",
            "mocap/occlusion_ns",
            "world/segments",
        ):
            assert need in names, need
        attrs = s.truth_attrs()
        # The recorded TOML reproduces the scenario's parameters exactly.
        again = parse_scenario(attrs["scenario_toml"], "recorded", "square")
        assert again.params == sc.params
        assert int(attrs["seed"]) == 2
        t = s.truth("pose/t_ns")
        assert np.all(np.diff(t) == 2_000_000)  # 500 Hz
        geo = s.truth("pods/geometry")
        np.testing.assert_allclose(geo[:, 5], 2 * np.pi * 0.024 / 2000)


def test_existing_output_is_refused_without_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "s.h5"
    out.write_bytes(b"")
    from sensorbench.errors import SessionError

    with pytest.raises(SessionError, match="exists"):
        simulate_to_session("hold", 0, out)
    with pytest.raises(SimError, match="unknown scenario"):
        simulate_to_session("no_such", 0, tmp_path / "x.h5")


def test_cli_simulate_list_json_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["simulate", "--list", "--json"])
    assert res.exit_code == 0
    names = [r["name"] for r in json.loads(res.output)["scenarios"]]
    assert "square" in names and "reloc_campaign" in names
    out = tmp_path / "c.h5"
    res = runner.invoke(
        cli, ["simulate", "--scenario", "reloc_campaign", "--seed", "7", "-o", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["campaign_session"] == 7 % 5 and doc["poses"] == ["mocap", "pose_sensor"]
    res = runner.invoke(cli, ["simulate", "--scenario", "reloc_campaign", "-o", str(out)])
    assert res.exit_code == 2 and "exists" in res.output
    res = runner.invoke(cli, ["simulate", "--scenario", "nope", "-o", str(tmp_path / "n.h5")])
    assert res.exit_code == 2 and "unknown scenario" in res.output
    camp = tmp_path / "camp"
    small = tmp_path / "small.toml"
    off = "".join(f"[lidars.{n}]\nenabled = false\n" for n in ("ld19", "lidar_front", "lidar_rear"))
    small.write_text(
        "[trajectory]\nkind = 'hold'\nhold_s = 3.0\n"
        + off
        + "[[campaign.sessions]]\npose_sensor.reloc_times_s = [1.0]\n"
        + "[[campaign.sessions]]\npose_sensor.reloc_times_s = [2.0]\n"
    )
    args = ["simulate", "--scenario", str(small), "--seed", "1", "--all-sessions"]
    res = runner.invoke(cli, [*args, "-o", str(camp), "--json"])
    assert res.exit_code == 0, res.output
    got = [d["campaign_session"] for d in json.loads(res.output)["sessions"]]
    assert got == [0, 1] and len(list(camp.glob("small_s*.h5"))) == 2
    res = runner.invoke(
        cli, ["simulate", "--scenario", "square", "--all-sessions", "-o", str(tmp_path / "sq")]
    )
    assert res.exit_code == 2 and "not a campaign" in res.output
    res = runner.invoke(cli, ["simulate", "--help"])
    assert res.exit_code == 0 and "reloc_campaign" in res.output


def test_config_text_is_a_valid_robot_toml_for_every_scenario() -> None:
    from sensorbench.drivers.robot_config import parse_robot_config
    from sensorbench.sim.scenario import list_scenarios
    from sensorbench.sim.simulation import robot_config_toml

    for name in list_scenarios():
        sc = load_scenario(name)
        cfg = parse_robot_config(robot_config_toml(sc), f"{name} config")
        by_name = {d.name: d for d in cfg.devices}
        assert set(by_name) == {"ld19", "lidar_front", "lidar_rear", "pods"}
        assert by_name["lidar_rear"].mount.yaw_rad == pytest.approx(np.pi)
        assert [w.y_m for w in cfg.pods.wheels] == [p[1] for p in sc.pods["positions_m"]]


def _distance_to_world(
    px: np.ndarray, py: np.ndarray, segs: np.ndarray, circ: np.ndarray
) -> np.ndarray:
    ax, ay, bx, by = (segs[:, k][None, :] for k in range(4))
    dx, dy = bx - ax, by - ay
    t = np.clip(((px[:, None] - ax) * dx + (py[:, None] - ay) * dy) / (dx**2 + dy**2), 0, 1)
    d = np.hypot(px[:, None] - ax - t * dx, py[:, None] - ay - t * dy).min(axis=1)
    if len(circ):
        dc = np.abs(np.hypot(px[:, None] - circ[:, 0], py[:, None] - circ[:, 1]) - circ[:, 2])
        d = np.minimum(d, dc.min(axis=1))
    return d


def test_stored_scans_land_on_the_world_through_mount_and_truth(tmp_path: Path) -> None:
    # Independent of the simulator's internals: stored CCW angles and ranges, the
    # stream's mount attribute and the /truth pose put every normal point on a wall,
    # box or pillar (within 5 σ of range noise), for all three lidars.
    sc = load_scenario("spin").with_overrides({"trajectory": {"repeats": 1}})
    path = simulate_to_session(sc, 3, tmp_path / "s.h5")
    with Session(path) as s:
        segs, circ = s.truth("world/segments"), s.truth("world/circles")
        tt, pose = s.truth("pose/t_ns"), s.truth("pose/x_y_yaw")
        for name in s.lidar_names():
            turns = s.lidar(name).read()
            kind = s.truth(f"lidar/{name}/kind")
            mx, my, myaw = s.lidar(name).attrs["mount_xy_yaw"]
            ok = (kind == 0) & np.isfinite(turns.range)
            sel = np.flatnonzero(ok)[::7]
            x = np.interp(turns.t_ns[sel], tt, pose[:, 0])
            y = np.interp(turns.t_ns[sel], tt, pose[:, 1])
            yaw = np.interp(turns.t_ns[sel], tt, pose[:, 2])
            a = yaw + myaw + turns.angle[sel].astype(float)
            r = turns.range[sel].astype(float)
            sx = x + np.cos(yaw) * mx - np.sin(yaw) * my
            sy = y + np.sin(yaw) * mx + np.cos(yaw) * my
            d = _distance_to_world(sx + r * np.cos(a), sy + r * np.sin(a), segs, circ)
            # σ ≤ 30 mm at these ranges; pose interpolation at 500 Hz adds < 1 mm; the
            # float32 angle (≤ 3e-7 rad) adds < 5 µm at 12 m.
            assert np.quantile(d, 0.999) < 0.15, name
            assert np.median(d) < 0.02, name
