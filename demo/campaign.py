"""``sensorbench demo``: capture a whole campaign from the emulated robot, fit, validate,
report (docs/DEMO.md); time-like fit options are divided by the emulation ``speed``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sensorbench.demo.capture import CapturedSession, capture_scenario
from sensorbench.errors import FitError, SimError
from sensorbench.logs.atomic_output import atomic_output, make_dir
from sensorbench.sim.scenario import Scenario, load_scenario

ProgressFn = Callable[[str], None]

LIDARS = ("lidar_front", "lidar_rear", "ld19")
DRIVES = ("forward", "sideways", "spin", "square")
"""The fixed drives the pods and the filter noise are fitted on."""
MAX_SPEED = 10.0
"""Fastest emulation the demo accepts: above it, on two busy cores, the A1 readers fall
behind the line rate. All sessions run at one speed: time-like model parameters are on
the files' time base."""
POD_INTERVAL_SIM_S = 0.5
"""Pod-fit interval in simulated seconds (the ``fit pods`` default at real time) (s)."""


@dataclass(frozen=True)
class DemoPlan:
    """What the demo captures at emulation ``speed`` (simulated s per host s): loops per
    drive and campaign session (None: the scenario's), the ``reloc_campaign`` sessions,
    the static lidar session's length (simulated s) and the validation's draws."""

    speed: float
    drive_repeats: int | None
    reloc_sessions: tuple[int, ...]
    reloc_repeats: int | None
    static_hold_s: float
    draws: int
    seed: int = 1


def demo_plan(quick: bool = False, speed: float | None = None, seed: int = 1) -> DemoPlan:
    """The shipped plans: full (about 12 simulated minutes) or quick (about 4); SimError
    for a ``speed`` outside (0, :data:`MAX_SPEED`]."""
    if quick:
        plan = DemoPlan(speed or MAX_SPEED, 1, (0, 1, 2), 1, 20.0, 200, seed)
    else:
        plan = DemoPlan(speed or MAX_SPEED, None, (0, 1, 2, 3, 4), None, 40.0, 1000, seed)
    if not 0 < plan.speed <= MAX_SPEED:
        raise SimError(f"demo speed must be in (0, {MAX_SPEED:g}], got {plan.speed:g}")
    return plan


@dataclass
class DemoResult:
    """Everything the demo produced: sessions by label, model files by kind (``pods``,
    ``noise``, ``pose_error``), the merged-scan session, the report and its content, and
    the host seconds per stage."""

    out_dir: Path
    sessions: dict[str, CapturedSession] = field(default_factory=dict)
    models: dict[str, Path] = field(default_factory=dict)
    merged: Path | None = None
    report: Path | None = None
    report_data: Any = None
    timings_s: dict[str, float] = field(default_factory=dict)


def run_demo(
    out_dir: str | os.PathLike[str], plan: DemoPlan, progress: ProgressFn | None = None
) -> DemoResult:
    """Run the whole demo into ``out_dir`` (created; existing session files are refused);
    a SensorbenchError when any capture, fit or report step failed."""
    out = Path(out_dir)
    for d in ("sessions", "models", "run", "report"):
        make_dir(out / d, "nothing was written")
    run = _Run(plan, DemoResult(out), progress or (lambda _msg: None))
    reloc = _capture_all(run)
    _fit_models(run, reloc)
    _merge_and_report(run)
    return run.res


@dataclass
class _Run:
    """A demo under way: its plan, what it produced so far, and its progress lines."""

    plan: DemoPlan
    res: DemoResult
    say: ProgressFn

    def timed(self, stage: str, fn: Callable[[], Any]) -> Any:
        """``fn()``, its host seconds added to ``stage``'s timing."""
        t = time.monotonic()
        value = fn()
        self.res.timings_s[stage] = self.res.timings_s.get(stage, 0.0) + time.monotonic() - t
        return value

    def capture(
        self, sc: Scenario, label: str, devices: list[str], pose: tuple[str, ...]
    ) -> CapturedSession:
        """Capture scenario ``sc`` as session ``label`` with these devices and pose sources."""
        out, speed = self.res.out_dir, self.plan.speed
        path = out / "sessions" / f"{label.replace('#', '_')}.h5"
        budget = 3.0 if any(d in LIDARS for d in devices) else 0.5
        self.say(f"capturing {label} ({', '.join([*devices, *pose])}) at {speed:g}x")
        run_dir = out / "run" / label.replace("#", "_")
        c = self.timed(
            "capture",
            lambda: capture_scenario(
                sc, self.plan.seed, path, run_dir, devices, pose,
                speed=speed, bringup_budget_s=budget, label=label,
            ),
        )  # fmt: skip
        self.say(
            f"  {label}: {path.stat().st_size / 2**20:.1f} MiB in {c.host_s:.1f} s, "
            + ", ".join(f"{d.name} {d.items}" for d in c.capture.devices)
        )
        self.res.sessions[label] = c
        return c


def _capture_all(run: _Run) -> list[Path]:
    """Capture the drives, the static lidar session and the campaign; returns the
    campaign's sessions."""
    plan = run.plan

    def repeats(n: int | None) -> dict:
        return {} if n is None else {"trajectory": {"repeats": n}}

    drive_over = repeats(plan.drive_repeats)
    # the drives record the pods without the lidars: with three lidars at 10x on two
    # loaded cores the pod reader's host-time mapping drifted by hundreds of ms
    for name in DRIVES:
        run.capture(load_scenario(name).with_overrides(drive_over), name, ["pods"], ("mocap",))
    static = load_scenario("lidar_static").with_overrides(
        {"trajectory": {"hold_s": plan.static_hold_s}}
    )
    run.capture(static, "lidar_static", list(LIDARS), ())
    reloc_over = repeats(plan.reloc_repeats)
    campaign = load_scenario("reloc_campaign")
    return [
        run.capture(
            campaign.for_session(i).with_overrides(reloc_over),
            f"reloc#{i}", ["pods"], ("mocap", "pose_sensor"),
        ).path
        for i in plan.reloc_sessions
    ]  # fmt: skip


