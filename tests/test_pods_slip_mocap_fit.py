"""The wheels' slip law fitted against motion capture (drives without an IMU).

The drives are generated here (numpy, exact arcs per sub-step): forward, sideways and
turning legs, every pod's rolled distance slipping by ``N(0, σ_roll²·|Δd|)`` and dragged by
``N(0, σ_drag²·|Δd⊥|)`` on 7 sub-steps per 5 ms frame, counts floored to ticks, and a
110 Hz mocap of the true path with 0.3 mm and 0.3 mrad of white noise. Over 6 seeds of two
2-minute drives the fit must recover σ_roll² and σ_drag² within 3 of its own standard
errors every time (a consistent estimate is outside with probability 0.3 % per value, 3 %
over the 12), its standard errors must be informative (σ_drag² < 25 %, σ_roll² < 50 % of
the value: the law's term growing with the wheels' lateral acceleration is fitted beside
it and shares its evidence), and the spread of the
estimates over the seeds must match the stated standard errors (their RMS z between 0.5
and 1.6: for 6 values the 1st-99th percentile of √(χ²₆/6)); with that term in the
world, the fit recovers it.
"""

from __future__ import annotations

import math

import numpy as np
import pods_util
import pytest

from sensorbench.characterize.pods.slip_mocap_fit import fit_pod_slip_mocap
from sensorbench.errors import FitError
from sensorbench.fusion.pod_drive import Drive
from sensorbench.fusion.pod_kinematics import integrate_path

ROLL = 4.0e-7  # m² per m rolled
DRAG = 1.5e-6  # m² per m dragged
RATE = 200.0
SUB = 7
MOCAP_HZ = 110.0


