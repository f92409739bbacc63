"""Pod kinematics: W, its inverse, SE(2) integration, two pods + IMU, counter wrap, model files."""

from __future__ import annotations

import numpy as np
import odometry_util as ou
import pytest

from sensorbench.errors import FusionError
from sensorbench.fusion.pod_kinematics import (
    PodGeometry,
    body_increments,
    body_increments_few,
    body_increments_two_pods_imu,
    condition_number,
    increments_inverse,
    integrate_path,
    load_pod_model,
    relative_poses,
    save_pod_model,
    se2_exp,
    se2_log,
)


def test_w_rows_match_contact_point_motion() -> None:
    g = ou.true_geometry()
    rng = np.random.default_rng(1)
    twist = rng.normal(size=(50, 3)) * [0.01, 0.01, 0.05]
    # contact point velocity v + ω × r projected on the rolling direction
    for i in range(3):
        u = np.array([np.cos(g.phi[i]), np.sin(g.phi[i])])
        vel = twist[:, :2] + twist[:, 2:3] * np.array([-ou.TRUE_Y[i], ou.TRUE_X[i]])
        np.testing.assert_allclose(twist @ g.W[i], vel @ u / g.c[i], rtol=1e-12)


def test_inverse_recovers_increments_and_condition_is_reported() -> None:
    g = ou.true_geometry()
    rng = np.random.default_rng(2)
    inc = rng.normal(size=(100, 3)) * [0.01, 0.01, 0.05]
    np.testing.assert_allclose(body_increments(g.W, inc @ g.W.T), inc, atol=1e-12)
    assert 1.0 <= condition_number(g.W) < 10.0
    # two parallel pods at the same place cannot see rotation: singular W
    bad = PodGeometry.from_mounts([0, 0, 0], [0.1, 0.1, 0], [0, 0, np.pi / 2], [1e-4] * 3)
    assert condition_number(bad.W) > 1e8
    with pytest.raises(FusionError, match="singular"):
        body_increments(bad.W, np.zeros((1, 3)))


@pytest.mark.parametrize("n_pods", [3, 4])
def test_a_few_frames_in_scalars_are_the_whole_conversion_bit_for_bit(n_pods) -> None:
    """Live converts a read's few frames in scalars: the same bits as body_increments on
    20 000 frames of counts (three pods: W⁻¹; four: W⁺)."""
    rng = np.random.default_rng(4)
    W = np.vstack([ou.true_geometry().W, [0.3, -0.7, 0.02]])[:n_pods] * 1e4
    dn = rng.integers(-300, 300, size=(20_000, n_pods)).astype(float)
    few = body_increments_few(increments_inverse(W).tolist(), dn.tolist())
    assert np.array(few).tobytes() == body_increments(W, dn).tobytes()


def test_se2_exp_log_round_trip() -> None:
    rng = np.random.default_rng(3)
    inc = rng.normal(size=(200, 3)) * [0.2, 0.2, 1.0]
    inc[:5, 2] = [0.0, 1e-9, -1e-9, 1e-7, 3.0]
    np.testing.assert_allclose(se2_log(se2_exp(inc)), inc, atol=1e-12)


def test_exact_integration_on_a_spin_about_an_off_centre_point() -> None:
    # spin at 1 rad/s about a point 0.2 m ahead of the body origin: the origin moves
    # on a circle of radius 0.2 m around that point, body twist (0, −0.2·ω, ω)
    steps = 40
    dt = 2 * np.pi / steps
    inc = np.tile([0.0, -0.2 * dt, dt], (steps, 1))
    exact = integrate_path(inc)
    np.testing.assert_allclose(np.hypot(exact[:, 0] - 0.2, exact[:, 1]), 0.2, atol=1e-12)
    np.testing.assert_allclose(exact[:, 2], np.arange(steps + 1) * dt, atol=1e-12)
    # the naive scheme: straight chords rotated by the start heading, which lag by half a
    # step: ≈ 0.2·dt/2 = 16 mm
    c, s = np.cos(exact[:-1, 2]), np.sin(exact[:-1, 2])
    chords = np.column_stack([c * inc[:, 0] - s * inc[:, 1], s * inc[:, 0] + c * inc[:, 1]])
    naive = np.vstack([[0.0, 0.0], np.cumsum(chords, axis=0)])
    err = np.hypot(*(naive - exact[:, :2]).T)
    assert err.max() > 0.01
    np.testing.assert_allclose(se2_log(relative_poses(exact)), inc, atol=1e-12)


def test_two_pods_plus_imu_matches_three_pods() -> None:
    g = ou.true_geometry()
    rng = np.random.default_rng(4)
    inc = rng.normal(size=(30, 3)) * [0.01, 0.01, 0.05]
    dn = inc @ g.W.T
    out = body_increments_two_pods_imu(g.W, dn, inc[:, 2], pods=(0, 2))
    np.testing.assert_allclose(out, inc, atol=1e-12)
    with pytest.raises(FusionError, match="parallel"):
        body_increments_two_pods_imu(g.W, dn, inc[:, 2], pods=(0, 1))


