"""Pose-sensor campaigns made the way a separate program would make them (numpy and scipy only).

Nothing of sensorbench is imported or reused: the robot's motion, the motion-capture
system, the pose sensor's timing, frames, clock and error are all modelled here, and a
campaign leaves as text files (TUM for mocap, CSV for the sensor) that the tests bring
in through ``sensorbench import``, the way a user's files come in.

A campaign is S sessions recorded on one rig:

- **Motion.** A wheeled robot on a floor, integrated at 200 Hz: forward speed and turn
  rate are Ornstein-Uhlenbeck processes (speed around 0.45 m/s, turn rate sd 0.7 rad/s,
  steered back when it leaves a 2.2-m circle), roll and pitch rock on floor bumps
  (sd 15 mrad, 0.3 s), the height wanders by millimetres. It stands still for the
  first 1.5 s. Poses between the 200-Hz knots come from cubic splines of the position
  and of the yaw, pitch and roll angles.
- **Mocap.** 120 Hz frames of that motion, with white noise (0.2 mm, 0.2 mrad about the
  body axes), short dropouts (2–8 frames) and one occlusion of 0.3–0.6 s per session.
- **Sensor.** Samples at irregular times (mean period 1/rate, log-normal spacing, sd of
  the log 0.2) with one 1–3 s tracking loss per session. It relocalizes into its map
  as a Poisson process (mean 20 s) and after every tracking loss, and flags the first
  sample after each. It reports in its own map frame (a random SE(3) against mocap's
  world: roll and pitch within ±0.2 rad, any yaw, origin within ±3 m; yaw only when
  ``planar``), its body is mounted rotated against the mocap body (within ±0.1 rad per
  axis), and its stamps lag the truth by the campaign's clock offset (reference time
  = sensor time + ``offset_s``, within ±0.25 s).
- **Error** per axis (x, y, z in mocap's world frame, m; roll, pitch, yaw about the
  mocap body's axes, rad): an offset b drawn N(0, sigma_b²) at every relocalization,
  plus Gauss-Markov noise advanced in exact steps (phi = exp(-dt/tau),
  Var w = sigma²(1 - phi²), dt the true spacing, gaps included), plus white noise
  sigma_v. Parameters are drawn per campaign, log-uniform within :data:`PRIOR`.
  Mocap's own noise reaches the error through the interpolation between frames; the
  stated truth (:attr:`Campaign.truth`) folds it into sigma_v.
- **Wrong relocalizations** (``wrong_rate`` > 0, any world): each relocalization is,
  with that probability, into the wrong place of the map: a gross offset drawn from
  :data:`WRONG_SD` (a uniform heading error, metres of position) is added to the
  usual one until the next relocalization, drawn from a
  stream of its own (the campaign is otherwise the one without them).

Wrong worlds (:data:`WORLDS`), one change each:

- ``drift``: a random walk restarted at every relocalization is added (diffusion
  2 sigma² / 20 s: as much variance over a mean segment as the Gauss-Markov part);
- ``noisy_session``: one session has 3× sigma and 3× sigma_v;
- ``sigma2_session``: one session has 2× sigma;
- ``heavy_tails``: the Gauss-Markov steps and the white noise are Student-t with 3
  degrees of freedom, scaled to the same variance;
- ``scale``: the sensor's map distances are 2 % long (positions × 1.02 about its origin);
- ``offset_session``: one session's positions are off by a constant (0.10, -0.08, 0) m in
  the map frame, never redrawn;
- ``jump``: one session's error jumps, unflagged, by 5 sigma_b on every axis in the
  middle of a segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.signal import lfilter
from scipy.spatial.transform import Rotation

AXES = ("x", "y", "z", "roll", "pitch", "yaw")
WORLDS = (
    "right",
    "drift",
    "noisy_session",
    "sigma2_session",
    "heavy_tails",
    "scale",
    "offset_session",
    "jump",
)
ODD_WORLDS = ("noisy_session", "sigma2_session", "offset_session", "jump")
"""Worlds where one session (:attr:`Campaign.odd_session`) differs from the others."""

PRIOR = np.array(
    [  # (low, high) per axis group: sigma_b, sigma, tau_s, sigma_v; m (x, y, z) / rad
        [[0.004, 0.015], [0.008, 0.025], [0.8, 3.0], [0.002, 0.005]],
        [[0.001, 0.004], [0.002, 0.006], [0.8, 3.0], [0.0008, 0.002]],
    ]
)
"""Log-uniform prior of the error parameters, positions (row 0) and angles (row 1)."""

WRONG_SD = np.array([0.6, 0.6, 0.03, 0.01, 0.01, 0.0])
"""sd of a wrong relocalization's offset per axis (m, rad); its yaw is uniform in ±π/2."""

