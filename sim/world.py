"""A 2D world of polygons (stored as edge segments) and circles, with vectorised ray
casting; metres in the world frame, radians counter-clockwise from its x axis."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sensorbench.errors import SimError

_CHUNK = 8192


@dataclass(frozen=True)
class Obstacle:
    """One named obstacle (``kind`` wall, box, polygon or pillar): a closed polygon of
    (V, 2) ``vertices`` (m), or for a pillar a circle of ``center`` and ``radius`` (m)."""

    name: str
    kind: str
    vertices: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    center: tuple[float, float] = (0.0, 0.0)
    radius: float = 0.0

    @property
    def is_circle(self) -> bool:
        """True for pillars."""
        return self.radius > 0.0


def box_vertices(center: tuple[float, float], size: tuple[float, float], yaw: float) -> np.ndarray:
    """Corners (4, 2) of a ``size`` (m) rectangle centred at ``center``, rotated by ``yaw`` rad."""
    hx, hy = size[0] / 2.0, size[1] / 2.0
    local = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy]])
    c, s = np.cos(yaw), np.sin(yaw)
    rot = np.array([[c, -s], [s, c]])
    return local @ rot.T + np.asarray(center, dtype=float)


class World:
    """Walls, boxes and pillars of a 2D scene (edge orientation does not matter), plus the
    floor area the mocap cameras cover, ``mocap_volume`` = ``(xmin, ymin, xmax, ymax)`` (m)."""

    def __init__(
        self,
        obstacles: list[Obstacle],
        mocap_volume: tuple[float, float, float, float] = (-np.inf, -np.inf, np.inf, np.inf),
    ) -> None:
        self.obstacles = list(obstacles)
        self.mocap_volume = tuple(float(v) for v in mocap_volume)
        segs = []
        for ob in self.obstacles:
            if ob.is_circle:
                continue
            v = np.asarray(ob.vertices, dtype=float)
            if v.ndim != 2 or v.shape[1] != 2 or len(v) < 2:
                raise SimError(
                    f"obstacle {ob.name!r}: vertices must be a list of >= 2 [x, y] pairs"
                )
            closed = v if len(v) == 2 else np.vstack([v, v[:1]])
            segs.append(np.hstack([closed[:-1], closed[1:]]))
        self.segments = np.vstack(segs) if segs else np.zeros((0, 4))
        circles = [(ob.center[0], ob.center[1], ob.radius) for ob in self.obstacles if ob.is_circle]
        self.circles = np.asarray(circles, dtype=float).reshape(-1, 3)

    def in_mocap_volume(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Boolean mask: which floor points (m) lie inside the mocap volume."""
        x0, y0, x1, y1 = self.mocap_volume
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        return (x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)

    def raycast(self, origins_xy: np.ndarray, angles_world_rad: np.ndarray) -> np.ndarray:
        """Ranges (K,) of K rays at world angles (K,) rad from one origin (2,) m or each from
        its own (K, 2); ``inf`` marks no hit. A ray starting exactly on a surface does not
        hit it (strictly positive distance)."""
        angles = np.asarray(angles_world_rad, dtype=float).ravel()
        origins = np.asarray(origins_xy, dtype=float).reshape(-1, 2)
        if len(origins) not in (1, len(angles)):
            raise SimError(f"raycast: {len(origins)} origins but {len(angles)} angles")
        origins = np.broadcast_to(origins, (angles.size, 2))
        out = np.full(len(angles), np.inf)
        for lo in range(0, len(angles), _CHUNK):
            hi = min(lo + _CHUNK, len(angles))
            out[lo:hi] = self._cast_chunk(origins[lo:hi], angles[lo:hi])
        return out

    def _cast_chunk(self, o: np.ndarray, ang: np.ndarray) -> np.ndarray:
        ux, uy = np.cos(ang)[:, None], np.sin(ang)[:, None]
        ox, oy = o[:, 0:1], o[:, 1:2]
        best = np.full(len(ang), np.inf)
        if len(self.segments):
            px, py, qx, qy = (self.segments[:, k][None, :] for k in range(4))
            dx, dy = qx - px, qy - py
            wx, wy = px - ox, py - oy
            denom = ux * dy - uy * dx
            with np.errstate(divide="ignore", invalid="ignore"):
                t = (wx * dy - wy * dx) / denom
                s = (wx * uy - wy * ux) / denom
            hit = (denom != 0) & (t > 1e-12) & (s >= 0.0) & (s <= 1.0)
            best = np.minimum(best, np.where(hit, t, np.inf).min(axis=1))
        if len(self.circles):
            cx, cy, r = (self.circles[:, k][None, :] for k in range(3))
            fx, fy = ox - cx, oy - cy
            b = fx * ux + fy * uy
            c = fx * fx + fy * fy - r * r
            disc = b * b - c
            with np.errstate(invalid="ignore"):
                sq = np.sqrt(disc)
            t = np.where(-b - sq > 1e-12, -b - sq, -b + sq)
            hit = (disc >= 0) & (t > 1e-12)
            best = np.minimum(best, np.where(hit, t, np.inf).min(axis=1))
        return best

    def contains_obstacle_point(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Boolean mask: which points (m) lie inside a box, polygon or pillar (walls excluded)."""
        x = np.asarray(x, dtype=float).ravel()
        y = np.asarray(y, dtype=float).ravel()
        inside = np.zeros(len(x), dtype=bool)
        for ob in self.obstacles:
            if ob.kind == "wall":
                continue
            if ob.is_circle:
                inside |= (x - ob.center[0]) ** 2 + (y - ob.center[1]) ** 2 < ob.radius**2
                continue
            v = np.asarray(ob.vertices, dtype=float)
            xi, yi = v[:, 0], v[:, 1]
            xj, yj = np.roll(xi, 1), np.roll(yi, 1)
            crosses = ((yi[None, :] > y[:, None]) != (yj[None, :] > y[:, None])) & (
                x[:, None]
                < (xj - xi)[None, :] * (y[:, None] - yi[None, :]) / (yj - yi + 1e-300)[None, :]
                + xi[None, :]
            )
            inside |= (crosses.sum(axis=1) % 2) == 1
        return inside


def build_obstacles(specs: list[dict]) -> list[Obstacle]:
    """Obstacles from validated ``[[world.obstacles]]`` (or ``[[robot.occluders]]``) entries:
    ``box`` (``center_m``, ``size_m``, ``yaw_deg``), ``pillar`` (``center_m``, ``radius_m``)
    or ``polygon`` (``vertices_m``)."""
    out = []
    for i, ob in enumerate(specs):
        name = ob.get("name") or f"{ob['kind']}{i}"
        if ob["kind"] == "box":
            verts = box_vertices(ob["center_m"], ob["size_m"], np.deg2rad(ob["yaw_deg"]))
            out.append(Obstacle(name, "box", vertices=verts))
        elif ob["kind"] == "pillar":
            centre = (ob["center_m"][0], ob["center_m"][1])
            out.append(Obstacle(name, "pillar", center=centre, radius=float(ob["radius_m"])))
        else:
            out.append(Obstacle(name, "polygon", vertices=np.asarray(ob["vertices_m"], float)))
    return out


def build_world(spec: dict) -> World:
    """Build a :class:`World` from a validated ``[world]`` scenario table: the lab's
    inner walls, a ``size_m`` rectangle centred at the origin, plus its obstacles."""
    w, d = spec["size_m"]
    walls = Obstacle("walls", "wall", vertices=box_vertices((0.0, 0.0), (w, d), 0.0))
    x0, y0, x1, y1 = spec["mocap_volume_m"]
    return World([walls, *build_obstacles(spec.get("obstacles", []))], (x0, y0, x1, y1))
