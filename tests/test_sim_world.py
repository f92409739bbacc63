"""Ray casting against hand-computed geometry."""

from __future__ import annotations

import numpy as np
import pytest

from sensorbench.errors import SimError
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.world import Obstacle, World, box_vertices, build_world


def _room() -> World:
    # 4 m x 2 m room centred at the origin, a pillar of radius 0.5 at (1, 0).
    walls = Obstacle("walls", "wall", vertices=np.array([[-2, -1], [2, -1], [2, 1], [-2, 1]]))
    pillar = Obstacle("p", "pillar", center=(1.0, 0.0), radius=0.5)
    return World([walls, pillar], mocap_volume=(-1, -1, 1, 1))


def test_rays_from_centre_hit_walls_and_pillar_at_hand_computed_ranges() -> None:
    w = _room()
    angles = np.array([0.0, np.pi / 2, np.pi, -np.pi / 2, np.pi * 3 / 4])
    r = w.raycast(np.array([0.0, 0.0]), angles)
    # east: pillar front face at x = 1 - 0.5; north/south walls at 1 m; west wall at 2 m;
    # 135°: the ray meets y = 1 at x = -1 (inside the room), range sqrt(2).
    np.testing.assert_allclose(r, [0.5, 1.0, 2.0, 1.0, np.sqrt(2)], rtol=0, atol=1e-12)


def test_tangent_and_oblique_hits_on_a_circle() -> None:
    w = World([Obstacle("p", "pillar", center=(0.0, 2.0), radius=1.0)])
    # A ray from the origin at angle a hits the circle at the smaller root of
    # t^2 - 4 t sin(a) + 3 = 0.
    a = np.deg2rad(np.array([90.0, 80.0, 65.0]))
    expect = 2 * np.sin(a) - np.sqrt(4 * np.sin(a) ** 2 - 3)
    np.testing.assert_allclose(w.raycast(np.zeros(2), a), expect, atol=1e-12)
    # sin(a) < sqrt(3)/2 misses: a = 55°.
    assert np.isinf(w.raycast(np.zeros(2), np.deg2rad([55.0]))[0])


def test_each_ray_uses_its_own_origin() -> None:
    w = _room()
    origins = np.array([[0.0, 0.0], [-1.0, 0.5], [1.8, 0.0], [-1.0, 0.0]])
    angles = np.array([np.pi / 2, np.pi, 0.0, np.pi])
    r = w.raycast(origins, angles)
    np.testing.assert_allclose(r, [1.0, 1.0, 0.2, 1.0], atol=1e-12)


def test_ray_from_outside_pointing_away_misses_and_parallel_ray_misses() -> None:
    seg = Obstacle("s", "polygon", vertices=np.array([[0.0, 1.0], [1.0, 1.0]]))
    w = World([seg])
    assert np.isinf(w.raycast(np.zeros(2), [-np.pi / 2])[0])
    assert np.isinf(w.raycast(np.array([-1.0, 1.0]), [np.pi])[0])
    assert w.raycast(np.array([0.5, 0.0]), [np.pi / 2])[0] == pytest.approx(1.0)


def test_rotated_box_and_chunking_match_direct_geometry() -> None:
    verts = box_vertices((3.0, 0.0), (1.0, 1.0), np.pi / 4)
    w = World([Obstacle("b", "box", vertices=verts)])
    # The 45°-rotated unit box's nearest corner on the x axis is at 3 - sqrt(2)/2.
    assert w.raycast(np.zeros(2), [0.0])[0] == pytest.approx(3 - np.sqrt(0.5), abs=1e-12)
    many = w.raycast(np.zeros(2), np.zeros(20000))  # more rays than one chunk
    assert np.all(many == many[0])


def test_inside_checks_and_mocap_volume() -> None:
    w = _room()
    # (1, 0) is the pillar's centre, (0, 0) free floor, (1.6, 0) just beyond its radius;
    # points inside the room are not "inside" the walls.
    inside = w.contains_obstacle_point([1.0, 0.0, 1.6], [0.0, 0.0, 0.0])
    assert inside.tolist() == [True, False, False]
    assert w.in_mocap_volume(np.array([0.0, 1.5]), np.array([0.0, 0.0])).tolist() == [True, False]


def test_lab_world_is_closed_so_every_ray_returns() -> None:
    w = build_world(load_scenario("square").world)
    ang = np.linspace(0, 2 * np.pi, 721)
    r = w.raycast(np.array([0.3, -0.2]), ang)
    assert np.isfinite(r).all() and r.max() <= np.hypot(8.0, 6.0)


def test_degenerate_polygon_is_rejected() -> None:
    with pytest.raises(SimError, match="vertices"):
        World([Obstacle("x", "polygon", vertices=np.array([[0.0, 0.0]]))])


def _reference_range(o: np.ndarray, a: float, segs: np.ndarray, circles: np.ndarray) -> float:
    """One ray, solved as 2x2 linear systems (segments) and a quadratic (circles)."""
    u = np.array([np.cos(a), np.sin(a)])
    best = np.inf
    for x0, y0, x1, y1 in segs:
        m = np.column_stack([u, -np.array([x1 - x0, y1 - y0])])
        if abs(np.linalg.det(m)) < 1e-14:
            continue
        t, s = np.linalg.solve(m, np.array([x0, y0]) - o)
        if t > 1e-9 and -1e-12 <= s <= 1 + 1e-12:
            best = min(best, t)
    for cx, cy, r in circles:
        roots = np.roots([1.0, 2 * u @ (o - [cx, cy]), (o - [cx, cy]) @ (o - [cx, cy]) - r * r])
        real = roots[np.isreal(roots)].real
        real = real[real > 1e-9]
        if real.size:
            best = min(best, real.min())
    return best


@pytest.mark.parametrize("seed", range(5))
def test_random_scenes_match_a_per_ray_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    obstacles = [
        Obstacle(
            f"b{i}",
            "box",
            vertices=box_vertices(
                tuple(rng.uniform(-3, 3, 2)), tuple(rng.uniform(0.1, 1.0, 2)), rng.uniform(0, np.pi)
            ),
        )
        for i in range(6)
    ]
    obstacles += [
        Obstacle(
            f"p{i}",
            "pillar",
            center=tuple(rng.uniform(-3, 3, 2)),
            radius=float(rng.uniform(0.05, 0.4)),
        )
        for i in range(4)
    ]
    w = World(obstacles)
    origins = rng.uniform(-4, 4, (200, 2))
    angles = rng.uniform(-np.pi, np.pi, 200)
    got = w.raycast(origins, angles)
    ref = np.array(
        [
            _reference_range(o, a, w.segments, w.circles)
            for o, a in zip(origins, angles, strict=True)
        ]
    )
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
    assert np.isfinite(got).sum() > 20