MOCAP_RATE_HZ = 120.0
MOCAP_NOISE = (0.0002, 0.0002)  # m, rad
KNOT_HZ = 200.0
STILL_S = 1.5
RELOC_MEAN_S = 20.0
EPOCH_S = 1.7e9


@dataclass
class Track:
    """Timed poses: t (N,) s, p (N, 3) m, q (N, 4) x y z w."""

    t: np.ndarray
    p: np.ndarray
    q: np.ndarray


@dataclass
class Session:
    """One recording: mocap frames, the sensor's output, and its true error."""

    name: str
    mocap: Track
    sensor: Track  # stamps on the sensor's clock, poses in its map frame
    relocalized: np.ndarray  # (N,) bool, flagged samples
    error: np.ndarray  # (N, 6) true error at the sensor samples (mocap noise aside)
    true_t: np.ndarray  # (N,) s, when the sensor samples were taken (mocap's clock)
    reloc_true: np.ndarray  # (N,) bool, where the offset was redrawn (incl. unflagged)
    wrong: np.ndarray  # (N,) bool, relocalizations into the wrong place of the map


@dataclass
class Campaign:
    """A foreign campaign and everything that is true about it."""

    seed: int
    world: str
    sensor_truth: np.ndarray  # (6, 4) sigma_b, sigma, tau_s, sigma_v of the sensor
    truth: np.ndarray  # (6, 4) the same, sigma_v with mocap's noise folded in
    offset_s: float
    map_rotation: np.ndarray  # (3, 3): p_mocap = R p_map + t
    map_translation: np.ndarray
    mount: np.ndarray  # (3, 3) sensor body against mocap body
    planar: bool
    odd_session: int | None
    wrong_rate: float = 0.0
    sessions: list[Session] = field(default_factory=list)

    def write(self, directory: str | Path) -> list[tuple[Path, Path]]:
        """Write every session as ``<name>_mocap.txt`` (TUM) and ``<name>_sensor.csv``.

        TUM: ``t x y z qx qy qz qw`` per line, seconds since the epoch. CSV: header
        ``t_s,x,y,z,qx,qy,qz,qw,relocalized``. Returns ``[(mocap, sensor), ...]``.
        """
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        out = []
        for s in self.sessions:
            mp, sp = d / f"{s.name}_mocap.txt", d / f"{s.name}_sensor.csv"
            m = s.mocap
            rows = np.column_stack([m.t + EPOCH_S, m.p, m.q])
            np.savetxt(mp, rows, fmt="%.6f", header="timestamp tx ty tz qx qy qz qw")
            z = s.sensor
            with sp.open("w") as f:
                f.write("t_s,x,y,z,qx,qy,qz,qw,relocalized\n")
                for k in range(z.t.size):
                    vals = ",".join(f"{v:.7f}" for v in (*z.p[k], *z.q[k]))
                    f.write(f"{z.t[k] + EPOCH_S:.6f},{vals},{int(s.relocalized[k])}\n")
            out.append((mp, sp))
        return out


def draw_truth(rng: np.random.Generator) -> np.ndarray:
    """(6, 4) error parameters, log-uniform within :data:`PRIOR`."""
    lo = np.log(PRIOR[[0, 0, 0, 1, 1, 1], :, 0])
    hi = np.log(PRIOR[[0, 0, 0, 1, 1, 1], :, 1])
    return np.exp(lo + rng.uniform(size=lo.shape) * (hi - lo))


