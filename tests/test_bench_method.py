"""The bench's method: interleaved rounds, the same warm-up for both sides, medians with
their spread, and every round in ``bench --json``."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys

import click
import numpy as np
import pytest

from sensorbench.benchmarks import BenchResult, Round, interleave


class _FakeClock:
    """A clock that advances only when a timed function says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleave_warms_both_sides_then_alternates_and_times_each_call() -> None:
    clock, calls = _FakeClock(), []

    def side(name: str, cost_s: float):
        def run() -> None:
            calls.append(name)
            clock.now += cost_s

        return run

    timing = interleave(side("ours", 1.0), side("ref", 10.0), rounds=4, clock=clock)
    # one untimed call of each first, then ours/ref, ref/ours, ... (ABBA order)
    assert calls == ["ours", "ref", "ours", "ref", "ref", "ours", "ours", "ref", "ref", "ours"]
    assert timing.ours_s == (1.0,) * 4
    assert timing.reference_s == (10.0,) * 4


def test_interleave_runs_the_given_warm_up_once_per_side() -> None:
    calls: list[str] = []
    interleave(
        lambda: calls.append("ours"),
        lambda: calls.append("ref"),
        rounds=1,
        warmup=(lambda: calls.append("warm ours"), lambda: calls.append("warm ref")),
    )
    assert calls == ["warm ours", "warm ref", "ours", "ref"]


def test_a_load_burst_moves_one_round_not_the_median() -> None:
    """A burst that slows one timed call 3x (round 0's ours) moves that round's ratio
    only; the median of the rounds is the undisturbed ratio."""
    clock, k = _FakeClock(), [0]
    slow = {3}  # calls 1 and 2 are the warm-up, call 3 is round 0's ours

    def side(cost_s: float):
        def run() -> None:
            k[0] += 1
            clock.now += cost_s * (3.0 if k[0] in slow else 1.0)

        return run

    timing = interleave(side(1.0), side(8.0), rounds=5, clock=clock)
    ratios = [r.value for r in timing.rounds(lambda o, r: r / o)]
    result = BenchResult.from_rounds("t", "ratio", timing.rounds(lambda o, r: r / o), "x")
    assert ratios.count(8.0) == 4
    assert result.value == 8.0
    assert result.spread == (min(ratios), 8.0)
    assert min(ratios) == pytest.approx(8.0 / 3.0)


def test_result_carries_median_spread_and_rounds_in_json() -> None:
    rounds = (Round(1.0, 5.0, 5.0), Round(1.0, 7.0, 7.0), Round(2.0, 8.0, 4.0))
    result = BenchResult.from_rounds("a", "n", rounds, "x", target=4.5)
    doc = json.loads(json.dumps(result.as_dict()))
    assert doc["value"] == 5.0
    assert doc["spread"] == {"min": 4.0, "max": 7.0}
    assert doc["rounds"] == [
        {"ours_s": 1.0, "reference_s": 5.0, "value": 5.0},
        {"ours_s": 1.0, "reference_s": 7.0, "value": 7.0},
        {"ours_s": 2.0, "reference_s": 8.0, "value": 4.0},
    ]
    assert doc["meets_target"] is True


def test_bench_json_has_rounds_for_every_figure_and_references_for_ratios() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from sensorbench.cli import main; main()",
         "bench", "--quick", "--only", "ld19", "--only", "session", "--json"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    results = json.loads(out.stdout)
    assert {r["area"] for r in results} == {"ld19", "session"}
    assert "running ld19 ..." in out.stderr and "running session ..." in out.stderr
    for r in results:
        values = [x["value"] for x in r["rounds"]]
        assert len(values) >= 3, r["name"]
        assert r["value"] == pytest.approx(statistics.median(values)), r["name"]
        assert r["spread"] == {"min": min(values), "max": max(values)}, r["name"]
        assert all(x["ours_s"] > 0 for x in r["rounds"]), r["name"]
    ratios = [r for r in results if "vs reference parser" in r["name"]]
    assert len(ratios) == 2
    for r in ratios:  # ours and the reference timed in each round
        assert all(x["reference_s"] > 0 for x in r["rounds"])
        if shutil.which("cc"):  # the strongest reference this machine can run
            assert "C state machine" in r["detail"], r["detail"]


def test_every_benchmark_module_has_a_run_and_helpers_are_not_listed() -> None:
    """A full run calls run() of every listed module (a helper listed crashed it)."""
    import importlib

    from sensorbench import benchmarks as bench

    assert "c_reference" not in bench.modules()
    for name in bench.modules():
        assert callable(importlib.import_module(f"sensorbench.benchmarks.{name}").run), name


