"""A family of dead-wheel robots and motions, drawn at random (numpy only), so that no
single generator is the target of the pods' honesty tests.

Nothing of sensorbench is used; a drive leaves as the same text files as
:mod:`foreign.pods_world` (CSV ``t_s,c0,c1,c2`` pods, TUM mocap), brought in through
``sensorbench import``. Per seed :func:`draw_robot` draws, from wide ranges:

- **Pods.** Two near-parallel pods (rolling angles U(−15°, 15°)) at y = ±U(0.10, 0.20) m,
  a third at U(30°, 90°) (below 30° the robot's y is barely seen) at x = U(−0.18, 0.18) m;
  nominal radius U(16, 30) mm, each pod's radius within ±2 % of it; one CPR, log-uniform
  in 2000–8192; frames at U(100, 500) Hz on an MCU clock with a ±50 ppm rate error.
- **Slip laws.** Each millisecond a wheel's rolled distance d gains scrub of variance
  ``σ_roll²·|d| + σ_drag²·|d⊥|`` (σ_roll U(0.3, 1.5) mm/√m, σ_drag U(0.5, 3) mm/√m);
  **speed-dependent creep**: a systematic deficit ``k_v·|v_c|`` of d (k_v U(0, 0.4) % per
  m/s of the wheel's contact speed v_c) and scrub variance grown by ``(1 + |v_c|/v_s)``
  (v_s U(0.2, 1) m/s); **turn-dependent creep**: while turning and translating a deficit
  ``k_t·|v_c·ω|`` (k_t U(0, 0.5) % per m·rad/s²) and a scrub variance grown by
  ``(1 + |v_c·ω|/a_t)`` (a_t U(0.1, 0.6) m·rad/s²); **wheel lift**: a wheel stops counting
  for U(5, 30) ms at a rate U(0, 0.1) per metre of the robot's travel.
- **Mocap.** U(100, 240) Hz, white noise U(0.1, 0.5) mm and mrad, 1 % dropouts, one
  0.3 s occlusion.

Motions: the calibration drives (:data:`FIT_DRIVES`: forward, sideways, spin, square at
drawn speeds U(0.2, 0.45) m/s, U(0.5, 1.5) rad/s) and held-out ones of other kinds
(:data:`TEST_DRIVES`): a **slalom** (U(0.35, 0.7) m/s, turn rate U(0.5, 1.2) rad/s
swinging over U(3, 6) s), **strafe-while-turning** (three segments, sideways U(0.15, 0.35)
m/s while turning U(0.3, 1) rad/s), **arcs** (four segments, U(0.15, 0.6) m/s at
U(−1, 1) rad/s), **fast ramps** (stop-and-go to U(0.4, 0.8) m/s in 0.15 s) and a **fast
spin** (U(1.5, 3) rad/s, drifting U(0, 0.15) m/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from foreign.pods_world import STEP_S, T0_S, DriveFiles, _quat_z, integrate

FIT_DRIVES = ("forward", "sideways", "spin", "square")
TEST_DRIVES = ("slalom", "strafe_turn", "arcs", "fast_ramps", "fast_spin")
ALL_DRIVES = FIT_DRIVES + TEST_DRIVES
REST_S = 1.5
"""Rest at a drive's start and end (s)."""


@dataclass(frozen=True)
class Robot:
    """One draw: pods (positions (3, 2) m, angles (3,) rad, radii (3,) m), encoder and
    mocap timing, and the slip laws (see the module docstring for units)."""

    xy: np.ndarray
    angle: np.ndarray
    radius: np.ndarray
    cpr: int
    rate_hz: float
    clock_ppm: float
    mocap_hz: float
    mocap_sd: float
    scrub: tuple[float, float]
    creep_speed: tuple[float, float]
    creep_turn: tuple[float, float]
    lift_per_m: float

    @property
    def distance_per_tick(self) -> np.ndarray:
        """m per count of each pod."""
        return 2 * math.pi * self.radius / self.cpr

    @property
    def lever(self) -> np.ndarray:
        """x sin φ − y cos φ (m)."""
        return self.xy[:, 0] * np.sin(self.angle) - self.xy[:, 1] * np.cos(self.angle)