def _ou(rng: np.random.Generator, n: int, dt: float, tau: float, sd: float) -> np.ndarray:
    """Exact Ornstein-Uhlenbeck samples (mean 0, stationary start) on a regular grid."""
    a = math.exp(-dt / tau)
    w = rng.standard_normal(n) * sd * math.sqrt(1 - a * a)
    w[0] = rng.standard_normal() * sd
    return lfilter([1.0], [1.0, -a], w)


def _smooth(x: np.ndarray, dt: float, lag_s: float) -> np.ndarray:
    """Two first-order lags of ``lag_s`` (a body's inertia: no kink between knots)."""
    a = math.exp(-dt / lag_s)
    for _ in range(2):
        x = lfilter([1.0 - a], [1.0, -a], x, zi=[a * x[0]])[0]
    return x


def _motion(rng: np.random.Generator, t0: float, t1: float) -> tuple[CubicSpline, CubicSpline]:
    """Splines of position (m) and of (yaw, pitch, roll) (rad) over [t0, t1]."""
    dt = 1.0 / KNOT_HZ
    t = np.arange(t0, t1 + dt, dt)
    n = t.size
    speed = np.clip(0.45 + _smooth(_ou(rng, n, dt, 3.0, 0.15), dt, 0.2), 0.05, 1.0).tolist()
    turn_noise = _ou(rng, n, dt, 1.2, 0.7).tolist()
    x, y = (float(v) for v in rng.uniform(-1.0, 1.0, 2))
    heading = float(rng.uniform(-math.pi, math.pi))
    xs, ys, yaw = [x], [y], [heading]
    turn = 0.0
    lag = min(1.0, dt / 0.15)
    for k in range(1, n):
        moving = t[k] - t0 > STILL_S
        steer = 0.0
        if x * x + y * y > 2.2**2:
            home = math.atan2(-y, -x) - heading
            steer = 1.5 * math.atan2(math.sin(home), math.cos(home))
        target = (turn_noise[k] + steer) if moving else 0.0
        turn += (target - turn) * lag
        v = speed[k] if moving else 0.0
        mid = heading + 0.5 * turn * dt
        heading += turn * dt
        x += v * dt * math.cos(mid)
        y += v * dt * math.sin(mid)
        xs.append(x)
        ys.append(y)
        yaw.append(heading)
    pos = np.column_stack([xs, ys, 0.15 + _smooth(_ou(rng, n, dt, 2.0, 0.003), dt, 0.1)])
    pitch = _smooth(_ou(rng, n, dt, 0.3, 0.015), dt, 0.05)
    roll = _smooth(_ou(rng, n, dt, 0.3, 0.015), dt, 0.05)
    return CubicSpline(t, pos), CubicSpline(t, np.column_stack([yaw, pitch, roll]))


def _rotation(angles: CubicSpline, t: np.ndarray) -> Rotation:
    return Rotation.from_euler("ZYX", angles(t))


def _sensor_times(rng: np.random.Generator, duration_s: float, rate_hz: float):
    """True sample times (s) with one tracking loss, and where relocalizations happen."""
    spacing = np.exp(rng.normal(0.0, 0.2, int(3 * duration_s * rate_hz))) / rate_hz
    t = 0.3 + np.cumsum(spacing)
    t = t[t < duration_s]
    lost_at = rng.uniform(0.3, 0.7) * duration_s
    lost_for = rng.uniform(1.0, 3.0)
    t = t[(t < lost_at) | (t > lost_at + lost_for)]
    reloc = np.zeros(t.size, dtype=bool)
    reloc[0] = True
    events = np.cumsum(rng.exponential(RELOC_MEAN_S, 64))
    events = events[events < t[-1]]
    idx = np.searchsorted(t, events)
    reloc[idx[idx < t.size]] = True
    reloc[np.searchsorted(t, lost_at + lost_for)] = True
    return t, reloc


def _noise(rng: np.random.Generator, shape: tuple[int, ...], heavy: bool) -> np.ndarray:
    """Unit-variance noise: normal, or Student-t(3) scaled to variance 1."""
    if heavy:
        return rng.standard_t(3, shape) / np.sqrt(3.0)
    return rng.standard_normal(shape)