def test_the_c_reference_decodes_what_the_parser_decodes() -> None:
    """The C state machine (compiled here) and the driver's parser agree packet for
    packet on a stream with corrupted bytes, in 1 KiB and 64 KiB reads; so does the
    Python struct fallback."""
    from sensorbench.benchmarks import ld19
    from sensorbench.benchmarks.c_reference import CReferenceUnavailable

    data = ld19._stream(5_000, corrupt_every=50)
    ld19._check_against_reference(data, ld19.struct_reference_parse)
    try:
        parse = ld19.c_reference()
    except CReferenceUnavailable as exc:
        pytest.skip(str(exc))
    ld19._check_against_reference(data, parse)
    assert np.array_equal(parse(data, 1024), parse(data, 1 << 16))
    assert len(parse(data, 1024)) == 5_000 - 5_000 // 50


def test_the_pod_reference_decodes_what_the_parser_decodes() -> None:
    """The capture bench's plain-Python reference returns the parser's frames field for
    field (unwrapped seq, device time, counters through their 16-bit wrap, IMU), on the
    bench's stream with a corrupted frame and stray bytes, in the bench's 4 KiB reads:
    it does the parser's work, not just the framing (it used to count frames only)."""
    from sensorbench.benchmarks import capture
    from sensorbench.drivers.pods_parser import PodFrames

    data, flen = capture._stream(3_000)
    bad = bytearray(data)
    bad[100 * flen + 12] ^= 0xFF  # a CRC error: one frame lost, a seq gap
    stream = bytes(bad[: 500 * flen]) + b"\xaa\x55\x13\x31junk" + bytes(bad[500 * flen :])
    frames = PodFrames.concat(capture._parse(stream, 4096))
    rows = capture._reference_parse(stream)
    assert len(frames) == len(rows) == 2_999
    assert ((frames.counts < 0) | (frames.counts >= 2**16)).any()  # the wrap is unwrapped
    assert capture._reference_matches(rows, frames)
    assert not capture._reference_matches([*rows[:-1], (0,) * len(rows[0])], frames)


def test_the_ray_cast_reference_gives_the_ray_casters_ranges() -> None:
    """The sim bench's per-ray loop (Python floats) and ``World.raycast`` agree on the
    bench's rays (hits on walls, boxes and the pillars' circles)."""
    from sensorbench.benchmarks import sim
    from sensorbench.sim.scenario import load_scenario
    from sensorbench.sim.simulation import Simulation

    world = Simulation(load_scenario("lidar_static"), seed=1).world
    angles, origin = sim._rays(quick=True)
    ref = sim._naive_raycast(world, origin, angles)
    assert np.isfinite(ref).all() and ref.dtype == np.float64
    np.testing.assert_allclose(ref, world.raycast(origin, angles), rtol=0, atol=1e-9)


def test_the_mcap_reference_writes_uncompressed_chunks_as_the_export(tmp_path) -> None:
    """The rosbag bench's reference (mcap's writer, rosbags' CDR) writes what the export
    writes, uncompressed chunks (mcap's default is zstd), and its messages read back."""
    from rosbags.typesys import Stores, get_typestore

    from sensorbench.benchmarks import rosbag

    T = get_typestore(Stores.ROS2_HUMBLE).types
    point = T["geometry_msgs/msg/Point"]
    msgs = [("/p", "geometry_msgs/msg/Point", 10 + k, point(x=1.0 * k, y=2.0, z=3.0))
            for k in range(500)]  # fmt: skip
    out = tmp_path / "reference.mcap"
    rosbag._mcap_rosbags(msgs, out)
    assert rosbag._chunk_compression(out) == {"none"}
    back = [(t, m.x) for _, _, t, m in rosbag._read_mcap(out)]
    assert back == [(10 + k, 1.0 * k) for k in range(500)]


def test_bench_prints_each_modules_figures_as_it_finishes(monkeypatch) -> None:
    """A module's rows appear before the next module starts (the first full run used to
    crash in a1 after minutes, having printed nothing)."""
    from click.testing import CliRunner

    from sensorbench import benchmarks as bench
    from sensorbench.cli import cli

    seen: list[str] = []

    def fake_import(name: str):
        area = name.rsplit(".", 1)[-1]

        class Module:
            @staticmethod
            def run(quick: bool):
                seen.append(f"run {area}")
                return [bench.BenchResult(area, "figure", 1.0, "x")]

        return Module

    monkeypatch.setattr(bench.importlib, "import_module", fake_import)
    monkeypatch.setattr(bench, "modules", lambda: ["alpha", "beta"])
    printed: list[str] = []
    real_echo = click.echo

    def echo(message=None, **kw):
        printed.append(f"{len(seen)}:{message}")
        real_echo(message, **kw)

    monkeypatch.setattr(click, "echo", echo)
    result = CliRunner().invoke(cli, ["bench", "--quick"])
    assert result.exit_code == 0, result.output
    rows = [p for p in printed if "figure" in p]
    assert rows[0].startswith("1:alpha: figure") and rows[1].startswith("2:beta: figure"), rows


def test_bench_command_names_every_benchmark_module() -> None:
    """The command's --only choices (listed so that --help imports no benchmark) are
    exactly the modules of benchmarks/."""
    from sensorbench import benchmarks as bench
    from sensorbench.commands.bench import BENCH_NAMES

    assert list(BENCH_NAMES) == bench.modules()
