"""The split filters' replay numbers on a fixed drive are those recorded before the
filter-step refactor.

``tests/data/split_replay_golden.npz`` holds the inputs and outputs of two replays of
:func:`split_drive_util.hard_drive` (rejections, forced resets, nan frames, a coasting
gap, slip law, calibration error, rounding profile and correlation, acceleration fed
forward, q grown with the jerk, pose aiding with relocalizations and a rejected fix; and
the same frames with a body-axis drift model and no pods or aiding) and the noise fit's
likelihood of three parameter sets per axis (censored), recorded with
``tests/data/record_split_golden.py`` by the code before the inner loop took named inputs
and the replay ran in chunks (commit 04c8717). A comparison with the old code in the same
test run is impossible, so the file stands in for it.

The refactor changes how some sums round, deliberately: windowed sums are added each on
its own instead of as differences of running sums, products row by row instead of by BLAS,
the rounding series truncated per element, running sums continued from their carried
value (so that a chunk gives the numbers of the whole series to the last bit). So the
comparison is to 1e-12, not bit for bit: every quantity in the filters' own units
(estimate, velocity, innovation: m, rad, per s) to 1e-12 absolute, every variance (state,
S) to 1e-12 absolute and 1e-10 relative (the velocity variance, which follows the gains,
moves by 1.5e-12 relative over the drive's 570 updates), and the NIS ν²/S to what those
allow, |ΔNIS| ≤ (2|ν|·1e-12 + 1e-24)/S + NIS·1e-10 (ν divided by S ≈ 1e-9 m² magnifies
a last-bit change; for an absolute fix, whose ν and S are not recorded, |ν|/S = √(NIS/S)
with S at least σ_v² + σ² + σ_b²). The likelihood, a sum of such terms, to 1e-12
relative. The gate's decisions, the flags and the reset counts are equal.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from split_drive_util import GATE, POSE0, VAR0

from sensorbench.characterize.pods.noise_fit import axis_measurements
from sensorbench.characterize.pods.noise_likelihood import batch_nll
from sensorbench.fusion.aid_queue import AidAxis, Aiding, PoseAidModel
from sensorbench.fusion.filter_noise import AxisNoise, FilterNoise
from sensorbench.fusion.odometry_drift import OdometryDrift
from sensorbench.fusion.pod_kinematics import PodGeometry
from sensorbench.fusion.split_filter import SplitFilter, SplitResult
from sensorbench.logs.model_keys import AXES

GOLDEN = Path(__file__).resolve().parent / "data" / "split_replay_golden.npz"
ABS = 1e-12  # m, rad, m/s, rad/s
REL = 1e-10  # variances, beside ABS: a variance of 1e-9 m² within 1e-12 m² says little


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN) as f:
        return dict(f)


def _inputs(g: dict[str, np.ndarray]) -> dict:
    noise = {
        a: AxisNoise(q, r, q_jerk=qj, slip_scale=sc, drag_scale=dc)
        for a, (q, r, qj, sc, dc) in zip(AXES, g["noise"], strict=True)
    }
    pods = PodGeometry(
        g["pods_c"],
        g["pods_phi"],
        g["pods_lever"],
        row_cov=g["pods_row_cov"],
        slip=tuple(g["pods_slip"]),
    )
    aid = PoseAidModel(*(AidAxis(*row) for row in g["aid_model"]))
    aiding = Aiding(g["aid_t_s"], g["aid_pose"], g["aid_valid"], g["aid_relocalized"])
    return {"noise": noise, "pods": pods, "aid": aid, "aiding": aiding}


def _nis_bound(nis: np.ndarray, nu: np.ndarray, s: np.ndarray) -> np.ndarray:
    """What ν within ABS and S within REL allow the NIS ν²/S to move."""
    return (2 * np.abs(nu) * ABS + ABS**2) / s + nis * REL


def _compare(
    res: SplitResult, g: dict[str, np.ndarray], prefix: str, aid_r_min: float = math.inf
) -> None:
    def close(name: str, got: np.ndarray, rel: float | None = None) -> None:
        want = g[prefix + name]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=ABS, err_msg=name)
        if rel is not None:
            np.testing.assert_allclose(got[ok], want[ok], rtol=rel, atol=0, err_msg=name)

    close("pose", res.pose)
    close("velocity", res.velocity)
    close("var", res.var, REL)
    np.testing.assert_array_equal(res.coasting, g[prefix + "coasting"])
    for a, tr in res.tracks.items():
        close(f"{a}_var_v", tr.var_v, REL)
        close(f"{a}_innovation", tr.innovation)
        close(f"{a}_s", tr.s, REL)
        want, nu, s = (g[f"{prefix}{a}_{n}"] for n in ("nis", "innovation", "s"))
        for name in ("nis", "nis_chi2"):
            got, ref = getattr(tr, name), g[f"{prefix}{a}_{name}"]
            np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=name)
            ok = ~np.isnan(ref)
            assert np.all(np.abs(got - ref)[ok] <= _nis_bound(want, nu, s)[ok]), (a, name)
        ref, got = g[f"{prefix}{a}_aid_nis"], tr.aid_nis
        assert got.shape == ref.shape
        assert np.all(np.abs(got - ref) <= _nis_bound(ref, np.sqrt(ref * aid_r_min), aid_r_min))
        for flag in ("accepted", "aid_accepted"):
            np.testing.assert_array_equal(getattr(tr, flag), g[f"{prefix}{a}_{flag}"], a + flag)
        assert tr.resets == int(g[f"{prefix}{a}_resets"])


def test_aided_replay_with_pods_is_unchanged(golden) -> None:
    inp = _inputs(golden)
    noise = FilterNoise(inp["noise"]["x"], inp["noise"]["y"], inp["noise"]["theta"])
    filt = SplitFilter(noise, gate=GATE, aid_model=inp["aid"])
    res = filt.run(golden["t_s"], golden["inc"], POSE0, VAR0, inp["aiding"], inp["pods"])
    # the drive takes the paths it is meant to: each is in the recorded numbers
    assert all(t.rejected > 10 and t.resets > 0 for t in res.tracks.values())
    assert res.tracks["x"].aid_rejected == 1 and res.coasting.sum() == 1
    # every fix's r is at least σ_v² + σ² + σ_b² (the Gauss-Markov ratio is ≥ 1)
    r_min = min(
        m.sigma_v**2 + m.sigma**2 + m.sigma_b**2 for m in (inp["aid"].axis(a) for a in AXES)
    )
    _compare(res, golden, "aided_", r_min)


def test_replay_with_a_body_axis_drift_model_is_unchanged(golden) -> None:
    n = _inputs(golden)["noise"]
    noise = FilterNoise(n["x"], n["y"], n["theta"], OdometryDrift(golden["drift_coef"]))
    res = SplitFilter(noise, gate=GATE).run(golden["t_s"], golden["inc"], POSE0, VAR0)
    _compare(res, golden, "plain_")


def test_noise_fit_likelihood_is_unchanged(golden) -> None:
    inp = _inputs(golden)
    pods = inp["pods"]
    inc = np.nan_to_num(golden["inc"])
    series = axis_measurements(np.diff(golden["t_s"]), inc, pods.slip_model(), pods)
    sets = golden["nll_sets"]
    for a in AXES:
        got = batch_nll(series[a], *sets[:, :2].T, GATE, *sets[:, 2:].T, golden[f"nll_{a}_censor"])
        np.testing.assert_allclose(got, golden[f"nll_{a}"], rtol=1e-12, atol=0, err_msg=a)