def _error(
    rng: np.random.Generator, t: np.ndarray, reloc: np.ndarray, p: np.ndarray, heavy: bool
) -> np.ndarray:
    """(N, 6) offset + exact Gauss-Markov + white error at times t."""
    n = t.size
    draws = rng.standard_normal((int(reloc.sum()), 6)) * p[:, 0]
    b = draws[np.cumsum(reloc) - 1]
    w = _noise(rng, (n, 6), heavy)
    g = np.empty((n, 6))
    g[0] = p[:, 1] * rng.standard_normal(6)
    for k in range(1, n):
        phi = np.exp(-(t[k] - t[k - 1]) / p[:, 2])
        g[k] = phi * g[k - 1] + p[:, 1] * np.sqrt(1.0 - phi * phi) * w[k]
    return b + g + p[:, 3] * _noise(rng, (n, 6), heavy)


def _random_walk(
    rng: np.random.Generator, t: np.ndarray, reloc: np.ndarray, sigma: np.ndarray
) -> np.ndarray:
    """(N, 6) random walk from 0 at every relocalization, diffusion 2 sigma² / 20 s."""
    q = 2.0 * sigma**2 / RELOC_MEAN_S
    dt = np.diff(t, prepend=t[0])
    steps = rng.standard_normal((t.size, 6)) * np.sqrt(q * dt[:, None])
    steps[reloc] = 0.0
    walk = np.cumsum(steps, axis=0)
    starts = np.flatnonzero(reloc)
    return walk - walk[starts][np.cumsum(reloc) - 1]


def _mocap(rng: np.random.Generator, pos: CubicSpline, ang: CubicSpline, t0: float, t1: float):
    t = np.arange(t0, t1, 1.0 / MOCAP_RATE_HZ)
    keep = np.ones(t.size, dtype=bool)
    for start in np.flatnonzero(rng.uniform(size=t.size) < 0.002):
        keep[start : start + rng.integers(2, 9)] = False
    hole = rng.uniform(t0 + 0.3 * (t1 - t0), t0 + 0.7 * (t1 - t0))
    keep &= ~((t > hole) & (t < hole + rng.uniform(0.3, 0.6)))
    t = t[keep]
    p = pos(t) + rng.standard_normal((t.size, 3)) * MOCAP_NOISE[0]
    r = _rotation(ang, t) * Rotation.from_rotvec(rng.standard_normal((t.size, 3)) * MOCAP_NOISE[1])
    return Track(t, p, _random_sign(rng, r.as_quat()))


def _random_sign(rng: np.random.Generator, q: np.ndarray) -> np.ndarray:
    """Quaternions with random signs (q and -q are the same rotation)."""
    return q * rng.choice([-1.0, 1.0], size=(q.shape[0], 1))


def campaign(
    seed: int,
    world: str = "right",
    n_sessions: int = 4,
    duration_s: float = 120.0,
    rate_hz: float = 5.0,
    planar: bool = False,
    wrong_rate: float = 0.0,
) -> Campaign:
    """A campaign of ``n_sessions`` sessions of ``duration_s`` seconds (see module doc);
    ``wrong_rate``: probability that a relocalization is a wrong one."""
    if world not in WORLDS:
        raise ValueError(f"unknown world {world!r} ({', '.join(WORLDS)})")
    rng = np.random.default_rng([seed, 0xF0E1])
    truth = draw_truth(rng)
    offset = float(rng.uniform(-0.25, 0.25))
    if planar:
        r_map = Rotation.from_euler("z", rng.uniform(-np.pi, np.pi))
        mount = Rotation.from_euler("z", rng.uniform(-0.1, 0.1))
    else:
        r_map = Rotation.from_euler("ZYX", [rng.uniform(-np.pi, np.pi), *rng.uniform(-0.2, 0.2, 2)])
        mount = Rotation.from_rotvec(rng.uniform(-0.1, 0.1, 3))
    t_map = rng.uniform(-3.0, 3.0, 3)
    odd = int(rng.integers(n_sessions)) if world in ODD_WORLDS else None
    camp = Campaign(
        seed,
        world,
        truth,
        _with_mocap_noise(truth),
        offset,
        r_map.as_matrix(),
        t_map,
        mount.as_matrix(),
        planar,
        odd,
        wrong_rate,
    )
    for i in range(n_sessions):
        camp.sessions.append(_session(rng, camp, i, duration_s, rate_hz, r_map, mount))
    return camp


