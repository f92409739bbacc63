"""The vectorised quaternion forms (characterize/pose/align.py) agree with scipy's Rotation."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from sensorbench.characterize.pose.align import (
    Interpolator,
    PoseTrack,
    quat_as_rotvec,
    quat_from_rotvec,
    quat_inv,
    quat_mul,
)


def _same_rotation(a: np.ndarray, b: np.ndarray) -> None:
    """q and -q are one rotation: compare up to sign, to rounding."""
    sign = np.sign(np.sum(a * b, axis=-1, keepdims=True))
    np.testing.assert_allclose(a, sign * b, atol=1e-12)


def test_product_inverse_and_rotation_vectors_match_scipy() -> None:
    rng = np.random.default_rng(0)
    a, b = Rotation.random(500, rng), Rotation.random(500, rng)
    _same_rotation(quat_mul(a.as_quat(), b.as_quat()), (a * b).as_quat())
    _same_rotation(quat_inv(a.as_quat()), a.inv().as_quat())
    v = np.concatenate([a.as_rotvec(), 1e-7 * rng.standard_normal((20, 3)), np.zeros((1, 3))])
    _same_rotation(quat_from_rotvec(v), Rotation.from_rotvec(v).as_quat())
    q = Rotation.from_rotvec(v).as_quat()
    q[::2] *= -1.0  # either sign of a quaternion gives the same rotation vector
    np.testing.assert_allclose(quat_as_rotvec(q), v, atol=1e-12)


def test_interpolation_is_slerp() -> None:
    rng = np.random.default_rng(1)
    t = np.cumsum(rng.uniform(0.005, 0.02, 300))
    rot = Rotation.from_rotvec(np.cumsum(0.05 * rng.standard_normal((300, 3)), axis=0))
    q = rot.as_quat() * rng.choice([-1.0, 1.0], (300, 1))  # random signs, as files have
    interp = Interpolator(PoseTrack(t, np.zeros((300, 3)), q))
    ts = rng.uniform(t[0], t[-1], 1000)
    _same_rotation(interp.rotation(ts), Slerp(t, rot)(ts).as_quat())
