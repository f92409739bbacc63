"""Dead-wheel pod drives made the way a separate program would make them (numpy only).

Nothing of sensorbench is imported or reused: the body motion, the wheels, the encoder's
timing and the motion-capture system are modelled here, and a drive leaves as text files
(CSV ``t_s,c0,c1,c2`` for the pods, TUM for mocap) that the tests bring in through
``sensorbench import``, the way a user's files come in.

- **Motion.** A list of segments (duration, body velocity vx, vy in m/s and turn rate w
  in rad/s) with raised-cosine ramps between them (0.6 s), integrated at 1 kHz with the
  exact SE(2) arc of each step (velocity constant within the step).
- **Pods.** Two parallel pods rolling along body x at y = ±0.16 m and one perpendicular
  pod rolling along body y at x = −0.12 m, wheel radius 24 mm, 2000 counts per rev.
  Per seed the positions are drawn N(nominal, (2 mm)²), the rolling angles
  N(nominal, (0.5°)²) and the radii N(24 mm, (0.15 mm)²).
- **Wheels.** A wheel turns by its rolled distance over its effective radius; the
  radius is modulated by the floor under it (three plane waves of 0.1 % amplitude,
  wavelengths 0.3–1.5 m, drawn per seed). Each 1-ms step adds scrub to the rolled
  distance: white, sd 0.8 mm/√m of the step's rolled distance plus 1.5 mm/√m of its
  sideways (dragged) distance.
- **Encoder.** Counts are the floor of the wheel angle in ticks (integers). Frames at a
  nominal 200 Hz on the MCU clock (a 30 ppm rate error per seed) with 0.2 ms sd
  sample jitter; host stamps lag the sample by 2 ms ± 0.3 ms (sd), kept increasing.
- **Mocap.** 110 Hz frames of the true pose, white noise 0.3 mm per axis and 0.3 mrad
  about z, isolated dropouts (1 % of frames) and one 0.3 s occlusion per drive.

The fixed drives (:data:`FIT_DRIVES`) are those ``sensorbench fit pods`` asks for;
:data:`TEST_DRIVES` are held out for replay.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STEP_S = 1e-3
"""Integration step (s)."""
RAMP_S = 0.6
"""Raised-cosine ramp between segments (s)."""
COUNTS_PER_REV = 2000
NOMINAL_XY = np.array([[0.0, 0.16], [0.0, -0.16], [-0.12, 0.0]])
"""Pod positions in the body frame (m)."""
NOMINAL_ANGLE = np.array([0.0, 0.0, math.pi / 2])
"""Rolling directions (rad, CCW from body x)."""
NOMINAL_RADIUS_M = 0.024
ENCODER_RATE_HZ = 200.0
MOCAP_RATE_HZ = 110.0
T0_S = 1000.0
"""Host time of a drive's first sample (s)."""

# (duration s, vx m/s, vy m/s, w rad/s): pauses between moves so the ramps settle
_P = (1.5, 0.0, 0.0, 0.0)
DRIVES: dict[str, list[tuple[float, float, float, float]]] = {
    "forward": [_P, (6.0, 0.35, 0.0, 0.0), _P, (6.0, -0.35, 0.0, 0.0), _P] * 2,
    "sideways": [_P, (6.0, 0.0, 0.3, 0.0), _P, (6.0, 0.0, -0.3, 0.0), _P] * 2,
    "spin": [_P, (8.0, 0.0, 0.0, 1.2), _P, (8.0, 0.0, 0.0, -1.2), _P],
    "square": [_P, *[(5.0, 0.3, 0.0, 0.0), (1.0, 0.0, 0.0, 0.0), (2.6, 0.0, 0.0, 0.6)] * 4, _P],
    "arcs": [_P, (10.0, 0.3, 0.0, 0.5), (10.0, 0.3, 0.0, -0.5), (8.0, 0.25, 0.1, 0.2), _P],
    "crab": [_P, (8.0, 0.2, 0.2, 0.0), (8.0, -0.2, 0.15, 0.3), (8.0, 0.1, -0.25, -0.4), _P],
}
DRIVES["forward_again"] = DRIVES["forward"]
DRIVES["sideways_again"] = DRIVES["sideways"]
FIT_DRIVES = ("forward", "sideways", "spin", "square")
TEST_DRIVES = ("arcs", "crab", "forward_again", "sideways_again")
"""Held out: two mixed drives, and the forward and sideways drives again (fresh noise)."""


