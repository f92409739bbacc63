"""``sensorbench fit pods``, ``sensorbench fit noise`` and ``sensorbench replay``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from sensorbench.characterize.pods.display import noise_table, pod_table, replay_text
from sensorbench.cli import cli, subgroup
from sensorbench.commands import options as opt
from sensorbench.json_doc import to_json
from sensorbench.logs.atomic_output import atomic_figures, atomic_output, check_output

# options shared by ``fit pods``, ``fit noise`` and ``replay``
_JSON_OPT = opt.json_option("Print one JSON document (SI units).")
_PODS_MODEL_OPT = opt.file_option(
    "--pods", "pods_path", "Pod-geometry model (from 'sensorbench fit pods').", required=True
)
_ALIGN_OPT = opt.number_option(
    "--align-interval", "align_interval_s", opt.FiniteFloat(min=0.01, max=3600.0), None,
    "Interval (s) of the encoder/mocap time alignment [default: 0.5 s times the encoder "
    "stream's recorded clock_nominal_slope, so 0.5/N for a session recorded at N× real time].",
)  # fmt: skip
_GATE_OPT = opt.number_option(
    "--gate", None, opt.FiniteFloat(min=0.5, max=1e6), 6.63,
    "NIS gate of the filters (6.63 = 99 %, 8.81 = 99.7 % for one dof).",
)  # fmt: skip


@subgroup("fit").command("pods")
@opt.session_argument("sessions", many=True)
@opt.output_option("Write the pod-geometry model (TOML, with provenance) here.", force="OUTPUT")
@_JSON_OPT
@opt.number_option(
    "--counts-per-rev", None, opt.FiniteFloat(min=1.0, max=1e8), None,
    "Encoder ticks per wheel revolution (default: the session's robot config).",
)  # fmt: skip
@opt.number_option(
    "--interval", "interval_s", opt.FiniteFloat(min=0.02, max=3600.0), 0.5, "Fitting interval (s)."
)
@click.option("--heading", type=click.Choice(["auto", "mocap", "imu"]), default="auto",
    show_default=True,
    help="Reference for the rotational part (Δθ): mocap, or the IMU's yaw (bias removed "
    "against mocap); auto = imu when every session has IMU yaw.")
@opt.number_option(
    "--min-excitation", None, opt.FiniteFloat(min=1.0), 100.0,
    "Signal-to-reference-noise energy a motion direction needs to count as excited.",
)  # fmt: skip
def fit_pods_cmd(sessions: tuple[Path, ...], output: Path | None, force: bool, as_json: bool,
        counts_per_rev: float | None, interval_s: float, heading: str, min_excitation: float
) -> None:
    """Fit each pod's distance per tick (so wheel radius), rolling angle and lever arm.

    SESSIONS are fixed drives with the pods' encoder stream and a mocap pose stream.
    Parameters the drives do not excite are refused. Units: m, rad (degrees in the table);
    uncertainties 1σ. Exit 1 when any parameter was refused (the model file is still
    written, marked incomplete). See docs/PODS.md, "Geometry fit".
    """
    from sensorbench.characterize.pods.geometry_fit import fit_pods
    from sensorbench.fusion.pod_drive import load_drive
    from sensorbench.fusion.pod_kinematics import condition_number
    from sensorbench.logs.check import refuse_unusable
    from sensorbench.logs.model_file import provenance

    if output is not None:
        check_output(output, force=force, inputs=sessions)
    refuse_unusable(sessions, "fit pods")
    drives = [load_drive(p) for p in sessions]
    fit = fit_pods(drives, interval_s=interval_s, heading=heading, min_excitation=min_excitation,
        counts_per_rev=counts_per_rev)
    doc = fit.as_dict()
    if fit.complete:
        doc["condition_number"] = condition_number(fit.geometry().W)
    if output is not None:
        with atomic_output(output, force=force, inputs=sessions) as tmp:
            fit.save(tmp, provenance(sessions, fit.options))
        doc["model_file"] = str(output)
    if as_json:
        click.echo(to_json(doc))
    else:
        click.echo(pod_table(fit))
        if output is not None:
            click.echo(f"model written to {output}")
    if not fit.complete:
        for msg in fit.refusals():
            click.echo(f"refused: {msg}", err=True)
        click.get_current_context().exit(1)


@subgroup("fit").command("noise")
@opt.session_argument("sessions", many=True)
@_PODS_MODEL_OPT
@opt.output_option("Write the filter-noise model (TOML, with provenance) here.", force="OUTPUT")
@_JSON_OPT
@_GATE_OPT
@opt.number_option(
    "--drift-interval", "drift_interval_s", opt.FiniteFloat(min=0.05, max=3600.0), 2.0,
    "Interval (s) of the odometry slip fit against mocap (sessions emulated at N× real "
    "time: divide by N).",
)  # fmt: skip
@_ALIGN_OPT
@click.option("--leave-one-out", "holdout", is_flag=True,
    help="Also fit without each session in turn and replay it against its mocap: the "
    "coverage each drive gets from a model that did not see it (one fit per session).")
def fit_noise_cmd(sessions: tuple[Path, ...], pods_path: Path, output: Path | None, force: bool,
        as_json: bool, gate: float, drift_interval_s: float, align_interval_s: float | None,
        holdout: bool) -> None:
    """Fit the split filters' noise per axis from replayed sessions.

    Per axis (x, y in m; heading in rad) the noise densities, and with mocap the
    odometry's slip model, with the filters' consistency on the fitted sessions. Exit 1
    when the filters are not consistent on some axis (the model is still written). See
    docs/PODS.md, "Noise fit".
    """
    from sensorbench.characterize.pods.noise_fit import fit_noise, leave_one_out
    from sensorbench.fusion.filter_noise import save_noise_model
    from sensorbench.fusion.pod_kinematics import load_pod_model
    from sensorbench.logs.check import refuse_unusable
    from sensorbench.logs.model_file import provenance

    inputs = [*sessions, pods_path]
    if output is not None:
        check_output(output, force=force, inputs=inputs)
    refuse_unusable(sessions, "fit noise")
    geometry = load_pod_model(pods_path)
    fit = fit_noise(list(sessions), geometry, gate=gate, align_interval_s=align_interval_s,
        drift_interval_s=drift_interval_s)
    doc = fit.as_dict()
    if holdout:
        doc["leave_one_out"] = leave_one_out(list(sessions), geometry, gate, align_interval_s)
    if output is not None:
        prov = provenance([*sessions, pods_path], {"gate": gate, "pods_model": str(pods_path)})
        with atomic_output(output, force=force, inputs=inputs) as tmp:
            save_noise_model(tmp, fit.noise, prov, fit.model_report())
        doc["model_file"] = str(output)
    if as_json:
        click.echo(to_json(doc))
    else:
        click.echo(noise_table(fit, doc))
        if output is not None:
            click.echo(f"model written to {output}")
    if not all(f.nis.consistent for f in fit.axes.values()):
        click.get_current_context().exit(1)


@dataclass(frozen=True)
class _ReplayModels:
    """The model files ``replay`` runs with: pod geometry, filter noise (None: the
    untuned defaults), pose-error model (None: no aiding)."""

    pods_path: Path
    noise_path: Path | None
    pose_model_path: Path | None

    @property
    def noise_name(self) -> str:
        """The noise model as the summary and the estimate name it."""
        return str(self.noise_path) if self.noise_path else "untuned defaults"

    def load(self) -> tuple[Any, Any, Any]:
        """The geometry, the noise and the aid model (None without a pose-error model),
        loaded as ``live`` loads them."""
        from sensorbench.live.odometry import OdometryModels

        m = OdometryModels.from_files(self.pods_path, self.noise_path, self.pose_model_path)
        return m.geometry, m.noise, m.aid_model


@cli.command("replay")
@opt.session_argument()
@opt.grouped(
    "models", _ReplayModels,
    _PODS_MODEL_OPT,
    opt.file_option(
        "--noise", "noise_path",
        "Filter-noise model (from 'sensorbench fit noise'); default: untuned.",
    ),
    opt.file_option(
        "--pose-model", "pose_model_path",
        "Pose-error model (from 'sensorbench fit pose-error'): aid with pose_sensor.",
    ),
)  # fmt: skip
@opt.output_option("Write the estimate as a pose stream (kind 'estimate') to this session file.",
    force="OUTPUT and figures")
@opt.plots_option("Write PNG figures (path, error over time) here.")
@click.option("--reference", type=click.Choice(["mocap", "truth"]), default="mocap",
    show_default=True, help="Score against mocap or a simulated session's truth.")
@_GATE_OPT
@_ALIGN_OPT
@opt.grouped(
    "monitor", lambda monitor_window, monitor_level: (monitor_window, monitor_level),
    opt.number_option(
        "--monitor-window", None, click.IntRange(2, 1_000_000), 50,
        "Consistency monitor: updates per sliding NIS window.",
    ),
    opt.number_option(
        "--monitor-level", None, opt.FiniteFloat(min=0.5, max=1.0, max_open=True), 0.999,
        "Consistency monitor: one-sided level of the degraded flag for a consistent "
        "filter (any of x, y, heading and the pods-against-IMU check; each channel takes "
        "level^(1/channels)).",
    ),
)
@opt.grouped(
    "window", lambda t_start, t_end: (t_start, t_end),
    opt.window_options(
        "Replay from this time on (s from the session start).", "Replay up to this time (s)."
    ),
)
@click.option("--repair/--no-repair", default=True, show_default=True,
    help="Rebuild frames where a parallel pod bounced from the other pods and the IMU yaw "
    "(judged against the whole session: `live` runs without it, so `--no-repair` "
    "reproduces a live estimate).")
@_JSON_OPT
def replay_cmd(session: Path, models: _ReplayModels, output: Path | None, force: bool,
        plots_dir: Path | None, reference: str, gate: float, align_interval_s: float | None,
        monitor: tuple[int, float], window: tuple[float | None, float | None], repair: bool,
        as_json: bool) -> None:
    """Replay a session's pods through the split x/y/heading filters.

    Prints the error against the reference (m, rad; degrees in the table), the time
    offset, the gate's rejections and per axis the filters' consistency; degraded spans
    are flagged in the estimate and written as events. See docs/PODS.md.
    """
    from sensorbench.fusion.odometry_replay import replay_session
    from sensorbench.fusion.replay_plots import replay_plots
    from sensorbench.logs.check import refuse_unusable
    from sensorbench.logs.time_window import window_ns

    if output is not None:
        check_output(output, force=force, inputs=[session, models.pods_path, models.noise_path,
            models.pose_model_path])  # fmt: skip
    refuse_unusable(session, "replay")
    geometry, noise, aid = models.load()
    rp = replay_session(session, geometry, noise, aid_model=aid, gate=gate, reference=reference,
        window_ns=window_ns(session, *window), repair=repair, align_interval_s=align_interval_s,
        monitor_window=monitor[0], monitor_level=monitor[1])  # fmt: skip
    doc = rp.summary()
    doc["noise"] = "fitted" if models.noise_path else "untuned defaults"
    if plots_dir is not None:
        with atomic_figures(plots_dir, force=force, inputs=[session]) as tmp_dir:
            made = replay_plots(tmp_dir, rp)
        doc["plots"] = [str(plots_dir / Path(p).name) for p in made]
    if output is not None:
        names = {"pods_model": str(models.pods_path), "noise_model": models.noise_name}
        rp.write_estimate(output, session, names, overwrite=force)
        doc["estimate_file"] = str(output)
    click.echo(to_json(doc) if as_json else replay_text(doc, str(session), rp.reference))


