"""Honesty of the pod fit and the split filters on drives of a foreign world
(``tests/foreign/pods_world.py``), brought in as a user's files are: CSV pods and TUM
mocap through ``sensorbench import``, then ``fit pods``, ``fit noise -o`` and
``replay -o`` through the CLI.

Per seed (:data:`SEEDS`, 12): the pods and noise are fitted on that seed's fixed drives
(forward, sideways, spin, square) and the held-out drives (arcs, crab, and the forward
and sideways drives recorded again with fresh noise) are replayed against mocap. Each
seed's figures are cached under pytest's cache dir (keyed by the world's source and
:data:`RESULTS_VERSION`), computed by the chunk tests (:data:`CHUNKS`, each < 300 s on 2
busy cores); the pooled tests read the cache and compute what is missing.

Tolerances:

- **Coverage** (truth inside the stated 2σ, pooled over seeds per drive and axis): the
  target band 90–98 %. A replay's samples are correlated; the replay's own effective
  sample size (K_eff of its NEES band) is ≥ 40 per drive and axis here, so 12 seeds give
  ≥ 480 independent samples: a consistent filter's pooled fraction has sd
  √(0.954·0.046/480) = 0.96 %, and 90 % and 98 % are 5.6σ and 2.7σ away.
- **NEES**: per seed, drive and axis the replay's mean NEES against its own 95 % band;
  a consistent filter is outside with 5 % per case, so ≥ 4 of 12 seeds outside has
  probability 0.2 % (binomial).
- **Fit calibration**: per pod parameter, |fit − truth| ≤ 2 stated σ in ≥ 90 % of seeds;
  of 12 seeds at 95.4 %, ≤ 9 inside has probability 1.7 % (binomial), so ≥ 10 are
  required.

Targets the code misses are ``xfail(strict=True)`` with the measured figure (docs/PODS.md
"Measured figures").
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from foreign.pods_world import FIT_DRIVES, TEST_DRIVES, draw_rig, write_drive

from sensorbench.cli import cli
from sensorbench.fusion.split_filter import load_noise_model
from sensorbench.logs import Session

# one xdist worker: the chunk and pooled tests share pytest's cache and its seed folders
pytestmark = pytest.mark.xdist_group("test_pods_foreign_honesty")

SEEDS = tuple(range(12))
CHUNKS = (SEEDS[:4], SEEDS[4:8], SEEDS[8:])
AXES = ("x", "y", "theta")
PARAMS = (
    ("distance_per_tick_m", "sigma_distance_per_tick", "distance_per_tick"),
    ("rolling_angle_rad", "sigma_rolling_angle", "angle"),
    ("lever_arm_m", "sigma_lever_arm", "lever"),
)

_HERE = Path(__file__).parent
RESULTS_VERSION = 1
"""Bump when :func:`run_seed` changes what it measures (the cache key also hashes the world)."""
_KEY = hashlib.sha256((_HERE / "foreign" / "pods_world.py").read_bytes()).hexdigest()[:12]


def _invoke(args: list[str], ok: tuple[int, ...] = (0,)) -> str:
    res = CliRunner().invoke(cli, args)
    crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
    assert res.exit_code in ok and not crashed, res.output
    return res.output


def run_seed(seed: int, tmp: Path) -> dict[str, Any]:
    """One seed's pipeline through the CLI in a fresh ``tmp``; its figures (JSON-ready)."""
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    sessions = {}
    for name in (*FIT_DRIVES, *TEST_DRIVES):
        files = write_drive(tmp, name, seed)
        s = tmp / f"{name}.h5"
        s.unlink(missing_ok=True)
        _invoke(["import", "pods", "--format", "csv", str(files.pods_csv), "--into", str(s)])
        _invoke(["import", "mocap", "--format", "tum", str(files.mocap_tum), "--into", str(s)])
        sessions[name] = s
    fit_args = [str(sessions[n]) for n in FIT_DRIVES]
    pods, noise = tmp / "pods.toml", tmp / "noise.toml"
    doc = json.loads(
        _invoke(["fit", "pods", *fit_args, "--counts-per-rev", "2000", "-o", str(pods), "--json"])
    )
    rig = draw_rig(seed)
    truth = {
        "distance_per_tick": rig.distance_per_tick,
        "angle": rig.angle,
        "lever": rig.lever,
    }
    z = {
        key: [(p[key] - truth[t][i]) / p[sig] for i, p in enumerate(doc["pods"])]
        for key, sig, t in PARAMS
    }
    # exit 1: the NIS check's diagnosis; the model is still written
    _invoke(["fit", "noise", *fit_args, "--pods", str(pods), "-o", str(noise)], ok=(0, 1))
    load_noise_model(noise)
    replays = {}
    for name in TEST_DRIVES:
        est = tmp / f"est_{name}.h5"
        out = _invoke(
            [
                *("replay", str(sessions[name]), "--pods", str(pods)),
                *("--noise", str(noise), "-o", str(est), "--json"),
            ]
        )
        cons = json.loads(out)["consistency"]
        with Session(est) as s:
            batch = s.pose("estimate").read()
        # the estimate stream's per-sample variances: covariance x, y and rotation about z
        assert batch.covariance is not None
        var = batch.covariance[:, [0, 1, 5], [0, 1, 5]]
        replays[name] = {
            "variances_finite_positive": bool(np.all(np.isfinite(var)) and np.all(var > 0)),
            **{
                a: {
                    "in2": cons[a]["coverage"]["2sigma"]["actual"],
                    "nees": cons[a]["mean_nees"],
                    "band": cons[a]["nees_band95"],
                }
                for a in AXES
            },
        }
    return {"z": z, "replay": replays}