def draw_robot(seed: int) -> Robot:
    """The seed's robot."""
    rng = np.random.default_rng([seed, 351])
    u = rng.uniform
    xy = np.array([[u(-0.05, 0.05), u(0.10, 0.20)], [u(-0.05, 0.05), -u(0.10, 0.20)]])
    xy = np.vstack([xy, [u(-0.18, 0.18), u(-0.03, 0.03)]])
    angle = np.radians([u(-15, 15), u(-15, 15), u(30, 90)])
    return Robot(
        xy=xy,
        angle=angle,
        radius=u(0.016, 0.030) * (1 + u(-0.02, 0.02, 3)),
        cpr=round(math.exp(u(math.log(2000), math.log(8192)))),
        rate_hz=u(100, 500),
        clock_ppm=u(-50, 50),
        mocap_hz=u(100, 240),
        mocap_sd=u(0.1e-3, 0.5e-3),
        scrub=(u(0.3e-3, 1.5e-3), u(0.5e-3, 3e-3)),
        creep_speed=(u(0, 0.004), u(0.2, 1.0)),
        creep_turn=(u(0, 0.005), u(0.1, 0.6)),
        lift_per_m=u(0, 0.1),
    )


def _segments(segs: list[tuple[float, float, float, float]], ramp_s: float) -> np.ndarray:
    """Body twist (n, 3) of segments (duration s, vx, vy m/s, ω rad/s), raised-cosine ramps
    of ``ramp_s`` between them, at rest before and after."""
    segs = [(REST_S, 0.0, 0.0, 0.0), *segs, (REST_S, 0.0, 0.0, 0.0)]
    ends = np.cumsum([s[0] for s in segs])
    t = np.arange(0.0, ends[-1], STEP_S)
    v, prev = np.zeros((t.size, 3)), np.zeros(3)
    for end, seg in zip(ends, segs, strict=True):
        start, level = end - seg[0], np.array(seg[1:])
        w = 0.5 - 0.5 * np.cos(math.pi * np.clip((t - start) / ramp_s, 0.0, 1.0))
        inside = (t >= start) & (t < end)
        v[inside] = prev + (level - prev) * w[inside, None]
        prev = level
    return v


def drive_twist(name: str, seed: int) -> np.ndarray:
    """Body twist (vx, vy m/s, ω rad/s) of drive ``name`` at every 1-ms step (n, 3)."""
    rng = np.random.default_rng([seed, 352, ALL_DRIVES.index(name)])
    u = rng.uniform
    sign = lambda: rng.choice([-1.0, 1.0])  # noqa: E731
    if name == "forward":
        v = u(0.2, 0.45)
        return _segments([(6.0, v, 0, 0), (1.5, 0, 0, 0), (6.0, -v, 0, 0), (1.5, 0, 0, 0)] * 2, 0.6)
    if name == "sideways":
        v = u(0.2, 0.4)
        return _segments([(6.0, 0, v, 0), (1.5, 0, 0, 0), (6.0, 0, -v, 0), (1.5, 0, 0, 0)] * 2, 0.6)
    if name == "spin":
        w = u(0.5, 1.5)
        return _segments([(8.0, 0, 0, w), (1.5, 0, 0, 0), (8.0, 0, 0, -w)], 0.6)
    if name == "square":
        v, w = u(0.2, 0.45), u(0.5, 1.0)
        return _segments([(4.0, v, 0, 0), (1.0, 0, 0, 0), (math.pi / 2 / w, 0, 0, w)] * 4, 0.4)
    if name == "slalom":
        v, amp, period, dur = u(0.35, 0.7), u(0.5, 1.2), u(3, 6), 20.0
        out = _segments([(dur, v, 0, 0)], 0.6)
        t = np.arange(out.shape[0]) * STEP_S - REST_S
        swing = np.where((t > 0) & (t < dur), np.sin(2 * math.pi * t / period), 0.0)
        out[:, 2] = amp * swing * out[:, 0] / v
        return out
    if name == "strafe_turn":
        segs = [(7.0, u(-0.2, 0.2), sign() * u(0.15, 0.35), sign() * u(0.3, 1.0)) for _ in range(3)]
        return _segments(segs, 0.6)
    if name == "arcs":
        return _segments([(6.0, u(0.15, 0.6), 0, u(-1, 1)) for _ in range(4)], 0.6)
    if name == "fast_ramps":
        segs = []
        for _ in range(6):
            segs += [(2.0, sign() * u(0.4, 0.8), 0, 0), (0.8, 0, 0, 0)]
        return _segments(segs, 0.15)
    if name == "fast_spin":
        w, d = u(1.5, 3.0), u(0, 0.15)
        return _segments([(6.0, d, 0, w), (1.0, 0, 0, 0), (6.0, 0, d, -w)], 0.4)
    raise KeyError(name)


