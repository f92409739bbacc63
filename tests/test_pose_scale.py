"""Similarity alignment (Sim(3) / Sim(2)) against a known transform, and the scale check."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from sensorbench.characterize.pose.scale import scale_check, similarity_fit


def _points(rng: np.random.Generator, n: int = 400) -> np.ndarray:
    return rng.uniform(-2.0, 2.0, (n, 3)) * [1.0, 1.0, 0.2]


def test_sim3_recovers_scale_rotation_translation():
    rng = np.random.default_rng(0)
    src = _points(rng)
    rot = Rotation.from_euler("xyz", [0.1, -0.2, 0.7]).as_matrix()
    dst = 0.97 * src @ rot.T + [0.3, -1.0, 0.5]
    s, r, t = similarity_fit(src, dst)
    assert abs(s - 0.97) < 1e-12
    np.testing.assert_allclose(r, rot, atol=1e-12)
    np.testing.assert_allclose(t, [0.3, -1.0, 0.5], atol=1e-12)


def test_sim2_recovers_yaw_and_planar_scale():
    rng = np.random.default_rng(1)
    src = _points(rng)
    rot = Rotation.from_euler("z", -1.1).as_matrix()
    dst = src @ rot.T
    dst[:, :2] *= 1.05
    dst += [2.0, 1.0, 0.0]
    s, r, _ = similarity_fit(src, dst, planar=True)
    assert abs(s - 1.05) < 1e-12
    np.testing.assert_allclose(r, rot, atol=1e-12)


def test_scale_check_fails_only_beyond_tolerance():
    """Positions with 1 cm white noise; s = 1.003 passes a 0.5 % tolerance, 1.02 fails."""
    rng = np.random.default_rng(2)
    t = np.arange(0.0, 200.0, 0.1)
    ref = np.stack([np.sin(0.3 * t), np.cos(0.2 * t), 0.1 * np.sin(t)], axis=1)
    for scale, fails in ((1.003, False), (1.02, True)):
        sensor = ref / scale + rng.normal(0.0, 0.01, ref.shape)
        sc = scale_check([("s", t, sensor, ref)])
        assert sc.testable and sc.failed is fails, sc.to_dict()
        assert sc.ci95[0] < scale < sc.ci95[1]
        assert sc.residual_similarity_m <= sc.residual_rigid_m