@dataclass(frozen=True)
class Rig:
    """One seed's true pods: positions (3, 2) m, rolling angles (3,) rad, radii (3,) m,
    and the floor's waves (wave vectors (3, 2) rad/m, phases (3,) rad)."""

    xy: np.ndarray
    angle: np.ndarray
    radius: np.ndarray
    waves: np.ndarray
    phases: np.ndarray
    clock_ppm: float

    @property
    def distance_per_tick(self) -> np.ndarray:
        """m per count of each pod (nominal radius, without the floor's modulation)."""
        return 2 * math.pi * self.radius / COUNTS_PER_REV

    @property
    def lever(self) -> np.ndarray:
        """x sin φ − y cos φ (m)."""
        return self.xy[:, 0] * np.sin(self.angle) - self.xy[:, 1] * np.cos(self.angle)


def draw_rig(seed: int) -> Rig:
    """The seed's pods and floor."""
    rng = np.random.default_rng([seed, 1])
    k = rng.uniform(2 * math.pi / 1.5, 2 * math.pi / 0.3, 3)
    heading = rng.uniform(0, 2 * math.pi, 3)
    return Rig(
        xy=NOMINAL_XY + rng.normal(0, 0.002, (3, 2)),
        angle=NOMINAL_ANGLE + rng.normal(0, math.radians(0.5), 3),
        radius=rng.normal(NOMINAL_RADIUS_M, 0.15e-3, 3),
        waves=np.column_stack([k * np.cos(heading), k * np.sin(heading)]),
        phases=rng.uniform(0, 2 * math.pi, 3),
        clock_ppm=float(rng.normal(0, 30)),
    )


def body_velocity(segments: list[tuple[float, float, float, float]]) -> np.ndarray:
    """Body twist (vx, vy, w) at each step (n, 3), ramped between segments."""
    ends = np.cumsum([s[0] for s in segments])
    t = np.arange(0.0, ends[-1], STEP_S)
    levels = np.array([s[1:] for s in segments])
    v = np.zeros((t.size, 3))
    prev = np.zeros(3)
    for end, dur, level in zip(ends, (s[0] for s in segments), levels, strict=True):
        start = end - dur
        ramp = np.clip((t - start) / RAMP_S, 0.0, 1.0)
        w = 0.5 - 0.5 * np.cos(math.pi * ramp)
        inside = (t >= start) & (t < end)
        v[inside] = prev + (level - prev) * w[inside, None]
        prev = level
    return v


def integrate(v: np.ndarray) -> np.ndarray:
    """World poses (x, y, yaw) at each step's start and the end (n + 1, 3), exact arcs."""
    dth = v[:, 2] * STEP_S
    theta = np.concatenate([[0.0], np.cumsum(dth)])
    small = np.abs(dth) < 1e-9
    safe = np.where(small, 1.0, dth)
    a = np.where(small, 1.0 - dth**2 / 6, np.sin(safe) / safe)
    b = np.where(small, dth / 2, (1 - np.cos(safe)) / safe)
    dx_b = (a * v[:, 0] - b * v[:, 1]) * STEP_S
    dy_b = (b * v[:, 0] + a * v[:, 1]) * STEP_S
    c, s = np.cos(theta[:-1]), np.sin(theta[:-1])
    x = np.concatenate([[0.0], np.cumsum(c * dx_b - s * dy_b)])
    y = np.concatenate([[0.0], np.cumsum(s * dx_b + c * dy_b)])
    return np.column_stack([x, y, theta])


