"""The slip widening takes what the heading filter took (docs/PODS.md, "A lifted or
slipping wheel"): a frame whose pods disagree with the IMU beyond the rounding and the slip
law widens the stated heading by the disagreement its odometry kept. Its gate's verdict
decides: an accepted increment is kept whole, a rejected one only up to the gate's bound
(the rest never enters the state), and a forced update after a streak of rejections puts
the streak's dropped rest back. Synthetic straight drive on the simulator's pods, the IMU
at the truth (heading 0), the pods' own increments exact but for the lost ticks: the
heading's error after a fault is known, and the widening A (the stated heading variance
with the IMU less without it is A²) must hold it.
"""

from __future__ import annotations

import numpy as np
from pods_sim_util import true_geometry

from sensorbench.fusion.axis_loop import NIS_GATE_99
from sensorbench.fusion.filter_noise import FilterNoise
from sensorbench.fusion.pod_kinematics import body_increments
from sensorbench.fusion.split_filter import FrameChunk, SplitFilter, SplitResult

K, HZ, SPEED = 400, 200.0, 0.5  # frames, Hz, m/s forward
FAULT = 200  # the first frame whose counts lose ticks


def _drive(lost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Frame times (K+1,) s and body increments (K, 3) of the straight drive, pod 0's
    count short by ``lost`` (K+1,) ticks."""
    geo = true_geometry(True)
    t = np.arange(K + 1) / HZ
    counts = np.floor(np.outer(t, geo.W @ np.array([SPEED, 0.0, 0.0])) + 0.37)
    counts[:, 0] -= lost
    return t, body_increments(geo.W, np.diff(counts, axis=0))


def _run(lost: np.ndarray) -> tuple[SplitResult, float, np.ndarray]:
    """The filters with the IMU at the truth; the widening A (rad) after each frame (K+1,)
    and the pods' heading increments (K,) rad."""
    t, inc = _drive(lost)
    f = SplitFilter(FilterNoise.default(), gate=NIS_GATE_99)
    geo = true_geometry(True)
    with_imu, without = (
        f.step(f.start(t[0], pods=geo), FrameChunk(t[1:], inc, None, imu))[1]
        for imu in (np.zeros(K), None)
    )
    a = np.sqrt(np.maximum(with_imu.var[:, 2] - without.var[:, 2], 0.0))
    return with_imu, a, inc[:, 2]


def _lost(ticks: float, frames: int = 1) -> np.ndarray:
    """Pod 0 short by ``ticks`` more in each of ``frames`` frames from :data:`FAULT`."""
    out = np.zeros(K + 1)
    out[FAULT + 1 : FAULT + 1 + frames] = ticks * np.arange(1, frames + 1)
    out[FAULT + 1 + frames :] = ticks * frames
    return out


def test_a_clean_drive_is_not_widened() -> None:
    assert np.all(_run(np.zeros(K + 1))[1] == 0.0)


def test_a_disagreement_the_gate_accepts_widens_by_all_of_it() -> None:
    res, a, dtheta = _run(_lost(10))
    assert res.tracks["theta"].accepted[FAULT]
    r = abs(dtheta[FAULT])  # the IMU says 0
    assert r > 0.002
    np.testing.assert_allclose(a[FAULT + 1 :], r, rtol=1e-9)
    assert np.all(a[: FAULT + 1] == 0.0)
    # the heading took it whole: its error is the disagreement, inside A
    assert abs(res.pose[-1, 2]) <= a[-1] * (1 + 1e-9)


def test_a_bounce_the_gate_rejects_widens_only_by_what_its_odometry_kept() -> None:
    res, a, dtheta = _run(_lost(200))
    theta = res.tracks["theta"]
    assert not theta.accepted[FAULT]
    # a rejected increment's odometry moves by the innovation clipped to the gate
    nu, s = theta.innovation[FAULT], theta.s[FAULT]
    kept = dtheta[FAULT] - nu + np.sign(nu) * np.sqrt(NIS_GATE_99 * s)
    np.testing.assert_allclose(a[-1], abs(kept), rtol=1e-9)
    # a fraction of the bounce's disagreement (all of it before the gate's verdict)
    assert a[-1] < 0.2 * abs(dtheta[FAULT])
    # and it holds the heading's error
    assert abs(res.pose[-1, 2]) <= a[-1] * (1 + 1e-9)


def test_a_lifted_wheel_forced_back_in_widens_by_its_whole_error() -> None:
    res, a, dtheta = _run(_lost(30, frames=12))
    theta = res.tracks["theta"]
    assert theta.resets >= 1 and theta.rejected >= 8
    err = abs(res.pose[-1, 2])  # every lost tick entered: the heading's error
    np.testing.assert_allclose(err, abs(dtheta.sum()), rtol=1e-6)
    # stated wide enough, not wider than a tenth over (measured: 4 %)
    assert err <= a[-1] * (1 + 1e-9) and a[-1] <= 1.1 * err