def _twist(t: np.ndarray, translate: bool) -> np.ndarray:
    """Body twist (vx, vy, wz) of legs that start and stop smoothly (m/s, rad/s): forward,
    sideways and turning, or turning only."""
    leg = np.sin(math.pi * (t % 4.0) / 4.0) ** 2
    kind = (t // 4.0).astype(int) % 3
    v = np.zeros((t.size, 3))
    if translate:
        v[:, 0] = np.where(kind == 0, 0.4 * leg * np.sign(np.sin(t / 3)), 0.0)
        v[:, 1] = np.where(kind == 1, 0.3 * leg * np.sign(np.cos(t / 5)), 0.0)
    v[:, 2] = np.where(kind == 2, 1.0 * leg, 0.0)
    return v


def _drive(
    seed: int,
    duration_s: float = 120.0,
    translate: bool = True,
    turn: float = 0.0,
) -> Drive:
    """A drive of the legs of :func:`_twist`; ``turn`` the law's lateral-acceleration
    term (m² per m rolled per m·rad/s²)."""
    rng = np.random.default_rng(seed)
    geo = pods_util.slip_geometry()
    n = int(duration_s * RATE)
    h = 1.0 / (RATE * SUB)
    u = _twist(np.arange(n * SUB) * h, translate) * h  # body increments per sub-step
    c = geo.c
    rolled = (u @ geo.W.T) * c
    perp = np.abs(-np.sin(geo.phi) * u[:, :1] + np.cos(geo.phi) * u[:, 1:2])
    per_m = ROLL + turn * np.abs(rolled) / h * np.abs(u[:, 2:]) / h
    noise = np.sqrt(per_m * np.abs(rolled)) * rng.standard_normal(rolled.shape)
    noise += np.sqrt(DRAG * perp) * rng.standard_normal(rolled.shape)
    dist = np.vstack([np.zeros((1, 3)), np.cumsum(rolled + noise, axis=0)])[::SUB]
    counts = np.floor(dist / c).astype(np.int64)
    t = np.arange(counts.shape[0]) / RATE
    path = integrate_path(u)[::SUB]
    t_ref = np.arange(0.0, t[-1], 1.0 / MOCAP_HZ)
    ref = np.column_stack([np.interp(t_ref, t, path[:, k]) for k in range(3)])
    ref += rng.normal(0.0, 1.0, ref.shape) * np.array([3e-4, 3e-4, 3e-4])
    return Drive(
        label=f"gen{seed}",
        t_enc=t,
        counts=counts,
        imu_yaw=None,
        t_ref=t_ref,
        ref=ref,
        max_gap_s=0.05,
    )


def test_the_fit_recovers_the_slip_law_against_mocap() -> None:
    z = []
    for seed in range(6):
        fit = fit_pod_slip_mocap(
            [_drive(2 * seed), _drive(2 * seed + 1)], pods_util.slip_geometry(), [0, 0]
        )
        assert fit.drag_identified
        assert fit.roll_se < 0.5 * ROLL and fit.drag_se < 0.25 * DRAG, fit.as_dict()
        z.append(
            ((fit.slip.roll_var - ROLL) / fit.roll_se, (fit.slip.drag_var - DRAG) / fit.drag_se)
        )
    z_arr = np.array(z)
    assert np.all(np.abs(z_arr) <= 3.0), z_arr
    rms = np.sqrt(np.mean(z_arr**2, axis=0))
    assert np.all((rms > 0.5) & (rms < 1.6)), rms


def test_the_fit_recovers_slip_growing_with_lateral_acceleration() -> None:
    """A law whose slip per metre grows by its base value with every 0.05 m·rad/s² of
    the wheel's lateral acceleration: every term within 3 of its standard errors on 4
    seeds."""
    turn = ROLL / 0.05
    for seed in range(4):
        drives = [_drive(40 + 2 * seed + k, turn=turn) for k in range(2)]
        fit = fit_pod_slip_mocap(drives, pods_util.slip_geometry(), [0, 0])
        assert fit.turn_se is not None
        z = [
            (fit.slip.roll_var - ROLL) / fit.roll_se,
            (fit.slip.drag_var - DRAG) / fit.drag_se,
            (fit.slip.turn_var - turn) / fit.turn_se,
        ]
        assert np.all(np.abs(z) <= 3.0), (z, fit.as_dict())


def test_without_translation_nothing_is_dragged_and_the_drag_takes_the_roll() -> None:
    # a forward drive drags the sideways pod and a sideways one the parallel pods: only
    # turning in place drags none (mocap sees every pod, unlike the IMU's heading check)
    fit = fit_pod_slip_mocap([_drive(20, translate=False)], pods_util.slip_geometry(), [0.0])
    assert not fit.drag_identified
    assert fit.slip.drag_var == fit.slip.roll_var
    assert abs(fit.slip.roll_var - ROLL) <= 3 * fit.roll_se, fit.as_dict()


def test_a_drive_too_short_is_refused() -> None:
    with pytest.raises(FitError, match="intervals"):
        fit_pod_slip_mocap([_drive(21, duration_s=5.0)], pods_util.slip_geometry(), [0.0])


def test_the_creep_covariance_is_the_estimates_own_when_the_weights_are_wrong() -> None:
    """The creep's GLS runs under the fitted law's covariance, which need not be the
    intervals' own (a misfitted law, a robot whose slip the law does not describe): its
    stated covariance is the sandwich over the intervals' scores, so it follows the
    estimates' actual scatter. Intervals AR(1)-correlated (φ = 0.5) in pairs of drives,
    their covariance 4× the weights' inverse: over 400 draws the stated SE² agrees with
    the estimates' variance within 25 % (the variance's own s.e. over 400 draws is 7 %,
    the sandwich's bias at 200 intervals a few %), where the weights' own covariance
    would state a quarter of it or less."""
    from sensorbench.characterize.pods.slip_mocap_fit import _gls

    rng = np.random.default_rng(5)
    m, draws = 200, 400
    design = rng.normal(size=(m, 3, 2))
    weight = np.broadcast_to(np.eye(3), (m, 3, 3))
    drive = np.repeat([0, 1], m // 2)
    coefs, stated = [], []
    for _ in range(draws):
        white = rng.normal(size=(m, 3)) * 2.0 * math.sqrt(0.75)
        e = np.empty_like(white)
        e[0] = white[0] / math.sqrt(0.75)
        for k in range(1, m):
            e[k] = 0.5 * e[k - 1] * (drive[k] == drive[k - 1]) + white[k]
        coef, cov = _gls(design, design @ np.array([0.3, -0.1]) + e, weight, drive)
        coefs.append(coef)
        stated.append(np.diag(cov))
    ratio = np.mean(stated, axis=0) / np.var(coefs, axis=0)
    assert np.all(np.abs(ratio - 1.0) < 0.25), ratio


def test_a_fit_left_with_too_few_intervals_by_the_trim_is_refused(monkeypatch) -> None:
    """The interval count is checked after the trim too: with the χ²₃ bound at p = 0.5
    about half the (fault-free) intervals are beyond it (more as each refit on the kept
    ones shrinks the covariance), so 43 become 22 or fewer (binomial s.d. 3.3: 30 is 2.6
    s.d. above) and the fit refuses, naming the counts."""
    from sensorbench.characterize.pods import slip_mocap_fit

    drive = _drive(22, duration_s=24.0)
    fit = fit_pod_slip_mocap([drive], pods_util.slip_geometry(), [0.0])
    assert fit.n_windows + fit.trimmed >= 43 and fit.trimmed < 3
    monkeypatch.setattr(slip_mocap_fit, "TRIM_P", 0.5)
    with pytest.raises(FitError, match=r"only \d+ of \d+ intervals left .* it needs 30"):
        fit_pod_slip_mocap([drive], pods_util.slip_geometry(), [0.0])


@pytest.mark.parametrize("m, dead", [(50, True), (2, False)])
def test_the_creep_is_refused_where_its_intervals_do_not_identify_it(m: int, dead: bool) -> None:
    """A creep term its drives never move (its regressor 0) is not 0 ± 0, and 2 intervals
    for 2 terms give no sandwich (their scores sum to 0 at the solution): both refused."""
    from sensorbench.characterize.pods.slip_mocap_fit import _gls

    rng = np.random.default_rng(3)
    design = rng.normal(size=(m, 3, 2))
    if dead:
        design[:, :, 1] = 0.0
    weight = np.broadcast_to(np.eye(3), (m, 3, 3))
    with pytest.raises(FitError, match=f"creep's 2 terms from {m} intervals"):
        _gls(design, rng.normal(size=(m, 3)), weight, np.zeros(m, dtype=int))


def _jumped(drive: Drive, share: float, seed: int, size_m: float = 0.05) -> tuple[Drive, int]:
    """``drive`` with the reference's x stepping by ±``size_m`` (m) in the middle of a
    ``share`` of its intervals (a mocap fault: each step corrupts the one interval it
    falls in), and how many it corrupts."""
    import dataclasses

    from sensorbench.fusion.pod_drive import drive_intervals

    rng = np.random.default_rng(seed)
    _, _, bounds = drive_intervals(drive, 0.0, 0.5)
    pick = rng.choice(bounds.shape[0], round(share * bounds.shape[0]), replace=False)
    ref = drive.ref.copy()
    for t in drive.t_enc[bounds[pick].sum(axis=1) // 2]:
        ref[drive.t_ref >= t, 0] += size_m * rng.choice([-1.0, 1.0])
    return dataclasses.replace(drive, ref=ref), pick.size


@pytest.mark.xfail(strict=True, reason=(
    "masking: 0 of 54 jumped intervals trimmed, x noise 2.4-3.2e-4 m² against 1.2e-7 clean "
    "(seeds 0-2); a robust start (fit over the 2/3 of smallest q, calibration refitted on "
    "the kept) trims exactly the 54 but trims legit heavy-tailed intervals of two pods + IMU "
    "(x coverage 87.6 %, under test_pods_two_imu's 90 %)"))  # fmt: skip
def test_gross_reference_jumps_are_trimmed_not_taken_into_the_noise() -> None:
    """A quarter of the intervals of two 1-minute drives corrupted by 5 cm mocap jumps
    (about 100 σ of a clean interval's δ): exactly those are trimmed, the x reference
    noise stays at its clean size (1.2e-7 m²; under 1e-6 m² asserted, the fit over every
    interval took the jumps in at 2.4-3.2e-4 m² and trimmed none) and the law is within 3
    of its standard errors of the truth on 3 seeds (0.3 % per value for a consistent
    fit)."""
    for seed in range(3):
        drives, jumps = zip(*(_jumped(_drive(60 + 2 * seed + k, 60.0), 0.25, seed + 9 * k)
                              for k in range(2)), strict=True)  # fmt: skip
        fit = fit_pod_slip_mocap(list(drives), pods_util.slip_geometry(), [0, 0])
        assert fit.trimmed == sum(jumps), (fit.trimmed, jumps)
        assert fit.intercept[0] < 1e-6, fit.as_dict()
        z = ((fit.slip.roll_var - ROLL) / fit.roll_se, (fit.slip.drag_var - DRAG) / fit.drag_se)
        assert np.all(np.abs(z) <= 3.0), (z, fit.as_dict())


@pytest.mark.xfail(strict=True, reason=(
    "not refused: with 40 % of intervals jumped the fit trims none"))  # fmt: skip
def test_a_reference_faulty_in_over_a_third_of_its_intervals_is_refused() -> None:
    """Trimming more than a third of the intervals is no longer dropping faults but
    fitting whatever remains: refused, naming the count beyond the bound (two 1-minute
    drives, 40 % of their intervals jumped: the robust start keeps two thirds, so some
    jumps stay within and it names fewer, but over a third)."""
    drives, _ = zip(*(_jumped(_drive(70 + k, 60.0), 0.4, k) for k in range(2)), strict=True)
    with pytest.raises(FitError, match=r"(\d+) of (\d+) intervals beyond .* over 33%") as err:
        fit_pod_slip_mocap(list(drives), pods_util.slip_geometry(), [0, 0])
    n, m = (int(v) for v in str(err.value).split(" intervals")[0].split(" of "))
    assert m / 3 < n <= 0.4 * m + 1, str(err.value)