def wheel_ticks(rig: Rig, v: np.ndarray, pose: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each wheel's angle in ticks at every step boundary (n + 1, 3), not yet rounded."""
    px, py = rig.xy[:, 0], rig.xy[:, 1]
    vx = v[:, :1] - v[:, 2:] * py
    vy = v[:, 1:2] + v[:, 2:] * px
    roll = (vx * np.cos(rig.angle) + vy * np.sin(rig.angle)) * STEP_S
    drag = (-vx * np.sin(rig.angle) + vy * np.cos(rig.angle)) * STEP_S
    scrub = np.sqrt((0.8e-3) ** 2 * np.abs(roll) + (1.5e-3) ** 2 * np.abs(drag))
    rolled = roll + scrub * rng.standard_normal(roll.shape)
    c, s = np.cos(pose[:-1, 2:]), np.sin(pose[:-1, 2:])
    wx = pose[:-1, :1] + c * px - s * py
    wy = pose[:-1, 1:2] + s * px + c * py
    floor = sum(
        np.sin(rig.waves[j, 0] * wx + rig.waves[j, 1] * wy + rig.phases[j]) for j in range(3)
    )
    radius = rig.radius * (1.0 + 1e-3 * floor / 3)
    turns = np.cumsum(rolled / (2 * math.pi * radius), axis=0)
    return np.vstack([np.zeros(3), turns]) * COUNTS_PER_REV


def _quat_z(yaw: np.ndarray) -> np.ndarray:
    return np.column_stack([np.zeros((yaw.size, 2)), np.sin(yaw / 2), np.cos(yaw / 2)])


@dataclass(frozen=True)
class DriveFiles:
    """A drive's files and its truth: encoder CSV, TUM mocap, and the true pose (x, y, yaw)
    at each encoder row's host time ``t_s`` (n, 3) in mocap's frame."""

    pods_csv: Path
    mocap_tum: Path
    t_s: np.ndarray
    pose: np.ndarray


def write_drive(out: Path, name: str, seed: int, take: int = 0) -> DriveFiles:
    """Generate drive ``name`` of ``seed``'s rig into ``out`` (CSV + TUM); ``take`` > 0
    drives it again with fresh noise (scrub, encoder timing, mocap)."""
    rig = draw_rig(seed)
    key = [seed, 2, list(DRIVES).index(name)]
    rng = np.random.default_rng([*key, take] if take else key)
    v = body_velocity(DRIVES[name])
    pose = integrate(v)
    ticks = wheel_ticks(rig, v, pose, rng)
    t_true = np.arange(pose.shape[0]) * STEP_S
    # encoder frames: MCU-clock schedule with sample jitter; host stamps lag
    period = (1.0 + rig.clock_ppm * 1e-6) / ENCODER_RATE_HZ
    t_sample = np.arange(0.01, t_true[-1] - 0.01, period)
    t_sample = t_sample + rng.normal(0, 0.2e-3, t_sample.size)
    counts = np.column_stack(
        [np.floor(np.interp(t_sample, t_true, ticks[:, i])) for i in range(3)]
    ).astype(np.int64)
    host = t_sample + 2e-3 + rng.normal(0, 0.3e-3, t_sample.size)
    host = np.maximum.accumulate(host) + np.arange(host.size) * 1e-9
    pods_csv = out / f"{name}_{seed}_{take}_pods.csv"
    with pods_csv.open("w") as f:
        f.write("t_s,c0,c1,c2\n")
        for t, (a, b, c) in zip(host, counts, strict=True):
            f.write(f"{T0_S + t:.6f},{a},{b},{c}\n")
    # mocap: 110 Hz, noise, dropouts and one occlusion
    t_m = np.arange(0.0, t_true[-1], 1.0 / MOCAP_RATE_HZ)
    keep = rng.random(t_m.size) > 0.01
    occ = rng.uniform(2.0, t_m[-1] - 2.0)
    keep &= ~((t_m > occ) & (t_m < occ + 0.3))
    t_m = t_m[keep]
    xy = np.column_stack([np.interp(t_m, t_true, pose[:, j]) for j in range(2)])
    yaw = np.interp(t_m, t_true, pose[:, 2])
    xy = xy + rng.normal(0, 0.3e-3, xy.shape)
    yaw = yaw + rng.normal(0, 0.3e-3, yaw.size)
    quat = _quat_z(yaw)
    mocap_tum = out / f"{name}_{seed}_{take}_mocap.tum"
    with mocap_tum.open("w") as f:
        f.write("# timestamp tx ty tz qx qy qz qw\n")
        for t, p, q in zip(t_m, xy, quat, strict=True):
            f.write(
                f"{T0_S + t:.6f} {p[0]:.6f} {p[1]:.6f} 0.000000 "
                f"{q[0]:.9f} {q[1]:.9f} {q[2]:.9f} {q[3]:.9f}\n"
            )
    truth = np.column_stack([np.interp(t_sample, t_true, pose[:, j]) for j in range(3)])
    return DriveFiles(pods_csv, mocap_tum, T0_S + host, truth)