def wheel_ticks(robot: Robot, v: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each wheel's angle in ticks at every step boundary (n + 1, 3), not yet rounded."""
    px, py = robot.xy[:, 0], robot.xy[:, 1]
    vx, vy = v[:, :1] - v[:, 2:] * py, v[:, 1:2] + v[:, 2:] * px
    cos, sin = np.cos(robot.angle), np.sin(robot.angle)
    roll = (vx * cos + vy * sin) * STEP_S
    drag = (-vx * sin + vy * cos) * STEP_S
    speed = np.hypot(vx, vy)
    turn = speed * np.abs(v[:, 2:])
    (k_v, v_s), (k_t, a_t) = robot.creep_speed, robot.creep_turn
    grow = (1 + speed / v_s) * (1 + turn / a_t)
    sd = np.sqrt((robot.scrub[0] ** 2 * np.abs(roll) + robot.scrub[1] ** 2 * np.abs(drag)) * grow)
    rolled = roll * (1 - k_v * speed - k_t * turn) + sd * rng.standard_normal(roll.shape)
    # wheel lift: a wheel stops counting for 5-30 ms, events per metre of the robot's travel
    travel = np.hypot(v[:, 0], v[:, 1]) * STEP_S
    for step in np.flatnonzero(rng.random(travel.size) < robot.lift_per_m * travel):
        rolled[step : step + int(rng.uniform(5, 30)), rng.integers(3)] = 0.0
    turns = np.cumsum(rolled / (2 * math.pi * robot.radius), axis=0)
    return np.vstack([np.zeros(3), turns]) * robot.cpr


def write_drive(out: Path, name: str, seed: int, take: int = 0) -> DriveFiles:
    """Generate drive ``name`` of ``seed``'s robot into ``out`` (CSV + TUM); ``take`` > 0
    drives it again with fresh noise (slip, lift, timing, mocap)."""
    robot = draw_robot(seed)
    rng = np.random.default_rng([seed, 353, ALL_DRIVES.index(name), take])
    v = drive_twist(name, seed)
    pose = integrate(v)
    ticks = wheel_ticks(robot, v, rng)
    t_true = np.arange(pose.shape[0]) * STEP_S
    period = (1.0 + robot.clock_ppm * 1e-6) / robot.rate_hz
    t_sample = np.arange(0.01, t_true[-1] - 0.01, period)
    t_sample = t_sample + rng.normal(0, 0.05 * period, t_sample.size)
    counts = np.column_stack(
        [np.floor(np.interp(t_sample, t_true, ticks[:, i])) for i in range(3)]
    ).astype(np.int64)
    host = t_sample + 2e-3 + rng.normal(0, 0.3e-3, t_sample.size)
    host = np.maximum.accumulate(host) + np.arange(host.size) * 1e-9
    pods_csv = out / f"{name}_{seed}_{take}_pods.csv"
    rows = np.column_stack([T0_S + host, counts])
    np.savetxt(
        pods_csv,
        rows,
        fmt=["%.6f", "%d", "%d", "%d"],
        delimiter=",",
        header="t_s,c0,c1,c2",
        comments="",
    )
    t_m = np.arange(0.0, t_true[-1], 1.0 / robot.mocap_hz)
    keep = rng.random(t_m.size) > 0.01
    occ = rng.uniform(2.0, t_m[-1] - 2.0)
    t_m = t_m[keep & ~((t_m > occ) & (t_m < occ + 0.3))]
    p = np.column_stack([np.interp(t_m, t_true, pose[:, j]) for j in range(3)])
    p = p + rng.normal(0, robot.mocap_sd, p.shape)
    tum = np.column_stack([T0_S + t_m, p[:, :2], np.zeros(t_m.size), _quat_z(p[:, 2])])
    mocap_tum = out / f"{name}_{seed}_{take}_mocap.tum"
    np.savetxt(
        mocap_tum, tum, fmt=["%.6f"] * 4 + ["%.9f"] * 4, header="timestamp tx ty tz qx qy qz qw"
    )
    truth = np.column_stack([np.interp(t_sample, t_true, pose[:, j]) for j in range(3)])
    return DriveFiles(pods_csv, mocap_tum, T0_S + host, truth)