def seed_result(cache: Any, seed: int) -> dict[str, Any]:
    """The seed's figures from pytest's cache, computed when missing."""
    key = f"pods_foreign/{_KEY}/v{RESULTS_VERSION}/{seed}"
    hit = cache.get(key, None)
    if hit is None:
        hit = run_seed(seed, cache.mkdir(f"pods_foreign_{seed}"))
        cache.set(key, hit)
    return hit


@pytest.fixture
def results(request) -> list[dict[str, Any]]:
    return [seed_result(request.config.cache, s) for s in SEEDS]


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(len(CHUNKS)))
def test_seed_chunk_runs_and_writes_estimates_with_variances(request, chunk: int) -> None:
    for seed in CHUNKS[chunk]:
        r = seed_result(request.config.cache, seed)
        for name in TEST_DRIVES:
            assert r["replay"][name]["variances_finite_positive"], (seed, name)


def coverage(results: list[dict[str, Any]], drive: str, axis: str) -> float:
    return float(np.mean([r["replay"][drive][axis]["in2"] for r in results]))


def nees_outside(results: list[dict[str, Any]], drive: str, axis: str) -> int:
    rows = [r["replay"][drive][axis] for r in results]
    return sum(not (row["band"][0] <= row["nees"] <= row["band"][1]) for row in rows)


def fit_inside(results: list[dict[str, Any]], key: str, pod: int) -> int:
    return sum(abs(r["z"][key][pod]) <= 2.0 for r in results)


# measured over seeds 0-11: the targets the code misses
MISSED_COVERAGE = {
    ("crab", "x"): "98.8 % inside 2σ (target 90-98 %): over-cautious",
    ("crab", "theta"): "99.3 % inside 2σ (target 90-98 %): over-cautious",
    ("forward_again", "x"): "79.7 % inside 2σ (target 90-98 %): along-track overconfident",
    ("sideways_again", "x"): "88.4 % inside 2σ (target 90-98 %)",
    ("sideways_again", "y"): "84.9 % inside 2σ (target 90-98 %): along-track overconfident",
}
MISSED_NEES = {
    ("arcs", "x"): "mean NEES outside its band in 5 of 12 seeds (pooled mean 0.84)",
    ("arcs", "y"): "mean NEES outside its band in 5 of 12 seeds (pooled mean 1.07)",
    ("forward_again", "x"): "mean NEES outside its band in 4 of 12 seeds (pooled mean 6.86)",
}


def _cases(missed: dict[tuple[str, str], str]) -> list[Any]:
    """(drive, axis) cases, the missed ones as strict xfails with the measured figure."""
    return [
        pytest.param(d, a, marks=pytest.mark.xfail(strict=True, reason=missed[(d, a)]))
        if (d, a) in missed
        else pytest.param(d, a)
        for d in TEST_DRIVES
        for a in AXES
    ]


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), _cases(MISSED_COVERAGE))
def test_truth_inside_the_stated_two_sigma(results, drive: str, axis: str) -> None:
    c = coverage(results, drive, axis)
    assert 0.90 <= c <= 0.98, (drive, axis, c)


@pytest.mark.slow
@pytest.mark.parametrize(("drive", "axis"), _cases(MISSED_NEES))
def test_mean_nees_inside_its_band(results, drive: str, axis: str) -> None:
    assert nees_outside(results, drive, axis) <= 3


@pytest.mark.slow
@pytest.mark.parametrize("pod", range(3))
@pytest.mark.parametrize("key", [p[0] for p in PARAMS])
def test_fitted_pod_parameters_within_two_sigma_of_truth(results, key: str, pod: int) -> None:
    assert fit_inside(results, key, pod) >= 10