def test_model_file_round_trip_and_checks(tmp_path) -> None:
    g = ou.true_geometry()
    src = tmp_path / "in.h5"
    src.write_bytes(b"session bytes")
    prov = {"inputs": [{"path": str(src), "sha256": "x"}], "fit_options": {"interval_s": 0.5}}
    status = [{"distance_per_tick": "ok", "rolling_angle": "ok", "lever_arm": "ok"}] * 3
    path = save_pod_model(tmp_path / "pods.toml", g, prov, [{"status": s} for s in status])
    back = load_pod_model(path)
    np.testing.assert_allclose(back.W, g.W, rtol=1e-15)
    np.testing.assert_allclose(back.radius, ou.TRUE_R, rtol=1e-12)
    text = path.read_text()
    assert "sha256" in text and "software" in text and "created_utc" in text
    # wrong units, newer version, other kind, incomplete pod: refused
    (tmp_path / "u.toml").write_text(text.replace('lever_arm = "m"', 'lever_arm = "mm"'))
    with pytest.raises(FusionError, match="units"):
        load_pod_model(tmp_path / "u.toml")
    (tmp_path / "v.toml").write_text(text.replace("format_version = 1", "format_version = 9"))
    with pytest.raises(FusionError, match="format_version"):
        load_pod_model(tmp_path / "v.toml")
    (tmp_path / "k.toml").write_text(text.replace('kind = "pod_geometry"', 'kind = "other"'))
    with pytest.raises(FusionError, match="not 'pod_geometry'"):
        load_pod_model(tmp_path / "k.toml")
    refused = [dict(s) for s in status]
    refused[0]["lever_arm"] = "not identifiable: no spin in the data"
    p2 = save_pod_model(tmp_path / "r.toml", g, prov, [{"status": s} for s in refused])
    with pytest.raises(FusionError, match="no spin"):
        load_pod_model(p2)
    with pytest.raises(FusionError, match="no such"):
        load_pod_model(tmp_path / "missing.toml")


LAYOUTS = {
    # four mecanum wheels: a driven wheel's count is its contact's motion along the
    # direction across its rollers (±45°), so each is a pod at ∓45° (c the tread per
    # tick over √2)
    "mecanum": PodGeometry.from_mounts(
        x=[0.2, 0.2, -0.2, -0.2],
        y=[0.15, -0.15, 0.15, -0.15],
        phi=np.radians([-45.0, 45.0, 45.0, -45.0]),
        c=[2 * np.pi * 0.05 / 210 / np.sqrt(2)] * 4,
        counts_per_rev=[210] * 4,
    ),
    # two parallel pods and a third at 60° instead of 90°
    "pod_at_60": PodGeometry.from_mounts(
        x=[0.01, 0.0, -0.12],
        y=[0.16, -0.16, 0.0],
        phi=np.radians([0.0, 0.0, 60.0]),
        c=[7.5e-5] * 3,
        counts_per_rev=[2000] * 3,
    ),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_any_wheel_layout_is_fitted_and_dead_reckoned(layout: str) -> None:
    """Four mecanum wheels (210 ticks per revolution) and a pod at 60°: the geometry fit
    takes the counters there are, every parameter within 4σ of the truth (one seed must
    not fail by chance), and the fitted wheels dead-reckon a figure-8 (N > 3: the
    least-squares twist through W⁺) to within 2 % of its length."""
    from sensorbench.characterize.pods.geometry_fit import fit_pods

    g = LAYOUTS[layout]
    drives = [
        ou.make_drive(kind, 11 + i, geometry=g)[0]
        for i, kind in enumerate(("forward", "sideways", "spin"))
    ]
    fit = fit_pods(drives)
    assert fit.complete, fit.refusals()
    for est, sig, true in ((fit.c, fit.sigma_c, g.c), (fit.phi, fit.sigma_phi, g.phi)):
        assert np.all(np.abs(est - true) < 4 * sig), (est, true, sig)
    assert np.all(np.abs(fit.lever - g.lever) < 4 * fit.sigma_lever)
    drive, truth = ou.make_drive("figure8", 3, geometry=g)
    path = integrate_path(body_increments(fit.geometry().W, np.diff(drive.counts, axis=0)))
    end = truth["path"][np.searchsorted(truth["t"], truth["t_enc"][-1])]
    length = float(np.sum(np.hypot(*np.diff(truth["path"][:, :2], axis=0).T)))
    assert np.hypot(*(path[-1, :2] - end[:2])) < 0.02 * length


def test_the_slip_law_grows_with_lateral_acceleration(tmp_path) -> None:
    """Pod i's rolled-distance variance over a step of h s is ``roll·|d_i| + turn·s_i·v_i·|ω|``
    with s_i = √(d_i² + d⊥_i²) the distance its contact travels over the floor (rolled
    and dragged across its rolling direction, m), v_i = s_i/h (m/s) and ω = Δθ/h; the
    term survives the model file, and a file written without it loads it as 0."""
    base = ou.true_geometry()
    law = (4e-7, 1e-6, 3e-6)
    g = PodGeometry(base.c, base.phi, base.lever, slip=law)
    inc = np.array([[0.004, 0.0, 0.0], [0.002, 0.001, 0.01]])  # m, m, rad
    h = np.array([0.01, 0.005])
    roll, _ = g.slip_model().pod_tick_variances(inc, h)
    d = np.abs(inc @ g.W.T) * g.c  # rolled per pod (m)
    across = np.abs(-np.sin(g.phi) * inc[:, :1] + np.cos(g.phi) * inc[:, 1:2])  # dragged (m)
    s2, w = d**2 + across**2, np.abs(inc[:, 2:]) / h[:, None]
    np.testing.assert_allclose(roll * g.c**2, law[0] * d + law[2] * s2 / h[:, None] * w)
    no_dt, _ = g.slip_model().pod_tick_variances(inc)
    np.testing.assert_allclose(no_dt * g.c**2, law[0] * d)
    prov = {"inputs": [], "fit_options": {}}
    status = [{"status": dict.fromkeys(("distance_per_tick", "rolling_angle", "lever_arm"), "ok")}]
    path = save_pod_model(tmp_path / "pods.toml", g, prov, status * 3)
    assert load_pod_model(path).slip == law
    key = "turn_m2_per_m_per_m_rad_s2"
    text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith(key))
    (tmp_path / "old.toml").write_text(text)
    assert load_pod_model(tmp_path / "old.toml").slip == (*law[:2], 0.0)