def _fit_models(run: _Run, reloc: list[Path]) -> None:
    """Fit the pod geometry and the filter noise on the drives, the pose-error model on
    the campaign ``reloc``."""
    res, speed, model_dir = run.res, run.plan.speed, run.res.out_dir / "models"
    drives = [res.sessions[n].path for n in DRIVES]
    run.say(f"fitting pod geometry ({', '.join(DRIVES)})")
    pods = res.models["pods"] = run.timed(
        "fit pods", lambda: fit_pods_model(drives, model_dir / "pods.toml", speed))
    run.say(f"fitting filter noise ({', '.join(DRIVES)})")
    res.models["noise"] = run.timed(
        "fit noise", lambda: fit_noise_model(drives, pods, model_dir / "noise.toml", speed))
    run.say(f"fitting the pose-error model ({len(reloc)} campaign sessions)")
    res.models["pose_error"] = run.timed(
        "fit pose-error", lambda: fit_pose_model(reloc, model_dir / "pose_error.toml"))


def _merge_and_report(run: _Run) -> None:
    """Merge the static session's scans and write the report; a lidar of the static
    session that could not be characterized fails the demo."""
    from sensorbench.fusion.scan_merge_session import merge_session
    from sensorbench.report.build import ReportOptions, build_report

    res, plan, out = run.res, run.plan, run.res.out_dir
    run.say("merging the static session's front and rear scans")
    merged = res.merged = out / "sessions" / "lidar_static_merged.h5"
    static = res.sessions["lidar_static"].path
    run.timed(
        "merge", lambda: merge_session(static, "lidar_front", "lidar_rear", merged, overwrite=True))
    run.say(f"writing the report (replay, validation with {plan.draws} draws, lidar datasheets)")
    opts = ReportOptions(draws=plan.draws, seed=plan.seed)
    sessions = [*(c.path for c in res.sessions.values()), merged]
    report = run.timed("report", lambda: build_report(
        sessions, out / "report", models_dir=out / "models", options=opts, progress=run.say))
    res.report, res.report_data = report.path, report.data
    static_lidars = report.data.get("lidar", {}).get("lidar_static", {})
    for name in LIDARS:
        why = static_lidars.get(name, {}).get("timing_only_because", "no lidar stream")
        if why:
            raise FitError(f"lidar characterization of {name} in the static session failed: {why}")


def fit_pods_model(sessions: list[Path], output: Path, speed: float = 1.0) -> Path:
    """Fit the pod geometry on ``sessions`` (``fit pods``, its interval and slip window
    divided by the emulation ``speed``) and write the model file; FitError when the fit
    failed or could not identify every parameter."""
    from sensorbench.characterize.pods.geometry_fit import fit_pods
    from sensorbench.characterize.pods.slip_fit import WINDOW_S
    from sensorbench.fusion.pod_drive import load_drive
    from sensorbench.logs.model_file import provenance

    drives = [load_drive(p) for p in sessions]
    fit = fit_pods(drives, interval_s=POD_INTERVAL_SIM_S / speed, slip_window_s=WINDOW_S / speed)
    if not fit.complete:
        raise FitError("pod fit incomplete: " + "; ".join(fit.refusals()))
    with atomic_output(output, force=True) as tmp:  # never through a link, FIFO or device
        fit.save(tmp, provenance(sessions, {**fit.options, "emulation_speed": speed}))
    return output


def fit_noise_model(sessions: list[Path], pods_model: Path, output: Path, speed: float) -> Path:
    """Fit the split filters' noise and slip model (``fit noise``, its intervals divided by
    ``speed``) and write the model file."""
    from sensorbench.characterize.pods.drift_fit import INTERVAL_S
    from sensorbench.characterize.pods.noise_fit import fit_noise
    from sensorbench.fusion.filter_noise import save_noise_model
    from sensorbench.fusion.pod_kinematics import load_pod_model
    from sensorbench.logs.model_file import provenance

    geometry = load_pod_model(pods_model)
    fit = fit_noise(list(sessions), geometry, align_interval_s=0.5 / speed,
        drift_interval_s=INTERVAL_S / speed)
    prov = provenance([*sessions, pods_model], {"pods_model": str(pods_model)})
    with atomic_output(output, force=True) as tmp:
        save_noise_model(tmp, fit.noise, prov, fit.model_report())
    return output


def fit_pose_model(sessions: list[Path], output: Path) -> Path:
    """Fit the pose-error model of ``pose_sensor`` against ``mocap`` and write it."""
    from sensorbench.characterize.pose.sessions import fit_prepared, prepare_sessions

    c = prepare_sessions(list(sessions), "pose_sensor", "mocap")
    model = fit_prepared(c.prepared, "pose_sensor", "mocap", time_offset=c.time_offset)
    with atomic_output(output, force=True) as tmp:
        model.save(tmp)
    if not np.all(np.isfinite(model.params_array())):
        raise FitError(f"pose-error fit gave non-finite parameters; see {output}")
    return output
