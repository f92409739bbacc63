"""Synthetic lidar turns with known truth, ray-cast in a ``sensorbench.sim.world.World``.

Used by the lidar characterization and merge tests where a test needs direct
control over one injected property (a room with a footprint, an exact turning
rate). The acceptance tests of the characterization run on sessions written by
``sensorbench.sim.simulate_to_session``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from sensorbench.drivers.device_kinds import get_kind
from sensorbench.logs import NO_DEVICE_TIME, LidarTurns
from sensorbench.sim.emulator_ld19 import SyntheticLD19Samples, encode_packets
from sensorbench.sim.world import Obstacle, World, box_vertices

PoseFn = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


def ld19_bytes(s: SyntheticLD19Samples, ts0_ms: int = 0) -> bytes:
    """The LD19 packets of ``s`` (12 samples each, reported speed 3600 deg/s), stamped
    ``ts0_ms`` plus the ms of their first sample (mod 30000)."""
    k = s.t_s.size // 12
    return encode_packets(
        np.full(k, 3600),
        (np.round(s.angle_deg_cw[::12] * 100) % 36000).astype(int),
        (np.round(s.angle_deg_cw[11::12] * 100) % 36000).astype(int),
        np.round(s.range_m * 1000).astype(int).reshape(k, 12),
        s.intensity.reshape(k, 12),
        (ts0_ms + np.floor(s.t_s[::12] * 1000).astype(int)) % 30000,
    )


def room(boxes: bool = True) -> World:
    """A 8 m × 6 m room centred on the origin, with two boxes and a pillar-free layout."""
    walls = np.array([[-4.0, -3.0], [4.0, -3.0], [4.0, 3.0], [-4.0, 3.0]])
    obs = [Obstacle("walls", "wall", walls)]
    if boxes:
        obs.append(Obstacle("box1", "box", box_vertices((1.5, 1.0), (0.6, 0.4), 0.3)))
        obs.append(Obstacle("box2", "box", box_vertices((-2.0, -1.2), (0.8, 0.8), 0.0)))
    return World(obs)


def still(x: float = 0.0, y: float = 0.0, yaw: float = 0.0) -> PoseFn:
    """A pose function that stands at (x, y, yaw)."""

    def pose(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.asarray(t, dtype=float)
        return np.full(t.shape, x), np.full(t.shape, y), np.full(t.shape, yaw)

    return pose


def turning(rate_rad_s: float, x: float = 0.0, y: float = 0.0) -> PoseFn:
    """A pose function turning in place at ``rate_rad_s`` (rad/s)."""

    def pose(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.asarray(t, dtype=float)
        return np.full(t.shape, x), np.full(t.shape, y), rate_rad_s * t

    return pose


def driving(speed_m_s: float, x0: float = -2.0, y: float = 0.0) -> PoseFn:
    """A pose function driving along +x at ``speed_m_s``."""

    def pose(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = np.asarray(t, dtype=float)
        return x0 + speed_m_s * t, np.full(t.shape, y), np.zeros(t.shape)

    return pose


@dataclass
class Synth:
    """Turns plus per-point truth (``kind`` 0/1/2 as the simulator marks them)."""

    turns: LidarTurns
    kind: np.ndarray
    true_range: np.ndarray
    periods: np.ndarray
    skipped: np.ndarray


def _cast(world: World, origins: np.ndarray, angles: np.ndarray, max_range_m: float) -> np.ndarray:
    """Ray-cast ranges (m), ``inf`` beyond ``max_range_m`` as a lidar sees them."""
    r = world.raycast(origins, angles)
    r[r > max_range_m] = np.inf
    return r


def synth_scan(
    world: World,
    pose: PoseFn,
    duration_s: float,
    seed: int = 0,
    rate_hz: float = 10.0,
    samples_per_s: float = get_kind("ld19").sim_defaults["samples_per_s"],
    jitter_s: float = 0.0,
    skip_prob: float = 0.0,
    sigma_m: Callable[[np.ndarray], np.ndarray] | float = 0.0,
    false_prob: float = 0.0,
    edge_prob: float = 0.0,
    mount: tuple[float, float, float] = (0.0, 0.0, 0.0),
    t0_s: float = 0.0,
    phase_rad: float = 0.0,
    max_range_m: float = 12.0,
) -> Synth:
    """Simulate a clockwise-spinning 2D lidar; stored angles CCW from sensor forward.

    Edge outliers: a sample whose beam (±0.25°) straddles a depth step of more
    than 0.1 m becomes, with probability ``edge_prob``, a mix of the two ranges.
    """
    rng = np.random.default_rng(seed)
    n_max = int(duration_s * rate_hz * 1.2) + 2
    periods = 1.0 / rate_hz + jitter_s * rng.standard_normal(n_max)
    starts = t0_s + np.concatenate([[0.0], np.cumsum(periods[:-1])])
    keep = starts + periods <= t0_s + duration_s
    periods, starts = periods[keep], starts[keep]
    skipped = rng.random(periods.size) < skip_prob
    skipped[0] = False
    turns, kinds, truths = [], [], []
    for i in np.flatnonzero(~skipped):
        n = round(periods[i] * samples_per_s)
        frac = np.arange(n) / n
        t = starts[i] + frac * periods[i]
        native = np.mod(2 * np.pi * frac + phase_rad, 2 * np.pi)
        stored = np.mod(-native, 2 * np.pi)
        x, y, yaw = pose(t)
        c, s = np.cos(yaw), np.sin(yaw)
        ox = x + c * mount[0] - s * mount[1]
        oy = y + s * mount[0] + c * mount[1]
        wang = yaw + mount[2] + stored
        origins = np.column_stack([ox, oy])
        true_r = _cast(world, origins, wang, max_range_m)
        r = true_r.copy()
        sig = sigma_m(true_r) if callable(sigma_m) else np.full(n, sigma_m)
        fin = np.isfinite(r)
        r[fin] += sig[fin] * rng.standard_normal(int(fin.sum()))
        kind = np.zeros(n, dtype=np.uint8)
        if edge_prob > 0:
            half = np.radians(0.25)
            ra = _cast(world, origins, wang - half, max_range_m)
            rb = _cast(world, origins, wang + half, max_range_m)
            both = np.isfinite(ra) & np.isfinite(rb) & (np.abs(ra - rb) > 0.1)
            pick = both & (rng.random(n) < edge_prob)
            w = rng.uniform(0.2, 0.8, n)
            r[pick] = (w * ra + (1 - w) * rb)[pick]
            kind[pick] = 1
        if false_prob > 0:
            pick = (kind == 0) & (rng.random(n) < false_prob)
            r[pick] = rng.uniform(0.1, 8.0, int(pick.sum()))
            kind[pick] = 2
        t_ns = np.rint(t * 1e9).astype(np.int64)
        turns.append(
            LidarTurns(
                [t_ns[0]],
                [t_ns[0]],
                [rate_hz],
                [n],
                [0],
                stored,
                r,
                np.full(n, 200),
                t_ns,
            )
        )
        kinds.append(kind)
        truths.append(true_r)
    out = LidarTurns.concat(turns)
    return Synth(out, np.concatenate(kinds), np.concatenate(truths), periods, skipped)


def without_device_time(turns: LidarTurns) -> LidarTurns:
    """The same turns with no device clock."""
    return replace(turns, device_ns=np.full(turns.n_turns, NO_DEVICE_TIME))


def write_session(path, streams: dict[str, LidarTurns], attrs: dict | None = None, events=()):
    """Write lidar streams (and events ``(t_ns, source, kind, message)``) to a session file."""
    from sensorbench.logs import SessionWriter

    with SessionWriter(path, label="synthetic", swmr=False) as w:
        for name in streams:
            w.add_lidar(name, attrs=(attrs or {}).get(name, {"model": "LD19"}))
        for name, turns in streams.items():
            w.append_turns(name, turns)
        for ev in events:
            w.event(*ev)
    return path
