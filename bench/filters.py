"""Split x/y/heading filters against the joint 6-state EKF on the same replay.

One simulated figure-8 session (the simulator's default pods: slip, scrub and
bounces) is replayed through both filters with the true pod geometry and the
noise fitted from the session itself. Printed: each filter's RMS position
error against the simulator's truth, the accuracy ratio (split/joint, target
≤ 1.05), the split filters' replay rate (target ≥ 100 000 steps/s) and the
per-step cost ratio joint/split (target ≥ 10), all measured in this run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from sensorbench.bench import BenchResult
from sensorbench.characterize.noise_fit import fit_noise
from sensorbench.fusion.joint_filter import JointFilter
from sensorbench.fusion.odometry_replay import pose_errors, read_odometry
from sensorbench.fusion.pod_kinematics import PodGeometry
from sensorbench.fusion.split_filter import SplitFilter
from sensorbench.logs import Session
from sensorbench.sim.scenario import load_scenario
from sensorbench.sim.simulation import simulate_to_session

AREA = "filters"


def _session(path: Path, seed: int) -> Path:
    sc = load_scenario("figure8")
    off = {name: {"enabled": False, "model": p["model"]} for name, p in sc.lidars.items()}
    sc = sc.with_overrides({"lidars": off, "pose_sensor": {"enabled": False}})
    return simulate_to_session(sc, seed, path, overwrite=True)


def _best_time(fn, repeats: int) -> tuple[float, object]:
    best, out = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def run(quick: bool) -> list[BenchResult]:
    """Accuracy and cost of the split vs the joint filter on one replay."""
    with tempfile.TemporaryDirectory() as tmp:
        path = _session(Path(tmp) / "figure8.h5", seed=7)
        with Session(path) as s:
            g = s.truth("pods/geometry")
            t_truth = s.truth("pose/t_ns")
            truth = s.truth("pose/x_y_yaw")
        x, y, phi, _r, _cpr, c = g.T
        geometry = PodGeometry.from_mounts(x, y, phi, c)
        noise = fit_noise([path], geometry, max_frames=1500 if quick else 3000).noise
        odo = read_odometry(path)
    inc = odo.increments(geometry)
    t_ref = (t_truth - odo.t0_ns) * 1e-9
    pose0 = tuple(float(np.interp(odo.t_s[0], t_ref, truth[:, k])) for k in range(3))
    k_n = inc.shape[0]
    split_t, split = _best_time(
        lambda: SplitFilter(noise).run(odo.t_s, inc, pose0), 1 if quick else 3
    )
    joint_t, joint = _best_time(lambda: JointFilter(noise).run(odo.t_s, inc, pose0), 1)
    es = pose_errors(split.t_s, split.pose, t_ref, truth)
    ej = pose_errors(joint.t_s, joint.pose, t_ref, truth)
    detail = f"{k_n} frames of a simulated figure-8 (seed 7), noise fitted on it, true geometry"
    return [
        BenchResult(AREA, "split RMS position error", es["rms_m"] * 100, "cm", None, False, detail),
        BenchResult(AREA, "joint RMS position error", ej["rms_m"] * 100, "cm", None, False, detail),
        BenchResult(
            AREA,
            "split heading RMS error",
            float(np.degrees(es["heading_rms_rad"])),
            "deg",
            None,
            False,
            detail,
        ),
        BenchResult(
            AREA,
            "joint heading RMS error",
            float(np.degrees(ej["heading_rms_rad"])),
            "deg",
            None,
            False,
            detail,
        ),
        BenchResult(
            AREA,
            "accuracy split/joint (RMS position)",
            es["rms_m"] / ej["rms_m"],
            "ratio",
            1.05,
            False,
            "split RMS error over joint RMS error, same replay",
        ),
        BenchResult(
            AREA,
            "split replay rate",
            k_n / split_t,
            "steps/s",
            100_000.0,
            True,
            "three axis filters per encoder frame, pure-float loop",
        ),
        BenchResult(
            AREA,
            "per-step cost joint/split",
            joint_t / split_t,
            "ratio",
            10.0,
            True,
            "6×6 EKF with a 3×3 inverse vs three 2-state scalar filters",
        ),
    ]