def error_sessions(
    seed: int,
    params: np.ndarray,
    n_sessions: int,
    duration_s: float = 120.0,
    rate_hz: float = 5.0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The error process alone, as the sensor makes it in a campaign: ``[(t, error)]``.

    ``params`` (6, 4): sigma_b, sigma, tau_s, sigma_v per axis. Sample times, tracking
    loss and relocalizations as in :func:`campaign` (no motion, frames or files): the
    distribution a campaign's held-out horizons come from.
    """
    rng = np.random.default_rng([seed, 0xE5])
    out = []
    for _ in range(n_sessions):
        t, reloc = _sensor_times(rng, duration_s, rate_hz)
        out.append((t, _error(rng, t, reloc, params, False)))
    return out


def _with_mocap_noise(truth: np.ndarray) -> np.ndarray:
    """sigma_v with mocap's white noise folded in.

    The reference at a sensor time is interpolated between two frames with weights
    a and 1 - a, a uniform, so its noise variance is sigma_m² E[a² + (1 - a)²] =
    (2/3) sigma_m².
    """
    out = truth.copy()
    sm = np.repeat(MOCAP_NOISE, 3)
    out[:, 3] = np.sqrt(truth[:, 3] ** 2 + (2.0 / 3.0) * sm**2)
    return out


def _session(
    rng: np.random.Generator,
    camp: Campaign,
    i: int,
    duration_s: float,
    rate_hz: float,
    r_map: Rotation,
    mount: Rotation,
) -> Session:
    world = camp.world
    pos, ang = _motion(rng, -1.0, duration_s + 1.0)
    mocap = _mocap(rng, pos, ang, -0.5, duration_s + 0.5)
    t, reloc = _sensor_times(rng, duration_s, rate_hz)
    p = camp.sensor_truth.copy()
    if i == camp.odd_session and world == "noisy_session":
        p[:, [1, 3]] *= 3.0
    if i == camp.odd_session and world == "sigma2_session":
        p[:, 1] *= 2.0
    err = _error(rng, t, reloc, p, world == "heavy_tails")
    wrong = np.zeros(t.size, bool)
    if camp.wrong_rate > 0:
        own = np.random.default_rng([camp.seed, 0x3C, i])
        starts = np.flatnonzero(reloc)
        hit = starts[own.random(starts.size) < camp.wrong_rate]
        wrong[hit] = True
        jump = own.standard_normal((hit.size, 6)) * WRONG_SD
        jump[:, 5] = own.uniform(-np.pi / 2, np.pi / 2, hit.size)
        seg = np.cumsum(reloc) - 1
        shift = np.zeros((starts.size, 6))
        shift[seg[hit]] = jump  # on top of the usual offset: still a gross one
        err += shift[seg]
    reloc_true = reloc.copy()
    if world == "drift":
        err += _random_walk(rng, t, reloc, p[:, 1])
    if i == camp.odd_session and world == "jump":
        starts = np.flatnonzero(reloc)
        longest = int(np.argmax(np.diff(np.append(starts, t.size))))
        a = starts[longest]
        b = starts[longest + 1] if longest + 1 < starts.size else t.size
        k = (a + b) // 2
        err[k:b] += 5.0 * p[:, 0] * rng.choice([-1.0, 1.0], 6)
        reloc_true[k] = True
    p_true = pos(t) + err[:, :3]
    r_true = _rotation(ang, t) * Rotation.from_rotvec(err[:, 3:])
    p_map = r_map.inv().apply(p_true - camp.map_translation)
    if world == "scale":
        p_map = 1.02 * p_map
    if i == camp.odd_session and world == "offset_session":
        p_map = p_map + np.array([0.10, -0.08, 0.0])
    q_map = _random_sign(rng, (r_map.inv() * r_true * mount).as_quat())
    sensor = Track(t - camp.offset_s, p_map, q_map)
    flags = reloc.copy()
    flags[0] = False
    return Session(f"s{camp.seed}_{i}", mocap, sensor, flags, err, t, reloc_true, wrong)
