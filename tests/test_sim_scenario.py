"""Scenario files: every shipped one loads; bad files fail with the key named."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sensorbench.errors import ModelFileError, SimError
from sensorbench.logs.model_file import dumps_toml
from sensorbench.sim.scenario import list_scenarios, load_scenario, parse_scenario

MOTIONS = ("forward", "sideways", "spin", "square", "figure8", "hold")
SHIPPED = {*MOTIONS, "lidar_static", "reloc_campaign", "ld19_faults", "a1_brownout", "pods_faults"}


def test_every_required_scenario_ships_and_loads() -> None:
    names = set(list_scenarios())
    assert names >= SHIPPED
    for name in names:
        sc = load_scenario(name)
        assert sc.name == name
        assert sc.trajectory["kind"] in (*MOTIONS, "waypoints")


def test_resolved_parameters_round_trip_through_toml() -> None:
    for name in list_scenarios():
        sc = load_scenario(name)
        again = parse_scenario(sc.to_toml(), "roundtrip", name)
        assert again.params == sc.params
        assert tomllib.loads(sc.to_toml()) == sc.params


def test_campaign_sessions_differ_and_index_is_checked() -> None:
    sc = load_scenario("reloc_campaign")
    assert sc.n_sessions >= 3
    relocs = {tuple(sc.for_session(i).pose_sensor["reloc_times_s"]) for i in range(sc.n_sessions)}
    assert len(relocs) == sc.n_sessions
    with pytest.raises(SimError, match="out of range"):
        sc.for_session(sc.n_sessions)
    with pytest.raises(SimError, match="not a campaign"):
        load_scenario("square").for_session(0)


def test_lidar_tables_change_the_default_lidars_or_add_new_ones() -> None:
    sc = parse_scenario(
        "[lidars.ld19]\nenabled = false\n[lidars.top2]\nmodel = 'a1'\nrate_hz = 8.0\n", "x", "x"
    )
    assert list(sc.lidars) == ["ld19", "lidar_front", "lidar_rear", "top2"]
    assert not sc.lidars["ld19"]["enabled"] and sc.lidars["ld19"]["mount_xy_m"] == [0.1, 0.0]
    assert sc.lidars["lidar_rear"]["mount_yaw_deg"] == 180.0
    assert sc.lidars["top2"]["rate_hz"] == 8.0 and sc.lidars["top2"]["range_min_m"] == 0.15


def test_fault_knobs_are_read_with_defaults() -> None:
    sc = load_scenario("ld19_faults")
    f = sc.faults("ld19")
    assert f["corrupt_rate"] == 0.0005 and f["stall_at_s"] == [10.0] and f["replug_after_s"] == 2.0
    assert load_scenario("square").faults("ld19")["corrupt_rate"] == 0.0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[pods]\nslip = 1\n", r"pods\.slip: unknown key"),
        ("[pods]\nrate_hz = 'fast'\n", r"pods\.rate_hz: must be a number"),
        ("[robot]\nstart_yaw_deg = inf\n", r"robot\.start_yaw_deg: must be a number \(finite\)"),
        ("[trajectory]\nlead_in_s = inf\n", r"trajectory\.lead_in_s: must be a number \(finite\)"),
        ("[pods]\nrate_hz = 1" + "0" * 400 + "\n", r"pods\.rate_hz: must be a number \(finite\)"),
        ("[trajectory]\nrepeats = 0\n", r"trajectory\.repeats: must be in \[1, 1000\], got 0"),
        ("[pods]\ncounter_bits = 24\n", r"pods\.counter_bits: must be one of \[16, 32\]"),
        (
            "[lidars.a]\nmodel = 'ld19'\nskip_prob = 1.5\n",
            r"lidars\.a\.skip_prob: must be in \[0, 1\)",
        ),
        ("[lidars.a]\nmodel = 'vlp16'\n", r"lidars\.a\.model: must be one of"),
        ("[lidars.extra]\nenabled = true\n", r"lidars\.extra\.model: is required"),
        (
            "[lidars.a]\nmodel = 'a1'\nnoise_band_sigma_m = [0.01]\n",
            r"lidars\.a\.noise_band_sigma_m: must have one σ per band",
        ),
        (
            "[lidars.a]\nmodel = 'a1'\nnoise_band_edges_m = [0, 2, 1, 5, 12]\n",
            r"noise_band_edges_m: must be >= 2 strictly increasing",
        ),
        ("[trajectory]\nkind = 'zigzag'\n", r"trajectory\.kind: must be one of"),
        ("[trajectory]\nkind = 'waypoints'\n", r"trajectory\.waypoints: kind 'waypoints' needs"),
        ("[trajectory]\nwaypoints = [[1, 2]]\n", r"trajectory\.waypoints\[0\]: must have 3 values"),
        ("[pose_sensor]\ncovered_s = [[5, 3]]\n", r"pose_sensor\.covered_s\[0\]: end 3"),
        ("[pose_sensor]\ngm_tau_s = [1, 1, 1]\n", r"pose_sensor\.gm_tau_s: must have 6 values"),
        ("[mocap]\nenabled = 1\n", r"mocap\.enabled: must be true or false"),
        ("[pods]\ninitial_counts = [0, 1.5, 2]\n", r"pods\.initial_counts\[1\]: must be a whole"),
        # a reversed or empty mocap volume left mocap invalid for the whole run, unsaid
        ("[world]\nmocap_volume_m = [3.0, 2.2, -3.0, -2.2]\n",
         r"world\.mocap_volume_m: must be \[xmin, ymin, xmax, ymax\] with xmin < xmax"),
        ("[world]\nmocap_volume_m = [-3.0, -2.2, -3.0, 2.2]\n", r"world\.mocap_volume_m: must"),
        # pod windows: a bad pod failed only when the run was built, naming no file; a
        # window of no length or a fraction outside [0, 1] was taken silently
        ("[pods]\nlift_windows = [[3, 1.0, 1.0]]\n", r"pods\.lift_windows\[0\]: names pod 3;"),
        ("[pods]\nlift_windows = [[1.5, 1.0, 1.0]]\n", r"pods\.lift_windows\[0\]: names pod 1\.5"),
        ("[pods]\nlift_windows = [[0, 5.0, -2.0]]\n", r"pods\.lift_windows\[0\]: .*duration_s > 0"),
        ("[pods]\nlift_windows = [[0, -1.0, 2.0]]\n", r"pods\.lift_windows\[0\]: start_s must"),
        ("[pods]\nslip_windows = [[0, 1.0, 2.0, 0.5], [2, 1.0, 0.0, 0.5]]\n",
         r"pods\.slip_windows\[1\]: .*duration_s > 0"),
        ("[pods]\nslip_windows = [[1, 1.0, 2.0, -0.7]]\n",
         r"pods\.slip_windows\[0\]: fraction .* must be in \[0, 1\], got -0\.7"),
        ("[pods]\nslip_windows = [[1, 1.0, 2.0, 1.5]]\n", r"slip_windows\[0\]: fraction"),
        (
            "[[world.obstacles]]\nkind = 'pillar'\nsize_m = [1, 1]\n",
            r"world\.obstacles\[0\]\.size_m: does not apply to kind 'pillar'",
        ),
        ("[[world.obstacles]]\ncenter_m = [1, 1]\n", r"world\.obstacles\[0\]\.kind: is required"),
        ("[faults.gps]\ncorrupt_rate = 0.1\n", r"faults\.gps: names no device"),
        ("[faults.pods]\ncorrupt_rate = 1.0\n", r"faults\.pods\.corrupt_rate: must be in"),
        ("[campaign]\nsessions = []\n", r"campaign\.sessions: must be one or more"),
        (
            "[[campaign.sessions]]\npods.rate = 3\n",
            r"campaign\.sessions\[0\]\).*pods\.rate: unknown",
        ),
        ("robot = [1\n", r"not valid TOML"),
        ("[robot]\nfootprint_m = [[0, 0], [1, 1], [1, 0], [0, 1]]\n",
         r"robot\.footprint_m: edges 0 and 2 cross or touch"),
        ("", r"no keys: a scenario sets at least one"),
        ("# only a comment\n\n", r"no keys"),
    ],
)
def test_validation_errors_name_the_file_and_key(text: str, match: str) -> None:
    with pytest.raises(SimError, match=match) as info:
        parse_scenario(text, "bad.toml", "bad")
    assert str(info.value).startswith("bad.toml")


def test_load_errors_for_unknown_names_and_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(SimError, match=r"unknown scenario 'nope'; shipped: .*square"):
        load_scenario("nope")
    with pytest.raises(SimError, match="cannot read scenario"):
        load_scenario(tmp_path / "missing.toml")
    f = tmp_path / "mine.toml"
    f.write_text("[trajectory]\nkind = 'spin'\nangle_deg = 90.0\n")
    sc = load_scenario(f)
    assert sc.name == "mine" and sc.trajectory["angle_deg"] == 90.0
    assert sc.trajectory["max_speed_m_s"] == 0.5  # default filled in


def test_with_overrides_revalidates() -> None:
    sc = load_scenario("square").with_overrides({"pods": {"scrub_sigma_m_per_sqrt_m": 0.0}})
    assert sc.pods["scrub_sigma_m_per_sqrt_m"] == 0.0
    with pytest.raises(SimError, match=r"pods\.scrub_sigma_m_per_sqrt_m: must be in"):
        load_scenario("square").with_overrides({"pods": {"scrub_sigma_m_per_sqrt_m": -1.0}})


def test_toml_writer_handles_nesting_and_special_floats() -> None:
    doc = {"a": 1, "b": {"c": [1.5, float("inf")], "d": [{"e": 'x"y'}, {"e": "z"}]}, "f": True}
    assert tomllib.loads(dumps_toml(doc)) == doc


def test_every_shipped_scenario_runs_and_carries_the_robots_three_lidars() -> None:
    # The emulated robot (examples/robot-emulated.toml) serves ld19, lidar_front and
    # lidar_rear from any scenario; every campaign session must be drivable too.
    from sensorbench.sim.simulation import Simulation

    for name in list_scenarios():
        sc = load_scenario(name)
        for i in range(max(sc.n_sessions, 1)):
            sim = Simulation(sc, seed=i)
            assert sim.lidar_names() == ["ld19", "lidar_front", "lidar_rear"], name
            assert sim.duration_s > 10.0


@pytest.mark.parametrize("key", ["duration_s", "trajectory.hold_s", "trajectory.pause_s"])
def test_a_run_longer_than_the_simulator_builds_is_refused_at_once(key: str) -> None:
    """A scenario of 10⁶ s asked for 2.4 GiB arrays (MemoryError) before any check: the
    simulator builds a run in memory. A run up to the longest any model takes is accepted
    (the shipped scenarios are 10 s to minutes long)."""
    from sensorbench.sim.simulation import MAX_DURATION_S, Simulation

    hold = "[trajectory]\nkind = \"hold\"\nhold_s = 1.0\n"
    if key == "duration_s":
        text = f"name = \"long\"\nduration_s = 1e6\n{hold}"
    elif key == "trajectory.hold_s":
        text = "name = \"long\"\n" + hold.replace("1.0", "1e6")
    else:
        text = load_scenario("reloc_campaign").to_toml().replace("pause_s = 0.5", "pause_s = 1e300")
    with pytest.raises(SimError, match=f"at most {MAX_DURATION_S:g} s"):
        Simulation(parse_scenario(text, "long.toml", "long"))
    ok = f"name = \"long\"\nduration_s = {MAX_DURATION_S}\n{hold}"
    assert Simulation(parse_scenario(ok, "ok.toml", "ok")).duration_s == MAX_DURATION_S


def test_each_model_takes_the_run_its_memory_allows() -> None:
    """The bound is per model, by its memory per simulated second: a 2 000-s run is too
    long for a lidar (about 1 MB/s, so 1 800 s) and is refused before it is built, but the
    pose sensor (about 0.01 MB/s) builds it whole (its long-run statistics tests need 3 000 s)."""
    from sensorbench.sim.simulation import Simulation

    sim = Simulation(load_scenario("hold").with_overrides({"duration_s": 2000.0}), seed=1)
    with pytest.raises(SimError, match=r"lidar model .* at most 1800 s"):
        sim.lidar(sim.lidar_names()[0])
    ps = sim.pose_sensor()
    assert ps.t_s[-1] > 1990.0


def _model_text(kind: str = "pose_error_gm", drop: str = "") -> str:
    lines = ["[model]", f'kind = "{kind}"', "format_version = 1", ""]
    for i, axis in enumerate(("x", "y", "z", "roll", "pitch", "yaw")):
        if axis == drop:
            continue
        lines += [
            f"[axes.{axis}]",
            f"sigma_b = {0.01 * (i + 1)}",
            f"sigma = {0.001 * (i + 1)}",
            f"tau_s = {1.0 + i}",
            f"sigma_v = {0.0001 * (i + 1)}",
            "",
        ]
    return "\n".join(lines)


def test_pose_model_file_drives_the_pose_sensor(tmp_path: Path) -> None:
    from sensorbench.sim.scenario import pose_model_overrides

    f = tmp_path / "model.toml"
    f.write_text(_model_text())
    sc = load_scenario("square").with_overrides(pose_model_overrides(f))
    ps = sc.pose_sensor
    assert ps["reloc_sigma"] == pytest.approx([0.01 * k for k in range(1, 7)])
    assert ps["gm_sigma"] == pytest.approx([0.001 * k for k in range(1, 7)])
    assert ps["gm_tau_s"] == pytest.approx([1.0 + k for k in range(6)])
    assert ps["white_sigma"] == pytest.approx([0.0001 * k for k in range(1, 7)])
    f.write_text(_model_text(kind="pods"))
    with pytest.raises(ModelFileError, match="not a pose-error model"):
        pose_model_overrides(f)
    f.write_text(_model_text(drop="pitch"))
    with pytest.raises(ModelFileError, match=r"axes\.pitch: missing"):
        pose_model_overrides(f)
    with pytest.raises(ModelFileError, match="cannot read model file"):
        pose_model_overrides(tmp_path / "none.toml")
    f.write_text(_model_text().replace("format_version = 1", "format_version = 2"))
    with pytest.raises(ModelFileError, match="newer"):
        pose_model_overrides(f)


def test_square_is_the_reference_file_naming_every_key() -> None:
    sc = load_scenario("square")
    assert sc.raw == sc.params  # nothing left to defaults: every key is in the file


@pytest.mark.parametrize("key", ["sigma_b", "sigma", "tau_s", "sigma_v"])
def test_pose_model_readers_agree_a_zero_parameter_is_not_a_fit(tmp_path: Path, key: str) -> None:
    # Every parameter is fitted and stated in log space (se_log, cov_log, ci95), so 0 has
    # no place in a model file: the simulator, the filter and validation all refuse it.
    from sensorbench.characterize.pose.error_model import PoseErrorModel
    from sensorbench.sim.scenario import pose_model_overrides

    f = tmp_path / "model.toml"
    units = '\n[units]\nlength = "m"\nangle = "rad"\ntime = "s"\n'
    f.write_text(_model_text() + units)
    PoseErrorModel.load(f)  # the unchanged file loads everywhere
    text = (_model_text() + units).splitlines()
    at = text.index("[axes.pitch]") + 1 + ["sigma_b", "sigma", "tau_s", "sigma_v"].index(key)
    text[at] = f"{key} = 0.0"
    f.write_text("\n".join(text))
    aid = lambda p: PoseErrorModel.load(p).aid_model()  # noqa: E731
    for reader in (pose_model_overrides, PoseErrorModel.load, aid):
        with pytest.raises(ModelFileError, match=rf"axes\.pitch\.{key}.*> 0"):
            reader(f)
